//! Checkpoint log micro-benchmark: what logging one pushed MB costs the server.
//! `cargo bench --bench log [-- DIR]` (default: the system's temporary directory; give a
//! directory on the disk the checkpoints go to) appends 1,024,000-byte records to a log of
//! 256 MiB, round after round over the same file as the server's reused logs do, and prints
//! µs per record, median of 5 rounds, beside references measured in the same run: `memcpy` of
//! the MB into a 256 MiB buffer, `pwrite` of it into a reused file, and both checksums. It
//! asserts nothing about speed.

use pslite::kv::durable::log::LogWriter;
use pslite::kv::durable::Fsync;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::time::Instant;

const LEN: usize = 1_024_000;
const RECORDS: usize = 250;

/// Median µs per record of 5 rounds of `RECORDS` calls of `f(i)`, after one round unmeasured.
fn median5(label: &str, mut f: impl FnMut(usize)) {
    (0..RECORDS).for_each(&mut f);
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            (0..RECORDS).for_each(&mut f);
            t0.elapsed().as_secs_f64() * 1e6 / RECORDS as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    println!(
        "{label:<58} {:>8.1} µs/MB  {:>6.2} GB/s",
        t[2],
        LEN as f64 / t[2] / 1e3
    );
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .filter(|a| a != "--bench")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let payload: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4096) as u8).collect();
    println!(
        "log bench in {}: {RECORDS} records of {LEN} bytes a round",
        dir.display()
    );

    let mut ring = vec![0u8; RECORDS * LEN];
    median5("reference: memcpy into a 256 MiB buffer", |i| {
        ring[i * LEN..(i + 1) * LEN].copy_from_slice(&payload);
        black_box(&ring);
    });
    median5("reference: crc32c (crc-fast, the log's)", |_| {
        black_box(pslite::kv::durable::crc32c(&[black_box(&payload)]));
    });
    let path = dir.join(format!("pslite-log-bench-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .expect("a file in DIR");
    median5("reference: pwrite into a reused file (no checksum)", |i| {
        file.write_all_at(&payload, (i * LEN) as u64)
            .expect("pwrite");
    });
    drop(file);

    // The log, rewritten from its start every round (as a reused spare is).
    let mut round = 0;
    let mut w = None;
    median5("LogWriter::append without fsync (mapped)", |i| {
        if i == 0 {
            round += 1;
            let spare = dir.join(format!("pslite-log-bench-spare-{}", std::process::id()));
            if let Some(old) = w.take() {
                std::fs::rename(&path, &spare).expect("retired");
                w = Some(
                    LogWriter::reuse(Some(old), &spare, &path, (Fsync::No, round)).expect("reused"),
                );
            } else {
                w = Some(LogWriter::create(&path, Fsync::No, round).expect("log"));
            }
        }
        if let Some(w) = w.as_mut() {
            w.append(&payload).expect("append");
        }
    });
    drop(w);
    let _ = std::fs::remove_file(&path);
}
