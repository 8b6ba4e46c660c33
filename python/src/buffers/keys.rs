//! The key and length arguments of a request: keys as `u64`s (from a `uint64` buffer, or an
//! `int64` one of keys ≥ 0), values per key as `u32`s.

use super::{element_name, slice, typed, untyped, DType};
use crate::errors::invalid;
use pyo3::buffer::{PyBuffer, PyUntypedBuffer};
use pyo3::prelude::*;

/// Keys: a `uint64` buffer, or an `int64` one whose keys are all ≥ 0 (same bits).
pub enum Keys {
    U64(PyBuffer<u64>),
    I64(PyBuffer<i64>),
}

impl Keys {
    /// The keys of `obj` (named `what` in errors).
    ///
    /// # Errors
    /// `InvalidArgumentError`: another element type, a negative key, not C-contiguous.
    pub fn get(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Keys> {
        let buf = untyped(obj, what, DType::U64)?;
        if element_name(&buf) == "int64" {
            let b: PyBuffer<i64> = typed(obj, buf, what, DType::I64, false)?;
            if let Some(i) = slice(&b).iter().position(|&k| k < 0) {
                return Err(invalid(format!(
                    "{what}[{i}] = {} is negative: keys are uint64",
                    slice(&b)[i]
                )));
            }
            return Ok(Keys::I64(b));
        }
        Ok(Keys::U64(typed(obj, buf, what, DType::U64, false)?))
    }

    /// The keys as `u64`s.
    pub fn as_slice(&self) -> &[u64] {
        match self {
            Keys::U64(b) => slice(b),
            // Non-negative i64s have the bits of the same u64s.
            Keys::I64(b) => bytemuck::cast_slice(slice(b)),
        }
    }
}

/// Values per key (`lens`): `None`, a `uint32` buffer (no copy), or any sequence of whole
/// numbers 0…2^32−1 (copied).
pub enum Lens {
    None,
    Buffer(PyBuffer<u32>),
    Owned(Vec<u32>),
}

impl Lens {
    /// The lens of `obj`.
    ///
    /// # Errors
    /// `InvalidArgumentError` for a length that is negative, too large or not a whole number.
    pub fn get(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Lens> {
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            return Ok(Lens::None);
        };
        if let Ok(b) = PyUntypedBuffer::get(obj) {
            if element_name(&b) == "uint32" {
                return Ok(Lens::Buffer(typed(obj, b, "lens", DType::U32, false)?));
            }
        }
        let wide: Vec<i64> = obj
            .try_iter()
            .and_then(|it| it.map(|x| x.and_then(|x| x.extract::<i64>())).collect())
            .map_err(|e| invalid(format!("lens: expected whole numbers, one per key: {e}")))?;
        let lens = wide
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                u32::try_from(l).map_err(|_| {
                    invalid(format!(
                        "lens[{i}] = {l}: expected a length from 0 to 2^32 − 1"
                    ))
                })
            })
            .collect::<PyResult<Vec<u32>>>()?;
        Ok(Lens::Owned(lens))
    }

    /// The lens, `None` for an even split.
    pub fn as_option(&self) -> Option<&[u32]> {
        match self {
            Lens::None => None,
            Lens::Buffer(b) => Some(slice(b)),
            Lens::Owned(v) => Some(v),
        }
    }
}
