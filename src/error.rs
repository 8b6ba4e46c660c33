//! The crate's error type.

use crate::wire::WireError;
use thiserror::Error;

/// Everything that can go wrong in pslite. Every variant's text names what was wrong.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// A configuration variable (or its flag) is missing or malformed.
    #[error("{0}")]
    Config(String),
    /// A call's arguments are wrong (unsorted keys, lengths that do not add up, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A wait ran past its deadline; the text names who did not answer.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A server answered a request with an error.
    #[error("{node} answered with an error: {message}")]
    Remote {
        /// Which node answered, e.g. "server rank 0 (id 8)".
        node: String,
        /// The server's error text.
        message: String,
    },
    /// A peer is gone: the scheduler declared it lost (no heartbeat within
    /// `PS_HEARTBEAT_TIMEOUT`), or its RDMA channel failed. The text names the node and why.
    #[error("peer lost: {0}")]
    PeerLost(String),
    /// The scheduler declared this node itself lost (it was silent for longer than
    /// `PS_HEARTBEAT_TIMEOUT`: paused, swapping, cut off); the text says for how long.
    #[error("declared lost: {0}")]
    DeclaredLost(String),
    /// The transport failed (socket error, bind failure, …).
    #[error("van: {0}")]
    Van(String),
    /// A checkpoint file is damaged; the text names the file, the byte offset and what is
    /// wrong (see `kv::durable`).
    #[error("corrupt checkpoint: {0}")]
    Corrupt(String),
    /// A received message is malformed.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A member of the job ended with an error (its application failed): the job failed
    /// with it, and every node's `finalize` says so. The text names the node and its error.
    #[error("the job failed: {0}")]
    JobFailed(String),
    /// The postoffice has stopped; no more messages move.
    #[error("the postoffice has stopped")]
    Stopped,
}

/// `Result` with [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;
