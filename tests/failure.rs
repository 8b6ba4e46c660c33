//! Failures with real processes on loopback: a killed server or worker, a
//! paused server, a killed scheduler. Every node must end soon after the scheduler declares a peer lost (or the scheduler goes silent), naming it,
//! and none may exit with status 0; a pause shorter than `PS_HEARTBEAT_TIMEOUT` is harmless; a
//! worker whose application failed ends every node with an error too.
//! The tests run one at a time (their bounds are in seconds; the machine has two cores).

mod common;

use common::roles::{all_output, Cluster, Ended};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `PS_HEARTBEAT_TIMEOUT` of the kill tests, seconds.
const HB_TIMEOUT: u64 = 4;

/// A `bench` that runs for longer than any test waits, with small values (a light load).
const BENCH: [&str; 5] = ["bench", "--seconds", "120", "--len", "4096"];

/// Every node has started (info logs, `PS_VERBOSE=1`), then the bench runs this long.
fn started(c: &Cluster) {
    for name in ["scheduler", "server0", "server1", "worker0", "worker1"] {
        c.wait_for(name, " started: ", Duration::from_secs(30));
    }
    std::thread::sleep(Duration::from_secs(1));
}

fn fast_heartbeats() -> [(&'static str, String); 3] {
    [
        ("PS_HEARTBEAT_INTERVAL", "1".to_string()),
        ("PS_HEARTBEAT_TIMEOUT", HB_TIMEOUT.to_string()),
        ("PS_VERBOSE", "1".to_string()),
    ]
}

fn by_name<'a>(ended: &'a [Ended], name: &str) -> &'a Ended {
    ended.iter().find(|e| e.name == name).expect("that process")
}

/// Kills `victim` during a 2-server, 2-worker bench; returns how every process ended, times
/// counted from the kill.
fn kill_during_bench(victim: &str) -> Vec<Ended> {
    let env = fast_heartbeats();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = Cluster::start(2, 2, &env, &BENCH);
    started(&c);
    c.signal(victim, libc::SIGKILL);
    c.wait_all(Instant::now(), Duration::from_secs(30))
}

/// Process `e` exited with a status other than 0 (`all`: every process's output, shown if
/// not).
fn failed(e: &Ended, all: &str) {
    assert!(
        e.code.is_some_and(|c| c != 0),
        "{} exited with {:?}:\n{all}",
        e.name,
        e.code
    );
}

/// Every process but `victim` exited non-zero; the workers within `PS_HEARTBEAT_TIMEOUT` + 2 s
/// of the kill, each naming `lost` ("server rank 0 (id 8)").
fn all_fail_naming(ended: &[Ended], victim: &str, lost: &str) {
    let all = all_output(ended);
    let bound = Duration::from_secs(HB_TIMEOUT + 2);
    for e in ended.iter().filter(|e| e.name != victim) {
        failed(e, &all);
        assert!(
            e.output.contains(lost),
            "{} does not name {lost}:\n{all}",
            e.name
        );
        if e.name.starts_with("worker") {
            assert!(
                e.after <= bound,
                "{} failed {:.1} s after the kill (bound {bound:?}):\n{all}",
                e.name,
                e.after.as_secs_f64()
            );
            assert!(
                e.output.contains(&format!("pslite-worker: error: peer lost: {lost} was declared lost by the scheduler: no heartbeat for")),
                "{}:\n{all}",
                e.name
            );
        }
    }
}

#[test]
fn a_killed_server_fails_every_worker_within_the_heartbeat_timeout() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let ended = kill_during_bench("server0");
    all_fail_naming(&ended, "server0", "server rank 0 (id 8)");
}

#[test]
fn a_killed_worker_fails_the_other_worker_within_the_heartbeat_timeout() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let ended = kill_during_bench("worker1");
    all_fail_naming(&ended, "worker1", "worker rank 1 (id 11)");
}

/// Stops server 0 for 30 s during a bench of `bench_seconds` s with `PS_HEARTBEAT_TIMEOUT`
/// `hb_timeout` s; returns how every process ended.
fn pause_server(hb_timeout: u64, bench_seconds: u64) -> Vec<Ended> {
    let hb = hb_timeout.to_string();
    let secs = bench_seconds.to_string();
    let env = [
        ("PS_HEARTBEAT_TIMEOUT", hb.as_str()),
        ("PS_TIMEOUT", "60"),
        ("PS_VERBOSE", "1"),
    ];
    let args = ["bench", "--seconds", secs.as_str(), "--len", "4096"];
    let c = Cluster::start(2, 2, &env, &args);
    started(&c);
    c.signal("server0", libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(30));
    c.signal("server0", libc::SIGCONT);
    c.wait_all(Instant::now(), Duration::from_secs(60))
}

#[test]
fn a_pause_shorter_than_the_heartbeat_timeout_is_harmless() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let ended = pause_server(40, 5);
    let all = all_output(&ended);
    for e in &ended {
        assert_eq!(e.code, Some(0), "{}:\n{all}", e.name);
    }
    for w in ["worker0", "worker1"] {
        assert!(by_name(&ended, w).output.contains("Gbit/s"), "{w}:\n{all}");
    }
}

#[test]
fn a_pause_longer_than_the_heartbeat_timeout_is_reported_by_every_node() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let ended = pause_server(5, 120);
    let all = all_output(&ended);
    for e in &ended {
        failed(e, &all);
    }
    for e in ended.iter().filter(|e| e.name != "server0") {
        assert!(
            e.output.contains("server rank 0 (id 8) was declared lost"),
            "{} does not name the paused server:\n{all}",
            e.name
        );
    }
    let paused = by_name(&ended, "server0");
    assert!(
        paused.output.contains(
            "pslite-server: error: declared lost: the scheduler declared this node (server rank 0 (id 8)) lost: no heartbeat for"
        ),
        "the paused server's own message:\n{all}"
    );
    assert!(
        !paused.output.contains("scheduler (id 1): no answer"),
        "{all}"
    );
}

#[test]
fn a_killed_scheduler_ends_every_node_within_the_heartbeat_timeout_naming_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let ended = kill_during_bench("scheduler");
    let all = all_output(&ended);
    let bound = Duration::from_secs(HB_TIMEOUT + 2);
    for e in ended.iter().filter(|e| e.name != "scheduler") {
        failed(e, &all);
        assert!(
            e.after <= bound,
            "{} ended after {:?}:\n{all}",
            e.name,
            e.after
        );
        assert!(
            e.output
                .contains("error: peer lost: scheduler (id 1): no answer to heartbeats for"),
            "{} does not name the scheduler:\n{all}",
            e.name
        );
    }
}

#[test]
fn a_killed_scheduler_not_replaced_within_the_recovery_timeout_ends_every_node_naming_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("pslite-no-scheduler-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cp = dir.to_string_lossy().to_string();
    let mut env: Vec<(&str, String)> = fast_heartbeats().to_vec();
    env.extend([
        ("PS_CHECKPOINT_DIR", cp),
        ("PS_RECOVERY_TIMEOUT", "3".into()),
    ]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = Cluster::start(2, 2, &env, &BENCH);
    started(&c);
    c.signal("scheduler", libc::SIGKILL);
    let ended = c.wait_all(Instant::now(), Duration::from_secs(60));
    let all = all_output(&ended);
    // The last answer came about one heartbeat interval (1 s) before the kill, 2 s at most
    // on a loaded machine.
    let not_before = Duration::from_secs(HB_TIMEOUT + 3 - 2);
    for e in ended.iter().filter(|e| e.name != "scheduler") {
        failed(e, &all);
        assert!(
            e.after >= not_before,
            "{} ended {:?} after the kill, before its window:\n{all}",
            e.name,
            e.after
        );
        assert!(
            e.output
                .contains("re-registering with whichever scheduler answers there"),
            "{} did not try to re-register:\n{all}",
            e.name
        );
        let named = format!(
            "error: peer lost: scheduler (id 1): no answer to heartbeats for {HB_TIMEOUT} s \
             (PS_HEARTBEAT_TIMEOUT) and no new scheduler at 127.0.0.1:"
        );
        assert!(
            e.output.contains(&named),
            "{} does not name the scheduler:\n{all}",
            e.name
        );
        assert!(
            e.output.contains("within 3 s more (PS_RECOVERY_TIMEOUT)"),
            "{all}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_worker_whose_application_failed_makes_every_node_exit_non_zero_naming_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Both workers' logistic regression stops at once: its training file does not exist. They
    // finalize (nobody waits for them), and the job fails on every node, the error named.
    let missing = "/nonexistent/pslite-failure-test.svm";
    let c = Cluster::start(
        1,
        2,
        &[("PS_VERBOSE", "1")],
        &["lr", "--train", missing, "--test", missing],
    );
    let ended = c.wait_all(Instant::now(), Duration::from_secs(60));
    let all = all_output(&ended);
    assert_eq!(ended.len(), 4);
    for e in &ended {
        failed(e, &all);
        assert!(
            e.output.contains(&format!("cannot read {missing}")),
            "{} does not name the failure:\n{all}",
            e.name
        );
        if !e.name.starts_with("worker") {
            assert!(
                e.output
                    .contains("error: the job failed: worker rank 0 (id 9) failed: ")
                    && e.output.contains("worker rank 1 (id 11) failed: "),
                "{} does not name the workers:\n{all}",
                e.name
            );
        }
    }
}

#[test]
fn a_timeout_shorter_than_a_loss_takes_to_be_known_is_named_once_at_start() {
    // A scheduler alone, whose start-up gives up after a second: what it says at start is all
    // this test reads.
    let run = |extra: &[(&str, &str)]| {
        let mut env = vec![("PS_AUTH", "none")];
        env.extend_from_slice(extra);
        let err = common::scheduler_alone(&env);
        (
            err.matches("PS_TIMEOUT (1 s) is not longer than").count(),
            err,
        )
    };
    let (n, err) = run(&[("PS_CHECKPOINT_DIR", "/nonexistent")]);
    assert_eq!(n, 1, "{err}");
    assert!(
        err.contains(
            "PS_HEARTBEAT_TIMEOUT (10 s) + PS_HEARTBEAT_INTERVAL (1 s) + PS_RECOVERY_TIMEOUT \
             (60 s, a lost node is awaited with PS_CHECKPOINT_DIR) = 71 s"
        ),
        "{err}"
    );
    let (n, err) = run(&[
        ("PS_HEARTBEAT_TIMEOUT", "0.5"),
        ("PS_HEARTBEAT_INTERVAL", "0.1"),
    ]);
    assert_eq!(n, 0, "1 s outlasts 0.6 s: {err}");
}
