//! `pslite-launch task`: one task of a job that another launcher started on many hosts (Slurm's
//! `srun`, Open MPI's `mpirun`, an MPI with PMI, a Kubernetes Indexed Job, or anything that
//! sets `PSLITE_TASK_RANK`/`PSLITE_TASK_COUNT`). Task 0 becomes the scheduler, tasks 1…S the
//! servers, the rest the workers; each then runs as `pslite-launch node ROLE` (exec'd, so the
//! launcher's signals reach the node itself), a worker with `--worker-cmd` as `sh -c CMD`.
//!
//! The scheduler's address is `--root-uri`/`DMLC_PS_ROOT_URI`, else (under Slurm) the first
//! host of the step's node list, where Slurm places task 0; its port `--root-port`/
//! `DMLC_PS_ROOT_PORT`, else (under Slurm) one drawn from the job and step ids, the same in
//! every task.

use clap::Args;
use std::os::unix::process::CommandExt;

/// Options of `pslite-launch task`.
#[derive(Args)]
pub struct Task {
    /// Number of servers (tasks 1…S).
    #[arg(long)]
    servers: usize,
    /// Number of workers (tasks S+1…S+W).
    #[arg(long)]
    workers: usize,
    /// The scheduler's address (task 0's host); default: DMLC_PS_ROOT_URI, else under Slurm
    /// the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST).
    #[arg(long)]
    root_uri: Option<String>,
    /// The scheduler's port; default: DMLC_PS_ROOT_PORT, else under Slurm 20000 + a number
    /// drawn from SLURM_JOB_ID and SLURM_STEP_ID.
    #[arg(long)]
    root_port: Option<u16>,
    /// An embedding table every server serves (repeatable), passed on as its `--table`
    /// (see `pslite-server --help`); checked before the node starts.
    #[arg(long = "table", value_name = "SPEC")]
    tables: Vec<pslite::kv::table::TableSpec>,
    /// A shell command each worker task runs instead of pslite-worker, e.g. `python
    /// train.py` (a Python worker): `sh -c CMD` in place of the task, with the node's
    /// variables (DMLC_ROLE=worker, DMLC_PS_ROOT_URI, PSLITE_RANK, …) and PYTHONUNBUFFERED=1.
    #[arg(long, value_name = "CMD", conflicts_with = "worker_args")]
    worker_cmd: Option<String>,
    /// Arguments of pslite-worker, e.g. `kv-app` or `bench --mode push-pull`.
    #[arg(last = true, required_unless_present = "worker_cmd")]
    worker_args: Vec<String>,
}

/// Where the launcher's rank and task count come from, most specific first: Open MPI and PMI
/// before Slurm, since `mpirun` inside a Slurm allocation leaves the batch step's SLURM_PROCID
/// (0) in every task's environment.
const SOURCES: [(&str, Option<&str>); 5] = [
    ("PSLITE_TASK_RANK", Some("PSLITE_TASK_COUNT")),
    ("OMPI_COMM_WORLD_RANK", Some("OMPI_COMM_WORLD_SIZE")),
    ("PMI_RANK", Some("PMI_SIZE")),
    ("SLURM_PROCID", Some("SLURM_NTASKS")),
    // Kubernetes Indexed Jobs give the index only; the count is the job's completions.
    ("JOB_COMPLETION_INDEX", None),
];

/// What one task runs.
#[derive(Debug, PartialEq)]
pub struct Placement {
    /// `scheduler`, `server` or `worker`.
    pub role: &'static str,
    /// Rank within the role (none for the scheduler).
    pub rank: Option<usize>,
    /// This task's rank and the variable it came from, for the log line.
    pub task: (usize, &'static str),
    /// The scheduler's address and port.
    pub root: (String, u16),
}

fn number(get: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<usize>, String> {
    match get(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{var}={v:?}: expected a whole number ≥ 0")),
    }
}

/// This task's role, rank and scheduler, from the launcher's variables (`get`) and the flags:
/// pure, so every rule is tested without a launcher.
///
/// # Errors
/// The text of the error, naming the variables: no rank found, a count that is not
/// 1 + servers + workers, no scheduler address or port.
pub fn placement(
    get: &dyn Fn(&str) -> Option<String>,
    (servers, workers): (usize, usize),
    (root_uri, root_port): (Option<&str>, Option<u16>),
) -> Result<Placement, String> {
    if servers == 0 || workers == 0 {
        return Err("--servers and --workers must be at least 1".into());
    }
    let need = 1 + servers + workers;
    let TaskRank {
        rank,
        count,
        rank_var,
        count_var,
    } = task_rank(get, need)?;
    if count != need {
        return Err(format!(
            "{}={count}, but --servers {servers} --workers {workers} need {need} tasks \
             (1 scheduler + {servers} servers + {workers} workers)",
            count_var.unwrap_or("the task count")
        ));
    }
    if rank >= count {
        return Err(format!(
            "{rank_var}={rank} is not below the task count {count}"
        ));
    }
    let (role, rank_in_role) = match rank {
        0 => ("scheduler", None),
        r if r <= servers => ("server", Some(r - 1)),
        r => ("worker", Some(r - 1 - servers)),
    };
    let slurm = rank_var == "SLURM_PROCID";
    let uri = scheduler_uri(get, root_uri, slurm, rank_var)?;
    let port = scheduler_port(get, root_port, slurm, rank_var)?;
    Ok(Placement {
        role,
        rank: rank_in_role,
        task: (rank, rank_var),
        root: (uri, port),
    })
}

/// This task's rank and the task count, as the first of [`SOURCES`] that is set gives them.
struct TaskRank {
    /// This task's rank.
    rank: usize,
    /// The number of tasks (the count variable's, or `need` where the source has none).
    count: usize,
    /// The variable the rank came from.
    rank_var: &'static str,
    /// The variable the count came from (none: the source gives no count).
    count_var: Option<&'static str>,
}

/// This task's rank and the task count from the first of [`SOURCES`] whose rank variable is
/// set; a source without a count variable counts `need` tasks.
///
/// # Errors
/// A variable that is not a whole number; a rank variable without its count variable; no
/// rank variable at all (the text names the launchers and their variables).
fn task_rank(get: &dyn Fn(&str) -> Option<String>, need: usize) -> Result<TaskRank, String> {
    for (rank_var, count_var) in SOURCES {
        let Some(rank) = number(get, rank_var)? else {
            continue;
        };
        let count = match count_var {
            Some(c) => {
                number(get, c)?.ok_or_else(|| format!("{rank_var} is set but {c} is not"))?
            }
            None => need,
        };
        return Ok(TaskRank {
            rank,
            count,
            rank_var,
            count_var,
        });
    }
    Err(
        "no task rank in the environment: run under Slurm (srun: SLURM_PROCID, \
                SLURM_NTASKS), Open MPI (mpirun: OMPI_COMM_WORLD_RANK, \
                OMPI_COMM_WORLD_SIZE), an MPI with PMI (PMI_RANK, PMI_SIZE), a Kubernetes \
                Indexed Job (JOB_COMPLETION_INDEX), or set PSLITE_TASK_RANK and \
                PSLITE_TASK_COUNT"
            .into(),
    )
}

/// The scheduler's address: `root_uri` (`--root-uri`), else `DMLC_PS_ROOT_URI`, else under
/// Slurm (`slurm`) the first host of the step's node list.
///
/// # Errors
/// None of them is given (the text names `rank_var`, the rank's source), or the node list
/// cannot be read.
fn scheduler_uri(
    get: &dyn Fn(&str) -> Option<String>,
    root_uri: Option<&str>,
    slurm: bool,
    rank_var: &str,
) -> Result<String, String> {
    match root_uri
        .map(str::to_string)
        .or_else(|| get("DMLC_PS_ROOT_URI"))
    {
        Some(u) if !u.trim().is_empty() => Ok(u.trim().to_string()),
        _ => match (slurm, node_list(get)) {
            (true, Some((var, list))) => first_host(var, &list),
            _ => Err(format!(
                "no scheduler address: {rank_var} gives no host list, so set --root-uri or \
                 DMLC_PS_ROOT_URI to the address of task 0's host"
            )),
        },
    }
}

/// The scheduler's port: `root_port` (`--root-port`), else `DMLC_PS_ROOT_PORT`, else under
/// Slurm (`slurm`) the one drawn from the job and step ids ([`slurm_port`]).
///
/// # Errors
/// A `DMLC_PS_ROOT_PORT` that is not a port 1–65535; none of them given (the text names
/// `rank_var`, the rank's source); Slurm without a job id.
fn scheduler_port(
    get: &dyn Fn(&str) -> Option<String>,
    root_port: Option<u16>,
    slurm: bool,
    rank_var: &str,
) -> Result<u16, String> {
    match root_port {
        Some(p) => Ok(p),
        None => match get("DMLC_PS_ROOT_PORT") {
            Some(p) => p
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("DMLC_PS_ROOT_PORT={p:?}: expected a port 1–65535")),
            None if slurm => slurm_port(get),
            None => Err(format!(
                "no scheduler port: set --root-port or DMLC_PS_ROOT_PORT (the same in every \
                 task; {rank_var} gives none)"
            )),
        },
    }
}

/// A port every task of one Slurm job step agrees on: 20000 + (job id × 7 + step id) mod 10000.
fn slurm_port(get: &dyn Fn(&str) -> Option<String>) -> Result<u16, String> {
    let job = number(get, "SLURM_JOB_ID")?.ok_or(
        "no scheduler port: SLURM_JOB_ID is not set; set --root-port or DMLC_PS_ROOT_PORT",
    )?;
    let step = number(get, "SLURM_STEP_ID")?.unwrap_or(0);
    Ok(20000 + ((job.wrapping_mul(7).wrapping_add(step)) % 10000) as u16)
}

/// The step's node list (`SLURM_STEP_NODELIST`, else the job's) and the variable it came from.
fn node_list(get: &dyn Fn(&str) -> Option<String>) -> Option<(&'static str, String)> {
    ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"]
        .into_iter()
        .find_map(|var| get(var).map(|list| (var, list)))
}

/// The first host of a Slurm host list (`var`'s value, for the error): `node[07-09,12],gpu3`
/// → `node07`, `rack[1-2]-n[3-4]` → `rack1-n3`.
pub fn first_host(var: &str, list: &str) -> Result<String, String> {
    let bad = || format!("{var}={list:?}: cannot read its first host");
    let mut out = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let inside: String = chars.by_ref().take_while(|&c| c != ']').collect();
                let first = inside.split([',', '-']).next().unwrap_or("");
                if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                out.push_str(first);
            }
            c => out.push(c),
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Waits (at most `PS_TIMEOUT`, 60 s by default) until `host` resolves: a Kubernetes
/// headless Service names a pod only once the pod runs.
fn wait_resolvable(host: &str) -> Result<(), String> {
    let timeout = pslite::config::timeout_from_env().map_err(|e| e.to_string())?;
    let secs = timeout.as_secs_f64();
    let deadline = std::time::Instant::now() + timeout;
    let mut told = false;
    loop {
        match pslite::config::address::resolve(host) {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(format!(
                    "the scheduler's address {host:?} did not resolve within {secs:.0} s \
                     (PS_TIMEOUT): {e}"
                ))
            }
            Err(_) if !told => {
                eprintln!("pslite-launch task: waiting for {host:?} to resolve");
                told = true;
            }
            Err(_) => {}
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Runs this task's node in place of this process; returns only on an error.
pub fn run(task: &Task) -> String {
    let get = |k: &str| std::env::var(k).ok();
    let p = match placement(
        &get,
        (task.servers, task.workers),
        (task.root_uri.as_deref(), task.root_port),
    ) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if let Err(e) = wait_resolvable(&p.root.0) {
        return e;
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return format!("cannot locate this program: {e}"),
    };
    let name = match p.rank {
        Some(r) => format!("{} {r}", p.role),
        None => p.role.to_string(),
    };
    eprintln!(
        "pslite-launch task: task {} ({}) is {name}; scheduler at {}",
        p.task.0,
        p.task.1,
        pslite::wire::place(&p.root.0, p.root.1)
    );
    let mut cmd = match (&task.worker_cmd, p.role) {
        (Some(line), "worker") => {
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", line]).env("PYTHONUNBUFFERED", "1");
            cmd
        }
        _ => {
            let mut cmd = std::process::Command::new(exe);
            cmd.args(["node", p.role]);
            cmd
        }
    };
    cmd.env("DMLC_ROLE", p.role)
        .env("DMLC_PS_ROOT_URI", &p.root.0)
        .env("DMLC_PS_ROOT_PORT", p.root.1.to_string())
        .env("DMLC_NUM_SERVER", task.servers.to_string())
        .env("DMLC_NUM_WORKER", task.workers.to_string());
    if let Some(r) = p.rank {
        cmd.env("PSLITE_RANK", r.to_string());
    }
    if p.role == "worker" && task.worker_cmd.is_none() {
        cmd.args(&task.worker_args);
    }
    if p.role == "server" {
        if let Err(e) = pslite::kv::table::check_specs(&task.tables) {
            return e.to_string();
        }
        for spec in &task.tables {
            cmd.args(["--table".to_string(), spec.to_string()]);
        }
    }
    format!("cannot start the {name}: {}", cmd.exec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(
        vars: &[(&str, &str)],
        flags: (Option<&str>, Option<u16>),
    ) -> Result<Placement, String> {
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        placement(&get, (2, 4), flags)
    }

    #[test]
    fn ranks_map_to_scheduler_servers_then_workers() {
        let roles: Vec<(&str, Option<usize>)> = (0..7)
            .map(|r| {
                let r = r.to_string();
                let p = place(
                    &[("PSLITE_TASK_RANK", &r), ("PSLITE_TASK_COUNT", "7")],
                    (Some("h0"), Some(9)),
                )
                .expect("placed");
                (p.role, p.rank)
            })
            .collect();
        assert_eq!(
            roles,
            [
                ("scheduler", None),
                ("server", Some(0)),
                ("server", Some(1)),
                ("worker", Some(0)),
                ("worker", Some(1)),
                ("worker", Some(2)),
                ("worker", Some(3))
            ]
        );
    }

    #[test]
    fn slurm_gives_the_scheduler_host_and_a_shared_port() {
        let vars = [
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_STEP_NODELIST", "gpu[07-09,12]"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "2"),
        ];
        let p = place(&vars, (None, None)).expect("placed");
        assert_eq!(
            (p.role, p.rank, p.task),
            ("worker", Some(0), (3, "SLURM_PROCID"))
        );
        assert_eq!(p.root, ("gpu07".to_string(), 28640));
        let flags = place(&vars, (Some("10.0.0.1"), Some(5000))).expect("placed");
        assert_eq!(flags.root, ("10.0.0.1".to_string(), 5000));
    }

    #[test]
    fn open_mpi_wins_over_a_batch_steps_slurm_rank() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "7"),
            ("DMLC_PS_ROOT_URI", "h0"),
            ("DMLC_PS_ROOT_PORT", "9000"),
        ];
        let p = place(&vars, (None, None)).expect("placed");
        assert_eq!((p.role, p.rank), ("server", Some(1)));
    }

    #[test]
    fn kubernetes_index_takes_the_count_from_the_flags() {
        let p = place(
            &[("JOB_COMPLETION_INDEX", "6")],
            (Some("ps-0.ps"), Some(9000)),
        )
        .expect("placed");
        assert_eq!((p.role, p.rank), ("worker", Some(3)));
        let e = place(
            &[("JOB_COMPLETION_INDEX", "7")],
            (Some("ps-0.ps"), Some(9000)),
        )
        .unwrap_err();
        assert_eq!(e, "JOB_COMPLETION_INDEX=7 is not below the task count 7");
    }

    #[test]
    fn errors_name_the_variables() {
        let e = place(
            &[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "6")],
            (None, None),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "SLURM_NTASKS=6, but --servers 2 --workers 4 need 7 tasks (1 scheduler + 2 servers + 4 workers)"
        );
        let e = place(&[], (None, None)).unwrap_err();
        assert!(
            e.starts_with("no task rank in the environment: run under Slurm"),
            "{e}"
        );
        let e = place(&[("PMI_RANK", "1"), ("PMI_SIZE", "7")], (None, Some(9))).unwrap_err();
        assert_eq!(
            e,
            "no scheduler address: PMI_RANK gives no host list, so set --root-uri or DMLC_PS_ROOT_URI to the address of task 0's host"
        );
        let e = place(&[("PMI_RANK", "1"), ("PMI_SIZE", "7")], (Some("h0"), None)).unwrap_err();
        assert!(
            e.starts_with("no scheduler port: set --root-port or DMLC_PS_ROOT_PORT"),
            "{e}"
        );
        let e = place(
            &[("OMPI_COMM_WORLD_RANK", "x"), ("OMPI_COMM_WORLD_SIZE", "7")],
            (None, None),
        )
        .unwrap_err();
        assert_eq!(e, "OMPI_COMM_WORLD_RANK=\"x\": expected a whole number ≥ 0");
        let e = place(&[("PMI_RANK", "1")], (None, None)).unwrap_err();
        assert_eq!(e, "PMI_RANK is set but PMI_SIZE is not");
    }

    #[test]
    fn first_hosts_of_slurm_host_lists() {
        for (list, first) in [
            ("h0", "h0"),
            ("a,b", "a"),
            ("node[07-09,12],gpu3", "node07"),
            ("rack[1-2]-n[3-4]", "rack1-n3"),
            ("n[5]", "n5"),
        ] {
            assert_eq!(
                first_host("SLURM_JOB_NODELIST", list).as_deref(),
                Ok(first),
                "{list}"
            );
        }
        assert_eq!(
            first_host("SLURM_JOB_NODELIST", "n[]"),
            Err("SLURM_JOB_NODELIST=\"n[]\": cannot read its first host".into())
        );
        assert!(first_host("SLURM_STEP_NODELIST", "").is_err());
    }
}
