//! The `ps-receive` thread: takes every van event, handles control commands (ADD_NODE, BARRIER,
//! HEARTBEAT, TERMINATE) and hands data messages and remote writes to customers (ps-lite's
//! `Van::Receiving` and its `Process*Command` functions). On the scheduler it hands what only
//! the scheduler obeys to its IO (`scheduler/driver.rs`), which drives the sans-IO
//! [`Scheduler`](super::scheduler::Scheduler).

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

/// The `ps-receive` thread: one van event at a time, then the clock's duties (the
/// scheduler's liveness and barrier deadlines; expired parked requests).
pub(super) fn receive_loop(weak: &Weak<Postoffice>) {
    loop {
        let Some(held) = weak.upgrade() else { return };
        let po = held.as_ref();
        if po.life.stopped.load(Ordering::Acquire) {
            return;
        }
        match next_event(po) {
            Ok(Some(VanEvent::Message(msg))) => {
                po.metrics
                    .received(msg.meta.sender, msg.data_bytes() as u64);
                process(po, msg)
            }
            Ok(Some(VanEvent::RemoteWrite(w))) => deliver_write(po, w),
            Ok(Some(VanEvent::PeerLost { peer, error })) => {
                super::failure::on_peer_lost(po, peer, error)
            }
            Ok(Some(VanEvent::Refused(error))) => super::failure::on_refused(po, error),
            Ok(None) => {}
            Err(Error::Wire(e)) => tracing::warn!("dropped a message: {e}"),
            Err(Error::Stopped) => return,
            Err(e) => {
                tracing::warn!("receive failed: {e}");
                std::thread::sleep(super::node::TICK);
            }
        }
        super::scheduler::driver::scheduler_tick(po);
        expire_parked(po);
        po.resend_due();
    }
}

/// The next van event, waiting at most [`RECV_TICK`] or until acknowledgements are due
/// (then they are sent first).
fn next_event(po: &Postoffice) -> Result<Option<VanEvent>> {
    let wait = match po.resender.acks_due_at() {
        Some(due) => match due.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => left.min(RECV_TICK),
            _ => {
                po.flush_acks();
                RECV_TICK
            }
        },
        None => RECV_TICK,
    };
    po.van.recv(wait)
}

/// A received message: admitted ([`super::pipeline`]), then handed to its customer (data)
/// or obeyed (control).
fn process(po: &Postoffice, msg: Message) {
    if !po.admit_incoming(&msg.meta) {
        return;
    }
    match msg.meta.command() {
        None => deliver_data(po, msg),
        Some(cmd) => on_control(po, cmd, msg),
    }
}

/// Hands a data message to its customer; a request the route's bounds refuse is answered
/// with the refusal.
fn deliver_data(po: &Postoffice, msg: Message) {
    let Some(o) = lock(&po.routes).deliver(msg, Instant::now()) else {
        return;
    };
    if let Some(n) = o.warn {
        tracing::warn!(
            "refused a request from {}: {}{}",
            Node::describe(o.msg.meta.sender),
            o.why,
            crate::auth::limit::more(n)
        );
    }
    refuse_request(po, &o.msg.meta, o.why, Vec::new());
}

/// Obeys control message `msg` of kind `cmd` (once its sender may give it): ACK and
/// TERMINATE on every node, the rest on the scheduler ([`scheduler_obeys`](super::scheduler::driver::scheduler_obeys)) or
/// on a server or worker ([`node_obeys`]).
fn on_control(po: &Postoffice, cmd: Command, msg: Message) {
    let scheduler = po.scheduler.is_some();
    let (from, request) = (msg.meta.sender, msg.meta.request);
    if scheduler_only(cmd, scheduler, request) && from != SCHEDULER {
        tracing::warn!(
            "dropped a {cmd:?} {} from {}: only the scheduler gives it",
            kind(request),
            Node::describe(from)
        );
        return;
    }
    let Some(control) = msg.meta.control.clone() else {
        return; // `cmd` came from it: never taken
    };
    let obeyed = match control {
        ControlMsg::Ack { seqs, holder } => {
            if holder == po.recovery.incarnation() {
                po.resender.on_ack(from, &seqs);
            } else {
                tracing::debug!(
                    "dropped an ACK from {} of messages of an earlier holder of this id",
                    Node::describe(from)
                );
            }
            true
        }
        ControlMsg::Terminate => {
            po.life.stopped.store(true, Ordering::Release);
            po.node.wake();
            true
        }
        control if scheduler => super::scheduler::driver::scheduler_obeys(po, control, &msg.meta),
        control => node_obeys(po, control, msg),
    };
    if !obeyed {
        tracing::warn!(
            "dropped an unexpected {cmd:?} {} from {}",
            kind(request),
            Node::describe(from)
        );
    }
}

/// A server or worker obeys `control` (carried by `msg`); false when it is not one a
/// server or worker takes.
fn node_obeys(po: &Postoffice, control: ControlMsg, msg: Message) -> bool {
    let (from, request) = (msg.meta.sender, msg.meta.request);
    match (control, request) {
        (ControlMsg::NodeTable(table), false) => super::join::update_table(po, &msg.meta, table),
        (ControlMsg::Released { group, failure }, false) => {
            barrier_done(po, group, barrier_result(failure, msg.meta.error))
        }
        (ControlMsg::Heartbeat, false) => super::join::heartbeat_answered(po),
        (
            ControlMsg::NodeLost {
                node,
                replace_within_ms,
            },
            _,
        ) => super::failure::on_node_lost(po, &msg.meta, &node, replace_within_ms),
        (ControlMsg::NodeReplaced { node, incarnation }, request) => {
            if let Some(why) = super::recovery::replacement_refusal(po, &node) {
                tracing::warn!(
                    "dropped a NODE_REPLACED from {}: {why}",
                    Node::describe(from)
                );
                return true;
            }
            super::recovery::on_node_replaced(po, &node, incarnation);
            if request {
                super::recovery::confirm_replaced(po, node, incarnation);
            }
        }
        (ControlMsg::NodeJoined { node, reach }, false) => {
            super::join::on_node_joined(po, node, reach)
        }
        (ControlMsg::Answered { .. }, true) => deliver_answered(po, msg),
        (ControlMsg::Layout(layout), false) if from == crate::wire::SCHEDULER => {
            super::resize::on_layout(po, &msg.meta, layout)
        }
        (ControlMsg::Floor { floor, slowest }, false) if from == crate::wire::SCHEDULER => {
            super::staleness::on_floor(po, floor, slowest)
        }
        _ => return false,
    }
    true
}

/// ANSWERED from a worker to this server: handed to the `KVServer` of its application
/// and value type like a request (parked until that application is served), which checks
/// its restored checkpoint against it.
fn deliver_answered(po: &Postoffice, msg: Message) {
    let from = msg.meta.sender;
    if po.cfg.role != crate::wire::Role::Server
        || Node::role_of(from) != Some(crate::wire::Role::Worker)
    {
        tracing::warn!(
            "dropped an ANSWERED from {}: only a worker tells it to a server",
            Node::describe(from)
        );
        return;
    }
    if let Some(o) = lock(&po.routes).deliver(msg, Instant::now()) {
        tracing::warn!(
            "dropped an ANSWERED from {}: {}",
            Node::describe(from),
            o.why
        );
    }
}

/// Hands a remote write to the customer whose slot its immediate names (top 8 bits).
fn deliver_write(po: &Postoffice, w: RemoteWrite) {
    let route = po.memory.route_of_imm(Imm(w.imm));
    match route.and_then(|r| lock(&po.routes).get(&r)) {
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
fn expire_parked(po: &Postoffice) {
    if !lock(&po.routes).has_parked() {
        return;
    }
    // A replacement restores its applications one by one before serving them: requests
    // sent to it again wait up to PS_TIMEOUT.
    let park = match po.is_replacement() {
        true => super::routes::PARK.max(po.cfg.timing.timeout),
        false => super::routes::PARK,
    };
    let expired = lock(&po.routes).expire(Instant::now(), park);
    for e in expired {
        if e.msg.meta.control.is_some() {
            // ANSWERED for an application this replacement did not serve within the
            // parking time: not checked, and no request to answer.
            tracing::warn!(
                "dropped an ANSWERED from {} for app {} with values of type {}: not served \
                 here within {:.0} s, so what it answered is not checked",
                Node::describe(e.msg.meta.sender),
                e.msg.meta.tag.app_id,
                e.msg.meta.kv.dtype,
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
        refuse_request(po, &e.msg.meta, why, e.also);
    }
}

/// Answers request `m`, for an application not served here, with an error (`why`: more
/// about it), and in the same answer the requests of the same customer timestamped `also`;
/// zero-copy pulls are dropped with a warning (their requester gives up at its own
/// deadline, `PS_TIMEOUT`).
fn refuse_request(po: &Postoffice, m: &Meta, why: String, also: Vec<i32>) {
    let what = format!(
        "no KVServer for app {} with values of type {} on {}",
        m.tag.app_id,
        m.kv.dtype,
        Node::describe(po.my_id())
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
    if let Err(err) = po.send(Message::new(meta)) {
        tracing::warn!("could not answer {}: {err}", Node::describe(m.sender));
    }
}

/// The barrier of `group` ended with `r`. Only the barrier this node waits in is released;
/// a late answer to an older one is dropped.
pub(super) fn barrier_done(po: &Postoffice, group: i32, r: Result<()>) {
    let mut st = lock(&po.node.state);
    if st.barrier.group == Some(group) {
        st.barrier.result = Some(r);
        st.barrier.group = None;
        po.node.cv.notify_all();
    }
}

/// "request" or "answer", for logs.
fn kind(request: bool) -> &'static str {
    if request {
        "request"
    } else {
        "answer"
    }
}

/// Whether command `cmd` (a request or answer, received by the scheduler or not) is obeyed
/// only from the scheduler: node tables and refusals, barrier releases, heartbeat
/// answers, clock floors, TERMINATE, NODE_LOST, NODE_REPLACED and NODE_JOINED notices, key layouts. (With a token the sender is the
/// one its connection proved, [`crate::auth`].)
fn scheduler_only(cmd: Command, at_scheduler: bool, request: bool) -> bool {
    match cmd {
        Command::AddNode | Command::Barrier | Command::Heartbeat | Command::Clock => !request,
        Command::Terminate => true,
        Command::NodeLost | Command::NodeReplaced | Command::NodeJoined | Command::Layout => {
            !at_scheduler
        }
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
