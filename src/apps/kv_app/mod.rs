//! `kv-app`: ps-lite's `test_kv_app`. N keys spread over the key space, R pushes with several
//! outstanding, one pull, R push-pulls; the pulled values must equal vals × R × W after the
//! pushes and vals × 2R × W at the end, exactly (W workers push the same keys; integer-valued
//! data keeps float sums exact).

mod progress;

use crate::error::{Error, Result};
use crate::kv::{KVWorker, Key, Value};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use crate::wire::DType;
use progress::Plan;
use std::sync::Arc;
use std::time::Instant;

/// Options of `kv-app`.
#[derive(Clone, Debug, clap::Args)]
pub struct KvAppArgs {
    /// Number of keys.
    #[arg(long, default_value_t = 10000)]
    pub keys: usize,
    /// Values per key.
    #[arg(long, default_value_t = 1)]
    pub len: usize,
    /// Pushes, and then push-pulls, per worker.
    #[arg(long, default_value_t = 50)]
    pub repeat: usize,
    /// Pushes in flight at once.
    #[arg(long, default_value_t = 10)]
    pub outstanding: usize,
    /// Value type: f32, f64, i32, i64, u8, u32, u64.
    #[arg(long, default_value = "f32", value_parser = str::parse::<DType>)]
    pub dtype: DType,
    /// Pull through the zero-copy rendezvous (one request per key into pool buffers).
    #[arg(long)]
    pub zero_copy: bool,
    /// Elastic servers: worker 0 drains and adds servers while every worker pushes, one
    /// step after the other, e.g. `drain:2,add:2,drain:2` (server ranks); each step's time
    /// and bytes moved are printed. The sums stay exact whichever server holds a key. A rank
    /// past the cluster's servers names a server that joins the running job (started with
    /// `PSLITE_RANK` = that rank; it takes its share itself): `drain:R` waits until it holds
    /// keys, then drains it.
    #[arg(long, value_parser = parse_resizes, default_value = "")]
    pub resize: Resizes,
    /// Milliseconds between two `--resize` steps (and before the first).
    #[arg(long, default_value_t = 100)]
    pub resize_pause_ms: u64,
}

/// `--resize` steps: (add, server rank).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resizes(pub Vec<(bool, usize)>);

/// Parses `drain:R,add:R,...`.
///
/// # Errors
/// A text naming the step that is not `drain:RANK` or `add:RANK`.
pub fn parse_resizes(s: &str) -> std::result::Result<Resizes, String> {
    let mut out = Vec::new();
    for step in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (what, rank) = step
            .split_once(':')
            .ok_or_else(|| format!("resize step {step:?} is not drain:RANK or add:RANK"))?;
        let rank: usize = rank
            .parse()
            .map_err(|_| format!("resize step {step:?}: {rank:?} is not a server rank"))?;
        let add = match what {
            "add" => true,
            "drain" => false,
            _ => {
                return Err(format!(
                    "resize step {step:?} is not drain:RANK or add:RANK"
                ))
            }
        };
        out.push((add, rank));
    }
    Ok(Resizes(out))
}

/// Mismatch counts of the two checks (ps-lite prints them as `error: a, b`), and where the
/// time went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KvAppReport {
    /// Values differing from vals × R × W after the pushes.
    pub push_errors: usize,
    /// Values differing from vals × 2R × W after the push-pulls.
    pub push_pull_errors: usize,
    /// Keys per request.
    pub keys: usize,
    /// Pushes, and push-pulls, per worker.
    pub repeat: usize,
    /// Seconds of the push phase (R pushes, `--outstanding` in flight).
    pub push_s: f64,
    /// Seconds of the first pull.
    pub pull_s: f64,
    /// Seconds of the push-pull phase (R push-pulls, one at a time).
    pub push_pull_s: f64,
    /// Payload bytes this worker sent and received over the whole run.
    pub sent_bytes: u64,
    /// See `sent_bytes`.
    pub received_bytes: u64,
}

impl KvAppReport {
    /// One line: the phases' times and the bytes moved.
    pub fn timing(&self) -> String {
        format!(
            "{} keys: push {:.3} s ({} x), pull {:.3} s, push-pull {:.3} s ({} x); payload sent {:.1} MB, received {:.1} MB",
            self.keys,
            self.push_s,
            self.repeat,
            self.pull_s,
            self.push_pull_s,
            self.repeat,
            self.sent_bytes as f64 / 1e6,
            self.received_bytes as f64 / 1e6
        )
    }
}

/// Runs `kv-app` on this worker for the configured type.
///
/// # Errors
/// Transport and server errors; a mismatch is reported in the [`KvAppReport`], not as an error.
pub fn run(po: &Arc<Postoffice>, args: &KvAppArgs) -> Result<KvAppReport> {
    crate::with_value_type!(args.dtype,
        V => run_typed::<V>(po, args),
        None => Err(Error::InvalidArgument("kv-app needs a value type".into())))
}

fn times<V: Value>(v: V, n: usize) -> V {
    (0..n).fold(V::default(), |acc, _| acc.sum(v))
}

fn mismatches<V: Value>(got: &[V], vals: &[V], n: usize) -> usize {
    if got.len() != vals.len() {
        return vals.len().max(got.len());
    }
    got.iter()
        .zip(vals)
        .filter(|(g, v)| **g != times(**v, n))
        .count()
}

/// Pulls `keys` (`len` values each) into `out`: one classic pull, or one rendezvous pull per
/// key, all in flight at once.
fn pull_all<V: Value>(
    kv: &KVWorker<V>,
    keys: &[Key],
    len: usize,
    zero_copy: bool,
    out: &mut [V],
) -> Result<()> {
    if !zero_copy {
        return kv.pull_into(keys, out);
    }
    let (tx, rx) = crossbeam_channel::unbounded();
    for (i, &k) in keys.iter().enumerate() {
        let tx = tx.clone();
        kv.zpull(k, kv.alloc(len)?, move |r| {
            let _ = tx.send((i, r));
        })?;
    }
    let timeout = kv.postoffice().config().timing.timeout;
    for _ in keys {
        let (i, r) = rx.recv_timeout(timeout).map_err(|_| {
            Error::Timeout(format!(
                "kv-app: zero-copy pulls did not finish within {:.0} s (PS_TIMEOUT)",
                timeout.as_secs_f64()
            ))
        })?;
        let buf = r?;
        if buf.len() != len {
            return Err(Error::InvalidArgument(format!(
                "key {} came back with {} values, expected {len}",
                keys[i],
                buf.len()
            )));
        }
        out[i * len..(i + 1) * len].copy_from_slice(&buf);
    }
    Ok(())
}

/// The data every worker pushes: `nkeys` keys spread evenly over the key space, and their
/// values, `len` per key, value i being `i mod 1000 + 1`.
fn data<V: Value>(nkeys: usize, len: usize) -> (Vec<Key>, Vec<V>) {
    let step = u64::MAX / nkeys as u64;
    let keys: Vec<Key> = (0..nkeys as u64).map(|i| i * step).collect();
    let vals: Vec<V> = (0..nkeys * len)
        .map(|i| V::from_u32((i % 1000) as u32 + 1))
        .collect();
    (keys, vals)
}

fn run_typed<V: Value>(po: &Arc<Postoffice>, a: &KvAppArgs) -> Result<KvAppReport> {
    if a.keys == 0 || a.len == 0 {
        return Err(Error::InvalidArgument(
            "--keys and --len must be at least 1".into(),
        ));
    }
    let kv = KVWorker::<V>::new(po, 0, 0)?;
    let w = po.num_workers();
    let (keys, vals) = data::<V>(a.keys, a.len);
    // With checkpoints a lost worker may be replaced: progress keys tell its replacement
    // what to push (see `progress`), and the barriers its predecessor passed which phases
    // are behind.
    let plan = Plan::new(po, (&keys, &vals, a.len), po.config().checkpoint.is_some())?;
    let passed = po.inherited_barriers(WORKER_GROUP);
    let mut report = KvAppReport {
        keys: a.keys,
        repeat: a.repeat,
        ..KvAppReport::default()
    };

    let resizing = start_resizes(po, a);
    let t0 = Instant::now();
    if passed == 0 {
        let todo = to_push(&plan, &kv, (0, a.repeat), po.is_replacement())?;
        push_phase(&kv, &plan, &todo, a.outstanding)?;
    }
    report.push_s = t0.elapsed().as_secs_f64();
    po.barrier(WORKER_GROUP)?;
    let mut rets = vec![V::default(); vals.len()];
    if passed < 2 {
        // Nobody pushes again before the next barrier: the check holds for a replacement too.
        let t0 = Instant::now();
        pull_all(&kv, &keys, a.len, a.zero_copy, &mut rets)?;
        report.pull_s = t0.elapsed().as_secs_f64();
        report.push_errors = mismatches(&rets, &vals, a.repeat * w);
    }
    po.barrier(WORKER_GROUP)?;

    let t0 = Instant::now();
    if passed < 3 {
        let replacing = po.is_replacement() && passed == 2;
        let todo = to_push(&plan, &kv, (a.repeat, 2 * a.repeat), replacing)?;
        let last = push_pull_phase(&kv, &plan, &todo)?;
        if w == 1 && !po.is_replacement() {
            report.push_pull_errors = mismatches(&plan.data_values(&last), &vals, 2 * a.repeat);
        }
    }
    report.push_pull_s = t0.elapsed().as_secs_f64();
    finish_resizes(po, a, resizing)?;
    po.barrier(WORKER_GROUP)?;
    pull_all(&kv, &keys, a.len, a.zero_copy, &mut rets)?;
    report.push_pull_errors += mismatches(&rets, &vals, 2 * a.repeat * w);
    (report.sent_bytes, report.received_bytes) = po.payload_bytes();
    Ok(report)
}

/// On worker 0 with `--resize`: a thread that makes the steps one after the other, pausing
/// `--resize-pause-ms` before each, and prints how each settled.
fn start_resizes(
    po: &Arc<Postoffice>,
    a: &KvAppArgs,
) -> Option<std::thread::JoinHandle<Result<()>>> {
    if po.my_rank() != 0 || a.resize.0.is_empty() {
        return None;
    }
    let (po, steps) = (po.clone(), a.resize.0.clone());
    let servers = po.num_servers();
    let pause = std::time::Duration::from_millis(a.resize_pause_ms);
    Some(std::thread::spawn(move || {
        for (add, rank) in steps {
            std::thread::sleep(pause);
            let id = crate::wire::Node::server_id(rank);
            let now = po.num_servers();
            if rank > now {
                return Err(Error::InvalidArgument(format!(
                    "kv-app --resize: server rank {rank}, but the cluster has {now} servers (a \
                     server joining the running job takes rank {now})"
                )));
            }
            if rank >= servers {
                if add {
                    return Err(Error::InvalidArgument(format!(
                        "kv-app --resize add:{rank}: the cluster started with {servers} \
                         servers; a server joining the running job takes its share itself, so \
                         name only drain:{rank} for it"
                    )));
                }
                wait_until_holding(&po, id)?;
            }
            let r = po.resize(id, add)?;
            println!(
                "kv-app: {} server rank {rank}: key layout {} settled in {:.1} ms, {} bytes of rows moved",
                if add { "added" } else { "drained" },
                r.epoch,
                r.took.as_secs_f64() * 1e3,
                r.bytes
            );
        }
        Ok(())
    }))
}

/// Waits until server `id`, one that joins the running job, holds keys (it joined and took
/// its share, and the move settled), at most `PS_TIMEOUT`.
///
/// # Errors
/// [`Error::Timeout`] naming the server.
fn wait_until_holding(po: &Postoffice, id: crate::wire::NodeId) -> Result<()> {
    let timeout = po.config().timing.timeout;
    let start = Instant::now();
    while !(po.layout().owners().contains(&id) && po.layout_settled()) {
        if start.elapsed() >= timeout {
            return Err(Error::Timeout(format!(
                "kv-app --resize: {} did not join and take keys within {:.0} s (PS_TIMEOUT)",
                crate::wire::Node::describe(id),
                timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    println!(
        "kv-app: {} joined and holds keys after {:.1} s",
        crate::wire::Node::describe(id),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Waits for the `--resize` thread (worker 0), then prints how many of this worker's parts
/// were sent again.
///
/// # Errors
/// The resize's error.
fn finish_resizes(
    po: &Postoffice,
    a: &KvAppArgs,
    resizing: Option<std::thread::JoinHandle<Result<()>>>,
) -> Result<()> {
    if let Some(r) = resizing {
        r.join()
            .map_err(|_| Error::InvalidArgument("kv-app: the resize thread panicked".into()))??;
    }
    if !a.resize.0.is_empty() {
        println!(
            "kv-app: worker {}: {} request parts answered moved or not yet and sent again",
            po.my_rank(),
            po.metrics().membership.parts_redirected.get()
        );
    }
    Ok(())
}

/// Pushes still to make to each server in a phase that takes this worker's pushes applied
/// there from `before` to `total`: `total − before` each, or, for a worker replacing a lost
/// one in that phase (`replacing`), `total` less what the servers applied of its
/// predecessor's ([`Plan::applied`]).
///
/// # Errors
/// As [`Plan::applied`].
fn to_push<V: Value>(
    plan: &Plan<V>,
    kv: &KVWorker<V>,
    (before, total): (usize, usize),
    replacing: bool,
) -> Result<Vec<usize>> {
    let servers = plan.by_server.len();
    if !replacing || plan.progress.is_empty() {
        return Ok(vec![total - before; servers]);
    }
    let applied = plan.applied(kv, total)?;
    tracing::info!(
        "kv-app: the servers applied {applied:?} of the lost worker's pushes; pushing the rest"
    );
    Ok(applied.iter().map(|&n| total - n).collect())
}

/// The requests of a phase: the keys of every server while each still needs pushes (all of
/// them, in one request, when every server needs the same number), as (keys, their values,
/// count).
fn rounds<'p, V>(plan: &'p Plan<V>, todo: &[usize]) -> Vec<(&'p [Key], &'p [V], usize)> {
    let of = |r: std::ops::Range<usize>| {
        let vals = &plan.vals[r.start * plan.len..r.end * plan.len];
        (&plan.keys[r], vals)
    };
    match todo.first() {
        Some(&n) if todo.iter().all(|&t| t == n) => {
            let (keys, vals) = of(0..plan.keys.len());
            vec![(keys, vals, n)]
        }
        _ => plan
            .by_server
            .iter()
            .zip(todo)
            .map(|(r, &n)| {
                let (keys, vals) = of(r.clone());
                (keys, vals, n)
            })
            .collect(),
    }
}

/// `todo[s]` pushes of server `s`'s keys, `outstanding` in flight at once.
fn push_phase<V: Value>(
    kv: &KVWorker<V>,
    plan: &Plan<V>,
    todo: &[usize],
    outstanding: usize,
) -> Result<()> {
    let mut ts = std::collections::VecDeque::new();
    for (keys, vals, n) in rounds(plan, todo) {
        for _ in 0..n {
            ts.push_back(kv.push(keys, vals, None)?);
            if ts.len() > outstanding {
                if let Some(t) = ts.pop_front() {
                    kv.wait(t)?;
                }
            }
        }
    }
    ts.into_iter().try_for_each(|t| kv.wait(t))
}

/// `todo[s]` push-pulls of server `s`'s keys, one at a time; returns the values of every key
/// the last whole one (of all keys) pulled, empty if none.
fn push_pull_phase<V: Value>(kv: &KVWorker<V>, plan: &Plan<V>, todo: &[usize]) -> Result<Vec<V>> {
    let mut last = Vec::new();
    for (keys, vals, n) in rounds(plan, todo) {
        for _ in 0..n {
            let t = kv.push_pull(keys, vals, None)?;
            last = kv.take_pulled(t)?.vals;
        }
    }
    Ok(last)
}
