//! Durable servers and recovery with real processes on loopback (issue 13): a server killed
//! with SIGKILL and replaced restores its values from `PS_CHECKPOINT_DIR`, the workers send
//! again what it had not answered, and the job ends with exact sums; a damaged checkpoint
//! makes the replacement refuse to start, naming the file and the byte offset. The tests run
//! one at a time (two cores).

mod common;

use common::roles::Cluster;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A fresh, empty directory for one test's checkpoints.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pslite-recovery-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// How a test damages server 0's checkpoint of application 0's u8 values (the bench's).
enum Damage {
    /// Flip one byte of the snapshot's payload.
    FlipSnapshot,
    /// Cut the snapshot in half.
    TruncateSnapshot,
    /// Flip one byte in the first logged request's payload.
    FlipLog,
}

/// Runs a bench on 1 server and 1 worker with checkpoints, kills the server, damages its
/// checkpoint with `damage`, starts a replacement; returns the replacement's exit status and
/// output, and the directory of the damaged files.
fn replace_after(damage: Damage) -> (Option<i32>, String, PathBuf) {
    let dir = fresh_dir(match damage {
        Damage::FlipSnapshot => "flip-snapshot",
        Damage::TruncateSnapshot => "cut-snapshot",
        Damage::FlipLog => "flip-log",
    });
    let cp = dir.to_string_lossy().to_string();
    let env = [
        ("PS_CHECKPOINT_DIR", cp.as_str()),
        ("PS_CHECKPOINT_LOG_MB", "4096"),
        ("PS_VERBOSE", "1"),
        ("PS_HEARTBEAT_TIMEOUT", "60"),
    ];
    let mut c = Cluster::start(1, 1, &env, &["bench", "--seconds", "60", "--len", "1024"]);
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
    let (code, out) = c.wait_exit("server0b", Duration::from_secs(30));
    (code, out, app)
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
    }
}

#[test]
fn a_flipped_byte_in_the_snapshot_makes_the_replacement_refuse_naming_file_and_offset() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (code, out, app) = replace_after(Damage::FlipSnapshot);
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
    let (code, out, app) = replace_after(Damage::TruncateSnapshot);
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
    let (code, out, app) = replace_after(Damage::FlipLog);
    assert_eq!(code, Some(1), "{out}");
    let want = format!(
        "pslite-server: error: corrupt checkpoint: {}: damaged at byte 0: record payload \
         checksum mismatch",
        app.join("log.1").display()
    );
    assert!(out.contains(&want), "expected {want:?} in:\n{out}");
}
