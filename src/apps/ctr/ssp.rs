//! `ctr --staleness τ`: training under bounded staleness (SSP). Each minibatch step ends with
//! [`Postoffice::clock`]: a worker runs at most τ steps ahead of the slowest (τ = 0: in lock
//! step; `inf`: asynchronous). Worker 0 evaluates the test set every `--eval-every` of its
//! steps, without stopping the others, and once more after every worker's last step; each
//! worker prints how long it waited at its clocks. `PS_SLOW_WORKER=RANK:FACTOR` slows a worker
//! ([`crate::apps::staleness::Straggler`]). With `--cache-rows N` each worker serves the rows it pulled within the last
//! τ clocks from a [`RowCache`] (hot ids are pulled once per τ + 1 steps).

use super::{datasets, require, CtrArgs, Evaluation, ProgressReport, Report, ServerTables};
use super::{Dataset, Trainer};
use crate::apps::staleness::{parse_staleness, Staleness, StepClock};
use crate::error::{Error, Result};
use crate::kv::worker::RowCache;
use crate::postoffice::{Postoffice, WORKER_GROUP};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The options of `ctr` for bounded staleness (part of [`CtrArgs`]).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct CtrSsp {
    /// Bounded staleness τ: each step ends at a clock, and a worker runs at most τ steps
    /// ahead of the slowest (0: in lock step; inf: no bound). Without it, the workers meet at
    /// a barrier at the end of each epoch only.
    #[arg(long, value_parser = parse_staleness)]
    pub staleness: Option<Staleness>,
    /// With --staleness: worker 0 evaluates the test set every this many of its steps (0:
    /// only after the last step).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u64,
    /// With a finite --staleness τ: each worker keeps up to this many rows per table that it
    /// pulled, and serves them for τ clocks instead of pulling them again (0: no cache).
    #[arg(long, default_value_t = 0)]
    pub cache_rows: usize,
}

impl CtrSsp {
    /// Checks the options.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `--eval-every` or `--cache-rows` without `--staleness`.
    pub fn check(&self) -> Result<()> {
        if self.staleness.is_none() && (self.eval_every > 0 || self.cache_rows > 0) {
            return Err(Error::InvalidArgument(
                "--eval-every and --cache-rows need --staleness".into(),
            ));
        }
        Ok(())
    }

    /// The row caches of `--cache-rows` for tables of `dim` (`None` without).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `--cache-rows` without a finite `--staleness`.
    fn caches(&self, po: &Postoffice, dim: usize) -> Result<Option<[RowCache<f32>; 2]>> {
        if self.cache_rows == 0 {
            return Ok(None);
        }
        let Some(Staleness(Some(tau))) = self.staleness else {
            return Err(Error::InvalidArgument(
                "--cache-rows needs a finite --staleness: a cached row is served for τ clocks"
                    .into(),
            ));
        };
        let m = Some(po.metrics().staleness.clone());
        let n = self.cache_rows;
        Ok(Some([
            RowCache::new(1, n, tau, m.clone())?,
            RowCache::new(dim, n, tau, m)?,
        ]))
    }
}

/// Worker 0's evaluation during or after training.
struct Progress<'a> {
    test: &'a Dataset,
    tau: Option<u64>,
    start: Instant,
}

impl Progress<'_> {
    fn report(
        &self,
        (trainer, tables): (&mut Trainer, &mut ServerTables),
        (clock, waited, last): (u64, Duration, bool),
        report: &mut impl FnMut(&Report),
    ) -> Result<Evaluation> {
        // The test set's rows are pulled fresh, past the row cache.
        tables.cached = false;
        let e = trainer.evaluate(tables, self.test);
        tables.cached = true;
        let e = e?;
        report(&Report::Progress(ProgressReport {
            clock,
            seconds: self.start.elapsed().as_secs_f64(),
            auc: e.auc,
            logloss: e.logloss,
            staleness: self.tau,
            waited: waited.as_secs_f64(),
            last,
        }));
        Ok(e)
    }
}

/// Runs `ctr` with bounded staleness `tau` on this worker (module docs); worker 0 returns the
/// final test figures.
///
/// # Errors
/// As [`super::run`]; [`crate::Error::Config`] for a bad `PS_SLOW_WORKER`;
/// [`crate::Error::Timeout`] naming a straggler that kept this worker waiting past
/// `PS_TIMEOUT`.
pub fn run(
    po: &Arc<Postoffice>,
    a: &CtrArgs,
    tau: Option<u64>,
    report: &mut impl FnMut(&Report),
) -> Result<Option<Evaluation>> {
    let rank = po.my_rank();
    let mut steps_clock = StepClock::new(po, tau)?;
    let (train, test) = datasets(po, a, report)?;
    let mut tables = ServerTables::new(po)?;
    tables.caches = a.ssp.caches(po, a.training.dim)?;
    tables.cached = true;
    let mut trainer = Trainer::new(a.training.dim);
    let batch = a.training.batch;
    let steps = train.rows().div_ceil(batch);
    let bar = super::super::training_bar(rank, (steps * a.training.epochs) as u64);
    let start = Instant::now();
    let progress = test.as_ref().map(|test| Progress { test, tau, start });
    let (mut clock, mut waited) = (0, Duration::ZERO);
    for _ in 0..a.training.epochs {
        for s in 0..steps {
            steps_clock.begin();
            let rows = s * batch..((s + 1) * batch).min(train.rows());
            trainer.step(&mut tables, &train, rows)?;
            let c = steps_clock.end(po)?;
            (clock, waited) = (c.clock, waited + c.waited);
            tables.clock = clock;
            bar.inc(1);
            if let Some(p) = progress.as_ref().filter(|_| a.ssp.eval_every > 0) {
                if clock % a.ssp.eval_every == 0 {
                    let state = (&mut trainer, &mut tables);
                    bar.suspend(|| p.report(state, (clock, waited, false), report))?;
                }
            }
        }
    }
    bar.finish_and_clear();
    // Shards differ by a row: a worker with a step more does not wait for this one.
    po.clocks_done()?;
    let trained = start.elapsed().as_secs_f64();
    let slow = steps_clock.is_slow();
    summary(po, (clock, trained, waited), slow, tables.caches.is_some());
    po.barrier(WORKER_GROUP)?;
    let Some(p) = progress else { return Ok(None) };
    let e = p.report((&mut trainer, &mut tables), (clock, waited, true), report)?;
    require(a, e.auc)?;
    Ok(Some(e))
}

/// Each worker's last line: its clocks, training time, waits, and its row cache's hits.
fn summary(
    po: &Postoffice,
    (clock, trained, waited): (u64, f64, Duration),
    slow: bool,
    cached: bool,
) {
    let rank = po.my_rank();
    let slowed = if slow {
        ", slowed by PS_SLOW_WORKER"
    } else {
        ""
    };
    let m = &po.metrics().staleness;
    let (hits, misses) = (m.cache_hits.get(), m.cache_misses.get());
    let cache = match cached {
        true => format!(
            ", row cache {hits} hits, {misses} misses ({:.1} % hits)",
            100.0 * hits as f64 / (hits + misses).max(1) as f64
        ),
        false => String::new(),
    };
    println!(
        "worker {rank}: {clock} clocks in {trained:.2} s, waited {:.2} s at clocks ({:.1} %){slowed}{cache}",
        waited.as_secs_f64(),
        100.0 * waited.as_secs_f64() / trained.max(1e-9),
    );
}
