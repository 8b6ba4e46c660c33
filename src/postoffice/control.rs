//! The `ps-receive` thread: takes every van event, handles control commands (ADD_NODE, BARRIER,
//! HEARTBEAT, TERMINATE) and hands data messages and remote writes to customers (ps-lite's
//! `Van::Receiving` and its `Process*Command` functions). On the scheduler it drives the
//! [`Scheduler`](super::scheduler::Scheduler) and sends what it decides.

use super::barrier::Outcome;
use super::scheduler::Admission;
use super::{reply_meta, Postoffice, SCHEDULER};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::{RemoteWrite, VanEvent};
use crate::wire::{BarrierFailure, Command, Control, Imm, Message, Meta, Node, NodeId};
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
            if po.stopped.load(Ordering::Acquire) {
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
                    std::thread::sleep(super::TICK);
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
        let wait = match self.acks_due_at() {
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
        if self.sent_by_replaced(&msg.meta) {
            return;
        }
        if msg.meta.sender == SCHEDULER {
            lock(&self.state).last_from_scheduler = Some(Instant::now());
        }
        let Some(cmd) = msg.meta.command() else {
            if self.admit(&msg.meta) {
                if !msg.meta.request {
                    self.answered(&msg.meta);
                }
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
        let control = msg.meta.control.clone().unwrap_or_default();
        match (cmd, scheduler, msg.meta.request) {
            (Command::AddNode, true, true) => self.on_add_node(&control.nodes),
            (Command::AddNode, false, false) => self.update_table(&msg.meta, control),
            (Command::Barrier, true, true) => {
                let timeout = (control.barrier_timeout_ms > 0)
                    .then(|| Duration::from_millis(control.barrier_timeout_ms));
                let failed = (control.barrier_failure == Some(BarrierFailure::Failed))
                    .then(|| msg.meta.error.clone().unwrap_or_default());
                self.scheduler_barrier(msg.meta.sender, control.barrier_group, timeout, failed);
            }
            (Command::Barrier, _, false) => self.barrier_done(
                control.barrier_group,
                barrier_result(control.barrier_failure, msg.meta.error),
            ),
            (Command::Heartbeat, true, true) => self.on_heartbeat(&msg.meta),
            (Command::Heartbeat, false, false) => {}
            (Command::Ack, _, _) => self.on_ack(msg.meta.sender, &control),
            (Command::NodeLost, false, _) => self.on_node_lost(&msg.meta, &control),
            (Command::NodeReplaced, false, request) => {
                if let Some(why) = self.replacement_refusal(&control) {
                    tracing::warn!(
                        "dropped a NODE_REPLACED from {}: {why}",
                        Node::describe(msg.meta.sender)
                    );
                    return;
                }
                self.on_node_replaced(&control);
                if request {
                    self.confirm_replaced(&control);
                }
            }
            (Command::NodeReplaced, true, false) => {
                self.on_replaced_confirmed(msg.meta.sender, &control)
            }
            (Command::Answered, false, true) => self.deliver_answered(msg),
            (Command::Terminate, _, _) => {
                self.stopped.store(true, Ordering::Release);
                self.cv.notify_all();
            }
            (cmd, _, request) => tracing::warn!(
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
                let _ = tx.send(VanEvent::RemoteWrite(w));
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

    // ---- the scheduler's side ----

    fn on_add_node(&self, nodes: &[Node]) {
        let (Some(sched), Some(node)) = (&self.scheduler, nodes.first().cloned()) else {
            tracing::warn!("dropped an ADD_NODE without a node");
            return;
        };
        let admission = lock(sched).add_node(node, Instant::now());
        match admission {
            Admission::Waiting | Admission::Repeat => {}
            Admission::Refused { node, why } => self.refuse_all(&[node], &why),
            Admission::Complete(table) => self.send_table(table),
            Admission::Replaced {
                node,
                displaced,
                table,
                started,
                inherited,
            } => self.admit_replacement(node, displaced, table, (started, inherited)),
        }
    }

    /// Every node registered: the scheduler is ready, and every node gets the table.
    fn send_table(&self, table: Vec<Node>) {
        let window = super::recovery::window(&self.cfg).map_or(0, |w| w.as_millis() as u64);
        let run_id = {
            let mut st = lock(&self.state);
            st.nodes = table.clone();
            st.ready = true;
            st.replace_within = window;
            st.run_id
        };
        self.cv.notify_all();
        for n in &table[1..] {
            let sent = self.van.connect(n.id, &n.host, n.port).and_then(|_| {
                let control = Control {
                    cmd: Some(Command::AddNode),
                    nodes: table.clone(),
                    replace_within_ms: window,
                    run_id,
                    reach: self.reach_for(n.id, &table),
                    ..Control::default()
                };
                self.send(Message::new(Meta::for_control(n.id, control)))
            });
            if let Err(e) = sent {
                tracing::error!(
                    "cannot send the node table to {}: {e}",
                    Node::describe(n.id)
                );
            }
        }
        let at: Vec<String> = table[1..]
            .iter()
            .map(|n| {
                format!(
                    "{} at {}",
                    Node::describe(n.id),
                    crate::wire::place(&n.host, n.port)
                )
            })
            .collect();
        tracing::info!(
            "all {} nodes registered: {}",
            table.len() - 1,
            at.join(", ")
        );
    }

    /// Tells nodes that are not (or no longer) admitted why, over the connection each one
    /// registered on: the scheduler never connects to an address a refused node named (issue
    /// 14).
    pub(super) fn refuse_all(&self, nodes: &[Node], why: &str) {
        for n in nodes {
            let control = Control {
                cmd: Some(Command::AddNode),
                ..Control::default()
            };
            let mut meta = Meta {
                error: Some(why.to_string()),
                ..Meta::for_control(-1, control)
            };
            meta.sender = self.my_id();
            if let Err(e) = self.van.answer_joiner(&n.host, n.port, Message::new(meta)) {
                tracing::warn!("cannot tell {}:{} it was refused: {e}", n.host, n.port);
            }
        }
    }

    fn on_heartbeat(&self, req: &Meta) {
        if self.answer_lost(req.sender) {
            return;
        }
        if let Some(s) = &self.scheduler {
            lock(s).heartbeat(req.sender, Instant::now());
        }
        let mut meta = reply_meta(req);
        meta.control = req.control.clone();
        let _ = self.send(Message::new(meta));
    }

    pub(super) fn scheduler_barrier(
        &self,
        from: NodeId,
        group: i32,
        timeout: Option<Duration>,
        failed: Option<String>,
    ) {
        let Some(s) = &self.scheduler else { return };
        let outcome = lock(s).barrier_after(from, group, timeout, Instant::now(), failed);
        if let Some(o) = outcome {
            self.release(o);
        }
    }

    /// The barrier of `group` ended with `r`. Only the barrier this node waits in is released;
    /// a late answer to an older one is dropped.
    fn barrier_done(&self, group: i32, r: Result<()>) {
        let mut st = lock(&self.state);
        if st.barrier_group == Some(group) {
            st.barrier_result = Some(r);
            st.barrier_group = None;
            self.cv.notify_all();
        }
    }

    fn release(&self, o: Outcome) {
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
                self.barrier_done(o.group, barrier_result(kind, text.clone()));
                continue;
            }
            let control = Control {
                cmd: Some(Command::Barrier),
                barrier_group: o.group,
                barrier_failure: kind,
                ..Control::default()
            };
            let meta = Meta {
                error: text.clone(),
                ..Meta::for_control(id, control)
            };
            if let Err(e) = self.send(Message::new(meta)) {
                tracing::warn!("cannot release {} from a barrier: {e}", Node::describe(id));
            }
        }
    }

    fn scheduler_tick(&self) {
        let Some(s) = &self.scheduler else { return };
        let timeout = self.cfg.heartbeat_timeout;
        let (lost, failed) = lock(s).tick(Instant::now(), timeout);
        self.count_missed_heartbeats(Instant::now());
        self.release_held_tables(Instant::now());
        let declared = self.announce_lost(lost);
        for o in failed {
            self.release(o);
        }
        self.record_declared(declared);
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
fn barrier_result(kind: Option<BarrierFailure>, text: Option<String>) -> Result<()> {
    match (kind, text) {
        (None, None) => Ok(()),
        (Some(BarrierFailure::Lost), t) => Err(Error::PeerLost(t.unwrap_or_default())),
        (Some(BarrierFailure::Failed), t) => Err(Error::JobFailed(t.unwrap_or_default())),
        (_, t) => Err(Error::Timeout(t.unwrap_or_default())),
    }
}
