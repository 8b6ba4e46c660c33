//! The scheduler's start-up registrations: the nodes registered until the cluster is complete,
//! and the servers that asked too early to join it.

use crate::wire::{Node, Role};
use std::time::Duration;

/// How many early joiners a start-up timeout names.
const EARLY_NAMED: usize = 8;

/// The registrations until the start completes.
#[derive(Default)]
pub(super) struct Starting {
    /// The nodes registered so far.
    pub(super) nodes: Vec<Node>,
    /// Servers that asked for a rank beyond the cluster's (host, port; at most
    /// [`EARLY_NAMED`]): named if the start times out.
    early: Vec<(String, u16)>,
}

impl Starting {
    /// How many nodes of `role` registered.
    pub(super) fn count(&self, role: Role) -> usize {
        self.nodes.iter().filter(|n| n.role == role).count()
    }

    /// Whether `node` is a server asking for a rank beyond the cluster's `servers`: it joins
    /// the running job, so it is not counted as one of them (it would take a starting
    /// server's place); it registers again until the start completed. Kept to be named if
    /// the start times out.
    pub(super) fn early_joiner(&mut self, node: &Node, servers: usize) -> bool {
        let early =
            node.role == Role::Server && node.requested_rank.is_some_and(|r| r as usize >= servers);
        let at = (node.host.clone(), node.port);
        if early && self.early.len() < EARLY_NAMED && !self.early.contains(&at) {
            self.early.push(at);
        }
        early
    }

    /// Why the start timed out after `timeout`, with `servers` and `workers` wanted.
    pub(super) fn timed_out(&self, timeout: Duration, servers: usize, workers: usize) -> String {
        let have = self.count(Role::Server);
        let mut why = format!(
            "start-up: within {:.0} s (PS_TIMEOUT) only {have} of {servers} servers \
             (DMLC_NUM_SERVER) and {} of {workers} workers (DMLC_NUM_WORKER) registered",
            timeout.as_secs_f64(),
            self.nodes.len() - have,
        );
        if !self.early.is_empty() {
            let at: Vec<String> = self
                .early
                .iter()
                .map(|(h, p)| crate::wire::place(h, *p))
                .collect();
            why += &format!(
                "; not counted: the server(s) at {} asked for a rank (PSLITE_RANK) beyond \
                 DMLC_NUM_SERVER, which joins the job once it started",
                at.join(", ")
            );
        }
        why
    }
}
