//! `ctr`: click-through-rate prediction with a factorization machine (Rendle 2010) whose
//! parameters live on the servers, in two embedding tables, trained on a synthetic Criteo-like
//! click log with a known ground truth.
//!
//! - [`gen`]: the click log (any sample made on demand from the seed; the best possible AUC is
//!   known);
//! - [`model`]: the factorization machine's prediction and log-loss gradient;
//! - [`train`]: minibatch steps and evaluation against a parameter [`train::Store`];
//! - [`auc`]: exact ROC AUC and log-loss;
//! - [`reference`](mod@reference): the same training in one process, on in-process tables.
//!
//! **Tables.** The wide table, application [`CTR_WIDE_APP`], holds w_i (1 value per feature id)
//! and the bias w0 under [`BIAS_KEY`]; the embedding table, application [`CTR_EMB_APP`], holds
//! v_i (`--dim` values per feature id). The servers own the optimizer and its learning rate
//! (`pslite-server --table SPEC`); `--print-tables` prints the two specs that match a worker's
//! options. Feature ids are 64-bit hashes, so the keys spread over the servers' key ranges.
//!
//! **A worker.** Worker r of W generates its shard of the training set (rows i with
//! i mod W = r). Per minibatch it deduplicates the batch's feature ids, pulls their wide and
//! embedding rows, computes the mean log-loss gradient (summed per id) and pushes it; each
//! server's optimizer takes one step per pushed key. Sync mode: a barrier of the workers ends
//! every epoch; worker 0 then evaluates the test set (pulling rows) and reports test AUC,
//! log-loss, samples/s and the best possible AUC, and a second barrier lets the others go on.

pub mod auc;
pub mod gen;
pub mod model;
pub mod reference;
pub mod report;
pub mod ssp;
pub mod train;

pub use crate::kv::table::{Table, TableSpec};
pub use gen::{Dataset, GenConfig, Generator, Split, BIAS_KEY};
pub use report::{EpochReport, ProgressReport, Report};
pub use train::{Evaluation, Store, Trainer};

use crate::error::{Error, Result};
use crate::kv::worker::RowCache;
use crate::kv::{KVWorker, Key};
use crate::postoffice::{Postoffice, WORKER_GROUP};
use std::sync::Arc;
use std::time::Instant;

/// The application id of the wide table (w_i and the bias, 1 value per key).
pub const CTR_WIDE_APP: i32 = 10;
/// The application id of the embedding table (v_i, `--dim` values per key).
pub const CTR_EMB_APP: i32 = 11;

/// Options of `ctr`.
#[derive(Clone, Debug, clap::Args)]
pub struct CtrArgs {
    /// The synthetic click log.
    #[command(flatten)]
    pub data: CtrData,
    /// The model and its training.
    #[command(flatten)]
    pub training: CtrTraining,
    /// Print one JSON object per report instead of text.
    #[arg(long)]
    pub json: bool,
    /// Fail when worker 0's final test AUC is below this.
    #[arg(long)]
    pub require_auc: Option<f64>,
    /// After training, worker 0 also trains the in-process reference and reports its AUC.
    #[arg(long)]
    pub reference: bool,
    /// Worker 0 trains only the in-process reference (no pushes to the servers).
    #[arg(long)]
    pub reference_only: bool,
    /// Worker 0 prints the two `--table` specs that match these options, then the workers stop.
    #[arg(long)]
    pub print_tables: bool,
    /// Bounded staleness (SSP) instead of a barrier per epoch.
    #[command(flatten)]
    pub ssp: ssp::CtrSsp,
}

/// The synthetic click log of `ctr` (part of [`CtrArgs`]).
#[derive(Clone, Debug, clap::Args)]
pub struct CtrData {
    /// Seed of the synthetic click log (vocabularies, ground truth, samples).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Training samples (all workers together).
    #[arg(long, default_value_t = 1_000_000)]
    pub train: u64,
    /// Test samples (worker 0 evaluates them after every epoch).
    #[arg(long, default_value_t = 50_000)]
    pub test: u64,
    /// Categorical fields per sample.
    #[arg(long, default_value_t = 26)]
    pub fields: usize,
    /// Vocabulary of the largest field (ids); the smallest has 10, the others spread
    /// geometrically between.
    #[arg(long, default_value_t = 100_000)]
    pub vocab: usize,
}

/// The model and its training in `ctr` (part of [`CtrArgs`]).
#[derive(Clone, Debug, clap::Args)]
pub struct CtrTraining {
    /// Embedding dimension of the model (the embedding table's `dim` on the servers).
    #[arg(long, default_value_t = 8)]
    pub dim: usize,
    /// Samples per minibatch (per worker).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Passes over the training data.
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// AdaGrad learning rate for `--print-tables` and `--reference`: the servers' rate is the
    /// one in their `--table` specs, which this does not change.
    #[arg(long, default_value_t = 0.05)]
    pub learning_rate: f32,
    /// Standard deviation of the embeddings' initial values, for `--print-tables` and
    /// `--reference` (as `--learning-rate`).
    #[arg(long, default_value_t = 0.01)]
    pub init_std: f32,
}

impl CtrArgs {
    /// The options with their defaults (as the command line gives them).
    pub fn defaults() -> CtrArgs {
        CtrArgs {
            data: CtrData {
                seed: 1,
                train: 1_000_000,
                test: 50_000,
                fields: 26,
                vocab: 100_000,
            },
            training: CtrTraining {
                dim: 8,
                batch: 256,
                epochs: 1,
                learning_rate: 0.05,
                init_std: 0.01,
            },
            json: false,
            require_auc: None,
            reference: false,
            reference_only: false,
            print_tables: false,
            ssp: ssp::CtrSsp::default(),
        }
    }

    /// The generator's options.
    pub fn gen_config(&self) -> GenConfig {
        GenConfig {
            seed: self.data.seed,
            fields: self.data.fields,
            vocab_min: 10.min(self.data.vocab),
            vocab_max: self.data.vocab,
            ..GenConfig::default()
        }
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first bad one.
    pub fn check(&self) -> Result<()> {
        let bad = |t: String| Err(Error::InvalidArgument(t));
        let training = &self.training;
        if training.batch == 0 || training.epochs == 0 || training.dim == 0 || self.data.train == 0
        {
            return bad("--batch, --epochs, --dim and --train must be at least 1".into());
        }
        if !(training.learning_rate > 0.0 && training.init_std >= 0.0) {
            return bad("--learning-rate must be > 0 and --init-std ≥ 0".into());
        }
        self.ssp.check()?;
        self.gen_config()
            .check()
            .map_err(|e| Error::InvalidArgument(format!("data options: {e}")))
    }
}

/// AdaGrad's starting accumulator in the specs of [`table_specs`]. The gradients pushed are
/// means over a minibatch, so one occurrence of a rare id contributes about 1/batch; a
/// starting accumulator of this size keeps such ids' first steps small instead of a full
/// `lr` (what AdaGrad from 0 takes), which would fit the noise of ids seen a few times.
pub const ADAGRAD_INIT_ACC: f32 = 0.001;

/// The `--table` specs of the wide and embedding tables that match `a`: AdaGrad at
/// `--learning-rate` with accumulators from [`ADAGRAD_INIT_ACC`]; wide rows start at 0,
/// embedding rows Normal(0, `--init-std`).
pub fn table_specs(a: &CtrArgs) -> [String; 2] {
    let opt = format!(
        "opt=adagrad:lr={}:init_acc={ADAGRAD_INIT_ACC}",
        a.training.learning_rate
    );
    [
        format!("app={CTR_WIDE_APP},dim=1,init=zeros,{opt}"),
        format!(
            "app={CTR_EMB_APP},dim={},init=normal:0:{},{opt}",
            a.training.dim, a.training.init_std
        ),
    ]
}

/// The servers' tables through two [`KVWorker`]s (apps [`CTR_WIDE_APP`] and [`CTR_EMB_APP`]).
pub struct ServerTables {
    wide: KVWorker<f32>,
    emb: KVWorker<f32>,
    /// With `--cache-rows`: the wide and embedding rows pulled within the staleness bound
    /// ([`ssp`]), used while `cached`, as of clock `clock`.
    caches: Option<[RowCache<f32>; 2]>,
    cached: bool,
    clock: u64,
}

impl ServerTables {
    /// Workers of both tables' applications.
    ///
    /// # Errors
    /// As [`KVWorker::new`].
    pub fn new(po: &Arc<Postoffice>) -> Result<ServerTables> {
        Ok(ServerTables {
            wide: KVWorker::new(po, CTR_WIDE_APP, 0)?,
            emb: KVWorker::new(po, CTR_EMB_APP, 0)?,
            caches: None,
            cached: false,
            clock: 0,
        })
    }
}

/// Copies a pull's values into `out`, or names the mismatch (a server's table of another
/// dimension).
fn take_into(kv: &KVWorker<f32>, ts: i32, app: i32, nkeys: usize, out: &mut [f32]) -> Result<()> {
    let got = kv.take_pulled(ts)?;
    if got.vals.len() != out.len() {
        return Err(Error::InvalidArgument(format!(
            "a pull of {nkeys} keys from application {app} returned {} values, expected {} \
             ({} per key): do the servers' --table specs match this worker's options? \
             (`ctr --print-tables` prints the specs that do)",
            got.vals.len(),
            out.len(),
            out.len() / nkeys.max(1)
        )));
    }
    out.copy_from_slice(&got.vals);
    Ok(())
}

impl Store for ServerTables {
    fn pull(
        &mut self,
        wide_keys: &[Key],
        wide: &mut [f32],
        emb_keys: &[Key],
        emb: &mut [f32],
    ) -> Result<()> {
        if let Some([cw, ce]) = self.caches.as_mut().filter(|_| self.cached) {
            // Both tables' missed rows are in flight together.
            let (_, tw) = cw.start(&self.wide, wide_keys, self.clock, wide)?;
            let (_, te) = ce.start(&self.emb, emb_keys, self.clock, emb)?;
            cw.finish(&self.wide, tw, self.clock, wide)?;
            return ce.finish(&self.emb, te, self.clock, emb);
        }
        // Both pulls are in flight together.
        let tw = self.wide.pull(wide_keys)?;
        let te = if emb_keys.is_empty() {
            None
        } else {
            Some(self.emb.pull(emb_keys)?)
        };
        take_into(&self.wide, tw, CTR_WIDE_APP, wide_keys.len(), wide)?;
        match te {
            Some(te) => take_into(&self.emb, te, CTR_EMB_APP, emb_keys.len(), emb),
            None => Ok(()),
        }
    }

    fn push(
        &mut self,
        wide_keys: &[Key],
        wide: &[f32],
        emb_keys: &[Key],
        emb: &[f32],
    ) -> Result<()> {
        let tw = self.wide.push(wide_keys, wide, None)?;
        let te = if emb_keys.is_empty() {
            None
        } else {
            Some(self.emb.push(emb_keys, emb, None)?)
        };
        self.wide.wait(tw)?;
        te.map_or(Ok(()), |te| self.emb.wait(te))
    }
}

/// Runs `ctr` on this worker (module docs); worker 0 calls `report` with each report and
/// returns the last epoch's test figures (other workers return `None`).
///
/// # Errors
/// Bad options ([`Error::InvalidArgument`]); transport and server errors; a pull whose length
/// does not match `--dim`; worker 0's final test AUC below `--require-auc`.
pub fn run(
    po: &Arc<Postoffice>,
    a: &CtrArgs,
    mut report: impl FnMut(&Report),
) -> Result<Option<Evaluation>> {
    a.check()?;
    if a.print_tables || a.reference_only {
        return run_worker0_only(po, a, &mut report);
    }
    if let Some(tau) = a.ssp.staleness {
        return ssp::run(po, a, tau.0, &mut report);
    }
    let (rank, workers) = (po.my_rank(), po.num_workers());
    let (train, test) = datasets(po, a, &mut report)?;
    let mut tables = ServerTables::new(po)?;
    let mut trainer = Trainer::new(a.training.dim);
    let (batch, epochs) = (a.training.batch, a.training.epochs);
    let bar = super::training_bar(rank, (train.rows().div_ceil(batch) * epochs) as u64);
    let mut last = None;
    for epoch in 1..=epochs {
        let t0 = Instant::now();
        let train_loss = trainer.epoch(&mut tables, &train, batch, || bar.inc(1))?;
        let seconds = t0.elapsed().as_secs_f64();
        po.barrier(WORKER_GROUP)?;
        if let Some(test) = &test {
            let e = trainer.evaluate(&mut tables, test)?;
            let rep = EpochReport {
                epoch,
                auc: e.auc,
                logloss: e.logloss,
                bayes_auc: test.bayes_auc(),
                bayes_logloss: test.bayes_logloss(),
                train_loss,
                samples_per_s: (train.rows() * workers) as f64 / seconds.max(1e-9),
                seconds,
                workers,
                servers: po.num_servers(),
            };
            bar.suspend(|| report(&Report::Epoch(rep)));
            last = Some(e);
        }
        // Worker 0 evaluates the epoch's model before anyone pushes again.
        po.barrier(WORKER_GROUP)?;
    }
    bar.finish_and_clear();
    if rank == 0 && a.reference {
        report(&Report::Reference(reference::run(a)?));
    }
    if let Some(e) = last {
        require(a, e.auc)?;
    }
    Ok(last)
}

/// `--print-tables` and `--reference-only`: worker 0 reports the two table specs, or trains the
/// in-process reference and reports it; the other workers do nothing. Returns the reference's
/// last epoch's test figures (worker 0 with `--reference-only`), else `None`.
///
/// # Errors
/// The reference's errors; its final test AUC below `--require-auc`.
fn run_worker0_only(
    po: &Postoffice,
    a: &CtrArgs,
    report: &mut impl FnMut(&Report),
) -> Result<Option<Evaluation>> {
    if po.my_rank() != 0 {
        return Ok(None);
    }
    if a.print_tables {
        report(&Report::Tables {
            specs: table_specs(a),
        });
        return Ok(None);
    }
    let r = reference::run(a)?;
    report(&Report::Reference(r.clone()));
    require(a, r.auc())?;
    Ok(r.epochs.last().copied())
}

/// This worker's shard of the training set, and on worker 0 the test set (reported).
///
/// # Errors
/// Bad data options.
fn datasets(
    po: &Postoffice,
    a: &CtrArgs,
    report: &mut impl FnMut(&Report),
) -> Result<(Dataset, Option<Dataset>)> {
    let (rank, workers) = (po.my_rank(), po.num_workers());
    let gen = Generator::new(&a.gen_config()).map_err(Error::InvalidArgument)?;
    let train = gen.dataset(Split::Train, a.data.train, rank as u64, workers as u64);
    let test = (rank == 0).then(|| gen.dataset(Split::Test, a.data.test, 0, 1));
    if let Some(t) = &test {
        report(&data_report(a, &gen, t));
    }
    Ok((train, test))
}

/// Worker 0's report of the data: the sizes of `a`, and the test set `test`'s click-through
/// rate and best possible AUC.
fn data_report(a: &CtrArgs, gen: &Generator, test: &Dataset) -> Report {
    Report::Data {
        train: a.data.train,
        test: a.data.test,
        ctr: test.ctr(),
        bayes_auc: test.bayes_auc(),
        vocabularies: gen.vocabularies(),
    }
}

/// `--require-auc`'s check of the final test AUC `auc`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming both figures when `auc` is below the requirement.
fn require(a: &CtrArgs, auc: f64) -> Result<()> {
    match a.require_auc {
        Some(min) if auc < min => Err(Error::InvalidArgument(format!(
            "ctr: final test AUC {auc:.4} is below --require-auc {min}"
        ))),
        _ => Ok(()),
    }
}
