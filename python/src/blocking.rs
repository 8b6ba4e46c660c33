//! Blocking calls that Ctrl-C can interrupt: the cluster-wide waits with long or no deadlines
//! (`start`, `barrier`, `finalize`, `run_server`).

use crate::errors::raise;
use crossbeam_channel::{bounded, RecvTimeoutError};
use pyo3::prelude::*;
use std::time::Duration;

/// How often a waiting call looks for a signal.
const POLL: Duration = Duration::from_millis(100);

/// Runs `f` on a thread of its own (`name`) and waits for its result with the GIL released,
/// taking the GIL every 100 ms to let Python run its signal handlers: Ctrl-C raises
/// `KeyboardInterrupt` at once, and `f` goes on alone (the node stays in the cluster until the
/// process exits, when its peers see it lost). Only for calls that borrow nothing of the
/// caller's: `f` may outlive the call.
///
/// # Errors
/// The signal handler's exception; `pslite.Error` if the thread cannot start or `f` panics.
pub fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = bounded(1);
    std::thread::Builder::new()
        .name(format!("py-{name}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| raise("Error", format!("cannot start a thread for {name}: {e}")))?;
    loop {
        match py.detach(|| rx.recv_timeout(POLL)) {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(raise(
                    "Error",
                    format!("{name} failed: its thread panicked"),
                ))
            }
        }
    }
}
