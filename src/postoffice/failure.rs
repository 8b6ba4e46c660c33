//! What a node does when a peer is gone (fail fast and name the node; ps-lite's scheduler only
//! logs a dead node and tells nobody).
//!
//! The scheduler declares a node lost when it was silent for longer than
//! `PS_HEARTBEAT_TIMEOUT` ([`super::liveness`]) and sends NODE_LOST, naming it and how long it
//! was silent, to every node — the lost one included, which learns it if it comes back (after a
//! SIGSTOP, say); later heartbeats of a lost node are answered with NODE_LOST again. An RDMA
//! van reports a failed channel the same way ([`crate::van::VanEvent::PeerLost`]).
//!
//! When the cluster replaces lost nodes (`PS_CHECKPOINT_DIR`, [`super::recovery`]), a lost
//! server or worker is first *awaited*; only a loss without a replacement window is a
//! failure.
//!
//! From then on the job cannot complete: every
//! customer gets [`CustomerEvent::PeerLost`] (a `KVWorker` fails all its pending requests with it),
//! data requests are refused at [`Postoffice::send`], barriers fail at once, and every node's
//! `finalize` returns the error, so no process exits with status 0.
//!
//! [`Failures`] is the state (its locks are taken alone, or under the membership state's lock
//! by a wait); the functions below, over the postoffice, are what a loss sets off.

use super::scheduler::{Declared, Why};
use super::CustomerEvent;
use super::{Postoffice, SCHEDULER};
use crate::error::Error;
use crate::sync::lock;
use crate::wire::{Meta, Node, NodeId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a peer is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// (On the scheduler) no heartbeat for `silent`, longer than `PS_HEARTBEAT_TIMEOUT`
    /// (`timeout`).
    Silent {
        /// How long it was silent.
        silent: Duration,
        /// `PS_HEARTBEAT_TIMEOUT`.
        timeout: Duration,
    },
    /// (On the scheduler) a lost node's replacement did not register within `window`
    /// (`PS_RECOVERY_TIMEOUT`).
    NotReplaced {
        /// The replacement window.
        window: Duration,
    },
    /// The scheduler declared it lost (NODE_LOST) for this reason, as it sent it.
    Declared(String),
    /// This node's channel to it failed (the van said so: an RDMA WC error, say).
    ChannelFailed,
    /// (The scheduler) it did not answer heartbeats for `PS_HEARTBEAT_TIMEOUT`.
    SchedulerSilent,
}

impl LossCause {
    /// The scheduler's verdict on a node it declared lost.
    pub(super) fn of(d: &Declared, heartbeat_timeout: Duration) -> LossCause {
        match d.why {
            Why::Silent(silent) => LossCause::Silent {
                silent,
                timeout: heartbeat_timeout,
            },
            Why::NotReplaced(window) => LossCause::NotReplaced { window },
        }
    }

    /// The reason as NODE_LOST carries it ("no heartbeat for 10.2 s (PS_HEARTBEAT_TIMEOUT is
    /// 10 s)"); `None` for a loss only this node saw (its error says why).
    pub(super) fn why(&self) -> Option<String> {
        match self {
            LossCause::Silent { silent, timeout } => Some(format!(
                "no heartbeat for {:.1} s (PS_HEARTBEAT_TIMEOUT is {:.0} s)",
                silent.as_secs_f64(),
                timeout.as_secs_f64()
            )),
            LossCause::NotReplaced { window } => Some(format!(
                "no replacement registered within {:.0} s (PS_RECOVERY_TIMEOUT) after it was lost",
                window.as_secs_f64()
            )),
            LossCause::Declared(why) => Some(why.clone()),
            LossCause::ChannelFailed | LossCause::SchedulerSilent => None,
        }
    }
}

/// A peer this node learnt is gone.
#[derive(Clone, Debug)]
pub(super) struct Loss {
    /// The peer.
    pub peer: NodeId,
    /// Why.
    pub cause: LossCause,
    /// What waits on it fail with, naming it.
    pub error: Error,
}

impl Loss {
    /// Why, as NODE_LOST carries it.
    fn why(&self) -> String {
        self.cause.why().unwrap_or_else(|| self.error.to_string())
    }
}

/// The peers this node knows are gone, and those whose replacement is awaited. Its locks are
/// taken alone (a wait takes `lost` under the membership state's lock).
#[derive(Default)]
pub(super) struct Failures {
    /// In the order learnt.
    lost: Mutex<Vec<Loss>>,
    /// Lost servers and workers whose replacement the scheduler awaits: not a failure yet.
    awaiting: Mutex<Vec<NodeId>>,
    /// `lost` is not empty (read before `lost` is locked, so that sends pay nothing before a
    /// loss).
    broken: AtomicBool,
}

impl Failures {
    /// Records `loss`; false when its peer was recorded before. Its peer is no longer awaited.
    pub(super) fn record(&self, loss: Loss) -> bool {
        let peer = loss.peer;
        {
            let mut lost = lock(&self.lost);
            if loss_of(&lost, peer).is_some() {
                return false;
            }
            lost.push(loss);
        }
        self.broken.store(true, Ordering::Release);
        self.stop_awaiting(peer);
        true
    }

    /// Records that `peer`'s replacement is awaited; false when it already was.
    pub(super) fn await_replacement(&self, peer: NodeId) -> bool {
        let mut awaiting = lock(&self.awaiting);
        if awaiting.contains(&peer) {
            return false;
        }
        awaiting.push(peer);
        true
    }

    /// `peer` is replaced (or lost for good): no longer awaited.
    pub(super) fn stop_awaiting(&self, peer: NodeId) {
        lock(&self.awaiting).retain(|&a| a != peer);
    }

    /// Whether any peer is gone: the job cannot complete.
    pub(super) fn any(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// The first loss's error, if any.
    pub(super) fn first(&self) -> Option<Error> {
        if !self.any() {
            return None;
        }
        lock(&self.lost).first().map(|l| l.error.clone())
    }

    /// Whether `peer` is known to be gone (its data is not delivered any more: the resend book
    /// forgot it, so a duplicate could not be told apart).
    pub(super) fn is_lost(&self, peer: NodeId) -> bool {
        self.any() && loss_of(&lock(&self.lost), peer).is_some()
    }

    /// Why `peer` is gone, as NODE_LOST carries it; `None` when it is not.
    pub(super) fn why_lost(&self, peer: NodeId) -> Option<String> {
        if !self.any() {
            return None;
        }
        loss_of(&lock(&self.lost), peer).map(Loss::why)
    }

    /// Why a data message `meta` may not be sent now (see [`refusal`]); `None` when it may go.
    pub(super) fn refusal(&self, meta: &Meta) -> Option<Error> {
        if meta.control.is_some() || !self.any() {
            return None;
        }
        refusal(&lock(&self.lost), meta)
    }

    /// The losses' errors, in the order learnt.
    pub(super) fn errors(&self) -> Vec<Error> {
        lock(&self.lost).iter().map(|l| l.error.clone()).collect()
    }
}

/// Records that `peer` is gone (once per peer): wakes every wait, stops resends to it, and
/// tells every customer.
pub(super) fn mark_lost(po: &Postoffice, peer: NodeId, cause: LossCause, error: Error) {
    let loss = Loss {
        peer,
        cause,
        error: error.clone(),
    };
    if !po.failures.record(loss) {
        return;
    }
    po.node.wake();
    tracing::error!("{error}");
    let whose = (peer != po.my_id()).then_some(peer);
    po.van.peer_lost(whose, &error.to_string());
    po.resender.forget(peer);
    lock(&po.routes).broadcast(|| CustomerEvent::PeerLost {
        peer,
        error: error.clone(),
    });
}

/// The scheduler refused this node's connection (the tokens differ, or one side
/// has none): the start fails with `error`, which says so.
pub(super) fn on_refused(po: &Postoffice, error: Error) {
    tracing::error!("{error}");
    let mut st = lock(&po.node.state);
    if st.fatal.is_none() {
        st.fatal = Some(error);
    }
    po.node.cv.notify_all();
}

/// A peer gone (from the RDMA van: its channel failed): recorded as a loss, unless the
/// cluster replaces lost servers and workers (the scheduler's NODE_LOST or NODE_REPLACED
/// decides).
pub(super) fn on_peer_lost(po: &Postoffice, peer: NodeId, error: Error) {
    let replaced = super::recovery::replaces_lost(po);
    if replaced && Node::role_of(peer) != Some(crate::wire::Role::Scheduler) {
        tracing::warn!("{error}; awaiting the scheduler's word (lost nodes are replaced)");
        return;
    }
    mark_lost(po, peer, LossCause::ChannelFailed, error);
}

/// On a server or worker (its heartbeat thread, at every look, `last_look` the previous):
/// the scheduler has not answered for [`scheduler_patience`] — its loss ends the job on this
/// node, naming it. A gap of more than [`PAUSED`](super::scheduler::PAUSED) between looks
/// means this process was paused: the scheduler gets a whole timeout again.
pub(super) fn check_scheduler(po: &Postoffice, last_look: &mut Option<Instant>) {
    let (patience, why) = scheduler_patience(po);
    let silent = {
        let mut st = lock(&po.node.state);
        scheduler_silent(
            &mut st.last_from_scheduler,
            last_look,
            Instant::now(),
            patience,
        )
    };
    if silent {
        let e = Error::PeerLost(format!("scheduler (id 1): {why}; the job ends"));
        mark_lost(po, SCHEDULER, LossCause::SchedulerSilent, e);
    }
}

/// How long a server or worker goes on while the scheduler does not answer, and the text
/// that names it once that passed: `PS_HEARTBEAT_TIMEOUT`, and when lost nodes are replaced
/// (`PS_CHECKPOINT_DIR`) `PS_RECOVERY_TIMEOUT` more, for a new scheduler to answer at its
/// address.
pub(super) fn scheduler_patience(po: &Postoffice) -> (Duration, String) {
    let timeout = po.cfg.timing.heartbeat_timeout;
    let window = Duration::from_millis(po.recovery.takeover().replace_within);
    if window.is_zero() {
        let why = format!(
            "no answer to heartbeats for {:.0} s (PS_HEARTBEAT_TIMEOUT); without \
             PS_CHECKPOINT_DIR the scheduler is not replaced",
            timeout.as_secs_f64()
        );
        return (timeout, why);
    }
    let why = format!(
        "no answer to heartbeats for {:.0} s (PS_HEARTBEAT_TIMEOUT) and no new scheduler at \
         {} within {:.0} s more (PS_RECOVERY_TIMEOUT)",
        timeout.as_secs_f64(),
        crate::wire::place(&po.cfg.cluster.root_uri, po.cfg.cluster.root_port),
        window.as_secs_f64()
    );
    (timeout + window, why)
}

/// NODE_LOST from the scheduler: `node` was declared lost, `meta.error` says why; its
/// replacement is awaited for `replace_within_ms` (0: none is).
pub(super) fn on_node_lost(po: &Postoffice, meta: &Meta, node: &Node, replace_within_ms: u64) {
    let why = meta.error.clone().unwrap_or_default();
    if replace_within_ms > 0 && node.id != po.my_id() {
        let window = Duration::from_millis(replace_within_ms);
        super::recovery::mark_awaiting(po, node.id, &why, window);
        return;
    }
    let error = if node.id == po.my_id() {
        Error::DeclaredLost(format!(
            "the scheduler declared this node ({}) lost: {why}; it was paused (SIGSTOP, \
             swapping, a debugger) or cut off for that long — see PS_HEARTBEAT_TIMEOUT in \
             the README",
            Node::describe(node.id)
        ))
    } else {
        Error::PeerLost(lost_text(node.id, &why))
    };
    mark_lost(po, node.id, LossCause::Declared(why), error);
}

/// Whether the scheduler, last heard of at `last_from`, has been silent for longer than
/// `timeout` at `now`, as a looker that last looked at `last_look` sees it (both updated). A
/// gap of more than [`PAUSED`](super::scheduler::PAUSED) between looks means this process was
/// paused: the scheduler counts as heard of now (its answers may be waiting unread).
pub(super) fn scheduler_silent(
    last_from: &mut Option<Instant>,
    last_look: &mut Option<Instant>,
    now: Instant,
    timeout: Duration,
) -> bool {
    let paused = last_look
        .replace(now)
        .is_some_and(|t| now.duration_since(t) > super::scheduler::PAUSED);
    if paused && last_from.is_some() {
        *last_from = Some(now);
    }
    last_from.is_some_and(|t| now.duration_since(t) > timeout)
}

/// The loss of `peer` among `lost`, if it is lost.
fn loss_of(lost: &[Loss], peer: NodeId) -> Option<&Loss> {
    lost.iter().find(|l| l.peer == peer)
}

/// Why data message `meta` may not be sent after the losses `lost`: to a lost peer, its loss;
/// a request to anyone, the first loss (the job cannot complete); an answer to a live peer may
/// go (`None`).
fn refusal(lost: &[Loss], meta: &Meta) -> Option<Error> {
    match loss_of(lost, meta.recver) {
        Some(l) => Some(l.error.clone()),
        None if meta.request => lost.first().map(|l| l.error.clone()),
        None => None,
    }
}

/// The text of a loss the scheduler declared: "server rank 0 (id 8) was declared lost by the
/// scheduler: no heartbeat for 10.2 s (PS_HEARTBEAT_TIMEOUT is 10 s)".
pub(super) fn lost_text(id: NodeId, why: &str) -> String {
    format!(
        "{} was declared lost by the scheduler: {why}",
        Node::describe(id)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(peer: NodeId) -> Loss {
        Loss {
            peer,
            cause: LossCause::Declared("no heartbeat for 10.0 s".into()),
            error: Error::PeerLost(lost_text(peer, "no heartbeat for 10.0 s")),
        }
    }

    fn data(recver: NodeId, request: bool) -> Meta {
        Meta {
            recver,
            request,
            ..Meta::default()
        }
    }

    #[test]
    fn a_silent_scheduler_is_told_from_a_paused_looker() {
        let t0 = Instant::now();
        let sec = Duration::from_secs(1);
        let (mut from, mut look) = (None, None);
        assert!(
            !scheduler_silent(&mut from, &mut look, t0 + 99 * sec, sec),
            "never heard"
        );
        from = Some(t0);
        look = Some(t0);
        assert!(!scheduler_silent(&mut from, &mut look, t0 + sec, 2 * sec));
        assert!(
            scheduler_silent(&mut from, &mut look, t0 + 3 * sec, 2 * sec),
            "silent 3 s"
        );
        // This process stopped for 30 s: the scheduler gets a whole timeout again.
        assert!(!scheduler_silent(
            &mut from,
            &mut look,
            t0 + 33 * sec,
            2 * sec
        ));
        assert_eq!(from, Some(t0 + 33 * sec));
    }

    #[test]
    fn after_a_loss_requests_are_refused_naming_it_and_answers_to_the_living_go() {
        assert_eq!(refusal(&[], &data(8, true)), None, "nothing lost");
        let lost = [loss(8), loss(11)];
        let first = "peer lost: server rank 0 (id 8) was declared lost by the scheduler: no heartbeat for 10.0 s";
        let to_11 = refusal(&lost, &data(11, false)).map(|e| e.to_string());
        assert!(to_11.is_some_and(|t| t.contains("worker rank 1 (id 11) was declared lost")));
        let to_10 = refusal(&lost, &data(10, true)).map(|e| e.to_string());
        assert_eq!(to_10.as_deref(), Some(first), "a request to a live server");
        assert_eq!(
            refusal(&lost, &data(9, false)),
            None,
            "an answer to a live worker"
        );
    }
}
