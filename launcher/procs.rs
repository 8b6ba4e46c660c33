//! The launcher's child processes: starting a node with its output prefixed, watching them all,
//! restarting a failed server or worker while the run's restart budget lasts, and stopping
//! them.

use crate::report::Board;
use crate::ssh::{env_block, quote};
use pslite::apps::bench::progress::LAUNCHER_VAR;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How every node of the cluster is started: this program (`pslite-launch node <role>`) with
/// the cluster's variables.
pub struct Launch<'a> {
    /// This program.
    pub exe: &'a Path,
    /// Variables set in every child's environment, on top of the launcher's own.
    pub env: &'a [(&'a str, String)],
    /// For nodes on other hosts: how they are reached ([`crate::ssh`]).
    pub remote: Option<Remote>,
    /// Every node serves metrics on a free port of its own (`PS_METRICS_PORT=0`; the node
    /// prints where); false: a local node serves none.
    pub metrics: bool,
    /// The workers' bench lines: progress and reports ([`crate::report`]).
    pub board: Board,
}

/// How `pslite-launch ssh` starts a node on a host.
pub struct Remote {
    /// The ssh program and its options.
    pub ssh: Vec<String>,
    /// pslite-launch on the hosts.
    pub exe: String,
    /// The directory the nodes start in (the launcher's, where it exists on the host).
    pub cwd: String,
}

/// One node of the cluster: what is needed to start it, and to start it again.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its name in the output's prefix and in messages, e.g. `server 0`.
    pub name: String,
    /// `scheduler`, `server` or `worker`.
    pub role: &'static str,
    /// The rank it asks for (`PSLITE_RANK`); none for the scheduler.
    pub rank: Option<usize>,
    /// Arguments after `pslite-launch node <role>`.
    pub args: Vec<String>,
    /// A shell command run instead of `pslite-launch node <role>` (`--worker-cmd` of `local`
    /// and `ssh`: a Python worker, say), with the same variables.
    pub command: Option<String>,
    /// The host it runs on through ssh (`host` or `user@host`); none: this machine.
    pub host: Option<String>,
}

/// A started node: its process, the threads copying its output, and whether it still runs.
pub struct Proc {
    node: Node,
    child: Child,
    /// Output copiers of this process and of those it replaced; joined by [`kill_all`].
    readers: Vec<JoinHandle<()>>,
    running: bool,
    /// A remote node's standard input (its ssh's): the node stops when it closes.
    _stdin: Option<ChildStdin>,
}

/// The run's restart budget: at most `limit` restarts over the whole run, all nodes together.
pub struct Restarts {
    /// Restarts allowed (`--restart`).
    pub limit: usize,
    /// Restarts done so far.
    pub used: usize,
}

/// The variables about the cluster's token, which a node given its key does not get.
const SHARED_SECRET: [&str; 3] = ["PS_AUTH_TOKEN", "PS_AUTH_TOKEN_FILE", "PS_AUTH"];

/// The key (hex) of `node`'s id, for a server or worker with a rank when the cluster has a
/// token (in `vars`, or the launcher's own `PS_AUTH_TOKEN` or `PS_AUTH_TOKEN_FILE`); `None`
/// otherwise.
///
/// # Errors
/// The launcher's token file cannot be read, or its token is refused.
fn node_key(node: &Node, vars: &[(&str, String)]) -> Result<Option<String>, String> {
    let id = match (node.role, node.rank) {
        ("server", Some(r)) => pslite::wire::Node::server_id(r),
        ("worker", Some(r)) => pslite::wire::Node::worker_id(r),
        _ => return Ok(None),
    };
    let own = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let token = match vars.iter().find(|(k, _)| *k == "PS_AUTH_TOKEN") {
        Some((_, t)) => Some(
            pslite::auth::Token::new(t).map_err(|why| format!("PS_AUTH_TOKEN refused: {why}"))?,
        ),
        None => match (own("PS_AUTH_TOKEN"), own("PS_AUTH_TOKEN_FILE")) {
            (Some(t), _) => Some(
                pslite::auth::Token::new(&t)
                    .map_err(|why| format!("PS_AUTH_TOKEN refused: {why}"))?,
            ),
            (None, Some(f)) => Some(pslite::auth::Token::from_file(&f)?),
            (None, None) => None,
        },
    };
    Ok(token.map(|t| t.node_key(id).to_hex()))
}

/// Starts `node` with its role, rank and arguments, its output lines prefixed with
/// `[<name>] `; prints its pid to stderr.
pub fn spawn(launch: &Launch<'_>, node: Node) -> Result<Proc, String> {
    let (vars, keyed) = node_vars(launch, &node)?;
    let (cmd, block) = match (&node.host, &launch.remote) {
        (Some(host), Some(remote)) => {
            let (cmd, block) = ssh_command(remote, host, &node, keyed, &vars)?;
            (cmd, Some(block))
        }
        _ => (local_command(launch, &node, keyed, &vars), None),
    };
    let mut child = start_child(cmd, &node.name)?;
    let stdin = match (block, child.stdin.take()) {
        (Some(block), Some(mut stdin)) => {
            // A node that cannot be told its variables fails on its own, naming why.
            let _ = stdin.write_all(block.as_bytes());
            Some(stdin)
        }
        _ => None,
    };
    match &node.host {
        Some(h) => eprintln!(
            "pslite-launch: started {} on {h} (ssh pid {})",
            node.name,
            child.id()
        ),
        None => eprintln!("pslite-launch: started {} (pid {})", node.name, child.id()),
    }
    let prefix = format!("[{}] ", node.name);
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(copy_lines(out, prefix.clone(), false, launch.board.clone()));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(copy_lines(err, prefix, true, launch.board.clone()));
    }
    Ok(Proc {
        node,
        child,
        readers,
        running: true,
        _stdin: stdin,
    })
}

/// Variables set in a node's environment: (name, value).
type Vars<'a> = Vec<(&'a str, String)>;

/// The variables `node` is started with: the cluster's, its role and rank, the launcher's
/// mark, a free metrics port where asked; and whether it got its own key
/// (`PS_AUTH_NODE_KEY`) in place of the cluster's token (the [`SHARED_SECRET`] variables
/// then left out).
///
/// # Errors
/// As [`node_key`].
fn node_vars<'a>(launch: &Launch<'a>, node: &Node) -> Result<(Vars<'a>, bool), String> {
    let mut vars: Vars<'a> = launch.env.to_vec();
    vars.push(("DMLC_ROLE", node.role.to_string()));
    if let Some(r) = node.rank {
        vars.push(("PSLITE_RANK", r.to_string()));
    }
    vars.push((LAUNCHER_VAR, "1".into()));
    // A server or worker gets its own key instead of the cluster's token: it can then prove
    // its own identity only (pslite::auth). The scheduler keeps the token.
    let key = node_key(node, &vars)?;
    if let Some(k) = &key {
        vars.retain(|(name, _)| !SHARED_SECRET.contains(name));
        vars.push(("PS_AUTH_NODE_KEY", k.clone()));
    }
    if launch.metrics {
        // Any free port, chosen by the node as it binds (no race between nodes picking ports),
        // which prints where: "[server 0] pslite: server metrics at http://…/metrics".
        vars.push(("PS_METRICS_PORT", "0".into()));
    }
    Ok((vars, key.is_some()))
}

/// The ssh command that starts `node` on `host` (`pslite-launch remote ROLE ARGS`, or
/// `remote-cmd` with its command) in the launcher's directory there, and the block of
/// variables to write to its standard input: `vars` and the launcher's own cluster
/// variables, less the [`SHARED_SECRET`] ones when the node is `keyed`.
///
/// # Errors
/// As [`env_block`].
fn ssh_command(
    remote: &Remote,
    host: &str,
    node: &Node,
    keyed: bool,
    vars: &[(&str, String)],
) -> Result<(Command, String), String> {
    let mut cmd = Command::new(&remote.ssh[0]);
    let mut words = vec![quote(&remote.exe)];
    match &node.command {
        Some(line) => words.extend(["remote-cmd".into(), quote(line)]),
        None => {
            words.extend(["remote".into(), node.role.into()]);
            words.extend(node.args.iter().map(|a| quote(a)));
        }
    }
    // A node starts in $HOME where the directory is missing; a command (whose paths
    // are the launcher's, relative to it) fails instead, the shell naming it.
    let cd = match &node.command {
        Some(_) => format!("cd {} || exit 1", quote(&remote.cwd)),
        None => format!("cd {} 2>/dev/null", quote(&remote.cwd)),
    };
    let line = format!("{cd}; exec {}", words.join(" "));
    cmd.args(&remote.ssh[1..])
        .arg(host)
        .arg(line)
        .stdin(Stdio::piped());
    let inherited = std::env::vars_os()
        .filter(|(name, _)| !keyed || !SHARED_SECRET.iter().any(|s| name.as_os_str() == *s));
    Ok((cmd, env_block(inherited, vars)?))
}

/// The command that starts `node` on this machine: `pslite-launch node ROLE ARGS`, or its
/// command under `sh -c` in a process group of its own, with `vars` on top of the launcher's
/// environment (less the [`SHARED_SECRET`] variables when the node is `keyed`, and less
/// `PS_METRICS_PORT` without `--metrics`).
fn local_command(
    launch: &Launch<'_>,
    node: &Node,
    keyed: bool,
    vars: &[(&str, String)],
) -> Command {
    let mut cmd = match &node.command {
        Some(line) => {
            let mut cmd = Command::new("sh");
            // Python flushes each line, so the prefixed output keeps its order. A
            // process group of its own: stopping the node stops every process the
            // command started (`cd x && python t.py` runs python as a grandchild).
            cmd.args(["-c", line])
                .env("PYTHONUNBUFFERED", "1")
                .process_group(0);
            cmd
        }
        None => {
            let mut cmd = Command::new(launch.exe);
            cmd.args(["node", node.role]).args(&node.args);
            cmd
        }
    };
    if keyed {
        for name in SHARED_SECRET {
            cmd.env_remove(name);
        }
    }
    cmd.envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    if !launch.metrics {
        cmd.env_remove("PS_METRICS_PORT");
    }
    cmd
}

/// Starts `cmd` (node `name`) with its standard output and error piped, and SIGTERM sent to
/// it should the launcher die.
///
/// # Errors
/// The process cannot be started (the text names the node and the program).
fn start_child(mut cmd: Command, name: &str) -> Result<Child, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to signal the child when the
    // launcher dies.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        let program = cmd.get_program().to_string_lossy();
        format!("cannot start {name} ({program}): {e}")
    })
}

/// A thread copying each line of `stream` to the launcher's stderr (`to_stderr`) or stdout,
/// prefixed with `prefix`, until the stream closes; a worker's bench line goes to `board`
/// instead.
fn copy_lines<R: Read + Send + 'static>(
    stream: R,
    prefix: String,
    to_stderr: bool,
    board: Board,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if !board.take(&line) {
                board.print(&format!("{prefix}{line}"), to_stderr);
            }
        }
    })
}

/// Waits until the scheduler and every worker have exited (0), one has failed and cannot be
/// restarted (its exit code) or `stop` is set (130), polling every 20 ms; then stops every
/// process. A failed node is started again while `restarts` allows (a server or worker only
/// while the scheduler runs). Each node of `joins` is started at its time (a server joining
/// the running job).
pub fn watch(
    launch: &Launch<'_>,
    procs: &mut Vec<Proc>,
    joins: &mut Vec<(std::time::Instant, Node)>,
    stop: &AtomicBool,
    restarts: &mut Restarts,
) -> Result<i32, String> {
    let mut workers_done = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            eprintln!("pslite-launch: interrupted; stopping every process");
            kill_all(procs);
            return Ok(130);
        }
        let now = std::time::Instant::now();
        if let Some(i) = joins.iter().position(|(at, _)| now >= *at) {
            let (_, node) = joins.remove(i);
            eprintln!(
                "pslite-launch: starting {} (PSLITE_RANK={}) to join the running job",
                node.name,
                node.rank.unwrap_or_default()
            );
            match spawn(launch, node) {
                Ok(p) => procs.push(p),
                Err(e) => {
                    kill_all(procs);
                    return Err(e);
                }
            }
        }
        if let Some(result) = poll(launch, procs, restarts) {
            kill_all(procs);
            return result;
        }
        // The scheduler and every worker exited 0 (a failure would have returned or been
        // restarted): the job is done; a server still running (a replacement that came too
        // late to find the job) is stopped. So is a scheduler still running 5 s after the
        // last worker ended well: one restarted after it released the last barrier waits for
        // a job that is over.
        let running = |role: &str| procs.iter().any(|p| p.node.role == role && p.running);
        if !running("worker") {
            let since = *workers_done.get_or_insert_with(std::time::Instant::now);
            if !running("scheduler") || since.elapsed() > Duration::from_secs(5) {
                kill_all(procs);
                return Ok(0);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Looks at each running process once, the scheduler first, marking those that have exited
/// and restarting a failed node while `restarts` allows: the exit code of the first failure
/// that ends the run, or the error of the first process that cannot be watched or restarted;
/// `None` otherwise. A restarted scheduler takes the job over from the nodes' re-registrations;
/// a server or worker is not restarted once the scheduler has exited (there is no job to
/// rejoin).
fn poll(
    launch: &Launch<'_>,
    procs: &mut [Proc],
    restarts: &mut Restarts,
) -> Option<Result<i32, String>> {
    for scheduler in [true, false] {
        let scheduler_runs = procs
            .iter()
            .any(|p| p.node.role == "scheduler" && p.running);
        for p in procs
            .iter_mut()
            .filter(|p| p.running && (p.node.role == "scheduler") == scheduler)
        {
            if let Some(result) = look(launch, p, restarts, scheduler || scheduler_runs) {
                return Some(result);
            }
        }
    }
    None
}

/// Looks at running process `p` once (see [`poll`]); `job` is false when the scheduler has
/// exited (a server or worker is then not restarted).
fn look(
    launch: &Launch<'_>,
    p: &mut Proc,
    restarts: &mut Restarts,
    job: bool,
) -> Option<Result<i32, String>> {
    let status = match p.child.try_wait() {
        Ok(Some(status)) => status,
        Ok(None) => return None,
        Err(e) => return Some(Err(format!("cannot watch {}: {e}", p.node.name))),
    };
    p.running = false;
    if status.success() {
        return None;
    }
    let name = &p.node.name;
    if restarts.used >= restarts.limit || !job {
        let why = if restarts.limit > 0 && !job {
            "; the scheduler has exited, so there is no job to rejoin".to_string()
        } else if restarts.limit > 0 {
            format!(
                "; no restarts left ({} of {} used)",
                restarts.used, restarts.limit
            )
        } else {
            String::new()
        };
        eprintln!("pslite-launch: {name} exited with {status}{why}; stopping the others");
        return Some(Ok(exit_code(status)));
    }
    restarts.used += 1;
    eprintln!(
        "pslite-launch: {name} exited with {status}; restarting it (restart {} of {})",
        restarts.used, restarts.limit
    );
    restart(launch, p).err().map(Err)
}

/// Starts `p`'s node again in its place (same role, rank, arguments and environment); the
/// exited process's output copiers are kept, to be joined by [`kill_all`].
fn restart(launch: &Launch<'_>, p: &mut Proc) -> Result<(), String> {
    let mut fresh = spawn(launch, p.node.clone())?;
    fresh.readers.append(&mut p.readers);
    *p = fresh;
    Ok(())
}

/// The launcher's exit code for a child's `status`: its code, or 128 + the signal that
/// killed it.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(1))
}

/// Kills every process, waits for each and lets its last output lines out.
pub fn kill_all(procs: &mut [Proc]) {
    for p in procs.iter_mut() {
        // A remote node sees its input close and stops.
        p._stdin = None;
        if p.node.command.is_some() {
            // SAFETY: kill(2) with a negative pid signals the process group the command leads.
            unsafe {
                libc::kill(-(p.child.id() as i32), libc::SIGKILL);
            }
        }
        let _ = p.child.kill();
    }
    for p in procs.iter_mut() {
        let _ = p.child.wait();
        // The pipes close with the child: let its last lines out.
        for r in p.readers.drain(..) {
            let _ = r.join();
        }
    }
}
