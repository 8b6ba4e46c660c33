//! [`Table`]: one embedding table's rows, optimizer, admission and eviction, with no IO — the
//! server's [`TableHandler`](super::TableHandler) drives it, and a single process can train on
//! it directly (the reference a distributed run is compared with).
//!
//! **Determinism.** Everything a push changes follows from the table's spec, its state and the
//! push itself: initial rows come from (seed, key), probability admission from (seed, key, push
//! number), recency stamps from the push number, eviction from the stamps. Pulls change nothing
//! but counters. So a snapshot plus the replay of the pushes logged after it gives back the
//! same rows, slots, recency, sketch and free list, bit for bit (the count of rows
//! initialized on pull, and an unbounded index's size, may differ).
//!
//! **Memory.** With a budget, the most rows that fit are computed up front: records (key,
//! stamp, row, slots), the index at 80 % load and the admission sketch, all counted at their
//! allocated size ([`Table::bytes`]), and nothing grows past them. When a new
//! row finds the table full, the least recently pushed `1/64` of the rows go at once (found by a
//! threshold on their stamps, from a sample of 1024 stamps; every row at or below it is
//! evicted, so the evicted rows are exactly the oldest ones). Freed records are chained
//! through their key words (a free list that takes no memory of its own) and reused
//! last-freed first.
//!
//! Beside this file: `table/parts.rs`, a request's lookups in parts (from several threads for a
//! large request); `table/snapshot.rs`, save and restore.

use super::admit::Admit;
use super::index::{self, Index};
use super::init::initial_row;
use super::optim::init_slots;
use super::rows::{Rows, FREE};
use super::spec::{bytes_text, Eviction, TableSpec};
use parts::{step_row, PullRows, StepHeld};

mod parts;
mod snapshot;

/// A stamp is `push << POS_BITS | position of the key in the push` (clamped), so stamps are
/// ordered by push, then by key order within a push.
const POS_BITS: u32 = 24;

/// The stamp of the key at position `i` of push number `push`.
#[inline]
fn stamp_of(push: u64, i: usize) -> u64 {
    push << POS_BITS | (i as u64).min((1 << POS_BITS) - 1)
}

/// An eviction pass frees about `1 / EVICT_SHARE` of the rows.
const EVICT_SHARE: usize = 64;

/// Stamps sampled to find an eviction pass's threshold.
const SAMPLE: usize = 1024;

/// A key with no slot (the free list's end).
const NONE: u32 = u32::MAX;

/// Bytes counted for the table's own fields.
const FIXED_BYTES: usize = 4096;

/// What a table has done, since it started (restored with it from a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Pushes (requests) applied.
    pub pushes: u64,
    /// Rows created (keys admitted).
    pub admitted: u64,
    /// Pushed rows dropped because their key was not admitted yet.
    pub not_admitted: u64,
    /// Rows evicted (budget or TTL).
    pub evicted: u64,
    /// Pulled rows the table did not hold, answered with their initial row.
    pub initialized_on_pull: u64,
}

/// One embedding table (see the module docs).
pub struct Table {
    spec: TableSpec,
    dim: usize,
    rows: Rows,
    index: Index,
    /// The last slot freed by eviction ([`NONE`]: none); each free record's key word holds the
    /// slot freed before it.
    free: u32,
    /// Free slots.
    free_len: usize,
    admit: Admit,
    /// The most rows the budget holds (`usize::MAX` without one).
    max_rows: usize,
    /// The push count at which the next TTL sweep runs.
    next_sweep: u64,
    counts: TableCounts,
    /// Threads a large request is split among ([`Table::set_threads`]).
    threads: usize,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("spec", &self.spec.to_string())
            .field("rows", &self.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// The most rows a budget of `budget` bytes holds for `spec`, with the bytes they take.
fn rows_in_budget(spec: &TableSpec, budget: u64) -> Result<usize, String> {
    let floats = spec.dim + spec.optimizer.slot_values(spec.dim);
    let fixed = FIXED_BYTES + Admit::bytes_for(&spec.admit);
    let bytes_for =
        |n: usize| Rows::bytes_for(floats, n) + index::bytes_for(index::buckets_for(n)) + fixed;
    let per_row = (Rows::stride_for(floats) * 8) as f64 + 6.25;
    let budget = usize::try_from(budget).unwrap_or(usize::MAX);
    let mut n = (budget.saturating_sub(fixed) as f64 / per_row) as usize;
    n = n.min(u32::MAX as usize - 1);
    while n > 0 && bytes_for(n) > budget {
        n -= n.div_ceil(1000).max(1).min(n);
    }
    if n == 0 {
        return Err(format!(
            "bad table spec '{spec}': budget: {} holds no row: a row takes {} bytes with its index, and the table {} more{}",
            bytes_text(budget as u64),
            per_row.ceil(),
            fixed,
            if Admit::bytes_for(&spec.admit) > 0 { " (the admission sketch among them)" } else { "" }
        ));
    }
    Ok(n)
}

impl Table {
    /// An empty table for `spec` (checked first). With a budget, the index is allocated for the
    /// most rows at once (zeroed pages, resident as they fill) and rows in chunks as they come.
    ///
    /// # Errors
    /// The spec's error ([`TableSpec::validate`]), or a budget too small for one row.
    pub fn new(spec: &TableSpec) -> Result<Table, String> {
        spec.validate()?;
        let floats = spec.dim + spec.optimizer.slot_values(spec.dim);
        let (max_rows, index) = match spec.budget {
            Some(b) => {
                let n = rows_in_budget(spec, b)?;
                (n, Index::with_buckets(index::buckets_for(n)))
            }
            None => (usize::MAX, Index::with_buckets(0)),
        };
        let next_sweep = match spec.evict {
            Eviction::Ttl { pushes } => (pushes / 8).max(1),
            Eviction::Lru => u64::MAX,
        };
        Ok(Table {
            rows: Rows::new(floats, max_rows),
            index,
            free: NONE,
            free_len: 0,
            admit: Admit::new(&spec.admit, spec.seed),
            max_rows,
            next_sweep,
            counts: TableCounts::default(),
            threads: 1,
            dim: spec.dim,
            spec: spec.clone(),
        })
    }

    /// The spec.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether it holds no row.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The most rows its budget holds, `None` without a budget.
    pub fn max_rows(&self) -> Option<usize> {
        (self.max_rows != usize::MAX).then_some(self.max_rows)
    }

    /// Bytes it holds: records, index, sketch and its own fields, at their allocated
    /// sizes (never above the budget).
    pub fn bytes(&self) -> usize {
        self.rows.bytes() + self.index.bytes() + self.admit.bytes() + FIXED_BYTES
    }

    /// Bytes per row beyond its values and slots (`dim · 4` + slots): the record's key, stamp
    /// and padding, and the index, at the current fill; `None` when empty.
    pub fn overhead_per_row(&self) -> Option<f64> {
        let n = self.len();
        (n > 0).then(|| {
            let floats = self.dim + self.spec.optimizer.slot_values(self.dim);
            (self.rows.bytes() + self.index.bytes()) as f64 / n as f64 - (floats * 4) as f64
        })
    }

    /// What it has done so far.
    pub fn counts(&self) -> TableCounts {
        self.counts
    }

    /// The row of `key` if the table holds one (its `dim` values).
    pub fn get(&self, key: u64) -> Option<&[f32]> {
        let slot = self.find(key)?;
        Some(&self.rows.values(slot)[..self.dim])
    }

    /// The row, then the optimizer slots, of `key` if held.
    pub fn get_with_slots(&self, key: u64) -> Option<&[f32]> {
        let slot = self.find(key)?;
        Some(self.rows.values(slot))
    }

    /// The recency stamp of `key` if held (push number << 24 | position in the push).
    pub fn stamp(&self, key: u64) -> Option<u64> {
        self.find(key).map(|s| self.rows.stamp(s))
    }

    /// The keys held, in slot order.
    pub fn keys(&self) -> Vec<u64> {
        (0..self.rows.used() as u32)
            .filter(|&s| self.rows.stamp(s) != FREE)
            .map(|s| self.rows.key(s))
            .collect()
    }

    #[inline]
    fn find(&self, key: u64) -> Option<u32> {
        let rows = &self.rows;
        self.index.find(key, |s| rows.key(s))
    }

    /// The initial row of `key` into `out` (`dim` values).
    pub fn initial_row(&self, key: u64, out: &mut [f32]) {
        initial_row(&self.spec.init, self.spec.seed, key, out);
    }

    /// The rows of `keys` into `out` (`keys.len() · dim` values, key after key): held rows, and
    /// the initial row of a key not held (not admitted yet, evicted, or never pushed), which
    /// the table does not keep. Keys need not be sorted.
    ///
    /// # Errors
    /// When `out` has another length.
    pub fn pull(&mut self, keys: &[u64], out: &mut [f32]) -> Result<(), String> {
        let dim = self.dim;
        if out.len() != keys.len() * dim {
            return Err(format!(
                "table app {}: {} values for the rows of {} keys of dim {dim}",
                self.spec.app,
                out.len(),
                keys.len()
            ));
        }
        let threads = parts::threads_for(self.threads, keys);
        let pull = PullRows {
            index: &self.index,
            rows: &self.rows,
            spec: &self.spec,
            dim,
        };
        let initialized = pull.run(keys, out, threads);
        self.counts.initialized_on_pull += initialized;
        Ok(())
    }

    /// Sets how many threads (at least one) a request of at least 16384 keys in increasing
    /// order is split among, the calling thread one of them. The rows, slots and counts a
    /// request leaves do not depend on it. One by default.
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// One push: one optimizer step per key with its gradient (`grads`: `keys.len() · dim`
    /// values, key after key). A key not held gets its row when admission admits it (its
    /// initial row and slots, then the step); until then the push of its row is counted and
    /// dropped. With `out`, the rows after the step go there (`keys.len() · dim`; a key not
    /// admitted gets its initial row). Keys need not be sorted; a key given twice takes two
    /// steps. A full table evicts its least recently pushed rows first.
    ///
    /// The rows the table holds are stepped first, then the keys it does not hold are
    /// admitted (or not) and created in their order in `keys`, so no row this push holds is
    /// evicted before its step (a push that creates rows in a table nearly all stamped by it
    /// may still evict rows it stepped). A large request in increasing key order is stepped by
    /// [`set_threads`](Self::set_threads) threads, with the same outcome.
    ///
    /// # Errors
    /// When `grads` or `out` has another length; nothing is applied then.
    pub fn push(
        &mut self,
        keys: &[u64],
        grads: &[f32],
        mut out: Option<&mut [f32]>,
    ) -> Result<(), String> {
        self.check_push(keys, grads, out.as_deref())?;
        self.counts.pushes += 1;
        let push = self.counts.pushes;
        if push >= self.next_sweep {
            self.sweep(push);
        }
        // First the rows held, each stepped where it is (from several threads for a large
        // request); then, in order, the keys not held: admitted and created, or dropped.
        let threads = parts::threads_for(self.threads, keys);
        let missing = {
            let raw = self.rows.raw();
            let held = StepHeld {
                index: &self.index,
                raw: &raw,
                opt: (self.spec.optimizer, self.spec.weight_decay),
                grads,
                dim: self.dim,
                push,
            };
            held.run(keys, out.as_deref_mut(), threads)
        };
        self.step_not_held(push, &missing, keys, grads, out);
        Ok(())
    }

    /// Checks a push's lengths: `grads` and `out` (when given) `keys.len() · dim` values.
    fn check_push(&self, keys: &[u64], grads: &[f32], out: Option<&[f32]>) -> Result<(), String> {
        let dim = self.dim;
        if grads.len() != keys.len() * dim {
            return Err(format!(
                "table app {}: {} gradient values for {} keys of dim {dim} (want {})",
                self.spec.app,
                grads.len(),
                keys.len(),
                keys.len() * dim
            ));
        }
        if let Some(o) = out {
            if o.len() != grads.len() {
                return Err(format!(
                    "table app {}: {} values for the rows of {} keys of dim {dim}",
                    self.spec.app,
                    o.len(),
                    keys.len()
                ));
            }
        }
        Ok(())
    }

    /// The second half of push number `push`: the keys at positions `missing` of `keys`, which
    /// the table did not hold, in order: each created and stepped when admission admits it
    /// (or when an earlier one of them created it), else counted as not admitted (its initial
    /// row to `out`).
    fn step_not_held(
        &mut self,
        push: u64,
        missing: &[usize],
        keys: &[u64],
        grads: &[f32],
        mut out: Option<&mut [f32]>,
    ) {
        let dim = self.dim;
        let (opt, wd) = (self.spec.optimizer, self.spec.weight_decay);
        for &i in missing {
            let key = keys[i];
            let slot = match self.find(key) {
                // Created earlier in this push (the key is given twice).
                Some(slot) => slot,
                None if self.admit.admits(key, push) => self.create(key),
                None => {
                    self.counts.not_admitted += 1;
                    if let Some(o) = out.as_deref_mut() {
                        initial_row(
                            &self.spec.init,
                            self.spec.seed,
                            key,
                            &mut o[i * dim..(i + 1) * dim],
                        );
                    }
                    continue;
                }
            };
            let (stamp, values) = self.rows.stamp_and_values_mut(slot);
            *stamp = stamp_of(push, i);
            step_row(
                (&opt, wd),
                values,
                &grads[i * dim..(i + 1) * dim],
                out.as_deref_mut().map(|o| &mut o[i * dim..(i + 1) * dim]),
            );
        }
    }

    /// A row for `key` (not held): a free slot, a new one, or one freed by evicting the least
    /// recently pushed rows; set to the key's initial row and fresh slots.
    fn create(&mut self, key: u64) -> u32 {
        self.counts.admitted += 1;
        let slot = match self.pop_free().or_else(|| self.rows.take()) {
            Some(s) => s,
            None => {
                self.evict_oldest();
                // An eviction pass frees at least the oldest row.
                self.pop_free().unwrap_or(0)
            }
        };
        if !self.index.has_room() {
            let rows = &self.rows;
            self.index.grow(|s| rows.key(s));
        }
        self.rows.set_head(slot, key, 0);
        self.index.insert(key, slot);
        let dim = self.dim;
        let (init, seed, opt) = (self.spec.init, self.spec.seed, self.spec.optimizer);
        let values = self.rows.values_mut(slot);
        let (w, slots) = values.split_at_mut(dim);
        initial_row(&init, seed, key, w);
        init_slots(&opt, slots);
        slot
    }

    /// Evicts the row in `slot`.
    fn evict(&mut self, slot: u32) {
        self.release(slot);
        self.counts.evicted += 1;
    }

    /// Frees the row in `slot` (evicted, or moved to another server).
    fn release(&mut self, slot: u32) {
        let key = self.rows.key(slot);
        let rows = &self.rows;
        self.index.remove(key, |s| rows.key(s));
        self.rows.set_head(slot, u64::from(self.free), FREE);
        self.free = slot;
        self.free_len += 1;
    }

    /// The last slot freed, taken off the free list.
    fn pop_free(&mut self) -> Option<u32> {
        if self.free == NONE {
            return None;
        }
        let slot = self.free;
        self.free = self.rows.key(slot) as u32;
        self.free_len -= 1;
        Some(slot)
    }

    /// Evicts every row stamped at or below `threshold`.
    fn evict_through(&mut self, threshold: u64) {
        for slot in 0..self.rows.used() as u32 {
            let st = self.rows.stamp(slot);
            if st != FREE && st <= threshold {
                self.evict(slot);
            }
        }
    }

    /// Frees about `1 / EVICT_SHARE` of the rows, the least recently pushed: the threshold is
    /// the matching quantile of a sample of stamps (evenly spaced slots), and at least the
    /// oldest row goes.
    fn evict_oldest(&mut self) {
        let used = self.rows.used();
        let step = (used / SAMPLE).max(1);
        let mut sample: Vec<u64> = (0..used)
            .step_by(step)
            .map(|s| self.rows.stamp(s as u32))
            .filter(|&st| st != FREE)
            .collect();
        if sample.is_empty() {
            return;
        }
        sample.sort_unstable();
        let want = (used / EVICT_SHARE).max(1);
        let q = (want * sample.len())
            .div_ceil(used.max(1))
            .saturating_sub(1)
            .min(sample.len() - 1);
        self.evict_through(sample[q]);
    }

    /// Evicts the rows not pushed in the last TTL pushes, and schedules the next sweep.
    fn sweep(&mut self, push: u64) {
        let Eviction::Ttl { pushes: ttl } = self.spec.evict else {
            self.next_sweep = u64::MAX;
            return;
        };
        self.next_sweep = push + (ttl / 8).max(1);
        if push > ttl {
            // Last pushed at push p: expired when p + ttl < push.
            let threshold = ((push - ttl) << POS_BITS).saturating_sub(1);
            self.evict_through(threshold);
        }
    }
}
