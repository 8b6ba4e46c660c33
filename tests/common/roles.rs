//! Helpers: a cluster whose roles are started one by one (`pslite-scheduler`, `pslite-server`,
//! `pslite-worker`), so that a test can signal one process and see how each of them ends.

use super::procs::gather_lines;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One started process and its output so far (standard output and standard error, each
/// line as it came).
struct Proc {
    name: String,
    child: Child,
    output: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

/// How one process ended.
pub struct Ended {
    /// "scheduler", "server0", "worker1", …
    pub name: String,
    /// Its exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// When it ended, after the instant given to [`Cluster::wait_all`].
    pub after: Duration,
    /// Its standard output and standard error.
    pub output: String,
}

/// A scheduler, `servers` servers and `workers` workers on loopback, with fixed ranks
/// (`PSLITE_RANK`): "server0" is server rank 0 (id 8), "worker1" worker rank 1 (id 11).
pub struct Cluster {
    procs: Vec<Proc>,
    /// Every process's variables (the cluster's, then the test's).
    env: Vec<(String, String)>,
}

impl Cluster {
    /// Starts the roles with `env` on top of the cluster's variables; every worker runs
    /// `worker_args` (an application and its options).
    pub fn start(
        servers: usize,
        workers: usize,
        env: &[(&str, &str)],
        worker_args: &[&str],
    ) -> Cluster {
        let port = pslite::free_port().expect("a free port").to_string();
        let (s, w) = (servers.to_string(), workers.to_string());
        let base = [
            ("DMLC_PS_ROOT_URI", "127.0.0.1"),
            ("DMLC_PS_ROOT_PORT", port.as_str()),
            ("DMLC_NUM_SERVER", s.as_str()),
            ("DMLC_NUM_WORKER", w.as_str()),
            ("DMLC_NODE_HOST", "127.0.0.1"),
        ];
        let mut roles = vec![(
            "scheduler".to_string(),
            env!("CARGO_BIN_EXE_pslite-scheduler"),
            None,
        )];
        roles.extend((0..servers).map(|r| {
            (
                format!("server{r}"),
                env!("CARGO_BIN_EXE_pslite-server"),
                Some(r),
            )
        }));
        roles.extend((0..workers).map(|r| {
            (
                format!("worker{r}"),
                env!("CARGO_BIN_EXE_pslite-worker"),
                Some(r),
            )
        }));
        let env: Vec<(String, String)> = base
            .iter()
            .chain(env)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut c = Cluster {
            procs: Vec::new(),
            env,
        };
        for (name, exe, rank) in roles {
            let args: &[&str] = if name.starts_with("worker") {
                worker_args
            } else {
                &[]
            };
            c.add(&name, exe, rank, args);
        }
        c
    }

    /// A cluster with no process yet; [`Cluster::add_in`] starts them with `env`.
    pub fn empty(env: &[(&str, &str)]) -> Cluster {
        Cluster {
            procs: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Starts one more process `name` (role from the name: "server0b" is a server) running
    /// `exe` with rank `rank` and `args`, with the cluster's variables: a replacement, say.
    pub fn add(&mut self, name: &str, exe: &str, rank: Option<usize>, args: &[&str]) {
        self.add_in(&[], name, exe, rank, args, &[]);
    }

    /// As [`Cluster::add`], run through `wrap` (e.g. `ip netns exec NS`), with `env` on top of
    /// the cluster's variables.
    pub fn add_in(
        &mut self,
        wrap: &[&str],
        name: &str,
        exe: &str,
        rank: Option<usize>,
        args: &[&str],
        env: &[(&str, &str)],
    ) {
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.args(args);
        if let Some(r) = rank {
            cmd.env("PSLITE_RANK", r.to_string());
        }
        let role = ["scheduler", "server", "worker"]
            .into_iter()
            .find(|r| name.starts_with(r))
            .expect("a role's name");
        cmd.env("DMLC_ROLE", role)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("the role starts");
        let output = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            gather_lines(child.stdout.take().expect("stdout"), output.clone()),
            gather_lines(child.stderr.take().expect("stderr"), output.clone()),
        ];
        self.procs.push(Proc {
            name: name.to_string(),
            child,
            output,
            readers,
        });
    }

    /// Waits (at most `limit`) until process `name` printed a line containing `text`.
    pub fn wait_for(&self, name: &str, text: &str, limit: Duration) {
        let p = self
            .procs
            .iter()
            .find(|p| p.name == name)
            .expect("a process of that name");
        let t0 = Instant::now();
        while !p
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(text)
        {
            assert!(
                t0.elapsed() < limit,
                "{name} did not print {text:?} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (at most `limit`) for process `name` to exit; its exit status (`None`: killed by
    /// a signal) and its output. Fails the test if it is still running then.
    pub fn wait_exit(&mut self, name: &str, limit: Duration) -> (Option<i32>, String) {
        let p = self
            .procs
            .iter_mut()
            .find(|p| p.name == name)
            .expect("a process of that name");
        let t0 = Instant::now();
        loop {
            if let Some(status) = p.child.try_wait().expect("try_wait") {
                for r in p.readers.drain(..) {
                    let _ = r.join();
                }
                let out = p.output.lock().unwrap_or_else(|e| e.into_inner()).clone();
                return (status.code(), out);
            }
            let out = p.output.lock().unwrap_or_else(|e| e.into_inner()).clone();
            assert!(
                t0.elapsed() < limit,
                "{name} still runs after {limit:?}:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Process `name`'s output so far.
    pub fn output(&self, name: &str) -> String {
        let p = self
            .procs
            .iter()
            .find(|p| p.name == name)
            .expect("a process of that name");
        p.output.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sends `signal` (`libc::SIGKILL`, …) to process `name`.
    pub fn signal(&self, name: &str, signal: i32) {
        let p = self
            .procs
            .iter()
            .find(|p| p.name == name)
            .expect("a process of that name");
        // SAFETY: kill(2) on a child of ours that has not been waited for.
        let r = unsafe { libc::kill(p.child.id() as i32, signal) };
        assert_eq!(r, 0, "signal {signal} to {name}");
    }

    /// Waits for every process (at most `limit` after `since`; a process still running then is
    /// killed, and the test fails naming it) and says how each ended.
    pub fn wait_all(mut self, since: Instant, limit: Duration) -> Vec<Ended> {
        let mut procs = std::mem::take(&mut self.procs);
        let mut ended: Vec<Option<(Option<i32>, Duration)>> = vec![None; procs.len()];
        let mut late = Vec::new();
        loop {
            let mut all = true;
            for (p, e) in procs.iter_mut().zip(ended.iter_mut()) {
                if e.is_some() {
                    continue;
                }
                match p.child.try_wait().expect("try_wait") {
                    Some(status) => *e = Some((status.code(), since.elapsed())),
                    None => all = false,
                }
            }
            if all {
                break;
            }
            if since.elapsed() > limit {
                for p in procs.iter_mut() {
                    if p.child.try_wait().expect("try_wait").is_none() {
                        late.push(p.name.clone());
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                    }
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out: Vec<Ended> = procs
            .into_iter()
            .zip(ended)
            .map(|(p, e)| {
                let (code, after) = e.unwrap_or((None, limit));
                for r in p.readers {
                    let _ = r.join();
                }
                let output = p.output.lock().unwrap_or_else(|e| e.into_inner()).clone();
                Ended {
                    name: p.name,
                    code,
                    after,
                    output,
                }
            })
            .collect();
        assert!(
            late.is_empty(),
            "still running {limit:?} after: {late:?}\n{}",
            all_output(&out)
        );
        out
    }
}

impl Drop for Cluster {
    /// A test that failed before [`Cluster::wait_all`] leaves no process behind (a stopped one
    /// included: SIGKILL ends it too).
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// Every process's output, each under its name.
pub fn all_output(ended: &[Ended]) -> String {
    ended
        .iter()
        .map(|e| {
            format!(
                "--- {} (exit {:?} after {:.1} s)\n{}",
                e.name,
                e.code,
                e.after.as_secs_f64(),
                e.output
            )
        })
        .collect()
}
