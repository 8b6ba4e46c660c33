use super::*;
use proptest::prelude::*;

/// A digest that collides all the time: the key count and the first key's low bits.
fn weak(keys: &[Key]) -> u64 {
    keys.len() as u64 * 4 + keys.first().map_or(0, |k| k % 4)
}

/// Lists of one length share their first and last keys (their shape) and differ in between.
fn list(seed: u64, n: usize) -> Vec<Key> {
    (0..n as u64)
        .map(|i| {
            if i == 0 || i + 1 == n as u64 {
                i * 10
            } else {
                i * 10 + seed % 7
            }
        })
        .collect()
}

/// One worker and one server exchanging requests in order; returns the keys the server used
/// for each request and how many `Unknown` answers there were.
fn exchange(
    requests: &[(u64, usize)],
    worker_cap: usize,
    server_cap: usize,
    digest: fn(&[Key]) -> u64,
) -> (Vec<Vec<Key>>, usize) {
    let mut mirror = Mirror::with_digest(worker_cap, digest);
    let mut kept = Kept::new(server_cap);
    let mut used = Vec::new();
    let mut unknowns = 0;
    for &(seed, n) in requests {
        let keys = list(seed, n);
        let mut p = mirror.prepare(&keys);
        let resolved = loop {
            let frame = if p.send { p.keys.clone() } else { Bytes::new() };
            match &p.key_ref {
                None => break frame,
                Some(KeyRef::Register { digest, evict }) => {
                    kept.register(*digest, evict, frame.clone());
                    break frame;
                }
                Some(KeyRef::Cached { digest }) => match kept.get(*digest) {
                    Some(l) => break l.keys.clone(),
                    None => {
                        // The server answers Unknown; the worker sends the keys again.
                        unknowns += 1;
                        mirror.forget(*digest);
                        p = mirror.prepare(&keys);
                    }
                },
                Some(other) => panic!("a request never carries {other:?}"),
            }
        };
        assert_eq!(
            p.keys[..],
            *bytemuck::cast_slice::<Key, u8>(&keys),
            "keys kept for the answer"
        );
        used.push(bytemuck::pod_collect_to_vec(&resolved));
        assert!(mirror.held_keys() <= worker_cap);
        assert!(kept.held_keys() <= server_cap);
    }
    (used, unknowns)
}

fn requests() -> impl Strategy<Value = Vec<(u64, usize)>> {
    proptest::collection::vec(
        (
            0u64..12,
            prop_oneof![Just(1usize), 32usize..40, 60usize..70],
        ),
        1..80,
    )
}

proptest! {
    /// With a digest that collides constantly, the server still always uses the keys the worker
    /// meant, and a server as large as the worker's mirror never has to ask for keys.
    #[test]
    fn the_server_always_uses_the_keys_meant(reqs in requests(), cap in 32usize..200) {
        for digest in [weak as fn(&[Key]) -> u64, super::digest] {
            let (used, unknowns) = exchange(&reqs, cap, cap, digest);
            for ((seed, n), got) in reqs.iter().zip(&used) {
                prop_assert_eq!(got, &list(*seed, *n));
            }
            prop_assert_eq!(unknowns, 0);
        }
    }

    /// A server keeping less than the worker thinks answers Unknown sometimes; every request
    /// still gets exactly its keys.
    #[test]
    fn a_smaller_server_costs_round_trips_not_correctness(reqs in requests(), cap in 64usize..200) {
        let (used, _) = exchange(&reqs, cap, 40, weak);
        for ((seed, n), got) in reqs.iter().zip(&used) {
            prop_assert_eq!(got, &list(*seed, *n));
        }
    }
}

#[test]
fn repeats_send_a_digest_and_short_lists_send_keys() {
    let mut m = Mirror::new(1000);
    let keys = list(1, 100);
    let first = m.prepare(&keys);
    assert!(
        first.send && first.key_ref.is_none(),
        "seen once: keys, nothing kept"
    );
    assert_eq!(m.held_keys(), 0);
    let second = m.prepare(&keys);
    assert!(second.send);
    assert!(matches!(second.key_ref, Some(KeyRef::Register { ref evict, .. }) if evict.is_empty()));
    let again = m.prepare(&keys);
    assert!(!again.send);
    assert_eq!(
        again.key_ref,
        Some(KeyRef::Cached {
            digest: digest(&keys)
        })
    );
    let short = m.prepare(&keys[..MIN_KEYS - 1]);
    assert!(short.send && short.key_ref.is_none());
    assert!(
        Mirror::new(0).prepare(&keys).key_ref.is_none(),
        "PS_KEY_CACHE=0"
    );
}

#[test]
fn the_least_recently_used_list_is_evicted_and_the_server_told() {
    let mut m = Mirror::new(100);
    let (a, b, c) = (list(1, 40), list(2, 40), list(3, 40));
    // Each list is registered at its second sighting.
    m.prepare(&a);
    m.prepare(&a);
    m.prepare(&b);
    m.prepare(&b);
    m.prepare(&a); // a is now more recent than b
    assert!(m.prepare(&c).key_ref.is_none(), "c seen once");
    let p = m.prepare(&c);
    assert_eq!(
        p.key_ref,
        Some(KeyRef::Register {
            digest: digest(&c),
            evict: vec![digest(&b)]
        })
    );
    assert_eq!(m.held_keys(), 80);
    let mut k = Kept::new(100);
    k.register(
        digest(&a),
        &[],
        Bytes::from(bytemuck::cast_slice::<Key, u8>(&a).to_vec()),
    );
    k.register(
        digest(&b),
        &[],
        Bytes::from(bytemuck::cast_slice::<Key, u8>(&b).to_vec()),
    );
    k.register(
        digest(&c),
        &[digest(&b)],
        Bytes::from(bytemuck::cast_slice::<Key, u8>(&c).to_vec()),
    );
    assert!(k.get(digest(&b)).is_none());
    assert!(k.get(digest(&a)).is_some() && k.get(digest(&c)).is_some());
}

#[test]
fn lists_that_never_repeat_are_never_kept() {
    let mut m = Mirror::new(1000);
    for seed in 0..10_000u64 {
        let keys: Vec<Key> = (0..50).map(|i| seed * 1000 + i).collect();
        let p = m.prepare(&keys);
        assert!(p.send && p.key_ref.is_none(), "list {seed}");
        assert_eq!(m.held_keys(), 0);
        assert!(
            m.seen_keys <= 1000,
            "{} keys of lists seen once",
            m.seen_keys
        );
        assert!(m.seen_order.len() <= 2 * m.seen.len() + 64);
    }
    // A list seen once long ago (forgotten since) is sent plainly again, then registered.
    let old: Vec<Key> = (0..50).collect();
    assert!(m.prepare(&old).key_ref.is_none());
    assert!(matches!(
        m.prepare(&old).key_ref,
        Some(KeyRef::Register { .. })
    ));
}

#[test]
fn the_memo_keeps_one_value_of_any_type() {
    let mut memo = Memo::default();
    assert!(memo.get::<u32>().is_none());
    memo.set(7u32);
    assert_eq!(memo.get::<u32>(), Some(&7));
    assert!(memo.get::<u64>().is_none());
}

fn bytes_of(keys: &[Key]) -> Bytes {
    Bytes::copy_from_slice(bytemuck::cast_slice(keys))
}

#[test]
fn a_server_keeps_lists_within_each_workers_capacity_and_its_budget() {
    // 100 keys per worker customer, 150 in all.
    let mut k = KeptLists::new(100, 150);
    let (a, b, c) = (list(1, 60), list(2, 60), list(3, 60));
    // The keys frame shares one buffer with larger values: the server keeps a copy.
    let mut whole = bytes_of(&a).to_vec();
    whole.extend_from_slice(&[0u8; 4096]);
    let whole = Bytes::from(whole);
    let (keys, vals) = (whole.slice(..a.len() * 8), whole.slice(a.len() * 8..));
    assert!(k.register(9, 0, 1, &[], &[keys.clone(), vals]));
    assert_ne!(
        k.get(9, 0, 1).map(|l| l.keys.as_ptr()),
        Some(keys.as_ptr()),
        "a copy, not a slice pinning the values"
    );
    // Values no larger than the keys: the frame is kept as it is.
    let small = bytes_of(&b);
    assert!(k.register(11, 0, 2, &[], &[small.clone(), Bytes::from(vec![0u8; 8])]));
    assert_eq!(
        k.get(11, 0, 2).map(|l| l.keys.as_ptr()),
        Some(small.as_ptr())
    );
    assert_eq!(k.held_keys(), 120);
    // Over the budget: served uncached, not kept.
    assert!(!k.register(13, 0, 3, &[], &[bytes_of(&c)]));
    assert!(k.get(13, 0, 3).is_none());
    // A worker evicting its list frees budget; its empty entry goes.
    let not_keys = Bytes::from_static(b"\x01");
    assert!(
        !k.register(9, 0, 4, &[1], &[not_keys]),
        "not whole keys: not kept"
    );
    assert_eq!(k.held_keys(), 60);
    assert!(k.get(9, 0, 1).is_none());
    assert!(k.register(13, 0, 3, &[], &[bytes_of(&c)]));
    assert_eq!(k.held_keys(), 120);
}
