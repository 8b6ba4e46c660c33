//! `lr`: distributed sparse logistic regression, the workload ps-lite was built for.
//!
//! Each worker reads its shard of a LIBSVM training file (row r goes to worker r mod W). Per
//! minibatch it pulls the weights of the feature ids the batch touches (plus the bias), computes
//! the logistic-loss gradient, and pushes it; the servers' [`OptimizerHandler`] applies SGD or
//! AdaGrad. Feature id f is key `f.reverse_bits()` (the bias is feature 0, key 0), which spreads
//! the features over the servers' key ranges.
//!
//! Sync mode: a barrier of the workers ends every epoch, so every push of an epoch is applied
//! before the next epoch's first pull (and before worker 0 evaluates). Async mode (`--async`):
//! no barriers until the end. SSP (`--staleness τ`): no barriers until the end, and each
//! minibatch ends at a clock ([`Postoffice::clock`]). Worker 0 prints test accuracy, log-loss
//! and examples/s per epoch.

pub mod libsvm;
pub mod optimizer;

pub use libsvm::Dataset;
pub use optimizer::{OptConfig, Optimizer, OptimizerHandler, CMD_CONFIG, CMD_GRADIENT};

use crate::error::{Error, Result};
use crate::kv::{KVWorker, Key, Op, RequestOptions};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The application id of logistic regression (the servers run [`OptimizerHandler`] on it).
pub const LR_APP: i32 = 1;

/// Options of `lr`.
#[derive(Clone, Debug, clap::Args)]
pub struct LrArgs {
    /// Training data, LIBSVM format (`label idx:val …`; labels ±1 or 0/1).
    #[arg(long)]
    pub train: PathBuf,
    /// Test data, LIBSVM format; evaluated by worker 0 after every epoch.
    #[arg(long)]
    pub test: PathBuf,
    /// Passes over the training data.
    #[arg(long, default_value_t = 5)]
    pub epochs: usize,
    /// Rows per minibatch (per worker).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Update rule on the servers.
    #[arg(long, value_enum, default_value = "adagrad")]
    pub optimizer: Optimizer,
    /// Step size.
    #[arg(long, default_value_t = 0.1)]
    pub learning_rate: f32,
    /// L2 penalty.
    #[arg(long, default_value_t = 0.0)]
    pub l2: f32,
    /// No barrier between epochs (asynchronous SGD).
    #[arg(long = "async")]
    pub asynchronous: bool,
    /// Bounded staleness τ (SSP): each minibatch ends at a clock, a worker runs at most τ
    /// minibatches ahead of the slowest (0: in lock step; inf: no bound), and no barrier
    /// ends an epoch but the last. `PS_SLOW_WORKER=RANK:FACTOR` slows a worker.
    #[arg(long, value_parser = crate::apps::staleness::parse_staleness, conflicts_with = "asynchronous")]
    pub staleness: Option<crate::apps::staleness::Staleness>,
    /// Print one JSON object per epoch.
    #[arg(long)]
    pub json: bool,
}

/// Figures of one epoch, as worker 0 measured them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EpochReport {
    /// 1-based epoch.
    pub epoch: usize,
    /// Fraction of test rows classified right (threshold 0.5).
    pub accuracy: f64,
    /// Mean logistic loss on the test rows (natural log).
    pub logloss: f64,
    /// Training rows per second over all workers (worker 0's rows × workers / its epoch time).
    pub examples_per_s: f64,
    /// Seconds of the epoch on worker 0.
    pub seconds: f64,
    /// "sync", "async" or "ssp" (`--staleness`).
    pub mode: &'static str,
    /// Update rule.
    pub optimizer: Optimizer,
    /// Workers.
    pub workers: usize,
    /// Servers.
    pub servers: usize,
}

impl EpochReport {
    /// One line of text.
    pub fn text(&self) -> String {
        format!(
            "epoch {}: test accuracy {:.4}, log-loss {:.4}, {:.0} examples/s ({}, {:?}, {} workers, {} servers)",
            self.epoch, self.accuracy, self.logloss, self.examples_per_s, self.mode, self.optimizer, self.workers, self.servers
        )
    }
}

/// The key of feature id `f` (0 is the bias).
pub fn key_of(f: u32) -> Key {
    (f as u64).reverse_bits()
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// Sorted keys of `ids` (bias included) and, for each id, the position of its key.
fn keys_for(ids: impl Iterator<Item = u32>) -> (Vec<Key>, HashMap<u32, usize>) {
    let mut pairs: Vec<(Key, u32)> = std::iter::once(0)
        .chain(ids)
        .map(|f| (key_of(f), f))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let pos = pairs
        .iter()
        .enumerate()
        .map(|(i, &(_, f))| (f, i))
        .collect();
    (pairs.into_iter().map(|(k, _)| k).collect(), pos)
}

/// Accuracy and mean log-loss of weights `w` (indexed through `pos`) on `data`.
pub fn evaluate(data: &Dataset, w: &[f32], pos: &HashMap<u32, usize>) -> (f64, f64) {
    let (mut right, mut loss) = (0usize, 0f64);
    let bias = pos.get(&0).map_or(0.0, |&i| w[i]);
    for r in 0..data.rows() {
        let (ids, vals) = data.row(r);
        let z = bias
            + ids
                .iter()
                .zip(vals)
                .map(|(f, v)| pos.get(f).map_or(0.0, |&i| w[i]) * v)
                .sum::<f32>();
        let p = sigmoid(z).clamp(1e-7, 1.0 - 1e-7) as f64;
        let y = data.labels[r] as f64;
        right += usize::from((p >= 0.5) == (y == 1.0));
        loss -= y * p.ln() + (1.0 - y) * (1.0 - p).ln();
    }
    let n = data.rows().max(1) as f64;
    (right as f64 / n, loss / n)
}

/// Trains on this worker's shard; worker 0 evaluates and calls `report` after every epoch.
///
/// # Errors
/// Unreadable or malformed data (naming file and line), bad options, transport and server
/// errors.
pub fn run(
    po: &Arc<Postoffice>,
    a: &LrArgs,
    mut report: impl FnMut(&EpochReport),
) -> Result<Vec<EpochReport>> {
    let cfg = checked_options(a)?;
    let (rank, w_count) = (po.my_rank(), po.num_workers());
    let (train, test) = read_data(a, rank, w_count)?;
    let kv = KVWorker::<f32>::new(po, LR_APP, 0)?;
    configure_servers(po, &kv, &cfg)?;

    let test_keys = test.as_ref().map(|t| keys_for(t.idx.iter().copied()));
    let batches = train.rows().div_ceil(a.batch);
    let bar = super::training_bar(rank, (batches * a.epochs) as u64);
    let mut reports = Vec::new();
    let mut scratch = Minibatch::default();
    let asynchronous = a.asynchronous || a.staleness.is_some();
    let resume = Resume::new(po.inherited_barriers(WORKER_GROUP), asynchronous);
    let mut step_done = step_end(po, a, &bar)?;
    for epoch in 1..=a.epochs {
        let t0 = Instant::now();
        if resume.trained(epoch) {
            bar.inc(batches as u64);
        } else {
            scratch.epoch(&kv, &train, a.batch, &mut step_done)?;
        }
        let seconds = t0.elapsed().as_secs_f64();
        let last = epoch == a.epochs;
        end_epoch(po, a, last)?;
        let to_evaluate = test
            .as_ref()
            .zip(test_keys.as_ref())
            .filter(|_| !resume.evaluated(epoch));
        if let Some((test, (keys, pos))) = to_evaluate {
            let (accuracy, logloss) = evaluate_servers(&kv, test, keys, pos)?;
            let rep = EpochReport {
                epoch,
                accuracy,
                logloss,
                examples_per_s: (train.rows() * w_count) as f64 / seconds.max(1e-9),
                seconds,
                mode: mode(a),
                optimizer: a.optimizer,
                workers: w_count,
                servers: po.num_servers(),
            };
            bar.suspend(|| report(&rep));
            reports.push(rep);
        }
        if !asynchronous {
            // Worker 0 evaluates the epoch's weights before anyone pushes again.
            po.barrier(WORKER_GROUP)?;
        }
    }
    bar.finish_and_clear();
    Ok(reports)
}

/// The end of an epoch's training: a barrier of the workers in sync mode, and after the last
/// epoch (with `--staleness`, once this worker told it takes no more steps).
///
/// # Errors
/// The barrier's.
fn end_epoch(po: &Postoffice, a: &LrArgs, last: bool) -> Result<()> {
    if last && a.staleness.is_some() {
        po.clocks_done()?;
    }
    match (a.asynchronous || a.staleness.is_some(), last) {
        (true, false) => Ok(()),
        _ => po.barrier(WORKER_GROUP),
    }
}

/// The mode a report names: "async", "ssp" or "sync".
fn mode(a: &LrArgs) -> &'static str {
    match (a.asynchronous, a.staleness) {
        (true, _) => "async",
        (false, Some(_)) => "ssp",
        (false, None) => "sync",
    }
}

/// What ends each minibatch: the bar moves; with `--staleness`, the straggler's sleep
/// (`PS_SLOW_WORKER`) and the worker's clock ([`crate::apps::staleness::StepClock`]).
///
/// # Errors
/// A bad `PS_SLOW_WORKER`.
fn step_end<'a>(
    po: &'a Postoffice,
    a: &LrArgs,
    bar: &'a indicatif::ProgressBar,
) -> Result<impl FnMut() -> Result<()> + 'a> {
    let mut steps = a
        .staleness
        .map(|tau| crate::apps::staleness::StepClock::new(po, tau.0))
        .transpose()?;
    Ok(move || {
        bar.inc(1);
        if let Some(steps) = steps.as_mut() {
            steps.end(po)?;
        }
        Ok(())
    })
}

/// Checks the options; returns the servers' optimizer configuration they give.
///
/// # Errors
/// [`Error::InvalidArgument`]: `--batch` or `--epochs` below 1, or an optimizer configuration
/// the servers would refuse (the text names why).
fn checked_options(a: &LrArgs) -> Result<OptConfig> {
    if a.batch == 0 || a.epochs == 0 {
        return Err(Error::InvalidArgument(
            "--batch and --epochs must be at least 1".into(),
        ));
    }
    let cfg = OptConfig {
        optimizer: a.optimizer,
        learning_rate: a.learning_rate,
        l2: a.l2,
    };
    OptConfig::decode(&cfg.encode()).map_err(Error::InvalidArgument)?;
    Ok(cfg)
}

/// Worker `rank`'s shard of the training data (rows r with r mod `workers` = `rank`) and, on
/// worker 0, the whole test set.
///
/// # Errors
/// As [`Dataset::read`]: unreadable or malformed data, naming file and line.
fn read_data(a: &LrArgs, rank: usize, workers: usize) -> Result<(Dataset, Option<Dataset>)> {
    let train = Dataset::read(&a.train, |r| r % workers == rank)?;
    let test = if rank == 0 {
        Some(Dataset::read(&a.test, |_| true)?)
    } else {
        None
    };
    Ok((train, test))
}

/// Accuracy and mean log-loss on `test` of the servers' current weights of `keys` (the test
/// set's, indexed through `pos`), pulled through `kv`.
///
/// # Errors
/// The pull's errors.
fn evaluate_servers(
    kv: &KVWorker<f32>,
    test: &Dataset,
    keys: &[Key],
    pos: &HashMap<u32, usize>,
) -> Result<(f64, f64)> {
    let mut tw = vec![0.0f32; keys.len()];
    kv.pull_into(keys, &mut tw)?;
    Ok(evaluate(test, &tw, pos))
}

/// Where a worker that replaces a lost one takes up the training: from the barriers
/// of the workers its predecessor passed. Sync mode: two per epoch, after the training and
/// after worker 0's evaluation; the epoch the predecessor was in is trained again from its
/// start, on the servers' current weights, so its pushes so far are applied once more (SGD
/// tolerates it; the final accuracy is what counts). Async mode has one barrier, after the
/// last epoch: a replacement before it trains every epoch again.
struct Resume {
    passed: u64,
    asynchronous: bool,
}

impl Resume {
    fn new(passed: u64, asynchronous: bool) -> Resume {
        if passed > 0 {
            tracing::info!(
                "lr: this worker replaces one that passed {passed} barriers: resuming there"
            );
        }
        Resume {
            passed,
            asynchronous,
        }
    }

    /// Whether the predecessor completed epoch `epoch`'s (1-based) training.
    fn trained(&self, epoch: usize) -> bool {
        match self.asynchronous {
            true => self.passed >= 1,
            false => self.passed > 2 * (epoch as u64 - 1),
        }
    }

    /// Whether the workers passed epoch `epoch`'s evaluation.
    fn evaluated(&self, epoch: usize) -> bool {
        !self.asynchronous && self.passed >= 2 * epoch as u64
    }
}

/// Configures the optimizer `cfg` on every server: one [`CMD_CONFIG`] push of its 3 values to
/// the first key of each server's range.
///
/// # Errors
/// Transport errors; a server's refusal of the configuration.
fn configure_servers(po: &Postoffice, kv: &KVWorker<f32>, cfg: &OptConfig) -> Result<()> {
    let server_keys: Vec<Key> = po.server_key_ranges().iter().map(|r| r.begin).collect();
    let cfg_vals: Vec<f32> = server_keys.iter().flat_map(|_| cfg.encode()).collect();
    let lens = vec![3u32; server_keys.len()];
    let options = RequestOptions::cmd(CMD_CONFIG);
    kv.wait(kv.request(Op::Push, &server_keys, &cfg_vals, &lens, options)?)
}

/// The buffers of one minibatch step, kept between steps: pulled weights and the gradient, one
/// entry per key of the batch.
#[derive(Default)]
struct Minibatch {
    w: Vec<f32>,
    grad: Vec<f32>,
}

impl Minibatch {
    /// One epoch: every minibatch of `batch` rows of `train` in order, `step_done` after each.
    ///
    /// # Errors
    /// As [`train`](Self::train).
    fn epoch(
        &mut self,
        kv: &KVWorker<f32>,
        train: &Dataset,
        batch: usize,
        step_done: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        for b in 0..train.rows().div_ceil(batch) {
            let rows = b * batch..((b + 1) * batch).min(train.rows());
            self.train(kv, train, rows)?;
            step_done()?;
        }
        Ok(())
    }

    /// One SGD step on `rows` of `train`: pulls the weights of the features they touch (and the
    /// bias), computes the mean logistic-loss gradient, pushes it ([`CMD_GRADIENT`]) and waits.
    ///
    /// # Errors
    /// Transport and server errors.
    fn train(&mut self, kv: &KVWorker<f32>, train: &Dataset, rows: Range<usize>) -> Result<()> {
        let Minibatch { w, grad } = self;
        let (keys, pos) = keys_for(rows.clone().flat_map(|r| train.row(r).0.iter().copied()));
        w.resize(keys.len(), 0.0);
        kv.pull_into(&keys, w)?;
        grad.clear();
        grad.resize(keys.len(), 0.0f32);
        let bias = pos[&0];
        for r in rows.clone() {
            let (ids, vals) = train.row(r);
            let z = w[bias]
                + ids
                    .iter()
                    .zip(vals)
                    .map(|(f, v)| w[pos[f]] * v)
                    .sum::<f32>();
            let err = sigmoid(z) - train.labels[r];
            grad[bias] += err;
            for (f, v) in ids.iter().zip(vals) {
                grad[pos[f]] += err * v;
            }
        }
        let scale = 1.0 / rows.len() as f32;
        grad.iter_mut().for_each(|g| *g *= scale);
        let options = RequestOptions::cmd(CMD_GRADIENT);
        kv.wait(kv.request(Op::Push, &keys, grad, &[], options)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_and_positions_follow_sorted_keys() {
        let (keys, pos) = keys_for([3u32, 1, 3, 2].into_iter());
        assert_eq!(keys.len(), 4);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for (f, i) in pos {
            assert_eq!(keys[i], key_of(f));
        }
        assert_eq!(key_of(0), 0);
        assert_eq!(key_of(1), 1 << 63);
    }

    #[test]
    fn evaluate_by_hand() {
        let d = Dataset::parse("1 1:1\n-1 2:1\n", "t", |_| true).expect("valid");
        let (keys, pos) = keys_for([1u32, 2].into_iter());
        let mut w = vec![0.0; keys.len()];
        w[pos[&1]] = 2.0;
        w[pos[&2]] = -2.0;
        let (acc, loss) = evaluate(&d, &w, &pos);
        assert_eq!(acc, 1.0);
        let expected = -(sigmoid(2.0) as f64).ln();
        assert!((loss - expected).abs() < 1e-6, "{loss} vs {expected}");
    }
}
