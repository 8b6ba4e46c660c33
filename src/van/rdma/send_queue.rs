//! The bookkeeping of one QP's send queue (sans-IO: no verbs here): how many send WRs are
//! outstanding, which ones to signal, what their `wr_id`s say, and which write sources to keep
//! alive until their WR completed. Also the `wr_id` packing of receive WRs.
//!
//! Signalling: one send WR in [`SIGNAL_EVERY`] asks for a completion, and every WR once half the
//! queue is outstanding, so a sender waiting for room is always covered by a coming completion.
//! A signaled WR's completion accounts for itself and the unsignaled WRs posted before it since
//! the previous signaled one: its [`SendWrId::count`].

use crate::wire::NodeId;
use std::collections::VecDeque;

/// One send WR in this many is signaled.
pub(super) const SIGNAL_EVERY: u32 = 16;

/// What a receive WR's `wr_id` carries: the peer's node id (the shared receive CQ does not say
/// which QP a completion came from) and the generation of the peer's channel (a replaced
/// peer's old QP may still have completions in the CQ: they name an older generation and are
/// dropped). Packed as the generation in bits 32–47 and the id's 32 bits below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RecvWrId {
    /// The peer.
    pub peer: NodeId,
    /// Its channel's generation.
    pub generation: u16,
}

impl RecvWrId {
    /// The 64-bit `wr_id`.
    pub fn pack(self) -> u64 {
        (u64::from(self.generation) << 32) | self.peer as u32 as u64
    }

    /// The peer and generation a receive completion's `wr_id` names.
    pub fn unpack(wr_id: u64) -> RecvWrId {
        RecvWrId {
            peer: wr_id as u32 as NodeId,
            generation: (wr_id >> 32) as u16,
        }
    }
}

/// What a send WR's `wr_id` carries: the channel's generation (bits 48–63, see [`RecvWrId`]),
/// the peer's node id (bits 32–47: ids below 65536, ranks below 32764) and how many send WRs
/// its completion accounts for (low 32 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SendWrId {
    /// The peer the WR writes to.
    pub peer: NodeId,
    /// Its channel's generation.
    pub generation: u16,
    /// This WR and the unsignaled ones before it since the previous signaled WR.
    pub count: u32,
}

impl SendWrId {
    /// The 64-bit `wr_id`.
    pub fn pack(self) -> u64 {
        (u64::from(self.generation) << 48)
            | (u64::from(self.peer as u16) << 32)
            | u64::from(self.count)
    }

    /// The peer, generation and count a send completion's `wr_id` says.
    pub fn unpack(wr_id: u64) -> SendWrId {
        SendWrId {
            peer: NodeId::from((wr_id >> 32) as u16),
            generation: (wr_id >> 48) as u16,
            count: wr_id as u32,
        }
    }
}

/// The send queue of one QP of `depth` WRs, seen from the posting side.
pub(super) struct SendQueue {
    depth: u32,
    outstanding: u32,
    unsignaled: u32,
    /// Send WRs accounted / known complete, counted from the start.
    posted: u64,
    completed: u64,
    /// What keeps the sources of content writes alive and unchanged, with their WR's sequence
    /// number, until the write completed.
    held: VecDeque<(u64, Box<dyn Send>)>,
}

impl SendQueue {
    /// An empty send queue of `depth` WRs.
    pub fn new(depth: u32) -> SendQueue {
        SendQueue {
            depth,
            outstanding: 0,
            unsignaled: 0,
            posted: 0,
            completed: 0,
            held: VecDeque::new(),
        }
    }

    /// Whether `n` more WRs may be posted now (one slot always stays free).
    pub fn has_room(&self, n: usize) -> bool {
        (self.outstanding as u64 + n as u64 + 1) < self.depth as u64
    }

    /// Accounts one WR about to be posted to `peer`'s channel of `generation`;
    /// `always_signal` for a WR whose completion must be seen (its source is held). Returns
    /// its `wr_id` and whether to signal it.
    pub fn next_wr(
        &mut self,
        (peer, generation): (NodeId, u16),
        always_signal: bool,
    ) -> (SendWrId, bool) {
        self.outstanding += 1;
        self.unsignaled += 1;
        self.posted += 1;
        let signal =
            always_signal || self.unsignaled >= SIGNAL_EVERY || self.outstanding >= self.depth / 2;
        let id = SendWrId {
            peer,
            generation,
            count: self.unsignaled,
        };
        if signal {
            self.unsignaled = 0;
        }
        (id, signal)
    }

    /// Keeps `what` until the WR accounted last (by [`next_wr`](Self::next_wr)) completed.
    pub fn hold_last(&mut self, what: Box<dyn Send>) {
        self.held.push_back((self.posted, what));
    }

    /// A send completion accounting for `count` WRs: frees their slots and drops what was held
    /// for them.
    pub fn completed(&mut self, count: u32) {
        self.outstanding = self.outstanding.saturating_sub(count);
        self.completed += count as u64;
        while self
            .held
            .front()
            .is_some_and(|(seq, _)| *seq <= self.completed)
        {
            self.held.pop_front();
        }
    }

    /// WRs posted and not known complete.
    #[cfg(test)]
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn wr_ids_round_trip() {
        let s = SendWrId {
            peer: 9,
            generation: 3,
            count: 16,
        };
        assert_eq!(s.pack(), (3 << 48) | (9 << 32) | 16);
        assert_eq!(SendWrId::unpack(s.pack()), s);
        let r = RecvWrId {
            peer: 12,
            generation: 65535,
        };
        assert_eq!(RecvWrId::unpack(r.pack()), r);
    }

    /// Posts `n` WRs and completes the signaled ones; every WR is accounted exactly once.
    #[test]
    fn signaled_completions_cover_every_wr() {
        let mut q = SendQueue::new(1024);
        let mut covered = 0;
        for i in 0..100 {
            assert!(q.has_room(1));
            let (id, signal) = q.next_wr((8, 1), i == 99);
            if signal {
                covered += id.count;
                q.completed(id.count);
            }
        }
        assert_eq!(covered, 100);
        assert_eq!(q.outstanding(), 0);
    }

    #[test]
    fn half_full_signals_every_wr_and_full_refuses() {
        let mut q = SendQueue::new(8);
        let signals: Vec<bool> = (0..7).map(|_| q.next_wr((8, 1), false).1).collect();
        assert_eq!(signals, [false, false, false, true, true, true, true]);
        assert!(!q.has_room(1), "one slot always stays free");
        q.completed(4);
        assert!(q.has_room(1));
    }

    #[test]
    fn holds_go_when_their_wr_completed() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut q = SendQueue::new(64);
        q.next_wr((8, 1), false);
        let (id, signal) = q.next_wr((8, 1), true);
        assert!(signal);
        q.hold_last(Box::new(Counted(dropped.clone())));
        q.completed(id.count - 1);
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "its WR is still out");
        q.completed(1);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }
}
