//! A request's keys looked up in parts, each part on a thread of its own for a large request
//! ([`threads_for`]): a pull's rows read, and a push's held rows stepped where they are.
//! Every part is a pass of [`lookup::each`] over its keys with the work per row inline.

use super::stamp_of;
use crate::kv::table::index::Index;
use crate::kv::table::init::initial_row;
use crate::kv::table::lookup;
use crate::kv::table::optim::step;
use crate::kv::table::rows::{Rows, RowsRaw};
use crate::kv::table::spec::{Optimizer, TableSpec};

/// Fewest keys a request has for a table to split it among threads.
const SPLIT_MIN: usize = 16384;

/// Threads to split the request of `keys` among: `threads` (the table's
/// [`Table::set_threads`](super::Table::set_threads)) for a request of at least [`SPLIT_MIN`]
/// keys in strictly increasing order (so no two threads step one row), else one.
pub(super) fn threads_for(threads: usize, keys: &[u64]) -> usize {
    if threads > 1 && keys.len() >= SPLIT_MIN && keys.windows(2).all(|w| w[0] < w[1]) {
        threads
    } else {
        1
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
pub(super) fn step_row(
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

/// A pull's rows read from a table's index and records.
pub(super) struct PullRows<'a> {
    pub index: &'a Index,
    pub rows: &'a Rows,
    /// For the initial rows of keys not held.
    pub spec: &'a TableSpec,
    /// Values per row.
    pub dim: usize,
}

impl PullRows<'_> {
    /// The rows of `keys` into `out` (`keys.len() · dim` values): held rows, and the initial
    /// row of a key not held. Gives how many keys were not held.
    #[inline]
    fn part(&self, keys: &[u64], out: &mut [f32]) -> u64 {
        let (index, rows, spec, dim) = (self.index, self.rows, self.spec, self.dim);
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
    }

    /// [`part`](Self::part) over all of `keys`, split among `threads` parts at once.
    pub fn run(&self, keys: &[u64], out: &mut [f32], threads: usize) -> u64 {
        let dim = self.dim;
        if threads > 1 {
            let per = keys.len().div_ceil(threads);
            run_all(
                keys.chunks(per)
                    .zip(out.chunks_mut(per * dim))
                    .map(|(k, o)| move || self.part(k, o))
                    .collect(),
            )
            .into_iter()
            .sum()
        } else {
            self.part(keys, out)
        }
    }
}

/// A push's steps on the rows a table holds, made where the rows are.
pub(super) struct StepHeld<'a, 'r> {
    pub index: &'a Index,
    pub raw: &'a RowsRaw<'r>,
    /// The optimizer and its weight decay.
    pub opt: (Optimizer, f32),
    /// The push's gradients, `dim` values a key.
    pub grads: &'a [f32],
    /// Values per row.
    pub dim: usize,
    /// The push's number (its stamps' high bits).
    pub push: u64,
}

impl StepHeld<'_, '_> {
    /// Steps and stamps the held rows of `keys` (the push's keys from `first` on), their rows
    /// after the step into `out` (`dim` values a key of the part) when given. Gives the
    /// positions in the push of the keys not held, in order.
    #[inline]
    fn part(&self, first: usize, keys: &[u64], mut out: Option<&mut [f32]>) -> Vec<usize> {
        let (index, raw, grads, dim, push) =
            (self.index, self.raw, self.grads, self.dim, self.push);
        let (opt, wd) = self.opt;
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
            *stamp = stamp_of(push, i);
            step_row(
                (&opt, wd),
                values,
                &grads[i * dim..(i + 1) * dim],
                out.as_deref_mut().map(|o| &mut o[j * dim..(j + 1) * dim]),
            );
        });
        missing
    }

    /// [`part`](Self::part) over all of `keys`, split among `threads` parts at once; `out`
    /// as the push's (`keys.len() · dim` values). Gives the positions of the keys not held,
    /// in order.
    pub fn run(&self, keys: &[u64], out: Option<&mut [f32]>, threads: usize) -> Vec<usize> {
        let dim = self.dim;
        if threads > 1 {
            let per = keys.len().div_ceil(threads);
            let mut outs: Vec<Option<&mut [f32]>> = match out {
                Some(o) => o.chunks_mut(per * dim).map(Some).collect(),
                None => keys.chunks(per).map(|_| None).collect(),
            };
            run_all(
                keys.chunks(per)
                    .zip(outs.iter_mut())
                    .enumerate()
                    .map(|(t, (k, o))| {
                        let o = o.take();
                        move || self.part(t * per, k, o)
                    })
                    .collect(),
            )
            .into_iter()
            .flatten()
            .collect()
        } else {
            self.part(0, keys, out)
        }
    }
}
