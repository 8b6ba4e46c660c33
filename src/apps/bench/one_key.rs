//! `bench` with one key per request (BytePS's `test_benchmark`): every key of every server in
//! flight at once, phase after phase; each completion's latency taken and a pull's bytes
//! checked against the pattern worker rank 0 pushed (see the counting and checking rules in
//! [`super`]).

use super::{BenchArgs, BenchReport, Measured, RendezvousFigures};
use crate::error::{Error, Result};
use crate::kv::{KVPairs, KVWorker, Key, Op, RequestOptions, SArray};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use crate::van::pool::PoolBuf;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bytes of key `key_index`'s value as rank 0 pushes it (`len` bytes).
fn pattern(key_index: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(7) ^ key_index.wrapping_mul(131)) as u8)
        .collect()
}

/// What a completed request hands back.
enum Got {
    Pairs(KVPairs<u8>),
    Buf(PoolBuf<u8>),
}

/// A completed request: key index, completion time, result.
type Done = (usize, Instant, Result<Got>);

/// A run with one key per request: every key of every server in flight at once, per phase.
pub(super) struct OneKeyBench<'a> {
    po: &'a Arc<Postoffice>,
    a: &'a BenchArgs,
    kv: KVWorker<u8>,
    keys: Vec<Key>,
    /// What each key's value must be (worker rank 0 pushed it; later pushes add zeros).
    patterns: Vec<Vec<u8>>,
    /// Pushed from one shared buffer, as ps-lite's ZPush shares its SArray: no copy per
    /// request.
    zeros: SArray<u8>,
    /// Destinations of zero-copy pulls, one per key (`None` while its pull is in flight).
    bufs: Vec<Option<PoolBuf<u8>>>,
    tx: Sender<Done>,
    rx: Receiver<Done>,
    counts: Counts,
}

/// What a one-key run has counted so far.
#[derive(Default)]
struct Counts {
    /// Each completed request's latency, call to completion.
    latencies: Vec<Duration>,
    /// Value bytes pushed.
    pushed: u64,
    /// Value bytes pulled.
    pulled: u64,
    /// Requests sent through the `KVWorker`'s tracker (not rendezvous pulls), set-up included.
    sent: usize,
}

impl<'a> OneKeyBench<'a> {
    /// The keys (`--keys-per-server` from the start of each server's range), worker rank 0's
    /// push of the patterns, the workers' barrier, and the pool buffers for `--zero-copy`.
    pub(super) fn start(po: &'a Arc<Postoffice>, a: &'a BenchArgs) -> Result<OneKeyBench<'a>> {
        let kv = KVWorker::<u8>::new(po, 0, 0)?;
        let keys: Vec<Key> = po
            .server_key_ranges()
            .iter()
            .flat_map(|r| (0..a.keys_per_server as u64).map(move |j| r.begin + j))
            .collect();
        let patterns: Vec<Vec<u8>> = (0..keys.len()).map(|i| pattern(i, a.len)).collect();
        let zeros = SArray::from_vec(vec![0u8; a.len]);
        if po.my_rank() == 0 {
            for (k, p) in keys.iter().zip(&patterns) {
                let t = kv.push(&[*k], p, None)?;
                kv.wait(t)?;
            }
        }
        po.barrier(WORKER_GROUP)?;
        let mut bufs = Vec::new();
        if a.zero_copy {
            for _ in &keys {
                bufs.push(Some(kv.alloc(a.len)?));
            }
        }
        let (tx, rx) = unbounded::<Done>();
        Ok(OneKeyBench {
            po,
            a,
            kv,
            counts: Counts {
                sent: if po.my_rank() == 0 { patterns.len() } else { 0 },
                ..Counts::default()
            },
            keys,
            patterns,
            zeros,
            bufs,
            tx,
            rx,
        })
    }

    /// Forgets the latencies and byte counts so far (after a warm-up); returns the bytes
    /// (pushed, pulled) forgotten.
    pub(super) fn forget_counts(&mut self) -> (u64, u64) {
        let c = &mut self.counts;
        c.latencies.clear();
        let counts = (c.pushed, c.pulled);
        (c.pushed, c.pulled) = (0, 0);
        counts
    }

    /// One phase of a round: `op` on every key at once, then every completion checked.
    pub(super) fn phase(&mut self, op: Op) -> Result<()> {
        let issued = self.issue(op)?;
        for _ in 0..self.keys.len() {
            self.complete(op, &issued)?;
        }
        Ok(())
    }

    /// Sends one request of `op` per key, each completing into the channel; returns the time
    /// each was sent, by key index.
    fn issue(&mut self, op: Op) -> Result<Vec<Instant>> {
        let mut issued = Vec::with_capacity(self.keys.len());
        for (i, k) in self.keys.iter().enumerate() {
            let tx = self.tx.clone();
            let t0 = Instant::now();
            let buf = if op.pulls() {
                self.bufs.get_mut(i).and_then(Option::take)
            } else {
                None
            };
            match buf {
                Some(buf) => self.kv.zpull(*k, buf, move |r| {
                    let _ = tx.send((i, Instant::now(), r.map(Got::Buf)));
                })?,
                _ => {
                    let cb = move |r: Result<KVPairs<u8>>| {
                        let _ = tx.send((i, Instant::now(), r.map(Got::Pairs)));
                    };
                    let options = RequestOptions::callback(cb);
                    self.counts.sent += 1;
                    if op.pushes() {
                        self.kv
                            .request_shared(op, &[*k], &self.zeros, &[], options)?;
                    } else {
                        self.kv.request(op, &[*k], &[], &[], options)?;
                    }
                }
            }
            issued.push(t0);
        }
        Ok(issued)
    }

    /// Takes the next completion of a phase of `op` sent at `issued`: its latency, its bytes,
    /// and a pull's bytes checked against the pattern.
    fn complete(&mut self, op: Op, issued: &[Instant]) -> Result<()> {
        let timeout = self.po.config().timing.timeout;
        let (i, at, r) = self.rx.recv_timeout(timeout).map_err(|_| {
            let e = Error::Timeout(format!(
                "bench: a request did not complete within {:.0} s (PS_TIMEOUT)",
                timeout.as_secs_f64()
            ));
            crate::waits::timed_out(&e);
            e
        })?;
        let got = r?;
        self.counts.latencies.push(at - issued[i]);
        let len = self.a.len;
        if op.pushes() {
            self.counts.pushed += len as u64;
        }
        if op.pulls() {
            let bytes: &[u8] = match &got {
                Got::Pairs(p) => &p.vals,
                Got::Buf(b) => b,
            };
            if bytes != self.patterns[i] {
                return Err(Error::InvalidArgument(format!(
                    "bench: key {} came back with wrong bytes ({} bytes, expected the {len} pushed)",
                    self.keys[i],
                    bytes.len(),
                )));
            }
            self.counts.pulled += len as u64;
        }
        if let Got::Buf(b) = got {
            self.bufs[i] = Some(b);
        }
        Ok(())
    }

    /// Meta-data round trips of the rendezvous so far, all keys together.
    pub(super) fn meta_round_trips(&self) -> u64 {
        self.keys.iter().map(|&k| self.kv.meta_round_trips(k)).sum()
    }

    /// The report of `rounds` rounds in `elapsed`; `trips_first`: the meta-data round trips
    /// after round 1 (`--zero-copy`).
    pub(super) fn report(
        self,
        rounds: usize,
        elapsed: Duration,
        trips_first: Option<u64>,
    ) -> BenchReport {
        let trips_total = self.meta_round_trips();
        let nkeys = self.keys.len() as f64;
        let (meta_round_trips_first, meta_round_trips_after) = match trips_first {
            Some(first) => (
                Some(first as f64 / nkeys),
                (rounds > 1).then(|| (trips_total - first) as f64 / (nkeys * (rounds - 1) as f64)),
            ),
            None => (None, None),
        };
        let m = Measured {
            keys: self.keys.len(),
            rounds,
            latencies: self.counts.latencies,
            pushed: self.counts.pushed,
            pulled: self.counts.pulled,
            elapsed,
        };
        BenchReport {
            rendezvous: RendezvousFigures {
                zero_copy: self.a.zero_copy,
                meta_round_trips_first,
                meta_round_trips_after,
            },
            requests_total: Some(self.counts.sent),
            ..BenchReport::of(self.po, self.a, m)
        }
    }
}
