//! What a node does when a peer is gone (issue 12, "fail fast and name the node"; ps-lite's
//! scheduler only logs a dead node and tells nobody).
//!
//! The scheduler declares a node lost when it was silent for longer than
//! `PS_HEARTBEAT_TIMEOUT` ([`super::liveness`]) and sends NODE_LOST, naming it and how long it
//! was silent, to every node — the lost one included, which learns it if it comes back (after a
//! SIGSTOP, say); later heartbeats of a lost node are answered with NODE_LOST again. An RDMA
//! van reports a failed channel the same way ([`VanEvent::PeerLost`]).
//!
//! When the cluster replaces lost nodes (`PS_CHECKPOINT_DIR`, [`super::recovery`]), a lost
//! server or worker is first *awaited*; only a loss without a replacement window is a
//! failure.
//!
//! From then on the job cannot complete: every
//! customer gets [`VanEvent::PeerLost`] (a `KVWorker` fails all its pending requests with it),
//! data requests are refused at [`Postoffice::send`], barriers fail at once, and every node's
//! `finalize` returns the error, so no process exits with status 0.

use super::scheduler::Declared;
use super::{Postoffice, SCHEDULER};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::VanEvent;
use crate::wire::{Command, Control, Message, Meta, Node, NodeId};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A peer this node learnt is gone.
pub(super) struct Loss {
    /// The peer.
    pub peer: NodeId,
    /// Why, as NODE_LOST carries it ("no heartbeat for 10.3 s …").
    pub why: String,
    /// What waits on it fail with, naming it.
    pub error: Error,
}

impl Postoffice {
    /// Records that `peer` is gone with `error` (once per peer; `why` is the reason alone, as
    /// NODE_LOST carries it): wakes every wait, stops resends to it, and tells every customer.
    pub(super) fn mark_lost(&self, peer: NodeId, why: String, error: Error) {
        {
            let mut st = lock(&self.state);
            if loss_of(&st.lost, peer).is_some() {
                return;
            }
            st.lost.push(Loss {
                peer,
                why,
                error: error.clone(),
            });
            st.awaiting.retain(|&a| a != peer);
        }
        self.broken.store(true, Ordering::Release);
        self.cv.notify_all();
        tracing::error!("{error}");
        let whose = (peer != self.my_id()).then_some(peer);
        self.van.peer_lost(whose, &error.to_string());
        if let Some(book) = &self.resend {
            lock(book).forget(peer);
        }
        lock(&self.routes).broadcast(|| VanEvent::PeerLost {
            peer,
            error: error.clone(),
        });
    }

    /// The scheduler refused this node's connection (issue 14: the tokens differ, or one side
    /// has none): the start fails with `error`, which says so.
    pub(super) fn on_refused(&self, error: Error) {
        tracing::error!("{error}");
        let mut st = lock(&self.state);
        if st.fatal.is_none() {
            st.fatal = Some(error);
        }
        self.cv.notify_all();
    }

    /// A peer gone (from the RDMA van: its channel failed): recorded as a loss, unless the
    /// cluster replaces lost servers and workers (the scheduler's NODE_LOST or NODE_REPLACED
    /// decides).
    pub(super) fn on_peer_lost(&self, peer: NodeId, error: Error) {
        let replaced = lock(&self.state).replace_within > 0;
        if replaced && Node::role_of(peer) != Some(crate::wire::Role::Scheduler) {
            tracing::warn!("{error}; awaiting the scheduler's word (lost nodes are replaced)");
            return;
        }
        self.mark_lost(peer, error.to_string(), error);
    }

    /// On a server or worker (its heartbeat thread, at every look, `last_look` the previous):
    /// the scheduler has not answered for `PS_HEARTBEAT_TIMEOUT` — it is a single point of
    /// failure, so its loss ends the job on this node, naming it. A gap of more than
    /// [`PAUSED`](super::scheduler::PAUSED) between looks means this process was paused: the
    /// scheduler gets a whole timeout again.
    pub(super) fn check_scheduler(&self, last_look: &mut Option<Instant>) {
        let timeout = self.cfg.heartbeat_timeout;
        let silent = {
            let mut st = lock(&self.state);
            scheduler_silent(
                &mut st.last_from_scheduler,
                last_look,
                Instant::now(),
                timeout,
            )
        };
        if silent {
            let e = Error::PeerLost(format!(
                "scheduler (id 1): no answer to heartbeats for {:.0} s (PS_HEARTBEAT_TIMEOUT); \
                 the scheduler is a single point of failure: the job ends",
                timeout.as_secs_f64()
            ));
            self.mark_lost(SCHEDULER, e.to_string(), e);
        }
    }

    /// Why a data message `meta` may not be sent now (see [`refusal`]); `None` when it may go.
    pub(super) fn refusal(&self, meta: &Meta) -> Option<Error> {
        if meta.control.is_some() || !self.broken.load(Ordering::Acquire) {
            return None;
        }
        refusal(&lock(&self.state).lost, meta)
    }

    /// Whether `peer` is known to be gone (its data is not delivered any more: the resend book
    /// forgot it, so a duplicate could not be told apart).
    pub(super) fn is_lost(&self, peer: NodeId) -> bool {
        self.broken.load(Ordering::Acquire) && loss_of(&lock(&self.state).lost, peer).is_some()
    }

    /// NODE_LOST from the scheduler: `control.nodes[0]` was declared lost, `meta.error` says
    /// why.
    pub(super) fn on_node_lost(&self, meta: &Meta, control: &Control) {
        let Some(node) = control.nodes.first() else {
            tracing::warn!("dropped a NODE_LOST that names no node");
            return;
        };
        let why = meta.error.clone().unwrap_or_default();
        if control.replace_within_ms > 0 && node.id != self.my_id() {
            let window = Duration::from_millis(control.replace_within_ms);
            self.mark_awaiting(node.id, &why, window);
            return;
        }
        let error = if node.id == self.my_id() {
            Error::DeclaredLost(format!(
                "the scheduler declared this node ({}) lost: {why}; it was paused (SIGSTOP, \
                 swapping, a debugger) or cut off for that long — see PS_HEARTBEAT_TIMEOUT in \
                 the README",
                Node::describe(node.id)
            ))
        } else {
            Error::PeerLost(lost_text(node.id, &why))
        };
        self.mark_lost(node.id, why, error);
    }

    /// On the scheduler: `lost` nodes were just declared lost (each with why, and whether a
    /// replacement is awaited). Tells every node (the lost ones too); returns each loss's
    /// reason, to be recorded with [`record_declared`](Self::record_declared) once everything
    /// else this tick sends is sent (recording wakes the scheduler's own `finalize`, which
    /// stops it).
    pub(super) fn announce_lost(&self, lost: Vec<Declared>) -> Vec<(Declared, String)> {
        if lost.is_empty() {
            return Vec::new();
        }
        let nodes = self.nodes();
        let mut declared = Vec::new();
        for d in lost {
            let why = super::recovery::why_text(&d, self.cfg.heartbeat_timeout);
            let Some(node) = nodes.iter().find(|n| n.id == d.id).cloned() else {
                continue;
            };
            let window = d.awaiting.map_or(0, |w| w.as_millis() as u64);
            for n in nodes.iter().filter(|n| n.id != SCHEDULER) {
                if let Err(e) = self.send_node_lost(n.id, &node, &why, window) {
                    tracing::warn!("cannot tell {} of the loss: {e}", Node::describe(n.id));
                }
            }
            declared.push((d, why));
        }
        declared
    }

    /// On the scheduler: records the losses [`announce_lost`](Self::announce_lost) sent.
    pub(super) fn record_declared(&self, declared: Vec<(Declared, String)>) {
        for (d, why) in declared {
            if let Some(window) = d.awaiting {
                self.mark_awaiting(d.id, &why, window);
                continue;
            }
            let error = Error::PeerLost(lost_text(d.id, &why));
            self.mark_lost(d.id, why, error);
        }
    }

    /// On the scheduler: a heartbeat came from `from`; if it was declared lost, tells it so
    /// again (it may have missed the first NODE_LOST). True when it was lost.
    pub(super) fn answer_lost(&self, from: NodeId) -> bool {
        if !self.broken.load(Ordering::Acquire) {
            return false;
        }
        let why = {
            let st = lock(&self.state);
            loss_of(&st.lost, from).map(|l| l.why.clone())
        };
        let Some(why) = why else { return false };
        if let Some(node) = self.nodes().into_iter().find(|n| n.id == from) {
            let _ = self.send_node_lost(from, &node, &why, 0);
        }
        true
    }

    fn send_node_lost(&self, to: NodeId, lost: &Node, why: &str, window_ms: u64) -> Result<usize> {
        let control = Control {
            cmd: Some(Command::NodeLost),
            nodes: vec![lost.clone()],
            replace_within_ms: window_ms,
            ..Control::default()
        };
        let meta = Meta {
            error: Some(why.to_string()),
            ..Meta::for_control(to, control)
        };
        self.send(Message::new(meta))
    }
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
fn lost_text(id: NodeId, why: &str) -> String {
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
            why: "no heartbeat for 10.0 s".into(),
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
