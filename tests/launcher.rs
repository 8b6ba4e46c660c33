//! The launcher's restart budget (`pslite-launch local --restart N`), with a worker that fails
//! every time it starts: `--keys 0` is refused, and a replacement worker is refused or gets no
//! answer from the scheduler within `PS_TIMEOUT` (which of the two is the cluster's business; both
//! exit with status 1).

use std::process::Command;

#[test]
fn a_failing_worker_is_restarted_until_the_budget_is_spent() {
    let o = Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args([
            "local",
            "--servers",
            "1",
            "--workers",
            "1",
            "--restart",
            "2",
        ])
        .args(["--checkpoint-dir", "unused", "--", "kv-app", "--keys", "0"])
        .env("PS_TIMEOUT", "2")
        .output()
        .expect("launcher runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("started worker 0 (pid ").count(), 3, "{err}");
    assert_eq!(err.matches("started server 0 (pid ").count(), 1, "{err}");
    for line in [
        "worker 0 exited with exit status: 1; restarting it (restart 1 of 2)",
        "worker 0 exited with exit status: 1; restarting it (restart 2 of 2)",
        "worker 0 exited with exit status: 1; no restarts left (2 of 2 used); stopping the others",
    ] {
        assert!(err.contains(line), "{line:?} missing:\n{err}");
    }
    assert!(!err.contains("warning"), "{err}");
}
