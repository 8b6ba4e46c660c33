//! `bench`: BytePS's `test_benchmark` modes over `u8` values of `--len` bytes, one request per
//! key, every key of every server in flight at once, round after round.
//!
//! Counting (as BytePS): goodput = value bytes of completed requests × 8 / elapsed, where a
//! push, a pull and a push-pull each count `len` bytes once (a push-pull moves 2 × len on the
//! wire); push-then-pull counts its push and its pull. Latency is per request, from the call to
//! its completion callback.
//!
//! With `--keys-per-request N` each request carries N keys instead (see [`many`]), and the
//! report adds keys/s and the `memcpy` reference.
//!
//! Checking: worker rank 0 first pushes a known pattern for every key; later pushes carry zeros,
//! so the servers' sums stay equal to the pattern, and every pulled value is compared with it
//! byte for byte. Any difference fails the run.

pub mod many;

use super::stats::{gbps, percentile};
use crate::error::{Error, Result};
use crate::kv::{KVPairs, KVWorker, Key, Op, RequestOptions, SArray};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use crate::van::pool::PoolBuf;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What each round does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Push every key.
    Push,
    /// Pull every key.
    Pull,
    /// Push-pull every key (push, server sums, answer carries the sum).
    PushPull,
    /// Push every key, wait, pull every key.
    PushThenPull,
}

impl Mode {
    /// The requests of one round, in order.
    fn phases(self) -> &'static [Op] {
        match self {
            Mode::Push => &[Op::Push],
            Mode::Pull => &[Op::Pull],
            Mode::PushPull => &[Op::PushPull],
            Mode::PushThenPull => &[Op::Push, Op::Pull],
        }
    }
}

/// What a run measured, whichever kind of run.
struct Measured {
    keys: usize,
    rounds: usize,
    latencies: Vec<Duration>,
    pushed: u64,
    pulled: u64,
    elapsed: Duration,
}

/// Options of `bench`.
#[derive(Clone, Debug, clap::Args)]
#[command(
    after_help = "Goodput counts value bytes of completed requests (len per push, pull or \
push-pull, as BytePS test_benchmark; push-then-pull counts both halves) × 8 / elapsed seconds, \
in Gbit/s. Latency p50/p99 is per request, call to completion."
)]
pub struct BenchArgs {
    /// What each round does.
    #[arg(long, value_enum, default_value = "push-pull")]
    pub mode: Mode,
    /// Bytes per value.
    #[arg(long, default_value_t = 1_024_000)]
    pub len: usize,
    /// Keys on each server.
    #[arg(long, default_value_t = 40)]
    pub keys_per_server: usize,
    /// Rounds to run (overrides --seconds).
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Seconds to run (whole rounds; default 10 unless --repeat is given).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Print one JSON object for the run on its own line.
    #[arg(long)]
    pub json: bool,
    /// Pulls go through the zero-copy rendezvous into pool buffers (pull and push-then-pull).
    #[arg(long)]
    pub zero_copy: bool,
    /// Many keys per request: N keys spread over the key space, --len bytes each, one request
    /// per phase and round (dmlc's test_kv_app_benchmark); reports keys/s and a memcpy reference.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(u32::MAX as u64)))]
    pub keys_per_request: Option<u64>,
}

/// Figures of one run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// Mode.
    pub mode: Mode,
    /// Worker rank.
    pub worker: usize,
    /// Bytes per value.
    pub len: usize,
    /// Keys (all servers).
    pub keys: usize,
    /// Rounds run.
    pub rounds: usize,
    /// Requests completed.
    pub requests: usize,
    /// Value bytes pushed.
    pub bytes_pushed: u64,
    /// Value bytes pulled.
    pub bytes_pulled: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Gbit/s, counted as stated in the module docs.
    pub goodput_gbps: f64,
    /// Median request latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile request latency, milliseconds.
    pub p99_ms: f64,
    /// Every pulled byte equalled the pattern.
    pub verified: bool,
    /// Pulls went through the rendezvous.
    pub zero_copy: bool,
    /// Meta-data round trips per key in the first round (rendezvous only; 1 expected).
    pub meta_round_trips_first: Option<f64>,
    /// Meta-data round trips per pull after the first round (rendezvous only; 0 expected).
    pub meta_round_trips_after: Option<f64>,
    /// Keys per request (`--keys-per-request`; `None`: one key per request).
    pub keys_per_request: Option<usize>,
    /// Keys of completed requests per second (`--keys-per-request` only).
    pub keys_per_s: Option<f64>,
    /// Keys per second of one `memcpy` of the same key and value bytes, measured in this run.
    pub memcpy_keys_per_s: Option<f64>,
    /// Payload bytes (data frames, not headers) this worker sent over the whole run, set-up
    /// included.
    pub sent_bytes: u64,
    /// Payload bytes this worker received over the whole run.
    pub received_bytes: u64,
}

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

/// Runs the benchmark on this worker.
///
/// # Errors
/// Transport or server errors, and [`Error::Remote`]-free mismatches reported as
/// [`Error::InvalidArgument`] naming the key that came back wrong.
pub fn run(po: &Arc<Postoffice>, a: &BenchArgs) -> Result<BenchReport> {
    if a.len == 0 || a.keys_per_server == 0 {
        return Err(Error::InvalidArgument(
            "--len and --keys-per-server must be at least 1".into(),
        ));
    }
    if let Some(n) = a.keys_per_request {
        return many::run(po, a, n as usize);
    }
    if a.zero_copy && !matches!(a.mode, Mode::Pull | Mode::PushThenPull) {
        return Err(Error::InvalidArgument(
            "--zero-copy applies to the pull modes: pull, push-then-pull".into(),
        ));
    }
    let mut bench = OneKeyBench::start(po, a)?;
    let limit_rounds = a.repeat;
    let limit_time = Duration::from_secs_f64(a.seconds.unwrap_or(10.0).max(0.0));
    let bar = progress_bar(limit_rounds, limit_time);
    let mut trips_first = None;
    let mut rounds = 0usize;
    let start = Instant::now();
    loop {
        let done_rounds = limit_rounds.is_some_and(|n| rounds >= n);
        if done_rounds || (limit_rounds.is_none() && start.elapsed() >= limit_time) {
            break;
        }
        for &op in a.mode.phases() {
            bench.phase(op)?;
        }
        rounds += 1;
        if a.zero_copy && rounds == 1 {
            trips_first = Some(bench.meta_round_trips());
        }
        bar.set_position(match limit_rounds {
            Some(_) => rounds as u64,
            None => start.elapsed().as_millis() as u64,
        });
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok(bench.report(rounds, elapsed, trips_first))
}

/// A run with one key per request: every key of every server in flight at once, per phase.
struct OneKeyBench<'a> {
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
    latencies: Vec<Duration>,
    pushed: u64,
    pulled: u64,
}

impl<'a> OneKeyBench<'a> {
    /// The keys (`--keys-per-server` from the start of each server's range), worker rank 0's
    /// push of the patterns, the workers' barrier, and the pool buffers for `--zero-copy`.
    fn start(po: &'a Arc<Postoffice>, a: &'a BenchArgs) -> Result<OneKeyBench<'a>> {
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
            keys,
            patterns,
            zeros,
            bufs,
            tx,
            rx,
            latencies: Vec::new(),
            pushed: 0,
            pulled: 0,
        })
    }

    /// One phase of a round: `op` on every key at once, then every completion checked.
    fn phase(&mut self, op: Op) -> Result<()> {
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
        let timeout = self.po.config().timeout;
        let (i, at, r) = self.rx.recv_timeout(timeout).map_err(|_| {
            Error::Timeout(format!(
                "bench: a request did not complete within {:.0} s (PS_TIMEOUT)",
                timeout.as_secs_f64()
            ))
        })?;
        let got = r?;
        self.latencies.push(at - issued[i]);
        let len = self.a.len;
        if op.pushes() {
            self.pushed += len as u64;
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
            self.pulled += len as u64;
        }
        if let Got::Buf(b) = got {
            self.bufs[i] = Some(b);
        }
        Ok(())
    }

    /// Meta-data round trips of the rendezvous so far, all keys together.
    fn meta_round_trips(&self) -> u64 {
        self.keys.iter().map(|&k| self.kv.meta_round_trips(k)).sum()
    }

    /// The report of `rounds` rounds in `elapsed`; `trips_first`: the meta-data round trips
    /// after round 1 (`--zero-copy`).
    fn report(self, rounds: usize, elapsed: Duration, trips_first: Option<u64>) -> BenchReport {
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
            latencies: self.latencies,
            pushed: self.pushed,
            pulled: self.pulled,
            elapsed,
        };
        BenchReport {
            zero_copy: self.a.zero_copy,
            meta_round_trips_first,
            meta_round_trips_after,
            ..BenchReport::of(self.po, self.a, m)
        }
    }
}

impl BenchReport {
    /// The figures of a run (no rendezvous or many-keys figures).
    fn of(po: &Postoffice, a: &BenchArgs, mut m: Measured) -> BenchReport {
        let counted = match a.mode {
            Mode::PushPull => m.pushed,
            _ => m.pushed + m.pulled,
        };
        let (sent_bytes, received_bytes) = po.payload_bytes();
        BenchReport {
            mode: a.mode,
            worker: po.my_rank(),
            len: a.len,
            keys: m.keys,
            rounds: m.rounds,
            requests: m.latencies.len(),
            bytes_pushed: m.pushed,
            bytes_pulled: m.pulled,
            seconds: m.elapsed.as_secs_f64(),
            goodput_gbps: gbps(counted, m.elapsed),
            p50_ms: percentile(&mut m.latencies, 0.5).as_secs_f64() * 1e3,
            p99_ms: percentile(&mut m.latencies, 0.99).as_secs_f64() * 1e3,
            verified: true,
            zero_copy: false,
            meta_round_trips_first: None,
            meta_round_trips_after: None,
            keys_per_request: None,
            keys_per_s: None,
            memcpy_keys_per_s: None,
            sent_bytes,
            received_bytes,
        }
    }
}

fn progress_bar(rounds: Option<usize>, time: Duration) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let (len, unit) = match rounds {
        Some(n) => (n as u64, "rounds"),
        None => (time.as_millis() as u64, "ms"),
    };
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template(&format!("bench {{bar:40}} {{pos}}/{{len}} {unit}"))
    {
        bar.set_style(style);
    }
    bar
}

impl BenchReport {
    /// One line of text.
    pub fn text(&self) -> String {
        let rv = match (self.meta_round_trips_first, self.meta_round_trips_after) {
            (Some(f), Some(a)) => format!(", zero-copy: meta-data round trips per key {f:.2} in round 1, {a:.2} per pull after"),
            (Some(f), None) => format!(", zero-copy: meta-data round trips per key {f:.2} in round 1"),
            _ => String::new(),
        };
        let many = match (self.keys_per_s, self.memcpy_keys_per_s) {
            (Some(k), Some(m)) => format!(
                ", {:.2} M keys/s (memcpy of the same bytes: {:.1} M keys/s, ratio {:.3})",
                k / 1e6,
                m / 1e6,
                k / m
            ),
            _ => String::new(),
        };
        format!(
            "bench {:?} worker {}: {} B x {} keys, {} rounds, {} requests in {:.2} s: goodput {:.2} Gbit/s, latency p50 {:.3} ms p99 {:.3} ms{many}, pulled bytes verified{rv}",
            self.mode, self.worker, self.len, self.keys, self.rounds, self.requests, self.seconds,
            self.goodput_gbps, self.p50_ms, self.p99_ms
        )
    }
}
