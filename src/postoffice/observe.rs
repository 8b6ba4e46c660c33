//! What the postoffice shows of itself: its metrics server (`PS_METRICS_PORT`,
//! [`crate::metrics`]), the scheduler's missed heartbeats as a metric, and its lines of the
//! "who waits on whom" block ([`crate::waits`]): the barrier it waits in, what the scheduler
//! still misses, lost peers, and when each peer was last heard of.

use super::{Postoffice, SCHEDULER};
use crate::error::Result;
use crate::metrics::Peer;
use crate::sync::lock;
use crate::waits::{age, Waits};
use crate::wire::Node;
use std::time::Instant;

/// Starts the metrics server on `PS_METRICS_PORT` (when set) at `PS_METRICS_HOST`: loopback
/// by default (`::1` for a node listening on IPv6), this node's listening address with
/// `node`, or the address given; with port 0 the port chosen is printed on standard
/// error.
///
/// # Errors
/// [`crate::Error::Config`] when the port cannot be bound.
pub(super) fn serve_metrics(po: &Postoffice) -> Result<()> {
    let Some(port) = po.cfg.metrics.port else {
        return Ok(());
    };
    let node = po
        .node
        .me
        .read()
        .map(|m| m.host.clone())
        .unwrap_or_default();
    let host = match po.cfg.metrics.host.as_str() {
        "" if node.contains(':') => "::1".to_string(),
        "" => "127.0.0.1".to_string(),
        "node" => node,
        h => h.to_string(),
    };
    let server = crate::metrics::serve(&po.metrics, &host, port)?;
    let url = format!(
        "http://{}/metrics",
        crate::wire::place(&server.addr().ip().to_string(), server.addr().port())
    );
    if port == 0 {
        // Nobody else knows where: say it whatever the log level (pslite-launch shows it
        // under the node's name).
        eprintln!("pslite: {} metrics at {url}", po.cfg.role);
    } else {
        tracing::info!("{} metrics at {url}", po.cfg.role);
    }
    *lock(&po.life.metrics_server) = Some(server);
    Ok(())
}

/// (Scheduler) Counts the heartbeats the nodes missed since the last tick.
pub(super) fn count_missed_heartbeats(po: &Postoffice, now: Instant) {
    let Some(s) = &po.scheduler else { return };
    let missed = s
        .scheduler()
        .missed_heartbeats(now, po.cfg.timing.heartbeat_interval);
    for (id, n) in missed {
        po.metrics.heartbeats_missed(id, n);
    }
}

impl Waits for Postoffice {
    fn waits(&self, now: Instant) -> Vec<String> {
        let me = match self.my_id() {
            id if id < 0 => "this node (no id yet)".to_string(),
            id => Node::describe(id),
        };
        let mut lines = Vec::new();
        {
            let st = lock(&self.node.state);
            if let (Some(g), Some(since)) = (st.barrier.group, st.barrier.since) {
                if !self.life.stopped.load(std::sync::atomic::Ordering::Acquire) {
                    lines.push(format!(
                        "{me} waits in a barrier of group {g} (members: {}) for {}; the \
                         scheduler's lines (its log, or SIGUSR1 there) name who it still misses",
                        group_members(g),
                        age(now.saturating_duration_since(since))
                    ));
                }
            }
            if !st.ready && self.my_id() != SCHEDULER {
                lines.push(format!(
                    "{me} waits for the scheduler's node table (start-up) at {}",
                    crate::wire::place(&self.cfg.cluster.root_uri, self.cfg.cluster.root_port)
                ));
            }
            for e in self.failures.errors() {
                lines.push(format!("{me}: lost {e}"));
            }
        }
        if let Some(s) = &self.scheduler {
            lines.extend(s.scheduler().waits(now));
        }
        let heard: Vec<String> = self
            .metrics
            .last_heard()
            .into_iter()
            .map(|(id, d)| format!("{} {} ago", Peer(id).name(), age(d)))
            .collect();
        if !heard.is_empty() {
            lines.push(format!("{me} last heard from: {}", heard.join(", ")));
        }
        lines
    }
}

/// The roles in barrier group `g` (a sum of `SCHEDULER_GROUP`, `SERVER_GROUP`, `WORKER_GROUP`).
fn group_members(g: i32) -> String {
    let roles: Vec<&str> = [
        (super::SCHEDULER_GROUP, "scheduler"),
        (super::SERVER_GROUP, "servers"),
        (super::WORKER_GROUP, "workers"),
    ]
    .into_iter()
    .filter(|&(bit, _)| g & bit != 0)
    .map(|(_, name)| name)
    .collect();
    roles.join(" + ")
}
