//! Control messages (ps-lite's `Control`): one variant per command, each with its own fields
//! (as quinn's `Frame`). A message whose `Meta::control` is `None` is data. Whether a control
//! message is a request or an answer is `Meta::request`, as for data.

use serde::{Deserialize, Serialize};

use super::ids::NodeId;
use super::meta::Node;

/// What kind of control message it is (ps-lite's `Control::Command`): for logs, and for the
/// checks that look at the kind only (who may send it).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Registration ([`ControlMsg::AddNode`]) and its answer ([`ControlMsg::NodeTable`]).
    AddNode,
    /// A barrier ([`ControlMsg::Barrier`]) and its release ([`ControlMsg::Released`]).
    Barrier,
    /// [`ControlMsg::Terminate`].
    Terminate,
    /// [`ControlMsg::Heartbeat`].
    Heartbeat,
    /// [`ControlMsg::VanConnect`].
    VanConnect,
    /// [`ControlMsg::Ack`].
    Ack,
    /// [`ControlMsg::NodeLost`].
    NodeLost,
    /// [`ControlMsg::NodeReplaced`].
    NodeReplaced,
    /// [`ControlMsg::NodeJoined`].
    NodeJoined,
    /// [`ControlMsg::Answered`].
    Answered,
    /// [`ControlMsg::Rejoin`].
    Rejoin,
    /// The servers' key layout: [`ControlMsg::Resize`], [`ControlMsg::Layout`],
    /// [`ControlMsg::RangesArrived`].
    Layout,
    /// Bounded staleness: [`ControlMsg::Clock`] and [`ControlMsg::Floor`].
    Clock,
}

/// A control message's body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum ControlMsg {
    /// Registration (request): a node → the scheduler, announcing itself (id -1, or its own
    /// id when it proved it with its key, [`crate::auth`]).
    AddNode {
        /// The registering node.
        node: Node,
    },
    /// The node table (the answer to ADD_NODE): scheduler → a node. With `Meta::error`, the
    /// scheduler's refusal (and an empty table).
    NodeTable(NodeTable),
    /// A barrier (request): node → scheduler.
    Barrier {
        /// Group: sum of the role groups (1 scheduler, 2 servers, 4 workers).
        group: i32,
        /// How long the scheduler waits for the others, in milliseconds; 0 = as long as every
        /// missing member is alive (heartbeats).
        timeout_ms: u64,
        /// The node's application failed (`Meta::error` has its error).
        failed: bool,
    },
    /// A barrier's release (answer): scheduler → members.
    Released {
        /// The barrier's group.
        group: i32,
        /// Why it failed (`Meta::error` has the text naming the nodes); `None`: it completed.
        failure: Option<BarrierFailure>,
    },
    /// Liveness: node → scheduler (request); scheduler → node (answer).
    Heartbeat,
    /// Van bootstrap between two peers (the RDMA van's QP exchange); frame 0 is van-specific.
    VanConnect,
    /// Resend (`PS_RESEND`): the receiver got these data messages of the sender's sequence
    /// (ps-lite's `ACK`, batched: one per peer once the oldest waited a tenth of
    /// `PS_RESEND_TIMEOUT`, at most 20 ms, or 256 wait).
    Ack {
        /// The sequence numbers acknowledged (`Stamp::seq` of the data messages), in the order
        /// received.
        seqs: Vec<u64>,
        /// The holder of the receiver's id whose messages these are (their
        /// `Stamp::incarnation`): a replacement drops the ACKs of its predecessor's messages.
        holder: u32,
    },
    /// Failure: scheduler → every node, `node` was declared lost (`Meta::error` says why: how
    /// long it was silent); also the scheduler's answer to a heartbeat of a node it declared
    /// lost. Not in ps-lite, whose scheduler tells nobody.
    NodeLost {
        /// The lost node.
        node: Node,
        /// How long, in milliseconds, the scheduler awaits its replacement (recovery); 0: the
        /// loss fails the job.
        replace_within_ms: u64,
    },
    /// Recovery: scheduler → every other node, `node` (a lost node's id, rank and key range)
    /// is now served by a replacement at this host and port: connect to it and send it again
    /// the requests it has not answered. As a request to a server: confirm it (a server's
    /// answer, to the scheduler, confirms it). Not in ps-lite.
    NodeReplaced {
        /// The replacement, with the id it took over.
        node: Node,
        /// How many nodes held its id before it.
        incarnation: u32,
    },
    /// Elastic servers: scheduler → every other node, server `node` joined the running job
    /// (a new id, after the last server's): connect to it if it is a peer. It holds no keys
    /// until a resize adds it. Not in ps-lite.
    NodeJoined {
        /// The new server, with its id.
        node: Node,
        /// The PLAIN password the receiving node presents to it ([`NodeTable::reach`]'s
        /// entry for it); empty without the token.
        reach: Vec<(NodeId, String)>,
    },
    /// Recovery cross-check: worker → a replacement server (a request routed like the data
    /// requests of `RequestTag::app_id` and `KvHeader::dtype`, parked until that application is
    /// served). The replacement refuses to serve when its restored log lacks one. Not in
    /// ps-lite.
    Answered {
        /// Per customer id of the application, the highest timestamp of a state-changing
        /// request (a push or an application command) the replaced server answered without
        /// an error: `(customer_id, timestamp)`.
        highest: Vec<(i32, i32)>,
    },
    /// Stop the receiving loop.
    Terminate,
    /// Re-registration (request): a server or worker → the scheduler at the scheduler's
    /// address, once the scheduler has not answered for 1.5 heartbeat intervals and lost nodes
    /// are replaced (`PS_CHECKPOINT_DIR`). A scheduler started in the silent one's place
    /// rebuilds the node table, run id, barrier counts and liveness from these; the scheduler
    /// that only was slow takes it as a heartbeat. Answered with a heartbeat answer. Not in
    /// ps-lite.
    Rejoin(Rejoin),
    /// Elastic servers (request): a server or worker → the scheduler, give server `server` a
    /// share of the keys (`add`) or move all its keys to the other servers (drain). Answered
    /// by the [`ControlMsg::Layout`] broadcast that settles it, or, to the asking node, by a
    /// `Layout` with `Meta::error` saying why it was refused. Not in ps-lite.
    Resize {
        /// The server.
        server: NodeId,
        /// `true`: give it keys; `false`: drain it.
        add: bool,
    },
    /// The servers' key layout: scheduler → every server and worker, when a resize starts
    /// (the moves to make) and again when every new owner has its rows (`settled`).
    Layout(KeyLayout),
    /// Elastic servers: a server → the scheduler, every key-value server of this node holds
    /// the rows moved to it for layout `epoch`.
    RangesArrived {
        /// The layout's epoch.
        epoch: u64,
        /// The bytes of rows this node received for it.
        bytes: u64,
        /// Why rows could not be exported or imported, per range that failed.
        failed: Vec<String>,
    },
    /// Bounded staleness (request): a worker → the scheduler, this worker is at clock `clock`
    /// ([`crate::postoffice::Postoffice::clock`]). Not in ps-lite.
    Clock {
        /// The worker's clock (1 after its first step).
        clock: u64,
        /// The worker waits at this clock (beyond the floor it knows), or says its clock again
        /// while it waits: answered with the floor even when it did not rise.
        waits: bool,
    },
    /// Bounded staleness (answer): the scheduler → workers, the slowest worker's clock.
    Floor {
        /// The lowest clock of all workers.
        floor: u64,
        /// A worker at that clock.
        slowest: NodeId,
    },
}

impl ControlMsg {
    /// Its kind.
    pub fn command(&self) -> Command {
        match self {
            ControlMsg::AddNode { .. } | ControlMsg::NodeTable(_) => Command::AddNode,
            ControlMsg::Barrier { .. } | ControlMsg::Released { .. } => Command::Barrier,
            ControlMsg::Heartbeat => Command::Heartbeat,
            ControlMsg::VanConnect => Command::VanConnect,
            ControlMsg::Ack { .. } => Command::Ack,
            ControlMsg::NodeLost { .. } => Command::NodeLost,
            ControlMsg::NodeReplaced { .. } => Command::NodeReplaced,
            ControlMsg::NodeJoined { .. } => Command::NodeJoined,
            ControlMsg::Answered { .. } => Command::Answered,
            ControlMsg::Terminate => Command::Terminate,
            ControlMsg::Rejoin(_) => Command::Rejoin,
            ControlMsg::Resize { .. }
            | ControlMsg::Layout(_)
            | ControlMsg::RangesArrived { .. } => Command::Layout,
            ControlMsg::Clock { .. } | ControlMsg::Floor { .. } => Command::Clock,
        }
    }
}

impl ControlMsg {
    /// The node a registration (ADD_NODE request) announces; `None` for any other message.
    pub fn registering(&self) -> Option<&Node> {
        match self {
            ControlMsg::AddNode { node } => Some(node),
            _ => None,
        }
    }

    /// As [`registering`](Self::registering), to change it (the van marks what the
    /// connection proved).
    pub fn registering_mut(&mut self) -> Option<&mut Node> {
        match self {
            ControlMsg::AddNode { node } => Some(node),
            _ => None,
        }
    }
}

/// The scheduler's node table, as one node is sent it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct NodeTable {
    /// Every node: the scheduler, servers, workers.
    pub nodes: Vec<Node>,
    /// Recovery (`PS_CHECKPOINT_DIR` on the scheduler): how long, in milliseconds, the
    /// scheduler waits for a replacement of a lost server or worker; 0 = a lost node fails the
    /// job.
    pub replace_within_ms: u64,
    /// This run's id, drawn by the scheduler; a replacement restores only a checkpoint of the
    /// same run.
    pub run_id: u64,
    /// The PLAIN password this node presents to each peer it connects to ([`crate::auth`];
    /// what a node holding only its own key cannot compute).
    pub reach: Vec<(NodeId, String)>,
    /// This node replaces a lost one: what it takes over. `None` for every other node.
    pub replacement: Option<Takeover>,
}

/// One server's keys in a [`KeyLayout`]: `[begin, end)`, `end` = `u64::MAX` including it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPart {
    /// First key.
    pub begin: u64,
    /// One past the last key.
    pub end: u64,
    /// The server.
    pub owner: NodeId,
}

/// Keys `[begin, end)` changing owner in a [`KeyLayout`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMove {
    /// First key.
    pub begin: u64,
    /// One past the last key.
    pub end: u64,
    /// The old owner.
    pub from: NodeId,
    /// The new owner.
    pub to: NodeId,
}

/// The servers' key layout at one epoch, and the moves that led to it from the epoch before
/// ([`ControlMsg::Layout`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct KeyLayout {
    /// The epoch (0: the even layout of the start).
    pub epoch: u64,
    /// The owners of the whole key space, in key order.
    pub parts: Vec<KeyPart>,
    /// The moves from epoch `epoch - 1`, in key order.
    pub moves: Vec<KeyMove>,
    /// Once every new owner has its rows: the bytes of rows moved, and the microseconds from
    /// the scheduler's broadcast of the moves to the last new owner's report. `None` while
    /// the rows move.
    pub settled: Option<(u64, u64)>,
    /// Once settled: why rows could not move, per range that failed (requests for those keys
    /// are refused with it). Empty when every row moved.
    pub failed: Vec<String>,
    /// The node whose resize led to this layout.
    pub asked_by: NodeId,
}

/// What a replacement takes over from the node it replaces (in its node table).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Takeover {
    /// The cluster has not passed the start-up barrier yet: the replacement passes it too
    /// (otherwise it skips it).
    pub start_open: bool,
    /// Per barrier group, the barriers of the group its predecessor completed after the
    /// start-up barrier (it passes as many at once).
    pub barriers_done: Vec<(i32, u64)>,
    /// How many nodes held its id before it (a replacement worker numbers its requests from
    /// `incarnation × 2^27` on).
    pub incarnation: u32,
    /// Not a replacement: a server joining the running job under a new id (it takes no one's
    /// place, restores nothing, and skips the start-up barrier the others passed).
    pub joined: bool,
}

/// What a server or worker tells a scheduler it re-registers with ([`ControlMsg::Rejoin`]):
/// everything the scheduler held about the job, as this node knows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Rejoin {
    /// This node, with its id, host and port.
    pub node: Node,
    /// The run's id (from the node table).
    pub run_id: u64,
    /// The node table as this node holds it (replacements it was told of included).
    pub nodes: Vec<Node>,
    /// How many nodes held this node's id before it.
    pub incarnation: u32,
    /// Per replaced peer this node was told of, how many nodes held its id before the
    /// current holder.
    pub holders: Vec<(NodeId, u32)>,
    /// This node passed the start-up barrier (or skipped it, as a replacement).
    pub started: bool,
    /// Per barrier group, the barriers of the group this node completed after the start-up
    /// barrier (a replacement's count includes its predecessor's).
    pub barriers_done: Vec<(i32, u64)>,
    /// The barrier this node waits in, if any.
    pub waiting: Option<BarrierWait>,
    /// The servers' key layout as this node holds it (with the moves that led to it, settled
    /// or not); `None` at epoch 0.
    pub layout: Option<KeyLayout>,
    /// A worker's bounded-staleness clock (0 for other nodes, and before a worker's first;
    /// `u64::MAX` once the worker said it takes no more steps).
    pub clock: u64,
}

/// A barrier a node waits in, as it tells a scheduler it re-registers with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct BarrierWait {
    /// The barrier's group.
    pub group: i32,
    /// Which barrier of the group: 0 for the start-up barrier (of every node), else one more
    /// than the barriers of the group the node completed after the start-up barrier.
    pub number: u64,
    /// How long the scheduler waits for the others, in milliseconds; 0 = as long as every
    /// missing member is alive.
    pub timeout_ms: u64,
    /// The node's application failed with this error (its last barrier carries it).
    pub failed: Option<String>,
}

/// Why a barrier failed (the scheduler's release of a failed barrier).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierFailure {
    /// The node asked for a barrier of a group that does not include it.
    NotMember,
    /// A member did not arrive within the barrier's timeout.
    Timeout,
    /// A member that had not arrived was declared lost (no heartbeats).
    Lost,
    /// A member arrived after its application failed (`Postoffice::finalize_failed`).
    Failed,
}
