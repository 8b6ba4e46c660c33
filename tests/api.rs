//! The KVWorker/KVServer API on an in-process cluster: exact sums, bytes, and errors with their
//! text.

mod common;

use common::{cfg, cluster, cluster_cfg, serve_default};
use pslite::kv::{KVRequest, Op, ReqMeta, RequestOptions};
use pslite::postoffice::WORKER_GROUP;
use pslite::{Error, KVPairs, KVServer, KVWorker, Postoffice, RequestHandler, Role};
use std::time::{Duration, Instant};

#[test]
fn push_then_pull_sums_across_two_servers() {
    let c = cluster(2, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let keys = [5, u64::MAX / 2 + 3, u64::MAX];
    let vals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    for _ in 0..4 {
        let ts = kv.push(&keys, &vals, Some(&[1, 2, 3])).expect("push");
        kv.wait(ts).expect("wait");
    }
    let ts = kv.pull(&keys).expect("pull");
    let got = kv.take_pulled(ts).expect("pulled");
    assert_eq!(got.keys, keys);
    assert_eq!(got.vals, vec![4.0, 8.0, 12.0, 16.0, 20.0, 24.0]);
    assert_eq!(got.lens, vec![1, 2, 3]);
    let ts = kv
        .push_pull(&keys[1..2], &[0.5, 0.5], None)
        .expect("push-pull");
    assert_eq!(kv.take_pulled(ts).expect("pulled").vals, vec![8.5, 12.5]);
    drop(kv);
    c.finish();
}

#[test]
fn callback_receives_pulled_pairs() {
    let c = cluster(1, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    kv.wait(kv.push(&[1, 2], &[3.0, 4.0], None).expect("push"))
        .expect("wait");
    let (tx, rx) = crossbeam_channel::bounded(1);
    kv.request(
        Op::Pull,
        &[1, 2],
        &[],
        &[],
        RequestOptions::callback(move |r| {
            let _ = tx.send(r);
        }),
    )
    .expect("pull");
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("callback ran")
        .expect("ok");
    assert_eq!(
        got,
        KVPairs {
            keys: vec![1, 2],
            vals: vec![3.0, 4.0],
            // Every key has one value: the answer says so with no lens (KVPairs' shapes).
            lens: vec![]
        }
    );
    drop(kv);
    c.finish();
}

#[test]
fn unsorted_and_duplicate_keys_are_refused() {
    let c = cluster(1, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let err = kv.push(&[3, 1], &[1.0, 2.0], None).expect_err("unsorted");
    assert_eq!(
        err.to_string(),
        "invalid argument: keys must be sorted and unique: keys[1] = 1 follows keys[0] = 3"
    );
    let err = kv.pull(&[2, 2]).expect_err("duplicate");
    assert!(
        err.to_string().contains("keys[1] = 2 follows keys[0] = 2"),
        "{err}"
    );
    let err = kv
        .push(&[1, 2], &[1.0, 2.0, 3.0], None)
        .expect_err("uneven");
    assert!(
        err.to_string()
            .contains("3 values do not split evenly over 2 keys"),
        "{err}"
    );
    drop(kv);
    c.finish();
}

#[test]
fn length_mismatch_is_an_error_reply_and_the_server_keeps_serving() {
    let c = cluster(1, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    kv.wait(kv.push(&[7], &[1.0, 1.0], None).expect("push"))
        .expect("first push");
    let err = kv
        .wait(
            kv.push(&[5, 7], &[9.0, 1.0, 1.0, 1.0], Some(&[1, 3]))
                .expect("push"),
        )
        .expect_err("mismatch");
    match &err {
        Error::Remote { node, message } => {
            assert_eq!(node, "server rank 0 (id 8)");
            assert_eq!(
                message,
                "length mismatch for key 7: pushed 3 values, but its length is 2 (fixed at its first push)"
            );
        }
        other => panic!("expected a remote error, got {other}"),
    }
    // Nothing of the refused request was applied (key 5 not created), and the server still serves.
    let err = kv
        .wait(kv.pull(&[5]).expect("pull"))
        .expect_err("never pushed");
    assert!(err.to_string().contains("key 5 was never pushed"), "{err}");
    let mut out = [0.0f32; 2];
    kv.pull_into(&[7], &mut out).expect("pull");
    assert_eq!(out, [1.0, 1.0]);
    let mut short = [0.0f32; 1];
    let err = kv.pull_into(&[7], &mut short).expect_err("wrong buffer");
    assert_eq!(
        err.to_string(),
        "invalid argument: pulled 2 values for 1 keys but the buffer holds 1"
    );
    drop(kv);
    c.finish();
}

#[test]
fn a_type_the_server_does_not_serve_is_an_error_naming_it() {
    let c = cluster(1, 1, 20.0);
    let kv = KVWorker::<f64>::new(&c.workers[0], 0, 0).expect("worker");
    // Parked together, refused in one answer: each request fails with the server's text.
    let mut sent: Vec<_> = (0..3)
        .map(|i| kv.push(&[1], &[f64::from(i)], None).expect("push"))
        .collect();
    sent.push(kv.pull(&[1]).expect("pull"));
    for ts in sent {
        let err = kv.wait(ts).expect_err("no f64 server");
        assert!(
            err.to_string().contains(
                "no KVServer for app 0 with values of type f64 on server rank 0 (id 8) (it serves: f32)"
            ),
            "timestamp {ts}: {err}"
        );
    }
    drop(kv);
    c.finish();
}

/// A handler that answers only once the test lets it (its sender dropped).
struct Slow(crossbeam_channel::Receiver<()>);
impl RequestHandler<f32> for Slow {
    fn handle(&mut self, _: &ReqMeta, _: KVRequest<'_, f32>) -> Result<KVPairs<f32>, String> {
        let _ = self.0.recv_timeout(Duration::from_secs(120));
        Ok(KVPairs::default())
    }
}

/// `PS_TIMEOUT` of the workers of the tests whose subject is a deadline, seconds: the tests
/// wait it out, and the workers' start-ups have it too. The other nodes get 30 s.
const SHORT_S: u64 = 5;

/// The workers' `PS_TIMEOUT` is [`SHORT_S`].
fn short_worker_timeout(c: &mut pslite::Config) {
    if c.role == Role::Worker {
        c.timing.timeout = Duration::from_secs(SHORT_S);
    }
}

#[test]
fn wait_has_a_deadline_naming_the_silent_server() {
    let (release, held) = crossbeam_channel::bounded::<()>(0);
    let c = cluster_cfg(1, 1, 30.0, short_worker_timeout, move |po| {
        Ok(Box::new(KVServer::<f32>::new(po, 0, Slow(held.clone()))?) as Box<dyn std::any::Any>)
    });
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let t0 = Instant::now();
    let err = kv
        .wait(kv.push(&[1], &[1.0], None).expect("push"))
        .expect_err("the handler holds the answer");
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_secs(SHORT_S), "waited {waited:?}");
    assert!(
        waited < Duration::from_secs(SHORT_S + 15),
        "waited {waited:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("timed out: timestamp 0 (push of 1 keys): no answer within {SHORT_S} s (PS_TIMEOUT) from server rank 0 (id 8)")
    );
    drop(release);
    drop(kv);
    c.finish();
}

#[test]
fn barrier_deadline_names_the_missing_worker() {
    let c = cluster_cfg(1, 2, 30.0, short_worker_timeout, serve_default::<f32>);
    let t0 = Instant::now();
    let err = c.workers[0]
        .barrier(WORKER_GROUP)
        .expect_err("the other worker never comes");
    assert!(
        t0.elapsed() < Duration::from_secs(SHORT_S + 15),
        "waited {:?}",
        t0.elapsed()
    );
    let other = pslite::wire::Node::describe(c.workers[1].my_id());
    assert_eq!(
        err.to_string(),
        format!("timed out: barrier of group 4: no answer from {other}")
    );
    c.finish();
}

#[test]
fn missing_scheduler_is_reported_within_the_deadline() {
    let port = pslite::free_port().expect("port");
    let t0 = Instant::now();
    // Alone, nothing else races its 1 s.
    let err = Postoffice::start(cfg(Role::Worker, port, 1, 1, 1.0))
        .err()
        .expect("no scheduler");
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_secs(1), "waited {waited:?}");
    assert!(waited < Duration::from_secs(15), "waited {waited:?}");
    let text = err.to_string();
    let head = format!(
        "timed out: start-up: no answer from the scheduler at 127.0.0.1:{port} within 1 s (PS_TIMEOUT); is it running, are DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT right, and can it reach this node at 127.0.0.1:"
    );
    let tail = " (DMLC_NODE_HOST, DMLC_INTERFACE)?";
    let between = text
        .strip_prefix(&head)
        .and_then(|t| t.strip_suffix(tail))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(between.parse::<u16>().is_ok(), "{text}");
}

#[test]
fn scheduler_names_the_roles_that_did_not_register_and_tells_those_that_did() {
    let port = pslite::free_port().expect("port");
    // The server starts first (its registration waits in its socket until the scheduler
    // listens), and the scheduler's start-up deadline, which the server's registration races,
    // is 5 s.
    let server =
        std::thread::spawn(move || Postoffice::start(cfg(Role::Server, port, 1, 2, 30.0)).err());
    let sched =
        std::thread::spawn(move || Postoffice::start(cfg(Role::Scheduler, port, 1, 2, 5.0)).err());
    let sched_err = sched.join().expect("no panic").expect("scheduler fails");
    assert_eq!(
        sched_err.to_string(),
        "timed out: start-up: within 5 s (PS_TIMEOUT) only 1 of 1 servers (DMLC_NUM_SERVER) and 0 of 2 workers (DMLC_NUM_WORKER) registered"
    );
    let t0 = Instant::now();
    let server_err = server.join().expect("no panic").expect("server is told");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(
        server_err
            .to_string()
            .starts_with("scheduler (id 1) answered with an error: start-up: within"),
        "{server_err}"
    );
}

#[test]
fn malformed_frames_are_dropped_and_the_server_keeps_serving() {
    let c = cluster(1, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let server = c.workers[0]
        .nodes()
        .into_iter()
        .find(|n| n.role == Role::Server)
        .expect("server in table");
    let ctx = zmq::Context::new();
    let sock = ctx.socket(zmq::DEALER).expect("socket");
    sock.connect(&format!("tcp://127.0.0.1:{}", server.port))
        .expect("connect");
    sock.send(&b"\xff\xff garbage"[..], 0).expect("send");
    sock.send_multipart([&b"\x00"[..], &b"x"[..]], 0)
        .expect("send");
    std::thread::sleep(Duration::from_millis(200));
    kv.wait(kv.push(&[1], &[2.0], None).expect("push"))
        .expect("still serving");
    let mut out = [0.0f32];
    kv.pull_into(&[1], &mut out).expect("pull");
    assert_eq!(out, [2.0]);
    drop(kv);
    c.finish();
}

#[test]
fn workers_pushing_the_same_keys_get_the_sum() {
    common::conformance::exact_sums_over(pslite::VanType::Zmq);
}

#[test]
fn a_server_joins_the_running_job_and_is_drained_over_zmq() {
    common::conformance::a_server_joins_and_is_drained_over(pslite::VanType::Zmq);
}

#[test]
fn shared_pushes_are_sliced_across_servers_without_changing_sums() {
    let c = cluster(2, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let keys = [3, u64::MAX / 2 + 9, u64::MAX - 1];
    let vals = pslite::kv::SArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0]);
    for _ in 0..3 {
        kv.wait(
            kv.push_shared(&keys, &vals, Some(&[2, 1, 2]))
                .expect("push"),
        )
        .expect("wait");
    }
    let got = kv
        .take_pulled(kv.pull(&keys).expect("pull"))
        .expect("pulled");
    assert_eq!(got.vals, vec![3.0, 6.0, 9.0, 12.0, 15.0]);
    assert_eq!(got.lens, vec![2, 1, 2]);
    drop(kv);
    c.finish();
}
