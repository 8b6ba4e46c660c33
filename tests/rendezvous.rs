//! Zero-copy pulls through the TF-verbs rendezvous over the ZMQ van: bytes, meta-data round
//! trips, length changes, tag matching, errors, validation mode.

mod common;

use common::{cluster, cluster_cfg, cluster_with, serve_default};
use pslite::kv::{KVRequest, ReqMeta};
use pslite::{Error, KVPairs, KVServer, KVWorker, RequestHandler, ServesValues};
use std::time::Duration;

#[test]
fn steady_state_pulls_need_no_meta_data_round_trip() {
    let c = cluster(2, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let key = u64::MAX - 5; // on server 1
    let vals: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    kv.wait(kv.push(&[key], &vals, None).expect("push"))
        .expect("push");
    let mut buf = kv.alloc(1000).expect("pool buffer");
    for round in 1..=3 {
        buf = kv.zpull_wait(key, buf).expect("zpull");
        assert_eq!(&buf[..], &vals[..]);
        assert_eq!(
            kv.meta_round_trips(key),
            1,
            "round {round}: only the first pull asks for meta-data"
        );
    }
    // The value grows: exactly one more round trip, and the buffer is replaced by a larger one.
    kv.wait(kv.push(&[key + 1], &[1.0; 3], None).expect("push"))
        .expect("push");
    let mut small = kv.alloc(1).expect("small");
    small[0] = 9.0;
    let got = kv.zpull_wait(key + 1, small).expect("grows");
    assert_eq!(&got[..], &[1.0, 1.0, 1.0]);
    assert_eq!(kv.meta_round_trips(key + 1), 1);
    let got = kv.zpull_wait(key + 1, got).expect("again");
    assert_eq!(kv.meta_round_trips(key + 1), 1);
    assert_eq!(got.len(), 3);
    drop((buf, got, kv));
    c.finish();
}

struct Growing(Vec<f64>);
impl RequestHandler<f64> for Growing {
    fn handle(&mut self, meta: &ReqMeta, req: KVRequest<'_, f64>) -> Result<KVPairs<f64>, String> {
        if meta.push {
            self.0 = req.vals.to_vec(); // replaces: the length may change on every push
        }
        Ok(KVPairs::default())
    }
    fn values(&self) -> Option<&dyn ServesValues<f64>> {
        Some(self)
    }
}
impl ServesValues<f64> for Growing {
    fn value(&self, _key: u64) -> Option<&[f64]> {
        (!self.0.is_empty()).then_some(&self.0[..])
    }
}

#[test]
fn a_value_that_changes_length_costs_one_round_trip_per_change() {
    let c = cluster_with(1, 1, 20.0, |po| {
        Ok(Box::new(KVServer::<f64>::new(po, 0, Growing(Vec::new()))?) as Box<dyn std::any::Any>)
    });
    let kv = KVWorker::<f64>::new(&c.workers[0], 0, 0).expect("worker");
    let mut buf = kv.alloc(4).expect("buf");
    let mut expected_trips = 0;
    for (i, len) in [4usize, 4, 10, 10, 10, 2, 2, 7].into_iter().enumerate() {
        let v: Vec<f64> = (0..len).map(|j| (i * 100 + j) as f64).collect();
        kv.wait(kv.push(&[3], &v, None).expect("push"))
            .expect("push");
        let changed = i == 0 || len != [4usize, 4, 10, 10, 10, 2, 2, 7][i - 1];
        expected_trips += u64::from(changed);
        buf = kv.zpull_wait(3, buf).expect("zpull");
        assert_eq!(&buf[..], &v[..], "pull {i}");
        assert_eq!(
            kv.meta_round_trips(3),
            expected_trips,
            "pull {i} (len {len})"
        );
    }
    drop((buf, kv));
    c.finish();
}

#[test]
fn pull_into_a_pool_buffer_takes_the_rendezvous() {
    let c = cluster(1, 1, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    kv.wait(kv.push(&[11], &[4.0, 5.0], None).expect("push"))
        .expect("push");
    let mut buf = kv.alloc(2).expect("buf");
    kv.pull_into(&[11], &mut buf).expect("pull_into");
    assert_eq!(&buf[..], &[4.0, 5.0]);
    assert_eq!(kv.meta_round_trips(11), 1, "went through the rendezvous");
    let mut short = kv.alloc(1).expect("short");
    let err = kv.pull_into(&[11], &mut short).expect_err("too small");
    assert!(
        err.to_string()
            .contains("key 11: the value is 8 bytes but the buffer holds 4"),
        "{err}"
    );
    let mut plain = [0.0f32; 2];
    kv.pull_into(&[11], &mut plain)
        .expect("heap buffer: classic pull");
    assert_eq!(plain, [4.0, 5.0]);
    drop((buf, short, kv));
    c.finish();
}

#[test]
fn a_pull_waits_for_the_first_push_of_its_key() {
    let c = cluster(1, 2, 20.0);
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let (tx, rx) = crossbeam_channel::bounded(1);
    kv.zpull(77, kv.alloc(1).expect("buf"), move |r| {
        let _ = tx.send(r);
    })
    .expect("sent");
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "nothing to pull yet"
    );
    let other = KVWorker::<f32>::new(&c.workers[1], 0, 0).expect("worker 2");
    other
        .wait(other.push(&[77], &[6.5, 7.5], None).expect("push"))
        .expect("push");
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("completed")
        .expect("ok");
    assert_eq!(&got[..], &[6.5, 7.5]);
    drop((got, kv, other));
    c.finish();
}

struct Opaque;
impl RequestHandler<f32> for Opaque {
    fn handle(&mut self, _: &ReqMeta, _: KVRequest<'_, f32>) -> Result<KVPairs<f32>, String> {
        Ok(KVPairs::default())
    }
}

#[test]
fn a_handler_without_values_answers_error_status() {
    let c = cluster_with(1, 1, 20.0, |po| {
        Ok(Box::new(KVServer::<f32>::new(po, 0, Opaque)?) as Box<dyn std::any::Any>)
    });
    let kv = KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let err = kv
        .zpull_wait(1, kv.alloc(1).expect("buf"))
        .expect_err("not served");
    match err {
        Error::Remote { node, message } => {
            assert_eq!(node, "server rank 0 (id 8)");
            assert_eq!(message, "zero-copy pull of key 1: this server's request handler does not serve zero-copy pulls");
        }
        other => panic!("expected a remote error, got {other}"),
    }
    drop(kv);
    c.finish();
}

#[test]
fn validation_mode_checks_every_content() {
    let c = cluster_cfg(
        1,
        1,
        20.0,
        |cfg| cfg.zero_copy.data_validation = true,
        serve_default::<u8>,
    );
    let kv = KVWorker::<u8>::new(&c.workers[0], 0, 0).expect("worker");
    let v: Vec<u8> = (0..=255).collect();
    kv.wait(kv.push(&[5], &v, None).expect("push"))
        .expect("push");
    let mut buf = kv.alloc(256).expect("buf");
    for i in 1..=3 {
        buf = kv.zpull_wait(5, buf).expect("validated pull");
        assert_eq!(&buf[..], &v[..]);
        // In validation mode every response carries the checksum in a META_DATA_RESPONSE.
        assert_eq!(kv.meta_round_trips(5), i);
    }
    drop((buf, kv));
    c.finish();
}
