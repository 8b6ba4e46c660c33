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
        use std::io::{BufRead, BufReader, Read};
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
        let gather = |s: Box<dyn Read + Send>| {
            let out = output.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(s).lines().map_while(Result::ok) {
                    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
                    o.push_str(&line);
                    o.push('\n');
                }
            })
        };
        let readers = vec![
            gather(Box::new(child.stdout.take().expect("stdout"))),
            gather(Box::new(child.stderr.take().expect("stderr"))),
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
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.text().lines().find(|l| l.contains(text)) {
                return l.to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "no line with {text:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs the process the launcher started as `node` ("server 0") most recently.
    pub fn kill(&self, node: &str) {
        let started = format!("started {node} (pid ");
        let text = self.text();
        let line = text
            .lines()
            .rev()
            .find(|l| l.contains(&started))
            .expect("the node started");
        let pid: i32 = line
            .rsplit("(pid ")
            .next()
            .and_then(|p| p.trim_end_matches(')').parse().ok())
            .expect("a pid");
        // SAFETY: kill(2) on a process the launcher started (its pid from the launcher).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {node}");
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

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
