//! The CQ poller thread (`rdma-poller`): the only reader of the two shared completion queues.
//! One round drains the receive CQ (records → messages, content writes → events, receive WRs
//! re-posted), then the send CQ (send-queue room, failed WCs), then returns credits. Between
//! idle rounds it yields, then sleeps 100 µs.

use super::channel::IMM_RECORD;
use super::send_queue::{RecvWrId, SendWrId};
use super::van::VanState;
use crate::error::Error;
use crate::van::{RemoteWrite, VanEvent};
use crate::wire::container::{self, ContainerError};
use crate::wire::{Node, NodeId};
use bytes::Bytes;
use sideway::ibverbs::completion::WorkCompletionStatus;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Idle rounds spent yielding before the poller sleeps between rounds.
const SPIN_ROUNDS: u32 = 64;
/// The sleep between idle rounds after that.
const IDLE_SLEEP: Duration = Duration::from_micros(100);

/// What the poller keeps between rounds.
pub(super) struct Poller {
    van: Arc<VanState>,
    /// Rounds in a row that found no completion.
    idle: u32,
    /// A credit write found the send queue full: try again next round even if idle.
    owed: bool,
}

/// A receive completion, copied out of the CQ.
struct Received {
    wr_id: u64,
    status: u32,
    imm: u32,
    byte_len: u32,
}

impl Poller {
    /// Runs rounds until the van stops.
    pub fn run(van: Arc<VanState>) {
        let mut p = Poller {
            van,
            idle: 0,
            owed: false,
        };
        while !p.van.stop.load(Ordering::Acquire) {
            let busy = p.round();
            p.pause(busy);
        }
    }

    /// One round; true when it found completions.
    fn round(&mut self) -> bool {
        let received = self.drain_receives();
        let sent = self.drain_sends();
        let busy = received || sent;
        // Return credits for everything consumed (the CQ is drained: forced). Credits only
        // fall due when records were consumed, and a credit whose post found the send queue
        // full can only go once send completions arrive: both make this round busy, so an
        // idle round has nothing to do here.
        if busy || self.owed {
            self.owed = self.return_credits();
        }
        busy
    }

    fn pause(&mut self, busy: bool) {
        if busy {
            self.idle = 0;
            return;
        }
        self.idle = self.idle.saturating_add(1);
        if self.idle < SPIN_ROUNDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(IDLE_SLEEP);
        }
    }

    /// Drains the receive CQ and handles each completion; true when there was one.
    fn drain_receives(&self) -> bool {
        let mut wcs = Vec::new();
        if let Ok(mut p) = self.van.dev.recv_cq.start_poll() {
            for wc in p.by_ref() {
                wcs.push(Received {
                    wr_id: wc.wr_id(),
                    status: wc.status(),
                    imm: u32::from_be(wc.imm_data()),
                    byte_len: wc.byte_len(),
                });
            }
        }
        for wc in &wcs {
            self.on_receive(wc);
        }
        !wcs.is_empty()
    }

    /// Drains the send CQ and handles each completion; true when there was one.
    fn drain_sends(&self) -> bool {
        let mut wcs = Vec::new();
        if let Ok(mut p) = self.van.dev.send_cq.start_poll() {
            for wc in p.by_ref() {
                wcs.push((wc.wr_id(), wc.status()));
            }
        }
        for &(wr_id, status) in &wcs {
            if status != 0 {
                crate::van::stats::wc_error("send", status);
            }
            let id = SendWrId::unpack(wr_id);
            let live = self.van.channels.connected(id.peer);
            // A completion of a replaced peer's old QP: nothing waits on it any more.
            if let Some(c) = live.filter(|c| c.generation() == id.generation) {
                let failure = (status != 0).then(|| format!("send {}", wc_status_text(status)));
                if let Some(text) = c.send_completed(id.count, failure) {
                    self.report_lost(id.peer, text);
                }
            }
        }
        !wcs.is_empty()
    }

    /// A record (the message it completes goes up), or a content write (a
    /// [`VanEvent::RemoteWrite`]); then the consumed receive WR is posted again. A failed WC
    /// fails the channel.
    fn on_receive(&self, wc: &Received) {
        let id = RecvWrId::unpack(wc.wr_id);
        if wc.status != 0 {
            crate::van::stats::wc_error("receive", wc.status);
        }
        let Some(c) = self.van.channels.receiving(id.peer) else {
            return;
        };
        if c.generation() != id.generation {
            return; // the old QP of a replaced peer
        }
        if wc.status != 0 {
            if let Some(text) = c.fail(format!("receive {}", wc_status_text(wc.status))) {
                self.report_lost(c.peer(), text);
            }
            return;
        }
        if wc.imm == IMM_RECORD {
            if let Some(whole) = c.take_record() {
                self.deliver(whole, c.peer());
            }
        } else {
            // A write straight into registered memory (a rendezvous content write): the
            // postoffice routes it by the immediate's slot.
            let _ = self.van.events.send(Ok(VanEvent::RemoteWrite(RemoteWrite {
                from: c.peer(),
                imm: wc.imm,
                len: wc.byte_len,
            })));
        }
        c.repost_recv();
    }

    /// A channel failed (a failed WC): the postoffice fails what waits on `peer` at once,
    /// instead of at its deadline.
    fn report_lost(&self, peer: NodeId, text: String) {
        let _ = self.van.events.send(Ok(VanEvent::PeerLost {
            peer,
            error: Error::PeerLost(text),
        }));
    }

    /// Hands a whole message from `peer`'s ring up: a malformed container is an
    /// [`Error::Van`], malformed frames an [`Error::Wire`]. A message whose header names
    /// another sender than the QP's peer is dropped (the QP was set up with a
    /// member over an authenticated connection; its sender is that member).
    fn deliver(&self, whole: Vec<u8>, peer: NodeId) {
        let event = match container::decode(Bytes::from(whole)) {
            Ok(msg) if msg.meta.sender != peer => {
                tracing::warn!(
                    "dropped a message from the ring of {} that claims to come from {}",
                    Node::describe(peer),
                    Node::describe(msg.meta.sender)
                );
                return;
            }
            Ok(msg) => Ok(VanEvent::Message(msg)),
            Err(ContainerError::Layout(why)) => Err(Error::Van(format!(
                "malformed message from the ring: {why}"
            ))),
            Err(ContainerError::Frames(e)) => Err(Error::Wire(e)),
        };
        let _ = self.van.events.send(event);
    }

    /// Posts every channel's due credit write; true when one is still owed.
    fn return_credits(&self) -> bool {
        let mut owed = false;
        for c in self.van.channels.all_connected() {
            owed |= c.return_credit();
        }
        owed
    }
}

/// A failed WC's status as text: its number and sideway's name for it.
fn wc_status_text(s: u32) -> String {
    // `WorkCompletionStatus::from` panics on a value it does not know; they run from 0 to the
    // last variant without a gap.
    let last = WorkCompletionStatus::TagMatchingRendezvousIncomplete as u32;
    if s <= last {
        format!("WC status {s} ({:?})", WorkCompletionStatus::from(s))
    } else {
        format!("WC status {s} (unknown)")
    }
}
