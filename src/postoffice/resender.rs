//! Resend (`PS_RESEND`, ps-lite's `Resender`): stamps data messages on the way out, acknowledges
//! and de-duplicates them on the way in, and hands back what stays unacknowledged, driving the
//! sans-IO [`super::resend::ResendBook`]. Also `PS_DROP_MSG`, which drops a share
//! of received data messages for tests. The sends themselves (ACKs, messages sent again) are
//! the postoffice's ([`super::pipeline`]).
//!
//! Control messages (registration, barriers, heartbeats, ACKs) are neither stamped nor resent:
//! their own deadlines cover them. Remote writes (`write_imm`) are not messages; the rendezvous
//! requester's deadline covers them.

use super::resend::{ResendBook, Verdict};
use crate::config::Config;
use crate::sync::lock;
use crate::wire::{Message, Meta, Node, NodeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Acknowledgements to one peer that are sent at once, without waiting for [`ACK_DELAY`].
const ACK_BATCH: usize = 256;

/// How long an acknowledgement may wait to be sent with others (less when `PS_RESEND_TIMEOUT`
/// is short): one ACK message per peer and period instead of one per data message.
const ACK_DELAY: Duration = Duration::from_millis(20);

/// Acknowledgements not sent yet: since when the oldest waits, and by peer the holder of its
/// id they acknowledge (`Stamp::incarnation`) and the sequences.
#[derive(Default)]
struct AckBatch {
    since: Option<Instant>,
    by_peer: HashMap<NodeId, Acks>,
}

/// The acknowledgements due to one peer: the holder of its id whose messages they are, and
/// their sequence numbers.
#[derive(Default, Debug, PartialEq, Eq)]
pub(super) struct Acks {
    pub holder: u32,
    pub seqs: Vec<u64>,
}

/// What [`Resender::admit`] says of a received data message.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Admitted {
    /// It goes on to its customer (not dropped by `PS_DROP_MSG`, not a duplicate).
    pub deliver: bool,
    /// It was a duplicate (counted in the metrics).
    pub duplicate: bool,
    /// [`ACK_BATCH`] acknowledgements wait for its sender: send them now.
    pub flush: bool,
}

/// Resend's state: the book (when `PS_RESEND` is on), the acknowledgements due, and
/// `PS_DROP_MSG`'s random numbers. Its locks are taken alone, or inside `Recovery`'s
/// `replacing` ([`Resender::replaced`]); neither is held while the other is taken.
pub(super) struct Resender {
    book: Option<Mutex<ResendBook<Message>>>,
    acks_due: Mutex<AckBatch>,
    /// `PS_RESEND_TIMEOUT`; `None` when resend is off.
    timeout: Option<Duration>,
    /// `PS_DROP_MSG`: the percentage dropped, its random numbers, and the messages it dropped.
    drop_percent: u32,
    drop_rng: AtomicU64,
    dropped: AtomicU64,
}

impl Resender {
    /// Resend as `cfg` says (`PS_RESEND`, `PS_RESEND_TIMEOUT`, `PS_DROP_MSG`).
    pub(super) fn new(cfg: &Config) -> Resender {
        Resender {
            book: cfg.resend.timeout.map(|t| Mutex::new(ResendBook::new(t))),
            acks_due: Mutex::default(),
            timeout: cfg.resend.timeout,
            drop_percent: cfg.resend.drop_msg_percent,
            drop_rng: AtomicU64::new(drop_seed()),
            dropped: 0.into(),
        }
    }

    /// Stamps an outgoing data message with its sequence number and keeps a copy until it is
    /// acknowledged. Returns the (receiver, sequence) kept, `None` when nothing was.
    pub(super) fn stamp(&self, msg: &mut Message) -> Option<(NodeId, u64)> {
        let book = self.book.as_ref()?;
        if msg.meta.control.is_some() || msg.meta.stamp.seq.is_some() {
            return None;
        }
        let to = msg.meta.recver;
        let mut book = lock(book);
        let seq = book.next_seq(to);
        msg.meta.stamp.seq = Some(seq);
        book.sent(to, seq, msg.clone(), Instant::now());
        Some((to, seq))
    }

    /// A stamped message could not be handed to the van: its sender gets the error, so it is
    /// not sent again behind the sender's back.
    pub(super) fn unstamp(&self, (to, seq): (NodeId, u64)) {
        if let Some(book) = &self.book {
            lock(book).acked(to, seq);
        }
    }

    /// An ACK of `seqs` arrived from `from` (for this node's holder of its id: the caller drops
    /// an ACK of an earlier holder's messages).
    pub(super) fn on_ack(&self, from: NodeId, seqs: &[u64]) {
        if let Some(book) = &self.book {
            let mut book = lock(book);
            for &seq in seqs {
                book.acked(from, seq);
            }
        }
    }

    /// Forgets what was sent to and received from `peer` (lost).
    pub(super) fn forget(&self, peer: NodeId) {
        if let Some(book) = &self.book {
            lock(book).forget(peer);
        }
    }

    /// `peer`'s id is held by its `holder`-th holder now (a new process): forgets what was
    /// sent to the earlier one and what it sent ([`ResendBook::replaced`]; what this holder
    /// sent already stays known), and the acknowledgements due to an earlier holder.
    pub(super) fn replaced(&self, peer: NodeId, holder: u32) {
        if let Some(book) = &self.book {
            lock(book).replaced(peer, holder);
        }
        let mut due = lock(&self.acks_due);
        if due.by_peer.get(&peer).is_some_and(|a| a.holder < holder) {
            due.by_peer.remove(&peer);
        }
    }

    /// When the acknowledgements gathered so far are due ([`ACK_DELAY`] after the oldest, at
    /// most a tenth of `PS_RESEND_TIMEOUT`); `None` when none waits.
    pub(super) fn acks_due_at(&self) -> Option<Instant> {
        let timeout = self.timeout?;
        let since = lock(&self.acks_due).since?;
        Some(since + (timeout / 10).min(ACK_DELAY))
    }

    /// The acknowledgements gathered since the last call, by peer (one ACK message each).
    pub(super) fn take_acks(&self) -> HashMap<NodeId, Acks> {
        std::mem::take(&mut *lock(&self.acks_due)).by_peer
    }

    /// Whether a received data message goes on to its customer: not when `PS_DROP_MSG` drops
    /// it, nor when it is a duplicate of one delivered before or comes from an earlier holder
    /// of its sender's id than one heard from. A stamped message is acknowledged (in a batch),
    /// a duplicate too (the first ACK may have been lost); a stale one is not.
    pub(super) fn admit(&self, meta: &Meta) -> Admitted {
        let mut out = Admitted {
            deliver: false,
            duplicate: false,
            flush: false,
        };
        if self.drop_percent > 0 && self.roll_percent() < self.drop_percent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                "PS_DROP_MSG: dropped a message from {}",
                Node::describe(meta.sender)
            );
            return out;
        }
        let (Some(book), Some(seq)) = (&self.book, meta.stamp.seq) else {
            out.deliver = true;
            return out;
        };
        let holder = meta.stamp.incarnation;
        let verdict = lock(book).received(meta.sender, holder, seq);
        match verdict {
            Verdict::Deliver => out.deliver = true,
            Verdict::Duplicate => {
                out.duplicate = true;
                tracing::debug!(
                    "dropped a duplicate (sequence {seq}) from {}",
                    Node::describe(meta.sender)
                );
            }
            Verdict::Stale => {
                tracing::debug!(
                    "dropped a message from an earlier holder of {}'s id (a later one was heard from)",
                    Node::describe(meta.sender)
                );
                return out;
            }
        }
        out.flush = {
            let mut due = lock(&self.acks_due);
            due.since.get_or_insert_with(Instant::now);
            let acks = due.by_peer.entry(meta.sender).or_default();
            if acks.holder != holder {
                // A later holder: the earlier one's acknowledgements would end its copies.
                *acks = Acks {
                    holder,
                    seqs: Vec::new(),
                };
            }
            acks.seqs.push(seq);
            acks.seqs.len() >= ACK_BATCH
        };
        out
    }

    /// The messages unacknowledged for `PS_RESEND_TIMEOUT` at `now`: (receiver, sequence,
    /// times resent before, the message).
    pub(super) fn due(&self, now: Instant) -> Vec<(NodeId, u64, u32, Message)> {
        match &self.book {
            Some(book) => lock(book).tick(now),
            None => Vec::new(),
        }
    }

    /// The end-of-run summary of resend and `PS_DROP_MSG` for node `me` (info level), when
    /// either is on.
    pub(super) fn report(&self, me: NodeId) {
        let (resent, duplicates) = self.book.as_ref().map_or((0, 0), |b| lock(b).counts());
        if self.book.is_some() || self.drop_percent > 0 {
            tracing::info!(
                "{}: {resent} messages sent again (PS_RESEND), {duplicates} duplicates dropped, \
                 {} messages dropped on arrival (PS_DROP_MSG={})",
                Node::describe(me),
                self.dropped.load(Ordering::Relaxed),
                self.drop_percent
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

/// A seed for `PS_DROP_MSG`'s random numbers (and the scheduler's run id): the process id and
/// the clock, never 0.
pub(super) fn drop_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}
