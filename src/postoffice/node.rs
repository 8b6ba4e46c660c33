//! Membership: this node, the node table the scheduler sent, and this node's waits on them
//! (start-up, barriers, the scheduler's silence). Registration and heartbeats are in
//! [`super::join`]; barriers in the facade ([`super::Postoffice::barrier`]).

use super::Range;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::wire::Node;
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// How often waiting threads wake to check deadlines.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// This node's side of membership and barriers (every node, the scheduler included).
#[derive(Default)]
pub(super) struct State {
    pub nodes: Vec<Node>,
    pub ready: bool,
    pub fatal: Option<Error>,
    pub barrier_result: Option<Result<()>>,
    /// The group of the barrier this node waits in, and since when.
    pub barrier_group: Option<i32>,
    pub barrier_since: Option<Instant>,
    pub last_from_scheduler: Option<Instant>,
    /// When a wait last looked at the scheduler's silence (a long gap: this process was paused).
    pub last_check: Option<Instant>,
    /// A failure of this node's application that did not stop it
    /// ([`Postoffice::fail_application`]): `finalize` ends as `finalize_failed` with it.
    pub app_failure: Option<String>,
    /// `finalize` (or `finalize_failed`) was called: the last barrier is sent or about to be.
    pub finalizing: bool,
}

/// This node's membership. Lock order: `barrier_lock` (held by a thread waiting in a barrier)
/// → `state`; `me` is taken alone.
pub(super) struct Membership {
    /// This node (its id once the node table arrived).
    pub me: RwLock<Node>,
    pub state: Mutex<State>,
    /// Signalled at every change of `state` (and of a loss, [`super::failure`]).
    pub cv: Condvar,
    /// One barrier at a time.
    pub barrier_lock: Mutex<()>,
    /// Key ranges of the servers, in rank order.
    pub ranges: Vec<Range>,
}

impl Membership {
    /// The membership of node `me`, whose cluster has `servers` servers.
    pub(super) fn new(me: Node, servers: usize) -> Membership {
        Membership {
            me: RwLock::new(me),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            barrier_lock: Mutex::new(()),
            ranges: super::range::server_key_ranges(servers),
        }
    }

    /// Wakes every wait on the state (taking its lock first, so that a wait between its check
    /// and its sleep does not miss a change made outside the state).
    pub(super) fn wake(&self) {
        let _st = lock(&self.state);
        self.cv.notify_all();
    }

    /// Waits on the state until `check` (given the state and the time) returns an answer;
    /// rechecks at every change and at least every [`TICK`].
    pub(super) fn wait<R>(&self, mut check: impl FnMut(&mut State, Instant) -> Option<R>) -> R {
        let mut st: MutexGuard<'_, State> = lock(&self.state);
        loop {
            if let Some(r) = check(&mut st, Instant::now()) {
                return r;
            }
            st = self
                .cv
                .wait_timeout(st, TICK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
