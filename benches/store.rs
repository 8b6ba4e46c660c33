//! Key store micro-benchmark: the index against `std`'s map (SipHash) and hashbrown with
//! foldhash, the store's push / pull paths, and where rayon pays, on N keys spread over the key
//! space as `kv-app` spreads them. `cargo bench --bench store [-- N]` (default 10,000,000)
//! prints ns per key and the time of one `memcpy` of the same bytes; it asserts nothing about
//! speed.

use pslite::kv::store::{Index, KeyStore, Lens, Resolved};
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

fn time(label: &str, n: usize, f: impl FnOnce() -> usize) {
    let t0 = Instant::now();
    let r = black_box(f());
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "{label:<52} {:>9.1} ms {:>8.1} ns/key  ({r})",
        dt * 1e3,
        dt * 1e9 / n as f64
    );
}

/// As [`time`], the median of 5 runs of `f` (for the comparisons that decide thresholds).
fn median5(label: &str, n: usize, mut f: impl FnMut() -> usize) {
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            black_box(f());
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    println!(
        "{label:<52} {:>9.2} ms {:>8.2} ns/key  (median of 5)",
        t[2] * 1e3,
        t[2] * 1e9 / n as f64
    );
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let step = u64::MAX / n as u64;
    let keys: Vec<u64> = (0..n as u64).map(|i| i * step).collect();
    let vals: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    println!("{n} keys spread over the key space, one f32 each");
    references(&keys, &vals);
    maps(&keys);
    index(&keys);
    let mut store = KeyStore::<f32>::new();
    let kept = first_push_and_pull(&mut store, &keys, &vals);
    rayon_pulls(&store, &keys);
    rayon_values();
    kept_resolution(&mut store, &kept, &keys, &vals);
}

/// One `memcpy` of the keys and one of the values: the floor of every line that follows.
fn references(keys: &[u64], vals: &[f32]) {
    let n = keys.len();
    let mut dst = vec![0u64; n];
    time("reference: memcpy of the keys (8 B/key)", n, || {
        dst.copy_from_slice(keys);
        dst[n / 2] as usize
    });
    let mut vdst = vec![0f32; n];
    time("reference: memcpy of the values (4 B/key)", n, || {
        vdst.copy_from_slice(vals);
        vdst[n / 2] as usize
    });
}

/// `std`'s map with SipHash and hashbrown with foldhash: insert every key, look every key up.
fn maps(keys: &[u64]) {
    let n = keys.len();
    let mut sip: HashMap<u64, u32> = HashMap::new();
    time("std HashMap (SipHash): insert", n, || {
        keys.iter().enumerate().for_each(|(i, &k)| {
            sip.insert(k, i as u32);
        });
        sip.len()
    });
    time("std HashMap (SipHash): lookup", n, || {
        keys.iter().map(|k| sip[k] as usize).sum()
    });
    drop(sip);
    let mut fold: HashMap<u64, u32, foldhash::fast::RandomState> = HashMap::default();
    time("hashbrown + foldhash: insert", n, || {
        keys.iter().enumerate().for_each(|(i, &k)| {
            fold.insert(k, i as u32);
        });
        fold.len()
    });
    time("hashbrown + foldhash: lookup", n, || {
        keys.iter().map(|k| fold[k] as usize).sum()
    });
}

/// The store's [`Index`]: inserts growing from empty, sized with prefetching, and lookups.
fn index(keys: &[u64]) {
    let n = keys.len();
    // The index maps keys to entry numbers; entry i here is keys[i] (the store's entries hold
    // their keys the same way).
    let mut ix = Index::default();
    time("pslite Index: insert, growing from empty", n, || {
        for (i, &k) in keys.iter().enumerate() {
            ix.get_or_insert(k, i as u32, &keys[..i]).expect("memory");
        }
        ix.len()
    });
    drop(ix);
    let mut ix = Index::with_capacity(n);
    time(
        "pslite Index: insert, sized, prefetching (as the store)",
        n,
        || {
            for (i, &k) in keys.iter().enumerate() {
                if let Some(&ahead) = keys.get(i + 16) {
                    ix.prefetch(ahead);
                }
                ix.get_or_insert(k, i as u32, &keys[..i]).expect("memory");
            }
            ix.len()
        },
    );
    time("pslite Index: lookup", n, || {
        keys.iter()
            .map(|&k| ix.get(k, keys).unwrap_or(0) as usize)
            .sum()
    });
}

/// The first push of every key into `store`, then one resolution of a pull of them all, which
/// is returned (to be kept).
fn first_push_and_pull(store: &mut KeyStore<f32>, keys: &[u64], vals: &[f32]) -> Resolved {
    let n = keys.len();
    time("KeyStore: first push (resolve_push + copy in)", n, || {
        let r = store.resolve_push(keys, Lens::Uniform(1)).expect("push");
        store.push(&r, vals);
        r.runs()
    });
    let mut kept = None;
    time("KeyStore: resolve_pull (one lookup per key)", n, || {
        let r = store.resolve_pull(keys).expect("pull");
        let runs = r.runs();
        kept = Some(r);
        runs
    });
    kept.expect("resolved")
}

/// Rayon: the cost of a fork-join, and the store's own `resolve_pull` on a pool of one thread
/// against the default pool (the thresholds in src/kv/store/parallel.rs come from these lines).
fn rayon_pulls(store: &KeyStore<f32>, keys: &[u64]) {
    let n = keys.len();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    rayon::join(|| (), || ()); // start the default pool
    let t0 = Instant::now();
    for _ in 0..10_000 {
        rayon::join(|| black_box(1), || black_box(2));
    }
    println!(
        "rayon: one fork-join of two empty closures {:>27.1} us",
        t0.elapsed().as_secs_f64() * 1e6 / 1e4
    );
    for m in [10_000usize, 30_000, 100_000, 1_000_000, n] {
        let k = &keys[..m.min(n)];
        median5(
            &format!("rayon: resolve_pull {} keys, 1 thread", k.len()),
            k.len(),
            || one.install(|| store.resolve_pull(k).expect("pull").runs()),
        );
        median5(
            &format!("rayon: resolve_pull {} keys, pool", k.len()),
            k.len(),
            || store.resolve_pull(k).expect("pull").runs(),
        );
    }
}

/// Rayon: summing and copying 100,000 to 40,000,000 values on one thread against two halves
/// joined (the summing and answering paths of the store).
fn rayon_values() {
    for m in [100_000usize, 300_000, 1_000_000, 10_000_000, 40_000_000] {
        let src: Vec<f32> = vec![1.0; m];
        let mut acc: Vec<f32> = vec![2.0; m];
        acc.iter_mut().zip(&src).for_each(|(d, s)| *d += s); // touch every page
        median5(&format!("rayon: sum {m} values, 1 thread"), m, || {
            acc.iter_mut().zip(&src).for_each(|(d, s)| *d += s);
            m
        });
        median5(&format!("rayon: sum {m} values, 2 halves"), m, || {
            let (a, b) = acc.split_at_mut(m / 2);
            rayon::join(
                || a.iter_mut().zip(&src[..m / 2]).for_each(|(d, s)| *d += s),
                || b.iter_mut().zip(&src[m / 2..]).for_each(|(d, s)| *d += s),
            );
            m
        });
        median5(
            &format!("rayon: copy {m} values (an answer), 1 thread"),
            m,
            || {
                acc.copy_from_slice(&src);
                m
            },
        );
        median5(
            &format!("rayon: copy {m} values (an answer), 2 halves"),
            m,
            || {
                let (a, b) = acc.split_at_mut(m / 2);
                rayon::join(
                    || a.copy_from_slice(&src[..m / 2]),
                    || b.copy_from_slice(&src[m / 2..]),
                );
                m
            },
        );
    }
}

/// A push and a gather with the kept resolution `r`, against a push resolved again.
fn kept_resolution(store: &mut KeyStore<f32>, r: &Resolved, keys: &[u64], vals: &[f32]) {
    let n = keys.len();
    time("KeyStore: push with a kept resolution (sum)", n, || {
        store.push(r, vals);
        r.values()
    });
    time(
        "KeyStore: gather with a kept resolution (answer)",
        n,
        || store.gather(r).len(),
    );
    time("KeyStore: push re-resolved (resolve_push + sum)", n, || {
        let r = store.resolve_push(keys, Lens::Uniform(1)).expect("push");
        store.push(&r, vals);
        r.runs()
    });
}
