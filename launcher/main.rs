//! `pslite-launch`: starts a whole cluster as processes.
//!
//! `pslite-launch local --servers S --workers W -- <pslite-worker args…>` runs the scheduler,
//! S servers and W workers on 127.0.0.1 with a free port, prefixes each line of their output
//! with role and rank, and exits with the first non-zero status (or 0 when all succeed). On a
//! failure, Ctrl-C or SIGTERM it stops every child; children also die with the launcher
//! (`PR_SET_PDEATHSIG`), so none is orphaned.

use clap::{Parser, Subcommand};
use pslite::apps::cli::{
    run_scheduler, run_server, run_worker, SchedulerCli, ServerCli, WorkerCli,
};
use pslite::apps::exit_with;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(version, about = "Launch a pslite cluster")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Scheduler, servers and workers as processes on this machine (127.0.0.1).
    Local {
        /// Number of servers.
        #[arg(long, default_value_t = 1)]
        servers: usize,
        /// Number of workers.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Van: zmq or rdma (sets DMLC_PS_VAN_TYPE).
        #[arg(long, default_value = "zmq")]
        van: String,
        /// Scheduler port (default: a free one).
        #[arg(long)]
        port: Option<u16>,
        /// Arguments of pslite-worker, e.g. `bench --mode push` or `kv-app`.
        #[arg(last = true, required = true)]
        worker_args: Vec<String>,
    },
    /// Runs one node (what `local` starts for each process; same as the pslite-* binaries).
    #[command(subcommand, hide = true)]
    Node(Box<NodeCmd>),
}

#[derive(Subcommand)]
enum NodeCmd {
    Scheduler(SchedulerCli),
    Server(ServerCli),
    Worker(WorkerCli),
}

struct Proc {
    name: String,
    child: Child,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn main() {
    let Cli { cmd } = Cli::parse();
    let (servers, workers, van, port, worker_args) = match cmd {
        Cmd::Node(node) => match *node {
            NodeCmd::Scheduler(c) => exit_with("pslite-scheduler", run_scheduler(&c)),
            NodeCmd::Server(c) => exit_with("pslite-server", run_server(&c)),
            NodeCmd::Worker(c) => exit_with("pslite-worker", run_worker(&c)),
        },
        Cmd::Local {
            servers,
            workers,
            van,
            port,
            worker_args,
        } => (servers, workers, van, port, worker_args),
    };
    let code = match run(servers, workers, &van, port, &worker_args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pslite-launch: error: {e}");
            1
        }
    };
    std::process::exit(code)
}

/// How every node of the cluster is started: this program (`pslite-launch node <role>`) with
/// the cluster's variables.
struct Launch<'a> {
    exe: &'a PathBuf,
    env: &'a [(&'a str, String)],
}

/// Starts node `name` with role `role`, rank `rank` (`PSLITE_RANK`) and extra `args`, its
/// output prefixed with its name.
fn spawn(
    launch: &Launch<'_>,
    name: &str,
    role: &str,
    rank: Option<usize>,
    args: &[String],
) -> Result<Proc, String> {
    let Launch { exe, env } = *launch;
    let mut cmd = Command::new(exe);
    cmd.args(["node", role]);
    if let Some(r) = rank {
        cmd.env("PSLITE_RANK", r.to_string());
    }
    cmd.args(args)
        .env("DMLC_ROLE", role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to signal the child when the
    // launcher dies.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {name} ({}): {e}", exe.display()))?;
    let mut readers = Vec::new();
    for (stream, is_err) in [
        (
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            false,
        ),
        (
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            true,
        ),
    ] {
        let Some(stream) = stream else { continue };
        let prefix = format!("[{name}] ");
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if is_err {
                    let _ = writeln!(std::io::stderr().lock(), "{prefix}{line}");
                } else {
                    let _ = writeln!(std::io::stdout().lock(), "{prefix}{line}");
                }
            }
        }));
    }
    Ok(Proc {
        name: name.to_string(),
        child,
        readers,
    })
}

/// Runs the cluster until every process has exited or one has failed; returns the exit code.
fn run(
    servers: usize,
    workers: usize,
    van: &str,
    port: Option<u16>,
    worker_args: &[String],
) -> Result<i32, String> {
    if servers == 0 || workers == 0 {
        return Err("--servers and --workers must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this program: {e}"))?;
    let port = match port {
        Some(p) => p,
        None => pslite::free_port().map_err(|e| e.to_string())?,
    };
    let env = [
        ("DMLC_PS_ROOT_URI", "127.0.0.1".to_string()),
        ("DMLC_PS_ROOT_PORT", port.to_string()),
        ("DMLC_NUM_SERVER", servers.to_string()),
        ("DMLC_NUM_WORKER", workers.to_string()),
        ("DMLC_NODE_HOST", "127.0.0.1".to_string()),
        ("DMLC_PS_VAN_TYPE", van.to_string()),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    }
    let mut procs: Vec<Proc> = Vec::new();
    let launch = Launch {
        exe: &exe,
        env: &env,
    };
    if let Err(e) = start_all(&launch, (servers, workers), worker_args, &mut procs) {
        kill_all(&mut procs);
        return Err(e);
    }
    watch(&mut procs, &stop)
}

/// Starts the scheduler, then `servers` servers and `workers` workers, into `procs`; stops at
/// the first that cannot be started (those started stay in `procs`).
fn start_all(
    launch: &Launch<'_>,
    (servers, workers): (usize, usize),
    worker_args: &[String],
    procs: &mut Vec<Proc>,
) -> Result<(), String> {
    let mut start =
        |name: String, role: &str, rank: Option<usize>, args: &[String]| -> Result<(), String> {
            let p = spawn(launch, &name, role, rank, args)?;
            procs.push(p);
            Ok(())
        };
    start("scheduler".into(), "scheduler", None, &[])?;
    for r in 0..servers {
        start(format!("server {r}"), "server", Some(r), &[])?;
    }
    for r in 0..workers {
        start(format!("worker {r}"), "worker", Some(r), worker_args)?;
    }
    Ok(())
}

/// Waits until every process has exited (0), one has failed (its exit code) or `stop` is set
/// (130), polling every 20 ms; then stops every process.
fn watch(procs: &mut [Proc], stop: &AtomicBool) -> Result<i32, String> {
    let mut live: Vec<bool> = vec![true; procs.len()];
    loop {
        if stop.load(Ordering::SeqCst) {
            eprintln!("pslite-launch: interrupted; stopping every process");
            kill_all(procs);
            return Ok(130);
        }
        if let Some(result) = first_failure(procs, &mut live) {
            kill_all(procs);
            return result;
        }
        if live.iter().all(|l| !l) {
            kill_all(procs);
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Looks at each process still `live` once, marking those that have exited: the exit code of
/// the first that failed, or the error of the first that cannot be watched; `None` otherwise.
fn first_failure(procs: &mut [Proc], live: &mut [bool]) -> Option<Result<i32, String>> {
    for (i, p) in procs.iter_mut().enumerate() {
        if !live[i] {
            continue;
        }
        match p.child.try_wait() {
            Ok(Some(status)) => {
                live[i] = false;
                if !status.success() {
                    eprintln!(
                        "pslite-launch: {} exited with {status}; stopping the others",
                        p.name
                    );
                    return Some(Ok(exit_code(status)));
                }
            }
            Ok(None) => {}
            Err(e) => return Some(Err(format!("cannot watch {}: {e}", p.name))),
        }
    }
    None
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(1))
}

fn kill_all(procs: &mut [Proc]) {
    for p in procs.iter_mut() {
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
