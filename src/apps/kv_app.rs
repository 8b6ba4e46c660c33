//! `kv-app`: ps-lite's `test_kv_app`. N keys spread over the key space, R pushes with several
//! outstanding, one pull, R push-pulls; the pulled values must equal vals × R × W after the
//! pushes and vals × 2R × W at the end, exactly (W workers push the same keys; integer-valued
//! data keeps float sums exact).

use crate::error::{Error, Result};
use crate::kv::{KVWorker, Key, Value};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use crate::wire::DType;
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
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    pub dtype: DType,
    /// Pull through the zero-copy rendezvous (one request per key into pool buffers).
    #[arg(long)]
    pub zero_copy: bool,
}

/// Parses a value type name.
///
/// # Errors
/// A text listing the accepted names.
pub fn parse_dtype(s: &str) -> std::result::Result<DType, String> {
    Ok(match s {
        "f32" => DType::F32,
        "f64" => DType::F64,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "u8" => DType::U8,
        "u32" => DType::U32,
        "u64" => DType::U64,
        _ => {
            return Err(format!(
                "unknown value type {s:?}: expected f32, f64, i32, i64, u8, u32 or u64"
            ))
        }
    })
}

/// Mismatch counts of the two checks (ps-lite prints them as `error: a, b`), and where the
/// time went.
#[derive(Clone, Copy, Debug, PartialEq)]
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
    match args.dtype {
        DType::F32 => run_typed::<f32>(po, args),
        DType::F64 => run_typed::<f64>(po, args),
        DType::I32 => run_typed::<i32>(po, args),
        DType::I64 => run_typed::<i64>(po, args),
        DType::U8 => run_typed::<u8>(po, args),
        DType::U32 => run_typed::<u32>(po, args),
        DType::U64 => run_typed::<u64>(po, args),
        DType::None => Err(Error::InvalidArgument("kv-app needs a value type".into())),
    }
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
    let timeout = kv.postoffice().config().timeout;
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

fn run_typed<V: Value>(po: &Arc<Postoffice>, a: &KvAppArgs) -> Result<KvAppReport> {
    if a.keys == 0 || a.len == 0 {
        return Err(Error::InvalidArgument(
            "--keys and --len must be at least 1".into(),
        ));
    }
    let kv = KVWorker::<V>::new(po, 0, 0)?;
    let w = po.num_workers();
    let step = u64::MAX / a.keys as u64;
    let keys: Vec<Key> = (0..a.keys as u64).map(|i| i * step).collect();
    let vals: Vec<V> = (0..a.keys * a.len)
        .map(|i| V::from_u32((i % 1000) as u32 + 1))
        .collect();

    let t0 = Instant::now();
    let mut ts = Vec::with_capacity(a.repeat);
    for i in 0..a.repeat {
        ts.push(kv.push(&keys, &vals, None)?);
        if i >= a.outstanding {
            kv.wait(ts[i - a.outstanding])?;
        }
    }
    for &t in &ts[ts.len().saturating_sub(a.outstanding)..] {
        kv.wait(t)?;
    }
    let push_s = t0.elapsed().as_secs_f64();
    po.barrier(WORKER_GROUP)?;
    let mut rets = vec![V::default(); vals.len()];
    let t0 = Instant::now();
    pull_all(&kv, &keys, a.len, a.zero_copy, &mut rets)?;
    let pull_s = t0.elapsed().as_secs_f64();
    let push_errors = mismatches(&rets, &vals, a.repeat * w);
    po.barrier(WORKER_GROUP)?;

    let t0 = Instant::now();
    let mut last = Vec::new();
    for _ in 0..a.repeat {
        let t = kv.push_pull(&keys, &vals, None)?;
        last = kv.take_pulled(t)?.vals;
    }
    let push_pull_s = t0.elapsed().as_secs_f64();
    let mut push_pull_errors = if w == 1 {
        mismatches(&last, &vals, 2 * a.repeat)
    } else {
        0
    };
    po.barrier(WORKER_GROUP)?;
    pull_all(&kv, &keys, a.len, a.zero_copy, &mut rets)?;
    push_pull_errors += mismatches(&rets, &vals, 2 * a.repeat * w);
    let (sent_bytes, received_bytes) = po.payload_bytes();
    Ok(KvAppReport {
        push_errors,
        push_pull_errors,
        keys: a.keys,
        repeat: a.repeat,
        push_s,
        pull_s,
        push_pull_s,
        sent_bytes,
        received_bytes,
    })
}
