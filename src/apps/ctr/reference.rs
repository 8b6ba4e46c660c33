//! The in-process reference of `ctr`: what one process reaches with the same model, data,
//! minibatches, epochs, optimizer and hyperparameters, so that a distributed run can be judged
//! against it.
//!
//! How it is computed: one process generates the whole training set (rows `0..train`, the
//! union of every worker's shard) and the test set of the same [`CtrArgs`]; it makes the two
//! tables in process with [`Table::new`] from the specs [`table_specs`] gives for those
//! options (what `--print-tables` prints for the servers: same dimension, initialisation,
//! optimizer and learning rate); then, for each of the `epochs`, it runs the steps of
//! [`Trainer::epoch`] over the training rows in order, `batch` rows per step (one worker's
//! sequence of minibatches over the whole training set: as many steps as all distributed
//! workers together, each applied at once), and evaluates the test set after each epoch.

use super::gen::{Generator, Split};
use super::train::{Evaluation, Store, Trainer};
use super::{table_specs, CtrArgs, Table, TableSpec};
use crate::error::{Error, Result};
use crate::kv::Key;
use std::time::Instant;

/// The two tables of the model in this process.
pub struct LocalTables {
    wide: Table,
    emb: Table,
}

impl LocalTables {
    /// Tables from the specs `wide` (dimension 1) and `emb`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a spec that does not parse or make a table, or a
    /// wide table whose dimension is not 1.
    pub fn new(wide: &str, emb: &str) -> Result<LocalTables> {
        let make = |s: &str| -> Result<Table> {
            let spec: TableSpec = s
                .parse()
                .map_err(|e| Error::InvalidArgument(format!("table spec {s:?}: {e}")))?;
            Table::new(&spec).map_err(|e| Error::InvalidArgument(format!("table {s:?}: {e}")))
        };
        let (wide, emb) = (make(wide)?, make(emb)?);
        if wide.dim() != 1 {
            return Err(Error::InvalidArgument(format!(
                "the wide table has dimension {}, expected 1",
                wide.dim()
            )));
        }
        Ok(LocalTables { wide, emb })
    }

    /// The embedding table's dimension.
    pub fn dim(&self) -> usize {
        self.emb.dim()
    }
}

fn table_error(e: String) -> Error {
    Error::InvalidArgument(format!("in-process table: {e}"))
}

impl Store for LocalTables {
    fn pull(
        &mut self,
        wide_keys: &[Key],
        wide: &mut [f32],
        emb_keys: &[Key],
        emb: &mut [f32],
    ) -> Result<()> {
        self.wide.pull(wide_keys, wide).map_err(table_error)?;
        self.emb.pull(emb_keys, emb).map_err(table_error)
    }

    fn push(
        &mut self,
        wide_keys: &[Key],
        wide: &[f32],
        emb_keys: &[Key],
        emb: &[f32],
    ) -> Result<()> {
        self.wide.push(wide_keys, wide, None).map_err(table_error)?;
        self.emb.push(emb_keys, emb, None).map_err(table_error)
    }
}

/// What the reference reached.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReferenceReport {
    /// Test figures after each epoch.
    pub epochs: Vec<Evaluation>,
    /// The best possible test AUC (the true probabilities').
    pub bayes_auc: f64,
    /// Seconds of training and evaluation (data generation excluded).
    pub seconds: f64,
}

impl ReferenceReport {
    /// The test AUC after the last epoch (0.5 before any).
    pub fn auc(&self) -> f64 {
        self.epochs.last().map_or(0.5, |e| e.auc)
    }
}

/// Trains and evaluates the reference of `a` (module docs).
///
/// # Errors
/// [`Error::InvalidArgument`] for bad options or table specs.
pub fn run(a: &CtrArgs) -> Result<ReferenceReport> {
    a.check()?;
    let gen = Generator::new(&a.gen_config()).map_err(Error::InvalidArgument)?;
    let train = gen.dataset(Split::Train, a.data.train, 0, 1);
    let test = gen.dataset(Split::Test, a.data.test, 0, 1);
    let [wide, emb] = table_specs(a);
    let mut tables = LocalTables::new(&wide, &emb)?;
    let mut trainer = Trainer::new(a.training.dim);
    let t0 = Instant::now();
    let mut epochs = Vec::with_capacity(a.training.epochs);
    for _ in 0..a.training.epochs {
        trainer.epoch(&mut tables, &train, a.training.batch, || {})?;
        epochs.push(trainer.evaluate(&mut tables, &test)?);
    }
    Ok(ReferenceReport {
        epochs,
        bayes_auc: test.bayes_auc(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}
