//! `bench`: BytePS's `test_benchmark` modes over `u8` values of `--len` bytes, one request per
//! key, every key of every server in flight at once, round after round.
//!
//! Counting (as BytePS): goodput = value bytes of completed requests × 8 / elapsed, where a
//! push, a pull and a push-pull each count `len` bytes once (a push-pull moves 2 × len on the
//! wire); push-then-pull counts its push and its pull. Latency is per request, from the call to
//! its completion callback.
//!
//! With `--keys-per-request N` each request carries N keys instead (see [`many`]), and the
//! report adds keys/s and the `memcpy` reference. The one-key run is in `one_key.rs`.
//!
//! Checking: worker rank 0 first pushes a known pattern for every key; later pushes carry zeros,
//! so the servers' sums stay equal to the pattern, and every pulled value is compared with it
//! byte for byte. Any difference fails the run.

pub mod many;
mod one_key;
pub mod progress;

use super::stats::{gbps, percentile, quantiles};
use crate::error::{Error, Result};
use crate::kv::Op;
use crate::postoffice::Postoffice;
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
    /// Seconds of rounds run first and left out of every figure: what a server does once per
    /// run (touching fresh memory, e.g. its first checkpoint files) is not counted, only the
    /// steady state after it. One key per request, without --zero-copy.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub warmup: f64,
    /// Print one JSON object for the run on its own line; with FILE, append it to FILE
    /// instead (one line per worker and run, JSON Lines: what `scripts/plot-bench` draws).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<String>,
    /// Pulls go through the zero-copy rendezvous into pool buffers (pull and push-then-pull).
    #[arg(long)]
    pub zero_copy: bool,
    /// Many keys per request: N keys spread over the key space, --len bytes each, one request
    /// per phase and round (dmlc's test_kv_app_benchmark); reports keys/s and a memcpy reference.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(u32::MAX as u64)))]
    pub keys_per_request: Option<u64>,
}

/// Figures of one run. Serialised (`--json`, the launcher's report line) as one flat JSON
/// object: the sub-structs' fields appear in it as if they were this struct's own, in order.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// What ran: mode, worker, value size, keys.
    #[serde(flatten)]
    pub run: BenchRun,
    /// Rounds, requests, bytes, time, goodput and latency of the measured rounds.
    #[serde(flatten)]
    pub figures: BenchFigures,
    /// Every pulled byte equalled the pattern.
    pub verified: bool,
    /// The zero-copy rendezvous' figures (`--zero-copy`).
    #[serde(flatten)]
    pub rendezvous: RendezvousFigures,
    /// The many-keys figures (`--keys-per-request`).
    #[serde(flatten)]
    pub many_keys: ManyKeysFigures,
    /// Goodput of the `--warmup` rounds alone (left out of every other figure), Gbit/s.
    pub warmup_gbps: Option<f64>,
    /// This worker's payload bytes over the whole run, and the van that carried them.
    #[serde(flatten)]
    pub traffic: Traffic,
    /// The measured requests' latency distribution: `[quantile, milliseconds]` pairs at
    /// quantiles 0, 0.01, …, 0.99, 0.995, 0.999 and 1 (nearest rank).
    pub latency_ms_quantiles: Vec<[f64; 2]>,
    /// Requests this worker's `KVWorker` sent over the whole run, set-up and warm-up included
    /// (not rendezvous pulls, nor many-keys runs: `None`): what the worker's
    /// `pslite_request_seconds_count` adds up to over its servers.
    pub requests_total: Option<usize>,
}

/// What a bench run ran (part of [`BenchReport`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRun {
    /// Mode.
    pub mode: Mode,
    /// Worker rank.
    pub worker: usize,
    /// Bytes per value.
    pub len: usize,
    /// Keys (all servers).
    pub keys: usize,
}

/// The measured rounds' figures (part of [`BenchReport`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchFigures {
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
}

/// The zero-copy rendezvous' figures (part of [`BenchReport`]; `false` and `None` without
/// `--zero-copy`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RendezvousFigures {
    /// Pulls went through the rendezvous.
    pub zero_copy: bool,
    /// Meta-data round trips per key in the first round (rendezvous only; 1 expected).
    pub meta_round_trips_first: Option<f64>,
    /// Meta-data round trips per pull after the first round (rendezvous only; 0 expected).
    pub meta_round_trips_after: Option<f64>,
}

/// The many-keys figures (part of [`BenchReport`]; `None` without `--keys-per-request`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ManyKeysFigures {
    /// Keys per request (`--keys-per-request`; `None`: one key per request).
    pub keys_per_request: Option<usize>,
    /// Keys of completed requests per second (`--keys-per-request` only).
    pub keys_per_s: Option<f64>,
    /// Keys per second of one `memcpy` of the same key and value bytes, measured in this run.
    pub memcpy_keys_per_s: Option<f64>,
}

/// A worker's payload traffic over a whole run (part of [`BenchReport`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Traffic {
    /// Payload bytes (data frames, not headers) this worker sent over the whole run, set-up
    /// included.
    pub sent_bytes: u64,
    /// Payload bytes this worker received over the whole run.
    pub received_bytes: u64,
    /// The van: `zmq` or `rdma`.
    pub van: &'static str,
}

/// Runs the benchmark on this worker.
///
/// # Errors
/// Transport or server errors, and [`Error::Remote`]-free mismatches reported as
/// [`Error::InvalidArgument`] naming the key that came back wrong.
pub fn run(po: &Arc<Postoffice>, a: &BenchArgs) -> Result<BenchReport> {
    check_sizes_and_warmup(a)?;
    if let Some(n) = a.keys_per_request {
        return many::run(po, a, n as usize);
    }
    if a.zero_copy && !matches!(a.mode, Mode::Pull | Mode::PushThenPull) {
        return Err(Error::InvalidArgument(
            "--zero-copy applies to the pull modes: pull, push-then-pull".into(),
        ));
    }
    let mut bench = one_key::OneKeyBench::start(po, a)?;
    let warmup_gbps = warm_up(po, a, &mut bench)?;
    let (rounds, elapsed, trips_first) = measure(po, a, &mut bench)?;
    Ok(BenchReport {
        warmup_gbps,
        ..bench.report(rounds, elapsed, trips_first)
    })
}

/// Checks the options every kind of run shares: `--len` and `--keys-per-server` at least 1,
/// `--warmup` only for one-key runs without `--zero-copy`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the options.
fn check_sizes_and_warmup(a: &BenchArgs) -> Result<()> {
    if a.len == 0 || a.keys_per_server == 0 {
        return Err(Error::InvalidArgument(
            "--len and --keys-per-server must be at least 1".into(),
        ));
    }
    if a.warmup > 0.0 && (a.zero_copy || a.keys_per_request.is_some()) {
        return Err(Error::InvalidArgument(
            "--warmup applies to one-key runs without --zero-copy".into(),
        ));
    }
    Ok(())
}

/// Runs whole rounds for `--warmup` seconds, forgets their counts, and waits for every worker
/// at a barrier so that the measured rounds start together; returns the warm-up's goodput in
/// Gbit/s (`None` without `--warmup`).
///
/// # Errors
/// As [`one_key::OneKeyBench::phase`]; the barrier's errors.
fn warm_up(
    po: &Arc<Postoffice>,
    a: &BenchArgs,
    bench: &mut one_key::OneKeyBench<'_>,
) -> Result<Option<f64>> {
    if a.warmup <= 0.0 {
        return Ok(None);
    }
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < a.warmup {
        for &op in a.mode.phases() {
            bench.phase(op)?;
        }
    }
    let (pushed, pulled) = bench.forget_counts();
    let warmup_gbps = gbps(counted(a.mode, pushed, pulled), warm.elapsed());
    // Every worker's measured rounds start together.
    po.barrier(crate::postoffice::WORKER_GROUP)?;
    Ok(Some(warmup_gbps))
}

/// Runs the measured rounds (`--repeat` of them, else whole rounds until `--seconds`, default
/// 10, have passed) with the progress bar; returns the rounds run, their time, and with
/// `--zero-copy` the meta-data round trips of round 1 (all keys together).
///
/// # Errors
/// As [`one_key::OneKeyBench::phase`].
fn measure(
    po: &Postoffice,
    a: &BenchArgs,
    bench: &mut one_key::OneKeyBench<'_>,
) -> Result<(usize, Duration, Option<u64>)> {
    let limit_rounds = a.repeat;
    let limit_time = Duration::from_secs_f64(a.seconds.unwrap_or(10.0).max(0.0));
    let mut bar = progress::Progress::new(po.my_rank(), limit_rounds, limit_time);
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
        bar.set(match limit_rounds {
            Some(_) => rounds as u64,
            None => start.elapsed().as_millis() as u64,
        });
    }
    let elapsed = start.elapsed();
    bar.finish();
    Ok((rounds, elapsed, trips_first))
}

/// The value bytes a run's goodput counts: a push-pull's once, push-then-pull's both halves.
fn counted(mode: Mode, pushed: u64, pulled: u64) -> u64 {
    match mode {
        Mode::PushPull => pushed,
        _ => pushed + pulled,
    }
}

impl BenchReport {
    /// The figures of a run (no rendezvous or many-keys figures).
    fn of(po: &Postoffice, a: &BenchArgs, mut m: Measured) -> BenchReport {
        let (sent_bytes, received_bytes) = po.payload_bytes();
        BenchReport {
            run: BenchRun {
                mode: a.mode,
                worker: po.my_rank(),
                len: a.len,
                keys: m.keys,
            },
            figures: BenchFigures {
                rounds: m.rounds,
                requests: m.latencies.len(),
                bytes_pushed: m.pushed,
                bytes_pulled: m.pulled,
                seconds: m.elapsed.as_secs_f64(),
                goodput_gbps: gbps(counted(a.mode, m.pushed, m.pulled), m.elapsed),
                p50_ms: percentile(&mut m.latencies, 0.5).as_secs_f64() * 1e3,
                p99_ms: percentile(&mut m.latencies, 0.99).as_secs_f64() * 1e3,
            },
            verified: true,
            rendezvous: RendezvousFigures::default(),
            many_keys: ManyKeysFigures::default(),
            warmup_gbps: None,
            traffic: Traffic {
                sent_bytes,
                received_bytes,
                van: po.config().node.van.name(),
            },
            latency_ms_quantiles: quantiles(&mut m.latencies),
            requests_total: None,
        }
    }
}

impl BenchReport {
    /// One line of text.
    pub fn text(&self) -> String {
        let zc = &self.rendezvous;
        let rv = match (zc.meta_round_trips_first, zc.meta_round_trips_after) {
            (Some(f), Some(a)) => format!(", zero-copy: meta-data round trips per key {f:.2} in round 1, {a:.2} per pull after"),
            (Some(f), None) => format!(", zero-copy: meta-data round trips per key {f:.2} in round 1"),
            _ => String::new(),
        };
        let many = match (self.many_keys.keys_per_s, self.many_keys.memcpy_keys_per_s) {
            (Some(k), Some(m)) => format!(
                ", {:.2} M keys/s (memcpy of the same bytes: {:.1} M keys/s, ratio {:.3})",
                k / 1e6,
                m / 1e6,
                k / m
            ),
            _ => String::new(),
        };
        let warm = self
            .warmup_gbps
            .map(|g| format!(" (after a warm-up at {g:.2} Gbit/s)"))
            .unwrap_or_default();
        let (r, f) = (&self.run, &self.figures);
        format!(
            "bench {:?} worker {}: {} B x {} keys, {} rounds, {} requests in {:.2} s: goodput {:.2} Gbit/s{warm}, latency p50 {:.3} ms p99 {:.3} ms{many}, pulled bytes verified{rv}",
            r.mode, r.worker, r.len, r.keys, f.rounds, f.requests, f.seconds,
            f.goodput_gbps, f.p50_ms, f.p99_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_report_is_one_flat_object_in_the_documented_order() {
        let report = BenchReport {
            run: BenchRun {
                mode: Mode::PushPull,
                worker: 0,
                len: 4096,
                keys: 8,
            },
            figures: BenchFigures {
                rounds: 2,
                requests: 16,
                bytes_pushed: 65536,
                bytes_pulled: 65536,
                seconds: 0.5,
                goodput_gbps: 1.0,
                p50_ms: 0.25,
                p99_ms: 0.5,
            },
            verified: true,
            rendezvous: RendezvousFigures::default(),
            many_keys: ManyKeysFigures::default(),
            warmup_gbps: None,
            traffic: Traffic {
                sent_bytes: 1,
                received_bytes: 2,
                van: "zmq",
            },
            latency_ms_quantiles: vec![[0.0, 0.1]],
            requests_total: Some(24),
        };
        assert_eq!(
            serde_json::to_string(&report).expect("serialises"),
            r#"{"mode":"push-pull","worker":0,"len":4096,"keys":8,"rounds":2,"requests":16,"bytes_pushed":65536,"bytes_pulled":65536,"seconds":0.5,"goodput_gbps":1.0,"p50_ms":0.25,"p99_ms":0.5,"verified":true,"zero_copy":false,"meta_round_trips_first":null,"meta_round_trips_after":null,"keys_per_request":null,"keys_per_s":null,"memcpy_keys_per_s":null,"warmup_gbps":null,"sent_bytes":1,"received_bytes":2,"van":"zmq","latency_ms_quantiles":[[0.0,0.1]],"requests_total":24}"#
        );
        assert_eq!(
            report.text(),
            "bench PushPull worker 0: 4096 B x 8 keys, 2 rounds, 16 requests in 0.50 s: goodput 1.00 Gbit/s, latency p50 0.250 ms p99 0.500 ms, pulled bytes verified"
        );
    }
}
