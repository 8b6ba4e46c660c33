//! `pslite-launch ssh`: a cluster over hosts reached by ssh, in the style of ps-lite's tracker
//! (dmlc-core `tracker/dmlc_tracker/ssh.py`): a host file, the scheduler on the first host,
//! servers and workers spread over the hosts in turn, every line of output prefixed with its
//! node, and every remote process stopped when the run fails or is interrupted.
//!
//! Each node runs as `ssh [OPTIONS] HOST 'cd CWD; exec PROGRAM remote ROLE ARGS'` (a worker
//! with `--worker-cmd` as `… exec PROGRAM remote-cmd CMD`, which runs `sh -c CMD`). Its
//! variables (the cluster's, and every `DMLC_*`, `PS_*`, `RDMA_*` and `PSLITE_*` of the
//! launcher's environment) travel on ssh's standard input, not on a command line another user
//! of the host could read: one `NAME=VALUE` line each, then an empty line. The node then watches
//! its standard input: when the launcher or its ssh goes, the input closes, and the node exits.

use clap::Args;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicI32, Ordering};

/// Options of `pslite-launch ssh`.
#[derive(Args)]
pub struct Ssh {
    /// File with one host per line (`host` or `user@host`; `#` starts a comment). The scheduler
    /// runs on the first; node k (scheduler, servers, then workers) on host k mod (hosts).
    #[arg(long)]
    pub hostfile: std::path::PathBuf,
    /// Number of servers.
    #[arg(long)]
    pub servers: usize,
    /// Number of workers.
    #[arg(long)]
    pub workers: usize,
    /// The ssh command and its options, split on spaces (e.g. `ssh -p 2222 -i KEY`).
    #[arg(long, default_value = "ssh -o BatchMode=yes")]
    pub ssh: String,
    /// The pslite-launch program on the hosts (default: this program's path).
    #[arg(long)]
    pub remote_exe: Option<String>,
    /// Van: zmq or rdma (sets DMLC_PS_VAN_TYPE).
    #[arg(long, default_value = "zmq")]
    pub van: String,
    /// Scheduler port (default: 9091).
    #[arg(long, default_value_t = 9091)]
    pub port: u16,
    /// An embedding table every server serves (repeatable), passed on as its `--table`
    /// (see `pslite-server --help`); checked here first.
    #[arg(long = "table", value_name = "SPEC")]
    pub tables: Vec<pslite::kv::table::TableSpec>,
    /// A shell command each worker runs on its host instead of pslite-worker, e.g. `python
    /// train.py` (a Python worker), in the launcher's working directory there: `sh -c CMD`
    /// with the node's variables and PYTHONUNBUFFERED=1, its processes stopped with the node.
    #[arg(long, value_name = "CMD", conflicts_with = "worker_args")]
    pub worker_cmd: Option<String>,
    /// Arguments of pslite-worker, e.g. `bench --mode push` or `kv-app`.
    #[arg(last = true, required_unless_present = "worker_cmd")]
    pub worker_args: Vec<String>,
}

/// The hosts of a host file, in order.
///
/// # Errors
/// The file cannot be read, holds no host, or a line is not one word.
pub fn hosts(path: &std::path::Path, text: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line.split_whitespace().count() != 1 || line.starts_with('-') {
            return Err(format!(
                "{}:{}: {line:?}: expected one host (`host` or `user@host`) per line",
                path.display(),
                i + 1
            ));
        }
        hosts.push(line.to_string());
    }
    if hosts.is_empty() {
        return Err(format!("{}: no host in the file", path.display()));
    }
    Ok(hosts)
}

/// `user@host` → `host`: the address the other nodes reach the host at.
pub fn address(host: &str) -> &str {
    host.rsplit('@').next().unwrap_or(host)
}

/// `word` quoted for a POSIX shell.
pub fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Variables of the launcher's host that mean nothing on another: where this host listens,
/// and a token file's path (the launcher sends the token itself).
const LOCAL_ONLY: [&str; 4] = [
    "DMLC_NODE_HOST",
    "DMLC_ROLE",
    "PSLITE_RANK",
    "PS_AUTH_TOKEN_FILE",
];

/// The variables of the launcher's environment a node needs (`DMLC_*`, `PS_*`, `RDMA_*`,
/// `PSLITE_*`, but not [`LOCAL_ONLY`]'s), overlaid by `cluster`, as the block sent on a node's
/// standard input.
///
/// # Errors
/// A wanted variable that is not UTF-8, or whose value holds a line break (it could not travel
/// as one line).
pub fn env_block(
    inherited: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    cluster: &[(&str, String)],
) -> Result<String, String> {
    let wanted = |k: &str| {
        ["DMLC_", "PS_", "RDMA_", "PSLITE_"]
            .iter()
            .any(|p| k.starts_with(p))
            && !LOCAL_ONLY.contains(&k)
    };
    let mut vars: Vec<(String, String)> = Vec::new();
    for (k, v) in inherited {
        let Some(k) = k.to_str().filter(|k| wanted(k)) else {
            continue;
        };
        let v = v
            .into_string()
            .map_err(|_| format!("{k} is not UTF-8; it cannot be sent to the hosts"))?;
        vars.push((k.to_string(), v));
    }
    for (k, v) in cluster {
        vars.retain(|(n, _)| n != k);
        vars.push((k.to_string(), v.clone()));
    }
    let mut block = String::new();
    for (k, v) in vars {
        if v.contains(['\n', '\r']) {
            return Err(format!(
                "{k} holds a line break; it cannot be sent to the hosts"
            ));
        }
        block.push_str(&format!("{k}={v}\n"));
    }
    block.push('\n');
    Ok(block)
}

/// The remote side (`pslite-launch remote ROLE …`): reads the variables from standard input,
/// sets them, and starts a thread that ends this process when standard input closes.
///
/// # Errors
/// Standard input ends before the empty line, or a line is not `NAME=VALUE`.
pub fn take_env() -> Result<(), String> {
    let mut stdin = std::io::stdin().lock();
    loop {
        let mut line = String::new();
        match stdin.read_line(&mut line) {
            Ok(0) => return Err("standard input ended before the variables did".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("cannot read the variables: {e}")),
        }
        let line = line.trim_end_matches('\n');
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !k.contains('\0') && !v.contains('\0'))
            .ok_or_else(|| format!("{line:?}: expected NAME=VALUE"))?;
        // Edition 2021: setting variables is safe; no other thread runs yet.
        std::env::set_var(k, v);
    }
    drop(stdin);
    std::thread::Builder::new()
        .name("ps-stdin".into())
        .spawn(|| {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            let _ = writeln!(
                std::io::stderr(),
                "pslite-launch remote: the launcher is gone (standard input closed); stopping"
            );
            // Not while run_command is between starting the command and recording its group.
            let _starting = STARTING.lock();
            let group = COMMAND_GROUP.load(Ordering::SeqCst);
            if group > 0 {
                // SAFETY: kill only sends a signal, to the command's own process group.
                unsafe { libc::kill(-group, libc::SIGTERM) };
            }
            std::process::exit(143)
        })
        .map_err(|e| format!("cannot watch standard input: {e}"))?;
    Ok(())
}

/// The process group of the command `remote-cmd` runs (0: none yet), which the watcher of
/// standard input stops when the launcher goes.
static COMMAND_GROUP: AtomicI32 = AtomicI32::new(0);

/// Held by `run_command` from starting the command to recording its group.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `pslite-launch remote-cmd CMD`, after [`take_env`]: runs `sh -c CMD` in a process group of
/// its own (so that stopping it stops every process it started) with PYTHONUNBUFFERED=1 and
/// no standard input; returns its exit code (128 + the signal that ended it).
///
/// # Errors
/// The shell cannot be started or waited for.
pub fn run_command(line: &str) -> Result<i32, String> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let starting = STARTING.lock();
    let mut child = std::process::Command::new("sh")
        .args(["-c", line])
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start sh -c {line:?}: {e}"))?;
    COMMAND_GROUP.store(child.id() as i32, Ordering::SeqCst);
    drop(starting);
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for sh -c {line:?}: {e}"))?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_files_list_hosts_and_reject_lines_that_are_not_one() {
        let p = std::path::Path::new("hosts");
        assert_eq!(
            hosts(p, "# cluster\nh0\n\n  root@h1  # gpu\n").unwrap(),
            ["h0", "root@h1"]
        );
        assert_eq!(
            hosts(p, "# none\n").unwrap_err(),
            "hosts: no host in the file"
        );
        assert_eq!(
            hosts(p, "h0\nh1 slots=2\n").unwrap_err(),
            "hosts:2: \"h1 slots=2\": expected one host (`host` or `user@host`) per line"
        );
        assert_eq!(
            hosts(p, "-oProxyCommand=x\n").unwrap_err(),
            "hosts:1: \"-oProxyCommand=x\": expected one host (`host` or `user@host`) per line"
        );
        assert_eq!(address("root@198.18.0.2"), "198.18.0.2");
        assert_eq!(address("h1"), "h1");
    }

    #[test]
    fn words_are_quoted_for_the_remote_shell() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_block_carries_the_nodes_variables_only() {
        let inherited = [
            ("PS_AUTH_TOKEN", "t"),
            ("HOME", "/root"),
            ("DMLC_NUM_SERVER", "9"),
            ("RDMA_DEVICE", "rxe0"),
            ("DMLC_NODE_HOST", "10.0.0.1"),
            ("PS_AUTH_TOKEN_FILE", "/home/me/token"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let block = env_block(inherited.into_iter(), &[("DMLC_NUM_SERVER", "2".into())]).unwrap();
        assert_eq!(
            block,
            "PS_AUTH_TOKEN=t\nRDMA_DEVICE=rxe0\nDMLC_NUM_SERVER=2\n\n"
        );
        let bad = [("PS_X".into(), "a\nb".into())];
        assert_eq!(
            env_block(bad.into_iter(), &[]).unwrap_err(),
            "PS_X holds a line break; it cannot be sent to the hosts"
        );
    }
}
