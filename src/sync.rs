//! Lock helpers shared by the layers.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data even if a thread panicked while holding it: every structure behind
/// our mutexes stays consistent between statements, so a poisoned lock is not a reason to stop.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
