//! Embedding table micro-benchmark: lookup (pull) and AdaGrad update (push) of dim-16 rows on
//! Zipf-distributed keys, a new key list every request (sorted and unique, as a worker sends
//! them), on one thread and split among the cores (at most 4), against one `memcpy` of the
//! same row bytes measured in the same run; then the ceiling this machine's memory sets for the
//! cache lines a lookup and an update touch ([`ceiling`]); then the bytes per row a full budget
//! costs beyond the values and slots.
//!
//! `cargo bench --bench table [-- REQUEST_KEYS [UNIVERSE [REQUESTS]]]` (defaults 1,000,000
//! sampled keys per request, a universe of 4,000,000 keys with Zipf exponent 1.05, 7 measured
//! requests) prints rows/s and the ratio to memcpy, medians over the requests; it asserts
//! nothing about speed.

use pslite::apps::table_app::Ranks;
use pslite::kv::table::admit::fmix64;
use pslite::kv::table::huge::Huge;
use pslite::kv::table::{Table, TableSpec};
use std::hint::black_box;
use std::time::Instant;

const DIM: usize = 16;

/// Ranks 0..n drawn with P(r) ∝ 1/(r+1)^s by inverse CDF; a rank's key is a hash of it, so the
/// hot keys are spread over the key space.
struct Zipf {
    ranks: Ranks,
    n: u64,
    state: u64,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        Zipf {
            ranks: Ranks::new(n as u64, s),
            n: n as u64,
            state: 1,
        }
    }

    fn key(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let u = (fmix64(self.state) >> 11) as f64 / (1u64 << 53) as f64;
        fmix64(self.ranks.rank(u, self.n) ^ 0xabcd)
    }

    /// `n` draws, sorted and unique.
    fn request(&mut self, n: usize) -> Vec<u64> {
        let mut k: Vec<u64> = (0..n).map(|_| self.key()).collect();
        k.sort_unstable();
        k.dedup();
        k
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let request_keys = args.first().copied().unwrap_or(1_000_000);
    let universe = args.get(1).copied().unwrap_or(4_000_000);
    let requests = args.get(2).copied().unwrap_or(7);
    let spec: TableSpec = format!("app=0,dim={DIM},init=normal:0:0.01,opt=adagrad:lr=0.05")
        .parse()
        .expect("spec");
    let mut zipf = Zipf::new(universe, 1.05);
    let mut table = Table::new(&spec).expect("table");
    warm_up(&mut table, universe);
    let created = table.counts().admitted;
    println!(
        "dim {DIM}, AdaGrad, Zipf 1.05 over {universe} keys, {request_keys} draws per request; table holds {} rows",
        table.len()
    );
    // Threads a request is split among: one, then every core (at most 4).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let splits: Vec<usize> = if cores > 1 { vec![1, cores] } else { vec![1] };
    let m = measure(&mut table, &mut zipf, request_keys, requests, &splits);
    let median_unique = median(m.uniques) as usize;
    println!("unique keys per request (median)     {median_unique:>12}");
    let memcpy = median(m.memcpy_rps);
    println!(
        "memcpy of the rows (one thread)      {:>12.3} M rows/s",
        memcpy / 1e6
    );
    report_splits(&splits, m.figures);
    println!(
        "(medians of {requests} requests; rows created while measuring: {})",
        table.counts().admitted - created
    );
    let record_bytes = table.bytes();
    drop(table);
    ceiling(record_bytes, median_unique, memcpy, &splits);
    overhead();
}

/// Gives every key of the universe its row, so the requests measure lookups and updates of
/// held rows (creating a row costs its initializer: see BENCHMARKS.md).
fn warm_up(table: &mut Table, universe: usize) {
    let all: Vec<u64> = {
        let mut k: Vec<u64> = (0..universe as u64).map(|r| fmix64(r ^ 0xabcd)).collect();
        k.sort_unstable();
        k.dedup();
        k
    };
    for chunk in all.chunks(1 << 20) {
        table
            .push(chunk, &vec![0.01; chunk.len() * DIM], None)
            .expect("push");
    }
}

/// What the requests measured: per request the memcpy's rows/s and the unique keys; per split,
/// pull rows/s, push rows/s, and their ratios to memcpy.
struct Measured {
    memcpy_rps: Vec<f64>,
    uniques: Vec<f64>,
    figures: Vec<[Vec<f64>; 4]>,
}

/// `requests` requests of `request_keys` Zipf draws: one memcpy of the rows, then per split a
/// pull and a push.
fn measure(
    table: &mut Table,
    zipf: &mut Zipf,
    request_keys: usize,
    requests: usize,
    splits: &[usize],
) -> Measured {
    let (mut memcpy_rps, mut uniques) = (vec![], vec![]);
    let mut figures = vec![[vec![], vec![], vec![], vec![]]; splits.len()];
    let source = vec![1.0f32; request_keys * DIM];
    for _ in 0..requests {
        let keys = zipf.request(request_keys);
        let n = keys.len();
        uniques.push(n as f64);
        let grads = vec![0.001f32; n * DIM];
        // Output buffers touched before (page faults are not the table's).
        let mut out = vec![1.0f32; n * DIM];
        let mut dest = vec![1.0f32; n * DIM];
        let t0 = Instant::now();
        dest.copy_from_slice(black_box(&source[..n * DIM]));
        black_box(&dest);
        let m = n as f64 / t0.elapsed().as_secs_f64();
        memcpy_rps.push(m);
        for (&threads, f) in splits.iter().zip(&mut figures) {
            table.set_threads(threads);
            let t0 = Instant::now();
            table.pull(&keys, &mut out).expect("pull");
            black_box(&out);
            let p = n as f64 / t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            table.push(&keys, &grads, None).expect("push");
            let u = n as f64 / t0.elapsed().as_secs_f64();
            for (v, x) in f.iter_mut().zip([p, u, p / m, u / m]) {
                v.push(x);
            }
        }
    }
    Measured {
        memcpy_rps,
        uniques,
        figures,
    }
}

/// Prints each split's medians: lookups and updates per second, and their ratios to memcpy.
fn report_splits(splits: &[usize], figures: Vec<[Vec<f64>; 4]>) {
    for (&threads, f) in splits.iter().zip(figures) {
        let [p, u, pr, ur] = f.map(median);
        let t = if threads == 1 {
            "1 thread ".to_string()
        } else {
            format!("{threads} threads")
        };
        println!(
            "lookup (pull), {t}             {:>12.3} M rows/s   {pr:.3} of memcpy",
            p / 1e6
        );
        println!(
            "AdaGrad update (push), {t}     {:>12.3} M rows/s   {ur:.3} of memcpy",
            u / 1e6
        );
    }
}

/// What the memory allows: rows whose cache lines are read (and some written back) at random
/// in a buffer as large as the table (huge pages, as the table's), with the table's prefetch
/// distance, by 1 and by every thread. First the lines this table touches: a lookup 3 (index
/// bucket, then the record's key and row), an update 4 read and 3 written back (index bucket,
/// then key, row and slots); then the fewest any table could: a lookup 2 (a bucket holding the
/// key, the row), an update 3 read and 2 written (bucket, row, slots). A table cannot beat
/// these; their ratio to memcpy is the most a lookup or an update could reach on this machine.
fn ceiling(bytes: usize, rows: usize, memcpy: f64, splits: &[usize]) {
    let mut buf = Huge::<u64>::zeroed(bytes / 8);
    for (i, w) in buf.iter_mut().enumerate().step_by(512) {
        *w = i as u64;
    }
    let mut state = 99u64;
    for (what, read, written) in [
        ("lookup", 3, 0),
        ("update", 4, 3),
        ("fewest for a lookup", 2, 0),
        ("fewest for an update", 3, 2),
    ] {
        for &threads in splits {
            let mut rates = vec![];
            for _ in 0..5 {
                let starts: Vec<u64> = (0..rows)
                    .map(|_| {
                        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                        fmix64(state)
                    })
                    .collect();
                let per = starts.len().div_ceil(threads);
                // Each thread reads and writes lines of its own part of the buffer.
                let part = buf.len().div_ceil(threads);
                let t0 = Instant::now();
                std::thread::scope(|s| {
                    for (st, b) in starts.chunks(per).zip(buf.chunks_mut(part)) {
                        s.spawn(move || black_box(random_rows(b, st, read, written)));
                    }
                });
                rates.push(rows as f64 / t0.elapsed().as_secs_f64());
            }
            let r = median(rates);
            println!(
                "ceiling: {what} ({read} random lines, {written} written back), {threads} thread(s) {:>9.3} M rows/s   {:.3} of memcpy",
                r / 1e6,
                r / memcpy
            );
        }
    }
}

/// For each of `starts`, reads `read` cache lines of `buf` at random (from the start's hash),
/// adding 1 to a word of the last `written`; lines asked for 8 rows ahead.
fn random_rows(buf: &mut [u64], starts: &[u64], read: usize, written: usize) -> u64 {
    const AHEAD: usize = 8;
    let lines = (buf.len() / 8) as u64;
    let line = |s: u64, l: usize| (fmix64(s ^ l as u64) % lines) as usize * 8;
    let mut sum = 0u64;
    for (i, &s) in starts.iter().enumerate() {
        if let Some(&n) = starts.get(i + AHEAD) {
            for l in 0..read {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: a prefetch is a hint; it never faults.
                unsafe {
                    std::arch::x86_64::_mm_prefetch(
                        buf.as_ptr().wrapping_add(line(n, l)).cast::<i8>(),
                        std::arch::x86_64::_MM_HINT_T0,
                    );
                }
            }
        }
        for l in 0..read {
            let w = line(s, l);
            sum = sum.wrapping_add(buf[w]);
            if l >= read - written {
                buf[w] = buf[w].wrapping_add(1);
            }
        }
    }
    sum
}

/// A 256 MiB table filled with distinct keys (each pushed twice where admission needs two) up to
/// its most rows: rows held, bytes, and bytes per
/// row beyond `dim · 4` and the slots.
fn overhead() {
    for line in [
        "app=0,dim=16,opt=adagrad:lr=0.05,budget=256MiB",
        "app=0,dim=16,opt=sgd:lr=0.05,budget=256MiB",
        "app=0,dim=16,opt=adagrad:lr=0.05,admit=count:2,budget=256MiB",
    ] {
        let spec: TableSpec = line.parse().expect("spec");
        let mut t = Table::new(&spec).expect("table");
        let max = t.max_rows().expect("budget");
        let mut next = 0u64;
        while t.len() < max {
            let n = (max - t.len()).min(65536) as u64;
            let keys: Vec<u64> = (next..next + n).collect();
            next += n;
            for _ in 0..2 {
                t.push(&keys, &vec![0.0; keys.len() * 16], None)
                    .expect("push");
            }
        }
        println!(
            "{line}: {} rows held (most {max}), {} bytes of {}, {:.2} bytes per row beyond values and slots",
            t.len(),
            t.bytes(),
            256u64 << 20,
            t.overhead_per_row().unwrap_or(0.0)
        );
    }
}
