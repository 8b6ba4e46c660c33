//! The receive side of a channel, used by the poller alone: the record at the receive ring's
//! head, the reassembly of fragments, the re-posting of receive WRs, and the credit write that
//! tells the peer how far we consumed its records.

use super::{Channel, Wr};
use crate::sync::lock;
use crate::van::rdma::connect::post_recv;
use crate::van::rdma::send_queue::RecvWrId;
use crate::van::ring::{Reassembler, RingReceiver};
use crate::wire::Node;

/// The receive side of a channel (the poller's).
pub(super) struct Inbound {
    receiver: RingReceiver,
    reassembler: Reassembler,
}

impl Inbound {
    /// Nothing received yet on a ring that `receiver` tracks.
    pub(super) fn new(receiver: RingReceiver) -> Inbound {
        Inbound {
            receiver,
            reassembler: Reassembler::new(),
        }
    }
}

impl Channel {
    /// Copies the record at the receive ring's head out; returns the message it completes, if
    /// it is the last of one. A record that breaks the ring protocol fails the channel.
    pub fn take_record(&self) -> Option<Vec<u8>> {
        let mut rx = lock(&self.rx);
        let ring = &self.rings.recv_ring;
        let rec = match rx.receiver.next(|off| ring.read_header(off)) {
            Ok(r) => r,
            Err(e) => {
                drop(rx);
                let who = Node::describe(self.peer);
                self.fail(format!("{who} broke the ring protocol: {e}"));
                return None;
            }
        };
        tracing::trace!(
            "record from {}: payload at {} len {} more {}",
            Node::describe(self.peer),
            rec.payload_at,
            rec.len,
            rec.more
        );
        let mut payload = vec![0u8; rec.len as usize];
        ring.read(rec.payload_at, &mut payload);
        rx.receiver.consume(&rec);
        rx.reassembler.push(payload, rec.more)
    }

    /// Posts a receive WR in place of one a completion consumed.
    pub fn repost_recv(&self) {
        let id = RecvWrId {
            peer: self.peer,
            generation: self.generation,
        };
        let reposted = post_recv(&mut lock(&self.qp), id);
        if let Err(e) = reposted {
            self.fail(format!("cannot re-post a receive WR: {e}"));
        }
    }

    /// Posts the credit write (our consumed position into the peer's credit word) if one is
    /// due; true when it is still owed (the send queue was full).
    pub fn return_credit(&self) -> bool {
        let mut rx = lock(&self.rx);
        let Some(pos) = rx.receiver.credit_due(true) else {
            return false;
        };
        let out = &self.rings.credit_out;
        out.write_word(pos);
        let wr = Wr {
            local: out.addr(),
            len: 8,
            lkey: out.lkey(),
            remote: self.remote.credit_addr,
            rkey: self.remote.credit_rkey,
            imm: None,
            signal: false,
        };
        let posted = self.try_post(&mut lock(&self.tx), &[wr]);
        match posted {
            Ok(true) => {
                rx.receiver.credit_sent(pos);
                false
            }
            Ok(false) => true, // the send queue is full: after the next send completions
            Err(_) => false,   // the channel failed; its senders see the error
        }
    }
}
