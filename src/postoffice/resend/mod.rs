//! The resend book: at-least-once sending with acknowledgements, exactly-once delivery by
//! duplicate detection (ps-lite's `PS_RESEND`, `src/resender.h`). Sans-IO: the postoffice tells
//! it what it sent and received, passes the time in, and sends what it returns.
//!
//! Unlike ps-lite's resender, which keys messages by a hash of their ids and keeps every key it
//! ever acknowledged, messages carry a **sequence number per (sender, receiver) pair**. The
//! receiver keeps, per sender, a watermark below which every number arrived and the numbers
//! that arrived above it: memory is bounded by how far messages overtake each other, not by how
//! many were ever sent.
//!
//! Protocol, per ordered pair of nodes:
//! - the sender stamps each data message with the pair's next sequence number
//!   ([`ResendBook::sent`]) and keeps it until it is acknowledged;
//! - the receiver asks [`ResendBook::received`] whether the message is new (deliver it) or a
//!   duplicate (drop it), and acknowledges it either way (an ACK may have been lost);
//! - an ACK ([`ResendBook::acked`]) ends the sender's copy;
//! - a lost node's id may be taken by a replacement (a new process, numbering from 0 again):
//!   every message carries its sender's incarnation (how many held the id before it), and
//!   the receiver keeps the numbers of one holder per id. The first message of a later holder
//!   starts its numbers afresh; a message of an earlier holder after that is **stale**
//!   (dropped, not acknowledged), and [`ResendBook::replaced`] (the scheduler's word) keeps
//!   what a later holder already sent. An ACK names the holder it acknowledges, so that the
//!   acknowledgements of a replaced node's messages end none of its replacement's copies;
//! - [`ResendBook::tick`] returns the copies unacknowledged for longer than the resend timeout
//!   (`PS_RESEND_TIMEOUT`), each at most once per timeout.
//!
//! The postoffice drives it from `resender.rs`.

use crate::wire::NodeId;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// How many sequence numbers above the watermark a receiver keeps per sender (messages that
/// overtook a missing one). Past this, the oldest gap is given up: a message that fills it
/// later is taken for a duplicate. With resends every timeout this bounds memory, not
/// correctness, unless a message is overtaken by this many others.
pub const WINDOW: usize = 1 << 16;

/// One unacknowledged message.
struct Unacked<T> {
    msg: T,
    due: Instant,
    resends: u32,
}

/// What a receiver knows of one sender's sequence numbers.
#[derive(Default, Debug)]
struct Seen {
    /// The incarnation of the sender's id whose numbers these are.
    holder: u32,
    /// Every number below this arrived.
    low: u64,
    /// Numbers at or above `low` that arrived.
    above: BTreeSet<u64>,
}

impl Seen {
    /// Nothing seen yet of the `holder`-th holder of the sender's id.
    fn of(holder: u32) -> Seen {
        Seen {
            holder,
            ..Seen::default()
        }
    }

    /// Records `seq`; false if it arrived before.
    fn record(&mut self, seq: u64) -> bool {
        if seq < self.low || !self.above.insert(seq) {
            return false;
        }
        if self.above.len() > WINDOW {
            // Give up the oldest gap: everything below the smallest number kept counts as seen.
            // (Over the window, `low` itself is missing: the advance below would remove nothing
            // before this jump.)
            if let Some(&first) = self.above.first() {
                self.low = first;
            }
        }
        while self.above.remove(&self.low) {
            self.low += 1;
        }
        true
    }
}

/// The resend state of one node; `T` is the message kept for resending.
pub struct ResendBook<T> {
    timeout: Duration,
    next_seq: HashMap<NodeId, u64>,
    unacked: HashMap<(NodeId, u64), Unacked<T>>,
    /// No unacknowledged message is due before this (a lower bound: an ACK does not raise it),
    /// so [`tick`](Self::tick), which runs after every received event, scans only when one may
    /// be.
    earliest_due: Option<Instant>,
    seen: HashMap<NodeId, Seen>,
    /// Per replaced peer, the holder of its id this book numbers for (see
    /// [`replaced`](Self::replaced)).
    numbering_for: HashMap<NodeId, u32>,
    resent: u64,
    duplicates: u64,
}

/// Whether a received message is to be delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// First arrival: deliver it (and acknowledge it).
    Deliver,
    /// Arrived before: drop it (and acknowledge it again).
    Duplicate,
    /// From an earlier holder of the sender's id than one heard from: drop it, unacknowledged.
    Stale,
}

impl<T: Clone> ResendBook<T> {
    /// A book that resends after `timeout` (`PS_RESEND_TIMEOUT`).
    pub fn new(timeout: Duration) -> ResendBook<T> {
        ResendBook {
            timeout,
            next_seq: HashMap::new(),
            unacked: HashMap::new(),
            earliest_due: None,
            seen: HashMap::new(),
            numbering_for: HashMap::new(),
            resent: 0,
            duplicates: 0,
        }
    }

    /// The sequence number to stamp on the next message to `to`; the caller then hands the
    /// stamped message to [`sent`](Self::sent).
    pub fn next_seq(&mut self, to: NodeId) -> u64 {
        let n = self.next_seq.entry(to).or_insert(0);
        let seq = *n;
        *n += 1;
        seq
    }

    /// Message `msg` (stamped `seq`) went to `to` at `now`: kept until acknowledged.
    pub fn sent(&mut self, to: NodeId, seq: u64, msg: T, now: Instant) {
        let due = now + self.timeout;
        self.earliest_due = Some(self.earliest_due.map_or(due, |e| e.min(due)));
        self.unacked.insert(
            (to, seq),
            Unacked {
                msg,
                due,
                resends: 0,
            },
        );
    }

    /// `from` acknowledged message `seq`; a repeated or unknown ACK changes nothing.
    pub fn acked(&mut self, from: NodeId, seq: u64) {
        self.unacked.remove(&(from, seq));
    }

    /// Message `seq` from `from`'s `holder`-th holder (its `Stamp::incarnation`) arrived:
    /// deliver it, drop it as a duplicate, or drop it as stale (a later holder of the id was
    /// heard from). The first message of a later holder forgets the earlier one's numbers.
    pub fn received(&mut self, from: NodeId, holder: u32, seq: u64) -> Verdict {
        let seen = self.seen.entry(from).or_insert_with(|| Seen::of(holder));
        if holder < seen.holder {
            return Verdict::Stale;
        }
        if holder > seen.holder {
            *seen = Seen::of(holder);
        }
        if seen.record(seq) {
            Verdict::Deliver
        } else {
            self.duplicates += 1;
            Verdict::Duplicate
        }
    }

    /// The messages to send again at `now`: each unacknowledged for a timeout, with its
    /// receiver, its sequence number and how often it was resent before. Each is due again a
    /// timeout later.
    pub fn tick(&mut self, now: Instant) -> Vec<(NodeId, u64, u32, T)> {
        let mut out = Vec::new();
        if self.earliest_due.is_none_or(|e| now < e) {
            return out;
        }
        let mut earliest: Option<Instant> = None;
        for (&(to, seq), u) in self.unacked.iter_mut() {
            if now >= u.due {
                out.push((to, seq, u.resends, u.msg.clone()));
                u.resends += 1;
                u.due = now + self.timeout;
            }
            earliest = Some(earliest.map_or(u.due, |e| e.min(u.due)));
        }
        self.earliest_due = earliest;
        out.sort_by_key(|&(to, seq, _, _)| (to, seq));
        self.resent += out.len() as u64;
        out
    }

    /// Forgets everything about `peer` (it was declared lost): its unacknowledged messages,
    /// returned so their requests can fail, and what it sent.
    pub fn forget(&mut self, peer: NodeId) -> Vec<T> {
        self.seen.remove(&peer);
        self.forget_sent(peer)
    }

    /// Forgets what was sent to `peer`, returning its unacknowledged messages.
    fn forget_sent(&mut self, peer: NodeId) -> Vec<T> {
        self.next_seq.remove(&peer);
        let keys: Vec<(NodeId, u64)> = self
            .unacked
            .keys()
            .filter(|(to, _)| *to == peer)
            .copied()
            .collect();
        keys.into_iter()
            .filter_map(|k| self.unacked.remove(&k).map(|u| u.msg))
            .collect()
    }

    /// `peer`'s id is now held by its `holder`-th holder (a replacement): what was sent to the
    /// earlier one is dropped (returned), the numbering towards the peer starts again, what an
    /// earlier holder sent is forgotten and what it still sends is stale; the numbers of this
    /// holder, or a later one, already heard from are kept (its messages may arrive before the
    /// word of its takeover). Told again of the same holder, it changes nothing.
    pub fn replaced(&mut self, peer: NodeId, holder: u32) -> Vec<T> {
        if self.seen.get(&peer).is_none_or(|s| s.holder < holder) {
            self.seen.insert(peer, Seen::of(holder));
        }
        if self.numbering_for.get(&peer).is_some_and(|&h| h >= holder) {
            return Vec::new();
        }
        self.numbering_for.insert(peer, holder);
        self.forget_sent(peer)
    }

    /// Totals so far: messages sent again, duplicates dropped.
    pub fn counts(&self) -> (u64, u64) {
        (self.resent, self.duplicates)
    }

    /// Messages waiting for an acknowledgement.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// Sequence numbers kept above the watermarks (the receiver's memory), over all senders.
    pub fn kept_above(&self) -> usize {
        self.seen.values().map(|s| s.above.len()).sum()
    }
}

#[cfg(test)]
mod replaced_tests;
#[cfg(test)]
mod tests;
