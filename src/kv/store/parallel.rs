//! Rayon where it pays, as measured by `cargo bench --bench store` (the `rayon:` lines: medians
//! of 5, the store's code on a one-thread pool against the default one; figures in
//! BENCHMARKS.md) on this project's 2-core machines, where a fork-join costs 11–16 µs:
//!
//! - resolving a request: index lookups wait on memory, so two cores nearly double the rate —
//!   1.3× at 100K keys, 2.1× at 1M, 2.0× at 10M; nothing at 30K;
//! - summing a run and copying it into an answer: 1.4× at 1M values, about 2× at 10M and 40M,
//!   nothing at 300K — with the other core idle. In a pipelined push-pull of 4 MB values, where
//!   both cores are busy, splitting 4M-value runs made goodput 3 % lower (`bench --mode
//!   push-pull --len 4096000`, 4 interleaved runs each: 11.95 against 12.33 Gbit/s), so runs are
//!   split from 8M values on, where a lone large request still gains about 2×.

use super::{sum_into as sum_one, Lens, Resolved};
use crate::kv::{Key, Value};
use rayon::prelude::*;

/// Requests of fewer keys are resolved on the calling thread.
pub(super) const PAR_MIN_KEYS: usize = 64 * 1024;
/// Runs of fewer values are summed, and copied into answers, on the calling thread.
const PAR_MIN_VALUES: usize = 8 << 20;
/// Values per parallel summing task.
const SUM_CHUNK: usize = 256 << 10;

/// Finds every key of `keys` (sorted, unique) with `find` (`KeyStore::find_all`, whose
/// `want` it passes on, cut to each chunk's keys): on the calling thread for fewer than
/// [`PAR_MIN_KEYS`] keys, else in parallel chunks whose results are joined in key order.
/// `None` when a chunk's `find` found a key missing (a push's keys not all held).
///
/// # Errors
/// The first error in key order, as one `find` over all the keys would give it.
pub(super) fn find_chunked<F>(
    keys: &[Key],
    want: Option<Lens<'_>>,
    find: F,
) -> Result<Option<Resolved>, String>
where
    F: Fn(&[Key], Option<Lens<'_>>) -> Result<Option<Resolved>, String> + Sync,
{
    if keys.len() < PAR_MIN_KEYS {
        return find(keys, want);
    }
    let chunk = keys
        .len()
        .div_ceil(rayon::current_num_threads().max(1))
        .max(PAR_MIN_KEYS / 2);
    let parts: Vec<Result<Option<Resolved>, String>> = keys
        .par_chunks(chunk)
        .enumerate()
        .map(|(c, k)| find(k, want.map(|l| l.slice(c * chunk, k.len()))))
        .collect();
    // In key order: the first error wins, as it would one key at a time.
    let mut out: Option<Resolved> = None;
    let mut missing = false;
    for part in parts {
        match part? {
            None => missing = true,
            Some(r) => match &mut out {
                Some(o) => o.append(r),
                None => out = Some(r),
            },
        }
    }
    Ok(if missing { None } else { out })
}

/// `dst[i] = dst[i].sum(src[i])`, in parallel chunks for very large runs.
pub(super) fn sum_into<V: Value>(dst: &mut [V], src: &[V]) {
    if dst.len() < PAR_MIN_VALUES {
        return sum_one(dst, src);
    }
    dst.par_chunks_mut(SUM_CHUNK)
        .zip(src.par_chunks(SUM_CHUNK))
        .for_each(|(d, s)| sum_one(d, s));
}

/// Appends `run` to an answer, in parallel for long runs.
pub(super) fn extend<V: Value>(out: &mut Vec<V>, run: &[V]) {
    if run.len() < PAR_MIN_VALUES {
        out.extend_from_slice(run);
    } else {
        out.par_extend(run.par_iter().copied());
    }
}
