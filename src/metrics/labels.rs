//! The label sets of the metrics, and a node as a label value.

use crate::wire::{Node, NodeId, Role};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// A node as a label value: `scheduler`, `server 0`, `worker 1`; `node 5` for an id of no
/// role.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Peer(pub NodeId);

impl Peer {
    /// `scheduler`, `server 0`, `worker 1`, or `node ID`.
    pub fn name(self) -> String {
        match Node::role_of(self.0) {
            Some(Role::Scheduler) => "scheduler".into(),
            Some(r) => format!("{r} {}", Node::rank_of(self.0)),
            None => format!("node {}", self.0),
        }
    }
}

impl EncodeLabelValue for Peer {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        std::fmt::Write::write_str(encoder, &self.name())
    }
}

/// Labels of the per-peer traffic counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// The other node.
    pub peer: Peer,
    /// The van's name (`zmq`, `rdma`).
    pub van: &'static str,
}

/// Labels of a worker's request latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The server the part went to.
    pub server: Peer,
    /// `push`, `pull` or `push-pull`.
    pub kind: &'static str,
}

/// Labels naming a request's kind only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `push`, `pull`, `push-pull`; on the server also `command` (neither push nor pull).
    pub kind: &'static str,
}

/// Labels of the RDMA WC error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `send` or `receive`.
    pub queue: &'static str,
}

/// Labels of an embedding table's metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    /// The application id the table serves.
    pub app: i32,
}
