//! `pslite-launch doctor`: a pre-flight check of this host for one node, run before a job (on
//! each host, or as a task of `task`/`ssh` launches). Each check prints `ok`, `WARN` or
//! `FAIL`, and a failed one the fix; the exit status is 1 when any failed.
//!
//! Checks, in order: the versions (pslite, libzmq, whether the RDMA van is built in); the
//! node's configuration (every `DMLC_*`/`PS_*` variable, as the node would read it); the
//! address it would announce and the interface that has it; the scheduler's port (reachable
//! from here, or free to listen on for the scheduler); the cluster token; the locked-memory
//! limit against what the node pins on the RDMA van (`PS_POOL_BYTES` + 2 rings × peers ×
//! `PS_RDMA_RING_BYTES`: `ibv_reg_mr … Cannot allocate memory` is BytePS's most reported RDMA
//! failure); the RDMA devices, ports, MTUs and GID tables against the `RDMA_*` variables.

use pslite::config::{Config, Overrides, VanType};
use pslite::van::memlock;
use pslite::Role;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Options of `pslite-launch doctor`.
#[derive(clap::Args)]
pub struct Doctor {
    /// The role of the node this host will run: scheduler, server or worker (default:
    /// DMLC_ROLE, else worker).
    #[arg(long)]
    role: Option<String>,
    #[command(flatten)]
    cfg: Overrides,
}

/// How a check came out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One check's outcome: its name, verdict, what was found, and the fix when it did not pass.
struct Check {
    name: &'static str,
    verdict: Verdict,
    found: String,
    fix: Option<String>,
}

fn ok(name: &'static str, found: impl Into<String>) -> Check {
    Check {
        name,
        verdict: Verdict::Ok,
        found: found.into(),
        fix: None,
    }
}

fn bad(name: &'static str, verdict: Verdict, found: impl Into<String>, fix: &str) -> Check {
    Check {
        name,
        verdict,
        found: found.into(),
        fix: Some(fix.to_string()),
    }
}

/// Runs every check, prints them, and returns the exit status (1 when any failed).
pub fn run(d: &Doctor) -> i32 {
    let role_text = d
        .role
        .clone()
        .or_else(|| std::env::var("DMLC_ROLE").ok())
        .unwrap_or_else(|| "worker".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    println!(
        "pslite-launch doctor: a {role_text} on {}",
        host.trim().trim_end_matches('\n')
    );
    let checks = match role_of(&role_text) {
        Some(role) => checks(role, &d.cfg),
        None => vec![bad(
            "role",
            Verdict::Fail,
            format!("{role_text:?} is no role"),
            "--role (or DMLC_ROLE) scheduler, server or worker",
        )],
    };
    let failed = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
    for c in &checks {
        let tag = match c.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        };
        let mut lines = c.found.lines();
        println!("  {tag} {}: {}", c.name, lines.next().unwrap_or_default());
        for l in lines {
            println!("         {l}");
        }
        if let Some(fix) = &c.fix {
            println!("       fix: {fix}");
        }
    }
    if failed == 0 {
        println!("{} checks, none failed", checks.len());
        0
    } else {
        println!("{} checks, {failed} failed", checks.len());
        1
    }
}

fn role_of(s: &str) -> Option<Role> {
    match s.trim() {
        "scheduler" => Some(Role::Scheduler),
        "server" => Some(Role::Server),
        "worker" => Some(Role::Worker),
        _ => None,
    }
}

/// Every check for a node of `role`; those that need the configuration are skipped when it
/// cannot be read.
fn checks(role: Role, flags: &Overrides) -> Vec<Check> {
    let rdma_built = cfg!(feature = "rdma");
    let mut out = vec![ok(
        "versions",
        format!(
            "pslite-launch {}, libzmq {}, RDMA van {}",
            env!("CARGO_PKG_VERSION"),
            {
                let (a, b, c) = zmq::version();
                format!("{a}.{b}.{c}")
            },
            if rdma_built {
                "built in"
            } else {
                "not built in (cargo feature rdma)"
            }
        ),
    )];
    let cfg = match Config::from_env(role, flags) {
        Ok(c) => {
            out.push(ok(
                "configuration",
                format!(
                    "{} servers, {} workers, scheduler at {}, {} van, PS_TIMEOUT {:.0} s",
                    c.cluster.num_servers,
                    c.cluster.num_workers,
                    pslite::wire::place(&c.cluster.root_uri, c.cluster.root_port),
                    c.node.van.name(),
                    c.timing.timeout.as_secs_f64()
                ),
            ));
            c
        }
        Err(e) => {
            out.push(bad(
                "configuration",
                Verdict::Fail,
                e.to_string(),
                "set the variable the error names (see `pslite::config` for every variable)",
            ));
            return out;
        }
    };
    out.push(address(&cfg));
    out.push(scheduler(&cfg));
    out.push(token(&cfg));
    out.push(locked_memory(&cfg));
    out.push(rdma(&cfg));
    out
}

/// The address the node announces and the interface that holds it.
fn address(cfg: &Config) -> Check {
    let announced = if cfg.role == Role::Scheduler {
        &cfg.cluster.root_uri
    } else {
        &cfg.node.host
    };
    let ip: Option<IpAddr> = pslite::config::address::resolve(announced)
        .ok()
        .and_then(|v| v.into_iter().next());
    let iface = ip.and_then(|ip| {
        if_addrs::get_if_addrs()
            .ok()?
            .into_iter()
            .find(|i| i.ip() == ip)
            .map(|i| i.name)
    });
    match (ip, iface) {
        (Some(ip), Some(name)) => ok(
            "address",
            format!("this node listens on and announces {ip} (interface {name})"),
        ),
        (Some(ip), None) if cfg.role == Role::Scheduler => bad(
            "address",
            Verdict::Warn,
            format!("DMLC_PS_ROOT_URI is {ip}, which no interface of this host has"),
            "run the scheduler on the host DMLC_PS_ROOT_URI names",
        ),
        _ => bad(
            "address",
            Verdict::Fail,
            format!("{announced} is not an address of this host"),
            "set DMLC_NODE_HOST to an address of this host, or DMLC_INTERFACE",
        ),
    }
}

/// The scheduler's port: free to listen on (the scheduler), or reachable (the others).
fn scheduler(cfg: &Config) -> Check {
    let place = pslite::wire::place(&cfg.cluster.root_uri, cfg.cluster.root_port);
    let Some(ip) = pslite::config::address::resolve(&cfg.cluster.root_uri)
        .ok()
        .and_then(|v| v.into_iter().next())
    else {
        return bad(
            "scheduler",
            Verdict::Fail,
            format!("{} does not resolve", cfg.cluster.root_uri),
            "set DMLC_PS_ROOT_URI to the scheduler's address",
        );
    };
    let addr = SocketAddr::new(ip, cfg.cluster.root_port);
    if cfg.role == Role::Scheduler {
        return match TcpListener::bind(addr) {
            Ok(_) => ok("scheduler", format!("{place} is free to listen on")),
            Err(e) => bad(
                "scheduler",
                Verdict::Fail,
                format!("cannot listen at {place}: {e}"),
                "pick a free DMLC_PS_ROOT_PORT, or stop what holds it",
            ),
        };
    }
    match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Ok(_) => ok("scheduler", format!("{place} is reachable from here")),
        Err(e) => bad(
            "scheduler",
            Verdict::Warn,
            format!("{place} is not reachable from here: {e}"),
            "start the scheduler first (this check expects it running), check \
             DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT and that no firewall drops the port",
        ),
    }
}

/// The cluster's token.
fn token(cfg: &Config) -> Check {
    match &cfg.auth {
        Some(pslite::auth::Secret::Token(t)) => ok(
            "token",
            format!(
                "PS_AUTH_TOKEN(_FILE) set, {} bytes (every node needs the same)",
                t.expose().len()
            ),
        ),
        Some(pslite::auth::Secret::Key(k)) => ok(
            "token",
            format!(
                "PS_AUTH_NODE_KEY set: this node proves {} only",
                pslite::wire::Node::describe(k.id())
            ),
        ),
        None if std::env::var("PS_AUTH").is_ok_and(|v| v.trim() == "none") => bad(
            "token",
            Verdict::Warn,
            "PS_AUTH=none: anyone who reaches the cluster's ports can join it",
            "give every node the same PS_AUTH_TOKEN or PS_AUTH_TOKEN_FILE",
        ),
        None => ok("token", "not needed: the scheduler is on loopback"),
    }
}

/// The locked-memory limit against what the node pins on the RDMA van.
fn locked_memory(cfg: &Config) -> Check {
    let limit = memlock::limit();
    let shown = limit.map_or("unlimited".to_string(), memlock::bytes);
    if cfg.node.van != VanType::Rdma {
        return ok(
            "memlock",
            format!("{shown}; the ZMQ van pins no memory (the RDMA van would)"),
        );
    }
    let ring = pslite::van::rdma::RdmaConfig::from_env().map_or(4 << 20, |r| r.ring_bytes);
    let peers = match cfg.role {
        Role::Server => cfg.cluster.num_workers,
        Role::Worker => cfg.cluster.num_servers,
        Role::Scheduler => 0,
    } as u64;
    let pool = if cfg.role == Role::Scheduler {
        0
    } else {
        cfg.zero_copy.pool_bytes as u64
    };
    let need = memlock::needed(pool, ring, peers);
    let what = format!(
        "the RDMA van pins {} (PS_POOL_BYTES {} + 2 rings x {peers} peers x PS_RDMA_RING_BYTES \
         {ring}, key-store chunks on top), RLIMIT_MEMLOCK is {shown}",
        memlock::bytes(need),
        pool
    );
    match limit {
        _ if memlock::exempt() => ok(
            "memlock",
            format!("{what}; this process has CAP_IPC_LOCK, so the limit does not apply"),
        ),
        Some(l) if l < need => bad("memlock", Verdict::Fail, what, memlock::FIX),
        _ => ok("memlock", what),
    }
}

/// The RDMA devices and the van's choice among them.
fn rdma(cfg: &Config) -> Check {
    if cfg.node.van != VanType::Rdma {
        return ok("rdma", "not used (DMLC_PS_VAN_TYPE is zmq)");
    }
    let r =
        pslite::van::rdma::RdmaConfig::from_env().and_then(|rc| pslite::van::rdma::describe(&rc));
    match r {
        Ok(lines) => ok("rdma", lines.join("\n")),
        Err(e) => bad(
            "rdma",
            Verdict::Fail,
            e.to_string(),
            "see the text: install rdma-core (libibverbs1 ibverbs-providers), set RDMA_DEVICE \
             / RDMA_GID_INDEX, or use DMLC_PS_VAN_TYPE=zmq",
        ),
    }
}
