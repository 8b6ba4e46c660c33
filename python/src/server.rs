//! `run_server`: a server node's key-value service from Python, with pslite's default handler
//! (sum pushes, answer pulls; every dtype) or a Python callable (one dtype; the slow path: the
//! GIL is taken for every request), and embedding tables beside it (`tables.rs`).

use crate::buffers::{input, slice, DType, Lens, PyDType, PyValue};
use crate::errors::{check, invalid};
use crate::tables;
use crate::PyPostoffice;
use numpy::PyArray1;
use pslite::kv::pairs::check_lens;
use pslite::kv::table::TableSpec;
use pslite::kv::{KVPairs, KVRequest, ReqMeta};
use pslite::{KVServer, Postoffice, RequestHandler, Role};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;

/// What a Python handler learns about a request besides its pairs (pslite's `ReqMeta`).
#[pyclass(frozen, get_all, name = "ReqMeta", module = "pslite")]
pub struct PyReqMeta {
    /// The application command (0 for plain push and pull).
    cmd: i32,
    /// The request carries values to apply.
    push: bool,
    /// The answer must carry the keys' values.
    pull: bool,
    /// The requesting worker's node id.
    sender: i32,
    /// The worker's timestamp.
    timestamp: i32,
}

#[pymethods]
impl PyReqMeta {
    fn __repr__(&self) -> String {
        format!(
            "ReqMeta(cmd={}, push={}, pull={}, sender={}, timestamp={})",
            self.cmd, self.push, self.pull, self.sender, self.timestamp
        )
    }
}

/// A handler that calls Python: `handler(meta, keys, vals, lens)` with NumPy copies of the
/// request's arrays; for a pull it returns the keys' values (`vals`, or `(vals, lens)`).
struct PyHandler {
    f: Py<PyAny>,
    dtype: DType,
}

impl PyHandler {
    fn call<V: PyValue>(
        &self,
        py: Python<'_>,
        meta: &ReqMeta,
        req: &KVRequest<'_, V>,
    ) -> PyResult<Option<(Vec<V>, Vec<u32>)>> {
        let m = PyReqMeta {
            cmd: meta.cmd,
            push: meta.push,
            pull: meta.pull,
            sender: meta.sender,
            timestamp: meta.timestamp,
        };
        let args = (
            m,
            PyArray1::from_slice(py, &req.keys),
            PyArray1::from_slice(py, &req.vals),
            PyArray1::from_slice(py, &req.lens),
        );
        let got = self.f.bind(py).call1(args)?;
        if !meta.pull {
            return Ok(None);
        }
        if got.is_none() {
            return Err(PyValueError::new_err(format!(
                "it returned None for a pull of {} keys: return their values (an array of {}), \
                 or (vals, lens)",
                req.keys.len(),
                self.dtype.numpy()
            )));
        }
        let (vals, lens) = match got.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>() {
            Ok((v, l)) => (v, Some(l)),
            Err(_) => (got, None),
        };
        let vals = slice(&input::<V>(
            &vals,
            "the handler's returned vals",
            self.dtype,
        )?)
        .to_vec();
        let lens = Lens::get(lens.as_ref())?
            .as_option()
            .map(<[u32]>::to_vec)
            .unwrap_or_default();
        Ok(Some((vals, lens)))
    }
}

impl<V: PyValue> RequestHandler<V> for PyHandler {
    fn handle(&mut self, meta: &ReqMeta, req: KVRequest<'_, V>) -> Result<KVPairs<V>, String> {
        let answer = Python::attach(|py| {
            self.call(py, meta, &req).map_err(|e| {
                // The traceback goes to this server's stderr; the worker gets the text.
                e.display(py);
                let name = e
                    .get_type(py)
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "exception".into());
                format!("the Python handler raised {name}: {}", e.value(py))
            })
        })?;
        let Some((vals, lens)) = answer else {
            return Ok(KVPairs::default());
        };
        check_lens(req.keys.len(), vals.len(), &lens).map_err(|e| {
            format!(
                "the Python handler's answer for {} keys: {e}",
                req.keys.len()
            )
        })?;
        Ok(KVPairs {
            keys: req.keys.into_owned(),
            vals,
            lens,
        })
    }
}

/// What `run_server` serves application `app_id` with.
enum Handler {
    /// The default handler for every dtype (but `float32` when a table serves `app_id`).
    Sums,
    /// A Python callable for one dtype.
    Python(PyHandler),
}

/// Serves application `app_id` on this server node, and the embedding tables `tables`, until
/// every node finalized, then finalizes it; the GIL is released meanwhile (a Python handler
/// takes it per request).
///
/// `handler="sum"`: pslite's default handler (pushes are summed into the stored values, pulls
/// answered with them) for every dtype. A callable: `handler(meta, keys, vals, lens)` for
/// requests of `dtype` (default float32), with `meta` a `ReqMeta`, `keys` uint64, `vals` the
/// pushed values (empty for a pull), `lens` uint32 (empty: an even split); for a pull it
/// returns the values of `keys` (an array of `dtype`) or `(vals, lens)`. Its exception is the
/// worker's `pslite.Error` ("server rank 0 (id 8) answered with an error: the Python handler
/// raised KeyError: …"), and the server goes on serving. This is the slow path: every request
/// takes the GIL and copies its arrays.
///
/// `tables`: `pslite.Table` objects or spec lines, each served as its application's float32
/// requests (`pslite-server --table`); a table on `app_id` takes that application's float32
/// requests from the "sum" handler, which serves the other dtypes.
///
/// Raises `InvalidArgumentError` on a postoffice that is not a server's, for a handler that
/// is neither "sum" nor callable, for a bad table spec (the text of `pslite-server --table`),
/// two tables of one application, or a table on `app_id` beside a float32 callable, all before
/// anything is served; for a budget too small for one row when its table is made (the tables
/// made before it are stopped again). `PeerLostError` if a node was lost.
#[pyfunction]
#[pyo3(
    signature = (po, handler = None, dtype = None, app_id = 0, tables = None),
    text_signature = "(po, handler='sum', dtype=None, app_id=0, tables=None)"
)]
pub fn run_server(
    py: Python<'_>,
    po: &Bound<'_, PyPostoffice>,
    handler: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    app_id: i32,
    tables: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let p = po.get().po.clone();
    if p.role() != Role::Server {
        return Err(invalid(format!(
            "run_server needs a server's postoffice; this one is the {}'s",
            p.role().name()
        )));
    }
    let specs = tables::specs_of(tables)?;
    if let Some(app) = specs
        .iter()
        .enumerate()
        .find(|&(i, s)| specs[..i].iter().any(|t| t.app == s.app))
        .map(|(_, s)| s.app)
    {
        return Err(invalid(format!(
            "run_server(tables=…): two tables for application {app}: one table per application id"
        )));
    }
    let table_on_app = specs.iter().any(|s| s.app == app_id);
    let handler = handler_of(handler, dtype, app_id, table_on_app)?;
    // A server restoring a checkpoint (PS_CHECKPOINT_DIR) reads it here: without the GIL.
    let mut servers: Vec<Box<dyn Send>> = Vec::new();
    let made = serve_all(py, &p, app_id, &specs, handler, &mut servers);
    let r = match made {
        Ok(()) => po.get().finalize_inner(py),
        Err(e) => Err(e),
    };
    // A Python handler's thread may be waiting for the GIL: drop (join) it without holding it.
    py.detach(move || drop(servers));
    r
}

/// The handler `run_server(handler=…, dtype=…)` names: pslite's sums, or a Python callable
/// for requests of `dtype` (not float32 when a table serves `app_id`: `table_on_app`).
///
/// # Errors
/// `InvalidArgumentError` for a handler that is neither "sum" nor callable, or a float32
/// callable beside a table on `app_id`.
fn handler_of(
    handler: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    app_id: i32,
    table_on_app: bool,
) -> PyResult<Handler> {
    Ok(match handler {
        None => Handler::Sums,
        Some(h) if h.extract::<String>().is_ok_and(|s| s == "sum") => Handler::Sums,
        Some(h) if h.is_callable() => {
            let dtype = DType::from_py(dtype)?;
            if dtype == DType::F32 && table_on_app {
                return Err(invalid(format!(
                    "run_server: a table serves application {app_id}'s float32 requests, and so \
                     would the handler: give the handler another dtype or app_id, or the table \
                     another app"
                )));
            }
            Handler::Python(PyHandler {
                f: h.clone().unbind(),
                dtype,
            })
        }
        Some(h) => {
            return Err(invalid(format!(
                "run_server(handler={}): expected \"sum\" or a callable handler(meta, keys, \
                 vals, lens)",
                h.repr().map(|r| r.to_string()).unwrap_or_default()
            )))
        }
    })
}

/// Makes the servers of `run_server` into `servers`: the tables first, then `handler`'s.
fn serve_all(
    py: Python<'_>,
    p: &Arc<Postoffice>,
    app_id: i32,
    specs: &[TableSpec],
    handler: Handler,
    servers: &mut Vec<Box<dyn Send>>,
) -> PyResult<()> {
    if !specs.is_empty() {
        let made = check(py.detach(|| pslite::kv::table::serve_tables(p, specs)))?;
        servers.extend(made.into_iter().map(|s| Box::new(s) as Box<dyn Send>));
    }
    match handler {
        Handler::Sums => {
            let table_on_app = specs.iter().any(|s| s.app == app_id);
            let dtypes: Vec<DType> = DType::VALUES
                .into_iter()
                .filter(|&d| !(d == DType::F32 && table_on_app))
                .collect();
            servers.extend(check(
                py.detach(|| pslite::kv::server::serve_sums_of(p, app_id, &dtypes)),
            )?);
        }
        Handler::Python(ph) => servers.push(pslite::with_value_type!(ph.dtype,
            V => serve::<V>(py, p, app_id, ph)?,
            None => unreachable!("PyDType::from_py gives one of DType::VALUES"))),
    }
    Ok(())
}

/// A `KVServer` of `V` serving `app_id` with `handler`, made without the GIL (a server with
/// a checkpoint restores it here).
fn serve<V: PyValue>(
    py: Python<'_>,
    p: &Arc<Postoffice>,
    app_id: i32,
    handler: impl RequestHandler<V>,
) -> PyResult<Box<dyn Send>> {
    let server = check(py.detach(|| KVServer::<V>::new(p, app_id, handler)))?;
    Ok(Box::new(server))
}
