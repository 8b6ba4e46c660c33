use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The store as a naive map, with the same rules.
#[derive(Default)]
struct Model(BTreeMap<Key, Vec<i64>>);

impl Model {
    fn push(&mut self, keys: &[Key], lens: &[usize], vals: &[i64]) -> Result<(), String> {
        for (k, &l) in keys.iter().zip(lens) {
            if let Some(v) = self.0.get(k) {
                if v.len() != l {
                    return Err(format!(
                        "length mismatch for key {k}: pushed {l} values, but its length is {} (fixed at its first push)",
                        v.len()
                    ));
                }
            }
        }
        let mut at = 0;
        for (k, &l) in keys.iter().zip(lens) {
            let src = &vals[at..at + l];
            at += l;
            let v = self.0.entry(*k).or_insert_with(|| vec![0; l]);
            v.iter_mut()
                .zip(src)
                .for_each(|(d, s)| *d = d.wrapping_add(*s));
        }
        Ok(())
    }

    fn pull(&self, keys: &[Key]) -> Result<(Vec<i64>, Vec<u32>), String> {
        let mut vals = Vec::new();
        let mut lens = Vec::new();
        for k in keys {
            let v = self.0.get(k).ok_or_else(|| never_pushed(*k))?;
            vals.extend_from_slice(v);
            lens.push(v.len() as u32);
        }
        Ok((vals, lens))
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Keys (as indices into a small key universe), a uniform width or per-key lengths.
    Push(Vec<u64>, Option<usize>, Vec<usize>),
    Pull(Vec<u64>),
    /// Re-push the list resolved by an earlier push (its settled resolution), as key caching does.
    Repush(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let keys = proptest::collection::btree_set(0u64..40, 0..12).prop_map(|s| {
        s.into_iter()
            // Spread over the key space, with neighbours, extremes included.
            .map(|k| {
                if k == 39 {
                    u64::MAX
                } else {
                    k * (u64::MAX / 64) + k % 3
                }
            })
            .collect::<Vec<_>>()
    });
    prop_oneof![
        (
            keys.clone(),
            proptest::option::of(1usize..4),
            proptest::collection::vec(1usize..4, 12)
        )
            .prop_map(|(k, w, l)| Op::Push(k, w, l)),
        keys.prop_map(Op::Pull),
        (0usize..8).prop_map(Op::Repush),
    ]
}

proptest! {
    #[test]
    fn equals_the_naive_map(ops in proptest::collection::vec(op(), 1..60)) {
        let mut store = KeyStore::<i64>::new();
        let mut model = Model::default();
        let mut kept: Vec<(Vec<Key>, Vec<usize>, Resolved)> = Vec::new();
        let mut n = 1i64;
        for op in ops {
            match op {
                Op::Push(keys, width, per) => {
                    let lens: Vec<usize> = match width {
                        Some(w) => vec![w; keys.len()],
                        None => per[..keys.len()].to_vec(),
                    };
                    let lens32: Vec<u32> = lens.iter().map(|&l| l as u32).collect();
                    let total: usize = lens.iter().sum();
                    let vals: Vec<i64> = (0..total as i64).map(|i| n * 1000 + i).collect();
                    n += 1;
                    let l = match width {
                        Some(w) => Lens::Uniform(w),
                        None => Lens::PerKey(&lens32),
                    };
                    let want = model.push(&keys, &lens, &vals);
                    let got = store.resolve_push(&keys, l).inspect(|r| {
                        store.push(r, &vals);
                    });
                    prop_assert_eq!(got.as_ref().err(), want.as_ref().err());
                    if let Ok(r) = got {
                        prop_assert_eq!(r.values(), total);
                        kept.push((keys, lens, r.settled()));
                    }
                }
                Op::Pull(keys) => {
                    let want = model.pull(&keys);
                    let got = store.resolve_pull(&keys).map(|r| {
                        let lens = r.lens_frame();
                        let lens = if lens.is_empty() && !keys.is_empty() {
                            vec![(r.values() / keys.len()) as u32; keys.len()]
                        } else {
                            lens
                        };
                        (store.gather(&r), lens)
                    });
                    prop_assert_eq!(got, want);
                }
                Op::Repush(i) => {
                    if let Some((keys, lens, r)) = kept.get(i % kept.len().max(1)).cloned() {
                        let total: usize = lens.iter().sum();
                        let vals: Vec<i64> = (0..total as i64).map(|i| -(n * 1000 + i)).collect();
                        n += 1;
                        model.push(&keys, &lens, &vals).map_err(TestCaseError::fail)?;
                        store.push(&r, &vals);
                    }
                }
            }
        }
        // Everything the model holds, the store holds, and nothing else.
        prop_assert_eq!(store.len(), model.0.len());
        for (k, v) in &model.0 {
            prop_assert_eq!(store.get(*k), Some(&v[..]));
        }
    }
}

#[test]
fn a_list_pushed_in_one_request_is_one_run() {
    let mut s = KeyStore::<f32>::new();
    let keys: Vec<Key> = (0..100_000u64).map(|i| i * 7919).collect();
    let vals: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
    let r = s.resolve_push(&keys, Lens::Uniform(1)).expect("push");
    s.push(&r, &vals);
    assert_eq!(r.runs(), 1);
    let again = s.resolve_pull(&keys).expect("pull");
    assert_eq!(again.runs(), 1);
    assert_eq!(again, r.settled());
    assert!(
        again.lens_frame().is_empty(),
        "uniform lengths: no lens frame"
    );
    assert_eq!(s.gather(&again), vals);
}

#[test]
fn a_length_mismatch_names_the_key_and_creates_nothing() {
    let mut s = KeyStore::<u8>::new();
    let r = s.resolve_push(&[5, 9], Lens::Uniform(2)).expect("first");
    s.push(&r, &[1, 2, 3, 4]);
    let e = s
        .resolve_push(&[1, 9, 12], Lens::PerKey(&[1, 3, 1]))
        .unwrap_err();
    assert_eq!(
        e,
        "length mismatch for key 9: pushed 3 values, but its length is 2 (fixed at its first push)"
    );
    assert_eq!(s.len(), 2, "keys 1 and 12 were not created");
    assert_eq!(s.get(1), None);
    assert_eq!(
        s.resolve_pull(&[5, 7]).unwrap_err(),
        "key 7 was never pushed, so it has no value to pull"
    );
}

#[test]
fn values_keep_their_place_as_chunks_are_added() {
    let mut s = KeyStore::<u64>::new();
    let mut addrs = Vec::new();
    for k in 0..200u64 {
        // 8 KiB values: 1 MiB chunks fill after 128 keys.
        let r = s.resolve_push(&[k], Lens::Uniform(1024)).expect("push");
        s.push(&r, &vec![k; 1024]);
        addrs.push(s.get(k).expect("held").as_ptr() as usize);
    }
    for k in 0..200u64 {
        let v = s.get(k).expect("held");
        assert_eq!(v.as_ptr() as usize, addrs[k as usize], "key {k} moved");
        assert!(v.iter().all(|&x| x == k));
    }
    assert!(s.reserved_bytes() >= 200 * 8192);
}

#[test]
fn large_requests_resolve_in_parallel_as_they_would_one_key_at_a_time() {
    let n = 3 * super::parallel::PAR_MIN_KEYS; // several chunks
    let keys: Vec<Key> = (0..n as u64).map(|i| i * 1_000_003).collect();
    let lens: Vec<u32> = (0..n).map(|i| 1 + (i % 3) as u32).collect();
    let total: usize = lens.iter().map(|&l| l as usize).sum();
    let vals: Vec<i64> = (0..total as i64).collect();
    let mut s = KeyStore::<i64>::new();
    let first = s
        .resolve_push(&keys, Lens::PerKey(&lens))
        .expect("first push");
    s.push(&first, &vals);

    // Pull: the parallel resolution is the sequential one.
    let par = s.resolve_pull(&keys).expect("pull");
    let seq = s.find_all(&keys, None).expect("pull").expect("all held");
    assert_eq!(par, seq);
    assert_eq!(par, first.settled());
    assert_eq!(s.gather(&par), vals);

    // A repeated push is found in parallel (nothing fresh) and sums.
    let again = s.resolve_push(&keys, Lens::PerKey(&lens)).expect("repeat");
    assert_eq!(again, first.settled());
    s.push(&again, &vals);
    assert_eq!(
        s.gather(&par),
        vals.iter().map(|v| 2 * v).collect::<Vec<_>>()
    );

    // Errors name the first bad key in key order, across chunks; nothing is created.
    let mut bad = lens.clone();
    bad[n - 10] += 1;
    bad[n / 2] += 1;
    let mut with_new = keys.clone();
    with_new[7] += 1; // a new key before both mismatches
    assert_eq!(
        s.resolve_push(&with_new, Lens::PerKey(&bad)).unwrap_err(),
        mismatch(keys[n / 2], bad[n / 2] as usize, lens[n / 2])
    );
    assert_eq!(s.len(), n, "the new key was not kept");
    let mut missing = keys.clone();
    missing[n - 5] += 1;
    missing[n / 3] += 1;
    assert_eq!(
        s.resolve_pull(&missing).unwrap_err(),
        never_pushed(missing[n / 3])
    );
}
