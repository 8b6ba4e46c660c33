//! Logistic regression on the real a8a data set, through the launcher, as CI runs it.

use std::path::PathBuf;
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

/// The repository's copy of a8a (`data/a8a/`, with its source, licence and SHA-256 sums).
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/a8a")
}

fn data(name: &str) -> String {
    let p = data_dir().join(name);
    assert!(
        p.is_file(),
        "the a8a data set is missing at {} (it is part of the repository: data/a8a/)",
        p.display()
    );
    p.display().to_string()
}

#[test]
fn the_a8a_files_match_their_sha256_sums() {
    let sums = std::fs::read_to_string(data_dir().join("SHA256SUMS")).expect("data/a8a/SHA256SUMS");
    let mut checked = Vec::new();
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let (want, name) = line
            .split_once("  ")
            .unwrap_or_else(|| panic!("SHA256SUMS line {line:?}: expected `HEX  NAME`"));
        let bytes = std::fs::read(data(name)).expect("read data file");
        let got: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, want, "sha256 of data/a8a/{name}");
        checked.push(name.to_string());
    }
    checked.sort();
    assert_eq!(
        checked,
        ["a8a.test", "a8a.train"],
        "SHA256SUMS names both files"
    );
}

fn lr(servers: usize, workers: usize, extra: &[&str]) -> Output {
    lr_env(servers, workers, extra, ("PS_UNUSED", ""))
}

/// As [`lr`], with one more environment variable for every process.
fn lr_env(servers: usize, workers: usize, extra: &[&str], var: (&str, &str)) -> Output {
    let (train, test) = (data("a8a.train"), data("a8a.test"));
    Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .env(var.0, var.1)
        .args([
            "local",
            "--servers",
            &servers.to_string(),
            "--workers",
            &workers.to_string(),
            "--",
        ])
        .args([
            "lr", "--train", &train, "--test", &test, "--epochs", "5", "--json",
        ])
        .args(extra)
        .output()
        .expect("launcher runs")
}

/// (accuracy, log-loss) of every epoch worker 0 reported.
fn epochs(o: &Output) -> Vec<(f64, f64)> {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "lr failed:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.lines()
        .filter_map(|l| l.strip_prefix("[worker 0] "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["accuracy"].as_f64().expect("accuracy"),
                v["logloss"].as_f64().expect("logloss"),
            )
        })
        .collect()
}

#[test]
fn two_servers_four_workers_reach_the_target() {
    let e = epochs(&lr(2, 4, &[]));
    assert_eq!(e.len(), 5, "one report per epoch");
    let (acc, loss) = e[4];
    assert!(acc >= 0.84, "test accuracy {acc} < 0.84");
    assert!(loss <= 0.35, "log-loss {loss} > 0.35");
}

#[test]
fn distributed_sync_matches_the_single_node_baseline() {
    let (base, _) = epochs(&lr(1, 1, &[]))[4];
    for (s, w) in [(2, 2), (2, 4)] {
        let (acc, _) = epochs(&lr(s, w, &[]))[4];
        assert!(
            (acc - base).abs() <= 0.005,
            "({s},{w}) accuracy {acc} vs 1x1 {base}"
        );
    }
}

#[test]
fn async_sgd_also_learns() {
    let e = epochs(&lr(
        2,
        2,
        &["--async", "--optimizer", "sgd", "--learning-rate", "0.5"],
    ));
    let (acc, loss) = e[e.len() - 1];
    assert!(
        acc >= 0.84 && loss <= 0.35,
        "async sgd: accuracy {acc}, log-loss {loss}"
    );
}

#[test]
fn ssp_with_a_slowed_worker_matches_sync_and_names_its_mode() {
    let (base, _) = epochs(&lr(1, 1, &[]))[4];
    let o = lr_env(2, 4, &["--staleness", "2"], ("PS_SLOW_WORKER", "3:2"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let (acc, _) = epochs(&o)[4];
    assert!(
        (acc - base).abs() <= 0.005,
        "SSP τ=2 accuracy {acc} vs 1x1 {base}"
    );
    assert!(out.contains(r#""mode":"ssp""#), "{out}");
    let err = lr_env(1, 2, &["--staleness", "2"], ("PS_SLOW_WORKER", "x"));
    assert!(!err.status.success());
    let text = String::from_utf8_lossy(&err.stderr);
    assert!(
        text.contains(
            "PS_SLOW_WORKER is \"x\": expected RANK:FACTOR, a worker rank and a factor ≥ 1"
        ),
        "{text}"
    );
}

#[test]
fn a_malformed_line_is_named_with_file_and_line() {
    let dir = std::env::temp_dir().join(format!("pslite-lr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let bad = dir.join("bad.svm");
    std::fs::write(&bad, "+1 1:1 3:1\n\n-1 2:1 7\n").expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args([
            "local",
            "--servers",
            "1",
            "--workers",
            "1",
            "--",
            "lr",
            "--train",
        ])
        .arg(&bad)
        .args(["--test", &data("a8a.test")])
        .output()
        .expect("launcher runs");
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains(&format!(
            "{}:3: bad feature \"7\": expected idx:value",
            bad.display()
        )),
        "{err}"
    );
}
