//! `pslite._pslite`: the native module of the `pslite` Python package (PyO3).
//!
//! - this file: the module, [`start`] and the `Postoffice` class;
//! - `worker.rs`: `KVWorker` over any supported dtype;
//! - `server.rs`: `run_server` with the default (sum) handler or a Python callable, and
//!   embedding tables beside it;
//! - `tables.rs`: table specs through pslite's own parser (`table_spec`, `run_server(tables=…)`);
//! - `buffers/`: Python buffers as Rust slices, without copies (`keys.rs`: key and length
//!   arguments), and lent to frames (`lent.rs`: `copy=False`);
//! - `blocking.rs`: cluster-wide waits that Ctrl-C interrupts;
//! - `errors.rs`: pslite's errors as `pslite.Error` and its subclasses.
//!
//! The GIL is released (`Python::detach`) around every call that waits, sends or serves, so
//! other Python threads run meanwhile.

mod blocking;
mod buffers;
mod clicklog;
mod errors;
mod server;
mod tables;
mod unique;
mod worker;

use errors::{check, invalid};
use pslite::config::Overrides;
use pslite::postoffice::{ALL_GROUP, SCHEDULER_GROUP, SERVER_GROUP, WORKER_GROUP};
use pslite::{Config, Postoffice, Role};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Keyword names of `start` and the variables they set.
const KEYWORDS: [(&str, &str); 10] = [
    ("root_uri", "DMLC_PS_ROOT_URI"),
    ("root_port", "DMLC_PS_ROOT_PORT"),
    ("num_servers", "DMLC_NUM_SERVER"),
    ("num_workers", "DMLC_NUM_WORKER"),
    ("node_host", "DMLC_NODE_HOST"),
    ("interface", "DMLC_INTERFACE"),
    ("van", "DMLC_PS_VAN_TYPE"),
    ("verbose", "PS_VERBOSE"),
    ("timeout", "PS_TIMEOUT"),
    ("rank", "PSLITE_RANK"),
];

/// A node's postoffice: membership, barriers, the van. `finalize` (or leaving a `with` block)
/// ends the node.
#[pyclass(frozen, name = "Postoffice", module = "pslite")]
pub struct PyPostoffice {
    pub(crate) po: Arc<Postoffice>,
    /// `finalize`'s result once it returned; held while it runs, so that a second caller
    /// (another thread, `run_server`) waits for the first and gets the same result.
    finalized: Arc<Mutex<Option<pslite::Result<()>>>>,
}

impl PyPostoffice {
    /// Ends the node once; a later or concurrent call gets the first call's result.
    /// Ctrl-C interrupts the wait (see [`blocking::interruptible`]).
    pub(crate) fn finalize_inner(&self, py: Python<'_>) -> PyResult<()> {
        crate::buffers::release_retired(py);
        let (po, done) = (self.po.clone(), self.finalized.clone());
        let r = blocking::interruptible(py, "finalize", move || {
            let mut done = done.lock().unwrap_or_else(|e| e.into_inner());
            done.get_or_insert_with(|| po.finalize()).clone()
        })?;
        check(r)
    }
}

#[pymethods]
impl PyPostoffice {
    /// This node's rank within its role (0-based).
    #[getter]
    fn rank(&self) -> usize {
        self.po.my_rank()
    }

    /// This node's id (scheduler 1, servers 8, 10, …, workers 9, 11, …).
    #[getter]
    fn id(&self) -> i32 {
        self.po.my_id()
    }

    /// `"scheduler"`, `"server"` or `"worker"`.
    #[getter]
    fn role(&self) -> &'static str {
        self.po.role().name()
    }

    /// Number of servers.
    #[getter]
    fn num_servers(&self) -> usize {
        self.po.num_servers()
    }

    /// Number of workers.
    #[getter]
    fn num_workers(&self) -> usize {
        self.po.num_workers()
    }

    /// Where this node serves Prometheus metrics (`PS_METRICS_PORT`), e.g.
    /// `"http://127.0.0.1:41237/metrics"`, or `None`.
    #[getter]
    fn metrics_url(&self) -> Option<String> {
        self.po
            .metrics_addr()
            .map(|a| format!("http://{a}/metrics"))
    }

    /// Blocks until every node of `group` (a sum of `SCHEDULER_GROUP` 1, `SERVER_GROUP` 2,
    /// `WORKER_GROUP` 4; default the workers) called `barrier` with the same group. The GIL is
    /// released while it waits, and Ctrl-C interrupts it.
    ///
    /// Raises `TimeoutError` naming who did not arrive within PS_TIMEOUT; `PeerLostError`
    /// once a node was lost.
    #[pyo3(signature = (group = WORKER_GROUP))]
    fn barrier(&self, py: Python<'_>, group: i32) -> PyResult<()> {
        if !(1..=ALL_GROUP).contains(&group) {
            return Err(invalid(format!(
                "barrier group {group}: expected a sum of SCHEDULER_GROUP (1), SERVER_GROUP (2) \
                 and WORKER_GROUP (4), from 1 to 7"
            )));
        }
        let po = self.po.clone();
        check(blocking::interruptible(py, "barrier", move || {
            po.barrier(group)
        })?)
    }

    /// (Worker) Bounded staleness (SSP): advances this worker's clock by one (call it once per
    /// training step, after its pushes were applied) and returns once the slowest worker is
    /// at most `staleness` clocks behind; `staleness=0` is a barrier of the workers per clock,
    /// `None` never waits. Returns `(clock, seconds waited)`. Ctrl-C interrupts the wait, but
    /// the clock has advanced already: do not call it again for the same step.
    ///
    /// Raises `TimeoutError` after PS_TIMEOUT naming the slowest worker and its clock;
    /// `PeerLostError` once a node was lost; `InvalidArgumentError` on a server. Call
    /// `clocks_done()` after the last step.
    #[pyo3(signature = (staleness = None))]
    fn clock(&self, py: Python<'_>, staleness: Option<u64>) -> PyResult<(u64, f64)> {
        let po = self.po.clone();
        let c = check(blocking::interruptible(py, "clock", move || {
            po.clock(staleness)
        })?)?;
        Ok((c.clock, c.waited.as_secs_f64()))
    }

    /// (Worker) This worker takes no more steps: the other workers no longer wait for its
    /// clock. Call it after the last step; a server ignores it.
    fn clocks_done(&self) -> PyResult<()> {
        check(self.po.clocks_done())
    }

    /// Elastic servers: moves every key of server `server` (a rank) to the other servers
    /// (`add=False`), or gives that server, holding none, a share again (`add=True`), while
    /// every worker goes on pushing; returns `(epoch, bytes, seconds)` once every new owner
    /// holds its rows. The GIL is released while it waits, and Ctrl-C interrupts it.
    ///
    /// Raises `InvalidArgumentError` with the scheduler's refusal (another resize moving
    /// keys, the only server, one that holds keys already or none);
    /// `TimeoutError` when it did not settle within PS_TIMEOUT.
    #[pyo3(signature = (server, add = false))]
    fn resize(&self, py: Python<'_>, server: usize, add: bool) -> PyResult<(u64, u64, f64)> {
        if server >= self.po.num_servers() {
            return Err(invalid(format!(
                "server rank {server}: the cluster has {} servers",
                self.po.num_servers()
            )));
        }
        let po = self.po.clone();
        let id = pslite::wire::Node::server_id(server);
        let r = check(blocking::interruptible(py, "resize", move || {
            po.resize(id, add)
        })?)?;
        Ok((r.epoch, r.bytes, r.took.as_secs_f64()))
    }

    /// Ends this node: waits (without deadline, the GIL released, Ctrl-C interrupting it)
    /// until every node finalized, then stops the van. A second call (or one from another
    /// thread) waits for the first and returns its result.
    ///
    /// Raises `PeerLostError` naming a node that was lost.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        self.finalize_inner(py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Finalizes; an exception leaving the block is not swallowed.
    #[pyo3(signature = (exc_type, _exc, _tb))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let r = self.finalize_inner(py);
        match (r, exc_type.filter(|t| !t.is_none())) {
            // The block's own exception matters more than finalize's.
            (Err(e), Some(_)) => {
                eprintln!("pslite: finalize after an exception failed too: {e}");
                Ok(false)
            }
            (r, _) => r.map(|_| false),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<pslite.Postoffice {} rank {} of {} servers, {} workers>",
            self.po.role().name(),
            self.po.my_rank(),
            self.po.num_servers(),
            self.po.num_workers()
        )
    }
}

/// The role named `name` (`DMLC_ROLE`'s values).
fn role_of(name: &str) -> PyResult<Role> {
    match name.trim() {
        "scheduler" => Ok(Role::Scheduler),
        "server" => Ok(Role::Server),
        "worker" => Ok(Role::Worker),
        other => Err(invalid(format!(
            "role {other:?}: expected \"scheduler\", \"server\" or \"worker\""
        ))),
    }
}

/// Variables set by `start`'s keywords: a short name of [`KEYWORDS`] or a variable's own name
/// (`PS_KEY_CACHE=1`); values as `str()` gives them.
fn overrides(kw: Option<&Bound<'_, PyDict>>) -> PyResult<HashMap<String, String>> {
    let mut vars = HashMap::new();
    for (k, v) in kw.into_iter().flat_map(|d| d.iter()) {
        let k: String = k.extract()?;
        let var = match KEYWORDS.iter().find(|(short, _)| *short == k) {
            Some((_, var)) => var.to_string(),
            None if ["DMLC_", "PS_", "PSLITE_"].iter().any(|p| k.starts_with(p)) => k.clone(),
            None => {
                return Err(invalid(format!(
                    "start({k}=…): unknown setting: expected one of {} or a variable name \
                     (DMLC_*, PS_*, PSLITE_*)",
                    KEYWORDS.map(|(s, _)| s).join(", ")
                )))
            }
        };
        let v = if v.is_instance_of::<pyo3::types::PyBool>() {
            if v.extract::<bool>()? { "1" } else { "0" }.to_string()
        } else {
            v.str()?.to_string()
        };
        vars.insert(var, v);
    }
    Ok(vars)
}

/// A configuration error worded for Python: the binaries' flags it names (`--num-servers`)
/// become `start`'s keywords (`num_servers=`).
fn keywords_for_flags(e: pslite::Error) -> pslite::Error {
    match e {
        pslite::Error::Config(mut text) => {
            for (kw, _) in KEYWORDS {
                let flag = format!("--{}", kw.replace('_', "-"));
                text = text.replace(&flag, &format!("{kw}="));
            }
            pslite::Error::Config(text)
        }
        e => e,
    }
}

/// Starts this process's node and joins the cluster (ps-lite's `ps::Start`): reads the role
/// (`DMLC_ROLE` unless `role` is given) and every setting from the same `DMLC_*`/`PS_*`
/// variables as the Rust binaries, each keyword replacing its variable (`RDMA_*` variables are
/// read from the environment only); blocks, with the GIL released and Ctrl-C interrupting
/// it, until every node joined.
///
/// Raises `pslite.Error` naming a missing or malformed variable, or a node that did not join.
#[pyfunction]
#[pyo3(signature = (role = None, **overrides_kw))]
fn start(
    py: Python<'_>,
    role: Option<&str>,
    overrides_kw: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyPostoffice> {
    let vars = overrides(overrides_kw)?;
    let lookup = |k: &str| vars.get(k).cloned().or_else(|| std::env::var(k).ok());
    let role = match role.map(str::to_string).or_else(|| lookup("DMLC_ROLE")) {
        Some(r) => role_of(&r)?,
        None => {
            return Err(errors::raise(
                "Error",
                "DMLC_ROLE is not set and no role was given: expected \
                 pslite.start(\"scheduler\" | \"server\" | \"worker\") or DMLC_ROLE"
                    .into(),
            ))
        }
    };
    let cfg = Config::from_lookup(role, &Overrides::default(), |k| {
        if k == "DMLC_ROLE" {
            Some(role.name().to_string())
        } else {
            lookup(k)
        }
    });
    let mut cfg = check(cfg.map_err(keywords_for_flags))?;
    // pslite logs to stderr at PS_VERBOSE (or RUST_LOG); nothing else of the Python process
    // changes (the binaries also tune malloc and log the waits block on SIGUSR1).
    pslite::apps::init_tracing(&cfg);
    cfg.role = role;
    let po = check(blocking::interruptible(py, "start", move || {
        Postoffice::start(cfg)
    })?)?;
    Ok(PyPostoffice {
        po,
        finalized: Arc::new(Mutex::new(None)),
    })
}

/// The native module.
#[pymodule]
fn _pslite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPostoffice>()?;
    m.add_class::<worker::PyKVWorker>()?;
    m.add_class::<server::PyReqMeta>()?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(server::run_server, m)?)?;
    m.add_function(wrap_pyfunction!(tables::table_spec, m)?)?;
    m.add_function(wrap_pyfunction!(clicklog::click_log, m)?)?;
    m.add_function(wrap_pyfunction!(clicklog::roc_auc, m)?)?;
    m.add_function(wrap_pyfunction!(unique::unique_keys, m)?)?;
    m.add("SCHEDULER_GROUP", SCHEDULER_GROUP)?;
    m.add("SERVER_GROUP", SERVER_GROUP)?;
    m.add("WORKER_GROUP", WORKER_GROUP)?;
    m.add("ALL_GROUP", ALL_GROUP)?;
    m.add(
        "DTYPES",
        pslite::DType::VALUES
            .map(<pslite::DType as buffers::PyDType>::numpy)
            .to_vec(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
