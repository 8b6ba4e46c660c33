//! `kv-app` across a worker's replacement: with `PS_CHECKPOINT_DIR` set, every push
//! of a worker also adds 1 to a *progress key* of its own on each server (one key per worker
//! and server, in that server's key range, pushed in the same request as the worker's keys of
//! that server, so applied with them or not at all). A worker that replaces a lost one pulls
//! its progress keys: the number of its predecessor's pushes each server applied, so it pushes
//! only the rest, to each server, and the sums come out exact. The keys follow the start-up
//! key ranges: after a resize that split one between two servers (docs/failures.md, "Not
//! covered yet") a request's keys of that range go in two parts, and this no longer holds.

use crate::error::{Error, Result};
use crate::kv::{KVWorker, Key, Value};
use crate::postoffice::Postoffice;

/// The keys and values of one worker's pushes, progress keys included, and which of them go to
/// each server.
pub struct Plan<V> {
    /// Every key pushed, sorted: the data keys and, with progress keys, one per server.
    pub keys: Vec<Key>,
    /// Their values, `len` per key (1 in each value of a progress key).
    pub vals: Vec<V>,
    /// Per server: the range of `keys` (and, × `len`, of `vals`) in its key range.
    pub by_server: Vec<std::ops::Range<usize>>,
    /// Index in `keys` of each data key, in order.
    pub data: Vec<usize>,
    /// Index in `keys` of each server's progress key (empty without progress keys).
    pub progress: Vec<usize>,
    /// Values per key.
    pub len: usize,
}

/// This worker's progress key in each server's key range, in the servers' order: worker w
/// takes begin + 1 + w, or the next key of w's residue class (modulo the workers) that is not
/// among `data_keys` (sorted), so no two workers share one.
///
/// # Errors
/// [`Error::InvalidArgument`] when a server's key range has no such key.
fn progress_keys(po: &Postoffice, data_keys: &[Key]) -> Result<Vec<Key>> {
    let mut keys = Vec::new();
    for r in po.server_key_ranges() {
        let step = po.num_workers().max(1) as u64;
        let mut k = r.begin.saturating_add(1 + po.my_rank() as u64);
        while data_keys.binary_search(&k).is_ok() && k < r.end {
            k = k.saturating_add(step);
        }
        if k >= r.end {
            return Err(Error::InvalidArgument(format!(
                "kv-app: no free key for worker {}'s progress key in [{}, {})",
                po.my_rank(),
                r.begin,
                r.end
            )));
        }
        keys.push(k);
    }
    Ok(keys)
}

impl<V: Value> Plan<V> {
    /// The pushes of `data_keys` (sorted) with `vals` (`len` each) by worker `rank`, with a
    /// progress key per server when `progress` is set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a server's key range has no free key for the progress
    /// key (every key of it is a data key).
    pub fn new(
        po: &Postoffice,
        (data_keys, vals, len): (&[Key], &[V], usize),
        progress: bool,
    ) -> Result<Plan<V>> {
        let ranges = po.server_key_ranges();
        let mut extra = if progress {
            progress_keys(po, data_keys)?
        } else {
            Vec::new()
        };
        // Data keys are sorted: the few progress keys are merged in.
        extra.sort_unstable();
        let mut plan = Plan {
            keys: Vec::with_capacity(data_keys.len() + extra.len()),
            vals: Vec::with_capacity((data_keys.len() + extra.len()) * len),
            by_server: Vec::new(),
            data: Vec::with_capacity(data_keys.len()),
            progress: Vec::new(),
            len,
        };
        let mut extra = extra.into_iter().peekable();
        for (i, &k) in data_keys.iter().enumerate() {
            while let Some(p) = extra.next_if(|&p| p < k) {
                plan.push_progress(p);
            }
            plan.data.push(plan.keys.len());
            plan.keys.push(k);
            plan.vals.extend_from_slice(&vals[i * len..(i + 1) * len]);
        }
        extra.for_each(|p| plan.push_progress(p));
        plan.by_server = ranges
            .iter()
            .map(|r| {
                let from = plan.keys.partition_point(|&k| k < r.begin);
                let to = if r.end == u64::MAX {
                    plan.keys.len()
                } else {
                    plan.keys.partition_point(|&k| k < r.end)
                };
                from..to
            })
            .collect();
        Ok(plan)
    }

    /// Appends progress key `k` (1 in each of its values).
    fn push_progress(&mut self, k: Key) {
        self.progress.push(self.keys.len());
        self.keys.push(k);
        self.vals
            .extend(std::iter::repeat_n(V::from_u32(1), self.len));
    }

    /// The values of the data keys among `all` (values of every key, as pushed).
    pub fn data_values(&self, all: &[V]) -> Vec<V> {
        let len = self.len;
        self.data
            .iter()
            .flat_map(|&i| all.get(i * len..(i + 1) * len).unwrap_or(&[]))
            .copied()
            .collect()
    }

    /// The pushes this worker's predecessor made that each server applied, read from the
    /// progress keys (a push of zeros first, which adds nothing, gives keys the predecessor
    /// never pushed a value: 0); each is at most `max`.
    ///
    /// # Errors
    /// Transport errors; [`Error::InvalidArgument`] for a count that is not n × 1 for one n
    /// in `0..=max` (a value type that cannot count that far, such as u8 past 255).
    pub fn applied(&self, kv: &KVWorker<V>, max: usize) -> Result<Vec<usize>> {
        let keys: Vec<Key> = self.progress.iter().map(|&i| self.keys[i]).collect();
        let mut got = vec![V::default(); keys.len() * self.len];
        kv.wait(kv.push(&keys, &got, None)?)?;
        kv.pull_into(&keys, &mut got)?;
        keys.iter()
            .enumerate()
            .map(|(s, k)| {
                count(got[s * self.len], max).map_err(|e| {
                    Error::InvalidArgument(format!("kv-app: progress key {k} of server {s}: {e}"))
                })
            })
            .collect()
    }
}

/// The one n in `0..=max` with n × 1 = `v` (`Value::sum` of n ones).
fn count<V: Value>(v: V, max: usize) -> std::result::Result<usize, String> {
    let one = V::from_u32(1);
    let (mut acc, mut found) = (V::default(), None);
    for n in 0..=max {
        if acc == v {
            if found.is_some() {
                return Err(format!(
                    "the value type cannot count to {max} (sums wrap): rerun with a wider --dtype"
                ));
            }
            found = Some(n);
        }
        acc = acc.sum(one);
    }
    found.ok_or_else(|| format!("holds no count of pushes from 0 to {max}"))
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_are_read_back_and_wrapping_types_are_refused() {
        assert_eq!(count(7.0f32, 10), Ok(7));
        assert_eq!(count(0u32, 10), Ok(0));
        assert!(count(11.0f32, 10).is_err_and(|e| e.contains("no count")));
        assert!(count(3u8, 300).is_err_and(|e| e.contains("wider --dtype")));
    }
}
