//! Recovery: a lost server's or worker's place taken by a replacement, and the job
//! going on.
//!
//! With `PS_CHECKPOINT_DIR` set on the scheduler (either van), a server declared lost is not a
//! failure at once: the scheduler sends NODE_LOST with a replacement window
//! (`replace_within_ms` of `ControlMsg::NodeLost`, `PS_RECOVERY_TIMEOUT`), and every node
//! *awaits* it. A
//! server that registers meanwhile (or that asks for the rank of a server still counted
//! alive: `pslite-launch --restart` starts one as soon as the old process died) takes the lost
//! server's id, rank and key range: the scheduler sends it the node table marked
//! `replacement` (it restores its state from the checkpoint and skips the start-up barrier)
//! and NODE_REPLACED with its address to every other node. A worker then connects to it and
//! sends again every request the lost server had not answered: each `KVWorker` keeps its
//! requests to servers until answered (`kv/worker/tracker/replaced.rs`, on
//! [`CustomerEvent::PeerReplaced`](super::CustomerEvent::PeerReplaced)), and the replacement
//! answers a request it
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
//! (the scheduler's verdict is awaited), and a request whose send failed stays kept by its
//! `KVWorker`.
//!
//! A lost worker is awaited the same way, and a worker that registers meanwhile (or asks for
//! the rank of one still counted alive) takes its id and rank. The servers are told first
//! (they connect to it and forget the old one's resend state), then it gets the table with
//! what it takes over (`scheduler::Inherited`): the barriers its predecessor completed, which its
//! [`Postoffice::barrier`] passes at once and which tell an application where to take up the
//! work ([`Postoffice::inherited_barriers`]), and its incarnation, from which its `KVWorker`
//! numbers requests apart from its predecessor's (late answers to those match nothing).
//! Every message carries its sender's incarnation (`Stamp::incarnation`), and a node told of a
//! replacement (NODE_REPLACED carries the new incarnation; the scheduler knows it) drops what
//! earlier holders of the id still send: requests the dead worker had in flight are not applied
//! after the replacement took over, barrier requests of a displaced node do not count as its
//! replacement's. What the predecessor pushed and the servers applied before stays applied:
//! `kv-app` reads it from progress keys and pushes only the rest; `lr` trains the interrupted
//! epoch again.
//!
//! The scheduler holds a replacement worker's table until every server confirmed the
//! NODE_REPLACED it sent them (at most `CONFIRM_WAIT`, `scheduler/driver.rs`): a server has connected to the new
//! worker before any request of it can arrive.
//!
//! A scheduler started in a silent one's place takes the job over from the nodes'
//! re-registrations ([`super::scheduler`]'s `rejoin`).

use super::{Postoffice, SCHEDULER};
use crate::config::Config;
use crate::sync::lock;
use crate::wire::{Command, ControlMsg, Message, Meta, Node, NodeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// How long the scheduler awaits a lost server's replacement: `PS_RECOVERY_TIMEOUT` when
/// `PS_CHECKPOINT_DIR` is set; `None` (a loss fails the job) otherwise.
pub(super) fn window(cfg: &Config) -> Option<Duration> {
    cfg.checkpoint.as_ref().map(|cp| cp.recovery_timeout)
}

/// What the node table told this node about replacements.
#[derive(Default)]
pub(super) struct Takeover {
    /// This node replaces a lost one (it restores its state and skipped the start barrier).
    pub replacement: bool,
    /// A server that joined the running job under a new id (not a replacement).
    pub joined: bool,
    /// A replacement (or a joined server) whose cluster has not passed the start-up barrier
    /// yet: it passes it.
    pub must_meet: bool,
    /// How long, in ms, the scheduler awaits a lost node's replacement (0: a loss fails the
    /// job), as its node table says.
    pub replace_within: u64,
    /// This run's id (the scheduler draws it; the node table carries it).
    pub run_id: u64,
    /// A replacement: per group, the barriers its predecessor completed.
    pub inherited: BTreeMap<i32, u64>,
    /// Per group, the barriers [`Postoffice::barrier`] was called for.
    pub barriers_called: BTreeMap<i32, u64>,
}

/// Recovery's state. `replacing` is shared by every send and exclusive while a replaced peer's
/// path is swapped (the resend book's and the van's locks are taken inside it); `holders` is
/// taken alone or inside `replacing`; `takeover` alone or under the membership state (the
/// node table's arrival).
#[derive(Default)]
pub(super) struct Recovery {
    /// What the node table said ([`Takeover`]).
    takeover: Mutex<Takeover>,
    /// How many nodes held this node's id before it (sent in every message's meta).
    incarnation: AtomicU32,
    /// Per replaced peer, the incarnation of its current holder: messages of earlier holders
    /// are dropped.
    holders: Mutex<HashMap<NodeId, u32>>,
    /// A peer was replaced: received messages are checked against `holders` (read before it
    /// is locked, so receiving pays nothing otherwise).
    replaced_any: AtomicBool,
    /// Held (shared) by every send from stamping to the van, and (exclusive) while a replaced
    /// peer's resend state and path are swapped: no message is numbered for the old peer and
    /// sent to the new one.
    replacing: RwLock<()>,
}

impl Recovery {
    /// The node table's word on replacements, to read or change.
    pub(super) fn takeover(&self) -> std::sync::MutexGuard<'_, Takeover> {
        lock(&self.takeover)
    }

    /// This node is the `n`-th holder of its id.
    pub(super) fn set_incarnation(&self, n: u32) {
        self.incarnation.store(n, Ordering::Relaxed);
    }

    /// Held by a send from stamping to the van (see [`Recovery::replacing`]).
    pub(super) fn numbering(&self) -> RwLockReadGuard<'_, ()> {
        self.replacing.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Held while a replaced peer's resend state and path are swapped.
    fn swapping(&self) -> RwLockWriteGuard<'_, ()> {
        self.replacing.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `peer`'s id is now held by its `incarnation`-th replacement: what earlier
    /// holders still send is dropped from now on.
    pub(super) fn set_holder(&self, peer: NodeId, incarnation: u32) {
        lock(&self.holders).insert(peer, incarnation);
        self.replaced_any.store(true, Ordering::Release);
    }

    /// How many times `peer`'s id was replaced (0: never); read under `replacing` (shared), it
    /// is the generation of the path a send takes.
    pub(super) fn holder(&self, peer: NodeId) -> u32 {
        if !self.replaced_any.load(Ordering::Acquire) {
            return 0;
        }
        lock(&self.holders).get(&peer).copied().unwrap_or(0)
    }

    /// Per replaced peer, the incarnation of its current holder.
    pub(super) fn holders(&self) -> Vec<(NodeId, u32)> {
        lock(&self.holders)
            .iter()
            .map(|(&id, &n)| (id, n))
            .collect()
    }

    /// Whether `meta` comes from an earlier holder of a replaced peer's id.
    fn stale(&self, meta: &Meta) -> bool {
        if !self.replaced_any.load(Ordering::Acquire) || meta.command() == Some(Command::AddNode) {
            return false;
        }
        let holder = lock(&self.holders).get(&meta.sender).copied();
        holder.is_some_and(|h| meta.stamp.incarnation < h)
    }

    /// This node's incarnation (see [`Postoffice::incarnation`]).
    pub(super) fn incarnation(&self) -> u32 {
        self.incarnation.load(Ordering::Relaxed)
    }
}

/// Whether `meta` comes from an earlier holder of a replaced peer's id (a worker that was
/// killed with requests still in flight, a server that was only paused): dropped, so that
/// nothing of it is applied after its replacement took over.
pub(super) fn sent_by_replaced(po: &Postoffice, meta: &Meta) -> bool {
    let stale = po.recovery.stale(meta);
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
pub(super) fn pass_inherited(po: &Postoffice, group: i32) -> bool {
    let mut t = po.recovery.takeover();
    let inherited = t.inherited.get(&group).copied().unwrap_or(0);
    let calls = t.barriers_called.entry(group).or_default();
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

/// Whether lost servers and workers are replaced (the node table said so).
pub(super) fn replaces_lost(po: &Postoffice) -> bool {
    po.recovery.takeover().replace_within > 0
}

/// `peer` was declared lost and a replacement is awaited for `window`: not a failure yet;
/// requests to it stay pending (kept by the `KVWorker`s) until the replacement answers them.
pub(super) fn mark_awaiting(po: &Postoffice, peer: NodeId, why: &str, window: Duration) {
    if !po.failures.await_replacement(peer) {
        return;
    }
    tracing::warn!(
        "{} was declared lost by the scheduler: {why}; awaiting a replacement for up to \
         {:.0} s (PS_RECOVERY_TIMEOUT)",
        Node::describe(peer),
        window.as_secs_f64()
    );
}

/// Why NODE_REPLACED naming `node` is not taken, `None` when it is: the cluster replaces
/// no node (no `PS_CHECKPOINT_DIR`). With replacements on, the node need not have been
/// declared lost here first: a replacement that registers before its predecessor's loss is
/// declared takes over at once.
pub(super) fn replacement_refusal(po: &Postoffice, node: &Node) -> Option<String> {
    let id = node.id;
    (!replaces_lost(po)).then(|| {
        format!(
            "it names {}, but this cluster replaces no node (no PS_CHECKPOINT_DIR)",
            Node::describe(id)
        )
    })
}

/// NODE_REPLACED: `node` now holds a lost server's or worker's id, its `incarnation`-th
/// holder. Connects to it (a worker to a server, a server to a worker or a server), forgets the resend
/// state of the old one, and tells the customers ([`super::CustomerEvent::PeerReplaced`]:
/// a `KVWorker` sends a replaced server the requests it did not answer).
pub(super) fn on_node_replaced(po: &Postoffice, node: &Node, incarnation: u32) {
    let node = node.clone();
    let id = node.id;
    let connect = Node::are_peers(po.my_id(), id);
    po.failures.stop_awaiting(id);
    if let Some(n) = lock(&po.node.state).nodes.iter_mut().find(|n| n.id == id) {
        *n = node.clone();
    }
    // Nothing is numbered for the old peer and sent to the new one meanwhile: the holder
    // (the path's generation) is set, the resend state forgotten and the path replaced
    // under the exclusive lock every send shares.
    {
        let _swap = po.recovery.swapping();
        po.recovery.set_holder(id, incarnation);
        po.resender.replaced(id, incarnation);
        if connect {
            if let Err(e) = po.van.replace_peer(id, &node.host, node.port) {
                drop(_swap);
                super::failure::mark_lost(po, id, super::failure::LossCause::ChannelFailed, e);
                return;
            }
        }
    }
    tracing::warn!(
        "{} was replaced by a new {} at {}:{}",
        Node::describe(id),
        node.role,
        node.host,
        node.port,
    );
    // A KVWorker sends a replaced server what it has not answered.
    lock(&po.routes).broadcast(|| super::CustomerEvent::PeerReplaced {
        peer: id,
        incarnation,
    });
}

/// On a server: NODE_REPLACED (asking for it) is handled; tells the scheduler.
pub(super) fn confirm_replaced(po: &Postoffice, node: Node, incarnation: u32) {
    let confirm = ControlMsg::NodeReplaced { node, incarnation };
    if let Err(e) = po.send(Message::new(Meta::for_control(SCHEDULER, confirm))) {
        tracing::warn!("cannot confirm a replacement to the scheduler: {e}");
    }
}
