//! When the [`Tracker`](super::Tracker) looks for requests to expire: at most once a second,
//! from whichever thread sends a request then, without a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The last look: milliseconds after `born` (an atomic, so the question on every send takes
/// no lock).
pub(super) struct ExpiryClock {
    last: AtomicU64,
    born: Instant,
}

impl ExpiryClock {
    /// No look yet; the first is due a second from now.
    pub(super) fn new() -> ExpiryClock {
        ExpiryClock {
            last: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    /// Whether a look is due at `now`: true once a second has passed since the last one, for
    /// the one thread that records `now` as the last look (false for the others, which find
    /// it recorded or lose the race to record it).
    pub(super) fn due(&self, now: Instant) -> bool {
        let ms = now.saturating_duration_since(self.born).as_millis() as u64;
        let last = self.last.load(Ordering::Relaxed);
        ms >= last + 1000
            && self
                .last
                .compare_exchange(last, ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}
