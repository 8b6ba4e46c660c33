//! What every van must do, as checks over [`VanType`]: the ZMQ van runs them in `tests/api.rs`,
//! the RDMA van in `tests/rdma.rs` (inside the Soft-RoCE guest). A new van's author adds a
//! `VanType` and one test per check here that calls it with the new van.

use super::{cluster_cfg, serve_default};
use pslite::postoffice::WORKER_GROUP;
use pslite::{Error, KVWorker, Key, VanType};

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
