//! Cluster configuration from ps-lite's environment variables, each overridable by a flag.
//!
//! | variable | meaning | form | default |
//! | --- | --- | --- | --- |
//! | `DMLC_ROLE` | this process's role | `scheduler`, `server` or `worker` | given by the binary |
//! | `DMLC_PS_ROOT_URI` | the scheduler's address | IP address or host name | required |
//! | `DMLC_PS_ROOT_PORT` | the scheduler's port | 1–65535 | required |
//! | `DMLC_NUM_SERVER` | servers in the cluster | whole number ≥ 1 | required |
//! | `DMLC_NUM_WORKER` | workers in the cluster | whole number ≥ 1 | required |
//! | `DMLC_NODE_HOST` | address this node listens on | IP address or host name | see below |
//! | `DMLC_INTERFACE` | network interface whose IPv4 address to listen on | interface name | — |
//! | `DMLC_PS_VAN_TYPE` | the van | `zmq` (`rdma`/`ibverbs`: not in this build) | `zmq` |
//! | `PS_VERBOSE` | log level | 0 (warnings), 1 (info), 2 (debug), 3 (trace) | 0 |
//! | `PS_TIMEOUT` | deadline of every wait: start-up, barrier, `wait(ts)` | seconds, > 0 | 60 |
//! | `PS_HEARTBEAT_INTERVAL` | how often a node tells the scheduler it is alive | seconds, > 0 | 1 |
//! | `PS_HEARTBEAT_TIMEOUT` | silence after which the scheduler declares a node lost | seconds, > 0 | 10 |
//! | `PS_DATA_VALIDATION` | rendezvous pulls carry and check a crc32c of the content | 0 or 1 | 0 |
//! | `PS_POOL_BYTES` | size of the registered memory pool for zero-copy pulls | bytes | 268435456 |
//! | `PS_KEY_CACHE` | workers send a digest instead of a key list the server already keeps (see [`crate::kv::keycache`]) | 0 or 1 | 1 |
//! | `PS_KEY_CACHE_KEYS` | keys of the lists a server keeps per worker customer (the worker keeps the same), and × `DMLC_NUM_WORKER` in all | whole number ≥ 1 | 16777216 |
//! | `PSLITE_RANK` | rank this server/worker asks for (the launcher sets it) | whole number | registration order |
//!
//! The listening address is `DMLC_NODE_HOST` if set, else the IPv4 address of `DMLC_INTERFACE`,
//! else 127.0.0.1 when the scheduler is on loopback, else the first non-loopback IPv4 address.

use crate::error::{Error, Result};
use crate::wire::Role;
use std::time::Duration;

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

/// Resolved configuration of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// This node's role.
    pub role: Role,
    /// Scheduler address.
    pub root_uri: String,
    /// Scheduler port.
    pub root_port: u16,
    /// Number of servers.
    pub num_servers: usize,
    /// Number of workers.
    pub num_workers: usize,
    /// Address this node's van listens on (the scheduler listens on `root_uri`).
    pub node_host: String,
    /// The van.
    pub van: VanType,
    /// 0 warnings, 1 info, 2 debug, 3 trace.
    pub verbose: u8,
    /// Deadline of every wait.
    pub timeout: Duration,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// Silence after which a node counts as lost.
    pub heartbeat_timeout: Duration,
    /// The rank asked for (`PSLITE_RANK`), see [`crate::wire::Node::requested_rank`].
    pub rank_hint: Option<u32>,
    /// Rendezvous pulls carry and check a crc32c of the content (`PS_DATA_VALIDATION=1`).
    pub data_validation: bool,
    /// Bytes of the registered memory pool (`PS_POOL_BYTES`).
    pub pool_bytes: usize,
    /// Key caching (`PS_KEY_CACHE`): keys of the lists cached per worker and server
    /// (`PS_KEY_CACHE_KEYS`), 0 when it is off.
    pub key_cache_keys: usize,
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
    /// [`Error::Config`] naming the variable (and flag) that is missing or malformed, with the
    /// expected form.
    pub fn from_env(role: Role, flags: &Overrides) -> Result<Config> {
        Config::from_lookup(role, flags, |k| std::env::var(k).ok())
    }

    /// As [`Config::from_env`], reading variables through `lookup` (for tests and embedding).
    pub fn from_lookup(
        role: Role,
        flags: &Overrides,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let get = |flag: &Option<String>, var: &str| flag.clone().or_else(|| lookup(var));
        if let Some(r) = lookup("DMLC_ROLE") {
            let want = role.name();
            if r.trim() != want {
                return Err(Error::Config(format!(
                    "DMLC_ROLE={r:?} but this binary runs the {want} role: \
                     expected DMLC_ROLE unset or {want:?}"
                )));
            }
        }
        let root_uri = required(
            get(&flags.root_uri, "DMLC_PS_ROOT_URI"),
            "DMLC_PS_ROOT_URI",
            "--root-uri",
            "an IP address or host name, e.g. 127.0.0.1",
        )?;
        if root_uri.trim().is_empty() || root_uri.contains(char::is_whitespace) {
            return Err(bad(
                "DMLC_PS_ROOT_URI",
                "--root-uri",
                &root_uri,
                "an IP address or host name, e.g. 127.0.0.1",
            ));
        }
        let port_s = required(
            get(&flags.root_port, "DMLC_PS_ROOT_PORT"),
            "DMLC_PS_ROOT_PORT",
            "--root-port",
            "a port number 1–65535",
        )?;
        let root_port = match port_s.trim().parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(bad(
                    "DMLC_PS_ROOT_PORT",
                    "--root-port",
                    &port_s,
                    "a port number 1–65535",
                ))
            }
        };
        let count = |flag: &Option<String>, var: &'static str, f: &'static str| -> Result<usize> {
            let s = required(get(flag, var), var, f, "a whole number ≥ 1")?;
            match s.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(bad(var, f, &s, "a whole number ≥ 1")),
            }
        };
        let num_servers = count(&flags.num_servers, "DMLC_NUM_SERVER", "--num-servers")?;
        let num_workers = count(&flags.num_workers, "DMLC_NUM_WORKER", "--num-workers")?;
        let van = match get(&flags.van, "DMLC_PS_VAN_TYPE") {
            None => VanType::Zmq,
            Some(s) => match s.trim() {
                "zmq" | "" => VanType::Zmq,
                "rdma" | "ibverbs" => VanType::Rdma,
                _ => {
                    return Err(bad(
                        "DMLC_PS_VAN_TYPE",
                        "--van",
                        &s,
                        "zmq or rdma (also ibverbs)",
                    ))
                }
            },
        };
        let verbose = match get(&flags.verbose, "PS_VERBOSE") {
            None => 0,
            Some(s) => match s.trim().parse::<u8>() {
                Ok(v) if v <= 3 => v,
                _ => return Err(bad("PS_VERBOSE", "--verbose", &s, "0, 1, 2 or 3")),
            },
        };
        let secs = |flag: &Option<String>,
                    var: &'static str,
                    f: &'static str,
                    default: f64|
         -> Result<Duration> {
            match get(flag, var) {
                None => Ok(Duration::from_secs_f64(default)),
                Some(s) => match s.trim().parse::<f64>() {
                    Ok(v) if v > 0.0 && v.is_finite() && v < 1e9 => Ok(Duration::from_secs_f64(v)),
                    _ => Err(bad(var, f, &s, "a number of seconds > 0, e.g. 60 or 0.5")),
                },
            }
        };
        let timeout = secs(&flags.timeout, "PS_TIMEOUT", "--timeout", 60.0)?;
        let heartbeat_interval = secs(&None, "PS_HEARTBEAT_INTERVAL", "(no flag)", 1.0)?;
        let heartbeat_timeout = secs(&None, "PS_HEARTBEAT_TIMEOUT", "(no flag)", 10.0)?;
        let rank_hint = match lookup("PSLITE_RANK") {
            None => None,
            Some(s) => match s.trim().parse::<u32>() {
                Ok(r) => Some(r),
                _ => {
                    return Err(Error::Config(format!(
                        "PSLITE_RANK is {s:?}: expected a whole number ≥ 0"
                    )))
                }
            },
        };
        let data_validation = match lookup("PS_DATA_VALIDATION").as_deref().map(str::trim) {
            None | Some("0") | Some("") => false,
            Some("1") => true,
            Some(other) => {
                return Err(Error::Config(format!(
                    "PS_DATA_VALIDATION is {other:?}: expected 0 or 1"
                )))
            }
        };
        let pool_bytes = match lookup("PS_POOL_BYTES") {
            None => DEFAULT_POOL_BYTES,
            Some(s) => match s.trim().parse::<usize>() {
                Ok(b) if b >= 4096 => b,
                _ => {
                    return Err(Error::Config(format!(
                        "PS_POOL_BYTES is {s:?}: expected a number of bytes ≥ 4096"
                    )))
                }
            },
        };
        let key_cache = match lookup("PS_KEY_CACHE").as_deref().map(str::trim) {
            None | Some("1") | Some("") => true,
            Some("0") => false,
            Some(other) => {
                return Err(Error::Config(format!(
                    "PS_KEY_CACHE is {other:?}: expected 0 (off) or 1 (on)"
                )))
            }
        };
        let key_cache_keys = match lookup("PS_KEY_CACHE_KEYS") {
            None => DEFAULT_KEY_CACHE_KEYS,
            Some(s) => match s.trim().parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(Error::Config(format!(
                        "PS_KEY_CACHE_KEYS is {s:?}: expected a whole number of keys ≥ 1"
                    )))
                }
            },
        };
        let key_cache_keys = if key_cache { key_cache_keys } else { 0 };
        let node_host = match get(&flags.node_host, "DMLC_NODE_HOST") {
            Some(h) if !h.trim().is_empty() => h.trim().to_string(),
            _ => match get(&flags.interface, "DMLC_INTERFACE") {
                Some(ifname) => interface_ipv4(&ifname)?,
                None if is_loopback(&root_uri) => "127.0.0.1".to_string(),
                None => first_ipv4().unwrap_or_else(|| "127.0.0.1".to_string()),
            },
        };
        Ok(Config {
            role,
            root_uri: root_uri.trim().to_string(),
            root_port,
            num_servers,
            num_workers,
            node_host,
            van,
            verbose,
            timeout,
            heartbeat_interval,
            heartbeat_timeout,
            rank_hint,
            data_validation,
            pool_bytes,
            key_cache_keys,
        })
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

fn required(v: Option<String>, var: &str, flag: &str, expected: &str) -> Result<String> {
    v.ok_or_else(|| {
        Error::Config(format!(
            "{var} is not set (nor {flag} given): expected {expected}"
        ))
    })
}

fn bad(var: &str, flag: &str, value: &str, expected: &str) -> Error {
    Error::Config(format!(
        "{var} (or {flag}) is {value:?}: expected {expected}"
    ))
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

fn interface_ipv4(name: &str) -> Result<String> {
    let addrs = if_addrs::get_if_addrs().map_err(|e| {
        Error::Config(format!(
            "DMLC_INTERFACE={name:?}: cannot list interfaces: {e}"
        ))
    })?;
    addrs
        .iter()
        .find(|a| a.name == name && a.ip().is_ipv4())
        .map(|a| a.ip().to_string())
        .ok_or_else(|| {
            let names: Vec<&str> = addrs.iter().map(|a| a.name.as_str()).collect();
            Error::Config(format!(
                "DMLC_INTERFACE (or --interface) is {name:?}: expected an interface with an IPv4 address, one of {names:?}"
            ))
        })
}

fn first_ipv4() -> Option<String> {
    if_addrs::get_if_addrs()
        .ok()?
        .into_iter()
        .find(|a| !a.is_loopback() && a.ip().is_ipv4())
        .map(|a| a.ip().to_string())
}

impl Config {
    /// A loopback cluster configuration: scheduler at 127.0.0.1:`port`, defaults elsewhere.
    pub fn local(role: Role, port: u16, num_servers: usize, num_workers: usize) -> Config {
        Config {
            role,
            root_uri: "127.0.0.1".into(),
            root_port: port,
            num_servers,
            num_workers,
            node_host: "127.0.0.1".into(),
            van: VanType::Zmq,
            verbose: 0,
            timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(10),
            rank_hint: None,
            data_validation: false,
            pool_bytes: DEFAULT_POOL_BYTES,
            key_cache_keys: DEFAULT_KEY_CACHE_KEYS,
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
    fn full_config_parses_with_defaults() {
        let c = load(&BASE).expect("valid");
        assert_eq!((c.root_port, c.num_servers, c.num_workers), (9000, 2, 3));
        assert_eq!(c.node_host, "127.0.0.1");
        assert_eq!(c.timeout, Duration::from_secs(60));
        assert_eq!(c.van, VanType::Zmq);
        assert_eq!(c.key_cache_keys, DEFAULT_KEY_CACHE_KEYS);
    }

    #[test]
    fn key_cache_off_or_sized() {
        let mut pairs = BASE.to_vec();
        pairs.push(("PS_KEY_CACHE_KEYS", "1000"));
        assert_eq!(load(&pairs).expect("valid").key_cache_keys, 1000);
        pairs.push(("PS_KEY_CACHE", "0"));
        assert_eq!(load(&pairs).expect("valid").key_cache_keys, 0);
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
    fn malformed_values_are_named_with_the_expected_form() {
        let cases = [
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
        ];
        for (var, val, expected) in cases {
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
    fn flags_override_variables() {
        let e = env(&BASE);
        let flags = Overrides {
            num_servers: Some("5".into()),
            timeout: Some("2.5".into()),
            ..Overrides::default()
        };
        let c = Config::from_lookup(Role::Server, &flags, |k| e.get(k).cloned()).expect("valid");
        assert_eq!(c.num_servers, 5);
        assert_eq!(c.timeout, Duration::from_millis(2500));
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
