//! The scheduler's IO: what the receiving thread does with the sans-IO
//! [`Scheduler`](super::Scheduler)'s decisions — registrations and the node table, barriers,
//! heartbeats and losses, and the admission of replacements (with the tables held until the
//! servers confirmed them). Only the scheduler node runs it.

use super::super::barrier::Outcome;
use super::super::control::barrier_result;
use super::super::failure::{lost_text, LossCause};
use super::super::staleness;
use super::super::{reply_meta, Postoffice, SCHEDULER};
use super::tables::{entering_table, refuse_all, send_entering_table, send_table, send_table_to};
use super::{Admission, Declared, Inherited, Scheduler};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, NodeTable, Role};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the scheduler holds a replacement worker's table for the servers' confirmations.
pub(super) const CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// A replacement worker's node table, held on the scheduler until every server confirmed
/// NODE_REPLACED (or [`CONFIRM_WAIT`] passed).
pub(super) struct HeldTable {
    node: Node,
    table: NodeTable,
    /// Servers that have not confirmed yet.
    waiting: Vec<NodeId>,
    until: Instant,
}

/// The scheduler's state and what its IO holds: the replacement workers' tables awaiting the
/// servers' confirmations. Lock order: `scheduler`, then `held`.
pub(in crate::postoffice) struct SchedulerIo {
    scheduler: Mutex<Scheduler>,
    held: Mutex<Vec<HeldTable>>,
    /// The servers' key layout and the resize in progress (taken alone).
    pub(super) coordinator: Mutex<super::super::ranges::coordinator::Coordinator>,
    /// The workers' clocks for bounded staleness (taken alone).
    pub(in crate::postoffice) clocks: Mutex<super::super::clocks::ClockBook>,
}

impl SchedulerIo {
    /// The IO around `scheduler`.
    pub(in crate::postoffice) fn new(scheduler: Scheduler) -> SchedulerIo {
        SchedulerIo {
            coordinator: super::resize::coordinator(scheduler.servers),
            scheduler: Mutex::new(scheduler),
            held: Mutex::new(Vec::new()),
            clocks: Mutex::default(),
        }
    }

    /// The sans-IO scheduler.
    pub(in crate::postoffice) fn scheduler(&self) -> MutexGuard<'_, Scheduler> {
        lock(&self.scheduler)
    }
}

/// The scheduler obeys `control` (under header `meta`); false when it is not one the
/// scheduler takes.
pub(in crate::postoffice) fn scheduler_obeys(
    po: &Postoffice,
    control: ControlMsg,
    meta: &Meta,
) -> bool {
    let from = meta.sender;
    let counts = |po: &Postoffice| {
        po.scheduler
            .as_ref()
            .is_some_and(|s| s.scheduler().counts(from))
    };
    match (control, meta.request) {
        (ControlMsg::AddNode { node }, true) => on_add_node(po, node),
        (ControlMsg::Rejoin(r), true) => super::rebuild::on_rejoin(po, r, meta),
        // Queued for the scheduler this one replaced, before the node re-registered here
        // (its re-registration says where it is).
        (
            ControlMsg::Barrier { .. }
            | ControlMsg::Heartbeat
            | ControlMsg::NodeReplaced { .. }
            | ControlMsg::Clock { .. },
            _,
        ) if !counts(po) => {
            tracing::debug!(
                "ignored a {:?} from {}, which has not re-registered here yet",
                meta.command(),
                Node::describe(from)
            );
        }
        (
            ControlMsg::Barrier {
                group,
                timeout_ms,
                failed,
            },
            true,
        ) => {
            let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms));
            let failed = failed.then(|| meta.error.clone().unwrap_or_default());
            scheduler_barrier(po, from, group, timeout, failed);
        }
        (ControlMsg::Heartbeat, true) => on_heartbeat(po, meta),
        (ControlMsg::NodeReplaced { node, .. }, false) => on_replaced_confirmed(po, from, node.id),
        (ControlMsg::Resize { server, add }, true) => {
            super::resize::on_resize(po, from, server, add)
        }
        (
            ControlMsg::RangesArrived {
                epoch,
                bytes,
                failed,
            },
            true,
        ) => super::resize::on_arrived(po, (from, epoch), (bytes, failed)),
        (ControlMsg::Clock { clock, waits }, true) => staleness::on_clock(po, from, clock, waits),
        _ => return false,
    }
    true
}

fn on_add_node(po: &Postoffice, node: Node) {
    let Some(sched) = &po.scheduler else { return };
    let admission = sched.scheduler().add_node(node, Instant::now());
    match admission {
        Admission::Waiting | Admission::Repeat => {}
        Admission::Resend(node) => {
            let table = po.nodes();
            send_table_to(po, &node, &table);
            super::rebuild::say_if_all_back(po);
        }
        Admission::Refused { node, why } => refuse_all(po, &[node], &why),
        Admission::Complete(table) => send_table(po, table),
        Admission::Replaced {
            node,
            displaced,
            table,
            started,
            inherited,
        } => {
            admit_replacement(po, node, displaced, table, (started, inherited));
            super::rebuild::say_if_all_back(po);
        }
        Admission::Joined {
            node,
            table,
            started,
            inherited,
        } => super::joined::admit_joined(po, node, table, (started, inherited)),
    }
}

/// A heartbeat `req` arrived: counted, and answered (with NODE_LOST when its node was
/// declared lost).
pub(super) fn on_heartbeat(po: &Postoffice, req: &Meta) {
    if answer_lost(po, req.sender) {
        return;
    }
    if let Some(s) = &po.scheduler {
        s.scheduler().heartbeat(req.sender, Instant::now());
    }
    answer_heartbeat(po, req);
}

/// Answers a heartbeat (or a re-registration) `req` with a heartbeat.
pub(super) fn answer_heartbeat(po: &Postoffice, req: &Meta) {
    let mut meta = reply_meta(req);
    meta.control = Some(ControlMsg::Heartbeat);
    let _ = po.send(Message::new(meta));
}

pub(in crate::postoffice) fn scheduler_barrier(
    po: &Postoffice,
    from: NodeId,
    group: i32,
    timeout: Option<Duration>,
    failed: Option<String>,
) {
    let Some(s) = &po.scheduler else { return };
    let outcome = s
        .scheduler()
        .barrier_after(from, group, timeout, Instant::now(), failed);
    if let Some(o) = outcome {
        release(po, o);
    }
}

/// The scheduler's own arrival at barrier `wait` ([`Scheduler::arrive_own`]).
pub(in crate::postoffice) fn scheduler_arrives(
    po: &Postoffice,
    wait: &crate::wire::BarrierWait,
    timeout: Option<Duration>,
) {
    let Some(s) = &po.scheduler else { return };
    let outcome = s.scheduler().arrive_own(wait, timeout, Instant::now());
    if let Some(o) = outcome {
        release(po, o);
    }
}

pub(super) fn release(po: &Postoffice, o: Outcome) {
    if let Some(f) = &o.failure {
        tracing::warn!("{}", f.text);
    }
    // Peers first: once the scheduler itself is released it may shut down.
    let mut ids = o.release;
    ids.sort_by_key(|&id| id == SCHEDULER);
    let (kind, text) = match o.failure {
        Some(f) => (Some(f.kind), Some(f.text)),
        None => (None, None),
    };
    for id in ids {
        if id == SCHEDULER {
            super::super::control::barrier_done(po, o.group, barrier_result(kind, text.clone()));
            continue;
        }
        let control = ControlMsg::Released {
            group: o.group,
            failure: kind,
        };
        let meta = Meta {
            error: text.clone(),
            ..Meta::for_control(id, control)
        };
        if let Err(e) = po.send(Message::new(meta)) {
            tracing::warn!("cannot release {} from a barrier: {e}", Node::describe(id));
        }
    }
}

pub(in crate::postoffice) fn scheduler_tick(po: &Postoffice) {
    let Some(s) = &po.scheduler else { return };
    let timeout = po.cfg.timing.heartbeat_timeout;
    let super::Tick { lost, failed } = s.scheduler().tick(Instant::now(), timeout);
    super::super::observe::count_missed_heartbeats(po, Instant::now());
    release_held_tables(po, Instant::now());
    let declared = announce_lost(po, lost);
    for o in failed {
        release(po, o);
    }
    record_declared(po, declared);
}

/// On the scheduler: `lost` nodes were just declared lost (each with why, and whether a
/// replacement is awaited). Tells every node (the lost ones too); returns each loss's
/// cause, to be recorded with [`record_declared`](record_declared) once everything
/// else this tick sends is sent (recording wakes the scheduler's own `finalize`, which
/// stops it).
fn announce_lost(po: &Postoffice, lost: Vec<Declared>) -> Vec<(Declared, LossCause)> {
    if lost.is_empty() {
        return Vec::new();
    }
    let nodes = po.nodes();
    let mut declared = Vec::new();
    for d in lost {
        let cause = LossCause::of(&d, po.cfg.timing.heartbeat_timeout);
        let why = cause.why().unwrap_or_default();
        let Some(node) = nodes.iter().find(|n| n.id == d.id).cloned() else {
            continue;
        };
        let window = d.awaiting.map_or(0, |w| w.as_millis() as u64);
        for n in nodes.iter().filter(|n| n.id != SCHEDULER) {
            if let Err(e) = send_node_lost(po, n.id, &node, &why, window) {
                tracing::warn!("cannot tell {} of the loss: {e}", Node::describe(n.id));
            }
        }
        declared.push((d, cause));
    }
    declared
}

/// On the scheduler: records the losses [`announce_lost`](announce_lost) sent.
fn record_declared(po: &Postoffice, declared: Vec<(Declared, LossCause)>) {
    for (d, cause) in declared {
        let why = cause.why().unwrap_or_default();
        if let Some(window) = d.awaiting {
            super::super::recovery::mark_awaiting(po, d.id, &why, window);
            continue;
        }
        let error = Error::PeerLost(lost_text(d.id, &why));
        super::super::failure::mark_lost(po, d.id, cause, error);
    }
}

/// On the scheduler: a heartbeat came from `from`; if it was declared lost, tells it so
/// again (it may have missed the first NODE_LOST). True when it was lost.
fn answer_lost(po: &Postoffice, from: NodeId) -> bool {
    let Some(why) = po.failures.why_lost(from) else {
        return false;
    };
    if let Some(node) = po.nodes().into_iter().find(|n| n.id == from) {
        let _ = send_node_lost(po, from, &node, &why, 0);
    }
    true
}

fn send_node_lost(
    po: &Postoffice,
    to: NodeId,
    lost: &Node,
    why: &str,
    window_ms: u64,
) -> Result<usize> {
    let control = ControlMsg::NodeLost {
        node: lost.clone(),
        replace_within_ms: window_ms,
    };
    let meta = Meta {
        error: Some(why.to_string()),
        ..Meta::for_control(to, control)
    };
    po.send(Message::new(meta))
}

/// On the scheduler: `node` replaces a lost server or worker, `displaced` (told so, in
/// case it only paused). Tells every other node its address, then sends it the node
/// `table` marked as a replacement, with whether the start-up barrier is still open
/// (`started`) and what it takes over from `displaced` (`inherited`).
fn admit_replacement(
    po: &Postoffice,
    node: Node,
    displaced: Node,
    table: Vec<Node>,
    (started, inherited): (bool, Inherited),
) {
    lock(&po.node.state).nodes = table.clone();
    po.failures.stop_awaiting(node.id);
    po.recovery.set_holder(node.id, inherited.incarnation);
    let place = crate::wire::place(&node.host, node.port);
    tracing::warn!(
        "{} is taken over by a new {} at {place}",
        Node::describe(node.id),
        node.role
    );
    // (Not when the replacement got the old address: the notice would reach it.)
    if (displaced.host.as_str(), displaced.port) != (node.host.as_str(), node.port) {
        tell_displaced(po, &displaced, &place);
    }
    let incarnation = inherited.incarnation;
    let control = entering_table(po, node.id, &table, (started, inherited), false);
    if node.role != Role::Worker {
        // The replacement server gets its table before the workers send it their
        // unanswered requests.
        send_entering_table(po, &node, control, "the replacement");
        tell_replaced(po, &node, &table, incarnation, false);
        return;
    }
    // A replacement worker gets its table once every server confirmed it was told (its
    // requests then find their answers' way back), or after CONFIRM_WAIT.
    let waiting = tell_replaced(po, &node, &table, incarnation, true);
    if waiting.is_empty() {
        send_entering_table(po, &node, control, "the replacement");
        return;
    }
    let Some(s) = &po.scheduler else { return };
    lock(&s.held).push(HeldTable {
        node,
        table: control,
        waiting,
        until: Instant::now() + CONFIRM_WAIT,
    });
}

/// On the scheduler: `from` confirmed NODE_REPLACED of node `id`; sends the tables no
/// server is waited for any more.
fn on_replaced_confirmed(po: &Postoffice, from: NodeId, id: NodeId) {
    let Some(s) = &po.scheduler else { return };
    let ready = {
        let mut held = lock(&s.held);
        for h in held.iter_mut().filter(|h| h.node.id == id) {
            h.waiting.retain(|&w| w != from);
        }
        held.extract_if(.., |h| h.waiting.is_empty())
            .collect::<Vec<_>>()
    };
    for h in ready {
        send_entering_table(po, &h.node, h.table, "the replacement");
    }
}

/// On the scheduler, every tick: sends the held tables whose servers did not all confirm
/// within [`CONFIRM_WAIT`] (a server lost meanwhile, say), with a warning.
fn release_held_tables(po: &Postoffice, now: Instant) {
    let Some(s) = &po.scheduler else { return };
    let late = {
        let mut held = lock(&s.held);
        if held.is_empty() {
            return;
        }
        held.extract_if(.., |h| now >= h.until).collect::<Vec<_>>()
    };
    for h in late {
        let silent: Vec<String> = h.waiting.iter().map(|&w| Node::describe(w)).collect();
        tracing::warn!(
            "{} did not confirm the replacement of {} within {:.0} s; sending its table",
            silent.join(", "),
            Node::describe(h.node.id),
            CONFIRM_WAIT.as_secs_f64()
        );
        send_entering_table(po, &h.node, h.table, "the replacement");
    }
}

/// NODE_REPLACED with `node`'s address and `incarnation` to every node of `table` but the
/// scheduler and it; with `confirm`, the servers are asked to confirm it (a request).
/// Returns the servers asked.
fn tell_replaced(
    po: &Postoffice,
    node: &Node,
    table: &[Node],
    incarnation: u32,
    confirm: bool,
) -> Vec<NodeId> {
    let mut asked = Vec::new();
    for n in table
        .iter()
        .filter(|n| n.id != SCHEDULER && n.id != node.id)
    {
        let control = ControlMsg::NodeReplaced {
            node: node.clone(),
            incarnation,
        };
        let request = confirm && n.role == Role::Server;
        let meta = Meta {
            request,
            ..Meta::for_control(n.id, control)
        };
        match po.send(Message::new(meta)) {
            Ok(_) if request => asked.push(n.id),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "cannot tell {} of the replacement: {e}",
                Node::describe(n.id)
            ),
        }
    }
    asked
}

/// Tells a node that may still run at its old address (paused, say) that a new one took
/// its place (it then fails with `Error::DeclaredLost`), through a temporary connection.
fn tell_displaced(po: &Postoffice, old: &Node, place: &str) {
    let tmp = Node::temporary_id(old.id);
    let control = ControlMsg::NodeLost {
        node: old.clone(),
        replace_within_ms: 0,
    };
    let meta = Meta {
        error: Some(format!("a new {} at {place} took its place", old.role)),
        ..Meta::for_control(tmp, control)
    };
    if let Err(e) = po
        .van
        .connect(tmp, &old.host, old.port)
        .and_then(|_| po.send(Message::new(meta)))
    {
        tracing::debug!(
            "cannot tell the displaced {} it was replaced: {e}",
            old.role
        );
    }
}
