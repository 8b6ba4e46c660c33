//! Bounded staleness (SSP) on an in-process cluster: a worker never reads a row older than τ
//! clocks (each worker's pushes count its clocks), and a straggler past `PS_TIMEOUT` is named.

mod common;

use common::{cluster, cluster_cfg, serve_default};
use pslite::kv::worker::RowCache;
use pslite::{KVWorker, Postoffice, Role};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const STEPS: u64 = 12;

/// Every worker's key holds 0 before any worker pulls it (a key never pushed has no value to
/// pull, and with τ > 0 a fast worker pulls before the slow one's first push).
fn create_keys(po: &Postoffice, kv: &KVWorker<f32>, me: u64) {
    kv.wait(kv.push(&[me], &[0.0], None).expect("push 0"))
        .expect("pushed 0");
    po.barrier(pslite::postoffice::WORKER_GROUP)
        .expect("every key exists");
}

/// Worker `rank` of `workers`: per step, pushes 1 to its own key, clocks, then pulls every
/// worker's key. Each pulled count is a worker's clock when it pushed, so a count below
/// `clock − τ` is a row staler than the bound. Returns the waits' total.
fn train(po: &Arc<Postoffice>, workers: usize, tau: u64, slow: bool) -> Duration {
    let kv = KVWorker::<f32>::new(po, 0, 0).expect("worker");
    let keys: Vec<u64> = (0..workers as u64).collect();
    let me = po.my_rank() as u64;
    create_keys(po, &kv, me);
    let mut waited = Duration::ZERO;
    for step in 1..=STEPS {
        kv.wait(kv.push(&[me], &[1.0], None).expect("push"))
            .expect("pushed");
        let clocked = po.clock(Some(tau)).expect("within PS_TIMEOUT");
        assert_eq!(clocked.clock, step);
        waited += clocked.waited;
        let ts = kv.pull(&keys).expect("pull");
        let counts = kv.take_pulled(ts).expect("pulled").vals;
        for (w, &n) in counts.iter().enumerate() {
            assert!(
                n as u64 + tau >= step,
                "worker {me} at clock {step} read worker {w}'s row at clock {n}, τ = {tau}"
            );
        }
        if slow {
            thread::sleep(Duration::from_millis(15));
        }
    }
    po.clocks_done().expect("told");
    waited
}

fn bound_holds(tau: u64) {
    let c = cluster(1, 3, 30.0);
    let runs: Vec<_> = c
        .workers
        .iter()
        .cloned()
        .map(|po| thread::spawn(move || train(&po, 3, tau, po.my_rank() == 2)))
        .collect();
    let waited: Vec<Duration> = runs
        .into_iter()
        .map(|t| t.join().expect("no panic"))
        .collect();
    assert!(
        waited.iter().any(|w| !w.is_zero()),
        "some worker waited at a clock: {waited:?}"
    );
    c.finish();
}

#[test]
fn no_worker_reads_a_row_older_than_tau_clocks() {
    bound_holds(0);
    bound_holds(2);
}

/// As [`train`], pulling through a row cache of bound `tau`: returns (hits, misses, the
/// largest staleness served).
fn train_cached(po: &Arc<Postoffice>, workers: usize, tau: u64) -> (usize, usize, u64) {
    let kv = KVWorker::<f32>::new(po, 0, 0).expect("worker");
    let metrics = po.metrics().staleness.clone();
    let mut cache = RowCache::<f32>::new(1, 100, tau, Some(metrics)).expect("dim 1");
    let keys: Vec<u64> = (0..workers as u64).collect();
    let me = po.my_rank() as u64;
    create_keys(po, &kv, me);
    let (mut hits, mut misses, mut stalest) = (0, 0, 0);
    let mut counts = vec![0.0f32; workers];
    for step in 1..=STEPS {
        kv.wait(kv.push(&[me], &[1.0], None).expect("push"))
            .expect("pushed");
        po.clock(Some(tau)).expect("within PS_TIMEOUT");
        let got = cache
            .pull_into(&kv, &keys, step, &mut counts)
            .expect("pulled");
        (hits, misses) = (hits + got.hits, misses + got.misses);
        stalest = stalest.max(got.max_staleness);
        for (w, &n) in counts.iter().enumerate() {
            // SSP lets the row be τ clocks old when pulled, the cache τ more.
            assert!(
                n as u64 + 2 * tau >= step,
                "worker {me} at clock {step} read worker {w}'s row at clock {n}, τ = {tau}"
            );
        }
    }
    (hits, misses, stalest)
}

#[test]
fn the_row_cache_serves_rows_for_tau_clocks_and_counts_them() {
    let c = cluster(1, 3, 30.0);
    let runs: Vec<_> = c
        .workers
        .iter()
        .cloned()
        .map(|po| thread::spawn(move || (train_cached(&po, 3, 2), po)))
        .collect();
    for t in runs {
        let (got, po) = t.join().expect("no panic");
        // 12 clocks, 3 keys: pulled at clocks 1, 4, 7, 10 and served at the two after each.
        assert_eq!(got, (24, 12, 2));
        let m = &po.metrics().staleness;
        assert_eq!((m.cache_hits.get(), m.cache_misses.get()), (24, 12));
        assert_eq!(m.clock.get(), 12);
    }
    c.finish();
}

#[test]
fn a_straggler_past_ps_timeout_is_named() {
    let c = cluster_cfg(
        1,
        2,
        30.0,
        |c| {
            if c.role == Role::Worker {
                c.timing.timeout = Duration::from_secs(8);
            }
        },
        serve_default::<f32>,
    );
    let (fast, slow) = (&c.workers[0], &c.workers[1]);
    assert_eq!(fast.clock(Some(1)).expect("within the bound").clock, 1);
    let err = fast
        .clock(Some(1))
        .expect_err("worker 1 never clocks")
        .to_string();
    let straggler = pslite::wire::Node::describe(slow.my_id());
    assert_eq!(
        err,
        format!(
            "timed out: bounded staleness: this worker, at clock 2, waits for every worker to \
             reach clock 1 (staleness 1); {straggler} is at clock 0 after 8 s (PS_TIMEOUT)"
        )
    );
    assert_eq!(slow.clock(None).expect("never waits").clock, 1);
    c.finish();
}

#[test]
fn a_worker_done_with_its_steps_holds_nobody_back() {
    // Shards of unequal size: worker 1 takes 2 steps, worker 0 takes 4 at τ = 0.
    let c = cluster(1, 2, 30.0);
    let (w0, w1) = (c.workers[0].clone(), c.workers[1].clone());
    let longer = thread::spawn(move || {
        (1..=4)
            .map(|_| w0.clock(Some(0)).map(|c| c.clock))
            .collect::<pslite::Result<Vec<u64>>>()
    });
    for step in 1..=2 {
        assert_eq!(w1.clock(Some(0)).expect("in lock step").clock, step);
    }
    w1.clocks_done().expect("told");
    assert_eq!(
        longer.join().expect("no panic").expect("not held back"),
        [1, 2, 3, 4]
    );
    c.finish();
}

#[test]
fn only_a_worker_has_a_clock() {
    let c = cluster_cfg(
        1,
        1,
        30.0,
        |_| {},
        |po| {
            let err = po.clock(Some(0)).expect_err("a server").to_string();
            assert_eq!(
                err,
                "invalid argument: Postoffice::clock on server rank 0 (id 8): only a worker \
                 has a bounded-staleness clock"
            );
            serve_default::<f32>(po)
        },
    );
    c.finish();
}

#[test]
fn ctr_under_ssp_survives_the_scheduler_killed_and_replaced() {
    // The servers' tables as `ctr --print-tables` gives them.
    let [wide, emb] = pslite::apps::ctr::table_specs(&pslite::apps::ctr::CtrArgs::defaults());
    let dir = common::Scratch::new("staleness-scheduler");
    let cp = dir.arg();
    let l = common::launched::Launched::start(
        &[
            "--servers",
            "1",
            "--workers",
            "2",
            "--table",
            &wide,
            "--table",
            &emb,
            "--restart",
            "1",
            "--checkpoint-dir",
            &cp,
            "--",
            "ctr",
            "--train",
            "400000",
            "--test",
            "5000",
            "--staleness",
            "1",
            "--eval-every",
            "200",
        ],
        &[("PS_SLOW_WORKER", "1:2")],
    );
    // Killed while the workers clock: after worker 0's first evaluation.
    l.wait_line("[worker 0] progress: clock 200");
    l.kill("scheduler");
    let (code, out) = l.finish(Duration::from_secs(240));
    let shown = common::launched::without_info(&out);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        out.contains("scheduler exited with signal: 9 (SIGKILL); restarting it"),
        "{shown}"
    );
    assert!(
        out.contains("all 3 nodes re-registered with this scheduler"),
        "{shown}"
    );
    // Every worker ran every clock: 200 000 samples each, 256 per step.
    for w in 0..2 {
        assert!(
            out.contains(&format!("[worker {w}] worker {w}: 782 clocks in ")),
            "{shown}"
        );
    }
    assert!(out.contains("[worker 0] final: clock 782 at "), "{shown}");
}
