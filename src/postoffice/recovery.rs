//! Recovery (issue 13): a lost server's or worker's place taken by a replacement, and the job
//! going on.
//!
//! With `PS_CHECKPOINT_DIR` set on the scheduler (either van), a server declared lost is not a
//! failure at once: the scheduler sends NODE_LOST with a replacement window
//! (`Control::replace_within_ms`, `PS_RECOVERY_TIMEOUT`), and every node *awaits* it. A
//! server that registers meanwhile (or that asks for the rank of a server still counted
//! alive: `pslite-launch --restart` starts one as soon as the old process died) takes the lost
//! server's id, rank and key range: the scheduler sends it the node table marked
//! `replacement` (it restores its state from the checkpoint and skips the start-up barrier)
//! and NODE_REPLACED with its address to every other node. A worker then connects to it and
//! sends again every request the lost server had not answered: workers keep each request to
//! a server until its answer arrives ([`Retained`]), and the replacement answers a request it
//! finds among those applied before the loss without applying it again
//! (`kv::durable::applied`). Before those requests, each worker tells the replacement what
//! the lost server answered (ANSWERED: per application, value type and customer, the highest
//! timestamp of a state-changing request answered without an error), and the replacement
//! refuses to serve if its restored checkpoint lacks one (`kv::server::durable`). No
//! replacement within the window: NODE_LOST again, without a window, and the job fails as in
//! [`super::failure`].
//!
//! On the RDMA van a worker drops the old server's QP and rings (late completions of the old
//! QP name an older channel generation and are dropped) and sets up a new channel with the
//! replacement; a failed WC on a server's channel is not a loss while servers are replaced
//! (the scheduler's verdict is awaited), and a request whose send failed stays kept.
//!
//! A lost worker is awaited the same way, and a worker that registers meanwhile (or asks for
//! the rank of one still counted alive) takes its id and rank. The servers are told first
//! (they connect to it and forget the old one's resend state), then it gets the table with
//! what it takes over ([`Inherited`]): the barriers its predecessor completed, which its
//! [`Postoffice::barrier`] passes at once and which tell an application where to take up the
//! work ([`Postoffice::inherited_barriers`]), and its incarnation, from which its `KVWorker`
//! numbers requests apart from its predecessor's (late answers to those match nothing).
//! Every message carries its sender's incarnation (`Meta::incarnation`), and a node told of a
//! replacement (NODE_REPLACED carries the new incarnation; the scheduler knows it) drops what
//! earlier holders of the id still send: requests the dead worker had in flight are not applied
//! after the replacement took over, barrier requests of a displaced node do not count as its
//! replacement's. What the predecessor pushed and the servers applied before stays applied:
//! `kv-app` reads it from progress keys and pushes only the rest; `lr` trains the interrupted
//! epoch again.
//!
//! The scheduler holds a replacement worker's table until every server confirmed the
//! NODE_REPLACED it sent them (at most [`CONFIRM_WAIT`]): a server has connected to the new
//! worker before any request of it can arrive.
//!
//! Not covered: the scheduler (its loss ends the job).

use super::scheduler::{Declared, Inherited, Why};
use super::{Postoffice, SCHEDULER};
use crate::config::Config;
use crate::sync::lock;
use crate::wire::{Command, Control, DType, KeyRef, Message, Meta, Node, NodeId, Role};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A retained request's key: the server, the application, the customer, the timestamp.
pub(super) type Key = (NodeId, i32, i32, i32);

/// What a `KVServer` serves: an application and a value type.
type Served = (i32, DType);

/// Per customer id, the highest timestamp a server answered (`Control::answered`).
type Highest = Vec<(i32, i32)>;

/// A worker's requests to servers that have not been answered yet, and per server the
/// highest state-changing request each answered (only while the cluster replaces lost
/// servers: `Postoffice::retaining`).
#[derive(Default)]
pub(super) struct Retained {
    msgs: HashMap<Key, Message>,
    /// Per (server, application, value type, customer): the highest timestamp of a
    /// state-changing request the server answered without an error (the recovery
    /// cross-check, `Command::Answered`).
    highest: HashMap<(NodeId, i32, DType, i32), i32>,
}

impl Retained {
    /// Forgets a request (never sent).
    pub(super) fn release(&mut self, key: Key) {
        self.msgs.remove(&key);
    }

    /// Request `key` was answered, `ok` without an error (and not to be sent again with its
    /// keys): forgets it, and counts it among what its server answered when it may have
    /// changed state.
    fn answer(&mut self, key: Key, ok: bool) {
        let Some(msg) = self.msgs.remove(&key) else {
            return;
        };
        let m = &msg.meta;
        if ok && m.may_change_state() {
            let (server, app, customer, ts) = key;
            // Later in serial-number order (RFC 1982): timestamps wrap around.
            self.highest
                .entry((server, app, m.dtype, customer))
                .and_modify(|h| {
                    if ts.wrapping_sub(*h) > 0 {
                        *h = ts
                    }
                })
                .or_insert(ts);
        }
    }

    /// What `server` answered, per (application, value type): the customers' highest
    /// timestamps, sorted.
    fn answered_by(&self, server: NodeId) -> Vec<(Served, Highest)> {
        let mut by_app: std::collections::BTreeMap<Served, Highest> = Default::default();
        for (&(s, app, dtype, customer), &ts) in &self.highest {
            if s == server {
                by_app.entry((app, dtype)).or_default().push((customer, ts));
            }
        }
        by_app
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                (k, v)
            })
            .collect()
    }

    /// Takes the requests to `server`, oldest first per customer.
    fn take_for(&mut self, server: NodeId) -> Vec<Message> {
        let keys: Vec<Key> = self
            .msgs
            .keys()
            .filter(|k| k.0 == server)
            .copied()
            .collect();
        let mut out: Vec<(Key, Message)> = keys
            .into_iter()
            .filter_map(|k| self.msgs.remove(&k).map(|m| (k, m)))
            .collect();
        out.sort_by_key(|(k, _)| *k);
        out.into_iter().map(|(_, m)| m).collect()
    }
}

/// How long the scheduler holds a replacement worker's table for the servers' confirmations.
pub(super) const CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// A replacement worker's node table, held on the scheduler until every server confirmed
/// NODE_REPLACED (or [`CONFIRM_WAIT`] passed).
pub(super) struct HeldTable {
    node: Node,
    control: Control,
    /// Servers that have not confirmed yet.
    waiting: Vec<NodeId>,
    until: Instant,
}

/// How long the scheduler awaits a lost server's replacement: `PS_RECOVERY_TIMEOUT` when
/// `PS_CHECKPOINT_DIR` is set; `None` (a loss fails the job) otherwise.
pub(super) fn window(cfg: &Config) -> Option<Duration> {
    cfg.checkpoint.as_ref().map(|cp| cp.recovery_timeout)
}

/// What a loss declared by the scheduler is called: "no heartbeat for 10.2 s
/// (PS_HEARTBEAT_TIMEOUT is 10 s)", or "no replacement registered within 60 s
/// (PS_RECOVERY_TIMEOUT)".
pub(super) fn why_text(d: &Declared, heartbeat_timeout: Duration) -> String {
    match d.why {
        Why::Silent(silent) => format!(
            "no heartbeat for {:.1} s (PS_HEARTBEAT_TIMEOUT is {:.0} s)",
            silent.as_secs_f64(),
            heartbeat_timeout.as_secs_f64()
        ),
        Why::NotReplaced(window) => format!(
            "no replacement registered within {:.0} s (PS_RECOVERY_TIMEOUT) after it was lost",
            window.as_secs_f64()
        ),
    }
}

impl Postoffice {
    /// Whether this node replaces a lost one (the scheduler said so in its node table).
    pub fn is_replacement(&self) -> bool {
        lock(&self.state).replacement
    }

    /// How many barriers of `group` the node this one replaces completed after the start-up
    /// barrier (0 on a node that replaces none): an application skips the work it did before
    /// them, and [`barrier`](Self::barrier) passes them at once.
    pub fn inherited_barriers(&self, group: i32) -> u64 {
        lock(&self.state)
            .inherited
            .get(&group)
            .copied()
            .unwrap_or(0)
    }

    /// How many nodes held this node's id before it: 0, or the n-th replacement of a lost node
    /// (the scheduler's count). A `KVWorker` numbers its requests from `incarnation × 2^27`
    /// on, so that late answers to its predecessor's requests match none of its own.
    pub fn incarnation(&self) -> u32 {
        self.incarnation.load(Ordering::Relaxed)
    }

    /// Records that `peer`'s id is now held by its `incarnation`-th replacement: what earlier
    /// holders still send is dropped from now on.
    pub(super) fn set_holder(&self, peer: NodeId, incarnation: u32) {
        lock(&self.state).holders.insert(peer, incarnation);
        self.replaced_any.store(true, Ordering::Release);
    }

    /// Whether `meta` comes from an earlier holder of a replaced peer's id (a worker that was
    /// killed with requests still in flight, a server that was only paused): dropped, so that
    /// nothing of it is applied after its replacement took over.
    pub(super) fn sent_by_replaced(&self, meta: &Meta) -> bool {
        if !self.replaced_any.load(Ordering::Acquire) || meta.command() == Some(Command::AddNode) {
            return false;
        }
        let holder = lock(&self.state).holders.get(&meta.sender).copied();
        let stale = holder.is_some_and(|h| meta.incarnation < h);
        if stale {
            tracing::warn!(
                "dropped a message from an earlier holder of {}'s id (it was replaced)",
                Node::describe(meta.sender)
            );
        }
        stale
    }

    /// A replacement's barrier of `group` that its predecessor completed: counted and passed
    /// (true) without asking the scheduler.
    pub(super) fn pass_inherited(&self, group: i32) -> bool {
        let mut st = lock(&self.state);
        let inherited = st.inherited.get(&group).copied().unwrap_or(0);
        let calls = st.barriers_called.entry(group).or_default();
        *calls += 1;
        let (n, passed) = (*calls, *calls <= inherited);
        if passed {
            tracing::info!(
                "barrier {n} of group {group}: passed at once (the node this one replaces \
                 completed it)"
            );
        }
        passed
    }

    /// This run's id (drawn by the scheduler, sent in the node table): a replacement restores
    /// only a checkpoint written in the same run.
    pub fn run_id(&self) -> u64 {
        lock(&self.state).run_id
    }

    /// Keeps a copy of data request `msg` to a server until it is answered, when the cluster
    /// replaces lost servers; returns its key.
    pub(super) fn retain(&self, msg: &Message) -> Option<Key> {
        let m = &msg.meta;
        if !self.retaining.load(Ordering::Acquire)
            || !m.request
            || m.control.is_some()
            || m.rendezvous.is_some()
            || Node::role_of(m.recver) != Some(Role::Server)
        {
            return None;
        }
        let key = (m.recver, m.app_id, m.customer_id, m.timestamp);
        lock(&self.retained).msgs.insert(key, msg.clone());
        Some(key)
    }

    /// An answer arrived: its request needs no copy any more; what its server answered
    /// without an error is remembered for the recovery cross-check.
    pub(super) fn answered(&self, m: &Meta) {
        if self.retaining.load(Ordering::Acquire) {
            let ok = m.error.is_none() && !matches!(m.keys, Some(KeyRef::Unknown { .. }));
            let mut retained = lock(&self.retained);
            let also = if m.error.is_some() {
                &m.also_refused[..]
            } else {
                &[]
            };
            for &ts in std::iter::once(&m.timestamp).chain(also) {
                retained.answer((m.sender, m.app_id, m.customer_id, ts), ok);
            }
        }
    }

    /// The scheduler's node table said lost servers may be replaced: keep requests.
    pub(super) fn set_retaining(&self, on: bool) {
        self.retaining
            .store(on && self.cfg.role == Role::Worker, Ordering::Release);
    }

    /// `peer` was declared lost and a replacement is awaited for `window`: not a failure yet;
    /// requests to it stay pending (and retained) until the replacement answers them.
    pub(super) fn mark_awaiting(&self, peer: NodeId, why: &str, window: Duration) {
        {
            let mut st = lock(&self.state);
            if st.awaiting.contains(&peer) {
                return;
            }
            st.awaiting.push(peer);
        }
        tracing::warn!(
            "{} was declared lost by the scheduler: {why}; awaiting a replacement for up to \
             {:.0} s (PS_RECOVERY_TIMEOUT)",
            Node::describe(peer),
            window.as_secs_f64()
        );
    }

    /// Why NODE_REPLACED naming `control.nodes[0]` is not taken, `None` when it is: the
    /// cluster replaces no node (no `PS_CHECKPOINT_DIR`). With replacements on, the node need
    /// not have been declared lost here first: a replacement that registers before its
    /// predecessor's loss is declared takes over at once.
    pub(super) fn replacement_refusal(&self, control: &Control) -> Option<String> {
        let id = control.nodes.first()?.id;
        (lock(&self.state).replace_within == 0).then(|| {
            format!(
                "it names {}, but this cluster replaces no node (no PS_CHECKPOINT_DIR)",
                Node::describe(id)
            )
        })
    }

    /// NODE_REPLACED: `control.nodes[0]` now holds a lost server's or worker's id. Connects to
    /// it (a worker to a server, a server to a worker), forgets the resend state of the old
    /// one, and sends again the requests a replaced server did not answer.
    pub(super) fn on_node_replaced(&self, control: &Control) {
        let Some(node) = control.nodes.first().cloned() else {
            tracing::warn!("dropped a NODE_REPLACED that names no node");
            return;
        };
        let id = node.id;
        self.set_holder(id, control.incarnation);
        let connect = Node::is_worker_server_pair(self.my_id(), id);
        {
            let mut st = lock(&self.state);
            st.awaiting.retain(|&a| a != id);
            if let Some(n) = st.nodes.iter_mut().find(|n| n.id == id) {
                *n = node.clone();
            }
        }
        // Nothing is numbered for the old peer and sent to the new one meanwhile: the resend
        // state is forgotten and the path replaced under the exclusive lock every send shares.
        let (again, answered) = {
            let _swap = self.replacing.write().unwrap_or_else(|p| p.into_inner());
            if let Some(book) = &self.resend {
                lock(book).forget(id);
            }
            if connect {
                if let Err(e) = self.van.replace_peer(id, &node.host, node.port) {
                    drop(_swap);
                    self.mark_lost(id, e.to_string(), e);
                    return;
                }
            }
            let mut retained = lock(&self.retained);
            (retained.take_for(id), retained.answered_by(id))
        };
        let resend = match again.len() {
            0 => String::new(),
            n => format!("; sending it again the {n} requests not answered"),
        };
        tracing::warn!(
            "{} was replaced by a new {} at {}:{}{resend}",
            Node::describe(id),
            node.role,
            node.host,
            node.port,
        );
        // What the replaced server answered goes first: the replacement checks its restored
        // log against it before it applies anything sent again.
        for ((app_id, dtype), answered) in answered {
            let control = Control {
                cmd: Some(Command::Answered),
                answered,
                ..Control::default()
            };
            let meta = Meta {
                request: true,
                app_id,
                dtype,
                ..Meta::for_control(id, control)
            };
            if let Err(e) = self.send(Message::new(meta)) {
                tracing::warn!(
                    "cannot tell {} what its predecessor answered: {e}",
                    Node::describe(id)
                );
            }
        }
        for mut msg in again {
            msg.meta.seq = None;
            if let Err(e) = self.send(msg) {
                tracing::warn!("cannot send a request again to {}: {e}", Node::describe(id));
            }
        }
    }

    /// On the scheduler: `node` replaces a lost server or worker, `displaced` (told so, in
    /// case it only paused). Tells every other node its address, then sends it the node
    /// `table` marked as a replacement, with whether the start-up barrier is still open
    /// (`started`) and what it takes over from `displaced` (`inherited`).
    pub(super) fn admit_replacement(
        &self,
        node: Node,
        displaced: Node,
        table: Vec<Node>,
        (started, inherited): (bool, Inherited),
    ) {
        let (window, run_id) = {
            let mut st = lock(&self.state);
            st.nodes = table.clone();
            st.awaiting.retain(|&a| a != node.id);
            (st.replace_within, st.run_id)
        };
        self.set_holder(node.id, inherited.incarnation);
        let place = crate::wire::place(&node.host, node.port);
        tracing::warn!(
            "{} is taken over by a new {} at {place}",
            Node::describe(node.id),
            node.role
        );
        // (Not when the replacement got the old address: the notice would reach it.)
        if (displaced.host.as_str(), displaced.port) != (node.host.as_str(), node.port) {
            self.tell_displaced(&displaced, &place);
        }
        let control = Control {
            cmd: Some(Command::AddNode),
            nodes: table.clone(),
            replacement: true,
            replace_within_ms: window,
            run_id,
            barrier_group: if started { 0 } else { super::ALL_GROUP },
            barriers_done: inherited.barriers,
            incarnation: inherited.incarnation,
            reach: self.reach_for(node.id, &table),
            ..Control::default()
        };
        if node.role != Role::Worker {
            // The replacement server gets its table before the workers send it their
            // unanswered requests.
            self.send_replacement_table(&node, control);
            self.tell_replaced(&node, &table, inherited.incarnation, false);
            return;
        }
        // A replacement worker gets its table once every server confirmed it was told (its
        // requests then find their answers' way back), or after CONFIRM_WAIT.
        let waiting = self.tell_replaced(&node, &table, inherited.incarnation, true);
        if waiting.is_empty() {
            self.send_replacement_table(&node, control);
            return;
        }
        lock(&self.state).held_tables.push(HeldTable {
            node,
            control,
            waiting,
            until: Instant::now() + CONFIRM_WAIT,
        });
    }

    /// Connects to the replacement `node` and sends it its node table (`control`).
    fn send_replacement_table(&self, node: &Node, control: Control) {
        let to_new = self
            .van
            .connect(node.id, &node.host, node.port)
            .and_then(|_| self.send(Message::new(Meta::for_control(node.id, control))));
        if let Err(e) = to_new {
            tracing::error!(
                "cannot send the node table to the replacement at {}:{}: {e}",
                node.host,
                node.port
            );
        }
    }

    /// On a server: NODE_REPLACED (asking for it) is handled; tells the scheduler.
    pub(super) fn confirm_replaced(&self, control: &Control) {
        let confirm = Control {
            cmd: Some(Command::NodeReplaced),
            nodes: control.nodes.clone(),
            ..Control::default()
        };
        if let Err(e) = self.send(Message::new(Meta::for_control(SCHEDULER, confirm))) {
            tracing::warn!("cannot confirm a replacement to the scheduler: {e}");
        }
    }

    /// On the scheduler: `from` confirmed NODE_REPLACED of `control.nodes[0]`; sends the
    /// tables no server is waited for any more.
    pub(super) fn on_replaced_confirmed(&self, from: NodeId, control: &Control) {
        let Some(id) = control.nodes.first().map(|n| n.id) else {
            return;
        };
        let ready = {
            let mut st = lock(&self.state);
            for h in st.held_tables.iter_mut().filter(|h| h.node.id == id) {
                h.waiting.retain(|&w| w != from);
            }
            st.held_tables
                .extract_if(.., |h| h.waiting.is_empty())
                .collect::<Vec<_>>()
        };
        for h in ready {
            self.send_replacement_table(&h.node, h.control);
        }
    }

    /// On the scheduler, every tick: sends the held tables whose servers did not all confirm
    /// within [`CONFIRM_WAIT`] (a server lost meanwhile, say), with a warning.
    pub(super) fn release_held_tables(&self, now: Instant) {
        let late = {
            let mut st = lock(&self.state);
            if st.held_tables.is_empty() {
                return;
            }
            st.held_tables
                .extract_if(.., |h| now >= h.until)
                .collect::<Vec<_>>()
        };
        for h in late {
            let silent: Vec<String> = h.waiting.iter().map(|&w| Node::describe(w)).collect();
            tracing::warn!(
                "{} did not confirm the replacement of {} within {:.0} s; sending its table",
                silent.join(", "),
                Node::describe(h.node.id),
                CONFIRM_WAIT.as_secs_f64()
            );
            self.send_replacement_table(&h.node, h.control);
        }
    }

    /// NODE_REPLACED with `node`'s address and `incarnation` to every node of `table` but the
    /// scheduler and it; with `confirm`, the servers are asked to confirm it (a request).
    /// Returns the servers asked.
    fn tell_replaced(
        &self,
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
            let control = Control {
                cmd: Some(Command::NodeReplaced),
                nodes: vec![node.clone()],
                incarnation,
                ..Control::default()
            };
            let request = confirm && n.role == Role::Server;
            let meta = Meta {
                request,
                ..Meta::for_control(n.id, control)
            };
            match self.send(Message::new(meta)) {
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
    fn tell_displaced(&self, old: &Node, place: &str) {
        let tmp = Node::temporary_id(old.id);
        let control = Control {
            cmd: Some(Command::NodeLost),
            nodes: vec![old.clone()],
            ..Control::default()
        };
        let meta = Meta {
            error: Some(format!("a new {} at {place} took its place", old.role)),
            ..Meta::for_control(tmp, control)
        };
        if let Err(e) = self
            .van
            .connect(tmp, &old.host, old.port)
            .and_then(|_| self.send(Message::new(meta)))
        {
            tracing::debug!(
                "cannot tell the displaced {} it was replaced: {e}",
                old.role
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(server: NodeId, customer: i32, ts: i32) -> (Key, Message) {
        let meta = Meta {
            recver: server,
            customer_id: customer,
            timestamp: ts,
            request: true,
            ..Meta::default()
        };
        ((server, 0, customer, ts), Message::new(meta))
    }

    #[test]
    fn a_replaced_servers_unanswered_requests_come_back_oldest_first_and_only_its_own() {
        let mut r = Retained::default();
        for (k, m) in [
            req(8, 0, 5),
            req(10, 0, 1),
            req(8, 1, 2),
            req(8, 0, 3),
            req(8, 0, 4),
        ] {
            r.msgs.insert(k, m);
        }
        r.answer((8, 0, 0, 4), true);
        let again: Vec<(i32, i32)> = r
            .take_for(8)
            .iter()
            .map(|m| (m.meta.customer_id, m.meta.timestamp))
            .collect();
        assert_eq!(
            again,
            vec![(0, 3), (0, 5), (1, 2)],
            "answered ones are not sent again"
        );
        assert_eq!(r.msgs.len(), 1, "server 10's request stays");
        assert!(r.take_for(8).is_empty(), "taken once");
    }

    #[test]
    fn what_a_server_answered_is_its_highest_state_changing_request_per_customer_without_errors() {
        let mut r = Retained::default();
        let mut keep = |server, app, customer, ts, push: bool, head: i32, dtype: DType| {
            let meta = Meta {
                recver: server,
                app_id: app,
                customer_id: customer,
                timestamp: ts,
                request: true,
                push,
                pull: !push,
                head,
                dtype,
                ..Meta::default()
            };
            r.msgs
                .insert((server, app, customer, ts), Message::new(meta));
        };
        keep(8, 0, 0, 3, true, 0, DType::F32);
        keep(8, 0, 0, 7, true, 0, DType::F32);
        keep(8, 0, 0, 9, false, 0, DType::F32); // a pull changes nothing
        keep(8, 0, 0, 11, true, 0, DType::F32); // answered with an error
        keep(8, 0, 1, 4, false, 5, DType::F32); // an application command
        keep(8, 0, 2, 5, true, 0, DType::U8);
        keep(8, 1, 0, 6, true, 0, DType::F32);
        keep(10, 0, 0, 12, true, 0, DType::F32); // another server
        keep(8, 0, 3, 13, true, 0, DType::F32); // not answered yet
        keep(8, 2, 0, i32::MAX, true, 0, DType::F32);
        keep(8, 2, 0, i32::MIN, true, 0, DType::F32); // wrapped: later
        for (key, ok) in [
            ((8, 0, 0, 7), true),
            ((8, 0, 0, 3), true),
            ((8, 0, 0, 9), true),
            ((8, 0, 0, 11), false),
            ((8, 0, 1, 4), true),
            ((8, 0, 2, 5), true),
            ((8, 1, 0, 6), true),
            ((10, 0, 0, 12), true),
            ((8, 0, 0, 99), true), // never kept
            ((8, 2, 0, i32::MIN), true),
            ((8, 2, 0, i32::MAX), true),
        ] {
            r.answer(key, ok);
        }
        assert_eq!(
            r.answered_by(8),
            vec![
                ((0, DType::F32), vec![(0, 7), (1, 4)]),
                ((0, DType::U8), vec![(2, 5)]),
                ((1, DType::F32), vec![(0, 6)]),
                ((2, DType::F32), vec![(0, i32::MIN)]),
            ]
        );
        assert_eq!(r.answered_by(10), vec![((0, DType::F32), vec![(0, 12)])]);
        assert_eq!(r.take_for(8).len(), 1, "the unanswered one is still kept");
    }
}
