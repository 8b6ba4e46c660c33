//! The repository's synthetic click log and its measure, for Python models: `click_log`
//! makes rows of the generator `pslite-launch … ctr` trains on (`pslite::apps::ctr::gen`), and
//! `auc` is the exact ROC AUC that `ctr` reports, so that a PyTorch model is measured the way
//! the Rust one is.

use crate::buffers::{input, slice, DType};
use crate::errors::invalid;
use numpy::{PyArray1, PyArrayMethods};
use pslite::apps::ctr::auc;
use pslite::apps::ctr::gen::{GenConfig, Generator, Split};
use pyo3::prelude::*;

/// Rows `0..rows` of `split` ("train" or "test") of the click log of `seed`, `fields` and
/// `vocab`, that fall to shard `shard` of `shards` (row i when i mod shards = shard), in order.
///
/// Returns `(ids, labels, truth)`: `ids` uint64 of shape (n, fields), each a 64-bit feature id
/// (a hash of field and id, never 0); `labels` float32 (n,), 0 or 1; `truth` float32 (n,), the
/// true click probability (its AUC is the best possible). Costs about 0.3 s to build the
/// generator with the defaults, then about 1 µs per row.
///
/// Raises `InvalidArgumentError` naming a bad split, shard, or generator option.
#[pyfunction]
#[pyo3(signature = (split, rows, shard = 0, shards = 1, seed = 1, fields = 26, vocab = 100_000))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn click_log<'py>(
    py: Python<'py>,
    split: &str,
    rows: u64,
    shard: u64,
    shards: u64,
    seed: u64,
    fields: usize,
    vocab: usize,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let split = match split {
        "train" => Split::Train,
        "test" => Split::Test,
        other => {
            return Err(invalid(format!(
                "click_log: split {other:?}: expected \"train\" or \"test\""
            )))
        }
    };
    if shards == 0 || shard >= shards {
        return Err(invalid(format!(
            "click_log: shard {shard} of {shards}: expected 0 ≤ shard < shards"
        )));
    }
    let default = GenConfig::default();
    let cfg = GenConfig {
        seed,
        fields,
        vocab_min: default.vocab_min.min(vocab),
        vocab_max: vocab,
        ..default
    };
    let data = py
        .detach(|| Generator::new(&cfg).map(|g| g.dataset(split, rows, shard, shards)))
        .map_err(|e| invalid(format!("click_log: {e}")))?;
    let n = data.rows();
    let ids = PyArray1::from_vec(py, data.ids).reshape([n, fields])?;
    Ok((
        ids.into_any(),
        PyArray1::from_vec(py, data.labels).into_any(),
        PyArray1::from_vec(py, data.truth).into_any(),
    ))
}

/// The exact ROC AUC of `scores` against `labels` (both float32, one per sample, 1 a
/// positive): the probability that a random positive scores above a random negative, ties
/// counting one half (Mann–Whitney U), as `ctr` reports it. 0.5 with no positive or no
/// negative.
///
/// Raises `InvalidArgumentError` for another dtype, a non-contiguous array, or lengths that
/// differ.
#[pyfunction]
#[pyo3(name = "auc")]
pub fn roc_auc(
    py: Python<'_>,
    scores: &Bound<'_, PyAny>,
    labels: &Bound<'_, PyAny>,
) -> PyResult<f64> {
    let s = input::<f32>(scores, "scores", DType::F32)?;
    let l = input::<f32>(labels, "labels", DType::F32)?;
    let (s, l) = (slice(&s), slice(&l));
    if s.len() != l.len() {
        return Err(invalid(format!(
            "auc: {} scores but {} labels: expected one of each per sample",
            s.len(),
            l.len()
        )));
    }
    Ok(py.detach(|| auc::auc(s, l)))
}
