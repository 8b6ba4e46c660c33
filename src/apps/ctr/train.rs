//! Minibatch training and evaluation of the factorization machine against a parameter store,
//! shared by the distributed worker (the store is the servers' tables) and the in-process
//! reference (the store is two local tables), so both run the same steps.
//!
//! One step on rows R of a dataset: the feature ids of R, sorted and deduplicated, are the
//! batch's keys; the wide table's rows of [`BIAS_KEY`] and of the keys, and the embedding
//! table's rows of the keys, are pulled; the mean log-loss gradient over R is computed (each
//! key's gradient summed over its occurrences, divided by |R|) and pushed, one gradient per key:
//! the store's optimizer takes one step per key.

use super::auc::{auc, logloss};
use super::gen::{Dataset, BIAS_KEY};
use super::model::{sigmoid, Fm, Grads, Rows};
use crate::error::Result;
use crate::kv::Key;
use std::ops::Range;

/// Where the parameters live: the wide table (1 value per key; the bias under [`BIAS_KEY`])
/// and the embedding table (`dim` values per key). Keys given are sorted and unique.
pub trait Store {
    /// The wide rows of `wide_keys` into `wide` (one value per key) and the embedding rows of
    /// `emb_keys` into `emb` (`dim` values per key); rows never pushed have their initial
    /// values.
    ///
    /// # Errors
    /// Transport or table errors.
    fn pull(
        &mut self,
        wide_keys: &[Key],
        wide: &mut [f32],
        emb_keys: &[Key],
        emb: &mut [f32],
    ) -> Result<()>;

    /// One optimizer step per key with the gradients given (shapes as in
    /// [`pull`](Self::pull)).
    ///
    /// # Errors
    /// Transport or table errors.
    fn push(
        &mut self,
        wide_keys: &[Key],
        wide: &[f32],
        emb_keys: &[Key],
        emb: &[f32],
    ) -> Result<()>;
}

/// The keys of a set of rows, and each row's features as positions in them.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// [`BIAS_KEY`], then the rows' feature ids, sorted and unique (the wide table's keys; the
    /// embedding table's are `wide_keys[1..]`, as no feature id is [`BIAS_KEY`]).
    pub wide_keys: Vec<Key>,
    /// For each row, for each field, the position of its feature id in `wide_keys[1..]`.
    pub idx: Vec<u32>,
}

impl Batch {
    /// Fills the batch with rows `rows` of `data` (panics if they are out of range).
    pub fn build(&mut self, data: &Dataset, rows: Range<usize>) {
        let ids = &data.ids[rows.start * data.fields..rows.end * data.fields];
        self.wide_keys.clear();
        self.wide_keys.push(BIAS_KEY);
        self.wide_keys.extend_from_slice(ids);
        self.wide_keys[1..].sort_unstable();
        self.wide_keys.dedup();
        let keys = &self.wide_keys[1..];
        self.idx.clear();
        self.idx.extend(
            ids.iter()
                .map(|k| keys.binary_search(k).map_or(0, |i| i as u32)),
        );
    }

    /// The embedding table's keys.
    pub fn emb_keys(&self) -> &[Key] {
        &self.wide_keys[1..]
    }
}

/// Test-set figures of a model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Evaluation {
    /// ROC AUC of the predicted probabilities.
    pub auc: f64,
    /// Mean log-loss (natural log).
    pub logloss: f64,
}

/// The buffers of training and evaluation steps, kept between steps.
pub struct Trainer {
    fm: Fm,
    batch: Batch,
    wide: Vec<f32>,
    emb: Vec<f32>,
    grads: Grads,
    wide_grads: Vec<f32>,
}

impl Trainer {
    /// A trainer of a factorization machine of embedding dimension `dim`.
    pub fn new(dim: usize) -> Trainer {
        Trainer {
            fm: Fm::new(dim),
            batch: Batch::default(),
            wide: Vec::new(),
            emb: Vec::new(),
            grads: Grads::default(),
            wide_grads: Vec::new(),
        }
    }

    /// Pulls the rows of the batch's keys.
    fn pull(&mut self, store: &mut dyn Store) -> Result<()> {
        let (n, dim) = (self.batch.wide_keys.len(), self.fm.dim());
        self.wide.resize(n, 0.0);
        self.emb.resize((n - 1) * dim, 0.0);
        let b = &self.batch;
        store.pull(&b.wide_keys, &mut self.wide, b.emb_keys(), &mut self.emb)
    }

    /// One step on `rows` of `data` (module docs); returns their mean training log-loss
    /// before the step.
    ///
    /// # Errors
    /// The store's.
    pub fn step(
        &mut self,
        store: &mut dyn Store,
        data: &Dataset,
        rows: Range<usize>,
    ) -> Result<f64> {
        self.batch.build(data, rows.clone());
        self.pull(store)?;
        let params = Rows {
            w0: self.wide[0],
            w: &self.wide[1..],
            v: &self.emb,
        };
        let labels = &data.labels[rows];
        let loss = self.fm.batch_gradient(
            &params,
            &self.batch.idx,
            data.fields,
            labels,
            &mut self.grads,
        );
        self.wide_grads.clear();
        self.wide_grads.push(self.grads.w0);
        self.wide_grads.extend_from_slice(&self.grads.w);
        let b = &self.batch;
        store.push(&b.wide_keys, &self.wide_grads, b.emb_keys(), &self.grads.v)?;
        Ok(loss)
    }

    /// One pass over `data` in minibatches of `batch` rows (the last may be smaller), calling
    /// `each` after every step; returns the mean of the steps' training losses.
    ///
    /// # Errors
    /// The store's.
    pub fn epoch(
        &mut self,
        store: &mut dyn Store,
        data: &Dataset,
        batch: usize,
        mut each: impl FnMut(),
    ) -> Result<f64> {
        let steps = data.rows().div_ceil(batch.max(1));
        let mut total = 0.0;
        for s in 0..steps {
            let rows = s * batch..((s + 1) * batch).min(data.rows());
            total += self.step(store, data, rows)?;
            each();
        }
        Ok(total / steps.max(1) as f64)
    }

    /// The predicted click probability of every row of `data`, pulling the rows of `chunk`
    /// samples at a time.
    ///
    /// # Errors
    /// The store's.
    pub fn predict(
        &mut self,
        store: &mut dyn Store,
        data: &Dataset,
        chunk: usize,
    ) -> Result<Vec<f32>> {
        let chunk = chunk.max(1);
        let mut p = Vec::with_capacity(data.rows());
        for start in (0..data.rows()).step_by(chunk) {
            let rows = start..(start + chunk).min(data.rows());
            self.batch.build(data, rows);
            self.pull(store)?;
            let params = Rows {
                w0: self.wide[0],
                w: &self.wide[1..],
                v: &self.emb,
            };
            for s in self.batch.idx.chunks_exact(data.fields) {
                p.push(sigmoid(self.fm.logit(&params, s)));
            }
        }
        Ok(p)
    }

    /// AUC and log-loss of the current model on `data`.
    ///
    /// # Errors
    /// The store's.
    pub fn evaluate(&mut self, store: &mut dyn Store, data: &Dataset) -> Result<Evaluation> {
        let p = self.predict(store, data, 4096)?;
        Ok(Evaluation {
            auc: auc(&p, &data.labels),
            logloss: logloss(&p, &data.labels),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_dedupes_and_indexes_its_keys() {
        let data = Dataset {
            fields: 2,
            index: vec![0, 1, 2],
            ids: vec![9, 4, 4, 7, 9, 9],
            labels: vec![1.0, 0.0, 1.0],
            truth: vec![0.5; 3],
        };
        let mut b = Batch::default();
        b.build(&data, 1..3);
        assert_eq!(b.wide_keys, vec![BIAS_KEY, 4, 7, 9]);
        assert_eq!(b.emb_keys(), &[4, 7, 9]);
        assert_eq!(b.idx, vec![0, 1, 2, 2]);
    }
}
