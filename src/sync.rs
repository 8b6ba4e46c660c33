//! Lock helpers shared by the layers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Locks `m`, taking the data even if a thread panicked while holding it: every structure behind
/// our mutexes stays consistent between statements, so a poisoned lock is not a reason to stop.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` for at most `timeout`, giving back the guard (as [`lock`], even if a thread
/// panicked while holding the mutex). Whether it was notified or timed out is not said: the
/// caller looks at the state and the clock again.
pub(crate) fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, timeout)
        .unwrap_or_else(|p| p.into_inner())
        .0
}

/// A named thread that runs until it is told to stop: dropping this tells it (the flag its
/// body polls) and waits for it to end.
pub(crate) struct StoppableThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StoppableThread {
    /// Starts `body` on a thread called `name`; `body` returns once its flag is set.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub(crate) fn spawn(
        name: &str,
        body: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> std::io::Result<StoppableThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&flag))?;
        Ok(StoppableThread {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for StoppableThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
