//! `pslite-launch task` under the launchers people run jobs with: its own variables, then Slurm
//! (`srun`) and Open MPI (`mpirun`) for real, as `.ci/run` installs and starts them.
//! Where Slurm or Open MPI is missing a test says so and passes, unless
//! `PSLITE_REQUIRE_LAUNCHERS=1` (set by `.ci/run`), where that fails it.

mod common;

use common::procs::{kv_app_worker_cmd, kv_app_worker_cmd_said, text};
use common::roles::{all_output, Cluster, Ended};
use std::process::Command;
use std::time::{Duration, Instant};

const LAUNCH: &str = env!("CARGO_BIN_EXE_pslite-launch");
const KV_APP: [&str; 5] = ["kv-app", "--keys", "1000", "--repeat", "10"];

/// Every worker of an S2W4 kv-app reported exact sums.
fn assert_exact(out: &str) {
    for r in 0..4 {
        assert!(
            out.contains(&format!("worker {r}: error: 0, 0")),
            "worker {r}:\n{out}"
        );
    }
}

/// Whether `tool` is on this machine; if not, says so (or fails under
/// `PSLITE_REQUIRE_LAUNCHERS=1`).
fn have(tool: &str, probe: &[&str]) -> bool {
    let ok = Command::new(tool)
        .args(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let missing = format!("`{tool} {}` fails here", probe.join(" "));
        let fix = "scripts/slurm-local.sh start; apt-get install openmpi-bin";
        common::skip("PSLITE_REQUIRE_LAUNCHERS", &missing, fix);
    }
    ok
}

/// `pslite-launch ARGS` as one task per name, task i with `PSLITE_TASK_RANK=i` (of as many as
/// `names`); waits up to 120 s and asserts that every task exited 0. Returns what each printed
/// and all of it.
fn tasks(names: &[&str], args: &[&str]) -> (Vec<Ended>, String) {
    let count = names.len().to_string();
    let mut c = Cluster::empty(&[("PSLITE_TASK_COUNT", &count)]);
    for (i, name) in names.iter().enumerate() {
        let rank = i.to_string();
        c.add_in(
            &[],
            name,
            LAUNCH,
            None,
            args,
            &[("PSLITE_TASK_RANK", &rank)],
        );
    }
    let ended = c.wait_all(Instant::now(), Duration::from_secs(120));
    let all = all_output(&ended);
    assert!(ended.iter().all(|e| e.code == Some(0)), "{all}");
    (ended, all)
}

#[test]
fn seven_tasks_with_pslite_task_variables_run_kv_app() {
    let port = pslite::free_port().expect("port").to_string();
    let mut args = vec![
        "task",
        "--servers",
        "2",
        "--workers",
        "4",
        "--root-uri",
        "127.0.0.1",
        "--root-port",
        &port,
        "--table",
        "app=5,dim=4",
        "--",
    ];
    args.extend(KV_APP);
    let names = [
        "scheduler",
        "server0",
        "server1",
        "worker0",
        "worker1",
        "worker2",
        "worker3",
    ];
    let (ended, all) = tasks(&names, &args);
    assert_exact(&all);
    assert!(
        ended[2]
            .output
            .contains(&format!("pslite-launch task: task 2 (PSLITE_TASK_RANK) is server 1; scheduler at 127.0.0.1:{port}")),
        "{all}"
    );
    // The servers serve the table `--table` named, beside kv-app's sums.
    for server in &ended[1..3] {
        assert!(
            server
                .output
                .contains("pslite: table app 5: app=5,dim=4,init=zeros,seed=5,"),
            "{all}"
        );
    }
}

#[test]
fn a_task_count_that_does_not_match_is_named() {
    let o = Command::new(LAUNCH)
        .args(["task", "--servers", "2", "--workers", "4", "--", "kv-app"])
        .env("SLURM_PROCID", "1")
        .env("SLURM_NTASKS", "6")
        .env_remove("PSLITE_TASK_RANK")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("PMI_RANK")
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "pslite-launch task: error: SLURM_NTASKS=6, but --servers 2 --workers 4 need 7 tasks (1 scheduler + 2 servers + 4 workers)"
    );
}

/// `--worker-cmd`: each worker task runs the shell command in its place, with the node's
/// variables; here the command runs kv-app's worker itself.
#[test]
fn worker_tasks_run_the_worker_command() {
    let port = pslite::free_port().expect("port").to_string();
    let line = kv_app_worker_cmd();
    let args = [
        "task",
        "--servers",
        "1",
        "--workers",
        "2",
        "--root-uri",
        "127.0.0.1",
        "--root-port",
        &port,
        "--worker-cmd",
        &line,
    ];
    let (ended, all) = tasks(&["scheduler", "server0", "worker0", "worker1"], &args);
    for r in 0..2 {
        let out = &ended[2 + r].output;
        for want in kv_app_worker_cmd_said(r) {
            assert!(out.contains(&want), "{want}:\n{all}");
        }
    }
}

/// `srun -n 7` on the one-node Slurm cluster of `scripts/slurm-local.sh`: the scheduler's host
/// comes from Slurm's node list, its port from the job's id.
#[test]
fn srun_runs_kv_app_s2w4() {
    if !have("sinfo", &["--noheader"]) {
        return;
    }
    let o = Command::new("timeout")
        .args(["180", "srun", "-n", "7", "--kill-on-bad-exit=1", "--time=3"])
        .args([LAUNCH, "task", "--servers", "2", "--workers", "4", "--"])
        .args(KV_APP)
        .env("PS_AUTH_TOKEN", "launchers-test-token-0123456789")
        .output()
        .expect("srun runs");
    let out = text(&o);
    assert!(o.status.success(), "srun failed:\n{out}");
    assert_exact(&out);
    assert!(
        out.contains("task 0 (SLURM_PROCID) is scheduler; scheduler at "),
        "{out}"
    );
}

/// `mpirun -n 7` (Open MPI): the scheduler's address is given, as Open MPI users do.
#[test]
fn mpirun_runs_kv_app_s2w4() {
    if !have("mpirun", &["--version"]) {
        return;
    }
    let port = pslite::free_port().expect("port").to_string();
    let o = Command::new("timeout")
        .args([
            "180",
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "7",
        ])
        .args([LAUNCH, "task", "--servers", "2", "--workers", "4"])
        .args(["--root-uri", "127.0.0.1", "--root-port", &port, "--"])
        .args(KV_APP)
        // Open MPI's own channels on loopback only (it would also announce other interfaces).
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .output()
        .expect("mpirun runs");
    let out = text(&o);
    assert!(o.status.success(), "mpirun failed:\n{out}");
    assert_exact(&out);
    assert!(
        out.contains("task 0 (OMPI_COMM_WORLD_RANK) is scheduler"),
        "{out}"
    );
}
