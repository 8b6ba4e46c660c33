//! Durable servers and recovery with real processes on loopback: a server killed
//! with SIGKILL and replaced restores its values from `PS_CHECKPOINT_DIR`, the workers send
//! again what it had not answered, and the job ends with exact sums; a damaged checkpoint
//! makes the replacement refuse to start, naming the file and the byte offset. The tests run
//! one at a time (two cores).

mod common;

use common::Scratch;

use common::launched::{
    kv_app_with_a_node_killed, kv_app_with_the_scheduler_killed, KillRun, Launched, SchedulerKill,
};
use common::roles::Cluster;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn fresh_dir(name: &str) -> Scratch {
    Scratch::new(&format!("recovery-{name}"))
}

/// How a test damages server 0's checkpoint of application 0's u8 values (the bench's).
enum Damage {
    /// Flip one byte of the snapshot's payload.
    FlipSnapshot,
    /// Cut the snapshot in half.
    TruncateSnapshot,
    /// Flip one byte in the first logged request's payload.
    FlipLog,
    /// Cut the log inside its first record (byte 40).
    CutLog,
}

/// Runs a bench on 1 server and 1 worker with checkpoints, kills the server, damages its
/// checkpoint with `damage`, starts a replacement (`server0b`); returns the checkpoints'
/// directory, the cluster and the directory of the damaged files.
fn replace_after(damage: Damage) -> (Scratch, Cluster, PathBuf) {
    let dir = fresh_dir(match damage {
        Damage::FlipSnapshot => "flip-snapshot",
        Damage::TruncateSnapshot => "cut-snapshot",
        Damage::FlipLog => "flip-log",
        Damage::CutLog => "cut-log",
    });
    let cp = dir.to_string_lossy().to_string();
    let env = [
        ("PS_CHECKPOINT_DIR", cp.as_str()),
        ("PS_CHECKPOINT_LOG_MB", "4096"),
        ("PS_VERBOSE", "1"),
        ("PS_HEARTBEAT_TIMEOUT", "60"),
    ];
    let mut c = Cluster::start(1, 1, &env, &["bench", "--seconds", "20", "--len", "1024"]);
    for name in ["server0", "worker0"] {
        c.wait_for(name, " started: ", Duration::from_secs(30));
    }
    std::thread::sleep(Duration::from_secs(1));
    c.signal("server0", libc::SIGKILL);
    let app = dir.join("server-0").join("app0-u8");
    damage_files(&app, damage);
    c.add(
        "server0b",
        env!("CARGO_BIN_EXE_pslite-server"),
        Some(0),
        &[],
    );
    (dir, c, app)
}

/// The checkpoints' directory, the replacement's exit status and output after
/// [`replace_after`]`(damage)`, and the directory of the damaged files.
fn replacement_after(damage: Damage) -> (Scratch, Option<i32>, String, PathBuf) {
    let (dir, mut c, app) = replace_after(damage);
    let (code, out) = c.wait_exit("server0b", Duration::from_secs(30));
    (dir, code, out, app)
}

fn damage_files(app: &Path, damage: Damage) {
    let snap = app.join("snapshot");
    let log = app.join("log.1");
    let flip = |path: &Path, at: usize| {
        let mut b = std::fs::read(path).expect("the file");
        assert!(b.len() > at, "{} has {} bytes", path.display(), b.len());
        b[at] ^= 0x40;
        std::fs::write(path, b).expect("written back");
    };
    match damage {
        Damage::FlipSnapshot => flip(&snap, 30),
        Damage::TruncateSnapshot => {
            let len = std::fs::metadata(&snap).expect("the snapshot").len();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&snap)
                .expect("opened");
            f.set_len(len / 2).expect("cut");
        }
        // Record 0 starts at byte 0; its payload at byte 12.
        Damage::FlipLog => flip(&log, 40),
        Damage::CutLog => {
            let len = std::fs::metadata(&log).expect("the log").len();
            assert!(len > 40, "the bench logged {len} bytes");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&log)
                .expect("opened");
            f.set_len(40).expect("cut");
        }
    }
}

#[test]
fn a_flipped_byte_in_the_snapshot_makes_the_replacement_refuse_naming_file_and_offset() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (_dir, code, out, app) = replacement_after(Damage::FlipSnapshot);
    assert_eq!(code, Some(1), "{out}");
    let want = format!(
        "pslite-server: error: corrupt checkpoint: {}: damaged at byte",
        app.join("snapshot").display()
    );
    assert!(out.contains(&want), "expected {want:?} in:\n{out}");
    assert!(out.contains(": checksum mismatch (stored"), "{out}");
}

#[test]
fn a_truncated_snapshot_makes_the_replacement_refuse_naming_file_and_offset() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (_dir, code, out, app) = replacement_after(Damage::TruncateSnapshot);
    assert_eq!(code, Some(1), "{out}");
    let want = format!(
        "pslite-server: error: corrupt checkpoint: {}: damaged at byte 12: the header says",
        app.join("snapshot").display()
    );
    assert!(out.contains(&want), "expected {want:?} in:\n{out}");
}

#[test]
fn a_flipped_byte_in_the_log_makes_the_replacement_refuse_naming_file_and_offset() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (_dir, code, out, app) = replacement_after(Damage::FlipLog);
    assert_eq!(code, Some(1), "{out}");
    let want = format!(
        "pslite-server: error: corrupt checkpoint: {}: damaged at byte 0: record payload \
         checksum mismatch",
        app.join("log.1").display()
    );
    assert!(out.contains(&want), "expected {want:?} in:\n{out}");
}

/// The recovery cross-check: server 0's log is cut inside its first record after the server
/// was killed, so the log holds none of the pushes the server had answered (a cut the log
/// alone takes for a torn tail). The worker tells the replacement what the dead server
/// answered; the replacement refuses to serve, naming the worker, the missing requests and
/// the log, and every node of the job exits non-zero.
#[test]
fn a_log_cut_inside_an_answered_record_makes_the_replacement_refuse_and_the_job_fail() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (_dir, mut c, app) = replace_after(Damage::CutLog);
    let (code, out) = c.wait_exit("server0b", Duration::from_secs(60));
    let want = "refuses to serve: worker rank 0 (id 9) saw the server it replaces answer requests \
                that its checkpoint does not hold, so acknowledged updates were lost: customer 0 \
                up to timestamp ";
    assert!(out.contains(want), "expected {want:?} in:\n{out}");
    let whose = format!(
        "its state: restored from {} and 0 logged entries of {} (its last record, cut short at \
         byte 0, was taken for a torn tail)",
        app.join("snapshot").display(),
        app.join("log.1").display()
    );
    assert!(out.contains(&whose), "expected {whose:?} in:\n{out}");
    assert_eq!(code, Some(1), "{out}");
    for name in ["worker0", "scheduler"] {
        let (code, out) = c.wait_exit(name, Duration::from_secs(60));
        assert_eq!(code, Some(1), "{name}:\n{out}");
        assert!(out.contains("refuses to serve"), "{name}:\n{out}");
        if name == "scheduler" {
            // The replacement's own failure, not only the worker's.
            let own =
                "server rank 0 (id 8) failed: server rank 0 (id 8), app 0, u8 refuses to serve";
            assert!(out.contains(own), "expected {own:?} in:\n{out}");
        }
    }
}

/// A number in `0..n` from the clock (the moments differ run to run; each is printed).
fn random_below(n: u64) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    (t ^ (t >> 7)) % n
}

#[test]
fn kv_app_ends_exactly_after_a_server_is_killed_and_replaced_at_five_random_moments() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = fresh_dir("kv-app");
    let cp = dir.to_string_lossy().to_string();
    for round in 0..5 {
        let victim = format!("server {}", round % 2);
        let after = Duration::from_millis(100 + random_below(900));
        println!("round {round}: {victim} killed {after:?} after the workers started");
        let out = kv_app_with_a_node_killed(&KillRun {
            cp: &cp,
            extra: &[],
            kv_app: &["--keys", "10000", "--repeat", "3000"],
            env: &[
                ("PS_VERBOSE", "1"),
                // Odd rounds snapshot every MiB of log: kills land across generation switches.
                (
                    "PS_CHECKPOINT_LOG_MB",
                    if round % 2 == 1 { "1" } else { "256" },
                ),
                // The last round with resend on: sequence numbers restart with the replacement.
                ("PS_RESEND", if round == 4 { "1" } else { "0" }),
            ],
            victim: &victim,
            after,
            limit: Duration::from_secs(120),
        });
        assert!(
            out.contains("restored from"),
            "round {round}: no restore:\n{out}"
        );
        if round % 2 == 1 {
            assert!(
                out.contains("log generation 3"),
                "round {round}: no snapshots:\n{out}"
            );
        }
    }
}

#[test]
fn kv_app_ends_exactly_after_a_worker_is_killed_and_replaced_at_three_random_moments() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = fresh_dir("kv-app-worker");
    let cp = dir.to_string_lossy().to_string();
    for round in 0..3 {
        let victim = format!("worker {}", round % 2);
        // Within the push phase or the push-pull phase (about 1 s and 2 s each here, on a
        // fast day).
        let after = Duration::from_millis(100 + random_below(2400));
        println!("round {round}: {victim} killed {after:?} after the workers started");
        let out = kv_app_with_a_node_killed(&KillRun {
            cp: &cp,
            extra: &[],
            kv_app: &["--keys", "10000", "--repeat", "3000"],
            env: &[("PS_VERBOSE", "1")],
            victim: &victim,
            after,
            limit: Duration::from_secs(120),
        });
        let resumed = format!("[{victim}] ");
        assert!(
            out.lines().any(|l| l.starts_with(&resumed)
                && (l.contains("of the lost worker's pushes") || l.contains("passed at once"))),
            "round {round}: the replacement did not take up its predecessor's work:\n{out}"
        );
    }
}

#[test]
fn kv_app_ends_exactly_after_the_scheduler_is_killed_and_replaced_at_five_random_moments() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = fresh_dir("kv-app-scheduler");
    let cp = dir.to_string_lossy().to_string();
    let mut took = Vec::new();
    for round in 0..5 {
        // Round 0 at start-up, before the workers registered; then anywhere in the run's
        // first 2 s (it takes 3 s here on a fast day): the servers wait in their last barrier
        // all along, the workers pass barriers between phases. In the last round a server
        // dies with the scheduler, and is replaced by way of the new scheduler.
        let kill = SchedulerKill {
            moment: match round {
                0 => "started worker 1 (pid",
                _ => "worker rank 0 (id 9) started: ",
            },
            after: Duration::from_millis(if round == 0 { 0 } else { random_below(2000) }),
            also: (round == 4).then_some("server 0"),
        };
        let (moment, after, also) = (kill.moment, kill.after, kill.also);
        println!("round {round}: the scheduler (and {also:?}) killed {after:?} after {moment:?}");
        let kv_app = ["--keys", "10000", "--repeat", "3000"];
        let (out, t) = kv_app_with_the_scheduler_killed(&cp, &kill, &[], &kv_app);
        println!("round {round}: every node registered again {t:?} after the kill");
        if round > 0 {
            assert!(
                out.contains("taking over run"),
                "round {round}: the new scheduler did not take the job over:\n{out}"
            );
        }
        if also.is_some() {
            assert!(
                out.contains("restored from"),
                "round {round}: no restore:\n{out}"
            );
        }
        took.push(t);
    }
    took.sort();
    println!(
        "time from the kill to every node registered with the new scheduler: median {:?}, max {:?}",
        took[took.len() / 2],
        took[took.len() - 1]
    );
}

/// Worker 0's test AUC after the last epoch, in `out` (launcher output of `ctr`).
fn ctr_auc(out: &str) -> f64 {
    out.lines()
        .filter(|l| l.starts_with("[worker 0] "))
        .filter_map(|l| l.split("test AUC ").nth(1))
        .filter_map(|a| {
            a.split_whitespace()
                .next()?
                .trim_end_matches(',')
                .parse()
                .ok()
        })
        .next_back()
        .unwrap_or_else(|| panic!("no test AUC reported:\n{out}"))
}

#[test]
fn ctr_reaches_the_undisturbed_auc_after_the_scheduler_is_killed_and_replaced_twice() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The servers' tables as `ctr --print-tables` gives them.
    let [wide, emb] = pslite::apps::ctr::table_specs(&pslite::apps::ctr::CtrArgs::defaults());
    let cluster = [
        "--servers",
        "2",
        "--workers",
        "2",
        "--table",
        &wide,
        "--table",
        &emb,
    ];
    let ctr = [
        "--", "ctr", "--train", "600000", "--test", "20000", "--epochs", "2",
    ];
    let undisturbed = Launched::start(&[&cluster[..], &ctr[..]].concat(), &[]);
    let (code, out) = undisturbed.finish(Duration::from_secs(300));
    assert_eq!(code, Some(0), "{out}");
    let base = ctr_auc(&out);

    let dir = fresh_dir("ctr-scheduler");
    let cp = dir.to_string_lossy().to_string();
    let restart = ["--restart", "2", "--checkpoint-dir", &cp];
    let l = Launched::start(&[&cluster[..], &restart[..], &ctr[..]].concat(), &[]);
    // In the first epoch (3 s or more here), then in the second.
    l.wait_line("started worker 1 (pid");
    std::thread::sleep(Duration::from_millis(800 + random_below(1500)));
    l.kill("scheduler");
    l.wait_line("all 4 nodes re-registered with this scheduler");
    l.wait_line("[worker 0] epoch 1:");
    std::thread::sleep(Duration::from_millis(random_below(1000)));
    l.kill("scheduler");
    let (code, out) = l.finish(Duration::from_secs(300));
    let shown = common::launched::without_info(&out);
    assert_eq!(code, Some(0), "{shown}");
    let restarts = out
        .matches("scheduler exited with signal: 9 (SIGKILL); restarting it")
        .count();
    assert_eq!(restarts, 2, "{shown}");
    let auc = ctr_auc(&out);
    println!("ctr test AUC undisturbed {base:.4}, with the scheduler killed twice {auc:.4}");
    assert!(
        (auc - base).abs() <= 0.005,
        "AUC {auc} vs undisturbed {base}:\n{shown}"
    );
}

/// Final (accuracy, log-loss) worker 0 reported in `out` (launcher output of `lr --json`).
fn last_epoch(out: &str) -> (f64, f64) {
    out.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("[worker 0] "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| Some((v["accuracy"].as_f64()?, v["logloss"].as_f64()?)))
        .unwrap_or_else(|| panic!("no epoch reported:\n{out}"))
}

#[test]
fn lr_reaches_the_undisturbed_accuracy_after_a_server_and_a_worker_are_killed_and_replaced() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let data = |f: &str| format!("{}/data/a8a/{f}", env!("CARGO_MANIFEST_DIR"));
    let (train, test) = (data("a8a.train"), data("a8a.test"));
    let lr = [
        "--", "lr", "--train", &train, "--test", &test, "--epochs", "8", "--json",
    ];
    let cluster = ["--servers", "2", "--workers", "4"];
    let undisturbed = Launched::start(&[&cluster[..], &lr[..]].concat(), &[]);
    let (code, out) = undisturbed.finish(Duration::from_secs(300));
    assert_eq!(code, Some(0), "{out}");
    let (base, _) = last_epoch(&out);

    let dir = fresh_dir("lr");
    let cp = dir.to_string_lossy().to_string();
    let restart = ["--restart", "2", "--checkpoint-dir", &cp];
    let verbose = [("PS_VERBOSE", "1")];
    let l = Launched::start(&[&cluster[..], &restart[..], &lr[..]].concat(), &verbose);
    l.wait_line("[worker 0] {\"epoch\":2,");
    std::thread::sleep(Duration::from_millis(random_below(200)));
    l.kill("server 0");
    l.wait_line("[worker 0] {\"epoch\":5,");
    std::thread::sleep(Duration::from_millis(random_below(200)));
    l.kill("worker 1");
    let (code, out) = l.finish(Duration::from_secs(300));
    let shown: String = out
        .lines()
        .filter(|l| !l.contains(" INFO ") || l.contains("resuming"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(code, Some(0), "{shown}");
    for node in ["server 0", "worker 1"] {
        let restarted = format!("{node} exited with signal: 9 (SIGKILL); restarting it");
        assert!(out.contains(&restarted), "{shown}");
    }
    assert!(
        out.contains("[worker 1]") && out.contains("resuming there"),
        "the replacement worker did not resume after its predecessor's epochs:\n{shown}"
    );
    let (acc, loss) = last_epoch(&out);
    println!("accuracy undisturbed {base:.4}, with a server and a worker killed and replaced {acc:.4} (log-loss {loss:.4})");
    assert!(
        (acc - base).abs() <= 0.005,
        "accuracy {acc} vs undisturbed {base}:\n{out}"
    );
}

/// `pslite-launch inspect DIR`, run to its end.
fn inspect(dir: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args(["inspect", dir])
        .output()
        .expect("inspect runs")
}

#[test]
fn inspect_prints_the_keys_and_values_a_server_would_restore() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = fresh_dir("inspect");
    let cp = dir.to_string_lossy().to_string();
    let l = Launched::start(
        &[
            "--servers",
            "2",
            "--workers",
            "1",
            "--checkpoint-dir",
            &cp,
            "--",
            "kv-app",
            "--keys",
            "100",
            "--repeat",
            "3",
        ],
        &[],
    );
    let (code, out) = l.finish(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}");
    let o = inspect(&cp);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let f32_0 = format!(
        "{}: run 0x",
        dir.join("server-0").join("app0-f32").display()
    );
    // The log holds each request with its keys: a list travels (and is logged) twice before it
    // is registered (key caching), then as its digest.
    let blocks = ", generation 1, snapshot 52 bytes (handler state 12 bytes), log 2592 bytes: 6 \
                  requests and 1 key lists since, 6 recent requests remembered\n";
    assert!(
        report.contains(&f32_0) && report.contains(blocks),
        "{report}"
    );
    // 100 keys spread over the key space: 51 on server 0, 49 on server 1, and on each the
    // worker's progress key (key 1 on server 0); key 0 holds 1 (its value) x 3 pushes x 2
    // phases x 1 worker, the progress key 1 per push.
    assert!(
        report.contains("  52 keys, 52 values, lengths 1..=1\n  key 0: [6.0]\n  key 1: [6.0]\n"),
        "{report}"
    );
    assert!(
        report.contains("  50 keys, 50 values, lengths 1..=1\n"),
        "{report}"
    );
    let missing = inspect("/nonexistent-pslite-dir");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr)
        .contains("pslite-launch: error: /nonexistent-pslite-dir: cannot list"));
}
