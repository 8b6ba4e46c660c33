//! The `ps-receive` thread: takes every van event, handles control commands (ADD_NODE, BARRIER,
//! HEARTBEAT, TERMINATE) and hands data messages and remote writes to customers (ps-lite's
//! `Van::Receiving` and its `Process*Command` functions). On the scheduler it drives the
//! [`Scheduler`](super::scheduler::Scheduler) and sends what it decides.

use super::{reply_meta, Postoffice, SCHEDULER};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::{RemoteWrite, VanEvent};
use crate::wire::{BarrierFailure, Command, ControlMsg, Imm, Message, Meta, Node};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How long the receiving thread waits for an event before it looks whether the node stops:
/// `finalize` waits for it, so this bounds how long ending a node takes after its last barrier.
const RECV_TICK: Duration = Duration::from_millis(10);

impl Postoffice {
    /// The `ps-receive` thread: one van event at a time, then the clock's duties (the
    /// scheduler's liveness and barrier deadlines; expired parked requests).
    pub(super) fn receive_loop(weak: &Weak<Postoffice>) {
        loop {
            let Some(po) = weak.upgrade() else { return };
            if po.life.stopped.load(Ordering::Acquire) {
                return;
            }
            match po.next_event() {
                Ok(Some(VanEvent::Message(msg))) => {
                    po.metrics
                        .received(msg.meta.sender, msg.data_bytes() as u64);
                    po.process(msg)
                }
                Ok(Some(VanEvent::RemoteWrite(w))) => po.deliver_write(w),
                Ok(Some(VanEvent::PeerLost { peer, error })) => po.on_peer_lost(peer, error),
                Ok(Some(VanEvent::Refused(error))) => po.on_refused(error),
                Ok(None) => {}
                Err(Error::Wire(e)) => tracing::warn!("dropped a message: {e}"),
                Err(Error::Stopped) => return,
                Err(e) => {
                    tracing::warn!("receive failed: {e}");
                    std::thread::sleep(super::node::TICK);
                }
            }
            po.scheduler_tick();
            po.expire_parked();
            po.resend_due();
        }
    }

    /// The next van event, waiting at most [`RECV_TICK`] or until acknowledgements are due
    /// (then they are sent first).
    fn next_event(&self) -> Result<Option<VanEvent>> {
        let wait = match self.resender.acks_due_at() {
            Some(due) => match due.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(RECV_TICK),
                _ => {
                    self.flush_acks();
                    RECV_TICK
                }
            },
            None => RECV_TICK,
        };
        self.van.recv(wait)
    }

    fn process(&self, msg: Message) {
        if !self.admit_incoming(&msg.meta) {
            return;
        }
        let Some(cmd) = msg.meta.command() else {
            let over = lock(&self.routes).deliver(msg, Instant::now());
            if let Some(o) = over {
                if let Some(n) = o.warn {
                    tracing::warn!(
                        "refused a request from {}: {}{}",
                        Node::describe(o.msg.meta.sender),
                        o.why,
                        crate::auth::limit::more(n)
                    );
                }
                self.refuse_request(&o.msg.meta, o.why, Vec::new());
            }
            return;
        };
        let scheduler = self.scheduler.is_some();
        if scheduler_only(cmd, scheduler, msg.meta.request) && msg.meta.sender != SCHEDULER {
            tracing::warn!(
                "dropped a {cmd:?} {} from {}: only the scheduler gives it",
                if msg.meta.request {
                    "request"
                } else {
                    "answer"
                },
                Node::describe(msg.meta.sender)
            );
            return;
        }
        let Some(control) = msg.meta.control.clone() else {
            return;
        };
        let from = msg.meta.sender;
        match (control, scheduler, msg.meta.request) {
            (ControlMsg::AddNode { node }, true, true) => self.on_add_node(node),
            (ControlMsg::NodeTable(table), false, false) => self.update_table(&msg.meta, table),
            (
                ControlMsg::Barrier {
                    group,
                    timeout_ms,
                    failed,
                },
                true,
                true,
            ) => {
                let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms));
                let failed = failed.then(|| msg.meta.error.clone().unwrap_or_default());
                self.scheduler_barrier(from, group, timeout, failed);
            }
            (ControlMsg::Released { group, failure }, _, false) => {
                self.barrier_done(group, barrier_result(failure, msg.meta.error))
            }
            (ControlMsg::Heartbeat, true, true) => self.on_heartbeat(&msg.meta),
            (ControlMsg::Heartbeat, false, false) => {}
            (ControlMsg::Ack { seqs }, _, _) => self.resender.on_ack(from, &seqs),
            (
                ControlMsg::NodeLost {
                    node,
                    replace_within_ms,
                },
                false,
                _,
            ) => self.on_node_lost(&msg.meta, &node, replace_within_ms),
            (ControlMsg::NodeReplaced { node, incarnation }, false, request) => {
                if let Some(why) = self.replacement_refusal(&node) {
                    tracing::warn!(
                        "dropped a NODE_REPLACED from {}: {why}",
                        Node::describe(from)
                    );
                    return;
                }
                self.on_node_replaced(&node, incarnation);
                if request {
                    self.confirm_replaced(node, incarnation);
                }
            }
            (ControlMsg::NodeReplaced { node, .. }, true, false) => {
                self.on_replaced_confirmed(from, node.id)
            }
            (ControlMsg::Answered { .. }, false, true) => self.deliver_answered(msg),
            (ControlMsg::Terminate, _, _) => {
                self.life.stopped.store(true, Ordering::Release);
                self.node.cv.notify_all();
            }
            (_, _, request) => tracing::warn!(
                "dropped an unexpected {cmd:?} {} from {}",
                if request { "request" } else { "answer" },
                Node::describe(msg.meta.sender)
            ),
        }
    }

    /// ANSWERED from a worker to this server: handed to the `KVServer` of its application
    /// and value type like a request (parked until that application is served), which checks
    /// its restored checkpoint against it.
    fn deliver_answered(&self, msg: Message) {
        let from = msg.meta.sender;
        if self.cfg.role != crate::wire::Role::Server
            || Node::role_of(from) != Some(crate::wire::Role::Worker)
        {
            tracing::warn!(
                "dropped an ANSWERED from {}: only a worker tells it to a server",
                Node::describe(from)
            );
            return;
        }
        if let Some(o) = lock(&self.routes).deliver(msg, Instant::now()) {
            tracing::warn!(
                "dropped an ANSWERED from {}: {}",
                Node::describe(from),
                o.why
            );
        }
    }

    /// Hands a remote write to the customer whose slot its immediate names (top 8 bits).
    fn deliver_write(&self, w: RemoteWrite) {
        let route = self.memory.route_of_imm(Imm(w.imm));
        match route.and_then(|r| lock(&self.routes).get(&r)) {
            Some(tx) => {
                let _ = tx.send(super::CustomerEvent::RemoteWrite(w));
            }
            None => tracing::warn!(
                "dropped a remote write with immediate {:#x} from {}: no customer",
                w.imm,
                Node::describe(w.from)
            ),
        }
    }

    /// Refuses the parked requests whose application did not appear in time
    /// ([`super::routes::PARK`]; `PS_TIMEOUT` on a replacement).
    fn expire_parked(&self) {
        if !lock(&self.routes).has_parked() {
            return;
        }
        // A replacement restores its applications one by one before serving them: requests
        // sent to it again wait up to PS_TIMEOUT.
        let park = match self.is_replacement() {
            true => super::routes::PARK.max(self.cfg.timeout),
            false => super::routes::PARK,
        };
        let expired = lock(&self.routes).expire(Instant::now(), park);
        for e in expired {
            if e.msg.meta.control.is_some() {
                // ANSWERED for an application this replacement did not serve within the
                // parking time: not checked, and no request to answer.
                tracing::warn!(
                    "dropped an ANSWERED from {} for app {} with values of type {}: not served \
                     here within {:.0} s, so what it answered is not checked",
                    Node::describe(e.msg.meta.sender),
                    e.msg.meta.app_id,
                    e.msg.meta.dtype,
                    park.as_secs_f64()
                );
                continue;
            }
            let why = format!(
                "it serves: {}",
                if e.served.is_empty() {
                    "nothing".to_string()
                } else {
                    e.served.join(", ")
                }
            );
            self.refuse_request(&e.msg.meta, why, e.also);
        }
    }

    /// Answers request `m`, for an application not served here, with an error (`why`: more
    /// about it), and in the same answer the requests of the same customer timestamped `also`;
    /// zero-copy pulls are dropped with a warning (their requester gives up at its own
    /// deadline, `PS_TIMEOUT`).
    fn refuse_request(&self, m: &Meta, why: String, also: Vec<i32>) {
        let what = format!(
            "no KVServer for app {} with values of type {} on {}",
            m.app_id,
            m.dtype,
            Node::describe(self.my_id())
        );
        if m.rendezvous.is_some() {
            let n = also.len() + 1;
            tracing::warn!(
                "dropped {n} zero-copy pull request(s) from {}: {what} ({why})",
                Node::describe(m.sender)
            );
            return;
        }
        let mut meta = reply_meta(m);
        meta.error = Some(format!("{what} ({why})"));
        meta.also_refused = also;
        if let Err(err) = self.send(Message::new(meta)) {
            tracing::warn!("could not answer {}: {err}", Node::describe(m.sender));
        }
    }

    /// The barrier of `group` ended with `r`. Only the barrier this node waits in is released;
    /// a late answer to an older one is dropped.
    pub(super) fn barrier_done(&self, group: i32, r: Result<()>) {
        let mut st = lock(&self.node.state);
        if st.barrier_group == Some(group) {
            st.barrier_result = Some(r);
            st.barrier_group = None;
            self.node.cv.notify_all();
        }
    }
}

/// Whether command `cmd` (a request or answer, received by the scheduler or not) is obeyed
/// only from the scheduler (issue 14): node tables and refusals, barrier releases, heartbeat
/// answers, TERMINATE, NODE_LOST, NODE_REPLACED notices. (With a token the sender is the
/// one its connection proved, [`crate::auth`].)
fn scheduler_only(cmd: Command, at_scheduler: bool, request: bool) -> bool {
    match cmd {
        Command::AddNode | Command::Barrier | Command::Heartbeat => !request,
        Command::Terminate => true,
        Command::NodeLost | Command::NodeReplaced => !at_scheduler,
        _ => false,
    }
}

/// What a barrier release means for the waiting node: `Ok` when it completed; a lost member is
/// [`Error::PeerLost`]; a member whose application failed [`Error::JobFailed`]; a timeout or a
/// refusal [`Error::Timeout`], with the scheduler's text.
pub(super) fn barrier_result(kind: Option<BarrierFailure>, text: Option<String>) -> Result<()> {
    match (kind, text) {
        (None, None) => Ok(()),
        (Some(BarrierFailure::Lost), t) => Err(Error::PeerLost(t.unwrap_or_default())),
        (Some(BarrierFailure::Failed), t) => Err(Error::JobFailed(t.unwrap_or_default())),
        (_, t) => Err(Error::Timeout(t.unwrap_or_default())),
    }
}
