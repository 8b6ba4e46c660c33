//! Connection setup of one channel, as a typestate (rust-ibverbs' `PreparedQueuePair` →
//! `handshake(self, remote)` → `QueuePair`):
//!
//! 1. [`PreparedChannel::new`] makes the QP, moves it to INIT, posts every receive WR and
//!    registers the channel's rings and credit words. It knows its local [`Endpoint`], which the
//!    van sends to the peer over ZMQ. It cannot post a send: messages for the peer wait in it
//!    ([`PreparedChannel::queue`]).
//! 2. [`PreparedChannel::handshake`] consumes it with the peer's [`Endpoint`]: the QP goes to RTR
//!    and RTS, and it becomes a connected [`Channel`], the only type that posts sends and
//!    writes. The messages that waited become the channel's backlog, written before anything
//!    sent later.

use super::buf::RegisteredBuf;
use super::channel::Channel;
use super::device::{mtu_of, Device};
use super::send_queue::RecvWrId;
use crate::error::{Error, Result};
use crate::van::ring::min_record;
use crate::wire::{Message, Node, NodeId};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, QueuePair, QueuePairAttribute, QueuePairState,
};
use sideway::ibverbs::AccessFlags;
use std::collections::VecDeque;
use std::sync::Arc;

/// What each side of a pair tells the other over ZMQ (a `VanConnect` message, bincode in
/// frame 0): how to reach its QP and where to write.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// Source GID (all zero without one: InfiniBand by LID).
    pub gid: [u8; 16],
    /// Port LID.
    pub lid: u16,
    /// Path MTU offered, in bytes.
    pub mtu: u32,
    /// Address of its receive ring (where we write records).
    pub ring_addr: u64,
    /// Remote key of its receive ring.
    pub ring_rkey: u32,
    /// Bytes of its receive ring (a multiple of 64).
    pub ring_bytes: u64,
    /// Smallest record it accepts, in bytes ([`min_record`]).
    pub min_record: u64,
    /// Address of its credit word (where we write how far we consumed its records).
    pub credit_addr: u64,
    /// Remote key of its credit word.
    pub credit_rkey: u32,
}

/// This side's registered memory of one channel.
pub(super) struct LocalRings {
    /// The mirror of the peer's receive ring: the source of our record writes.
    pub send_ring: RegisteredBuf,
    /// The peer writes its records here.
    pub recv_ring: RegisteredBuf,
    /// The peer writes here how far it consumed our records (our credits).
    pub credit_in: RegisteredBuf,
    /// The source of our credit writes into the peer's credit word.
    pub credit_out: RegisteredBuf,
    /// Bytes of each ring (`PS_RDMA_RING_BYTES` rounded down to 64).
    pub ring_bytes: u64,
    /// Smallest record the peer may write into our receive ring.
    pub min_record: u64,
}

/// A channel whose QP is in INIT with all its receive WRs posted: its [`Endpoint`] is known;
/// it posts nothing, and messages for the peer wait in it.
pub(super) struct PreparedChannel {
    peer: NodeId,
    /// This channel's generation (its `wr_id`s carry it; see [`RecvWrId`]).
    generation: u16,
    qp: ExtendedQueuePair,
    psn: u32,
    rings: LocalRings,
    queued: VecDeque<Message>,
}

impl PreparedChannel {
    /// Creates the QP for `peer` on the shared CQs, moves it to INIT, posts `queue_depth`
    /// receive WRs and registers two rings of `PS_RDMA_RING_BYTES` and two credit words.
    ///
    /// # Errors
    /// [`Error::Van`] naming the peer and the step that failed.
    pub fn new(dev: &Device, peer: NodeId) -> Result<PreparedChannel> {
        let depth = dev.cfg.queue_depth;
        let generation = next_generation();
        let mut qp = dev
            .pd
            .create_qp_builder()
            .setup_send_cq(GenericCompletionQueue::from(Arc::clone(&dev.send_cq)))
            .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(&dev.recv_cq)))
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(depth)
            .build_ex()
            .map_err(|e| {
                Error::Van(format!(
                    "cannot create a QP for {}: {e}",
                    Node::describe(peer)
                ))
            })?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(dev.cfg.pkey_index)
            .setup_port(dev.port)
            .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
        qp.modify(&attr)
            .map_err(|e| Error::Van(format!("QP for {} to INIT: {e}", Node::describe(peer))))?;
        for _ in 0..depth {
            post_recv(&mut qp, RecvWrId { peer, generation })
                .map_err(|e| Error::Van(format!("cannot post receive WRs: {e}")))?;
        }
        let ring_bytes = dev.cfg.ring_bytes / 64 * 64;
        let rings = LocalRings {
            send_ring: RegisteredBuf::new(&dev.pd, ring_bytes as usize)?,
            recv_ring: RegisteredBuf::new(&dev.pd, ring_bytes as usize)?,
            credit_in: RegisteredBuf::new(&dev.pd, 64)?,
            credit_out: RegisteredBuf::new(&dev.pd, 64)?,
            ring_bytes,
            min_record: min_record(ring_bytes, depth as u64),
        };
        Ok(PreparedChannel {
            peer,
            generation,
            qp,
            psn: (std::process::id().wrapping_mul(2_654_435_761) ^ peer as u32) & 0xFF_FFFF,
            rings,
            queued: VecDeque::new(),
        })
    }

    /// The peer.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// What the peer needs to connect to us and write into our rings.
    pub fn endpoint(&self, dev: &Device) -> Endpoint {
        let r = &self.rings;
        Endpoint {
            qpn: self.qp.qp_number(),
            psn: self.psn,
            gid: dev.gid,
            lid: dev.lid,
            mtu: dev.mtu,
            ring_addr: r.recv_ring.addr(),
            ring_rkey: r.recv_ring.rkey(),
            ring_bytes: r.ring_bytes,
            min_record: r.min_record,
            credit_addr: r.credit_in.addr(),
            credit_rkey: r.credit_in.rkey(),
        }
    }

    /// Keeps `msg` until the channel is connected (it is then written first, in order).
    pub fn queue(&mut self, msg: Message) {
        self.queued.push_back(msg);
    }

    /// Moves the QP to RTR and RTS with the peer's endpoint: the channel is connected. The
    /// queued messages become its backlog ([`Channel::flush_backlog`] writes them).
    ///
    /// # Errors
    /// [`Error::Van`] naming the peer and the state the QP could not reach, or saying that the
    /// peer's ring is larger than our send ring (its mirror); the prepared channel (QP, memory,
    /// queued messages) is dropped.
    pub fn handshake(mut self, dev: &Device, remote: Endpoint) -> Result<Channel> {
        if remote.ring_bytes > self.rings.ring_bytes {
            return Err(Error::Van(format!(
                "{}'s receive ring has {} bytes, ours {}: PS_RDMA_RING_BYTES must be the same on every node",
                Node::describe(self.peer),
                remote.ring_bytes,
                self.rings.ring_bytes
            )));
        }
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Error::Van(format!(
                "QP for {} to {what}: {e}",
                Node::describe(self.peer)
            ))
        };
        self.qp
            .modify(&rtr_attr(dev, &remote))
            .map_err(|e| fail("RTR", &e))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(dev.cfg.timeout)
            .setup_retry_cnt(dev.cfg.retry_count)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1);
        self.qp.modify(&attr).map_err(|e| fail("RTS", &e))?;
        tracing::debug!("RDMA channel to {} is up", Node::describe(self.peer));
        Ok(Channel::connected(
            (self.peer, self.generation),
            self.qp,
            self.rings,
            remote,
            dev.cfg.queue_depth,
            self.queued,
        ))
    }
}

/// The RTR attributes for the peer's `remote` endpoint: the smaller of both MTUs, its QP
/// number and PSN, and its address (a GRH when we have a GID index and RoCE or a peer GID).
fn rtr_attr(dev: &Device, remote: &Endpoint) -> QueuePairAttribute {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(mtu_of(dev.mtu.min(remote.mtu)))
        .setup_dest_qp_num(remote.qpn)
        .setup_rq_psn(remote.psn)
        .setup_max_dest_read_atomic(1)
        .setup_min_rnr_timer(12);
    let mut ah = AddressHandleAttribute::new();
    ah.setup_port(dev.port)
        .setup_service_level(dev.cfg.sl)
        .setup_dest_lid(remote.lid);
    if let (Some(sgid), true) = (dev.gid_index, dev.ethernet || remote.gid != [0; 16]) {
        ah.setup_grh(&Gid { raw: remote.gid }, 0, sgid, 64, dev.cfg.traffic_class);
    }
    attr.setup_address_vector(&ah);
    attr
}

/// Posts one receive WR (no scatter/gather entry: only WRITE WITH IMMEDIATE consumes it) whose
/// `wr_id` is `id`.
pub(super) fn post_recv(qp: &mut ExtendedQueuePair, id: RecvWrId) -> Result<(), String> {
    let mut g = qp.start_post_recv();
    let _ = g.construct_wr(id.pack());
    g.post().map_err(|e| e.to_string())
}

/// A new channel generation: channels made by this process are numbered (modulo 65536), so a
/// completion of a replaced peer's old QP is told from one of its new QP.
fn next_generation() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
