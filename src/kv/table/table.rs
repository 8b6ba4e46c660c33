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

use super::admit::Admit;
use super::index::{self, Index};
use super::init::initial_row;
use super::lookup;
use super::optim::{init_slots, step};
use super::rows::{Rows, FREE};
use super::spec::{bytes_text, Eviction, Optimizer, TableSpec};
use crate::kv::durable::bytes::Reader;

/// A stamp is `push << POS_BITS | position of the key in the push` (clamped), so stamps are
/// ordered by push, then by key order within a push.
const POS_BITS: u32 = 24;

/// An eviction pass frees about `1 / EVICT_SHARE` of the rows.
const EVICT_SHARE: usize = 64;

/// Stamps sampled to find an eviction pass's threshold.
const SAMPLE: usize = 1024;

/// A key with no slot (the free list's end).
const NONE: u32 = u32::MAX;

/// Fewest keys a request has for a table to split it among threads.
const SPLIT_MIN: usize = 16384;

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

/// Runs `jobs` at once, the first on the calling thread and each other on a thread of its own,
/// and gives their results in order. A job's panic is raised again here.
fn run_all<T: Send, F: FnOnce() -> T + Send>(jobs: Vec<F>) -> Vec<T> {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Vec::new();
    };
    std::thread::scope(|s| {
        let others: Vec<_> = jobs.map(|j| s.spawn(j)).collect();
        let mut results = vec![first()];
        results.extend(
            others
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
        );
        results
    })
}

/// One optimizer step (`opt` with weight decay) on a held record's `values` (its row, then its
/// slots) with `grad` (`dim` values); the row after the step goes to `out` when given.
#[inline]
fn step_row(
    (opt, wd): (&Optimizer, f32),
    values: &mut [f32],
    grad: &[f32],
    out: Option<&mut [f32]>,
) {
    let (w, slots) = values.split_at_mut(grad.len());
    step(opt, wd, w, slots, grad);
    if let Some(o) = out {
        o.copy_from_slice(w);
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
        let threads = self.threads_for(keys);
        let (index, rows, spec) = (&self.index, &self.rows, &self.spec);
        let part = |keys: &[u64], out: &mut [f32]| {
            let mut initialized = 0;
            lookup::each(index, rows, keys, 16 + dim * 4, |i, slot| {
                let row = &mut out[i * dim..(i + 1) * dim];
                match slot {
                    Some(slot) => row.copy_from_slice(&rows.values(slot)[..dim]),
                    None => {
                        initialized += 1;
                        initial_row(&spec.init, spec.seed, keys[i], row);
                    }
                }
            });
            initialized
        };
        let initialized: u64 = if threads > 1 {
            let per = keys.len().div_ceil(threads);
            let part = &part;
            run_all(
                keys.chunks(per)
                    .zip(out.chunks_mut(per * dim))
                    .map(|(k, o)| move || part(k, o))
                    .collect(),
            )
            .into_iter()
            .sum()
        } else {
            part(keys, out)
        };
        self.counts.initialized_on_pull += initialized;
        Ok(())
    }

    /// Threads to split the request of `keys` among: [`set_threads`](Self::set_threads)'s,
    /// for a request of at least [`SPLIT_MIN`] keys in strictly increasing order (so no two
    /// threads step one row), else one.
    fn threads_for(&self, keys: &[u64]) -> usize {
        if self.threads > 1 && keys.len() >= SPLIT_MIN && keys.windows(2).all(|w| w[0] < w[1]) {
            self.threads
        } else {
            1
        }
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
        if let Some(o) = out.as_deref() {
            if o.len() != grads.len() {
                return Err(format!(
                    "table app {}: {} values for the rows of {} keys of dim {dim}",
                    self.spec.app,
                    o.len(),
                    keys.len()
                ));
            }
        }
        self.counts.pushes += 1;
        let push = self.counts.pushes;
        if push >= self.next_sweep {
            self.sweep(push);
        }
        let stamp_of = |i: usize| push << POS_BITS | (i as u64).min((1 << POS_BITS) - 1);
        // First the rows held, each stepped where it is (from several threads for a large
        // request); then, in order, the keys not held: admitted and created, or dropped.
        let threads = self.threads_for(keys);
        let (opt, wd) = (self.spec.optimizer, self.spec.weight_decay);
        let missing: Vec<usize> = {
            let index = &self.index;
            let raw = self.rows.raw();
            let raw = &raw;
            let part = |first: usize, keys: &[u64], mut out: Option<&mut [f32]>| {
                let mut missing = Vec::new();
                lookup::each(index, raw, keys, usize::MAX, |j, slot| {
                    let Some(slot) = slot else {
                        missing.push(first + j);
                        return;
                    };
                    // SAFETY: within a part, each key once per step at a time; between parts,
                    // keys strictly increase (`threads_for`), so no two threads hold a slot.
                    let (stamp, values) = unsafe { raw.stamp_and_values(slot) };
                    let i = first + j;
                    *stamp = stamp_of(i);
                    step_row(
                        (&opt, wd),
                        values,
                        &grads[i * dim..(i + 1) * dim],
                        out.as_deref_mut().map(|o| &mut o[j * dim..(j + 1) * dim]),
                    );
                });
                missing
            };
            if threads > 1 {
                let per = keys.len().div_ceil(threads);
                let mut outs: Vec<Option<&mut [f32]>> = match out.as_deref_mut() {
                    Some(o) => o.chunks_mut(per * dim).map(Some).collect(),
                    None => keys.chunks(per).map(|_| None).collect(),
                };
                let part = &part;
                run_all(
                    keys.chunks(per)
                        .zip(outs.iter_mut())
                        .enumerate()
                        .map(|(t, (k, o))| {
                            let o = o.take();
                            move || part(t * per, k, o)
                        })
                        .collect(),
                )
                .into_iter()
                .flatten()
                .collect()
            } else {
                part(0, keys, out.as_deref_mut())
            }
        };
        for i in missing {
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
            *stamp = stamp_of(i);
            step_row(
                (&opt, wd),
                values,
                &grads[i * dim..(i + 1) * dim],
                out.as_deref_mut().map(|o| &mut o[i * dim..(i + 1) * dim]),
            );
        }
        Ok(())
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
        let key = self.rows.key(slot);
        let rows = &self.rows;
        self.index.remove(key, |s| rows.key(s));
        self.rows.set_head(slot, u64::from(self.free), FREE);
        self.free = slot;
        self.free_len += 1;
        self.counts.evicted += 1;
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

    /// The table's state as bytes: a header, the spec line, counts, the records of every slot
    /// handed out (free ones too, with their links: a restored table reuses the same slots in
    /// the same order), the free list's head and the admission sketch (its counters and the
    /// pushes counted since they last halved). Little-endian.
    pub fn save_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(MAGIC);
        let spec = self.spec.to_string();
        out.extend_from_slice(&(spec.len() as u64).to_le_bytes());
        out.extend_from_slice(spec.as_bytes());
        let c = self.counts;
        for v in [
            c.pushes,
            c.admitted,
            c.not_admitted,
            c.evicted,
            c.initialized_on_pull,
            self.next_sweep,
            self.rows.used() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let words: usize = self.rows.words().map(<[u64]>::len).sum();
        out.extend_from_slice(&(words as u64 * 8).to_le_bytes());
        out.reserve(words * 8 + self.admit.bytes() + 32);
        for chunk in self.rows.words() {
            out.extend_from_slice(bytemuck::cast_slice(chunk));
        }
        out.extend_from_slice(&u64::from(self.free).to_le_bytes());
        out.extend_from_slice(&(self.free_len as u64).to_le_bytes());
        let (counters, added): (&[u8], u64) = match &self.admit {
            Admit::Count { sketch, .. } => (sketch.counters(), sketch.added()),
            _ => (&[], 0),
        };
        out.extend_from_slice(&(counters.len() as u64).to_le_bytes());
        out.extend_from_slice(counters);
        out.extend_from_slice(&added.to_le_bytes());
    }

    /// Replaces the table's state with what [`save_into`](Self::save_into) wrote.
    ///
    /// # Errors
    /// A text naming what is wrong: another table's spec (both named), a truncation (with its
    /// offset), rows beyond this table's budget. The table is unchanged then.
    pub fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut fresh = Table::new(&self.spec)?;
        let mut r = Reader::new("saved table", state);
        let header = r.take(MAGIC.len(), "the header")?;
        if header == OLD_MAGIC {
            return Err(
                "saved table: saved by an older pslite-rs ('pslite-table/1'), whose pushes stepped \
                 and created rows in another order: its log would not replay to the same table; \
                 start the table afresh (an empty PS_CHECKPOINT_DIR)"
                    .into(),
            );
        }
        if header != MAGIC {
            return Err(
                "saved table: not an embedding table's state (no 'pslite-table/2' header)".into(),
            );
        }
        let spec = r.sized("the spec line")?;
        let mine = self.spec.to_string();
        if spec != mine.as_bytes() {
            return Err(format!(
                "saved table: it was saved by a table with spec '{}', this server's is '{mine}'",
                String::from_utf8_lossy(spec)
            ));
        }
        let c = TableCounts {
            pushes: r.u64("the push count")?,
            admitted: r.u64("the admitted count")?,
            not_admitted: r.u64("the not-admitted count")?,
            evicted: r.u64("the evicted count")?,
            initialized_on_pull: r.u64("the initialized-on-pull count")?,
        };
        fresh.next_sweep = r.u64("the next TTL sweep")?;
        let used = usize::try_from(r.u64("the slots used")?)
            .map_err(|_| "saved table: too many slots".to_string())?;
        let words = r.sized("the rows")?;
        fresh.rows.fill(used, words)?;
        let head = r.u64("the free list's head")?;
        let free_len = r.u64("the free list's length")?;
        // The free list: slots below `used`, each free, as many as it says (no cycle).
        let (mut at, mut walked) = (head, 0u64);
        while at != u64::from(NONE) {
            if at >= used as u64 || fresh.rows.stamp(at as u32) != FREE || walked >= used as u64 {
                return Err(format!(
                    "saved table: the free list is damaged at slot {at} (step {walked} of {used} slots)"
                ));
            }
            at = fresh.rows.key(at as u32);
            walked += 1;
        }
        if walked != free_len {
            return Err(format!(
                "saved table: the free list holds {walked} slots, its count says {free_len}"
            ));
        }
        fresh.free = head as u32;
        fresh.free_len = walked as usize;
        if let Admit::Count { sketch, .. } = &mut fresh.admit {
            sketch.restore(&mut r)?;
        } else {
            r.sized("the admission sketch")?;
            r.u64("the admission sketch's pushes since its last halving")?;
        }
        r.finish("the saved table")?;
        for slot in 0..used as u32 {
            if fresh.rows.stamp(slot) != FREE {
                if !fresh.index.has_room() {
                    let rows = &fresh.rows;
                    fresh.index.grow(|s| rows.key(s));
                }
                let key = fresh.rows.key(slot);
                if fresh.find(key).is_some() {
                    return Err(format!("saved table: key {key} held twice"));
                }
                fresh.index.insert(key, slot);
            }
        }
        fresh.counts = c;
        *self = fresh;
        Ok(())
    }
}

/// The first bytes of a saved table.
const MAGIC: &[u8] = b"pslite-table/2\n";

/// The first bytes of a table saved before a push stepped the rows held first ([`Table::push`]).
const OLD_MAGIC: &[u8] = b"pslite-table/1\n";
