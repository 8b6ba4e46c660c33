//! Helpers: a cluster as threads of the test process, on loopback.
#![allow(dead_code)]

pub mod attack;
pub mod conformance;
pub mod launched;
pub mod netns;
pub mod procs;
pub mod roles;

use pslite::{Config, DefaultHandler, KVServer, Postoffice, Result, Role, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A test cannot run here because `missing`: says so (`SKIPPED: …`, with `fix`) so the caller
/// can return, or fails the test when `var=1` (as `.ci/run` sets), where it must run.
pub fn skip(var: &str, missing: &str, fix: &str) {
    let required = std::env::var(var).is_ok_and(|v| v == "1");
    assert!(!required, "{var}=1 but {missing}");
    eprintln!("SKIPPED: {missing} ({fix})");
}

pub struct Cluster {
    pub workers: Vec<Arc<Postoffice>>,
    pub others: Vec<JoinHandle<Result<()>>>,
    /// The scheduler's port on 127.0.0.1.
    pub port: u16,
}

/// Config for a node of a local cluster with `PS_TIMEOUT` `timeout_s`. Its heartbeat timeout
/// is 30 s: these clusters are threads of a test process that shares two cores with another
/// test, and no test of them is about a node going silent (one that is sets its own).
pub fn cfg(role: Role, port: u16, s: usize, w: usize, timeout_s: f64) -> Config {
    let mut c = Config::local(role, port, s, w);
    c.timing.timeout = Duration::from_secs_f64(timeout_s);
    c.timing.heartbeat_timeout = Duration::from_secs(30);
    c.timing.heartbeat_interval = Duration::from_millis(200);
    c.zero_copy.pool_bytes = 16 << 20;
    c
}

/// Starts a scheduler and `s` servers (each running `serve`) in threads and `w` workers, and
/// returns the workers' postoffices once all have started.
pub fn cluster_with(
    s: usize,
    w: usize,
    timeout_s: f64,
    serve: impl Fn(&Arc<Postoffice>) -> Result<Box<dyn std::any::Any>> + Send + Sync + 'static,
) -> Cluster {
    cluster_cfg(s, w, timeout_s, |_| {}, serve)
}

/// As [`cluster_with`], with `tweak` applied to every node's configuration.
pub fn cluster_cfg(
    s: usize,
    w: usize,
    timeout_s: f64,
    tweak: impl Fn(&mut Config) + Send + Sync + 'static,
    serve: impl Fn(&Arc<Postoffice>) -> Result<Box<dyn std::any::Any>> + Send + Sync + 'static,
) -> Cluster {
    let port = pslite::free_port().expect("free port");
    let serve = Arc::new(serve);
    let tweak = Arc::new(tweak);
    let cfg = move |role| {
        let mut c = cfg(role, port, s, w, timeout_s);
        tweak(&mut c);
        c
    };
    let sched = cfg(Role::Scheduler);
    let mut others = vec![thread::spawn(move || Postoffice::start(sched)?.finalize())];
    for _ in 0..s {
        let (serve, server) = (serve.clone(), cfg(Role::Server));
        others.push(thread::spawn(move || {
            let po = Postoffice::start(server)?;
            let _server = serve(&po)?;
            po.finalize()
        }));
    }
    let starting: Vec<_> = (0..w)
        .map(|_| {
            let worker = cfg(Role::Worker);
            thread::spawn(move || Postoffice::start(worker))
        })
        .collect();
    let workers = starting
        .into_iter()
        .map(|t| t.join().expect("no panic").expect("worker starts"))
        .collect();
    Cluster {
        workers,
        others,
        port,
    }
}

/// A server of application 0 running the default handler for values of type `V` (for
/// [`cluster_with`] and [`cluster_cfg`]).
pub fn serve_default<V: Value>(po: &Arc<Postoffice>) -> Result<Box<dyn std::any::Any>> {
    Ok(Box::new(KVServer::<V>::new(po, 0, DefaultHandler::new())?))
}

/// A cluster whose servers run the default handler for f32.
pub fn cluster(s: usize, w: usize, timeout_s: f64) -> Cluster {
    cluster_with(s, w, timeout_s, serve_default::<f32>)
}

impl Cluster {
    /// Finalizes every worker and joins the scheduler and servers, asserting all succeeded.
    pub fn finish(self) {
        let fin: Vec<_> = self
            .workers
            .into_iter()
            .map(|po| thread::spawn(move || po.finalize()))
            .collect();
        for f in fin {
            f.join().expect("no panic").expect("worker finalizes");
        }
        for t in self.others {
            t.join()
                .expect("no panic")
                .expect("scheduler/server finalize");
        }
    }
}

/// The variables of a node of a cluster of one server and one worker whose scheduler is at
/// 127.0.0.1:`port`, with `PS_TIMEOUT=1`: a node alone there gives up its start after a
/// second.
pub fn alone_on_loopback(port: &str) -> [(&'static str, &str); 5] {
    [
        ("DMLC_PS_ROOT_URI", "127.0.0.1"),
        ("DMLC_PS_ROOT_PORT", port),
        ("DMLC_NUM_SERVER", "1"),
        ("DMLC_NUM_WORKER", "1"),
        ("PS_TIMEOUT", "1"),
    ]
}

/// Runs a scheduler alone on loopback (it waits for one server and one worker that never come)
/// with `PS_TIMEOUT=1`, no authentication variables from the test's environment, and `env`;
/// its start-up gives up (checked) and what it printed on stderr is returned: what a node
/// says at start.
pub fn scheduler_alone(env: &[(&str, &str)]) -> String {
    let port = pslite::free_port().expect("free port").to_string();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_pslite-scheduler"))
        .envs(alone_on_loopback(&port))
        .env_remove("PS_AUTH_TOKEN")
        .env_remove("PS_AUTH_TOKEN_FILE")
        .env_remove("PS_AUTH")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "the start-up gives up: {err}");
    err
}

/// A fresh, empty directory for one test's checkpoints, removed when dropped (a test's
/// checkpoints reach hundreds of MB; CI's disk is not ours to fill). Declare it before the
/// cluster that writes into it, so the cluster's processes are stopped first.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `pslite-NAME-PID` under the temporary directory, emptied.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pslite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Scratch(dir)
    }

    /// The path as a string, for a command line.
    pub fn arg(&self) -> String {
        self.0.to_string_lossy().to_string()
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
