//! The order of the steps every message passes, written once (as quinn's connection driver
//! orders its `poll_*` steps). The steps' state lives in the parts ([`super::failure`],
//! [`super::recovery`], [`super::resender`]); only this file knows their order.
//!
//! Outgoing ([`Postoffice::send`]): refused after a loss (`Failures::refusal`) → stamped with
//! this node's id and incarnation → numbered for resend (`Resender::stamp`) → the van. The
//! numbering and the van's send happen under `Recovery`'s `replacing` lock (shared), so that no
//! message is numbered for a replaced peer and sent to its replacement, and the path's
//! generation a send reports ([`Postoffice::send_on_path`]) is the path it took.
//!
//! Incoming ([`Postoffice::admit_incoming`]): from an earlier holder of a replaced id → dropped;
//! from the scheduler → heard of; then, for data only: from a lost peer → dropped; resend's
//! drop simulation, de-duplication (per holder of the sender's id) and acknowledgement.
//!
//! Each tick of the receiving thread also sends the acknowledgements due
//! ([`Postoffice::flush_acks`]) and what resend says is due again
//! ([`Postoffice::resend_due`]).

use super::Postoffice;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::WriteSource;
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, SCHEDULER};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The answer to a request: sender and receiver swapped, `request` cleared, ids echoed.
pub fn reply_meta(req: &Meta) -> Meta {
    Meta {
        head: req.head,
        tag: req.tag,
        sender: req.recver,
        recver: req.sender,
        request: false,
        kv: crate::wire::KvHeader {
            push: req.kv.push,
            pull: req.kv.pull,
            dtype: req.kv.dtype,
            placement: req.kv.placement, // the part it answers
            ..Default::default()
        },
        ..Meta::default()
    }
}

impl Postoffice {
    /// Sends `msg` with this node as sender.
    ///
    /// # Errors
    /// As [`crate::van::Van::send`]; [`Error::Stopped`] after shutdown; once a peer is lost,
    /// the loss ([`Error::PeerLost`], [`Error::DeclaredLost`]) for data to that peer and for
    /// every data request.
    pub fn send(&self, msg: Message) -> Result<usize> {
        self.send_on_path(msg).map(|(n, _)| n)
    }

    /// As [`send`](Self::send); also returns the generation of the path to the receiver it
    /// went out on: how many times the receiver's id was replaced (0 for its first holder), as
    /// [`CustomerEvent::PeerReplaced`](super::CustomerEvent::PeerReplaced) counts them. A
    /// message sent on an older generation's path than a replacement's went to the replaced
    /// node.
    pub(crate) fn send_on_path(&self, mut msg: Message) -> Result<(usize, u32)> {
        if self.life.stopped.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        if let Some(e) = self.failures.refusal(&msg.meta) {
            return Err(e);
        }
        msg.meta.sender = self.my_id();
        msg.meta.stamp.incarnation = self.incarnation();
        let payload = msg.data_bytes() as u64;
        let _numbered = self.recovery.numbering();
        let kept = self.resender.stamp(&mut msg);
        let recver = msg.meta.recver;
        let path = self.recovery.holder(recver);
        let n = match self.van.send(msg) {
            Ok(n) => n,
            Err(e) => {
                if let Some(k) = kept {
                    self.resender.unstamp(k);
                }
                return Err(e);
            }
        };
        self.metrics.sent(recver, payload);
        Ok((n, path))
    }

    /// Whether a received message goes on (to the control handlers, or a data message to its
    /// customer); see the module docs for the order.
    pub(super) fn admit_incoming(&self, meta: &Meta) -> bool {
        if super::recovery::sent_by_replaced(self, meta) {
            return false;
        }
        if meta.sender == SCHEDULER {
            self.heard_from_scheduler();
        }
        if meta.command().is_some() {
            return true;
        }
        if self.failures.is_lost(meta.sender) {
            tracing::debug!(
                "dropped a message from {}, which was declared lost",
                Node::describe(meta.sender)
            );
            return false;
        }
        let admitted = self.resender.admit(meta);
        if admitted.flush {
            self.flush_acks();
        }
        if admitted.duplicate {
            self.metrics.resend.duplicates.inc();
        }
        admitted.deliver
    }

    /// Sends the acknowledgements gathered since the last call, one ACK per peer (the
    /// receiving thread calls it when they are due, [`super::resender::Resender::acks_due_at`],
    /// or once a batch waits for one peer).
    pub(super) fn flush_acks(&self) {
        for (to, acks) in self.resender.take_acks() {
            let control = ControlMsg::Ack {
                seqs: acks.seqs,
                holder: acks.holder,
            };
            if let Err(e) = self.send(Message::new(Meta::for_control(to, control))) {
                tracing::debug!("cannot acknowledge {}: {e}", Node::describe(to));
            }
        }
    }

    /// Sends again the messages unacknowledged for `PS_RESEND_TIMEOUT` (from the receiving
    /// thread, at every tick).
    pub(super) fn resend_due(&self) {
        if self.failures.any() {
            // The job failed; a node declared lost must not replay its pushes to servers that
            // forgot it.
            return;
        }
        for (to, seq, before, msg) in self.resender.due(Instant::now()) {
            tracing::debug!(
                "resending message {seq} to {} (resent {before} times before)",
                Node::describe(to)
            );
            self.metrics.resend.resent.inc();
            if let Err(e) = self.van.send(msg) {
                tracing::debug!("resend to {} failed: {e}", Node::describe(to));
            }
        }
    }

    /// A message from the scheduler arrived (it is alive).
    fn heard_from_scheduler(&self) {
        lock(&self.node.state).last_from_scheduler = Some(Instant::now());
    }

    /// RDMA WRITE WITH IMMEDIATE through the van (see [`crate::van::RemoteMemory::write_imm`]);
    /// `Ok(false)` when the van cannot write to `to`.
    ///
    /// # Errors
    /// As [`crate::van::RemoteMemory::write_imm`]; [`Error::Stopped`] after shutdown.
    pub(crate) fn write_imm(
        &self,
        to: NodeId,
        src: WriteSource,
        addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<bool> {
        if self.life.stopped.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        match self.van.remote_memory() {
            Some(rm) => rm.write_imm(to, src, addr, rkey, imm),
            None => Ok(false),
        }
    }
}
