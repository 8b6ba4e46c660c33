//! A worker process's bytes in flight (`PS_MAX_INFLIGHT_BYTES`): requests sent and
//! not yet answered, shared by every `KVWorker` of the process. A request that does not fit
//! waits until earlier ones complete, for at most `PS_TIMEOUT`, so a loop that never waits
//! keeps bounded memory on this node and on the servers (whose receive queues and parked
//! requests hold what the workers have in flight).
//!
//! The rule ([`fits`]) has no IO; [`Budget`] adds the waiting.

use crate::error::{Error, Result};
use crate::sync::lock;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Whether `n` more bytes may be taken with `used` of `max` taken: when they fit, or when
/// nothing is taken (a request larger than the budget alone still goes, or it never could).
pub fn fits(used: u64, n: u64, max: u64) -> bool {
    used == 0 || used.saturating_add(n) <= max
}

/// The bytes in flight of one process, at most `max` (but for one request alone). Requests
/// that wait for room are served in arrival order, so a stream of small ones cannot keep a
/// large one waiting past its deadline.
pub struct Budget {
    max: u64,
    state: Mutex<State>,
    freed: Condvar,
    /// Bytes in flight, as a metric (`pslite_inflight_bytes`), set under `state`.
    gauge: prometheus_client::metrics::gauge::Gauge,
}

/// Bytes taken, and the tickets of the requests waiting for room, oldest first.
#[derive(Default)]
struct State {
    used: u64,
    queue: VecDeque<u64>,
    next_ticket: u64,
}

impl Budget {
    /// Nothing in flight; at most `max` bytes.
    pub fn new(max: u64) -> Budget {
        Budget {
            max,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
            gauge: Default::default(),
        }
    }

    /// The most bytes in flight (`PS_MAX_INFLIGHT_BYTES`).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes in flight, as a gauge ([`crate::metrics`]' `pslite_inflight_bytes`).
    pub fn gauge(&self) -> prometheus_client::metrics::gauge::Gauge {
        self.gauge.clone()
    }

    /// Bytes in flight now.
    pub fn used(&self) -> u64 {
        lock(&self.state).used
    }

    /// Takes `n` bytes for a request, waiting (behind the requests that waited first) until
    /// they [`fit`](fits), for at most `timeout`; with `may_wait` false (a customer thread,
    /// which settles the answers that free room) takes them at once.
    ///
    /// # Errors
    /// [`Error::Timeout`] when no room was freed for it within `timeout`, naming the bytes in
    /// flight and `PS_MAX_INFLIGHT_BYTES`.
    pub fn take(&self, n: u64, timeout: Duration, may_wait: bool) -> Result<()> {
        let mut st = lock(&self.state);
        if !may_wait || (st.queue.is_empty() && fits(st.used, n, self.max)) {
            st.used += n;
            self.gauge.set(st.used as i64);
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back(ticket);
        loop {
            if st.queue.front() == Some(&ticket) && fits(st.used, n, self.max) {
                st.queue.pop_front();
                st.used += n;
                self.gauge.set(st.used as i64);
                drop(st);
                // The next in line may fit too.
                self.freed.notify_all();
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                st.queue.retain(|&t| t != ticket);
                let used = st.used;
                drop(st);
                self.freed.notify_all();
                let e = Error::Timeout(format!(
                    "a request of {n} bytes waited {:.0} s (PS_TIMEOUT) for room: this \
                     worker's requests in flight hold {used} bytes, and PS_MAX_INFLIGHT_BYTES \
                     is {}; not enough of them completed meanwhile (is every server \
                     answering?)",
                    timeout.as_secs_f64(),
                    self.max
                ));
                crate::waits::timed_out(&e);
                return Err(e);
            }
            st = crate::sync::wait_timeout(&self.freed, st, deadline - now);
        }
    }

    /// Gives back `n` bytes of a request that completed, failed or was given up.
    pub fn give(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut st = lock(&self.state);
        st.used = st.used.saturating_sub(n);
        self.gauge.set(st.used as i64);
        let waiting = !st.queue.is_empty();
        drop(st);
        if waiting {
            self.freed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    proptest! {
        /// Taking only what fits, bytes in flight pass the budget only with one request
        /// alone, and every request can go once nothing else is in flight.
        #[test]
        fn the_rule_bounds_what_is_in_flight(max in 1u64..1000, sizes in prop::collection::vec(1u64..1500, 1..50)) {
            let mut used = 0u64;
            let mut taken: Vec<u64> = Vec::new();
            for n in sizes {
                while !fits(used, n, max) {
                    used -= taken.remove(0); // the oldest completes
                }
                prop_assert!(fits(0, n, max));
                used += n;
                taken.push(n);
                prop_assert!(used <= max || taken.len() == 1);
            }
        }
    }

    /// Requests waiting for room now.
    fn queued(b: &Budget) -> usize {
        lock(&b.state).queue.len()
    }

    /// Waits until `done` holds: another thread's progress, observed in the budget's own
    /// state rather than guessed from elapsed time. The 20 s bound only turns a hang into a
    /// failure.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "20 s passed waiting until {what}"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_request_waits_for_room_and_gives_up_at_its_deadline_naming_the_variable() {
        let b = Arc::new(Budget::new(100));
        b.take(80, Duration::ZERO, true).expect("fits");
        let e = b
            .take(30, Duration::from_millis(50), true)
            .expect_err("no room");
        let text = e.to_string();
        assert!(text.contains("hold 80 bytes"), "{text}");
        assert!(text.contains("PS_MAX_INFLIGHT_BYTES is 100"), "{text}");
        assert_eq!(queued(&b), 0, "a request that gave up leaves the queue");
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.take(30, Duration::from_secs(20), true))
        };
        wait_until("the second request waits", || {
            queued(&b) == 1 || waiter.is_finished()
        });
        assert!(!waiter.is_finished(), "the second request waits");
        assert_eq!(b.used(), 80, "the second request waits");
        b.give(80);
        waiter.join().expect("no panic").expect("room freed");
        assert_eq!(b.used(), 30);
        assert_eq!(queued(&b), 0);
        b.take(500, Duration::ZERO, false)
            .expect("a customer thread never waits");
        assert_eq!(b.used(), 530);
    }

    #[test]
    fn waiting_requests_are_served_in_arrival_order() {
        let b = Arc::new(Budget::new(100));
        b.take(90, Duration::ZERO, true).expect("fits");
        let take = |n: u64| {
            let b = b.clone();
            std::thread::spawn(move || b.take(n, Duration::from_secs(20), true))
        };
        // A large request waits first (90 + 60 does not fit).
        let large = take(60);
        wait_until("the large request queues", || {
            queued(&b) == 1 || large.is_finished()
        });
        assert!(
            !large.is_finished(),
            "60 more bytes do not fit in 100 with 90 taken"
        );
        // Then a small one that would fit now (90 + 5): it waits behind the large one.
        let small = take(5);
        wait_until("the small request queues", || {
            queued(&b) == 2 || small.is_finished()
        });
        assert!(
            !small.is_finished(),
            "the small one waits behind the large one"
        );
        assert_eq!(b.used(), 90, "the small one waits behind the large one");
        // A third that fits only if it goes last: 60 + 5 + 45 > 100, 45 + 5 + 60 > 100.
        let medium = take(45);
        wait_until("the third request queues", || {
            queued(&b) == 3 || medium.is_finished()
        });
        b.give(90);
        // In arrival order the large and the small one go (65 bytes) and the third waits;
        // had the third gone before the large one, the large one would not fit and would
        // time out.
        large.join().expect("no panic").expect("large");
        small.join().expect("no panic").expect("small");
        assert_eq!(b.used(), 65);
        assert!(!medium.is_finished(), "45 more do not fit with 65 taken");
        assert_eq!(queued(&b), 1, "the third one still waits");
        b.give(65);
        medium.join().expect("no panic").expect("medium");
        assert_eq!(b.used(), 45);
        assert_eq!(queued(&b), 0);
    }
}
