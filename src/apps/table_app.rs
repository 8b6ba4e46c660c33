//! `table`: a deterministic stream of pushes into the servers' embedding table, for checks and
//! measurements — rows per second through the network, the memory a server's table takes
//! under a stream of new keys, what a checkpoint costs on the table path, and a digest of the
//! table at the end (equal digests: equal tables, bit for bit).
//!
//! Round `r` of worker `w` pushes one gradient row per key for `--keys` keys (a push-pull, so
//! the rows after the step come back), sorted and unique as the worker API wants them:
//! - with `--universe U`, keys drawn from `U` ranks (Zipf with exponent `--zipf`, or uniform
//!   with 0) by a counter-based hash of (seed, worker, round, draw), so every run is the same;
//! - with `--universe 0`, `--keys` ranks never seen before each round (a stream of new keys).
//!
//! Rank `r`'s key is `fmix64(r ^ seed)`, spread over the servers' key ranges. Gradient values
//! are a pure function of (seed, round, key, index). With `--digest`, worker 0 pulls the rows
//! of every rank of the universe at the end (after a barrier of the workers) and prints
//! `table digest: HEX` (xxh3 of the rows' bits in rank order).

use crate::error::{Error, Result};
use crate::kv::table::admit::fmix64;
use crate::kv::{KVWorker, Key};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use std::sync::Arc;
use std::time::Instant;

/// Options of `table`.
#[derive(Clone, Debug, clap::Args)]
pub struct TableAppArgs {
    /// The table's application id (the servers' `--table app=…`).
    #[arg(long, default_value_t = 0)]
    pub app: i32,
    /// The table's dim (values per row), as its spec says.
    #[arg(long, default_value_t = 16)]
    pub dim: usize,
    /// Rounds (push-pulls) per worker.
    #[arg(long, default_value_t = 100)]
    pub rounds: u64,
    /// Keys per round (draws, before duplicates are removed, with --universe).
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    /// Ranks keys are drawn from; 0: every round new keys.
    #[arg(long, default_value_t = 100_000)]
    pub universe: u64,
    /// Zipf exponent of the draws (0: uniform).
    #[arg(long, default_value_t = 1.05)]
    pub zipf: f64,
    /// Seed of keys and gradients.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker 0 prints a digest of every rank's row at the end (needs --universe ≥ 1).
    #[arg(long)]
    pub digest: bool,
    /// Print a line every this many rounds (0: none).
    #[arg(long, default_value_t = 0)]
    pub progress: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What one worker did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TableAppReport {
    /// The worker's rank.
    pub worker: usize,
    /// Rounds done.
    pub rounds: u64,
    /// Rows pushed (keys of all rounds, after duplicates are removed).
    pub rows: u64,
    /// Seconds of the rounds.
    pub seconds: f64,
    /// Rows per second.
    pub rows_per_s: f64,
    /// xxh3 of every rank's row (worker 0 with --digest).
    pub digest: Option<String>,
}

impl TableAppReport {
    /// One line of text.
    pub fn text(&self) -> String {
        let mut s = format!(
            "worker {}: {} rounds, {} rows in {:.3} s, {:.0} rows/s",
            self.worker, self.rounds, self.rows, self.seconds, self.rows_per_s
        );
        if let Some(d) = &self.digest {
            s.push_str(&format!("\ntable digest: {d}"));
        }
        s
    }
}

/// Ranks 0..n with P(r) ∝ 1/(r+1)^s (Zipf), by inverse CDF from a table of n cumulative
/// weights; uniform (and no table) when `s` is 0.
pub struct Ranks {
    cdf: Vec<f64>,
}

impl Ranks {
    /// The table for `n` ranks and exponent `s`.
    pub fn new(n: u64, s: f64) -> Ranks {
        if s == 0.0 {
            return Ranks { cdf: Vec::new() };
        }
        let mut cdf = Vec::with_capacity(n as usize);
        let mut acc = 0.0;
        for r in 0..n {
            acc += 1.0 / ((r + 1) as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Ranks { cdf }
    }

    /// The rank of a draw `u` in [0, 1) among the `n` of [`new`](Self::new).
    pub fn rank(&self, u: f64, n: u64) -> u64 {
        if self.cdf.is_empty() {
            ((u * n as f64) as u64).min(n - 1)
        } else {
            self.cdf.partition_point(|&c| c < u) as u64
        }
    }
}

fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// The key of rank `r`.
pub fn key_of(seed: u64, r: u64) -> Key {
    fmix64(r ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The gradient of value `i` of `key` in round `round`: in [-0.5, 0.5), a pure function.
fn gradient(seed: u64, round: u64, key: Key, i: usize) -> f32 {
    let x = fmix64(key ^ fmix64(seed ^ round.wrapping_mul(0xD6E8_FEB8_6659_FD93)) ^ i as u64);
    (unit(x) - 0.5) as f32
}

/// Runs the rounds of this worker, then (worker 0 with --digest) the digest.
///
/// # Errors
/// Bad options ([`Error::InvalidArgument`]), and any request's error (a table that refuses
/// the dim names both).
pub fn run(po: &Arc<Postoffice>, a: &TableAppArgs) -> Result<TableAppReport> {
    if a.dim == 0 || a.keys == 0 {
        return Err(Error::InvalidArgument(
            "table: --dim and --keys must be ≥ 1".into(),
        ));
    }
    if a.digest && a.universe == 0 {
        return Err(Error::InvalidArgument(
            "table: --digest needs --universe ≥ 1 (the ranks whose rows it hashes)".into(),
        ));
    }
    let kv = KVWorker::<f32>::new(po, a.app, 0)?;
    let me = po.my_rank() as u64;
    let ranks = Ranks::new(a.universe, a.zipf);
    let mut keys: Vec<Key> = Vec::with_capacity(a.keys);
    let mut grads: Vec<f32> = Vec::new();
    let mut rows: Vec<f32> = Vec::new();
    let mut pushed = 0u64;
    let t0 = Instant::now();
    for round in 0..a.rounds {
        round_keys(a, &ranks, (me, po.num_workers() as u64), round, &mut keys);
        grads.clear();
        grads.extend(
            keys.iter()
                .flat_map(|&k| (0..a.dim).map(move |i| gradient(a.seed, round, k, i))),
        );
        rows.resize(grads.len(), 0.0);
        kv.push_pull_into(&keys, &grads, None, &mut rows)?;
        pushed += keys.len() as u64;
        if a.progress > 0 && (round + 1) % a.progress == 0 {
            println!("worker {me}: round {}", round + 1);
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    po.barrier(WORKER_GROUP)?;
    let digest = if a.digest && me == 0 {
        Some(digest(&kv, a)?)
    } else {
        None
    };
    Ok(TableAppReport {
        worker: me as usize,
        rounds: a.rounds,
        rows: pushed,
        seconds,
        rows_per_s: pushed as f64 / seconds.max(1e-9),
        digest,
    })
}

/// Sets `keys` to the keys worker `me` of `workers` pushes in `round`: `--keys` draws from the
/// universe's ranks, or with `--universe 0` the next `--keys` ranks never pushed before;
/// sorted and unique.
fn round_keys(
    a: &TableAppArgs,
    ranks: &Ranks,
    (me, workers): (u64, u64),
    round: u64,
    keys: &mut Vec<Key>,
) {
    keys.clear();
    if a.universe == 0 {
        let first = (round * workers + me) * a.keys as u64;
        keys.extend((first..first + a.keys as u64).map(|r| key_of(a.seed, r)));
    } else {
        let base = fmix64(a.seed ^ fmix64(me ^ fmix64(round)));
        keys.extend((0..a.keys as u64).map(|d| {
            let u = unit(fmix64(base ^ d.wrapping_mul(0xA076_1D64_78BD_642F)));
            key_of(a.seed, ranks.rank(u, a.universe))
        }));
    }
    keys.sort_unstable();
    keys.dedup();
}

/// The digest of the table: xxh3 of the bits of every rank's row, in rank order, as 16 hex
/// digits (pulled through `kv`).
///
/// # Errors
/// The pull's errors.
fn digest(kv: &KVWorker<f32>, a: &TableAppArgs) -> Result<String> {
    let all: Vec<(Key, u64)> = {
        let mut v: Vec<(Key, u64)> = (0..a.universe).map(|r| (key_of(a.seed, r), r)).collect();
        v.sort_unstable();
        v
    };
    let sorted: Vec<Key> = all.iter().map(|&(k, _)| k).collect();
    let mut vals = vec![0.0f32; sorted.len() * a.dim];
    kv.pull_into(&sorted, &mut vals)?;
    // In rank order, so the digest does not depend on how keys sort.
    let mut by_rank = vec![0u32; vals.len()];
    for (i, &(_, r)) in all.iter().enumerate() {
        let r = r as usize;
        for j in 0..a.dim {
            by_rank[r * a.dim + j] = vals[i * a.dim + j].to_bits();
        }
    }
    Ok(format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(&by_rank))
    ))
}
