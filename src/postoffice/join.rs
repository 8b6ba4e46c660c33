//! Joining the cluster: the van bound where this node listens (`bind`); a server or worker
//! registers with the scheduler (ADD_NODE), takes its id from the node table the scheduler
//! sends, and connects to its peers; afterwards it sends heartbeats, and every node passes the
//! start-up barrier (`join_and_meet`; ps-lite's `Van::Start` and `Van::Heartbeat`).

use super::{Postoffice, ALL_GROUP, SCHEDULER};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::Van;
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, NodeTable, Role};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Registers this node `me` with the scheduler and waits for the node table (on the
/// scheduler: waits until every node registered).
///
/// # Errors
/// The scheduler's refusal ([`Error::Remote`]); a failed connection; [`Error::Timeout`]
/// after `PS_TIMEOUT`, naming the scheduler's address (or, on the scheduler, how many nodes
/// of each role registered — those are told so).
pub(super) fn join_cluster(po: &Postoffice, me: &Node) -> Result<()> {
    let deadline = Instant::now() + po.cfg.timing.timeout;
    // A server joining the running job (a rank beyond DMLC_NUM_SERVER) may register before
    // the start completed: the scheduler counts it only once it did.
    let joiner = me.role == Role::Server
        && me
            .requested_rank
            .is_some_and(|r| r as usize >= po.cfg.cluster.num_servers);
    let again = (me.role != Role::Scheduler
        && (joiner || super::recovery::window(&po.cfg).is_some()))
    .then_some(REGISTER_AGAIN);
    if me.role != Role::Scheduler {
        po.van.connect(
            SCHEDULER,
            &po.cfg.cluster.root_uri,
            po.cfg.cluster.root_port,
        )?;
    }
    loop {
        if me.role != Role::Scheduler {
            let meta = Meta {
                request: true,
                ..Meta::for_control(SCHEDULER, ControlMsg::AddNode { node: me.clone() })
            };
            po.send(Message::new(meta))?;
        }
        let next = again.map(|a| Instant::now() + a);
        let ready = po.node.wait(|st, now| {
            if let Some(e) = st.fatal.clone() {
                return Some(Err(e));
            }
            if st.ready {
                return Some(Ok(Some(true)));
            }
            if now >= deadline {
                return Some(Ok(Some(false)));
            }
            next.is_some_and(|n| now >= n).then_some(Ok(None))
        })?;
        match ready {
            Some(true) => return Ok(()),
            Some(false) => break,
            // No table yet: registered again, in case the scheduler that had the first
            // registration was replaced (a repeat is nothing to a scheduler that has it).
            None => tracing::debug!("no node table yet; registering again"),
        }
    }
    start_up_timeout(po).inspect_err(|e| crate::waits::timed_out(e))
}

/// With lost nodes replaced (`PS_CHECKPOINT_DIR`), how often a node without its node table
/// registers again: the scheduler may have been replaced meanwhile; and how often a server
/// joining the running job does, until the scheduler's start completed.
const REGISTER_AGAIN: Duration = Duration::from_secs(2);

/// The start-up deadline passed: on the scheduler, tells the nodes that registered, unless
/// the last one registered meanwhile (then the start goes on).
fn start_up_timeout(po: &Postoffice) -> Result<()> {
    let secs = po.cfg.timing.timeout.as_secs_f64();
    match &po.scheduler {
        Some(s) => {
            let Some((joined, why)) = s.scheduler().give_up(po.cfg.timing.timeout) else {
                return Ok(());
            };
            super::scheduler::refuse_all(po, &joined, &why);
            Err(Error::Timeout(why))
        }
        None => {
            let me = po.node.me.read().map(|m| m.clone()).unwrap_or_default();
            Err(Error::Timeout(format!(
                "start-up: no answer from the scheduler at {} within {secs:.0} s \
                 (PS_TIMEOUT); is it running, are DMLC_PS_ROOT_URI and \
                 DMLC_PS_ROOT_PORT right, and can it reach this node at {} \
                 (DMLC_NODE_HOST, DMLC_INTERFACE)?",
                crate::wire::place(&po.cfg.cluster.root_uri, po.cfg.cluster.root_port),
                crate::wire::place(&me.host, me.port)
            )))
        }
    }
}

/// The scheduler's node table (or its refusal) arrived: take this node's id from it and
/// connect to the peers that carry key-value traffic (workers to servers, servers to
/// workers).
pub(super) fn update_table(po: &Postoffice, meta: &Meta, table: NodeTable) {
    let nodes = table.nodes;
    let mut st = crate::sync::lock(&po.node.state);
    if let Some(e) = &meta.error {
        st.fatal = Some(Error::Remote {
            node: Node::describe(SCHEDULER),
            message: e.clone(),
        });
        po.node.cv.notify_all();
        return;
    }
    if st.ready {
        return;
    }
    let me = po.node.me.read().map(|m| m.clone()).unwrap_or_default();
    let Some(mine) = nodes
        .iter()
        .find(|n| n.host == me.host && n.port == me.port && n.role == me.role)
    else {
        st.fatal = Some(Error::Van(format!(
            "the scheduler's node table does not list this node ({}:{})",
            me.host, me.port
        )));
        po.node.cv.notify_all();
        return;
    };
    if let Ok(mut m) = po.node.me.write() {
        m.id = mine.id;
    }
    po.van.set_reach(table.reach);
    po.van.set_node_id(mine.id);
    let peers = nodes.iter().filter(|n| Node::are_peers(mine.id, n.id));
    for n in peers {
        if let Err(e) = po.van.connect(n.id, &n.host, n.port) {
            st.fatal = Some(e);
            po.node.cv.notify_all();
            return;
        }
    }
    {
        let mut t = po.recovery.takeover();
        t.replacement = table.replacement.as_ref().is_some_and(|r| !r.joined);
        t.joined = table.replacement.as_ref().is_some_and(|r| r.joined);
        t.replace_within = table.replace_within_ms;
        t.run_id = table.run_id;
        if let Some(r) = &table.replacement {
            t.must_meet = r.start_open;
            t.inherited = r.barriers_done.iter().copied().collect();
            po.recovery.set_incarnation(r.incarnation);
            // What its predecessor passed counts as passed (a re-registration tells it).
            st.barrier.started = !r.start_open;
            st.barrier.done = t.inherited.clone();
        }
    }
    st.nodes = nodes;
    st.ready = true;
    po.node.cv.notify_all();
}

/// NODE_JOINED from the scheduler: server `node` joined the running job. It goes into the
/// node table; this node connects to it when they are peers (with the password `reach`).
pub(super) fn on_node_joined(po: &Postoffice, node: Node, reach: Vec<(NodeId, String)>) {
    let me = po.my_id();
    if node.id == me || Node::role_of(node.id) != Some(Role::Server) {
        tracing::warn!("dropped a NODE_JOINED naming {}", Node::describe(node.id));
        return;
    }
    {
        let mut st = lock(&po.node.state);
        if st.nodes.iter().any(|n| n.id == node.id) {
            return;
        }
        st.nodes.push(node.clone());
    }
    po.van.set_reach(reach);
    if Node::are_peers(me, node.id) {
        if let Err(e) = po.van.connect(node.id, &node.host, node.port) {
            super::failure::mark_lost(po, node.id, super::failure::LossCause::ChannelFailed, e);
            return;
        }
    }
    tracing::warn!(
        "{} joined the running job at {}",
        Node::describe(node.id),
        crate::wire::place(&node.host, node.port)
    );
    po.node.wake();
}

/// The `ps-heartbeat` thread of a server or worker: a heartbeat to the scheduler every
/// `PS_HEARTBEAT_INTERVAL` until the node stops. When lost nodes are replaced and the
/// scheduler has not answered for 1.5 intervals, a re-registration ([`ControlMsg::Rejoin`])
/// goes instead, until a scheduler answers at its address. A scheduler silent for too long
/// ends the job ([`check_scheduler`](super::failure::check_scheduler)).
pub(super) fn heartbeat_loop(weak: &Weak<Postoffice>) {
    let mut next = Instant::now();
    let mut last_look = None;
    loop {
        let Some(held) = weak.upgrade() else { return };
        let po = held.as_ref();
        if po.life.stopped.load(Ordering::Acquire) {
            return;
        }
        super::failure::check_scheduler(po, &mut last_look);
        if Instant::now() >= next {
            let interval = po.cfg.timing.heartbeat_interval;
            next = Instant::now() + interval;
            // No barrier begins (and sends its arrival) between reading the barriers for a
            // re-registration and sending it.
            let _arrival = lock(&po.node.arrival);
            let control = match rejoin_due(po, interval) {
                Some(rejoin) => ControlMsg::Rejoin(rejoin),
                None => ControlMsg::Heartbeat,
            };
            let meta = Meta {
                request: true,
                ..Meta::for_control(SCHEDULER, control)
            };
            if let Err(e) = po.send(Message::new(meta)) {
                tracing::debug!("heartbeat not sent: {e}");
            }
        }
        drop(held);
        // Woken early by `shutdown`.
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// This node's re-registration, when one is due: lost nodes are replaced and the scheduler
/// has not answered for 1.5 heartbeat `interval`s, or this node re-registers already and
/// no heartbeat answer came since. Says so the first time.
fn rejoin_due(po: &Postoffice, interval: Duration) -> Option<crate::wire::Rejoin> {
    if !super::recovery::replaces_lost(po) {
        return None;
    }
    let me = po.node.me.read().map(|m| m.clone()).unwrap_or_default();
    let mut st = crate::sync::lock(&po.node.state);
    let now = Instant::now();
    let quiet = st
        .last_from_scheduler
        .map(|t| now.saturating_duration_since(t))?;
    if quiet < interval * 3 / 2 && st.rejoining.is_none() {
        return None;
    }
    if st.rejoining.is_none() {
        st.rejoining = Some(now);
        tracing::warn!(
            "the scheduler at {} has not answered for {:.1} s; re-registering with whichever \
             scheduler answers there (pslite-launch --restart starts one; by hand, start one \
             with the same DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT); training goes on",
            crate::wire::place(&po.cfg.cluster.root_uri, po.cfg.cluster.root_port),
            quiet.as_secs_f64()
        );
    }
    let t = po.recovery.takeover();
    Some(crate::wire::Rejoin {
        node: me,
        run_id: t.run_id,
        nodes: st.nodes.clone(),
        incarnation: po.incarnation(),
        holders: po.recovery.holders(),
        started: st.barrier.started,
        barriers_done: st.barrier.done.iter().map(|(&g, &n)| (g, n)).collect(),
        waiting: st.barrier.waiting(),
        layout: super::resize::held_wire(po),
        clock: st.clock.told(),
    })
}

/// A scheduler answered a heartbeat (or a re-registration): a re-registration under way
/// is over (any other message of a new scheduler may come before it counts this node).
pub(super) fn heartbeat_answered(po: &Postoffice) {
    let Some(since) = lock(&po.node.state).rejoining.take() else {
        return;
    };
    po.metrics.membership.rejoins.inc();
    // A scheduler that took the job over learns from this node that its rows arrived, and
    // a worker's clock.
    super::resize::report_again(po);
    super::staleness::say_again(po);
    tracing::warn!(
        "re-registered with the scheduler at {}, {:.1} s after re-registering began",
        crate::wire::place(&po.cfg.cluster.root_uri, po.cfg.cluster.root_port),
        since.elapsed().as_secs_f64()
    );
}

/// (Scheduler) The credentials node `id` presents to the peers it connects to in `nodes`
/// (servers to workers and back, servers to servers), for the node table it is sent: a node holding only its
/// key cannot compute them ([`crate::auth`]). Empty without the token.
pub(super) fn reach_for(po: &Postoffice, id: NodeId, nodes: &[Node]) -> Vec<(NodeId, String)> {
    let Some(crate::auth::Secret::Token(t)) = &po.cfg.auth else {
        return Vec::new();
    };
    nodes
        .iter()
        .filter(|n| Node::are_peers(id, n.id))
        .map(|n| (n.id, t.node_key(n.id).password_from(id)))
        .collect()
}

/// Binds `van` where this node listens (the scheduler at `DMLC_PS_ROOT_URI`/`_PORT`, any
/// other node at its host, any port); returns this node as it will register.
pub(super) fn bind(cfg: &Config, van: &dyn Van) -> Result<Node> {
    let is_scheduler = cfg.role == Role::Scheduler;
    let (host, port) = if is_scheduler {
        (cfg.cluster.root_uri.clone(), cfg.cluster.root_port)
    } else {
        (cfg.node.host.clone(), 0)
    };
    if is_scheduler {
        // Before the first connection can arrive: the ZAP handler checks credentials as
        // the scheduler's.
        van.set_node_id(SCHEDULER);
    }
    let port = van.bind(&host, port).map_err(|e| {
        let var = if is_scheduler {
            "DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT (the scheduler listens there)"
        } else {
            "DMLC_NODE_HOST or DMLC_INTERFACE (this node listens there)"
        };
        Error::Config(format!("cannot listen at {host}: check {var}: {e}"))
    })?;
    Ok(Node {
        role: cfg.role,
        id: if is_scheduler { SCHEDULER } else { -1 },
        host,
        port,
        requested_rank: if is_scheduler {
            None
        } else {
            cfg.node.rank_hint
        },
    })
}

/// Registers (or, on the scheduler, admits everyone), starts heartbeats and passes the
/// start-up barrier; on failure stops this node.
pub(super) fn join_and_meet(po: &Arc<Postoffice>, me: &Node) -> Result<()> {
    let is_scheduler = me.role == Role::Scheduler;
    if let Err(e) = join_cluster(po, me) {
        if !is_scheduler {
            // Nothing queued is worth waiting for; the scheduler's refusals are.
            po.van.abort();
        }
        po.shutdown();
        return Err(e);
    }
    if !is_scheduler {
        po.spawn("ps-heartbeat", heartbeat_loop)?;
    }
    let skip_start = {
        let t = po.recovery.takeover();
        (t.replacement || t.joined) && !t.must_meet
    };
    if skip_start {
        // The others passed the start-up barrier long ago.
        lock(&po.node.state).barrier.started = true;
        return Ok(());
    }
    if let Err(e) = super::node::barrier_with(po, ALL_GROUP, Some(po.cfg.timing.timeout), None) {
        po.van.abort();
        po.shutdown();
        return Err(e);
    }
    Ok(())
}

/// Says once per process, at a node's start, when the node runs without authentication
/// (`cfg.auth` is `None`: `PS_AUTH=none`, or no token with the scheduler and this node on
/// loopback), so that nobody runs an open cluster without being told.
pub(super) fn warn_if_unauthenticated(cfg: &crate::config::Config) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if cfg.auth.is_none() {
        ONCE.call_once(|| {
            tracing::warn!(
                "no authentication (PS_AUTH=none, or no PS_AUTH_TOKEN with every address on \
                 loopback): any process that can reach this cluster's ports can join it, send \
                 it commands and read its values; give every node PS_AUTH_TOKEN or \
                 PS_AUTH_TOKEN_FILE to close it"
            );
        });
    }
}

/// Says once per process, at a node's start, when `PS_TIMEOUT` ends waits before a lost
/// node can be declared lost or replaced ([`crate::config::Config::timeout_warning`]).
pub(super) fn warn_if_timeout_short(cfg: &crate::config::Config) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if let Some(w) = cfg.timeout_warning() {
        ONCE.call_once(|| tracing::warn!("{w}"));
    }
}

/// Warns when the scheduler's address is a host name (not `localhost`) that resolves to
/// loopback here: Debian's /etc/hosts maps a host's own name to 127.0.1.1, and then no other
/// host can reach the scheduler.
pub(super) fn warn_if_loopback_name(root_uri: &str) {
    if root_uri == "localhost" || root_uri.parse::<std::net::IpAddr>().is_ok() {
        return;
    }
    if let Ok(ips) = crate::config::address::resolve(root_uri) {
        if ips.iter().all(|ip| ip.is_loopback()) {
            tracing::warn!(
                "DMLC_PS_ROOT_URI={root_uri:?} resolves to {} here, a loopback address: only \
                 nodes on this host can reach the scheduler (/etc/hosts often maps a host's own \
                 name to 127.0.1.1); give an address the other hosts reach",
                ips[0]
            );
        }
    }
}
