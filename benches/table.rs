//! Embedding table micro-benchmark: lookup (pull) and AdaGrad update (push) of dim-16 rows on
//! Zipf-distributed keys, a new key list every request (sorted and unique, as a worker sends
//! them), against one `memcpy` of the same row bytes measured in the same run; then the bytes
//! per row a full budget costs beyond the values and slots.
//!
//! `cargo bench --bench table [-- REQUEST_KEYS [UNIVERSE [REQUESTS]]]` (defaults 1,000,000
//! sampled keys per request, a universe of 4,000,000 keys with Zipf exponent 1.05, 7 measured
//! requests) prints rows/s and the ratio to memcpy, medians over the requests; it asserts
//! nothing about speed.

use pslite::apps::table_app::Ranks;
use pslite::kv::table::admit::fmix64;
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
    // Warm-up: every key of the universe gets its row, so the requests measure lookups and
    // updates of held rows (creating a row costs its initializer: see BENCHMARKS.md).
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
    drop(all);
    let created = table.counts().admitted;
    println!(
        "dim {DIM}, AdaGrad, Zipf 1.05 over {universe} keys, {request_keys} draws per request; table holds {} rows",
        table.len()
    );
    let (mut pull_rps, mut push_rps, mut memcpy_rps, mut uniques) =
        (vec![], vec![], vec![], vec![]);
    let (mut pull_ratio, mut push_ratio) = (vec![], vec![]);
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
        let t0 = Instant::now();
        table.pull(&keys, &mut out).expect("pull");
        black_box(&out);
        let p = n as f64 / t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        table.push(&keys, &grads, None).expect("push");
        let u = n as f64 / t0.elapsed().as_secs_f64();
        memcpy_rps.push(m);
        pull_rps.push(p);
        push_rps.push(u);
        pull_ratio.push(p / m);
        push_ratio.push(u / m);
    }
    println!(
        "unique keys per request (median)     {:>12.0}",
        median(uniques)
    );
    println!(
        "memcpy of the rows                   {:>12.3} M rows/s",
        median(memcpy_rps) / 1e6
    );
    println!(
        "lookup (pull)                        {:>12.3} M rows/s   {:.3} of memcpy",
        median(pull_rps) / 1e6,
        median(pull_ratio)
    );
    println!(
        "AdaGrad update (push)                {:>12.3} M rows/s   {:.3} of memcpy",
        median(push_rps) / 1e6,
        median(push_ratio)
    );
    println!(
        "(medians of {requests} requests; rows created while measuring: {})",
        table.counts().admitted - created
    );
    overhead();
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
