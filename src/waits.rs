//! "Who waits on whom": when a wait of this process times out, or on `SIGUSR1`,
//! one block is logged that says what every node of the process waits for — its outstanding
//! requests by server with their ages, the barrier it waits in and who the scheduler still
//! misses, when each peer was last heard of — so a hang is diagnosed from one node's log
//! instead of every node's `PS_VERBOSE` output.
//!
//! The postoffice and every `KVWorker` register a [`Waits`] source (held weakly: a source that
//! is gone is skipped). A block after a timeout is logged at most once every
//! [`TIMEOUT_BLOCK_EVERY`] (many requests time out together); on `SIGUSR1` always.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, Weak};
use std::time::{Duration, Instant};

/// What one part of a node (its postoffice, a worker's request tracker) waits for.
pub trait Waits: Send + Sync {
    /// Lines describing what it waits for at `now` (none: nothing), each a complete sentence
    /// naming the node.
    fn waits(&self, now: Instant) -> Vec<String>;
}

/// At most one block after a timeout per this much time.
pub const TIMEOUT_BLOCK_EVERY: Duration = Duration::from_secs(2);

static SOURCES: Mutex<Vec<Weak<dyn Waits>>> = Mutex::new(Vec::new());
/// Milliseconds after [`start`] of the last block logged for a timeout (0: none yet).
static LAST_TIMEOUT_BLOCK: AtomicU64 = AtomicU64::new(0);

fn start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Adds a source to this process's blocks (kept until it is dropped).
pub fn register(source: Weak<dyn Waits>) {
    let mut s = SOURCES.lock().unwrap_or_else(|p| p.into_inner());
    s.retain(|w| w.strong_count() > 0);
    s.push(source);
}

/// The block: a heading naming `why`, then every live source's lines, indented.
pub fn report(why: &str) -> String {
    let sources: Vec<_> = SOURCES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let now = Instant::now();
    let mut out = format!("who waits on whom ({why}):");
    let mut any = false;
    for s in sources {
        for line in s.waits(now) {
            out.push_str("\n  ");
            out.push_str(&line);
            any = true;
        }
    }
    if !any {
        out.push_str("\n  nothing is waited for");
    }
    out
}

/// Logs the block (a warning) for a wait that timed out with `error`, unless one was logged
/// less than [`TIMEOUT_BLOCK_EVERY`] ago.
pub fn timed_out(error: &dyn std::fmt::Display) {
    let ms = start().elapsed().as_millis() as u64 + 1;
    let last = LAST_TIMEOUT_BLOCK.load(Ordering::Relaxed);
    if last != 0 && ms < last + TIMEOUT_BLOCK_EVERY.as_millis() as u64 {
        return;
    }
    if LAST_TIMEOUT_BLOCK
        .compare_exchange(last, ms, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    tracing::warn!("{}", report(&format!("a wait timed out: {error}")));
}

/// Logs the block on every `SIGUSR1` this process gets, from a `ps-sigusr1` thread started
/// once per process (later calls do nothing).
pub fn on_sigusr1() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        start();
        let signals = match signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR1]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot handle SIGUSR1 (who waits on whom): {e}");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("ps-sigusr1".into())
            .spawn(move || {
                let mut signals = signals;
                for _ in signals.forever() {
                    tracing::warn!("{}", report("SIGUSR1"));
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the SIGUSR1 thread: {e}");
        }
    });
}

/// `d` as seconds with one decimal: "2.5 s".
pub fn age(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Fixed(&'static str);
    impl Waits for Fixed {
        fn waits(&self, _now: Instant) -> Vec<String> {
            vec![self.0.to_string()]
        }
    }

    #[test]
    fn a_block_lists_live_sources_only() {
        let a: Arc<dyn Waits> = Arc::new(Fixed("worker rank 0 waits for server rank 1"));
        let b: Arc<dyn Waits> = Arc::new(Fixed("gone"));
        register(Arc::downgrade(&a));
        register(Arc::downgrade(&b));
        drop(b);
        let r = report("test");
        assert!(r.starts_with("who waits on whom (test):"), "{r}");
        assert!(
            r.contains("\n  worker rank 0 waits for server rank 1"),
            "{r}"
        );
        assert!(!r.contains("gone"), "{r}");
    }
}
