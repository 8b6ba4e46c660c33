//! Issue 14's bounds for members: a worker's requests in flight (`PS_MAX_INFLIGHT_BYTES`) and
//! what a server parks. In-process clusters on loopback.

mod common;

use common::{cluster_cfg, serve_default};
use pslite::config::bounds::REQUEST_OVERHEAD_BYTES;
use pslite::{Error, KVWorker};
use std::time::{Duration, Instant};

const MAX: u64 = 1 << 20;

fn one_mib(c: &mut pslite::Config) {
    c.bounds.max_inflight_bytes = MAX;
}

#[test]
fn a_loop_that_never_waits_keeps_its_bytes_in_flight_bounded_and_sums_exactly() {
    let c = cluster_cfg(1, 1, 30.0, one_mib, serve_default::<f32>);
    let po = &c.workers[0];
    let kv = KVWorker::<f32>::new(po, 0, 0).expect("worker");
    // 64 pushes of 64K values (256 KiB each) without waiting: at most 3 fit in 1 MiB.
    let keys: Vec<u64> = (0..16).collect();
    let vals = vec![1.0f32; 16 * 4096];
    let mut most = 0;
    let ts: Vec<_> = (0..64)
        .map(|_| {
            let t = kv.push(&keys, &vals, None).expect("push");
            most = most.max(po.budget().used());
            t
        })
        .collect();
    assert!(most <= MAX, "{most} bytes in flight, more than {MAX}");
    for t in ts {
        kv.wait(t).expect("pushed");
    }
    assert_eq!(po.budget().used(), 0, "every answer gave its bytes back");
    let mut out = vec![0.0f32; vals.len()];
    kv.pull_into(&keys, &mut out).expect("pull");
    assert!(out.iter().all(|&v| v == 64.0), "{:?}", &out[..4]);
    drop(kv);
    c.finish();
}

#[test]
fn a_request_larger_than_the_bound_is_refused_naming_it() {
    let c = cluster_cfg(1, 1, 30.0, one_mib, serve_default::<u8>);
    let kv = KVWorker::<u8>::new(&c.workers[0], 0, 0).expect("worker");
    let e = kv
        .push(&[7], &vec![1u8; MAX as usize], None)
        .expect_err("too large");
    let text = e.to_string();
    assert!(matches!(e, Error::InvalidArgument(_)), "{text}");
    let want = format!(
        "would send {} bytes to server rank 0, more than PS_MAX_INFLIGHT_BYTES ({MAX})",
        MAX + 8 + REQUEST_OVERHEAD_BYTES
    );
    assert!(text.contains(&want), "{text}");
    assert_eq!(c.workers[0].budget().used(), 0);
    drop(kv);
    c.finish();
}

#[test]
fn a_push_that_finds_no_room_fails_at_ps_timeout_naming_the_variable() {
    // No KVServer: the server parks the first push (5 s); PS_TIMEOUT is 4 s.
    let c = cluster_cfg(1, 1, 4.0, one_mib, |_| Ok(Box::new(())));
    let kv = KVWorker::<u8>::new(&c.workers[0], 0, 0).expect("worker");
    let big = vec![1u8; (MAX / 2) as usize];
    let first = kv.push(&[1], &big, None).expect("fits");
    let t0 = Instant::now();
    let e = kv.push(&[2], &big, None).expect_err("no room");
    let took = t0.elapsed();
    let text = e.to_string();
    assert!(matches!(e, Error::Timeout(_)), "{text}");
    assert!(
        text.contains("waited 4 s (PS_TIMEOUT) for room")
            && text.contains(&format!("PS_MAX_INFLIGHT_BYTES is {MAX}")),
        "{text}"
    );
    // The first push's park ends 5 s after the server got it, past this one's deadline, so
    // the error above, not timing, shows it gave up at PS_TIMEOUT; the upper bound only
    // says it gave up.
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    // The first one is refused when its park ends (or, on a slow machine, given up at its
    // own deadline): either way its bytes come back.
    let e = kv.wait(first).expect_err("parked");
    let text = e.to_string();
    assert!(
        text.contains("no KVServer for app 0") || matches!(e, Error::Timeout(_)),
        "{text}"
    );
    assert_eq!(c.workers[0].budget().used(), 0);
    drop(kv);
    c.finish();
}

#[test]
fn a_worker_dropped_with_requests_out_gives_their_bytes_back() {
    // No KVServer: the pushes stay parked (5 s) while the worker is dropped.
    let c = cluster_cfg(1, 1, 30.0, one_mib, |_| Ok(Box::new(())));
    let kv = KVWorker::<u8>::new(&c.workers[0], 0, 0).expect("worker");
    for k in 0..3u64 {
        kv.push(&[k], &[1u8; 1000], None).expect("fits");
    }
    assert_eq!(
        c.workers[0].budget().used(),
        3 * (1000 + 8 + REQUEST_OVERHEAD_BYTES)
    );
    drop(kv);
    assert_eq!(c.workers[0].budget().used(), 0);
    c.finish();
}
