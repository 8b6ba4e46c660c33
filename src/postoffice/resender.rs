//! The postoffice's side of resend (`PS_RESEND`, ps-lite's `Resender`): stamps data messages on
//! the way out, acknowledges and de-duplicates them on the way in, and sends again what stays
//! unacknowledged, driving the sans-IO [`ResendBook`](super::resend::ResendBook). Also
//! `PS_DROP_MSG`, which drops a share of received data messages for tests.
//!
//! Control messages (registration, barriers, heartbeats, ACKs) are neither stamped nor resent:
//! their own deadlines cover them. Remote writes (`write_imm`) are not messages; the rendezvous
//! requester's deadline covers them.

use super::Postoffice;
use crate::sync::lock;
use crate::wire::{Command, Control, Message, Meta, Node, NodeId};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Acknowledgements to one peer that are sent at once, without waiting for [`ACK_DELAY`].
const ACK_BATCH: usize = 256;

/// How long an acknowledgement may wait to be sent with others (less when `PS_RESEND_TIMEOUT`
/// is short): one ACK message per peer and period instead of one per data message.
const ACK_DELAY: Duration = Duration::from_millis(20);

/// Acknowledgements not sent yet: since when the oldest waits, and the sequences by peer.
#[derive(Default)]
pub(super) struct AckBatch {
    since: Option<Instant>,
    by_peer: HashMap<NodeId, Vec<u64>>,
}

impl Postoffice {
    /// Stamps an outgoing data message with its sequence number and keeps a copy until it is
    /// acknowledged. Returns the (receiver, sequence) kept, `None` when nothing was.
    pub(super) fn stamp(&self, msg: &mut Message) -> Option<(NodeId, u64)> {
        let book = self.resend.as_ref()?;
        if msg.meta.control.is_some() || msg.meta.seq.is_some() {
            return None;
        }
        let to = msg.meta.recver;
        let mut book = lock(book);
        let seq = book.next_seq(to);
        msg.meta.seq = Some(seq);
        book.sent(to, seq, msg.clone(), Instant::now());
        Some((to, seq))
    }

    /// A stamped message could not be handed to the van: its sender gets the error, so it is
    /// not sent again behind the sender's back.
    pub(super) fn unstamp(&self, (to, seq): (NodeId, u64)) {
        if let Some(book) = &self.resend {
            lock(book).acked(to, seq);
        }
    }

    /// An ACK arrived.
    pub(super) fn on_ack(&self, from: NodeId, control: &Control) {
        if let Some(book) = &self.resend {
            let mut book = lock(book);
            for &seq in &control.acks {
                book.acked(from, seq);
            }
        }
    }

    /// When the acknowledgements gathered so far are due ([`ACK_DELAY`] after the oldest, at
    /// most a tenth of `PS_RESEND_TIMEOUT`); `None` when none waits.
    pub(super) fn acks_due_at(&self) -> Option<Instant> {
        let timeout = self.cfg.resend_timeout?;
        let since = lock(&self.acks_due).since?;
        Some(since + (timeout / 10).min(ACK_DELAY))
    }

    /// Sends the acknowledgements gathered since the last call, one ACK per peer (the
    /// receiving thread calls it when they are due, or once [`ACK_BATCH`] wait for one peer).
    pub(super) fn flush_acks(&self) {
        let due = std::mem::take(&mut *lock(&self.acks_due));
        for (to, acks) in due.by_peer {
            let control = Control {
                cmd: Some(Command::Ack),
                acks,
                ..Control::default()
            };
            if let Err(e) = self.send(Message::new(Meta::for_control(to, control))) {
                tracing::debug!("cannot acknowledge {}: {e}", Node::describe(to));
            }
        }
    }

    /// Whether a received data message goes on to its customer: not when `PS_DROP_MSG` drops
    /// it, nor when it is a duplicate of one delivered before. A stamped message is
    /// acknowledged (in a batch, [`flush_acks`](Self::flush_acks)), a duplicate too (the first
    /// ACK may have been lost). Nothing from a peer declared lost is delivered.
    pub(super) fn admit(&self, meta: &Meta) -> bool {
        if self.is_lost(meta.sender) {
            tracing::debug!(
                "dropped a message from {}, which was declared lost",
                Node::describe(meta.sender)
            );
            return false;
        }
        if self.cfg.drop_msg_percent > 0 && self.roll_percent() < self.cfg.drop_msg_percent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                "PS_DROP_MSG: dropped a message from {}",
                Node::describe(meta.sender)
            );
            return false;
        }
        let (Some(book), Some(seq)) = (&self.resend, meta.seq) else {
            return true;
        };
        let batch = {
            let mut due = lock(&self.acks_due);
            due.since.get_or_insert_with(Instant::now);
            let acks = due.by_peer.entry(meta.sender).or_default();
            acks.push(seq);
            acks.len()
        };
        if batch >= ACK_BATCH {
            self.flush_acks();
        }
        let verdict = lock(book).received(meta.sender, seq);
        if verdict == super::resend::Verdict::Duplicate {
            self.metrics.duplicates.inc();
            tracing::debug!(
                "dropped a duplicate (sequence {seq}) from {}",
                Node::describe(meta.sender)
            );
        }
        verdict == super::resend::Verdict::Deliver
    }

    /// Sends again the messages unacknowledged for `PS_RESEND_TIMEOUT` (from the receiving
    /// thread, at every tick).
    pub(super) fn resend_due(&self) {
        let Some(book) = &self.resend else { return };
        if self.broken.load(Ordering::Acquire) {
            // The job failed; a node declared lost must not replay its pushes to servers that
            // forgot it.
            return;
        }
        let due = lock(book).tick(Instant::now());
        for (to, seq, before, msg) in due {
            tracing::debug!(
                "resending message {seq} to {} (resent {before} times before)",
                Node::describe(to)
            );
            self.metrics.resent.inc();
            if let Err(e) = self.van.send(msg) {
                tracing::debug!("resend to {} failed: {e}", Node::describe(to));
            }
        }
    }

    /// The end-of-run summary of resend and `PS_DROP_MSG` (info level), when either is on.
    pub(super) fn report_loss(&self) {
        let (resent, duplicates) = self.resend.as_ref().map_or((0, 0), |b| lock(b).counts());
        if self.resend.is_some() || self.cfg.drop_msg_percent > 0 {
            tracing::info!(
                "{}: {resent} messages sent again (PS_RESEND), {duplicates} duplicates dropped, \
                 {} messages dropped on arrival (PS_DROP_MSG={})",
                Node::describe(self.my_id()),
                self.dropped.load(Ordering::Relaxed),
                self.cfg.drop_msg_percent
            );
        }
    }

    /// A number in 0..100 (xorshift64: for `PS_DROP_MSG` only).
    fn roll_percent(&self) -> u32 {
        let mut x = self.drop_rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.drop_rng.store(x, Ordering::Relaxed);
        (x % 100) as u32
    }
}

/// A seed for `PS_DROP_MSG`'s random numbers: the process id and the clock, never 0.
pub(super) fn drop_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}
