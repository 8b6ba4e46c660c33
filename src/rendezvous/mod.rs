//! Zero-copy pulls through TensorFlow verbs' meta-data-cache rendezvous (TF contrib/verbs,
//! "Transport protocol" and "Message structure"; `shared/seeds/003_*`).
//!
//! A steady-state pull of a large value is one TENSOR_REQUEST and one write straight into the
//! worker's buffer: the worker keeps the meta-data (type, length, bytes) of every (server, key)
//! it pulled, allocates the destination from it, and sends it with the request; the server
//! writes the value directly when the meta-data still holds, and otherwise answers
//! META_DATA_RESPONSE (one extra round trip: cache update, reallocation, TENSOR_RE_REQUEST).
//! ERROR_STATUS carries a server-side failure back.
//!
//! Both sides are sans-IO state machines ([`Requester`], [`Responder`]); the vans execute their
//! actions. On the ZMQ van a "write" is a data message carrying the immediate and the content,
//! copied into the destination; on the RDMA van it will be an RDMA WRITE WITH IMMEDIATE into the
//! registered pool ([`crate::van::pool`]).
//!
//! Immediates: a content write carries its request index; `0xFFFFFFFF` (control message) and
//! `0xFFFFFFFE` (ACK) are reserved as in the seed and never used as request indices.

pub mod message;
pub mod requester;
pub mod responder;

pub use message::{RvMessage, TensorMeta};
pub use requester::{ReqAction, Requester};
pub use responder::{RespAction, Responder};

/// Immediate of a control-message write (reserved, never a request index).
pub const RESERVED_IMM_MESSAGE: u32 = 0xFFFF_FFFF;
/// Immediate of an ACK write (reserved, never a request index).
pub const RESERVED_IMM_ACK: u32 = 0xFFFF_FFFE;

/// `Meta::head` of a rendezvous control message on the ZMQ van (frame 0: bincode [`RvMessage`]).
pub const HEAD_RV: i32 = -0x5256;
/// `Meta::head` of an emulated content write on the ZMQ van (frame 0: the immediate, u32 LE;
/// frame 1: the content).
pub const HEAD_RV_WRITE: i32 = -0x5257;

/// ERROR_STATUS code: the server's handler cannot show its values.
pub const ERR_NOT_SERVED: u32 = 1;
/// ERROR_STATUS code: the request's value type differs from the stored one.
pub const ERR_DTYPE: u32 = 2;

/// A destination for a content write: address and rkey of registered memory, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// Address (a pointer value within the registered pool).
    pub addr: u64,
    /// rkey of the pool's memory region.
    pub rkey: u32,
    /// Bytes available at `addr`.
    pub capacity: u64,
}

#[cfg(test)]
mod tests;
