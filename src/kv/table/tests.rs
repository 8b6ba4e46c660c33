//! The table as a whole: lazy rows, admission, eviction under a budget (LRU order, the budget
//! never passed), TTL, save and restore, replay.

use super::init::initial_row;
use super::optim::{init_slots, step};
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn spec(line: &str) -> TableSpec {
    line.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn rows_of(t: &mut Table, keys: &[u64]) -> Vec<f32> {
    let mut out = vec![0.0; keys.len() * t.dim()];
    t.pull(keys, &mut out).expect("pull");
    out
}

#[test]
fn a_pull_of_keys_not_held_returns_initial_rows_and_keeps_nothing() {
    let s = spec("app=2,dim=5,init=normal:0:0.01,seed=11");
    let mut t = Table::new(&s).expect("table");
    let got = rows_of(&mut t, &[3, 1, 400]);
    for (i, &k) in [3u64, 1, 400].iter().enumerate() {
        let mut want = vec![0.0; 5];
        initial_row(&s.init, 11, k, &mut want);
        assert_eq!(got[i * 5..(i + 1) * 5], want[..], "key {k}");
    }
    assert!(t.is_empty());
    assert_eq!(t.counts().initialized_on_pull, 3);
    // Another table of the same spec (another server, a restart) gives the same rows.
    let mut other = Table::new(&s).expect("table");
    assert_eq!(rows_of(&mut other, &[3, 1, 400]), got);
}

#[test]
fn push_applies_the_optimizer_to_the_initial_row_and_push_pull_answers_after_the_step() {
    let s = spec("app=0,dim=3,init=uniform:-1:1,opt=adagrad:lr=0.1:init_acc=0.1:wd=0.01");
    let mut t = Table::new(&s).expect("table");
    let g = [0.5f32, -2.0, 1.0, 3.0, 0.0, -1.0];
    let mut out = vec![0.0; 6];
    t.push(&[10, 20], &g, Some(&mut out)).expect("push");
    for (i, k) in [10u64, 20].into_iter().enumerate() {
        let mut w = vec![0.0; 3];
        initial_row(&s.init, s.seed, k, &mut w);
        let mut slots = vec![0.0; 3];
        init_slots(&s.optimizer, &mut slots);
        step(
            &s.optimizer,
            0.01,
            &mut w,
            &mut slots,
            &g[i * 3..(i + 1) * 3],
        );
        assert_eq!(out[i * 3..(i + 1) * 3], w[..], "key {k}");
        assert_eq!(t.get(k), Some(&w[..]));
        assert_eq!(t.get_with_slots(k).map(|v| v[3..].to_vec()), Some(slots));
    }
    assert_eq!(t.counts().admitted, 2);
    let e = t.push(&[1], &[1.0; 2], None).expect_err("short");
    assert!(e.contains("2 gradient values for 1 keys of dim 3"), "{e}");
}

#[test]
fn count_admission_drops_the_first_pushes_and_applies_the_nth() {
    let s = spec("app=0,dim=2,init=uniform:0:1,opt=sgd:lr=1,admit=count:3");
    let mut t = Table::new(&s).expect("table");
    let mut init = vec![0.0; 2];
    initial_row(&s.init, s.seed, 5, &mut init);
    let mut out = vec![0.0; 2];
    for n in 1..=2 {
        t.push(&[5], &[1.0, 1.0], Some(&mut out)).expect("push");
        assert_eq!(out, init, "push {n} is dropped: the initial row answers");
        assert!(t.get(5).is_none());
    }
    t.push(&[5], &[1.0, 1.0], Some(&mut out)).expect("push");
    assert_eq!(
        out,
        vec![init[0] - 1.0, init[1] - 1.0],
        "the third push applies"
    );
    assert_eq!(t.counts().not_admitted, 2);
    assert_eq!(t.counts().admitted, 1);
}

#[test]
fn probability_admission_admits_about_p() {
    let s = spec("app=0,dim=1,admit=prob:0.2");
    let mut t = Table::new(&s).expect("table");
    let keys: Vec<u64> = (0..20_000).collect();
    t.push(&keys, &vec![1.0; keys.len()], None).expect("push");
    let admitted = t.len() as f64 / keys.len() as f64;
    assert!((admitted - 0.2).abs() < 0.015, "{admitted}");
    // The same pushes on a second table admit the same keys.
    let mut u = Table::new(&s).expect("table");
    u.push(&keys, &vec![1.0; keys.len()], None).expect("push");
    let (mut a, mut b) = (t.keys(), u.keys());
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

/// A table's state, in key order: key, stamp, values and slots as bits.
fn state(t: &Table) -> Vec<(u64, u64, Vec<u32>)> {
    let mut keys = t.keys();
    keys.sort_unstable();
    keys.into_iter()
        .map(|k| {
            let v = t
                .get_with_slots(k)
                .map(|v| v.iter().map(|x| x.to_bits()).collect());
            (k, t.stamp(k).unwrap_or(0), v.unwrap_or_default())
        })
        .collect()
}

#[test]
fn the_budget_holds_and_the_oldest_rows_go_first() {
    let s = spec("app=0,dim=16,opt=adagrad:lr=0.05,budget=1MiB");
    let mut t = Table::new(&s).expect("table");
    let max = t.max_rows().expect("a budget");
    assert!(max > 3000, "1 MiB holds {max} rows of 144 bytes");
    let mut pushed_at: HashMap<u64, u64> = HashMap::new();
    for batch in 0..200u64 {
        // New keys each batch, and some old ones again.
        let mut keys: Vec<u64> = (0..100).map(|i| batch * 100 + i).collect();
        keys.extend((0..20).map(|i| (batch * 37 + i * 101) % (batch * 100 + 1)));
        keys.sort_unstable();
        keys.dedup();
        t.push(&keys, &vec![0.1; keys.len() * 16], None)
            .expect("push");
        for &k in &keys {
            pushed_at.insert(k, t.counts().pushes);
        }
        assert!(
            t.bytes() <= 1 << 20,
            "{} bytes after batch {batch}",
            t.bytes()
        );
        assert!(t.len() <= max);
    }
    assert!(t.counts().evicted > 0);
    // Every row held was pushed no earlier than every row evicted.
    let held: Vec<u64> = t.keys();
    let oldest_held = held.iter().map(|k| pushed_at[k]).min().expect("rows");
    let newest_gone = pushed_at
        .iter()
        .filter(|(k, _)| t.get(**k).is_none())
        .map(|(_, &p)| p)
        .max()
        .expect("evicted rows");
    assert!(
        newest_gone <= oldest_held,
        "an evicted row was pushed at {newest_gone}, a held one last at {oldest_held}"
    );
    // An evicted key starts again from its initial row.
    let gone = *pushed_at
        .keys()
        .find(|&&k| t.get(k).is_none())
        .expect("one");
    let mut init = vec![0.0; 16];
    initial_row(&s.init, s.seed, gone, &mut init);
    assert_eq!(rows_of(&mut t, &[gone]), init);
    let over = t.overhead_per_row().expect("rows");
    assert!(over < 32.0, "{over} bytes per row beyond values and slots");
}

#[test]
fn a_budget_too_small_for_a_row_is_refused_naming_it() {
    let e = Table::new(&spec("app=0,dim=16,budget=4KiB")).expect_err("too small");
    assert!(e.contains("budget: 4KiB holds no row"), "{e}");
    let e = Table::new(&spec("app=0,dim=1,admit=count:2,budget=1MiB")).expect_err("sketch");
    assert!(e.contains("the admission sketch"), "{e}");
}

#[test]
fn ttl_evicts_rows_not_pushed_within_it() {
    let s = spec("app=0,dim=1,evict=ttl:8");
    let mut t = Table::new(&s).expect("table");
    t.push(&[1, 2], &[1.0, 1.0], None).expect("push");
    for _ in 0..20 {
        t.push(&[2], &[1.0], None).expect("push");
    }
    assert!(t.get(1).is_none(), "key 1 last pushed 20 pushes ago");
    assert!(t.get(2).is_some());
    assert_eq!(t.counts().evicted, 1);
}

#[test]
fn a_restored_table_is_the_saved_one_and_goes_on_identically() {
    let s = spec(
        "app=4,dim=3,init=normal:0:0.1,opt=adam:lr=0.01,admit=count:2:width=1024,budget=32KiB",
    );
    let mut t = Table::new(&s).expect("table");
    let batches: Vec<Vec<u64>> = (0..300u64)
        .map(|b| {
            let mut k: Vec<u64> = (0..40).map(|i| (b * 7 + i * i) % 900).collect();
            k.sort_unstable();
            k.dedup();
            k
        })
        .collect();
    let grads = |keys: &[u64], b: usize| -> Vec<f32> {
        (0..keys.len() * 3)
            .map(|i| ((i + b) % 7) as f32 - 3.0)
            .collect()
    };
    for (b, keys) in batches[..150].iter().enumerate() {
        t.push(keys, &grads(keys, b), None).expect("push");
    }
    assert!(t.counts().evicted > 0, "the budget was reached");
    let mut saved = Vec::new();
    t.save_into(&mut saved);
    let mut back = Table::new(&s).expect("table");
    back.restore(&saved).expect("restores");
    assert_eq!(state(&back), state(&t));
    assert_eq!(back.counts(), t.counts());
    for (b, keys) in batches.iter().enumerate().skip(150) {
        t.push(keys, &grads(keys, b), None).expect("push");
        back.push(keys, &grads(keys, b), None).expect("push");
    }
    assert_eq!(
        state(&back),
        state(&t),
        "the same pushes after a restore, the same table"
    );
    // Damage is named.
    let e = back
        .restore(&saved[..saved.len() - 3])
        .expect_err("truncated");
    assert!(e.contains("saved table truncated"), "{e}");
    let other = spec("app=4,dim=3,opt=sgd:lr=0.1");
    let e = Table::new(&other)
        .expect("table")
        .restore(&saved)
        .expect_err("another spec");
    assert!(
        e.contains("it was saved by a table with spec 'app=4,dim=3,init=normal"),
        "{e}"
    );
    // A table saved before pushes stepped held rows first: its log would replay otherwise.
    let mut old = saved.clone();
    old[..15].copy_from_slice(b"pslite-table/1\n");
    let e = back.restore(&old).expect_err("an older format");
    assert!(
        e.contains("saved by an older pslite-rs ('pslite-table/1')"),
        "{e}"
    );
}

#[test]
fn large_requests_split_among_threads_leave_what_one_thread_leaves() {
    // A budget of about 40k rows, admission at the second sighting, so pushes create, evict and
    // drop rows while others are stepped.
    let s = spec(
        "app=3,dim=8,init=normal:0:0.1,opt=adam:lr=0.01,admit=count:2:width=65536,budget=6MiB",
    );
    let (mut one, mut two) = (
        Table::new(&s).expect("table"),
        Table::new(&s).expect("table"),
    );
    two.set_threads(2);
    let mut x = 7u64;
    let mut draw = |n: usize, universe: u64| {
        let mut k: Vec<u64> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 20) % universe
            })
            .collect();
        k.sort_unstable();
        k.dedup();
        k
    };
    for round in 0..12 {
        let keys = draw(30000, 60000);
        assert!(keys.len() >= 16384, "{} keys: too few to split", keys.len());
        let g: Vec<f32> = (0..keys.len() * 8)
            .map(|i| ((i * 7 + round) % 11) as f32 * 0.01 - 0.05)
            .collect();
        let (mut o1, mut o2) = (vec![0.0; g.len()], vec![0.0; g.len()]);
        one.push(&keys, &g, Some(&mut o1)).expect("push");
        two.push(&keys, &g, Some(&mut o2)).expect("push");
        assert_eq!(bits(&o1), bits(&o2), "push-pull answers of round {round}");
        let (p1, p2) = (rows_of(&mut one, &keys), rows_of(&mut two, &keys));
        assert_eq!(bits(&p1), bits(&p2), "pulls of round {round}");
    }
    // Keys out of order (and one twice) are stepped by one thread, as given.
    let mut keys = draw(30000, 60000);
    keys.reverse();
    keys.push(keys[0]);
    let g = vec![0.01; keys.len() * 8];
    one.push(&keys, &g, None).expect("push");
    two.push(&keys, &g, None).expect("push");
    assert!(one.counts().evicted > 0 && one.counts().not_admitted > 0);
    assert_eq!(one.counts(), two.counts());
    assert_eq!(state(&one), state(&two));
}

#[test]
fn rows_of_a_range_move_to_another_table_with_their_optimizer_slots() {
    let s = spec("app=0,dim=2,init=uniform:-1:1,opt=adagrad:lr=0.1:init_acc=0.1");
    let mut old = Table::new(&s).expect("table");
    let keys = [1u64, 7, 1 << 40, u64::MAX];
    for round in 0..3 {
        let grads: Vec<f32> = (0..8).map(|i| (i + round) as f32 * 0.25).collect();
        old.push(&keys, &grads, None).expect("push");
    }
    let range = crate::postoffice::Range {
        begin: 5,
        end: u64::MAX,
    };
    let moving: Vec<Vec<f32>> = keys[1..]
        .iter()
        .map(|&k| old.get_with_slots(k).expect("held").to_vec())
        .collect();
    let rows = old.take_range(range);
    assert_eq!(old.len(), 1, "key 1 stays");
    assert_eq!(old.counts().evicted, 0, "moved rows are not evicted ones");
    let mut new = Table::new(&s).expect("table");
    new.put_rows(range, &rows).expect("rows of the same spec");
    for (k, want) in keys[1..].iter().zip(&moving) {
        assert_eq!(
            bits(new.get_with_slots(*k).expect("moved")),
            bits(want),
            "key {k}"
        );
    }
    assert_eq!(new.counts().admitted, 0, "moved rows are not admitted ones");
    // The same step on both sides of the move.
    new.push(&[7], &[0.5, 0.5], None).expect("push");
    old.put_rows(range, &new.take_range(range)).expect("back");
    let mut same = Table::new(&s).expect("table");
    same.put_rows(range, &rows).expect("rows");
    same.push(&[7], &[0.5, 0.5], None).expect("push");
    assert_eq!(
        bits(old.get_with_slots(7).expect("back")),
        bits(same.get_with_slots(7).expect("stepped"))
    );
    let other = spec("app=0,dim=3");
    let e = Table::new(&other)
        .expect("table")
        .put_rows(range, &rows)
        .expect_err("another spec");
    assert!(e.contains("moved rows come from a table with spec"), "{e}");
    let e = Table::new(&s)
        .expect("table")
        .put_rows(crate::postoffice::Range { begin: 8, end: 9 }, &rows)
        .expect_err("key 7 is outside");
    assert!(e.contains("moved row of key 7 is outside"), "{e}");
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under any stream of pushes, a budgeted table stays within its budget and agrees with a
    /// model that applies the same steps to rows kept in a map, except for rows evicted (which
    /// start again from their initial row).
    #[test]
    fn a_budgeted_table_agrees_with_a_map_of_rows(
        batches in proptest::collection::vec(proptest::collection::vec(0u64..400, 1..60), 1..60),
    ) {
        let s = spec("app=0,dim=2,init=uniform:-1:1,opt=sgd:lr=0.5,budget=16KiB");
        let mut t = Table::new(&s).expect("table");
        let mut model: HashMap<u64, Vec<f32>> = HashMap::new();
        for (b, mut keys) in batches.into_iter().enumerate() {
            keys.sort_unstable();
            keys.dedup();
            let g: Vec<f32> = (0..keys.len() * 2).map(|i| ((i * 3 + b) % 5) as f32 - 2.0).collect();
            let evicted_before = t.counts().evicted;
            t.push(&keys, &g, None).expect("push");
            prop_assert!(t.bytes() <= 16 << 10);
            let evicted = t.counts().evicted > evicted_before;
            for (i, &k) in keys.iter().enumerate() {
                let fresh = || {
                    let mut r = vec![0.0; 2];
                    initial_row(&s.init, s.seed, k, &mut r);
                    r
                };
                let g = &g[i * 2..i * 2 + 2];
                let mut kept = model.get(&k).cloned().unwrap_or_else(fresh);
                step(&s.optimizer, 0.0, &mut kept, &mut [], g);
                match t.get(k) {
                    // Evicted later in this very push (more new keys than room).
                    None => prop_assert!(evicted),
                    // Held rows are stepped before any row is created, so none is evicted
                    // before its step.
                    Some(row) => prop_assert!(row == &kept[..], "key {} holds {:?}, want {:?}", k, row, kept),
                }
                match t.get(k) {
                    Some(row) => model.insert(k, row.to_vec()),
                    None => model.remove(&k),
                };
            }
            model.retain(|k, _| t.get(*k).is_some());
            for k in t.keys() {
                prop_assert_eq!(t.get(k).map(<[f32]>::to_vec), model.get(&k).cloned(), "key {}", k);
            }
        }
    }
}
