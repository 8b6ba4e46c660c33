//! `pslite-launch`: starts a whole cluster as processes.
//!
//! `pslite-launch local --servers S --workers W -- <pslite-worker args…>` runs the scheduler,
//! S servers and W workers on 127.0.0.1 with a free port, prefixes each line of their output
//! with role and rank, and exits with the first non-zero status (or 0 when all succeed). On a
//! failure, Ctrl-C or SIGTERM it stops every child; children also die with the launcher
//! (`PR_SET_PDEATHSIG`), so none is orphaned. It prints each child's pid to stderr as it starts
//! it (`pslite-launch: started server 0 (pid 12345)`).
//!
//! `--restart N` lets up to N failures (a non-zero exit or a signal) of nodes, over the whole
//! run and all nodes together, be answered by starting that node again with the same rank
//! (`PSLITE_RANK`), arguments and environment, and the same output prefix: it takes the dead
//! node's place; a server restores its checkpoint, a worker carries on after the barriers its
//! predecessor passed, and a scheduler (at the same address) takes the job over from the
//! servers' and workers' re-registrations while they train on. Once the N restarts are spent,
//! a failure stops the run as above.
//! `--checkpoint-dir DIR` passes `PS_CHECKPOINT_DIR=DIR` to every child, where servers keep
//! their checkpoint; without it (or that variable in the launcher's environment) the scheduler
//! accepts no replacement, so `--restart` needs it.
//!
//! `--join-servers N` starts N more servers after the cluster, one every `--join-after-ms`
//! (ranks S, S+1, …, with the cluster's variables): each joins the running job and takes a
//! share of the keys. Joins are refused with checkpoints, so it conflicts with
//! `--checkpoint-dir`.
//!
//! `--worker-cmd CMD` runs each worker as the shell command CMD instead (`python train.py`: a
//! Python worker), with the same variables.
//!
//! `pslite-launch ssh --hostfile FILE --servers S --workers W -- <pslite-worker args…>` runs
//! the cluster on hosts reached by ssh, ps-lite tracker style: see [`ssh`].
//!
//! `pslite-launch task --servers S --workers W -- <pslite-worker args…>` is one task of a job
//! another launcher started on many hosts (Slurm, Open MPI, PMI, Kubernetes): see [`task`].
//!
//! `pslite-launch doctor` checks this host for one node before a job: see [`doctor`].
//!
//! Under `local`, each node serves Prometheus metrics on a free port of its own
//! (`PS_METRICS_PORT=0`; each prints where; `--no-metrics` turns them off), and at the end of a `bench` run the
//! launcher prints one summary across workers; with standard output on a terminal it draws one
//! progress line for all workers ([`report`]).
//!
//! `pslite-launch inspect DIR` prints what a checkpoint directory holds, without changing it.

mod doctor;
mod procs;
mod report;
mod ssh;
mod task;

use clap::{Args, Parser, Subcommand};
use procs::{kill_all, spawn, watch, Launch, Node, Proc, Remote, Restarts};
use pslite::apps::cli::{
    run_scheduler, run_server, run_worker, SchedulerCli, ServerCli, WorkerCli,
};
use pslite::apps::exit_with;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Launch a pslite cluster
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// What to run: a whole cluster, or one node of it.
#[derive(Subcommand)]
enum Cmd {
    /// Scheduler, servers and workers as processes on this machine (127.0.0.1).
    Local(Local),
    /// One task of a job started by Slurm (srun), Open MPI (mpirun), an MPI with PMI, a
    /// Kubernetes Indexed Job or anything setting PSLITE_TASK_RANK/PSLITE_TASK_COUNT: task 0
    /// runs the scheduler, tasks 1…S the servers, the rest the workers.
    Task(task::Task),
    /// Scheduler, servers and workers on hosts reached by ssh (ps-lite tracker style): the
    /// scheduler on the host file's first host, the others spread over the hosts in turn.
    Ssh(ssh::Ssh),
    /// Checks this host for a node before a job: versions, configuration, the address it
    /// would announce, the scheduler's port, the token, the locked-memory limit against what
    /// the RDMA van pins, RDMA devices and GID tables; prints the fix of each failed check and
    /// exits 1 if any failed.
    Doctor(doctor::Doctor),
    /// Prints what a checkpoint directory (PS_CHECKPOINT_DIR) holds: per server and
    /// application the snapshot's generation and size, the requests logged since, and for the
    /// default handler the keys, their lengths and a sample of values (read-only).
    Inspect {
        /// The checkpoint directory.
        dir: std::path::PathBuf,
    },
    /// Runs one node (what `local` starts for each process; same as the pslite-* binaries).
    #[command(subcommand, hide = true)]
    Node(Box<NodeCmd>),
    /// A node started by `ssh`: its variables come on standard input, and it stops when
    /// standard input closes.
    #[command(subcommand, hide = true)]
    Remote(Box<NodeCmd>),
    /// A worker command started by `ssh --worker-cmd`: variables and stopping as `remote`,
    /// then `sh -c CMD`.
    #[command(name = "remote-cmd", hide = true)]
    RemoteShell {
        /// The shell command.
        line: String,
    },
}

/// The role of the node `pslite-launch node` runs.
#[derive(Subcommand)]
enum NodeCmd {
    Scheduler(SchedulerCli),
    Server(ServerCli),
    Worker(WorkerCli),
}

/// Options of `pslite-launch local`.
#[derive(Args)]
struct Local {
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
    /// Restarts of failed nodes allowed over the whole run (all nodes together; a restarted
    /// server restores its checkpoint, a restarted scheduler takes the job over from the
    /// nodes, so this needs --checkpoint-dir); 0 stops the run at the first failure.
    #[arg(long, default_value_t = 0)]
    restart: usize,
    /// Servers started after the cluster, to join the running job (ranks after --servers,
    /// one every --join-after-ms); each takes its share of the keys when it joins. The
    /// cluster's DMLC_NUM_SERVER stays --servers.
    #[arg(long, default_value_t = 0)]
    join_servers: usize,
    /// Milliseconds from the cluster's start to the first --join-servers server, and between
    /// two of them.
    #[arg(long, default_value_t = 1000)]
    join_after_ms: u64,
    /// Directory where the servers keep their checkpoint (sets PS_CHECKPOINT_DIR in every
    /// child).
    #[arg(long)]
    checkpoint_dir: Option<String>,
    /// No metrics servers (by default each node serves Prometheus metrics on a free port of
    /// its own, PS_METRICS_PORT=0, and prints where).
    #[arg(long)]
    no_metrics: bool,
    /// A shell command each worker runs instead of pslite-worker, e.g. `python train.py`
    /// (a Python worker): it gets the same variables (DMLC_ROLE=worker,
    /// DMLC_PS_ROOT_URI, PSLITE_RANK, …) and PYTHONUNBUFFERED=1. The scheduler and servers
    /// are pslite's own.
    #[arg(long, value_name = "CMD", conflicts_with = "worker_args")]
    worker_cmd: Option<String>,
    /// An embedding table every server serves (repeatable), passed on as its `--table`, e.g.
    /// 'app=0,dim=16,init=normal:0:0.01,opt=adagrad:lr=0.05,budget=512MiB' (see
    /// `pslite-server --help`); checked here first.
    #[arg(long = "table", value_name = "SPEC")]
    tables: Vec<pslite::kv::table::TableSpec>,
    /// Arguments of pslite-worker, e.g. `bench --mode push` or `kv-app`.
    #[arg(last = true, required_unless_present = "worker_cmd")]
    worker_args: Vec<String>,
}

/// Runs one node (`node`) or a whole cluster (`local`) and exits with its status.
fn main() {
    let Cli { cmd } = Cli::parse();
    let local = match cmd {
        Cmd::Node(node) => run_node(*node),
        Cmd::Remote(node) => {
            if let Err(e) = ssh::take_env() {
                eprintln!("pslite-launch remote: error: {e}");
                std::process::exit(1)
            }
            run_node(*node)
        }
        Cmd::RemoteShell { line } => {
            let code = ssh::take_env()
                .and_then(|()| ssh::run_command(&line))
                .unwrap_or_else(|e| {
                    eprintln!("pslite-launch remote-cmd: error: {e}");
                    1
                });
            std::process::exit(code)
        }
        Cmd::Local(local) => local,
        Cmd::Ssh(opts) => {
            let code = run_ssh(&opts).unwrap_or_else(|e| {
                eprintln!("pslite-launch: error: {e}");
                1
            });
            std::process::exit(code)
        }
        Cmd::Task(t) => {
            eprintln!("pslite-launch task: error: {}", task::run(&t));
            std::process::exit(1)
        }
        Cmd::Doctor(d) => std::process::exit(doctor::run(&d)),
        Cmd::Inspect { dir } => match pslite::apps::inspect::inspect(&dir) {
            Ok(report) => {
                print!("{report}");
                std::process::exit(0)
            }
            Err(e) => {
                eprintln!("pslite-launch: error: {e}");
                std::process::exit(1)
            }
        },
    };
    let code = match run(&local) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pslite-launch: error: {e}");
            1
        }
    };
    std::process::exit(code)
}

/// Runs one node and exits with its status.
fn run_node(node: NodeCmd) -> ! {
    match node {
        NodeCmd::Scheduler(c) => exit_with("pslite-scheduler", run_scheduler(&c)),
        NodeCmd::Server(c) => exit_with("pslite-server", run_server(&c)),
        NodeCmd::Worker(c) => exit_with("pslite-worker", run_worker(&c)),
    }
}

/// The cluster's variables: scheduler, counts, van, and a fresh token unless one was given
/// (the nodes inherit it) or authentication is off.
fn cluster_env(
    root: &str,
    port: u16,
    (servers, workers): (usize, usize),
    van: &str,
) -> Result<Vec<(&'static str, String)>, String> {
    let mut env = vec![
        ("DMLC_PS_ROOT_URI", root.to_string()),
        ("DMLC_PS_ROOT_PORT", port.to_string()),
        ("DMLC_NUM_SERVER", servers.to_string()),
        ("DMLC_NUM_WORKER", workers.to_string()),
        ("DMLC_PS_VAN_TYPE", van.to_string()),
    ];
    // Secure by default.
    let off = std::env::var("PS_AUTH").is_ok_and(|v| v.trim() == "none");
    if !given("PS_AUTH_TOKEN") && !given("PS_AUTH_TOKEN_FILE") && !off {
        let token = pslite::auth::Token::generate()?;
        env.push(("PS_AUTH_TOKEN", token.expose().to_string()));
    }
    Ok(env)
}

/// Whether the launcher's environment sets `var` to something.
fn given(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// Starts `nodes` in order and watches them ([`watch`]) until the run ends; returns its exit
/// code.
/// `joins`: servers started later, each at its time, to join the running job.
fn start_and_watch(
    launch: &Launch<'_>,
    nodes: Vec<Node>,
    mut joins: Vec<(std::time::Instant, Node)>,
    restart: usize,
) -> Result<i32, String> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    }
    let mut procs: Vec<Proc> = Vec::new();
    for node in nodes {
        match spawn(launch, node) {
            Ok(p) => procs.push(p),
            Err(e) => {
                kill_all(&mut procs);
                return Err(e);
            }
        }
    }
    let mut restarts = Restarts {
        limit: restart,
        used: 0,
    };
    let code = watch(launch, &mut procs, &mut joins, &stop, &mut restarts);
    launch.board.finish();
    code
}

/// `pslite-launch ssh`: the cluster on the host file's hosts.
fn run_ssh(opts: &ssh::Ssh) -> Result<i32, String> {
    let (servers, workers) = (opts.servers, opts.workers);
    if servers == 0 || workers == 0 {
        return Err("--servers and --workers must be at least 1".into());
    }
    let text = std::fs::read_to_string(&opts.hostfile)
        .map_err(|e| format!("cannot read {}: {e}", opts.hostfile.display()))?;
    let hosts = ssh::hosts(&opts.hostfile, &text)?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this program: {e}"))?;
    let mut env = cluster_env(
        ssh::address(&hosts[0]),
        opts.port,
        (servers, workers),
        &opts.van,
    )?;
    // A token file's path means nothing on the hosts: its token travels instead (on stdin).
    if let (false, Ok(path)) = (given("PS_AUTH_TOKEN"), std::env::var("PS_AUTH_TOKEN_FILE")) {
        let token = pslite::auth::Token::from_file(&path)?;
        env.push(("PS_AUTH_TOKEN", token.expose().to_string()));
    }
    let remote = Remote {
        ssh: opts.ssh.split_whitespace().map(str::to_string).collect(),
        exe: opts
            .remote_exe
            .clone()
            .unwrap_or_else(|| exe.display().to_string()),
        cwd: std::env::current_dir().map_or("/".into(), |d| d.display().to_string()),
    };
    if remote.ssh.is_empty() {
        return Err("--ssh is empty".into());
    }
    let launch = Launch {
        exe: &exe,
        env: &env,
        remote: Some(remote),
        metrics: false,
        board: report::Board::new(),
    };
    pslite::kv::table::check_specs(&opts.tables).map_err(|e| e.to_string())?;
    let mut all = nodes(servers, workers, &opts.worker_args);
    for (k, n) in all.iter_mut().enumerate() {
        n.host = Some(hosts[k % hosts.len()].clone());
        if n.role == "worker" {
            n.command.clone_from(&opts.worker_cmd);
        }
    }
    serve_tables(&mut all, &opts.tables);
    start_and_watch(&launch, all, Vec::new(), 0)
}

/// Runs the cluster until every process has exited or one has failed past the restart budget;
/// returns the exit code.
fn run(local: &Local) -> Result<i32, String> {
    let (servers, workers) = (local.servers, local.workers);
    if servers == 0 || workers == 0 {
        return Err("--servers and --workers must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this program: {e}"))?;
    let port = match local.port {
        Some(p) => p,
        None => pslite::free_port().map_err(|e| e.to_string())?,
    };
    let mut env = cluster_env("127.0.0.1", port, (servers, workers), &local.van)?;
    env.push(("DMLC_NODE_HOST", "127.0.0.1".to_string()));
    if let Some(dir) = &local.checkpoint_dir {
        env.push(("PS_CHECKPOINT_DIR", dir.clone()));
    }
    let inherited = std::env::var_os("PS_CHECKPOINT_DIR").is_some_and(|d| !d.is_empty());
    if local.join_servers > 0 && (local.checkpoint_dir.is_some() || inherited) {
        return Err(
            "--join-servers cannot be used with --checkpoint-dir (or PS_CHECKPOINT_DIR): a \
             server joins a running job only while lost nodes are not replaced"
                .into(),
        );
    }
    if local.restart > 0 && local.checkpoint_dir.is_none() && !inherited {
        return Err(
            "--restart needs --checkpoint-dir (or PS_CHECKPOINT_DIR): without a \
                    checkpoint the scheduler accepts no replacement server"
                .into(),
        );
    }
    let launch = Launch {
        exe: &exe,
        env: &env,
        remote: None,
        metrics: !local.no_metrics,
        board: report::Board::new(),
    };
    let mut all = nodes(servers, workers, &local.worker_args);
    for n in all.iter_mut().filter(|n| n.role == "worker") {
        n.command.clone_from(&local.worker_cmd);
    }
    pslite::kv::table::check_specs(&local.tables).map_err(|e| e.to_string())?;
    serve_tables(&mut all, &local.tables);
    let joins = joining_servers(local, &all);
    start_and_watch(&launch, all, joins, local.restart)
}

/// The servers of `--join-servers`: ranks after the cluster's servers, each started
/// `--join-after-ms` after the one before (the first after the cluster), with the servers'
/// arguments.
fn joining_servers(local: &Local, all: &[Node]) -> Vec<(std::time::Instant, Node)> {
    let Some(first) = all.iter().find(|n| n.role == "server") else {
        return Vec::new();
    };
    let step = std::time::Duration::from_millis(local.join_after_ms);
    let start = std::time::Instant::now();
    (0..local.join_servers)
        .map(|k| {
            let rank = local.servers + k;
            let node = Node {
                name: format!("server {rank}"),
                rank: Some(rank),
                ..first.clone()
            };
            (start + step * (k as u32 + 1), node)
        })
        .collect()
}

/// Gives every server of `all` a `--table` argument per spec.
fn serve_tables(all: &mut [Node], tables: &[pslite::kv::table::TableSpec]) {
    for n in all.iter_mut().filter(|n| n.role == "server") {
        for spec in tables {
            n.args.extend(["--table".to_string(), spec.to_string()]);
        }
    }
}

/// The cluster's nodes in start order: the scheduler, the servers, then the workers (which get
/// the worker arguments).
fn nodes(servers: usize, workers: usize, worker_args: &[String]) -> Vec<Node> {
    let node = |role: &'static str, rank: Option<usize>, args: &[String]| Node {
        name: match rank {
            Some(r) => format!("{role} {r}"),
            None => role.to_string(),
        },
        role,
        rank,
        args: args.to_vec(),
        command: None,
        host: None,
    };
    let mut all = vec![node("scheduler", None, &[])];
    all.extend((0..servers).map(|r| node("server", Some(r), &[])));
    all.extend((0..workers).map(|r| node("worker", Some(r), worker_args)));
    all
}
