//! Membership: this node, the node table the scheduler sent, and this node's waits on them
//! (start-up, barriers, the scheduler's silence), with the barrier itself
//! ([`Postoffice::barrier`]). Registration and heartbeats are in [`super::join`].

use super::{failure, Postoffice, Range, ALL_GROUP, SCHEDULER};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::wire::{BarrierWait, ControlMsg, Message, Meta, Node};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
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
    /// The barrier this node waits in, and the barriers it passed.
    pub barrier: Barriers,
    pub last_from_scheduler: Option<Instant>,
    /// Since when this node re-registers with whichever scheduler answers at the scheduler's
    /// address (the scheduler went silent; [`super::join::heartbeat_loop`]).
    pub rejoining: Option<Instant>,
    /// When a wait last looked at the scheduler's silence (a long gap: this process was paused).
    pub last_check: Option<Instant>,
    /// A failure of this node's application that did not stop it
    /// ([`Postoffice::fail_application`]): `finalize` ends as `finalize_failed` with it.
    pub app_failure: Option<String>,
    /// `finalize` (or `finalize_failed`) was called: the last barrier is sent or about to be.
    pub finalizing: bool,
    /// (Worker) Its bounded-staleness clock and the floor it heard of ([`super::staleness`]).
    pub clock: super::clocks::Gate,
}

/// The barrier a node waits in and the barriers it passed, as it tells a scheduler it
/// re-registers with ([`crate::wire::Rejoin`]).
#[derive(Default)]
pub(super) struct Barriers {
    /// The release of the barrier waited in, once it came.
    pub result: Option<Result<()>>,
    /// The group of the barrier this node waits in.
    pub group: Option<i32>,
    /// Since when it waits.
    pub since: Option<Instant>,
    /// Which barrier of the group it is ([`crate::wire::BarrierWait::number`]), its timeout
    /// and this node's application error.
    pub wait: BarrierWait,
    /// This node passed (or, as a replacement, skipped) the start-up barrier.
    pub started: bool,
    /// Per group, the barriers completed after the start-up barrier.
    pub done: BTreeMap<i32, u64>,
}

impl Barriers {
    /// The barrier waited in, if any, as a re-registration tells it.
    pub(super) fn waiting(&self) -> Option<BarrierWait> {
        self.group.map(|_| self.wait.clone())
    }

    /// A barrier of `group` begins: numbered ([`BarrierWait::number`]).
    fn begin(&mut self, group: i32, timeout: Option<Duration>, failed: Option<String>) {
        let number = if group == ALL_GROUP && !self.started {
            0
        } else {
            self.done.get(&group).copied().unwrap_or(0) + 1
        };
        self.result = None;
        self.group = Some(group);
        self.since = Some(Instant::now());
        self.wait = BarrierWait {
            group,
            number,
            timeout_ms: timeout.map_or(0, |t| t.as_millis() as u64),
            failed,
        };
    }

    /// The barrier begun last completed.
    fn passed(&mut self) {
        match self.wait.number {
            0 => self.started = true,
            n => {
                self.done.insert(self.wait.group, n);
            }
        }
    }
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
    /// Held from a barrier's numbering to its arrival's send, and from reading the barriers
    /// for a re-registration to its send: a new scheduler, which ignores the arrivals of a
    /// node that has not re-registered, learns of the barrier from one or the other.
    pub arrival: Mutex<()>,
    /// Key ranges of the servers, in rank order, at the start (key layout 0).
    pub ranges: Vec<Range>,
    /// The servers' key layout and its resizes ([`super::resize`]).
    pub resizing: super::resize::Resizing,
}

impl Membership {
    /// The membership of node `me`, whose cluster has `servers` servers.
    pub(super) fn new(me: Node, servers: usize) -> Membership {
        Membership {
            me: RwLock::new(me),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            barrier_lock: Mutex::new(()),
            arrival: Mutex::new(()),
            ranges: super::range::server_key_ranges(servers),
            resizing: super::resize::Resizing::new(servers),
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
            st = crate::sync::wait_timeout(&self.cv, st, TICK);
        }
    }
}

/// A barrier of `group` (`failed`: this node's application failed with that error, which
/// fails the barrier for every member once it completes).
pub(super) fn barrier_with(
    po: &Postoffice,
    group: i32,
    timeout: Option<Duration>,
    failed: Option<String>,
) -> Result<()> {
    let _one = lock(&po.node.barrier_lock);
    {
        let _arrival = lock(&po.node.arrival);
        {
            let mut st = lock(&po.node.state);
            st.barrier.begin(group, timeout, failed.clone());
            st.last_check = None;
        }
        arrive(po, group, timeout, failed)?;
    }
    // The scheduler answers a timed barrier itself; this grace covers a scheduler that died.
    let deadline = timeout.map(|t| Instant::now() + t + Duration::from_secs(5));
    let mut scheduler_gone = false;
    let r = po.node.wait(|st, now| {
        // A loss fails the job: a barrier fails with it, even one the scheduler released
        // (a server waiting in `finalize` counts as arrived there until its loss is
        // declared, while this node may have learnt it from a failed channel).
        if let Some(e) = po.failures.first() {
            return Some(Err(e));
        }
        if let Some(r) = st.barrier.result.take() {
            if r.is_ok() {
                st.barrier.passed();
            }
            return Some(r);
        }
        if po.life.stopped.load(Ordering::Acquire) {
            return Some(Err(Error::Stopped));
        }
        if deadline.is_some_and(|d| now >= d) {
            return Some(Err(Error::Timeout(format!(
                "barrier of group {group}: no answer from the scheduler (id 1)"
            ))));
        }
        let silent = scheduler_silent(po, st, now, group);
        scheduler_gone = silent.is_some();
        silent
    });
    if let Err(e @ Error::Timeout(_)) = &r {
        // While this node still counts as waiting in the barrier: the block says so.
        crate::waits::timed_out(e);
    }
    lock(&po.node.state).barrier.since = None;
    if let (true, Err(e)) = (scheduler_gone, &r) {
        // Recorded like any loss: this node's sockets are aborted at shutdown.
        super::failure::mark_lost(
            po,
            SCHEDULER,
            failure::LossCause::SchedulerSilent,
            e.clone(),
        );
    }
    r
}

/// An error when the scheduler has not been heard of for [`super::failure::scheduler_patience`] while this
/// node waits in a barrier of `group`. Waits look at least every [`TICK`]: a gap longer
/// than [`PAUSED`](super::scheduler::PAUSED) means this process was paused, and the scheduler gets a whole timeout again (its answer,
/// maybe NODE_LOST for this node, may be waiting unread).
fn scheduler_silent(
    po: &Postoffice,
    st: &mut State,
    now: Instant,
    group: i32,
) -> Option<Result<()>> {
    let (patience, why) = super::failure::scheduler_patience(po);
    let silent = super::failure::scheduler_silent(
        &mut st.last_from_scheduler,
        &mut st.last_check,
        now,
        patience,
    );
    (silent && po.my_id() != SCHEDULER).then(|| {
        Err(Error::PeerLost(format!(
            "scheduler (id 1): {why}, while waiting in a barrier of group {group}"
        )))
    })
}

/// Tells the scheduler this node arrived at a barrier of `group` (with `failed`: its
/// application's error).
pub(super) fn arrive(
    po: &Postoffice,
    group: i32,
    timeout: Option<Duration>,
    failed: Option<String>,
) -> Result<()> {
    if po.my_id() == SCHEDULER {
        let mut wait = lock(&po.node.state).barrier.wait.clone();
        if wait.group != group {
            // Not the barrier this node numbered (the last one's arrival again, with an error).
            wait = BarrierWait {
                group,
                number: u64::MAX,
                ..BarrierWait::default()
            };
        }
        wait.failed = failed;
        super::scheduler::driver::scheduler_arrives(po, &wait, timeout);
        return Ok(());
    }
    let meta = Meta {
        request: true,
        error: failed.clone(),
        ..Meta::for_control(
            SCHEDULER,
            ControlMsg::Barrier {
                group,
                timeout_ms: timeout.map_or(0, |t| t.as_millis() as u64),
                failed: failed.is_some(),
            },
        )
    };
    po.send(Message::new(meta)).map(|_| ())
}

/// [`Postoffice::fail_application`].
pub(super) fn fail_application(po: &Postoffice, error: &str) {
    let finalizing = {
        let mut st = lock(&po.node.state);
        if st.app_failure.is_some() {
            return;
        }
        st.app_failure = Some(error.to_string());
        st.finalizing
    };
    if finalizing {
        if let Err(e) = arrive(po, ALL_GROUP, None, Some(error.to_string())) {
            tracing::warn!("cannot tell the scheduler this node failed: {e}");
        }
    }
}

/// The last barrier (`failed`: this node's application error, or one recorded by
/// [`Postoffice::fail_application`]), then the shutdown.
pub(super) fn end(po: &Postoffice, failed: Option<String>) -> Result<()> {
    let failed = {
        let mut st = lock(&po.node.state);
        st.finalizing = true;
        failed.or_else(|| st.app_failure.clone())
    };
    let r = barrier_with(po, ALL_GROUP, None, failed);
    po.shutdown();
    r
}
