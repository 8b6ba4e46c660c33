//! Helpers: real processes (scheduler, servers, workers) through `pslite-launch local`.

use std::process::{Command, Output};

/// Runs `pslite-launch local --servers S --workers W -- ARGS` with `PS_TIMEOUT=60` and waits
/// for it.
pub fn launch(servers: usize, workers: usize, args: &[&str]) -> Output {
    launch_env(servers, workers, &[], args)
}

/// As [`launch`], with the variables `env` set on top (they may replace `PS_TIMEOUT`).
pub fn launch_env(servers: usize, workers: usize, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args(["local", "--servers", &servers.to_string()])
        .args(["--workers", &workers.to_string(), "--"])
        .args(args)
        .env("PS_TIMEOUT", "60")
        .envs(env.iter().copied())
        .output()
        .expect("launcher runs")
}

/// The launcher's standard output, then its standard error.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A `--worker-cmd` line: prints the worker's rank, role, worker count and PYTHONUNBUFFERED,
/// then runs kv-app's worker in its place (`pslite-worker kv-app`, 1000 keys, 10 rounds).
pub fn kv_app_worker_cmd() -> String {
    format!(
        "echo \"command of worker $PSLITE_RANK: $DMLC_ROLE, $DMLC_NUM_WORKER workers, \
         PYTHONUNBUFFERED=$PYTHONUNBUFFERED\"; exec {} kv-app --keys 1000 --repeat 10",
        env!("CARGO_BIN_EXE_pslite-worker")
    )
}

/// What worker `r` of 2 prints running [`kv_app_worker_cmd`]: the variables it got, then
/// kv-app's exact sums.
pub fn kv_app_worker_cmd_said(r: usize) -> [String; 2] {
    [
        format!("command of worker {r}: worker, 2 workers, PYTHONUNBUFFERED=1"),
        format!("worker {r}: error: 0, 0"),
    ]
}

/// Runs `kv-app ARGS` on `s` servers and `w` workers; asserts the job succeeded and every
/// worker's sums were exact (`error: 0, 0`).
pub fn kv_app_ok(s: usize, w: usize, args: &[&str]) {
    kv_app_ok_env(s, w, &[], args);
}

/// As [`kv_app_ok`], with the variables `env` set; returns the job's output.
pub fn kv_app_ok_env(s: usize, w: usize, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut all = vec!["kv-app"];
    all.extend_from_slice(args);
    let o = launch_env(s, w, env, &all);
    let out = text(&o);
    assert!(
        o.status.success(),
        "kv-app ({s},{w}) {args:?} failed:\n{out}"
    );
    for r in 0..w {
        assert!(
            out.contains(&format!("[worker {r}] worker {r}: error: 0, 0")),
            "worker {r}:\n{out}"
        );
    }
    out
}

/// A thread that appends each line read from `s` to `out` (a child's output gathered as it
/// comes; several streams may share one `out`).
pub fn gather_lines(
    s: impl std::io::Read + Send + 'static,
    out: std::sync::Arc<std::sync::Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(s).lines().map_while(Result::ok) {
            let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
            o.push_str(&line);
            o.push('\n');
        }
    })
}

/// A child's stderr, read as it comes into a shared text (to wait for a log line while the
/// child runs).
pub struct StderrLog {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl StderrLog {
    /// Starts reading `child`'s stderr (it must be piped).
    pub fn of(child: &mut std::process::Child) -> StderrLog {
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = gather_lines(child.stderr.take().expect("stderr"), text.clone());
        StderrLog { text, reader }
    }

    /// What was read so far.
    pub fn text(&self) -> String {
        self.text.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until the text contains `line` (at most `within`; panics with the text after).
    pub fn wait_for(&self, line: &str, within: std::time::Duration) {
        let t0 = std::time::Instant::now();
        while !self.text().contains(line) {
            assert!(
                t0.elapsed() < within,
                "no {line:?} within {within:?}: {}",
                self.text()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits for the child's stderr to close (the child ended); returns the whole text.
    pub fn finish(self) -> String {
        let StderrLog { text, reader } = self;
        reader.join().expect("the log reader ends with the child");
        let text = text.lock().unwrap_or_else(|p| p.into_inner()).clone();
        text
    }
}
