//! Tests of one checkpoint directory: generations, torn tails, interrupted snapshots, the lock.

use super::files::LOCK_WAIT;
use super::*;
use crate::kv::durable::record::Request;

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pslite-cp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn push(ts: i32, vals: &[u8]) -> Entry<'_> {
    Entry::Applied(Request {
        sender: 9,
        customer: 0,
        timestamp: ts,
        part: 0,
        cmd: 0,
        push: true,
        pull: false,
        keys_by_digest: None,
        frames: vec![&[1, 0, 0, 0, 0, 0, 0, 0], vals],
    })
}

#[test]
fn a_snapshot_starts_a_new_log_and_both_come_back_after_a_restart() {
    let d = dir("generations");
    let mut cp = Checkpoint::create(&d, (Fsync::No, 1 << 20), 77, b"s1").expect("created");
    for ts in 0..3 {
        cp.append(&push(ts, &[ts as u8])).expect("logged");
    }
    cp.snapshot(b"s2").expect("snapshot");
    for _ in 0..100 {
        if !d.join("log.1").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!d.join("log.1").exists(), "the old log is removed");
    cp.append(&push(3, &[3])).expect("logged");
    // The third generation's log is the first one's file, kept open (and mapped).
    assert!(d.join(SPARE).exists(), "the retired log is kept");
    cp.snapshot(b"s3").expect("snapshot");
    assert!(d.join("log.3").exists() && !d.join("log.2").exists());
    assert!(
        d.join(SPARE).exists(),
        "the second generation's log is kept in turn"
    );
    cp.append(&push(4, &[4; 3000])).expect("logged");
    drop(cp);
    let (cp, r) = Checkpoint::open(&d, Fsync::No, 1 << 20).expect("opened");
    assert_eq!((r.generation, r.run, &r.state[..]), (3, 77, &b"s3"[..]));
    let entries = r.entries().expect("whole");
    assert_eq!(entries.len(), 1, "only what came after the snapshot");
    assert_eq!(entries[0].1, push(4, &[4; 3000]));
    assert!(
        (0..4).all(|ts| cp.applied.contains(9, 0, (ts, 0))),
        "kept in the snapshot"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_torn_last_record_is_cut_off_and_appending_goes_on_after_the_whole_ones() {
    let d = dir("torn");
    // Written with fsync, so the file ends where the log ends.
    let mut cp = Checkpoint::create(&d, (Fsync::Yes, 1 << 20), 1, b"").expect("created");
    cp.append(&push(0, &[5; 10])).expect("logged");
    drop(cp);
    let log = d.join("log.1");
    let whole = std::fs::metadata(&log).expect("log").len() - super::log::TERMINATOR as u64;
    let half = super::log::encode(1, &push(1, &[6; 10]).encode());
    // What a machine crash in an fsynced append (written in order, at the file's end)
    // can leave.
    let mut bytes = std::fs::read(&log).expect("read");
    bytes.truncate(whole as usize);
    bytes.extend_from_slice(&half[..half.len() / 2]);
    std::fs::write(&log, bytes).expect("torn");
    let (mut cp, r) = Checkpoint::open(&d, Fsync::No, 1 << 20).expect("opened");
    assert_eq!(r.torn_at, Some(whole));
    assert_eq!(std::fs::metadata(&log).expect("log").len(), whole, "cut");
    cp.append(&push(2, &[7])).expect("logged");
    drop(cp);
    let (_, r) = Checkpoint::read(&d).expect("read");
    let ts: Vec<i32> = r
        .entries()
        .expect("whole")
        .into_iter()
        .map(|(_, e)| match e {
            Entry::Applied(r) => r.timestamp,
            _ => -1,
        })
        .collect();
    assert_eq!(ts, vec![0, 2]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_snapshot_interrupted_before_its_rename_leaves_the_old_generation_whole() {
    let d = dir("interrupted");
    let mut cp = Checkpoint::create(&d, (Fsync::No, 1 << 20), 1, b"s1").expect("created");
    cp.append(&push(0, &[1])).expect("logged");
    drop(cp);
    // What a crash after `log.2` was created, before the snapshot's rename, leaves.
    std::fs::write(d.join("log.2"), b"").expect("empty next log");
    std::fs::write(d.join("snapshot.tmp"), b"half a snapshot").expect("tmp");
    let (mut cp, r) = Checkpoint::open(&d, Fsync::No, 1 << 20).expect("opened");
    assert_eq!((r.generation, r.entries().expect("whole").len()), (1, 1));
    cp.snapshot(b"s2").expect("the next snapshot succeeds");
    drop(cp);
    let (_, r) = Checkpoint::read(&d).expect("read");
    assert_eq!(
        (r.generation, &r.state[..], r.log.len()),
        (2, &b"s2"[..], 0)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_directory_in_use_is_refused_naming_it() {
    let d = dir("locked");
    let cp = Checkpoint::create(&d, (Fsync::No, 1 << 20), 1, b"").expect("created");
    let t0 = std::time::Instant::now();
    let e = Checkpoint::open(&d, Fsync::No, 1 << 20)
        .err()
        .expect("locked")
        .to_string();
    assert!(
        e.contains(&format!(
            "checkpoint {} is in use by another process (for 10 s)",
            d.display()
        )),
        "{e}"
    );
    assert!(t0.elapsed() >= LOCK_WAIT, "it waited for the holder");
    drop(cp);
    assert!(
        Checkpoint::open(&d, Fsync::No, 1 << 20).is_ok(),
        "free again"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_retired_log_is_renamed_away_at_once_and_removed_later_by_its_new_name() {
    let d = dir("retired");
    let mut cp = Checkpoint::create(&d, (Fsync::Yes, 1 << 20), 5, b"s1").expect("created");
    cp.append(&push(0, &[1; 100])).expect("logged");
    cp.snapshot(b"s2").expect("snapshot");
    // A new log.1 made now (a later checkpoint here) is not the one the removal removes.
    assert!(
        !d.join("log.1").exists(),
        "renamed away before snapshot returned"
    );
    std::fs::write(d.join("log.1"), b"someone else's").expect("a new file of the old name");
    for _ in 0..100 {
        if !d.join("gone.log.1").exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!d.join("gone.log.1").exists(), "removed on its thread");
    assert_eq!(
        std::fs::read(d.join("log.1")).expect("kept"),
        b"someone else's"
    );
    drop(cp);
    let _ = std::fs::remove_dir_all(&d);
}
