//! Helpers: `pslite-launch local` as a child whose output a test reads while it runs, and
//! whose nodes it can kill (by the pids the launcher prints).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The launcher's output so far and its process, for a test that kills one of its nodes.
pub struct Launched {
    child: std::process::Child,
    output: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Launched {
    /// `pslite-launch local ARGS` with `env`, its stdout and stderr gathered.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Launched {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
            .arg("local")
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the launcher starts");
        let output = Arc::new(Mutex::new(String::new()));
        use super::procs::gather_lines;
        let readers = vec![
            gather_lines(child.stdout.take().expect("stdout"), output.clone()),
            gather_lines(child.stderr.take().expect("stderr"), output.clone()),
        ];
        Launched {
            child,
            output,
            readers,
        }
    }

    /// The output so far.
    pub fn text(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits (at most 60 s) until the output has a line containing `text`; returns that line.
    pub fn wait_line(&self, text: &str) -> String {
        self.wait_for(&format!("line with {text:?}"), |l| l.contains(text))
    }

    /// Waits (at most 60 s) until a line of the output is one `is` takes; returns it.
    /// `what` names it in the failure.
    pub fn wait_for(&self, what: &str, is: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.text().lines().find(|l| is(l)) {
                return l.to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "no {what}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The pid of the process the launcher started as `node` ("server 0") most recently.
    pub fn pid(&self, node: &str) -> i32 {
        let started = format!("started {node} (pid ");
        let text = self.text();
        let line = text
            .lines()
            .rev()
            .find(|l| l.contains(&started))
            .expect("the node started");
        line.rsplit("(pid ")
            .next()
            .and_then(|p| p.trim_end_matches(')').parse().ok())
            .expect("a pid")
    }

    /// SIGKILLs the process the launcher started as `node` ("server 0") most recently.
    pub fn kill(&self, node: &str) {
        self.signal(node, libc::SIGKILL);
    }

    /// Sends `signal` to the process the launcher started as `node` most recently.
    pub fn signal(&self, node: &str, signal: i32) {
        let pid = self.pid(node);
        // SAFETY: kill(2) on a process the launcher started (its pid from the launcher).
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "signal {signal} to {node}"
        );
    }

    /// Waits (at most `limit`) for the launcher's exit; its status and whole output.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the launcher still ran after {limit:?}:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        (status.code(), self.text())
    }
}

impl Launched {
    /// `pslite-launch local --servers 2 --workers 2 --port PORT -- kv-app --repeat REPEAT`
    /// with `env` (for every node): a run long enough to be attacked meanwhile, which a test
    /// checks with [`assert_still_running`](Self::assert_still_running).
    pub fn kv_app_s2w2(port: u16, repeat: u32, env: &[(&str, &str)]) -> Launched {
        let (port, repeat) = (port.to_string(), repeat.to_string());
        Launched::start(
            &[
                "--servers",
                "2",
                "--workers",
                "2",
                "--port",
                &port,
                "--",
                "kv-app",
                "--repeat",
                &repeat,
            ],
            env,
        )
    }

    /// The attacks came while the run went on: neither kv-app worker has finished yet.
    pub fn assert_still_running(&self) {
        let out = self.text();
        assert!(
            !out.contains("worker 0: error: ") && !out.contains("worker 1: error: "),
            "the run ended before the attacks did: give kv-app more rounds\n{out}"
        );
    }

    /// Waits (at most `limit`) for the end of a kv-app run of two workers and checks it ended
    /// with status 0 and both workers exact (`error: 0, 0`); the assertions show the output
    /// without its info lines. Returns the whole output.
    pub fn finish_exact(self, limit: Duration) -> String {
        let (code, out) = self.finish(limit);
        let shown = without_info(&out);
        assert_eq!(code, Some(0), "{shown}");
        assert_eq!(out.matches("error: 0, 0").count(), 2, "{shown}");
        out
    }
}

/// `out` without its info lines (at `PS_VERBOSE=1` they are many).
pub fn without_info(out: &str) -> String {
    out.lines()
        .filter(|l| !l.contains(" INFO "))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pslite-launch local` arguments: launcher options `extra`, 2 servers and 2 workers under
/// `--restart restart --checkpoint-dir cp`, then `kv-app` with options `kv_app`.
fn kv_app_s2w2_args<'a>(
    extra: &[&'a str],
    restart: &'a str,
    cp: &'a str,
    kv_app: &[&'a str],
) -> Vec<&'a str> {
    let mut args = extra.to_vec();
    args.extend(["--servers", "2", "--workers", "2", "--restart", restart]);
    args.extend(["--checkpoint-dir", cp, "--", "kv-app"]);
    args.extend(kv_app);
    args
}

/// Both kv-app workers ended with exact sums (`error: 0, 0`) in `out` (`shown` on failure).
fn assert_both_workers_exact(out: &str, shown: &str) {
    for w in 0..2 {
        let exact = format!("[worker {w}] worker {w}: error: 0, 0");
        assert!(out.contains(&exact), "no {exact:?}:\n{shown}");
    }
}

/// One kill of [`kv_app_with_a_node_killed`].
pub struct KillRun<'a> {
    /// The checkpoint directory.
    pub cp: &'a str,
    /// More launcher options (`--van rdma`).
    pub extra: &'a [&'a str],
    /// kv-app's options (`--keys`, `--repeat`).
    pub kv_app: &'a [&'a str],
    /// Variables for every node.
    pub env: &'a [(&'a str, &'a str)],
    /// The node killed ("server 0", "worker 1").
    pub victim: &'a str,
    /// When, after both workers started.
    pub after: Duration,
    /// How long the whole run may take.
    pub limit: Duration,
}

/// Runs `kv-app` with 2 servers and 2 workers under `--restart 1 --checkpoint-dir`, SIGKILLs
/// the victim at the given moment, and checks the job ended with status 0, exact sums on both
/// workers, the victim restarted, and the other nodes told of its replacement. Returns the
/// launcher's output.
pub fn kv_app_with_a_node_killed(k: &KillRun<'_>) -> String {
    let args = kv_app_s2w2_args(k.extra, "1", k.cp, k.kv_app);
    let l = Launched::start(&args, k.env);
    l.wait_line("worker rank 1 (id 11) started: ");
    l.wait_line("worker rank 0 (id 9) started: ");
    std::thread::sleep(k.after);
    l.kill(k.victim);
    let (code, out) = l.finish(k.limit);
    // Info lines are many: kept only where they say what recovery did.
    let shown: String = out
        .lines()
        .filter(|l| {
            !l.contains(" INFO ")
                || ["restored", "replace", "applied", "passed"]
                    .iter()
                    .any(|w| l.contains(w))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let victim = k.victim;
    assert_eq!(
        code,
        Some(0),
        "{victim} killed after {:?}:\n{shown}",
        k.after
    );
    assert_both_workers_exact(&out, &shown);
    let restarted = format!("{victim} exited with signal: 9 (SIGKILL); restarting it");
    assert!(out.contains(&restarted), "{shown}");
    let role = victim.split(' ').next().unwrap_or_default();
    assert!(
        out.contains(&format!("was replaced by a new {role}")),
        "the others were not told of the replacement:\n{shown}"
    );
    out
}

/// When [`kv_app_with_the_scheduler_killed`] kills the scheduler.
pub struct SchedulerKill<'a> {
    /// After the output shows this line…
    pub moment: &'a str,
    /// …and this long after it.
    pub after: Duration,
    /// Another node ("server 0") SIGKILLed at the same moment, if any.
    pub also: Option<&'a str>,
}

/// Runs `kv-app` (options `kv_app`) with 2 servers and 2 workers under `--restart 2
/// --checkpoint-dir cp` and more launcher options `extra`, SIGKILLs the scheduler (and
/// `kill.also`) at `kill`'s moment, and checks the job ended with status 0 and exact sums on
/// both workers. Returns the output and the time from the kill to the new scheduler having
/// every node registered again (re-registered or replaced, or registered anew when the old one
/// died before its node table went out).
pub fn kv_app_with_the_scheduler_killed(
    cp: &str,
    kill: &SchedulerKill<'_>,
    extra: &[&str],
    kv_app: &[&str],
) -> (String, Duration) {
    let args = kv_app_s2w2_args(extra, "2", cp, kv_app);
    let l = Launched::start(&args, &[("PS_VERBOSE", "1")]);
    let (moment, after) = (kill.moment, kill.after);
    l.wait_line(moment);
    std::thread::sleep(after);
    let all_in = |out: &str| {
        out.matches("all 4 nodes re-registered with this scheduler")
            .count()
            + out.matches("all 4 nodes registered: ").count()
    };
    let before = all_in(&l.text());
    l.kill("scheduler");
    if let Some(also) = kill.also {
        l.kill(also);
    }
    let killed = Instant::now();
    while all_in(&l.text()) == before {
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no scheduler had every node again within 60 s:\n{}",
            without_info(&l.text())
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = killed.elapsed();
    let (code, out) = l.finish(Duration::from_secs(120));
    let shown = without_info(&out);
    assert_eq!(
        code,
        Some(0),
        "scheduler killed {after:?} after {moment:?}:\n{shown}"
    );
    assert_both_workers_exact(&out, &shown);
    let restarted = "scheduler exited with signal: 9 (SIGKILL); restarting it";
    assert!(out.contains(restarted), "{shown}");
    (out, took)
}
