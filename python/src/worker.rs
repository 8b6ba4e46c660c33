//! `KVWorker`: pushes and pulls from Python, over any supported dtype (pslite's
//! `KVWorker<V>`, one per dtype, behind one class).
//!
//! Inputs are read in place (the Rust call borrows the NumPy array's memory; the one copy is
//! the one the Rust API makes into the message frames), `pull_into` writes straight into the
//! caller's array, and pulled values come back as NumPy arrays that own the Rust vectors (no
//! copy). The GIL is released for every send and wait.

use crate::buffers::{
    disjoint, input, lend, output, release_retired, slice, slice_mut, span, DType, Keys, Lens,
    PyDType,
};
use crate::errors::{check, invalid};
use crate::PyPostoffice;
use numpy::PyArray1;
use pslite::{KVWorker, Role, Timestamp};
use pyo3::prelude::*;

/// Runs `$body` with `$kv` bound to the `KVWorker` of the `PyKVWorker` `$w` and `$t` naming
/// its dtype's type.
macro_rules! with_worker {
    ($w:expr, $kv:ident, $t:ident => $body:expr) => {{
        let w: &PyKVWorker = $w;
        pslite::with_value_type!(w.dtype,
            $t => {
                let $kv = w
                    .kv
                    .downcast_ref::<KVWorker<$t>>()
                    .expect("a PyKVWorker holds the KVWorker of its dtype");
                $body
            },
            None => unreachable!("PyDType::from_py gives one of DType::VALUES"))
    }};
}

/// The worker side of a key-value application (ps-lite's `KVWorker`, `kv_app.h`).
///
/// Keys are `uint64`, sorted and unique within a call; values are a flat array of the
/// worker's dtype, all keys' values concatenated in key order; `lens` (optional) gives each
/// key's number of values, else every key gets `len(vals) // len(keys)`. A call is split over
/// the servers by key range and returns a timestamp to `wait` on.
#[pyclass(frozen, name = "KVWorker", module = "pslite")]
pub struct PyKVWorker {
    /// The `KVWorker<V>` of `dtype`'s type.
    kv: Box<dyn std::any::Any + Send + Sync>,
    dtype: DType,
    po: Py<PyPostoffice>,
}

impl PyKVWorker {
    /// Sends `op` with the worker's typed buffers; the GIL released.
    fn send(
        &self,
        py: Python<'_>,
        op: pslite::Op,
        keys: &Bound<'_, PyAny>,
        vals: Option<&Bound<'_, PyAny>>,
        lens: Option<&Bound<'_, PyAny>>,
        copy: bool,
    ) -> PyResult<Timestamp> {
        release_retired(py);
        let keys = Keys::get(keys, "keys")?;
        let lens = Lens::get(lens)?;
        with_worker!(self, kv, T => {
            let vals = vals.map(|v| input::<T>(v, "vals", self.dtype)).transpose()?;
            let (k, l) = (keys.as_slice(), lens.as_option().unwrap_or(&[]));
            let options = pslite::RequestOptions::default();
            match vals {
                Some(v) if !copy => {
                    let shared = check(lend(v))?;
                    check(py.detach(|| kv.request_shared(op, k, &shared, l, options)))
                }
                v => {
                    let v = v.as_ref().map_or(&[][..], slice);
                    check(py.detach(|| kv.request(op, k, v, l, options)))
                }
            }
        })
    }
}

#[pymethods]
impl PyKVWorker {
    /// A worker of application `app_id`, customer `customer_id`, carrying values of `dtype`
    /// (float32, float64, int32, int64, uint8, uint32 or uint64; default float32).
    ///
    /// Raises `InvalidArgumentError` if this (app, customer) pair already has a worker in this
    /// process, for another dtype, or on a postoffice that is not a worker's.
    #[new]
    #[pyo3(signature = (po, app_id = 0, customer_id = 0, dtype = None))]
    fn new(
        po: Bound<'_, PyPostoffice>,
        app_id: i32,
        customer_id: i32,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyKVWorker> {
        let dtype = DType::from_py(dtype)?;
        let p = &po.get().po;
        if p.role() != Role::Worker {
            return Err(invalid(format!(
                "KVWorker needs a worker's postoffice; this one is the {}'s",
                p.role().name()
            )));
        }
        let kv: Box<dyn std::any::Any + Send + Sync> = pslite::with_value_type!(dtype,
            V => Box::new(check(KVWorker::<V>::new(p, app_id, customer_id))?),
            None => unreachable!("PyDType::from_py gives one of DType::VALUES"));
        Ok(PyKVWorker {
            kv,
            dtype,
            po: po.unbind(),
        })
    }

    /// The dtype of the values (a `numpy.dtype`).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.dtype.to_py(py)
    }

    /// The postoffice this worker sends through.
    #[getter]
    fn postoffice(&self, py: Python<'_>) -> Py<PyPostoffice> {
        self.po.clone_ref(py)
    }

    /// Pushes `vals` (shape `(sum(lens),)`, the worker's dtype) for `keys` (`uint64`, sorted,
    /// unique); returns the timestamp to `wait` on. The values are read in place and copied
    /// once into the messages, so `vals` may change as soon as this returns. With
    /// `copy=False` they are not copied at all: the messages share `vals`' memory (ps-lite's
    /// `ZPush` of an `SArray`), which must then not change until `wait(ts)` returned.
    ///
    /// Raises `InvalidArgumentError` for unsorted or duplicate keys, lens that do not add up,
    /// a wrong dtype or a non-contiguous array; `Error` if a message cannot be sent.
    #[pyo3(signature = (keys, vals, lens = None, copy = true))]
    fn push(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
        lens: Option<&Bound<'_, PyAny>>,
        copy: bool,
    ) -> PyResult<Timestamp> {
        self.send(py, pslite::Op::Push, keys, Some(vals), lens, copy)
    }

    /// Pulls the values of `keys`; after `wait` or in `take_pulled(ts)` they are returned.
    ///
    /// Raises as `push`.
    fn pull(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Timestamp> {
        self.send(py, pslite::Op::Pull, keys, None, None, true)
    }

    /// Pushes `vals` and pulls the result of the update in one round trip (ps-lite's
    /// `ZPushPull`); `take_pulled(ts)` gives the result. `copy` as in `push`.
    ///
    /// Raises as `push`.
    #[pyo3(signature = (keys, vals, lens = None, copy = true))]
    fn push_pull(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
        lens: Option<&Bound<'_, PyAny>>,
        copy: bool,
    ) -> PyResult<Timestamp> {
        self.send(py, pslite::Op::PushPull, keys, Some(vals), lens, copy)
    }

    /// Blocks, the GIL released, until request `ts` completed. A pull's values stay for
    /// `take_pulled`.
    ///
    /// Raises `TimeoutError` naming the servers that did not answer within PS_TIMEOUT;
    /// `Error` with a server's error text; `InvalidArgumentError` for a timestamp that is not
    /// outstanding.
    fn wait(&self, py: Python<'_>, ts: Timestamp) -> PyResult<()> {
        release_retired(py);
        with_worker!(self, kv, T => check(py.detach(|| kv.wait(ts))))
    }

    /// Waits for pull (or push-pull) `ts` and returns `(keys, vals, lens)` as NumPy arrays
    /// (`uint64`, the dtype, `uint32`) in key order; `lens` is empty when every key has
    /// `len(vals) // len(keys)` values.
    ///
    /// Raises as `wait`.
    fn take_pulled<'py>(
        &self,
        py: Python<'py>,
        ts: Timestamp,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        release_retired(py);
        with_worker!(self, kv, T => {
            let pairs = check(py.detach(|| kv.take_pulled(ts)))?;
            Ok((
                PyArray1::from_vec(py, pairs.keys).into_any(),
                PyArray1::<T>::from_vec(py, pairs.vals).into_any(),
                PyArray1::from_vec(py, pairs.lens).into_any(),
            ))
        })
    }

    /// Pulls `keys` straight into `out` (a writable C-contiguous array of the worker's dtype
    /// holding exactly the pulled values) and waits.
    ///
    /// Raises as `wait`; `InvalidArgumentError` if `out` has the wrong size (the text gives
    /// both), dtype or layout, or is read-only.
    fn pull_into(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        release_retired(py);
        let keys = Keys::get(keys, "keys")?;
        with_worker!(self, kv, T => {
            let out = output::<T>(out, "out", self.dtype)?;
            let k = keys.as_slice();
            disjoint(&out, &[("keys", span(k))])?;
            let o = slice_mut(&out);
            check(py.detach(|| kv.pull_into(k, o)))
        })
    }

    /// Pushes `vals` and pulls the result of the update straight into `out`, then waits
    /// (ps-lite's `ZPushPull` with its output array).
    ///
    /// Raises as `push` and `pull_into`.
    #[pyo3(signature = (keys, vals, out, lens = None))]
    fn push_pull_into(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        lens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        release_retired(py);
        let keys = Keys::get(keys, "keys")?;
        let lens = Lens::get(lens)?;
        with_worker!(self, kv, T => {
            let vals = input::<T>(vals, "vals", self.dtype)?;
            let out = output::<T>(out, "out", self.dtype)?;
            let (k, v, l) = (keys.as_slice(), slice(&vals), lens.as_option());
            let lens_span = l.map_or((0, 0), span);
            disjoint(&out, &[("keys", span(k)), ("vals", span(v)), ("lens", lens_span)])?;
            let o = slice_mut(&out);
            check(py.detach(|| kv.push_pull_into(k, v, l, o)))
        })
    }

    fn __repr__(&self) -> String {
        format!("<pslite.KVWorker dtype={}>", self.dtype.numpy())
    }
}
