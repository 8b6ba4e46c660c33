//! Elastic servers on real processes: kv-app's worker 0 drains and adds servers while both
//! workers push (`--resize`), the sums stay exact; a resize the scheduler refuses fails naming
//! why.

mod common;

use common::procs::{kv_app_ok_env, text};

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

#[test]
fn kv_app_sums_stay_exact_while_a_server_is_drained_added_back_and_drained_again() {
    // Three servers; the third is drained (2 serve), added back (3), drained again (2), while
    // both workers push and push-pull 20000 keys of two i64 values each.
    let out = kv_app_ok_env(
        3,
        2,
        &[],
        &[
            "--keys",
            "20000",
            "--len",
            "2",
            "--dtype",
            "i64",
            "--repeat",
            "600",
            "--resize",
            "drain:2,add:2,drain:2",
            "--resize-pause-ms",
            "30",
        ],
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
    let dir = std::env::temp_dir().join(format!("pslite-elastic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let cp = dir.to_string_lossy().to_string();
    let checkpoints = refused("drain:1", &[("PS_CHECKPOINT_DIR", &cp)]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        checkpoints.contains(
            "servers are not added or drained while lost nodes are replaced (PS_CHECKPOINT_DIR is set)"
        ),
        "{checkpoints}"
    );
}
