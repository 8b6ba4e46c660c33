//! Cluster configuration from ps-lite's environment variables, some overridable by a flag.
//!
//! | variable | meaning | form | default |
//! | --- | --- | --- | --- |
//! | `DMLC_ROLE` | this process's role | `scheduler`, `server` or `worker` | given by the binary |
//! | `DMLC_PS_ROOT_URI` | the scheduler's address | IP address or host name | required |
//! | `DMLC_PS_ROOT_PORT` | the scheduler's port | 1–65535 | required |
//! | `DMLC_NUM_SERVER` | servers in the cluster | whole number ≥ 1 | required |
//! | `DMLC_NUM_WORKER` | workers in the cluster | whole number ≥ 1 | required |
//! | `DMLC_NODE_HOST` | address this node listens on and announces; must be this host's | IP address (IPv4 or IPv6) or host name | see below |
//! | `DMLC_INTERFACE` | network interface whose address (of the scheduler's family) to listen on | interface name | — |
//! | `DMLC_PS_VAN_TYPE` | the van | `zmq`, or `rdma` (also `ibverbs`) in a build with the cargo feature `rdma` (its `RDMA_*` variables: [`crate::van::rdma::RdmaConfig`]) | `zmq` |
//! | `PS_VERBOSE` | log level | 0 (warnings), 1 (info), 2 (debug), 3 (trace) | 0 |
//! | `PS_TIMEOUT` | deadline of every wait: start-up, barrier, `wait(ts)`; a value not longer than [`Config::loss_horizon`] is warned about at start | seconds, > 0 | 60, or the loss horizon + 10 when that is longer (with `PS_CHECKPOINT_DIR`: 81) |
//! | `PS_HEARTBEAT_INTERVAL` | how often a node tells the scheduler it is alive | seconds, > 0 | 1 |
//! | `PS_HEARTBEAT_TIMEOUT` | silence after which the scheduler declares a node lost | seconds, > 0 | 10 |
//! | `PS_DATA_VALIDATION` | rendezvous pulls carry and check a crc32c of the content | 0 or 1 | 0 |
//! | `PS_POOL_BYTES` | size of the registered memory pool for zero-copy pulls | bytes ≥ 4096 | 268435456 |
//! | `PS_KEY_CACHE` | workers send a digest instead of a key list the server already keeps (see [`crate::kv::keycache`]) | 0 or 1 | 1 |
//! | `PS_KEY_CACHE_KEYS` | keys of the lists a server keeps per worker customer (the worker keeps the same), and × `DMLC_NUM_WORKER` in all | whole number ≥ 1 | 16777216 |
//! | `PS_RESEND` | acknowledge every data message and send it again until acknowledged; drop duplicates (ps-lite's `PS_RESEND`) | 0 or 1 | 1 |
//! | `PS_RESEND_TIMEOUT` | how long a data message waits for its acknowledgement before it is sent again | milliseconds, 1–3600000 | 1000 |
//! | `PS_DROP_MSG` | for tests: the share of received data messages dropped (ps-lite's knob) | percent, 0–99 | 0 |
//! | `PS_CHECKPOINT_DIR` | servers keep their state recoverable here (snapshots and a request log, `server-R/` per rank); a lost server or worker can then be replaced ([`crate::kv::durable`]) | directory path | off |
//! | `PS_CHECKPOINT_SYNC` | fsync each log record before the request is answered (survives a machine crash; without: a process death) | 0 or 1 | 0 |
//! | `PS_CHECKPOINT_LOG_MB` | log size after which a snapshot starts a new log (or twice the last snapshot, if more) | MiB, 1–2³⁰ | 256 |
//! | `PS_RECOVERY_TIMEOUT` | (scheduler) how long a lost server or worker waits for a replacement before the job fails | seconds, > 0 | 60 |
//! | `PS_AUTH_TOKEN` | the cluster's secret: every connection proves it, or a node key derived from it ([`crate::auth`]); the same wherever it is set | text, ≥ 16 bytes | required unless the scheduler is on loopback (`pslite-launch` draws one per run) |
//! | `PS_AUTH_TOKEN_FILE` | instead of `PS_AUTH_TOKEN`: a file holding it | file path | — |
//! | `PS_AUTH_NODE_KEY` | instead of the token, on a server or worker with `PSLITE_RANK`: the key of its id, which proves that identity only ([`crate::auth`]; `pslite-launch local` and `ssh` set it) | 64 hex digits | — |
//! | `PS_AUTH` | `none` runs without authentication where a token would be required (warns) | `none` | — |
//! | `PS_MAX_INFLIGHT_BYTES` | a worker's requests sent and not yet answered, in bytes (payload + 1 KiB each); beyond it a push/pull blocks until earlier ones complete (at most `PS_TIMEOUT`). A server parks at most this much per worker and takes no longer payload frame ([`Bounds`]); the same on every node | bytes, 2²⁰–2⁴⁰ | 268435456 |
//! | `PS_MAX_CONNECTIONS` | connections a node accepts at a time; over it, the oldest one that has not authenticated is closed | whole number ≥ 1 | 2 × (nodes) + 32 |
//! | `PS_MAX_UNAUTHENTICATED` | of those, connections whose handshake has not succeeded yet (each can make the node hold one ZMQ frame of at most 4 MiB, 1 MiB at the scheduler), and half of it from one address; over either, the oldest such connection in its scope is closed | whole number ≥ 2 | 16 |
//! | `PS_METRICS_PORT` | serve this node's Prometheus metrics at `http://<PS_METRICS_HOST>:PORT/metrics` ([`crate::metrics`]) | port 0–65535 (0: any free port, logged) | off |
//! | `PS_METRICS_HOST` | the address the metrics listen on; the endpoint has no authentication, so it is loopback unless asked | an address of this host, or `node` (the listening address) | 127.0.0.1 (`::1` for a node on IPv6) |
//! | `PSLITE_RANK` | rank this server/worker asks for (the launcher sets it) | whole number ≥ 0 | registration order |
//!
//! The listening address is `DMLC_NODE_HOST` if set, else the address of `DMLC_INTERFACE` of the
//! scheduler's family (IPv4 or IPv6), else loopback when the scheduler is on loopback, else the
//! address this host's routing table uses to reach the scheduler ([`address`]).
//!
//! Numbers and choices are read trimmed. Flags: `--root-uri`, `--root-port`, `--num-servers`, `--num-workers`,
//! `--node-host`, `--interface`, `--van`, `--verbose` and `--timeout` replace the variable on
//! their row ([`Overrides`]). An error names the variable (and its flag), the value given and
//! the expected form.

pub mod address;
mod auth;
pub mod bounds;
pub mod checkpoint;
mod read;
pub mod sections;
pub(crate) mod vars;

use crate::error::Result;
use crate::wire::Role;
pub use bounds::Bounds;
pub use checkpoint::Checkpoint;
pub use sections::{Cluster, KvConfig, MetricsEndpoint, Resend, ThisNode, Timing, ZeroCopy};
use std::time::Duration;
use vars::Vars;

/// Default of `PS_TIMEOUT`: 60 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How much longer than [`Config::loss_horizon`] the default `PS_TIMEOUT` is: time for the
/// scheduler's verdict to reach the node that waits.
pub const LOSS_MARGIN: Duration = Duration::from_secs(10);

/// `PS_TIMEOUT` of this process's environment (its default when unset), for a wait before a
/// node's configuration is read (`pslite-launch task` waiting for the scheduler's name).
///
/// # Errors
/// [`Error::Config`](crate::Error::Config) naming `PS_TIMEOUT`, as [`Config::from_env`] gives it.
pub fn timeout_from_env() -> Result<Duration> {
    let vars = Vars::new(|k| std::env::var(k).ok());
    Ok(vars.seconds("PS_TIMEOUT")?.unwrap_or(DEFAULT_TIMEOUT))
}

/// Default of `PS_RESEND_TIMEOUT`: 1 s (ps-lite's).
pub const DEFAULT_RESEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Default size of the registered memory pool: 256 MiB (reserved, touched only when used).
pub const DEFAULT_POOL_BYTES: usize = 256 << 20;

/// Default of `PS_KEY_CACHE_KEYS`: 16M keys (128 MiB of keys per worker customer on each
/// server, plus the store's resolution of each list: a few bytes for a list pushed together, up
/// to 28 bytes a key for scattered ones).
pub const DEFAULT_KEY_CACHE_KEYS: usize = 1 << 24;

/// Which van moves the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VanType {
    /// ZeroMQ over TCP.
    Zmq,
    /// RDMA (Model3 rings over RC QPs). Selected by `rdma` or `ibverbs`.
    Rdma,
}

impl VanType {
    /// `zmq` or `rdma`, as `DMLC_PS_VAN_TYPE` spells it (and [`crate::van::Van::name`]).
    pub fn name(self) -> &'static str {
        match self {
            VanType::Zmq => "zmq",
            VanType::Rdma => "rdma",
        }
    }
}

/// Resolved configuration of one node, in sections ([`sections`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// This node's role.
    pub role: Role,
    /// The scheduler's address and the number of servers and workers.
    pub cluster: Cluster,
    /// Where this node listens, its van, and the rank it asks for.
    pub node: ThisNode,
    /// 0 warnings, 1 info, 2 debug, 3 trace.
    pub verbose: u8,
    /// The deadline of every wait and the heartbeats'.
    pub timing: Timing,
    /// The registered memory pool and content checks of zero-copy pulls.
    pub zero_copy: ZeroCopy,
    /// Key caching and the tables' threads.
    pub kv: KvConfig,
    /// Resend's timeout and drop simulation.
    pub resend: Resend,
    /// Durable servers and recovery (`PS_CHECKPOINT_DIR` and its companions); `None` when off.
    pub checkpoint: Option<Checkpoint>,
    /// What this node proves itself with: the cluster's token (`PS_AUTH_TOKEN`,
    /// `PS_AUTH_TOKEN_FILE`) or its own key (`PS_AUTH_NODE_KEY`); `None`: no authentication
    /// (a scheduler on loopback, or `PS_AUTH=none`).
    pub auth: Option<crate::auth::Secret>,
    /// Memory bounds (`PS_MAX_INFLIGHT_BYTES`, `PS_MAX_CONNECTIONS`).
    pub bounds: Bounds,
    /// Where the metrics server listens, if it runs.
    pub metrics: MetricsEndpoint,
}

/// Values given as flags; each one, when `Some`, replaces its environment variable.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Overrides {
    /// Scheduler address (DMLC_PS_ROOT_URI).
    #[arg(long)]
    pub root_uri: Option<String>,
    /// Scheduler port (DMLC_PS_ROOT_PORT).
    #[arg(long)]
    pub root_port: Option<String>,
    /// Number of servers (DMLC_NUM_SERVER).
    #[arg(long)]
    pub num_servers: Option<String>,
    /// Number of workers (DMLC_NUM_WORKER).
    #[arg(long)]
    pub num_workers: Option<String>,
    /// Address to listen on (DMLC_NODE_HOST).
    #[arg(long)]
    pub node_host: Option<String>,
    /// Interface whose IPv4 address to listen on (DMLC_INTERFACE).
    #[arg(long)]
    pub interface: Option<String>,
    /// Van: zmq or rdma (DMLC_PS_VAN_TYPE).
    #[arg(long)]
    pub van: Option<String>,
    /// Log level 0–3 (PS_VERBOSE).
    #[arg(long)]
    pub verbose: Option<String>,
    /// Deadline of every wait, in seconds (PS_TIMEOUT).
    #[arg(long)]
    pub timeout: Option<String>,
}

impl Config {
    /// Reads the configuration of a node of `role` from the process environment and `flags`.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming the variable (and flag) that is missing or malformed, with the
    /// expected form.
    pub fn from_env(role: Role, flags: &Overrides) -> Result<Config> {
        Config::from_lookup(role, flags, |k| std::env::var(k).ok())
    }

    /// As [`Config::from_env`], reading variables through `lookup` (for tests and embedding).
    ///
    /// # Errors
    /// As [`Config::from_env`].
    pub fn from_lookup(
        role: Role,
        flags: &Overrides,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let vars = flags.reader(lookup);
        read::check_role(&vars, role)?;
        let root = read::scheduler_address(&vars)?;
        let read = read::read_fields(&vars, role, &root)?;
        read::settle(read, &vars, &root)
    }

    /// How long after a node dies the nodes waiting on it may still be waiting for the
    /// scheduler's verdict: `PS_HEARTBEAT_TIMEOUT` + `PS_HEARTBEAT_INTERVAL` until it is
    /// declared lost, plus, with `PS_CHECKPOINT_DIR` (a lost node is awaited),
    /// `PS_RECOVERY_TIMEOUT` for its replacement.
    pub fn loss_horizon(&self) -> Duration {
        let awaited = self
            .checkpoint
            .as_ref()
            .map_or(Duration::ZERO, |c| c.recovery_timeout);
        self.timing.heartbeat_timeout + self.timing.heartbeat_interval + awaited
    }

    /// What a node says at start when `PS_TIMEOUT` is not longer than
    /// [`loss_horizon`](Self::loss_horizon) (only an explicit value can be: the default
    /// follows it), naming the variables; `None` otherwise.
    pub fn timeout_warning(&self) -> Option<String> {
        let horizon = self.loss_horizon();
        if self.timing.timeout > horizon {
            return None;
        }
        let s = |d: Duration| format!("{} s", d.as_secs_f64());
        let recovery = match &self.checkpoint {
            Some(c) => format!(
                " + PS_RECOVERY_TIMEOUT ({}, a lost node is awaited with PS_CHECKPOINT_DIR)",
                s(c.recovery_timeout)
            ),
            None => String::new(),
        };
        Some(format!(
            "PS_TIMEOUT ({}) is not longer than PS_HEARTBEAT_TIMEOUT ({}) + \
             PS_HEARTBEAT_INTERVAL ({}){recovery} = {}: a wait on a node that dies ends at \
             PS_TIMEOUT with a timeout, naming whoever it waited on, before the scheduler says \
             the node was lost{}; set PS_TIMEOUT above {} or leave it unset (its default \
             follows these)",
            s(self.timing.timeout),
            s(self.timing.heartbeat_timeout),
            s(self.timing.heartbeat_interval),
            s(horizon),
            if self.checkpoint.is_some() {
                " or its replacement takes over"
            } else {
                ""
            },
            s(horizon)
        ))
    }

    /// The `tracing` level filter of `PS_VERBOSE`.
    pub fn log_filter(&self) -> &'static str {
        match self.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    }
}

impl Overrides {
    /// A reader of the variables `lookup` returns, each replaced by its flag when given.
    fn reader<F: Fn(&str) -> Option<String>>(&self, lookup: F) -> Vars<'_, F> {
        Vars::new(lookup)
            .with_flag("DMLC_PS_ROOT_URI", "--root-uri", self.root_uri.as_deref())
            .with_flag(
                "DMLC_PS_ROOT_PORT",
                "--root-port",
                self.root_port.as_deref(),
            )
            .with_flag(
                "DMLC_NUM_SERVER",
                "--num-servers",
                self.num_servers.as_deref(),
            )
            .with_flag(
                "DMLC_NUM_WORKER",
                "--num-workers",
                self.num_workers.as_deref(),
            )
            .with_flag("DMLC_NODE_HOST", "--node-host", self.node_host.as_deref())
            .with_flag("DMLC_INTERFACE", "--interface", self.interface.as_deref())
            .with_flag("DMLC_PS_VAN_TYPE", "--van", self.van.as_deref())
            .with_flag("PS_VERBOSE", "--verbose", self.verbose.as_deref())
            .with_flag("PS_TIMEOUT", "--timeout", self.timeout.as_deref())
    }
}

impl Config {
    /// A loopback cluster configuration: scheduler at 127.0.0.1:`port`, defaults elsewhere.
    pub fn local(role: Role, port: u16, num_servers: usize, num_workers: usize) -> Config {
        Config {
            role,
            cluster: Cluster {
                root_uri: "127.0.0.1".into(),
                root_port: port,
                num_servers,
                num_workers,
            },
            node: ThisNode {
                host: "127.0.0.1".into(),
                van: VanType::Zmq,
                rank_hint: None,
            },
            verbose: 0,
            timing: Timing {
                timeout: DEFAULT_TIMEOUT,
                heartbeat_interval: Duration::from_secs(1),
                heartbeat_timeout: Duration::from_secs(10),
            },
            zero_copy: ZeroCopy {
                data_validation: false,
                pool_bytes: DEFAULT_POOL_BYTES,
            },
            kv: KvConfig {
                key_cache_keys: DEFAULT_KEY_CACHE_KEYS,
                table_threads: read::default_table_threads(),
            },
            resend: Resend {
                timeout: Some(DEFAULT_RESEND_TIMEOUT),
                drop_msg_percent: 0,
            },
            checkpoint: None,
            auth: None,
            bounds: Bounds::default_for(num_servers, num_workers),
            metrics: MetricsEndpoint {
                port: None,
                host: String::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load(pairs: &[(&str, &str)]) -> Result<Config> {
        let e = env(pairs);
        Config::from_lookup(Role::Worker, &Overrides::default(), |k| e.get(k).cloned())
    }

    const BASE: [(&str, &str); 4] = [
        ("DMLC_PS_ROOT_URI", "127.0.0.1"),
        ("DMLC_PS_ROOT_PORT", "9000"),
        ("DMLC_NUM_SERVER", "2"),
        ("DMLC_NUM_WORKER", "3"),
    ];

    #[test]
    fn the_default_timeout_outlasts_a_loss_and_its_replacement_and_a_short_one_is_named() {
        let with = |extra: &[(&str, &str)]| {
            let mut pairs = BASE.to_vec();
            pairs.extend_from_slice(extra);
            load(&pairs).expect("valid")
        };
        // Without checkpoints a loss is known after 11 s: the default 60 s outlasts it.
        let c = with(&[]);
        assert_eq!(
            (c.loss_horizon(), c.timing.timeout),
            (Duration::from_secs(11), DEFAULT_TIMEOUT)
        );
        assert_eq!(c.timeout_warning(), None);
        // With them, the replacement is awaited 60 s more: the default follows (81 s).
        let c = with(&[("PS_CHECKPOINT_DIR", "/tmp/cp")]);
        assert_eq!(c.loss_horizon(), Duration::from_secs(71));
        assert_eq!(c.timing.timeout, Duration::from_secs(81));
        assert_eq!(c.timeout_warning(), None);
        let c = with(&[
            ("PS_CHECKPOINT_DIR", "/tmp/cp"),
            ("PS_RECOVERY_TIMEOUT", "200"),
            ("PS_HEARTBEAT_TIMEOUT", "30"),
        ]);
        assert_eq!(c.timing.timeout, Duration::from_secs(241));
        // An explicit value is kept, and named at start when it is too short.
        let c = with(&[("PS_CHECKPOINT_DIR", "/tmp/cp"), ("PS_TIMEOUT", "60")]);
        assert_eq!(c.timing.timeout, Duration::from_secs(60));
        let w = c.timeout_warning().expect("too short");
        assert!(
            w.contains(
                "PS_TIMEOUT (60 s) is not longer than PS_HEARTBEAT_TIMEOUT (10 s) + \
                 PS_HEARTBEAT_INTERVAL (1 s) + PS_RECOVERY_TIMEOUT (60 s, a lost node is \
                 awaited with PS_CHECKPOINT_DIR) = 71 s"
            ) && w.contains("set PS_TIMEOUT above 71 s or leave it unset"),
            "{w}"
        );
        let w = with(&[("PS_TIMEOUT", "4")])
            .timeout_warning()
            .expect("short");
        assert!(
            w.contains("PS_TIMEOUT (4 s) is not longer than PS_HEARTBEAT_TIMEOUT (10 s) + PS_HEARTBEAT_INTERVAL (1 s) = 11 s"),
            "{w}"
        );
        assert_eq!(with(&[("PS_TIMEOUT", "12")]).timeout_warning(), None);
    }

    #[test]
    fn full_config_parses_with_defaults() {
        let c = load(&BASE).expect("valid");
        assert_eq!(
            (
                c.cluster.root_port,
                c.cluster.num_servers,
                c.cluster.num_workers
            ),
            (9000, 2, 3)
        );
        assert_eq!(c.node.host, "127.0.0.1");
        assert_eq!(c.timing.timeout, Duration::from_secs(60));
        assert_eq!(c.node.van, VanType::Zmq);
        assert_eq!(c.kv.key_cache_keys, DEFAULT_KEY_CACHE_KEYS);
    }

    #[test]
    fn key_cache_off_or_sized() {
        let mut pairs = BASE.to_vec();
        pairs.push(("PS_KEY_CACHE_KEYS", "1000"));
        assert_eq!(load(&pairs).expect("valid").kv.key_cache_keys, 1000);
        pairs.push(("PS_KEY_CACHE", "0"));
        assert_eq!(load(&pairs).expect("valid").kv.key_cache_keys, 0);
    }

    #[test]
    fn each_missing_variable_is_named() {
        for (skip, (var, _)) in BASE.iter().enumerate() {
            let pairs: Vec<_> = BASE
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, p)| *p)
                .collect();
            let err = load(&pairs).expect_err("missing").to_string();
            assert!(err.starts_with(&format!("{var} is not set")), "{err}");
        }
    }

    #[test]
    fn resend_is_on_unless_turned_off_and_its_timeout_is_in_milliseconds() {
        let base = load(&BASE).expect("loads");
        assert_eq!(
            (base.resend.timeout, base.resend.drop_msg_percent),
            (Some(Duration::from_secs(1)), 0)
        );
        let mut pairs = BASE.to_vec();
        pairs.push(("PS_RESEND_TIMEOUT", "250"));
        assert_eq!(
            load(&pairs).expect("loads").resend.timeout,
            Some(Duration::from_millis(250)),
            "PS_RESEND unset"
        );
        pairs.push(("PS_RESEND", "0"));
        assert_eq!(load(&pairs).expect("loads").resend.timeout, None, "off");
        pairs.pop();
        pairs.extend([("PS_RESEND", "1"), ("PS_DROP_MSG", "10")]);
        let c = load(&pairs).expect("loads");
        assert_eq!(c.resend.timeout, Some(Duration::from_millis(250)));
        assert_eq!(c.resend.drop_msg_percent, 10);
        pairs.retain(|(k, _)| *k != "PS_RESEND_TIMEOUT");
        assert_eq!(
            load(&pairs).expect("loads").resend.timeout,
            Some(Duration::from_secs(1)),
            "ps-lite's default"
        );
    }

    /// Each variable with a malformed value, and the expected form its error names.
    const MALFORMED: [(&str, &str, &str); 20] = [
        (
            "DMLC_PS_ROOT_PORT",
            "70000",
            "expected a port number 1–65535",
        ),
        ("DMLC_PS_ROOT_PORT", "abc", "expected a port number 1–65535"),
        ("DMLC_NUM_SERVER", "0", "expected a whole number ≥ 1"),
        ("DMLC_NUM_WORKER", "-1", "expected a whole number ≥ 1"),
        ("DMLC_PS_VAN_TYPE", "tcp", "expected zmq or rdma"),
        ("PS_VERBOSE", "9", "expected 0, 1, 2 or 3"),
        ("PS_TIMEOUT", "0", "expected a number of seconds > 0"),
        ("PS_DATA_VALIDATION", "yes", "expected 0 or 1"),
        ("PS_POOL_BYTES", "12", "expected a number of bytes ≥ 4096"),
        ("PS_KEY_CACHE", "on", "expected 0 (off) or 1 (on)"),
        ("PS_TABLE_THREADS", "0", "expected a whole number ≥ 1"),
        (
            "PS_KEY_CACHE_KEYS",
            "0",
            "expected a whole number of keys ≥ 1",
        ),
        (
            "DMLC_ROLE",
            "server",
            "expected DMLC_ROLE unset or \"worker\"",
        ),
        (
            "PS_HEARTBEAT_INTERVAL",
            "x",
            "expected a number of seconds > 0",
        ),
        (
            "PS_HEARTBEAT_TIMEOUT",
            "-1",
            "expected a number of seconds > 0",
        ),
        ("PSLITE_RANK", "-1", "expected a whole number ≥ 0"),
        ("PS_RESEND", "yes", "expected 0 (off) or 1 (on)"),
        (
            "PS_RESEND_TIMEOUT",
            "0",
            "expected a whole number from 1 to 3600000",
        ),
        ("PS_DROP_MSG", "100", "expected a whole number from 0 to 99"),
        (
            "DMLC_PS_ROOT_URI",
            " 10.0.0.1",
            "expected an IP address or host name",
        ),
    ];

    #[test]
    fn malformed_values_are_named_with_the_expected_form() {
        for (var, val, expected) in MALFORMED {
            let mut pairs = BASE.to_vec();
            pairs.push((var, val));
            let err = load(&pairs).expect_err(var).to_string();
            assert!(
                err.contains(var) && err.contains(expected),
                "{var}={val}: {err}"
            );
        }
    }

    #[test]
    fn errors_name_the_flag_where_there_is_one() {
        let mut pairs = BASE.to_vec();
        pairs.push(("PS_TIMEOUT", "soon"));
        assert_eq!(
            load(&pairs).expect_err("bad timeout").to_string(),
            "PS_TIMEOUT (or --timeout) is \"soon\": expected a number of seconds > 0, e.g. 60 or 0.5"
        );
        let mut pairs = BASE.to_vec();
        pairs.push(("PS_POOL_BYTES", "1k"));
        assert_eq!(
            load(&pairs).expect_err("bad pool").to_string(),
            "PS_POOL_BYTES is \"1k\": expected a number of bytes ≥ 4096"
        );
        let e = env(&BASE[1..]);
        let err = Config::from_lookup(Role::Worker, &Overrides::default(), |k| e.get(k).cloned());
        assert_eq!(
            err.expect_err("no scheduler").to_string(),
            "DMLC_PS_ROOT_URI is not set (nor --root-uri given): expected an IP address or host name, e.g. 127.0.0.1"
        );
    }

    #[test]
    fn flags_override_variables() {
        let e = env(&BASE);
        let flags = Overrides {
            num_servers: Some("5".into()),
            timeout: Some("2.5".into()),
            ..Overrides::default()
        };
        let c = Config::from_lookup(Role::Server, &flags, |k| e.get(k).cloned()).expect("valid");
        assert_eq!(c.cluster.num_servers, 5);
        assert_eq!(c.timing.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn unknown_interface_is_an_error() {
        let mut pairs = BASE.to_vec();
        pairs.push(("DMLC_INTERFACE", "nosuchif0"));
        let err = load(&pairs).expect_err("bad interface").to_string();
        assert!(
            err.contains("DMLC_INTERFACE") && err.contains("nosuchif0"),
            "{err}"
        );
    }
}
