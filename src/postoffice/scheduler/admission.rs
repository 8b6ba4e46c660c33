//! What the scheduler decides ([`Scheduler`](super::Scheduler)'s answers): about a
//! registration ([`Admission`]), and at a tick of its clock ([`Tick`]: the nodes declared
//! lost and why, the barriers that failed).

use super::super::barrier::Outcome;
use crate::wire::Node;
use crate::wire::NodeId;
use std::time::Duration;

/// What to do about one registration (ADD_NODE).
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Counted; not every node has registered yet.
    Waiting,
    /// A repeat of a registration already counted (same host and port): nothing to do.
    Repeat,
    /// A registration from a node listed in a rebuilt scheduler's table that never got the
    /// old scheduler's table ([`Scheduler::rejoin`](super::Scheduler::rejoin)): send it the table (the node is given
    /// with its id).
    Resend(Node),
    /// Not admitted: tell the node why.
    Refused {
        /// The node, as it registered.
        node: Node,
        /// Why, naming the variable to check.
        why: String,
    },
    /// Every node registered: the node table, the scheduler first, then servers and workers
    /// with their ids. Send it to every node but the scheduler.
    Complete(Vec<Node>),
    /// A server or worker registered after the start to replace a lost one of its role: it
    /// takes the lost node's id (so its rank, and a server's key range). Send it
    /// the table, tell every other node its address, and tell `displaced` (the old holder) that
    /// it was replaced.
    Replaced {
        /// The replacement, with its id.
        node: Node,
        /// The node it replaces (told it was replaced: alive or paused, it then stops).
        displaced: Node,
        /// The node table with the replacement in it.
        table: Vec<Node>,
        /// Whether the start-up barrier (the first of all nodes) has completed; if not, the
        /// replacement must pass it.
        started: bool,
        /// What the replacement takes over from the node it replaces.
        inherited: Inherited,
    },
    /// A server registered after the start asking for the rank after the last server's
    /// (`PSLITE_RANK` = the number of servers): it joins the running job under that rank's
    /// id, holding no keys until a resize adds it. Send it the key layout and the table, and
    /// tell every other node its address.
    Joined {
        /// The new server, with its id.
        node: Node,
        /// The node table with it (after the other servers).
        table: Vec<Node>,
        /// Whether the start-up barrier has completed (if not, it must pass it).
        started: bool,
        /// The barriers completed so far (it passes them at once); incarnation 0.
        inherited: Inherited,
    },
}

/// What a replacement takes over besides the id: where its predecessor was in the job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inherited {
    /// Per barrier group, the barriers of that group completed since the start-up barrier
    /// (the predecessor passed them; the replacement's `Postoffice::barrier` passes them at
    /// once, and applications skip the work before them).
    pub barriers: Vec<(i32, u64)>,
    /// How many nodes held this id before the replacement (1 for the first replacement): a
    /// replacement worker numbers its requests from `incarnation × 2^27` on, so that answers
    /// to its predecessor's requests match none of its own.
    pub incarnation: u32,
}

/// How many times one worker id may be replaced: a replacement numbers its requests from
/// `incarnation × 2^27` on, in 16 ranges of an `i32`.
pub const MAX_WORKER_REPLACEMENTS: u32 = 15;

/// Why the scheduler declared a node lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// No heartbeat for this long (`PS_HEARTBEAT_TIMEOUT`).
    Silent(Duration),
    /// A lost node was not replaced within this long (`PS_RECOVERY_TIMEOUT`).
    NotReplaced(Duration),
}

/// A node the scheduler declared lost at a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The node.
    pub id: NodeId,
    /// Why.
    pub why: Why,
    /// `Some(window)`: a server or worker whose replacement is awaited for `window`
    /// (`PS_RECOVERY_TIMEOUT`); the job goes on meanwhile. `None`: the job fails.
    pub awaiting: Option<Duration>,
}

/// What [`Scheduler::tick`](super::Scheduler::tick) decided (a new kind of decision is a new field).
#[derive(Debug, Default)]
pub struct Tick {
    /// The nodes newly declared lost.
    pub lost: Vec<Declared>,
    /// The barriers that failed.
    pub failed: Vec<Outcome>,
}
