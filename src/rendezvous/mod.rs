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
//! Both sides are sans-IO state machines ([`Requester`], [`Responder`]); the key-value layer
//! carries out their actions (it owns the destination buffers and the stored values). Their
//! messages travel as data messages marked [`crate::wire::Rendezvous::Control`]; a content write
//! is an RDMA WRITE WITH IMMEDIATE into the registered pool ([`crate::van::pool`]) where the van
//! can write ([`crate::van::RemoteMemory::can_write`]), which the receiving van reports as a
//! [`crate::van::VanEvent::RemoteWrite`]; elsewhere it is a message marked
//! [`crate::wire::Rendezvous::Write`] whose content is copied into the destination.
//!
//! Immediates: a content write carries its request index, laid out as [`crate::wire::Imm`] says;
//! [`Imm::RECORD`](crate::wire::Imm::RECORD) and [`Imm::ACK`](crate::wire::Imm::ACK) are
//! reserved as in the seed and never used as request indices.

pub mod message;
pub mod requester;
pub mod responder;

pub use message::{RvMessage, TensorMeta};
pub use requester::{ReqAction, Requester};
pub use responder::{RespAction, Responder};

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
