//! A node's configuration read from its variables: the role and the scheduler's address
//! first, then the fields each variable gives on its own, then those that depend on others;
//! every variable's reader is here.

use super::vars::Vars;
use super::{
    address, auth, bounds, checkpoint, Bounds, Cluster, Config, KvConfig, MetricsEndpoint, Resend,
    ThisNode, Timing, VanType, ZeroCopy, DEFAULT_KEY_CACHE_KEYS, DEFAULT_POOL_BYTES,
    DEFAULT_RESEND_TIMEOUT, DEFAULT_TIMEOUT, LOSS_MARGIN,
};
use crate::error::{Error, Result};
use crate::wire::Role;
use std::time::Duration;

/// A node of `role`'s configuration as its own variables give it, the scheduler at `root`:
/// the fields in the order they are checked (the first error is the one reported), those
/// that depend on others ([`settle`]) at their defaults.
pub(super) fn read_fields<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    role: Role,
    (root_uri, root_port): &(String, u16),
) -> Result<Config> {
    let count = |var| vars.required_parsed(var, "a whole number ≥ 1", |&n: &usize| n >= 1);
    let secs = |var, default| vars.seconds(var).map(|s| s.unwrap_or(default));
    // In the order they are checked: the first error is the one reported.
    let cluster = Cluster {
        root_uri: root_uri.clone(),
        root_port: *root_port,
        num_servers: count("DMLC_NUM_SERVER")?,
        num_workers: count("DMLC_NUM_WORKER")?,
    };
    let van = van_type(vars)?;
    let verbose = vars
        .parsed("PS_VERBOSE", "0, 1, 2 or 3", |&v: &u8| v <= 3)?
        .unwrap_or(0);
    let timing = Timing {
        timeout: secs("PS_TIMEOUT", DEFAULT_TIMEOUT)?,
        heartbeat_interval: secs("PS_HEARTBEAT_INTERVAL", Duration::from_secs(1))?,
        heartbeat_timeout: secs("PS_HEARTBEAT_TIMEOUT", Duration::from_secs(10))?,
    };
    let rank_hint = vars.parsed("PSLITE_RANK", "a whole number ≥ 0", |_: &u32| true)?;
    let zero_copy = ZeroCopy {
        data_validation: data_validation(vars)?,
        pool_bytes: pool_bytes(vars)?,
    };
    let kv = KvConfig {
        key_cache_keys: key_cache_keys(vars)?,
        table_threads: table_threads(vars)?,
    };
    let resend = Resend {
        timeout: resend_timeout(vars)?,
        drop_msg_percent: vars.ranged("PS_DROP_MSG", 0, 99)?.unwrap_or(0),
    };
    let checkpoint = checkpoint::checkpoint(vars)?;
    let node = ThisNode {
        host: address::node_host(vars, root_uri)?,
        van,
        rank_hint,
    };
    let metrics = metrics_endpoint(vars)?;
    Ok(Config {
        role,
        cluster,
        node,
        verbose,
        timing,
        zero_copy,
        kv,
        resend,
        checkpoint,
        auth: None,
        bounds: Bounds::default_for(1, 1),
        metrics,
    })
}

/// `c` with the fields that depend on others: the default timeout (on the loss horizon), the
/// bounds (on the node counts) and the secret (on where this node listens and the scheduler
/// at `root` is).
pub(super) fn settle<F: Fn(&str) -> Option<String>>(
    mut c: Config,
    vars: &Vars<'_, F>,
    (root_uri, root_port): &(String, u16),
) -> Result<Config> {
    // The default waits out a loss and its replacement: a wait on a node that died then ends
    // with the scheduler's verdict, not a timeout blaming whoever was slow.
    if vars.seconds("PS_TIMEOUT")?.is_none() {
        c.timing.timeout = c.timing.timeout.max(c.loss_horizon() + LOSS_MARGIN);
    }
    c.bounds = bounds::bounds(vars, c.cluster.num_servers, c.cluster.num_workers)?;
    // Whether a token is needed depends on where this node listens.
    c.auth = auth::secret(
        vars,
        (root_uri, *root_port),
        &c.node.host,
        (c.role, c.node.rank_hint),
    )?;
    Ok(c)
}

/// The van (`DMLC_PS_VAN_TYPE`, default zmq).
fn van_type<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<VanType> {
    use VanType::{Rdma, Zmq};
    let van = vars.choice(
        "DMLC_PS_VAN_TYPE",
        &[("zmq", Zmq), ("", Zmq), ("rdma", Rdma), ("ibverbs", Rdma)],
        "zmq or rdma (also ibverbs)",
    )?;
    Ok(van.unwrap_or(Zmq))
}

/// Whether data frames are checked (`PS_DATA_VALIDATION`, default off).
fn data_validation<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<bool> {
    let on = vars.choice(
        "PS_DATA_VALIDATION",
        &[("0", false), ("", false), ("1", true)],
        "0 or 1",
    )?;
    Ok(on.unwrap_or(false))
}

/// The buffer pool's size in bytes (`PS_POOL_BYTES`).
fn pool_bytes<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<usize> {
    let bytes = vars.parsed(
        "PS_POOL_BYTES",
        "a number of bytes ≥ 4096",
        |&b: &usize| b >= 4096,
    )?;
    Ok(bytes.unwrap_or(DEFAULT_POOL_BYTES))
}

/// The threads a table splits a large request among (`PS_TABLE_THREADS`).
fn table_threads<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<usize> {
    let threads = vars.parsed("PS_TABLE_THREADS", "a whole number ≥ 1", |&n: &usize| {
        n >= 1
    })?;
    Ok(threads.unwrap_or_else(default_table_threads))
}

/// Where the metrics server listens (`PS_METRICS_PORT`, `PS_METRICS_HOST`).
fn metrics_endpoint<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<MetricsEndpoint> {
    Ok(MetricsEndpoint {
        port: vars.parsed("PS_METRICS_PORT", "a port number 0–65535", |_: &u16| true)?,
        host: metrics_host(vars),
    })
}

/// The metrics endpoint's host (`PS_METRICS_HOST`, trimmed; empty when unset or blank).
fn metrics_host<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> String {
    vars.raw("PS_METRICS_HOST")
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_default()
}

/// `DMLC_ROLE`, when set, must be the role of this binary.
pub(super) fn check_role<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    role: Role,
) -> Result<()> {
    match vars.raw("DMLC_ROLE") {
        Some(r) if r.trim() != role.name() => {
            let want = role.name();
            Err(Error::Config(format!(
                "DMLC_ROLE={r:?} but this binary runs the {want} role: \
                 expected DMLC_ROLE unset or {want:?}"
            )))
        }
        _ => Ok(()),
    }
}

/// The scheduler's address and port (`DMLC_PS_ROOT_URI`, `DMLC_PS_ROOT_PORT`).
pub(super) fn scheduler_address<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
) -> Result<(String, u16)> {
    const HOST: &str = "an IP address or host name, e.g. 127.0.0.1";
    let uri = vars.required("DMLC_PS_ROOT_URI", HOST)?;
    if uri.trim().is_empty() || uri.contains(char::is_whitespace) {
        return Err(vars.invalid("DMLC_PS_ROOT_URI", &uri, HOST));
    }
    let port = vars.required_parsed(
        "DMLC_PS_ROOT_PORT",
        "a port number 1–65535",
        |&p: &u16| p > 0,
    )?;
    // `[fd00::1]` and `fd00::1` are one address; brackets are added where a port follows.
    let uri = uri.trim().trim_start_matches('[').trim_end_matches(']');
    Ok((uri.to_string(), port))
}

/// This host's cores, at most 4: the threads a table splits a large request among.
pub(super) fn default_table_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// Keys kept per worker customer: `PS_KEY_CACHE_KEYS`, or 0 when `PS_KEY_CACHE` is 0.
fn key_cache_keys<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<usize> {
    let on = vars.choice(
        "PS_KEY_CACHE",
        &[("1", true), ("", true), ("0", false)],
        "0 (off) or 1 (on)",
    )?;
    let keys = vars.parsed(
        "PS_KEY_CACHE_KEYS",
        "a whole number of keys ≥ 1",
        |&n: &usize| n >= 1,
    )?;
    Ok(match on {
        Some(false) => 0,
        _ => keys.unwrap_or(DEFAULT_KEY_CACHE_KEYS),
    })
}

/// `PS_RESEND_TIMEOUT` (ms, default 1000) unless `PS_RESEND` is 0 (then `None`).
fn resend_timeout<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Result<Option<Duration>> {
    let on = vars.choice(
        "PS_RESEND",
        &[("0", false), ("", true), ("1", true)],
        "0 (off) or 1 (on)",
    )?;
    let ms = vars.ranged("PS_RESEND_TIMEOUT", 1u64, 3_600_000)?;
    Ok((on != Some(false)).then(|| ms.map_or(DEFAULT_RESEND_TIMEOUT, Duration::from_millis)))
}
