//! Elastic servers on real processes: kv-app's worker 0 drains and adds servers while both
//! workers push (`--resize`), the sums stay exact; a resize the scheduler refuses fails naming
//! why.

mod common;

use common::launched::Launched;
use common::procs::{kv_app_ok_env, text};
use std::time::Duration;

/// The tests that kill servers run one at a time (two cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The kv-app workload of every job here: 20000 keys of two i64 values each (a moved key is at
/// least 28 bytes of rows: key, length, values).
const WORKLOAD: [&str; 6] = ["--keys", "20000", "--len", "2", "--dtype", "i64"];

/// The epochs, bytes moved and milliseconds of the resize lines kv-app printed.
fn settled(out: &str) -> Vec<(u64, u64, f64)> {
    out.lines()
        .filter_map(|l| {
            let rest = l.split("key layout ").nth(1)?;
            let (epoch, rest) = rest.split_once(" settled in ")?;
            let (ms, rest) = rest.split_once(" ms, ")?;
            let bytes = rest.split_whitespace().next()?;
            Some((epoch.parse().ok()?, bytes.parse().ok()?, ms.parse().ok()?))
        })
        .collect()
}

/// kv-app S3W2 with `env`: the third server is drained (2 serve), added back (3), drained
/// again (2), while both workers push and push-pull 20000 keys of two i64 values each; checks
/// exact sums and the three layouts, and returns the output.
fn three_resizes(env: &[(&str, &str)]) -> String {
    let out = kv_app_ok_env(
        3,
        2,
        env,
        &[
            &WORKLOAD[..],
            &[
                "--repeat",
                "600",
                "--resize",
                "drain:2,add:2,drain:2",
                "--resize-pause-ms",
                "30",
            ],
        ]
        .concat(),
    );
    let steps: Vec<(u64, u64, f64)> = settled(
        &out.lines()
            .filter(|l| l.contains("kv-app: "))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "three resizes settled, in order:\n{out}"
    );
    // A third of the keys moves each time: 20000 / 3 rows of (key, length, two i64 values)
    // for the i64 handler at least.
    for &(epoch, bytes, _) in &steps {
        assert!(
            bytes > 6600 * 28,
            "layout {epoch} moved only {bytes} bytes:\n{out}"
        );
    }
    assert!(out.contains("drained server rank 2: key layout 1"), "{out}");
    assert!(out.contains("added server rank 2: key layout 2"), "{out}");
    out
}

#[test]
fn kv_app_sums_stay_exact_while_a_server_is_drained_added_back_and_drained_again() {
    let out = three_resizes(&[]);
    // Every node logged the layouts (one line per membership change).
    for node in ["server 0", "server 1", "server 2", "worker 1"] {
        assert!(
            out.contains(&format!("[{node}]"))
                && out
                    .lines()
                    .any(|l| l.starts_with(&format!("[{node}]"))
                        && l.contains("key layout 3: keys [")),
            "{node} did not log key layout 3:\n{out}"
        );
    }
}

#[test]
fn with_checkpoints_sums_stay_exact_through_three_resizes() {
    // Every request is logged and deduplicated by its part: a part sent on to a server that
    // applied another part of the same request is applied too.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::Scratch::new("elastic-cp");
    let out = three_resizes(&[("PS_CHECKPOINT_DIR", &dir.arg())]);
    assert!(out.contains("kv-app: worker 0: "), "{out}");
}

/// kv-app S2W1 with `--resize STEP` and `env`: the first node's error line (the worker's
/// error, or the job's failure naming it: whichever node ends first prints it).
fn refused(step: &str, env: &[(&str, &str)]) -> String {
    let o = common::procs::launch_env(2, 1, env, &["kv-app", "--keys", "100", "--resize", step]);
    let out = text(&o);
    assert!(
        !o.status.success(),
        "the resize {step} was not refused:\n{out}"
    );
    out.lines()
        .find(|l| l.contains(": error: ") && l.contains("invalid argument: "))
        .unwrap_or_else(|| panic!("no failure naming the worker:\n{out}"))
        .to_string()
}

#[test]
fn a_resize_the_scheduler_refuses_fails_naming_why() {
    let owns = refused("add:0", &[]);
    assert!(
        owns.contains("server rank 0 (id 8) already owns keys"),
        "{owns}"
    );
    let stranger = refused("drain:5", &[]);
    assert!(
        stranger.contains("kv-app --resize: server rank 5, but the cluster has 2 servers"),
        "{stranger}"
    );
    let twice = refused("drain:1,drain:0", &[]);
    assert!(
        twice.contains("server rank 0 (id 8) is the only server: nobody can take its keys"),
        "{twice}"
    );
}

/// The epochs and bytes of the `settled` lines of `out` that contain `what`.
fn settled_lines(out: &str, what: &str) -> Vec<(u64, u64, f64)> {
    settled(
        &out.lines()
            .filter(|l| l.contains(what))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Asserts that both workers of `out` ended with exact sums.
fn exact(out: &str) {
    for r in 0..2 {
        assert!(
            out.contains(&format!("[worker {r}] worker {r}: error: 0, 0")),
            "worker {r}'s sums:\n{out}"
        );
    }
}

#[test]
fn a_server_joins_the_running_job_takes_a_share_and_is_drained_again() {
    // Two servers; `pslite-launch --join-servers 1` starts a third (PSLITE_RANK=2) while both
    // workers push, which joins and takes the upper half of the widest range; worker 0 then
    // drains it: the job grows from 2 to 3 servers and shrinks back to 2.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args(["local", "--servers", "2", "--workers", "2"])
        .args(["--join-servers", "1", "--join-after-ms", "300", "--"])
        .arg("kv-app")
        .args(WORKLOAD)
        .args(["--repeat", "600", "--resize", "drain:2"])
        .args(["--resize-pause-ms", "0"])
        .env("PS_TIMEOUT", "60")
        .output()
        .expect("launcher runs");
    let out = text(&o);
    assert!(o.status.success(), "the job failed:\n{out}");
    exact(&out);
    // Every node logged the join (one line per membership change).
    for node in ["scheduler", "server 0", "server 1", "worker 0", "worker 1"] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("[{node}]"))
                && l.contains("server rank 2 (id 12) joined the running job at 127.0.0.1:")),
            "{node} did not log the join:\n{out}"
        );
    }
    let joined = settled_lines(
        &out,
        "[server 2] pslite: server rank 2 joined the running job",
    );
    let drained = settled_lines(&out, "kv-app: drained server rank 2");
    assert_eq!((joined.len(), drained.len()), (1, 1), "{out}");
    assert_eq!(
        (joined[0].0, drained[0].0),
        (1, 2),
        "layouts 1 and 2:\n{out}"
    );
    // A quarter of the key space moves each way: 5000 rows of (key, length, two i64 values)
    // for the i64 handler.
    for (what, bytes) in [("join", joined[0].1), ("drain", drained[0].1)] {
        assert!(
            (5000 * 28 * 9 / 10..=5000 * 28 * 11 / 10).contains(&bytes),
            "the {what} moved {bytes} bytes:\n{out}"
        );
    }
}

/// Which server a test kills while the keys of server 2 move to server 1.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// Server 1, before it took the rows.
    NewOwner,
    /// Server 2, after it handed the rows over and before server 1 took them.
    OldOwner,
    /// The scheduler, before server 1 took the rows (a new one learns the layout from the
    /// nodes' re-registrations, and server 1's report).
    Scheduler,
}

/// kv-app S3W2 with checkpoints and one restart; worker 0 drains server 2 after 3 s. Server 1
/// (the new owner) is stopped (SIGSTOP) before the drain starts, so that the move cannot
/// finish; once server 2 adopted the new layout (and handed its rows over), `victim` is
/// SIGKILLed and started again by the launcher, then server 1 continued. The job must end with
/// exact sums, the layout settled with every row, and the victim replaced.
fn kill_during_a_move(victim: Victim) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::Scratch::new(&format!("elastic-{victim:?}"));
    let l = moving_with_the_new_owner_stopped(&dir.arg());
    let killed = match victim {
        Victim::NewOwner => "server 1",
        Victim::OldOwner => "server 2",
        Victim::Scheduler => "scheduler",
    };
    l.kill(killed);
    if !matches!(victim, Victim::NewOwner) {
        std::thread::sleep(Duration::from_millis(200));
        l.signal("server 1", libc::SIGCONT);
    }
    let (code, out) = l.finish(Duration::from_secs(180));
    drop(dir);
    let shown = common::launched::without_info(&out);
    assert_eq!(code, Some(0), "{shown}");
    exact(&out);
    let restarted = format!("{killed} exited with signal: 9 (SIGKILL); restarting it");
    assert!(out.contains(&restarted), "{shown}");
    // Every row moved: a third of the keys, (key, length, two i64 values) each, at least.
    let settled = settled_lines(&out, "kv-app: drained server rank 2");
    assert_eq!(settled.len(), 1, "{shown}");
    assert!(settled[0].1 > 6600 * 28, "{settled:?}:\n{shown}");
    out
}

/// The job of [`kill_during_a_move`] with checkpoints in `cp`, once server 1 is stopped and
/// server 2 has adopted the layout that drains it (and had 300 ms to hand its rows over).
fn moving_with_the_new_owner_stopped(cp: &str) -> Launched {
    let l = Launched::start(
        &[
            "--servers",
            "3",
            "--workers",
            "2",
            "--restart",
            "1",
            "--checkpoint-dir",
            cp,
            "--",
            "kv-app",
            "--repeat",
            "2000",
            "--resize",
            "drain:2",
            "--resize-pause-ms",
            "3000",
        ]
        .iter()
        .chain(&WORKLOAD)
        .copied()
        .collect::<Vec<_>>(),
        &[
            ("PS_TIMEOUT", "60"),
            ("PS_HEARTBEAT_TIMEOUT", "30"),
            ("PS_VERBOSE", "1"),
        ],
    );
    // The start-up barrier passes within a second of the registrations; the drain starts 3 s
    // after it.
    l.wait_line("all 5 nodes registered");
    std::thread::sleep(Duration::from_millis(1000));
    l.signal("server 1", libc::SIGSTOP);
    l.wait_for("move at server 2", |x| {
        x.starts_with("[server 2]") && x.contains("key layout 1: keys [")
    });
    // Server 2 exports on adopting the layout, on its customer threads: give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    l
}

#[test]
fn with_checkpoints_the_new_owner_killed_during_a_move_is_replaced_and_the_sums_stay_exact() {
    let out = kill_during_a_move(Victim::NewOwner);
    assert!(
        out.contains("handing the rows for key layout 1 again to the replacement of server rank 1"),
        "the old owner did not hand the rows again:\n{out}"
    );
}

#[test]
fn with_checkpoints_the_old_owner_killed_during_a_move_is_replaced_and_the_sums_stay_exact() {
    kill_during_a_move(Victim::OldOwner);
}

#[test]
fn with_checkpoints_the_scheduler_killed_during_a_move_is_replaced_and_the_move_settles() {
    let out = kill_during_a_move(Victim::Scheduler);
    assert!(
        out.contains("taking over run"),
        "no new scheduler took the job over:\n{out}"
    );
}

#[test]
fn sigusr2_drains_a_running_server_and_the_sums_stay_exact() {
    // The control for a cluster started by hand: `kill -USR2 PID` of a server moves its keys
    // to the others while the workers push.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let l = Launched::start(
        &[
            "--servers",
            "3",
            "--workers",
            "2",
            "--",
            "kv-app",
            "--repeat",
            "1500",
        ]
        .iter()
        .chain(&WORKLOAD)
        .copied()
        .collect::<Vec<_>>(),
        &[("PS_TIMEOUT", "60"), ("PS_VERBOSE", "1")],
    );
    l.wait_line("all 5 nodes registered");
    std::thread::sleep(Duration::from_millis(1000));
    l.signal("server 2", libc::SIGUSR2);
    let (code, out) = l.finish(Duration::from_secs(120));
    let shown = common::launched::without_info(&out);
    assert_eq!(code, Some(0), "{shown}");
    exact(&out);
    let drained = settled_lines(&out, "[server 2] pslite: server rank 2 drained");
    assert_eq!(drained.len(), 1, "{shown}");
    assert!(drained[0].1 > 6600 * 28, "{drained:?}:\n{shown}");
}
