//! `unique_keys`: a batch's sorted unique keys and its inverse (`pslite::kv::unique`), for
//! `pslite.torch`'s lookups.

use crate::buffers::Keys;
use numpy::PyArray1;
use pyo3::prelude::*;

/// `unique_keys(ids, what="keys")`: the sorted unique keys of `ids` (uint64, or int64 ≥ 0;
/// any C-contiguous array or CPU tensor, read flat) and the inverse (int64, one per id).
///
/// Raises `InvalidArgumentError` naming `what` as a request's keys do ("ids: a tensor of
/// float32, but this call carries uint64 …", a negative id, a tensor on a GPU), and for
/// 2^32 − 1 ids or more.
#[pyfunction]
#[pyo3(signature = (ids, what = "keys"))]
#[allow(clippy::type_complexity)]
pub fn unique_keys<'py>(
    py: Python<'py>,
    ids: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let ids = Keys::get(ids, what)?;
    let flat = ids.as_slice();
    if flat.len() >= u32::MAX as usize {
        return Err(crate::errors::invalid(format!(
            "{what}: {} ids in one lookup: at most 2^32 − 2",
            flat.len()
        )));
    }
    let (keys, inverse) = py.detach(|| pslite::kv::unique::unique(flat));
    Ok((
        PyArray1::from_vec(py, keys).into_any(),
        PyArray1::from_vec(py, inverse).into_any(),
    ))
}
