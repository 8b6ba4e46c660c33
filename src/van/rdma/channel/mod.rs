//! A connected channel: one worker↔server pair's RC QP in RTS, our rings, and the peer's
//! [`Endpoint`]. Only a [`Channel`] posts sends and writes; it is made by
//! [`PreparedChannel::handshake`](super::connect::PreparedChannel::handshake).
//!
//! This file holds the channel and its send side ([`Outbound`], behind `tx`), shared by the
//! threads that send, the bootstrap thread (which writes the backlog) and the poller (send
//! completions, credit writes). Every wait for room — ring credits or send-queue slots — goes
//! through one helper, [`Channel::wait_for_room`]. The receive side (`Inbound`, behind `rx`:
//! records, reassembly, credit returns) is the poller's alone, in [`receive`].
//!
//! Lock order within a channel: `send` → `tx` → `qp`, and `rx` → `tx` → `qp`. `send` and `rx`
//! are never held together; `qp` is innermost.

mod receive;

use super::connect::{Endpoint, LocalRings};
use super::send_queue::SendQueue;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::ring::{fragments, Header, Placement, RingReceiver, RingSender, HEADER};
use crate::van::WriteSource;
use crate::wire::{container, Message, Node, NodeId};
use receive::Inbound;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Immediate of a ring record ([`crate::wire::Imm::RECORD`]): the record is at the receiver's head. Any
/// other immediate is a content write into registered memory.
pub(super) const IMM_RECORD: u32 = crate::wire::Imm::RECORD.0;

/// How long a sender waits on the condvar before it looks again for room. Send completions
/// notify it, but credits arrive by the peer's RDMA write, which nothing signals.
const ROOM_WAIT: Duration = Duration::from_micros(200);

/// One RDMA WRITE (with immediate when `imm` is set) from registered local memory.
#[derive(Clone, Copy)]
struct Wr {
    local: u64,
    len: u32,
    lkey: u32,
    remote: u64,
    rkey: u32,
    imm: Option<u32>,
    /// Always ask for a completion (its source is released on it).
    signal: bool,
}

/// The send side of a channel.
struct Outbound {
    /// Offsets in the peer's receive ring, and its credits.
    sender: RingSender,
    /// Our send queue's slots, signalling and held write sources.
    queue: SendQueue,
    /// Messages queued before the channel was connected, not yet written: nothing else is
    /// written before them.
    backlog: VecDeque<Message>,
    /// Why the channel failed (a failed WC, a broken protocol); every later send returns it.
    failed: Option<String>,
}

/// One connected worker↔server pair. Field order is drop order: the QP goes before the memory
/// its WRs name.
pub(super) struct Channel {
    peer: NodeId,
    /// Its generation, in every `wr_id` (see `send_queue::RecvWrId`).
    generation: u16,
    qp: Mutex<ExtendedQueuePair>,
    rings: LocalRings,
    /// The peer's endpoint: where our records and credits go.
    remote: Endpoint,
    /// Held for the whole of one message's records: a sender waiting for credits mid-message
    /// releases `tx`, and another message's records must not come between its fragments (the
    /// receiver reassembles them in order).
    send: Mutex<()>,
    tx: Mutex<Outbound>,
    rx: Mutex<Inbound>,
    /// Notified on send completions, a failure, and the end of the backlog.
    cv: Condvar,
}

impl Channel {
    /// The channel of a QP the handshake moved to RTS; `backlog` is written first
    /// ([`flush_backlog`](Self::flush_backlog)).
    pub(super) fn connected(
        (peer, generation): (NodeId, u16),
        qp: ExtendedQueuePair,
        rings: LocalRings,
        remote: Endpoint,
        depth: u32,
        backlog: VecDeque<Message>,
    ) -> Channel {
        let receiver = RingReceiver::with_min_record(rings.ring_bytes, rings.min_record);
        Channel {
            peer,
            generation,
            qp: Mutex::new(qp),
            tx: Mutex::new(Outbound {
                sender: RingSender::with_min_record(remote.ring_bytes, remote.min_record),
                queue: SendQueue::new(depth),
                backlog,
                failed: None,
            }),
            rx: Mutex::new(Inbound::new(receiver)),
            rings,
            remote,
            send: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// The peer.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// The channel's generation: a completion whose `wr_id` names another belongs to an
    /// earlier channel to the same peer (replaced) and is dropped.
    pub fn generation(&self) -> u16 {
        self.generation
    }

    /// Writes `msg` into the peer's ring (after the backlog, if any is left); returns its data
    /// bytes.
    ///
    /// # Errors
    /// [`Error::Van`] when the channel failed, or credits or send-queue room did not come
    /// within `timeout`; [`Error::Wire`] when the message cannot be encoded.
    pub fn send(&self, msg: Message, timeout: Duration) -> Result<usize> {
        let n = msg.data_bytes();
        let _whole = lock(&self.send);
        let mut tx = lock(&self.tx);
        if let Some(f) = &tx.failed {
            return Err(Error::Van(f.clone()));
        }
        if !tx.backlog.is_empty() {
            tx.backlog.push_back(msg);
            return Ok(n);
        }
        self.write_message(tx, msg, timeout)?;
        Ok(n)
    }

    /// Writes the messages queued before the connection, in order, each within `timeout`.
    ///
    /// # Errors
    /// As [`send`](Self::send); the messages after the failed one stay unwritten.
    pub fn flush_backlog(&self, timeout: Duration) -> Result<()> {
        let _whole = lock(&self.send);
        loop {
            let mut tx = lock(&self.tx);
            let Some(msg) = tx.backlog.pop_front() else {
                break;
            };
            self.write_message(tx, msg, timeout)?;
        }
        self.cv.notify_all();
        Ok(())
    }

    /// RDMA WRITE WITH IMMEDIATE `imm` of `src` to `addr`/`rkey` on the peer; `src`'s hold is
    /// kept until the write completed. `Ok(false)`: not written (empty, over 4 GiB, or messages
    /// still wait in the backlog — the message path keeps the order).
    ///
    /// # Errors
    /// [`Error::Van`] when the channel failed or the send queue stays full for `timeout`.
    pub fn write_imm(
        &self,
        src: WriteSource,
        addr: u64,
        rkey: u32,
        imm: u32,
        timeout: Duration,
    ) -> Result<bool> {
        let Ok(len) = u32::try_from(src.len()) else {
            return Ok(false); // over one WR's reach: the message path fragments it
        };
        if len == 0 {
            return Ok(false);
        }
        let tx = lock(&self.tx);
        if !tx.backlog.is_empty() {
            return Ok(false);
        }
        let wr = Wr {
            local: src.addr(),
            len,
            lkey: src.lkey(),
            remote: addr,
            rkey,
            imm: Some(imm),
            signal: true,
        };
        let deadline = Instant::now() + timeout;
        let (mut tx, ()) = self.wait_for_room(
            tx,
            deadline,
            |tx| self.try_post(tx, &[wr]).map(|posted| posted.then_some(())),
            || self.send_queue_full(),
        )?;
        tracing::trace!(
            "content write of {len} bytes to {} (imm {imm:#x})",
            Node::describe(self.peer)
        );
        tx.queue.hold_last(src.into_hold());
        Ok(true)
    }

    /// Runs `attempt` until it yields, waiting on the condvar in steps of [`ROOM_WAIT`] for room
    /// (credits, send-queue slots) until `deadline`; then the error is `stuck()`. `tx` is
    /// released while waiting and handed back held.
    ///
    /// # Errors
    /// [`Error::Van`] when the channel failed (checked before every attempt), `attempt` failed,
    /// or the deadline passed.
    fn wait_for_room<'g, T>(
        &self,
        mut tx: MutexGuard<'g, Outbound>,
        deadline: Instant,
        mut attempt: impl FnMut(&mut Outbound) -> Result<Option<T>>,
        stuck: impl FnOnce() -> String,
    ) -> Result<(MutexGuard<'g, Outbound>, T)> {
        let mut stalled = false;
        loop {
            if let Some(f) = &tx.failed {
                return Err(Error::Van(f.clone()));
            }
            if let Some(v) = attempt(&mut tx)? {
                return Ok((tx, v));
            }
            if !stalled {
                stalled = true;
                crate::van::stats::CREDIT_STALLS.inc();
            }
            if Instant::now() >= deadline {
                return Err(Error::Van(stuck()));
            }
            tx = self
                .cv
                .wait_timeout(tx, ROOM_WAIT)
                .map_err(|_| Error::Stopped)?
                .0;
        }
    }

    /// Writes `msg` into the peer's ring, record by record, each waiting for credits and then
    /// for send-queue room until `timeout` from now. The caller holds `send`.
    fn write_message(
        &self,
        mut tx: MutexGuard<'_, Outbound>,
        msg: Message,
        timeout: Duration,
    ) -> Result<()> {
        let bytes = container::encode(msg)?;
        let deadline = Instant::now() + timeout;
        let max = tx.sender.max_payload();
        for (a, b, more) in fragments(bytes.len() as u64, max) {
            let p;
            (tx, p) = self.wait_for_room(
                tx,
                deadline,
                |tx| self.reserve(tx, b - a),
                || self.no_credits(timeout),
            )?;
            let wrs = self.stage_record(&p, &bytes[a as usize..b as usize], more);
            (tx, ()) = self.wait_for_room(
                tx,
                deadline,
                |tx| self.try_post(tx, &wrs).map(|posted| posted.then_some(())),
                || self.send_queue_full(),
            )?;
        }
        Ok(())
    }

    /// Takes the peer's credits from our credit word and reserves room for a record of
    /// `payload` bytes; `None` while the peer's ring is full.
    fn reserve(&self, tx: &mut Outbound, payload: u64) -> Result<Option<Placement>> {
        if let Err(e) = tx.sender.credit(self.rings.credit_in.read_word()) {
            let _ = self.fail_locked(tx, e.clone());
            return Err(Error::Van(e));
        }
        Ok(tx.sender.reserve(payload))
    }

    /// Copies one record (and the padding header before it, if any) into our send ring at `p`,
    /// and returns the WRs that write them into the peer's ring.
    fn stage_record(&self, p: &Placement, payload: &[u8], more: bool) -> Vec<Wr> {
        tracing::trace!(
            "record to {}: offset {} pad {:?} payload {}",
            Node::describe(self.peer),
            p.offset,
            p.pad_at,
            payload.len()
        );
        let ring = &self.rings.send_ring;
        let len = payload.len() as u64;
        ring.write(p.offset, &Header::record(len as u32, more).encode());
        ring.write(p.offset + HEADER, payload);
        let mut wrs = Vec::with_capacity(2);
        if let Some(pad) = p.pad_at {
            ring.write(pad, &Header::padding().encode());
            wrs.push(self.ring_wr(pad, HEADER, None));
        }
        wrs.push(self.ring_wr(p.offset, HEADER + len, Some(IMM_RECORD)));
        wrs
    }

    /// The WR that writes `len` bytes at ring offset `at` into the same offset of the peer's
    /// ring.
    fn ring_wr(&self, at: u64, len: u64, imm: Option<u32>) -> Wr {
        let ring = &self.rings.send_ring;
        Wr {
            local: ring.addr() + at,
            len: len as u32,
            lkey: ring.lkey(),
            remote: self.remote.ring_addr + at,
            rkey: self.remote.ring_rkey,
            imm,
            signal: false,
        }
    }

    /// Posts `wrs` if the send queue has room for them; `Ok(false)` when it has not (the caller
    /// waits for send completions, or — the poller — tries again later).
    fn try_post(&self, tx: &mut Outbound, wrs: &[Wr]) -> Result<bool> {
        if let Some(f) = &tx.failed {
            return Err(Error::Van(f.clone()));
        }
        if !tx.queue.has_room(wrs.len()) {
            return Ok(false);
        }
        let mut qp = lock(&self.qp);
        let mut g = qp.start_post_send();
        for wr in wrs {
            let (id, signal) = tx.queue.next_wr((self.peer, self.generation), wr.signal);
            let flags = if signal {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            let h = g.construct_wr(id.pack(), flags);
            let h = match wr.imm {
                Some(i) => h.setup_write_imm(wr.rkey, wr.remote, i.to_be()),
                None => h.setup_write(wr.rkey, wr.remote),
            };
            // SAFETY: the local range lies in a registered buffer of this channel (or a write
            // source whose hold the send queue keeps until completion), which outlives the WR
            // (buffers are dropped after the QP).
            unsafe { h.setup_sge(wr.lkey, wr.local, wr.len) };
        }
        g.post().map_err(|e| {
            Error::Van(format!("post to {} failed: {e}", Node::describe(self.peer)))
        })?;
        Ok(true)
    }

    /// A send completion accounting for `count` WRs; `failure` names a failed WC's status.
    /// Returns the channel's error when this failed it (as [`fail`](Self::fail)).
    pub fn send_completed(&self, count: u32, failure: Option<String>) -> Option<String> {
        lock(&self.tx).queue.completed(count);
        let failed = failure.and_then(|why| self.fail(why));
        self.cv.notify_all();
        failed
    }

    /// Fails the channel (the first reason is kept): every later send returns the error.
    /// Returns that error's text when this call failed it (`None` if it had failed before).
    pub fn fail(&self, why: String) -> Option<String> {
        self.fail_locked(&mut lock(&self.tx), why)
    }

    fn fail_locked(&self, tx: &mut Outbound, why: String) -> Option<String> {
        let who = Node::describe(self.peer);
        // A flushed WR (status 5) only says the QP is in the error state: the WC that put it
        // there may be polled after it, and is logged too.
        if tx
            .failed
            .as_deref()
            .is_some_and(|f| f.contains("WC status 5 "))
            && !why.contains("WC status 5 ")
        {
            tracing::error!("RDMA channel to {who}, failed already: {why}");
        }
        let newly = tx.failed.is_none().then(|| {
            tracing::error!("RDMA channel to {who}: {why}");
            let text = format!("RDMA channel to {who} failed: {why}");
            tx.failed = Some(text.clone());
            text
        });
        self.cv.notify_all();
        newly
    }

    fn no_credits(&self, timeout: Duration) -> String {
        format!(
            "{} returned no credits within {:.0} s: its receive ring stays full",
            Node::describe(self.peer),
            timeout.as_secs_f64()
        )
    }

    fn send_queue_full(&self) -> String {
        format!("the send queue to {} stays full", Node::describe(self.peer))
    }
}
