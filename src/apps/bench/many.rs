//! `bench --keys-per-request N`: many keys in one request, as dmlc's `test_kv_app_benchmark` —
//! the sparse-model path. N keys spread over the key space (every server gets a share), `--len`
//! bytes each; each round sends one request of all N keys per phase and waits for it.
//!
//! Figures: keys/s (keys of completed requests per second), value goodput (as the one-key
//! modes count it), latency per request, and the reference: the keys/s of one `memcpy` of the
//! same key and value bytes (N × (8 + len)) on this machine, measured in the same run.

use super::{progress::Progress, BenchArgs, BenchReport, ManyKeysFigures, Measured};
use crate::error::{Error, Result};
use crate::kv::{KVWorker, Key, Op, SArray};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys per second of copying `n` keys and their `len`-byte values once with `memcpy` (the best
/// of three warm copies): the rate no request of these bytes can beat on this machine.
pub fn memcpy_keys_per_s(n: usize, len: usize) -> f64 {
    let bytes = n.saturating_mul(8 + len).max(1);
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // touch every page first
    let best = (0..3)
        .map(|_| {
            let t0 = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            t0.elapsed()
        })
        .min()
        .unwrap_or(Duration::ZERO);
    n as f64 / best.as_secs_f64().max(1e-9)
}

/// The bytes rank 0 pushes first: value byte `i` of the request.
fn pattern(n: usize, len: usize) -> Vec<u8> {
    (0..n * len)
        .map(|i| (i.wrapping_mul(7) ^ (i / len).wrapping_mul(131)) as u8)
        .collect()
}

/// Runs the many-keys benchmark with `n` keys per request.
///
/// # Errors
/// Transport or server errors; [`Error::InvalidArgument`] for `--zero-copy` (one key per
/// request) and for pulled bytes that differ from the pattern.
pub fn run(po: &Arc<Postoffice>, a: &BenchArgs, n: usize) -> Result<BenchReport> {
    if a.zero_copy {
        return Err(Error::InvalidArgument(
            "--zero-copy pulls one key per request: it does not combine with --keys-per-request"
                .into(),
        ));
    }
    let len = a.len;
    let mut requests = ManyKeysRun::start(po, n, len)?;
    let memcpy = memcpy_keys_per_s(n, len);

    let phases = a.mode.phases();
    let limit_time = Duration::from_secs_f64(a.seconds.unwrap_or(10.0).max(0.0));
    let mut bar = Progress::new(po.my_rank(), a.repeat, limit_time);
    let (mut lat, mut rounds, mut pushed, mut pulled) = (Vec::new(), 0usize, 0u64, 0u64);
    let start = Instant::now();
    while a
        .repeat
        .map_or(start.elapsed() < limit_time, |r| rounds < r)
    {
        for &op in phases {
            lat.push(requests.phase(op)?);
            if op.pushes() {
                pushed += (n * len) as u64;
            }
            if op.pulls() {
                pulled += (n * len) as u64;
            }
        }
        rounds += 1;
        bar.set(match a.repeat {
            Some(_) => rounds as u64,
            None => start.elapsed().as_millis() as u64,
        });
    }
    let elapsed = start.elapsed();
    bar.finish();
    let keys_per_s = (lat.len() * n) as f64 / elapsed.as_secs_f64().max(1e-9);
    let m = Measured {
        keys: n,
        rounds,
        latencies: lat,
        pushed,
        pulled,
        elapsed,
    };
    Ok(BenchReport {
        many_keys: ManyKeysFigures {
            keys_per_request: Some(n),
            keys_per_s: Some(keys_per_s),
            memcpy_keys_per_s: Some(memcpy),
        },
        ..BenchReport::of(po, a, m)
    })
}

/// The requests of a many-keys run: its keys, the values every pull must return, and the
/// buffers pushed from and pulled into.
struct ManyKeysRun {
    kv: KVWorker<u8>,
    /// `n` keys spread evenly over the key space.
    keys: Vec<Key>,
    /// What every pull must return: rank 0's pattern (later pushes add zeros).
    want: Vec<u8>,
    /// Pushed from one shared buffer, no copy per request: the sums stay `want`.
    zeros: SArray<u8>,
    /// Where pulls land (`n` × `len` bytes).
    out: Vec<u8>,
    /// Bytes per value.
    len: usize,
}

impl ManyKeysRun {
    /// `n` keys of `len`-byte values; worker rank 0 pushes the pattern, then the workers meet
    /// at a barrier.
    ///
    /// # Errors
    /// As [`KVWorker::new`], the push and the barrier.
    fn start(po: &Arc<Postoffice>, n: usize, len: usize) -> Result<ManyKeysRun> {
        let kv = KVWorker::<u8>::new(po, 0, 0)?;
        let step = u64::MAX / n as u64;
        let keys: Vec<Key> = (0..n as u64).map(|i| i * step).collect();
        let want = pattern(n, len);
        let zeros = SArray::from_vec(vec![0u8; n * len]);
        if po.my_rank() == 0 {
            kv.wait(kv.push(&keys, &want, None)?)?;
        }
        po.barrier(WORKER_GROUP)?;
        Ok(ManyKeysRun {
            kv,
            keys,
            want,
            zeros,
            out: vec![0u8; n * len],
            len,
        })
    }

    /// One request of `op` on every key, waited for; returns its latency (the check of a
    /// pull's bytes, after it, is not counted).
    ///
    /// # Errors
    /// The request's errors; [`Error::InvalidArgument`] naming the first key whose pulled
    /// bytes differ from the pattern.
    fn phase(&mut self, op: Op) -> Result<Duration> {
        let (kv, keys) = (&self.kv, &self.keys);
        let t0 = Instant::now();
        match op {
            Op::Push => kv.wait(kv.push_shared(keys, &self.zeros, None)?)?,
            Op::Pull => kv.pull_into(keys, &mut self.out)?,
            Op::PushPull => kv.push_pull_into(keys, &self.zeros[..], None, &mut self.out)?,
        }
        let took = t0.elapsed();
        if op.pulls() {
            if self.out != self.want {
                let (out, want) = (&self.out, &self.want);
                let i = out.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                return Err(Error::InvalidArgument(format!(
                    "bench: key {} came back with wrong bytes",
                    keys[i / self.len]
                )));
            }
            self.out.fill(0);
        }
        Ok(took)
    }
}
