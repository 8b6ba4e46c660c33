//! `ctr`: the synthetic click log, and the factorization machine trained on the servers'
//! embedding tables by a cluster of threads, judged against the best possible AUC and the
//! in-process reference.

mod common;

use pslite::apps::ctr::{
    self, auc::auc, reference, table_specs, CtrArgs, CtrData, CtrTraining, Generator, Report,
    Split, TableSpec, BIAS_KEY, CTR_EMB_APP, CTR_WIDE_APP,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::thread;

/// The options of the cluster runs: a click log of 10 fields and 200 000 training samples
/// (smaller than the command line's default, so the debug build trains it in seconds).
fn small() -> CtrArgs {
    let d = CtrArgs::defaults();
    CtrArgs {
        data: CtrData {
            fields: 10,
            train: 200_000,
            ..d.data
        },
        training: CtrTraining {
            epochs: 2,
            ..d.training
        },
        ..d
    }
}

#[test]
fn the_same_seed_gives_the_same_samples_and_shards_partition_the_set() {
    let a = small();
    let g1 = Generator::new(&a.gen_config()).expect("valid");
    let g2 = Generator::new(&a.gen_config()).expect("valid");
    let all = g1.dataset(Split::Train, 3001, 0, 1);
    assert_eq!(all, g2.dataset(Split::Train, 3001, 0, 1));
    // Another seed, another log; another split, other samples.
    let mut seed_2 = small();
    seed_2.data.seed = 2;
    let other = Generator::new(&seed_2.gen_config()).expect("valid");
    assert_ne!(all.ids, other.dataset(Split::Train, 3001, 0, 1).ids);
    assert_ne!(all.ids, g1.dataset(Split::Test, 3001, 0, 1).ids);
    // Three shards: row i goes to shard i mod 3, with the same sample as in the whole set.
    let mut seen = HashSet::new();
    for shard in 0..3u64 {
        let part = g1.dataset(Split::Train, 3001, shard, 3);
        assert_eq!(part.rows(), (3001 - shard as usize).div_ceil(3));
        for (j, &i) in part.index.iter().enumerate() {
            assert_eq!(i % 3, shard);
            assert!(seen.insert(i), "row {i} in two shards");
            let i = i as usize;
            assert_eq!(part.row(j), all.row(i));
            assert_eq!(part.labels[j], all.labels[i]);
            assert_eq!(part.truth[j], all.truth[i]);
        }
    }
    assert_eq!(seen.len(), 3001);
    assert!(all.ids.iter().all(|&k| k != BIAS_KEY));
}

#[test]
fn the_default_log_has_the_tuned_ctr_and_best_possible_auc() {
    let a = CtrArgs::defaults();
    let g = Generator::new(&a.gen_config()).expect("valid");
    let v = g.vocabularies();
    assert_eq!((v.len(), v[0], v[25]), (26, 10, 100_000));
    let test = g.dataset(Split::Test, a.data.test, 0, 1);
    let (ctr, bayes) = (test.ctr(), test.bayes_auc());
    assert!((0.2..=0.3).contains(&ctr), "test CTR {ctr}");
    assert!((0.75..=0.80).contains(&bayes), "best possible AUC {bayes}");
    // The true probabilities are calibrated: their log-loss beats the constant CTR's.
    let constant = -(ctr * ctr.ln() + (1.0 - ctr) * (1.0 - ctr).ln());
    assert!(
        test.bayes_logloss() < constant - 0.02,
        "{}",
        test.bayes_logloss()
    );
}

#[test]
fn auc_by_hand() {
    // Positives 0.8 and 0.4 against negatives 0.4 and 0.1: 1 + 1 + ½ + 1 of 4 pairs.
    assert_eq!(auc(&[0.4, 0.8, 0.1, 0.4], &[0.0, 1.0, 0.0, 1.0]), 0.875);
    assert_eq!(auc(&[0.9, 0.8, 0.2, 0.1], &[0.0, 0.0, 1.0, 1.0]), 0.0);
}

#[test]
fn print_tables_gives_specs_the_tables_take() {
    let [wide, emb] = table_specs(&CtrArgs::defaults());
    let wide: TableSpec = wide.parse().expect("wide spec parses");
    let emb: TableSpec = emb.parse().expect("embedding spec parses");
    assert_eq!((wide.app, wide.dim), (CTR_WIDE_APP, 1));
    assert_eq!((emb.app, emb.dim), (CTR_EMB_APP, 8));
}

/// Runs `a` on a cluster of `s` servers serving the tables of `table_specs(a)` and `w`
/// workers (threads); returns worker 0's reports and the workers' results.
fn cluster_run(s: usize, w: usize, a: &CtrArgs) -> (Vec<Report>, Vec<pslite::Result<()>>) {
    let specs: Vec<TableSpec> = table_specs(a)
        .iter()
        .map(|t| t.parse().expect("spec parses"))
        .collect();
    let c = common::cluster_with(s, w, 120.0, move |po| {
        Ok(Box::new(pslite::kv::table::serve_tables(po, &specs)?))
    });
    let reports = Arc::new(Mutex::new(Vec::new()));
    let runs: Vec<_> = c
        .workers
        .iter()
        .map(|po| {
            let (po, a, reports) = (po.clone(), a.clone(), reports.clone());
            thread::spawn(move || {
                let rank = po.my_rank();
                ctr::run(&po, &a, |r| {
                    if rank == 0 {
                        reports.lock().expect("no panic").push(r.clone());
                    }
                })
                .map(|_| ())
            })
        })
        .collect();
    let results = runs
        .into_iter()
        .map(|t| t.join().expect("no panic"))
        .collect();
    c.finish();
    let reports = reports.lock().expect("no panic").clone();
    (reports, results)
}

#[test]
fn two_servers_two_workers_approach_the_best_auc_and_match_the_reference() {
    let a = small();
    let (reports, results) = cluster_run(2, 2, &a);
    for r in results {
        r.expect("worker succeeds");
    }
    let epochs: Vec<_> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Epoch(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        epochs.len(),
        a.training.epochs,
        "one report per epoch: {reports:?}"
    );
    let last = &epochs[a.training.epochs - 1];
    assert_eq!((last.workers, last.servers), (2, 2));
    let reference = reference::run(&a).expect("reference trains");
    let (dist, refr, bayes) = (last.auc, reference.auc(), last.bayes_auc);
    eprintln!("S2W2 AUC {dist:.4}, reference {refr:.4}, best possible {bayes:.4}");
    assert_eq!(reference.bayes_auc, bayes, "the same test set");
    assert!(
        bayes - dist <= 0.01,
        "S2W2 AUC {dist} vs best possible {bayes}"
    );
    assert!(
        (dist - refr).abs() <= 0.005,
        "S2W2 AUC {dist} vs reference {refr}"
    );
}

#[test]
fn require_auc_fails_a_run_below_it() {
    let d = CtrArgs::defaults();
    let a = CtrArgs {
        data: CtrData {
            fields: 4,
            train: 2_000,
            test: 2_000,
            ..d.data
        },
        training: CtrTraining {
            epochs: 1,
            ..d.training
        },
        require_auc: Some(0.99),
        ..d
    };
    let (_, results) = cluster_run(1, 1, &a);
    let err = results[0].clone().expect_err("below the requirement");
    assert!(
        err.to_string().contains("below --require-auc 0.99"),
        "{err}"
    );
}

#[test]
fn a_server_table_of_another_dimension_is_named() {
    let d = CtrArgs::defaults();
    let a = CtrArgs {
        data: CtrData {
            fields: 4,
            train: 1_000,
            test: 1_000,
            ..d.data
        },
        training: CtrTraining {
            epochs: 1,
            ..d.training
        },
        ..d
    };
    // The servers' embedding table has dimension 8, the workers' model 4.
    let specs: Vec<TableSpec> = table_specs(&a)
        .iter()
        .map(|t| t.parse().expect("spec parses"))
        .collect();
    let c = common::cluster_with(1, 1, 30.0, move |po| {
        Ok(Box::new(pslite::kv::table::serve_tables(po, &specs)?))
    });
    let err = ctr::run(
        &c.workers[0],
        &CtrArgs {
            training: CtrTraining {
                dim: 4,
                ..a.training
            },
            ..a
        },
        |_| {},
    )
    .expect_err("dimensions differ");
    c.finish();
    assert!(err.to_string().contains("--print-tables"), "{err}");
}

#[test]
fn with_bounded_staleness_worker_0_reports_progress_and_approaches_the_best_auc() {
    let mut a = small();
    a.training.epochs = 1;
    a.data.test = 10_000;
    a.ssp = ctr::ssp::CtrSsp {
        staleness: Some(pslite::apps::staleness::Staleness(Some(1))),
        eval_every: 100,
        cache_rows: 0,
    };
    let (reports, results) = cluster_run(1, 3, &a);
    for r in results {
        r.expect("worker succeeds");
    }
    let progress: Vec<_> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Progress(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    // Worker 0 trains on a third of 200 000 samples, 256 per step: 261 steps.
    let clocks: Vec<(u64, bool)> = progress.iter().map(|p| (p.clock, p.last)).collect();
    assert_eq!(clocks, [(100, false), (200, false), (261, true)]);
    assert!(progress.iter().all(|p| p.staleness == Some(1)));
    assert!(progress.windows(2).all(|w| w[0].seconds <= w[1].seconds));
    let last = progress.last().expect("a final report");
    let bayes = match &reports[0] {
        Report::Data { bayes_auc, .. } => *bayes_auc,
        r => panic!("the data report first: {r:?}"),
    };
    assert!(
        bayes - last.auc <= 0.02,
        "AUC {} vs best possible {bayes}",
        last.auc
    );
}

#[test]
fn a_row_cache_within_the_bound_still_approaches_the_best_auc() {
    let mut a = small();
    a.training.epochs = 1;
    a.data.test = 10_000;
    a.ssp = ctr::ssp::CtrSsp {
        staleness: Some(pslite::apps::staleness::Staleness(None)),
        eval_every: 0,
        cache_rows: 10_000,
    };
    let (_, results) = cluster_run(1, 1, &a);
    assert_eq!(
        results[0].clone().expect_err("no bound").to_string(),
        "invalid argument: --cache-rows needs a finite --staleness: a cached row is served for τ \
         clocks"
    );
    a.ssp.staleness = Some(pslite::apps::staleness::Staleness(Some(2)));
    let (reports, results) = cluster_run(1, 2, &a);
    for r in results {
        r.expect("worker succeeds");
    }
    let (last, bayes) = match (reports.last(), &reports[0]) {
        (Some(Report::Progress(p)), Report::Data { bayes_auc, .. }) => (p.auc, *bayes_auc),
        r => panic!("the data report first, the final one last: {r:?}"),
    };
    assert!(bayes - last <= 0.02, "AUC {last} vs best possible {bayes}");
}
