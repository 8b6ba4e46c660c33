//! Joining the cluster: a server or worker registers with the scheduler (ADD_NODE), takes its
//! id from the node table the scheduler sends, and connects to its peers; afterwards it sends
//! heartbeats (ps-lite's `Van::Start` and `Van::Heartbeat`).

use super::{Postoffice, SCHEDULER};
use crate::error::{Error, Result};
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, NodeTable, Role};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

impl Postoffice {
    /// Registers this node `me` with the scheduler and waits for the node table (on the
    /// scheduler: waits until every node registered).
    ///
    /// # Errors
    /// The scheduler's refusal ([`Error::Remote`]); a failed connection; [`Error::Timeout`]
    /// after `PS_TIMEOUT`, naming the scheduler's address (or, on the scheduler, how many nodes
    /// of each role registered — those are told so).
    pub(super) fn join_cluster(&self, me: &Node) -> Result<()> {
        let deadline = Instant::now() + self.cfg.timeout;
        if me.role != Role::Scheduler {
            self.van
                .connect(SCHEDULER, &self.cfg.root_uri, self.cfg.root_port)?;
            let meta = Meta {
                request: true,
                ..Meta::for_control(SCHEDULER, ControlMsg::AddNode { node: me.clone() })
            };
            self.send(Message::new(meta))?;
        }
        let ready = self.node.wait(|st, now| {
            if let Some(e) = st.fatal.clone() {
                return Some(Err(e));
            }
            if st.ready {
                return Some(Ok(true));
            }
            (now >= deadline).then_some(Ok(false))
        })?;
        if ready {
            return Ok(());
        }
        self.start_up_timeout()
            .inspect_err(|e| crate::waits::timed_out(e))
    }

    /// The start-up deadline passed: on the scheduler, tells the nodes that registered, unless
    /// the last one registered meanwhile (then the start goes on).
    fn start_up_timeout(&self) -> Result<()> {
        let secs = self.cfg.timeout.as_secs_f64();
        match &self.scheduler {
            Some(s) => {
                let Some((joined, why)) = s.scheduler().give_up(self.cfg.timeout) else {
                    return Ok(());
                };
                self.refuse_all(&joined, &why);
                Err(Error::Timeout(why))
            }
            None => {
                let me = self.node.me.read().map(|m| m.clone()).unwrap_or_default();
                Err(Error::Timeout(format!(
                    "start-up: no answer from the scheduler at {} within {secs:.0} s \
                     (PS_TIMEOUT); is it running, are DMLC_PS_ROOT_URI and \
                     DMLC_PS_ROOT_PORT right, and can it reach this node at {} \
                     (DMLC_NODE_HOST, DMLC_INTERFACE)?",
                    crate::wire::place(&self.cfg.root_uri, self.cfg.root_port),
                    crate::wire::place(&me.host, me.port)
                )))
            }
        }
    }

    /// The scheduler's node table (or its refusal) arrived: take this node's id from it and
    /// connect to the peers that carry key-value traffic (workers to servers, servers to
    /// workers).
    pub(super) fn update_table(&self, meta: &Meta, table: NodeTable) {
        let nodes = table.nodes;
        let mut st = crate::sync::lock(&self.node.state);
        if let Some(e) = &meta.error {
            st.fatal = Some(Error::Remote {
                node: Node::describe(SCHEDULER),
                message: e.clone(),
            });
            self.node.cv.notify_all();
            return;
        }
        if st.ready {
            return;
        }
        let me = self.node.me.read().map(|m| m.clone()).unwrap_or_default();
        let Some(mine) = nodes
            .iter()
            .find(|n| n.host == me.host && n.port == me.port && n.role == me.role)
        else {
            st.fatal = Some(Error::Van(format!(
                "the scheduler's node table does not list this node ({}:{})",
                me.host, me.port
            )));
            self.node.cv.notify_all();
            return;
        };
        if let Ok(mut m) = self.node.me.write() {
            m.id = mine.id;
        }
        self.van.set_reach(table.reach);
        self.van.set_node_id(mine.id);
        let peers = nodes
            .iter()
            .filter(|n| Node::is_worker_server_pair(mine.id, n.id));
        for n in peers {
            if let Err(e) = self.van.connect(n.id, &n.host, n.port) {
                st.fatal = Some(e);
                self.node.cv.notify_all();
                return;
            }
        }
        {
            let mut t = self.recovery.takeover();
            t.replacement = table.replacement.is_some();
            t.replace_within = table.replace_within_ms;
            t.run_id = table.run_id;
            if let Some(r) = &table.replacement {
                t.must_meet = r.start_open;
                t.inherited = r.barriers_done.iter().copied().collect();
                self.recovery.set_incarnation(r.incarnation);
            }
        }
        st.nodes = nodes;
        st.ready = true;
        self.node.cv.notify_all();
    }

    /// The `ps-heartbeat` thread of a server or worker: a heartbeat to the scheduler every
    /// `PS_HEARTBEAT_INTERVAL` until the node stops; a scheduler silent for longer than
    /// `PS_HEARTBEAT_TIMEOUT` ends the job ([`check_scheduler`](Self::check_scheduler)).
    pub(super) fn heartbeat_loop(weak: &Weak<Postoffice>) {
        let mut next = Instant::now();
        let mut last_look = None;
        loop {
            let Some(po) = weak.upgrade() else { return };
            if po.life.stopped.load(Ordering::Acquire) {
                return;
            }
            po.check_scheduler(&mut last_look);
            if Instant::now() >= next {
                next = Instant::now() + po.cfg.heartbeat_interval;
                let meta = Meta {
                    request: true,
                    ..Meta::for_control(SCHEDULER, ControlMsg::Heartbeat)
                };
                if let Err(e) = po.send(Message::new(meta)) {
                    tracing::debug!("heartbeat not sent: {e}");
                }
            }
            drop(po);
            // Woken early by `shutdown`.
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }

    /// (Scheduler) The credentials node `id` presents to the peers it connects to in `nodes`
    /// (servers to workers and back), for the node table it is sent: a node holding only its
    /// key cannot compute them ([`crate::auth`]). Empty without the token.
    pub(super) fn reach_for(&self, id: NodeId, nodes: &[Node]) -> Vec<(NodeId, String)> {
        let Some(crate::auth::Secret::Token(t)) = &self.cfg.auth else {
            return Vec::new();
        };
        nodes
            .iter()
            .filter(|n| Node::is_worker_server_pair(id, n.id))
            .map(|n| (n.id, t.node_key(n.id).password_from(id)))
            .collect()
    }
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
