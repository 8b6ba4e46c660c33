//! `pslite-launch ssh` against real sshd (Debian's openssh-server) on two test hosts
//! (network namespaces, `scripts/netns.sh`), with a key made by the test; the launcher runs on
//! a third host.

mod common;

use common::netns::Hosts;
use common::procs::{kv_app_worker_cmd, kv_app_worker_cmd_said, text};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LAUNCH: &str = env!("CARGO_BIN_EXE_pslite-launch");
const SECRET: &str = "ssh-test-token-never-on-a-command-line";

/// sshd on hosts 1 and 2, a client key they accept, and a host file naming them.
struct Sshd {
    hosts: Hosts,
    dir: PathBuf,
    daemons: Vec<Child>,
}

fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("runs");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

impl Sshd {
    fn start(tag: &str) -> Option<Sshd> {
        if !Path::new("/usr/sbin/sshd").exists() {
            let fix = "apt-get install openssh-server";
            common::skip("PSLITE_REQUIRE_LAUNCHERS", "/usr/sbin/sshd is missing", fix);
            return None;
        }
        let hosts = Hosts::up(tag, 3, false)?;
        let dir = std::env::temp_dir().join(format!("pslite-ssh-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd (privilege separation)");
        for key in ["id", "hostkey"] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key)));
        }
        std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).expect("copy key");
        let daemons = [1, 2].map(|i| Sshd::daemon(&hosts, &dir, i)).into();
        std::fs::write(
            dir.join("hosts"),
            format!("# test hosts\n{}\nroot@{}\n", Hosts::v4(1), Hosts::v4(2)),
        )
        .expect("host file");
        let me = Sshd {
            hosts,
            dir,
            daemons,
        };
        // sshd listens once it has read its keys: wait until both accept.
        let t0 = Instant::now();
        while !(1..=2).all(|i| me.ssh_ok(i)) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "sshd did not come up"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(me)
    }

    /// sshd on host `i` (1 or 2), listening on port 22 of its IPv4 address, with the host key
    /// and authorized keys in `dir`.
    fn daemon(hosts: &Hosts, dir: &Path, i: usize) -> Child {
        let conf = dir.join(format!("sshd{i}.conf"));
        let text = format!(
            "ListenAddress {}\nPort 22\nHostKey {d}/hostkey\nAuthorizedKeysFile {d}/authorized_keys\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             UsePAM no\nStrictModes no\nPidFile none\n",
            Hosts::v4(i),
            d = dir.display()
        );
        std::fs::write(&conf, text).expect("sshd config");
        // The remote shells must not run this machine's ~/.bashrc (bash sources it under
        // sshd): here it runs `pyenv init`, whose lock, left behind by a session killed in
        // the middle, made every later session hang. sshd gets a mount namespace where the
        // file is empty.
        let script = format!(
            "home=$(getent passwd root | cut -d: -f6); \
             [ -f \"$home/.bashrc\" ] && mount --bind /dev/null \"$home/.bashrc\"; \
             exec ip netns exec {} /usr/sbin/sshd -D -e -f {}",
            hosts.ns(i),
            conf.display()
        );
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd starts")
    }

    fn ssh(&self) -> String {
        format!(
            "ssh -F /dev/null -i {} -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            self.dir.join("id").display()
        )
    }

    fn ssh_ok(&self, i: usize) -> bool {
        let mut c = self.hosts.command(0, "sh");
        c.arg("-c")
            .arg(format!("{} {} true", self.ssh(), Hosts::v4(i)));
        c.output().is_ok_and(|o| o.status.success())
    }

    /// `pslite-launch ssh` on host 0 over hosts 1 and 2; `worker_args` are pslite-worker's, or
    /// `--worker-cmd CMD`.
    fn launcher(&self, s: usize, w: usize, worker_args: &[&str]) -> Command {
        let mut c = self.hosts.command(0, LAUNCH);
        c.args(["ssh", "--hostfile"])
            .arg(self.dir.join("hosts"))
            .args([
                "--ssh",
                &self.ssh(),
                "--servers",
                &s.to_string(),
                "--workers",
                &w.to_string(),
            ]);
        // `--worker-cmd CMD` as it is, anything else as pslite-worker's arguments.
        if worker_args.first() != Some(&"--worker-cmd") {
            c.arg("--");
        }
        c.args(worker_args)
            .env("PS_TIMEOUT", "60")
            .env_remove("PS_AUTH_TOKEN");
        c
    }

    /// Processes of pslite-launch still on hosts 1 and 2.
    fn remote_nodes(&self) -> Vec<String> {
        let mut left = Vec::new();
        for i in [1, 2] {
            for pid in self.hosts.pids(i) {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if comm.trim() == "pslite-launch" {
                    left.push(format!("{pid} on host {i}"));
                }
            }
        }
        left
    }
}

impl Sshd {
    /// Asserts that no node is left on hosts 1 and 2 within 10 s.
    fn assert_all_stop(&self) {
        let t0 = Instant::now();
        while !self.remote_nodes().is_empty() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "still running: {:?}",
                self.remote_nodes()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn ssh_launch_runs_kv_app_over_two_hosts() {
    let Some(sshd) = Sshd::start("sshk") else {
        return;
    };
    let o = sshd
        .launcher(2, 2, &["kv-app", "--keys", "1000", "--repeat", "10"])
        .output()
        .expect("launcher runs");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for r in 0..2 {
        assert!(
            out.contains(&format!("[worker {r}] worker {r}: error: 0, 0")),
            "{out}"
        );
    }
    // Node k on host k mod 2: the scheduler and server 1 on the first, server 0 and worker 0
    // on the second (named with its user), worker 1 on the first.
    for (node, host) in [
        ("scheduler", "198.18.0.2"),
        ("server 0", "root@198.18.0.3"),
        ("server 1", "198.18.0.2"),
        ("worker 0", "root@198.18.0.3"),
        ("worker 1", "198.18.0.2"),
    ] {
        assert!(
            out.contains(&format!(
                "pslite-launch: started {node} on {host} (ssh pid "
            )),
            "{out}"
        );
    }
    sshd.assert_all_stop();
}

#[test]
fn ctrl_c_stops_every_remote_node() {
    let Some(sshd) = Sshd::start("sshc") else {
        return;
    };
    let launcher = sshd
        .launcher(1, 2, &["kv-app", "--keys", "1000", "--repeat", "100000"])
        .env("PS_AUTH_TOKEN", SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launcher starts");
    let t0 = Instant::now();
    while sshd.remote_nodes().len() < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "nodes did not start: {:?}",
            sshd.remote_nodes()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    // The token is on no command line of any process of the three hosts (ssh, the remote
    // shells, the nodes): it travels on standard input.
    for i in 0..3 {
        for pid in sshd.hosts.pids(i) {
            let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            assert!(
                !argv.contains(SECRET),
                "the token is on pid {pid}'s command line: {argv}"
            );
        }
    }
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(launcher.id() as i32, libc::SIGINT) }, 0);
    let o = launcher.wait_with_output().expect("launcher ends");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("pslite-launch: interrupted; stopping every process"),
        "{err}"
    );
    sshd.assert_all_stop();
}

#[test]
fn a_failed_remote_node_stops_the_others() {
    let Some(sshd) = Sshd::start("sshf") else {
        return;
    };
    // A worker that fails at once (unknown application): the launcher stops every node.
    let o = sshd
        .launcher(1, 2, &["no-such-app"])
        .output()
        .expect("launcher runs");
    let out = text(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("exited with exit status: 2; stopping the others"),
        "{out}"
    );
    sshd.assert_all_stop();
}

#[test]
fn worker_commands_run_on_the_hosts_with_the_nodes_variables() {
    let Some(sshd) = Sshd::start("sshw") else {
        return;
    };
    let line = kv_app_worker_cmd();
    let o = sshd
        .launcher(2, 2, &["--worker-cmd", &line])
        .output()
        .expect("launcher runs");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for r in 0..2 {
        for said in kv_app_worker_cmd_said(r) {
            let want = format!("[worker {r}] {said}");
            assert!(out.contains(&want), "{want}:\n{out}");
        }
    }
    sshd.assert_all_stop();
}

#[test]
fn a_failed_worker_command_stops_the_others_commands() {
    let Some(sshd) = Sshd::start("sshx") else {
        return;
    };
    // Worker 0's command fails; worker 1's would sleep for 617 s, under a shell: the launcher
    // stops it, and with it every process the command started on its host.
    let o = sshd
        .launcher(
            1,
            2,
            &[
                "--worker-cmd",
                "if [ \"$PSLITE_RANK\" = 0 ]; then exit 3; fi; sleep 617; true",
            ],
        )
        .output()
        .expect("launcher runs");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains("worker 0 exited with exit status: 3; stopping the others"),
        "{out}"
    );
    sshd.assert_all_stop();
    let t0 = Instant::now();
    loop {
        let left = Command::new("pgrep")
            .args(["-f", "sleep 617"])
            .output()
            .expect("pgrep runs");
        if left.stdout.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
