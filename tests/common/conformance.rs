//! What every van must do, as checks over [`VanType`]: the ZMQ van runs them in `tests/api.rs`,
//! the RDMA van in `tests/rdma.rs` (inside the Soft-RoCE guest). A new van's author adds a
//! `VanType` and one test per check here that calls it with the new van.

use super::{cfg, cluster_cfg, serve_default};
use pslite::postoffice::WORKER_GROUP;
use pslite::{Error, KVWorker, Key, Postoffice, Role, VanType};

/// Two servers and four workers push the same keys, spread over the key space (both ends
/// included, so both servers get some), 3 `i64` values each, 20 times: 5 pushes waited one
/// by one, then 15 in flight at once. After a barrier of the workers every worker pulls
/// exactly 20 × 4 times what it pushed.
pub fn exact_sums_over(van: VanType) {
    const WORKERS: usize = 4;
    const PUSHES: usize = 20;
    let c = cluster_cfg(
        2,
        WORKERS,
        60.0,
        move |c| c.node.van = van,
        serve_default::<i64>,
    );
    let mut keys: Vec<Key> = (0..64u64).map(|i| i * (u64::MAX / 64)).collect();
    keys.push(u64::MAX - 1);
    let vals: Vec<i64> = (0..keys.len() as i64 * 3).collect();
    let handles: Vec<_> = c
        .workers
        .iter()
        .cloned()
        .map(|po| {
            let (keys, vals) = (keys.clone(), vals.clone());
            std::thread::spawn(move || {
                let kv = KVWorker::<i64>::new(&po, 0, 0)?;
                for _ in 0..5 {
                    kv.wait(kv.push(&keys, &vals, None)?)?;
                }
                let ts: Vec<_> = (5..PUSHES)
                    .map(|_| kv.push(&keys, &vals, None))
                    .collect::<Result<_, Error>>()?;
                for t in ts {
                    kv.wait(t)?;
                }
                po.barrier(WORKER_GROUP)?;
                let mut out = vec![0i64; vals.len()];
                kv.pull_into(&keys, &mut out)?;
                Ok::<_, Error>(out)
            })
        })
        .collect();
    let want: Vec<i64> = vals.iter().map(|v| v * (PUSHES * WORKERS) as i64).collect();
    for (rank, h) in handles.into_iter().enumerate() {
        let out = h.join().expect("no panic").expect("pushes and pull");
        assert_eq!(out, want, "over {}: worker {rank}'s pull", van.name());
    }
    c.finish();
}

/// Two servers and a worker; a third server (`PSLITE_RANK` 2) starts after them, joins the
/// running job and takes its share; the worker then drains it. Between the pushes (3000 keys
/// over the key space) the sums stay exact, the join moves a quarter of the key space each
/// way, and the new server appears in the worker's node table.
pub fn a_server_joins_and_is_drained_over(van: VanType) {
    let c = cluster_cfg(2, 1, 60.0, move |c| c.node.van = van, serve_default::<f32>);
    let po = c.workers[0].clone();
    let kv = KVWorker::<f32>::new(&po, 0, 0).expect("worker");
    let keys: Vec<Key> = (0..3000u64).map(|i| i * (u64::MAX / 3000) + 1).collect();
    let vals: Vec<f32> = (0..3000).map(|i| (i % 100) as f32).collect();
    let push = || {
        kv.wait(kv.push(&keys, &vals, None).expect("push"))
            .expect("pushed")
    };
    push();
    let mut joiner = cfg(Role::Server, c.port, 2, 1, 60.0);
    joiner.node.van = van;
    joiner.node.rank_hint = Some(2);
    let joined = std::thread::spawn(move || -> pslite::Result<(bool, u64)> {
        let po = Postoffice::start(joiner)?;
        let _server = serve_default::<f32>(&po)?;
        let r = po.resize(po.my_id(), true)?;
        let out = (po.joined(), r.bytes);
        po.finalize()?;
        Ok(out)
    });
    let server2 = pslite::wire::Node::server_id(2);
    let t0 = std::time::Instant::now();
    while !(po.layout().owners().contains(&server2) && po.layout_settled()) {
        assert!(t0.elapsed().as_secs() < 60, "server 2 did not join");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(po.num_servers(), 3);
    push();
    let drained = po.resize(server2, false).expect("drains server 2");
    push();
    let mut got = vec![0.0f32; 3000];
    kv.pull_into(&keys, &mut got).expect("pull");
    let want: Vec<f32> = vals.iter().map(|v| 3.0 * v).collect();
    assert_eq!(got, want);
    drop(kv);
    c.finish();
    let (was_joined, added) = joined.join().expect("no panic").expect("server 2 ran");
    assert!(was_joined, "server 2 saw itself joined");
    // A quarter of the keys, 16 bytes each (key, length, value).
    for bytes in [added, drained.bytes] {
        assert!(
            (650 * 16..=850 * 16).contains(&bytes),
            "{bytes} bytes moved"
        );
    }
}
