//! pslite's errors as Python exceptions: the classes live in `python/pslite/_errors.py` (so that
//! `pslite.TimeoutError` can derive from both `pslite.Error` and Python's `TimeoutError`), and
//! every exception carries the Rust error's text unchanged.

use pyo3::prelude::*;

/// The exception class `name` of `pslite._errors`.
fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("pslite._errors")?.getattr(name)
}

/// A Python exception of class `name` (`Error`, `InvalidArgumentError`, `TimeoutError`,
/// `PeerLostError`) with `text`.
pub fn raise(name: &str, text: String) -> PyErr {
    Python::attach(|py| match class(py, name) {
        Ok(cls) => match cls.call1((text.clone(),)) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        },
        // Only when the package is broken (the native module imported on its own).
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(text),
    })
}

/// `pslite.InvalidArgumentError` (a `ValueError` too) for a call the Python layer refuses
/// before Rust sees it (a wrong dtype, a non-contiguous array): pslite's own
/// `Error::InvalidArgument`, so it reads as the Rust checks' errors do.
pub fn invalid(text: impl Into<String>) -> PyErr {
    to_py(pslite::Error::InvalidArgument(text.into()))
}

/// The Python exception of a pslite error: `TimeoutError` for deadlines (`PS_TIMEOUT`),
/// `InvalidArgumentError` for bad calls, `PeerLostError` for lost nodes, `Error` for the rest.
pub fn to_py(e: pslite::Error) -> PyErr {
    use pslite::Error as E;
    let name = match &e {
        E::Timeout(_) => "TimeoutError",
        E::InvalidArgument(_) => "InvalidArgumentError",
        E::PeerLost(_) | E::DeclaredLost(_) => "PeerLostError",
        _ => "Error",
    };
    raise(name, e.to_string())
}

/// `r` with its error as a Python exception.
pub fn check<T>(r: pslite::Result<T>) -> PyResult<T> {
    r.map_err(to_py)
}
