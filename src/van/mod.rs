//! Vans move [`Message`]s between nodes. A van knows addresses and frames, never keys.
//!
//! The receiving loop that interprets messages lives in the [`crate::postoffice`]; a van only
//! binds, connects, sends and receives.

#[doc(hidden)]
pub mod memlock;
pub mod pool;
#[doc(hidden)]
pub mod rdma;
#[doc(hidden)]
pub mod ring;
#[doc(hidden)]
pub mod stats;
pub mod zmq;

use crate::error::{Error, Result};
use crate::wire::{Message, NodeId};
use std::time::Duration;

/// A transport between the nodes of one cluster (ps-lite's `Van`).
///
/// `send` may be called from any thread; `recv` from one receiving thread only.
pub trait Van: Send + Sync {
    /// Short name for logs and errors: "zmq", "rdma".
    fn name(&self) -> &'static str;

    /// Starts listening on `host:port` (port 0: any free port) and returns the port.
    ///
    /// # Errors
    /// [`crate::Error::Van`] naming the address if it cannot be bound.
    fn bind(&self, host: &str, port: u16) -> Result<u16>;

    /// Opens (or replaces) the path to node `id` listening at `host:port`. Connecting is
    /// asynchronous: messages sent before the peer is up are queued.
    fn connect(&self, id: NodeId, host: &str, port: u16) -> Result<()>;

    /// Node `id` was replaced by a new process at `host:port` (recovery): whatever
    /// this van keeps for the old one (the RDMA van's QP and rings) is dropped and the path
    /// opened anew. The default connects again (the ZMQ van replaces its socket).
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    fn replace_peer(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        self.connect(id, host, port)
    }

    /// Sends `msg` to `msg.meta.recver`; returns the bytes handed to the transport.
    ///
    /// # Errors
    /// [`crate::Error::Van`] if the receiver was never connected, or the transport refused the
    /// message within the send deadline (`PS_TIMEOUT`).
    fn send(&self, msg: Message) -> Result<usize>;

    /// Waits up to `timeout` for the next event: a message, or a peer's remote write that
    /// landed in this node's registered memory. `Ok(None)` when none arrived.
    ///
    /// # Errors
    /// [`crate::Error::Wire`] for a malformed message (the caller drops it and keeps receiving);
    /// [`crate::Error::Van`] when the transport failed.
    fn recv(&self, timeout: Duration) -> Result<Option<VanEvent>>;

    /// Closes every socket; pending sends are given a short linger.
    fn stop(&self);

    /// (Scheduler) Sends `msg` to the node without an id that registered announcing
    /// `host:port`, over the connection its registration came on: a refusal is never sent by
    /// connecting to an address the refused node named. The default cannot (a refused node
    /// then learns it only at its start-up deadline).
    ///
    /// # Errors
    /// [`crate::Error::Van`] when no registration from that address is known.
    fn answer_joiner(&self, host: &str, port: u16, _msg: Message) -> Result<()> {
        Err(Error::Van(format!(
            "the {} van cannot answer the node registering from {}",
            self.name(),
            crate::wire::place(host, port)
        )))
    }

    /// Registers the van's own metrics (the RDMA van's WC errors, credit stalls and registered
    /// bytes: [`stats`]) in this node's registry. The default registers
    /// none.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}

    /// Tells the van this node's id once the scheduler assigned it (before any `connect` to a
    /// peer). Vans that set up per-peer state (QPs) need it for their bootstrap messages.
    fn set_node_id(&self, _id: NodeId) {}

    /// The credentials this node presents to its peers, from the scheduler's node table
    /// (`NodeTable::reach`), before it connects to them. The default keeps none.
    fn set_reach(&self, _reach: Vec<(NodeId, String)>) {}

    /// The van's remote memory ([`RemoteMemory`]: RDMA registration and writes), if it has
    /// any. The default has none (ZMQ): zero-copy pulls then travel as messages.
    fn remote_memory(&self) -> Option<&dyn RemoteMemory> {
        None
    }

    /// Closes every socket at once, dropping what is still queued (a failed start-up).
    fn abort(&self) {
        self.stop()
    }

    /// The postoffice learnt that `peer` is gone (`None`: this node itself was declared lost),
    /// with `why`. A van that can block a sender on a peer (the RDMA van waiting for ring
    /// credits of a paused peer) ends those sends with `why`; the default does nothing (the ZMQ
    /// van never blocks on a peer).
    fn peer_lost(&self, _peer: Option<NodeId>, _why: &str) {}
}

/// A van's remote memory: registering memory with the device, and RDMA WRITE WITH IMMEDIATE
/// into a peer's registered memory (TF contrib/verbs' content write). Only the RDMA van has it
/// ([`Van::remote_memory`]).
pub trait RemoteMemory: Send + Sync {
    /// Registers `[addr, addr + len)` for RDMA: as a write target (`remote_write`: the memory
    /// pool, which peers write into) or as a write source only (a key store's chunks, read by
    /// this node's writes). The van keeps the registration (an MR) until it stops or
    /// [`deregister_memory`](Self::deregister_memory).
    ///
    /// # Safety
    /// The memory must stay allocated until it is deregistered or the van is dropped: the
    /// device may read it, and with `remote_write` peers may write it, at any time until then.
    ///
    /// # Errors
    /// [`crate::Error::Van`] if the device refuses the registration.
    unsafe fn register_memory(
        &self,
        addr: usize,
        len: usize,
        remote_write: bool,
    ) -> Result<Registration>;

    /// Ends the registrations that start at `addr` (no write may be in flight from or to it).
    fn deregister_memory(&self, addr: usize);

    /// Whether this van can write into node `to`'s registered memory
    /// ([`write_imm`](Self::write_imm)): an RDMA van with a QP to `to`. Even then a write may
    /// be declined (`Ok(false)`), e.g. before the QP is connected.
    fn can_write(&self, to: NodeId) -> bool;

    /// RDMA WRITE WITH IMMEDIATE of `src` to `addr`/`rkey` on node `to` (TF contrib/verbs'
    /// content write; the immediate names the request). The van drops `src.hold` once the write
    /// completed (or was flushed), not before. The receiver's van raises a
    /// [`VanEvent::RemoteWrite`]. `Ok(false)`: this van cannot write to that node now (the
    /// caller sends the content as a message instead).
    ///
    /// # Errors
    /// [`crate::Error::Van`] when the write cannot be posted.
    fn write_imm(
        &self,
        to: NodeId,
        src: WriteSource,
        addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<bool>;
}

/// What a van's [`Van::recv`] returns.
// A message is most events; each is moved once or twice through channels, never stored in
// bulk, so boxing it (an allocation per message) would cost more than the unused bytes of the
// rare remote write.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum VanEvent {
    /// A message from a peer.
    Message(Message),
    /// A peer's RDMA WRITE WITH IMMEDIATE landed in this node's registered memory.
    RemoteWrite(RemoteWrite),
    /// A peer is gone: its RDMA channel failed (a failed WC). `error` names the peer and why.
    PeerLost {
        /// The peer.
        peer: NodeId,
        /// [`Error::PeerLost`], naming the node.
        error: Error,
    },
    /// The scheduler refused this node's connection while it joined: the tokens differ, or
    /// only one side authenticates. [`Error::Config`] saying which; the start fails
    /// with it.
    Refused(Error),
}

/// A remote write that landed (the receive completion of a WRITE WITH IMMEDIATE): who wrote,
/// the immediate it carried, and how many bytes it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteWrite {
    /// The writing node.
    pub from: NodeId,
    /// The write's 32-bit immediate (for a rendezvous content write: slot and request index).
    pub imm: u32,
    /// Bytes written (the completion's byte count).
    pub len: u32,
}

/// The keys of registered memory (an RDMA memory region): `lkey` for local access (a write's
/// source), `rkey` for remote access (a write's target).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// The source of an RDMA WRITE: `len` bytes at `addr` in memory registered with `lkey`, and a
/// hold, which keeps that memory alive and unchanged until the van drops it on the write's
/// completion (a pool buffer; a key store's in-flight counter).
pub struct WriteSource {
    addr: u64,
    len: usize,
    lkey: u32,
    hold: Box<dyn Send>,
}

impl WriteSource {
    /// A write source.
    ///
    /// # Safety
    /// `[addr, addr + len)` must lie in memory registered with `lkey`, and stay allocated and
    /// unchanged while `hold` lives.
    pub unsafe fn new(addr: u64, len: usize, lkey: u32, hold: Box<dyn Send>) -> WriteSource {
        WriteSource {
            addr,
            len,
            lkey,
            hold,
        }
    }

    /// Address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key of the registration covering the bytes.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// What keeps the bytes valid: to be dropped once the write completed.
    pub fn into_hold(self) -> Box<dyn Send> {
        self.hold
    }
}
