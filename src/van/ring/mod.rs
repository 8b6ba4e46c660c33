//! The Model3 ring with credits (sans-IO): offsets and flow control of one direction of one QP.
//!
//! Each QP has a registered receive ring on the receiving node; the sender writes records into it
//! with RDMA WRITE WITH IMMEDIATE at an offset it tracks itself (the published Model3 of
//! `shared/seeds/004_*`, section 3.1). Unlike the published design, the sender never writes over
//! bytes the receiver has not consumed: it keeps the receiver's consumed position (its
//! **credits**), which the receiver returns by a small RDMA WRITE of that position into a
//! registered credit word on the sender, and waits when the ring is full.
//!
//! Layout: positions are monotonic byte counts (`u64`); the ring offset is `position % capacity`.
//! A record is an 8-byte [`Header`] — payload length (u32 LE) and flags (u32 LE), encoded and
//! decoded only in `header.rs` — then the payload, padded to [`ALIGN`] bytes. A record never
//! wraps: if it does not fit before the ring's end, the sender first writes a padding header
//! ([`FLAG_PAD`]) there and places the record at offset 0; the receiver skips to 0 when it reads
//! a padding header. A message larger than [`RingSender::max_payload`] is split into records
//! flagged [`FLAG_MORE`] except the last.
//!
//! Immediate: every record write carries `0xFFFF_FFFF` ([`crate::wire::Imm::RECORD`]);
//! the record is at the receiver's head, so the immediate need not say where. RC delivers writes
//! in order, so when a record's completion arrives, its header — and any padding header before
//! it — is in memory.
//!
//! Files: this one holds the sender's and receiver's offsets and credits and the fragment split;
//! `header.rs` the header's bytes ([`Header`]); `reassembly.rs` the joining of fragments
//! ([`Reassembler`]). Nothing here does IO: the RDMA van copies the bytes and posts the writes.

mod header;
mod reassembly;

pub use header::{Header, HeaderBytes, FLAG_MORE, FLAG_PAD, HEADER};
pub use reassembly::Reassembler;

/// Record alignment and granularity, in bytes.
pub const ALIGN: u64 = 64;

fn record_size(payload: u64, min: u64) -> u64 {
    ((HEADER + payload).div_ceil(ALIGN) * ALIGN).max(min)
}

/// The smallest record for a ring of `capacity` bytes whose receiver has `max_records` receive
/// WRs posted: every record consumes one, so at most `max_records` may be unread at once.
pub fn min_record(capacity: u64, max_records: u64) -> u64 {
    capacity.div_ceil(max_records.max(1)).div_ceil(ALIGN) * ALIGN
}

/// Where the driver must write one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Offset of a padding header to write first (the rest of the ring up to its end is
    /// skipped), if the record does not fit before the end.
    pub pad_at: Option<u64>,
    /// Offset of the record's header.
    pub offset: u64,
    /// Bytes the record occupies (header + payload, aligned).
    pub size: u64,
}

/// The sending side: where the next record goes, and how much room the receiver has left.
#[derive(Clone, Debug)]
pub struct RingSender {
    capacity: u64,
    min_record: u64,
    tail: u64,
    acked: u64,
}

impl RingSender {
    /// A sender for a receive ring of `capacity` bytes (a multiple of [`ALIGN`], at least
    /// 4 × [`ALIGN`]).
    ///
    /// # Panics
    /// Never; a capacity that is not a multiple of [`ALIGN`] is rounded down.
    pub fn new(capacity: u64) -> RingSender {
        RingSender::with_min_record(capacity, ALIGN)
    }

    /// As [`new`](Self::new), every record taking at least `min_record` bytes (see
    /// [`min_record`]); at most a quarter of the ring.
    pub fn with_min_record(capacity: u64, min_record: u64) -> RingSender {
        let capacity = (capacity / ALIGN * ALIGN).max(4 * ALIGN);
        let min_record =
            (min_record.div_ceil(ALIGN) * ALIGN).clamp(ALIGN, capacity / 4 / ALIGN * ALIGN);
        RingSender {
            capacity,
            min_record,
            tail: 0,
            acked: 0,
        }
    }

    /// Largest payload of one record: half the ring less the header, so that a record always
    /// fits an empty ring even after padding.
    pub fn max_payload(&self) -> u64 {
        self.capacity / 2 / ALIGN * ALIGN - HEADER
    }

    /// Reserves room for a record of `payload` bytes (at most [`max_payload`](Self::max_payload)).
    /// `None`: the receiver has not freed enough yet; wait for credits and try again.
    pub fn reserve(&mut self, payload: u64) -> Option<Placement> {
        debug_assert!(payload <= self.max_payload());
        let size = record_size(payload.min(self.max_payload()), self.min_record);
        let off = self.tail % self.capacity;
        let pad = if off + size > self.capacity {
            self.capacity - off
        } else {
            0
        };
        let free = self.capacity - (self.tail - self.acked);
        if pad + size > free {
            return None;
        }
        self.tail += pad + size;
        Some(Placement {
            pad_at: (pad > 0).then_some(off),
            offset: if pad > 0 { 0 } else { off },
            size,
        })
    }

    /// The receiver's consumed position, read from the credit word. Positions only grow; an older
    /// value is ignored.
    ///
    /// # Errors
    /// A text when the position is beyond what was sent (a corrupt credit word).
    pub fn credit(&mut self, consumed: u64) -> Result<(), String> {
        if consumed > self.tail {
            return Err(format!(
                "credit for position {consumed}, but only {} bytes were sent",
                self.tail
            ));
        }
        self.acked = self.acked.max(consumed);
        Ok(())
    }

    /// Bytes written and not yet returned.
    pub fn in_flight(&self) -> u64 {
        self.tail - self.acked
    }

    /// The ring's capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// One record as the receiver finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Offset of the payload in the ring.
    pub payload_at: u64,
    /// Payload length.
    pub len: u64,
    /// More records of this message follow.
    pub more: bool,
}

/// The receiving side: where the next record starts, and what to return as credits.
#[derive(Clone, Debug)]
pub struct RingReceiver {
    capacity: u64,
    min_record: u64,
    head: u64,
    published: u64,
}

impl RingReceiver {
    /// A receiver of a ring of `capacity` bytes (rounded as [`RingSender::new`]).
    pub fn new(capacity: u64) -> RingReceiver {
        RingReceiver::with_min_record(capacity, ALIGN)
    }

    /// As [`new`](Self::new) with the sender's minimum record size.
    pub fn with_min_record(capacity: u64, min_record: u64) -> RingReceiver {
        let s = RingSender::with_min_record(capacity, min_record);
        RingReceiver {
            capacity: s.capacity,
            min_record: s.min_record,
            head: 0,
            published: 0,
        }
    }

    /// The record at the head, after skipping a padding header. `header(offset)` reads the
    /// [`HEADER`] bytes at a ring offset (a multiple of [`ALIGN`] below the capacity); this
    /// decodes them ([`Header::decode`]).
    ///
    /// # Errors
    /// A text naming the offset when the header is impossible (a corrupt ring or a peer that
    /// breaks the protocol).
    pub fn next(&mut self, header: impl Fn(u64) -> HeaderBytes) -> Result<Record, String> {
        let mut off = self.head % self.capacity;
        let mut h = Header::decode(header(off));
        if h.is_padding() {
            self.head += self.capacity - off;
            off = 0;
            h = Header::decode(header(0));
            if h.is_padding() {
                return Err("two padding headers in a row at ring offset 0".into());
            }
        }
        let len = h.len as u64;
        if off + record_size(len, self.min_record) > self.capacity || len > self.capacity / 2 {
            return Err(format!(
                "record of {len} bytes at ring offset {off} does not fit a {}-byte ring",
                self.capacity
            ));
        }
        Ok(Record {
            payload_at: off + HEADER,
            len,
            more: h.more(),
        })
    }

    /// Frees the record [`next`](Self::next) returned (its bytes were copied out).
    pub fn consume(&mut self, r: &Record) {
        self.head += record_size(r.len, self.min_record);
    }

    /// The position to return as credits, when at least a quarter of the ring was consumed since
    /// the last return, or when `force`. The driver must force whenever it has consumed every
    /// record that arrived (its completion queue is drained): otherwise a sender waiting for less
    /// than a quarter of the ring would wait forever. Once the credit write is posted, confirm it
    /// with [`credit_sent`](Self::credit_sent); until then it stays due. `None`: nothing due.
    pub fn credit_due(&self, force: bool) -> Option<u64> {
        let unpublished = self.head - self.published;
        (unpublished > 0 && (force || unpublished >= self.capacity / 4)).then_some(self.head)
    }

    /// The credit write of position `pos` was posted.
    pub fn credit_sent(&mut self, pos: u64) {
        self.published = self.published.max(pos);
    }

    /// Consumed position.
    pub fn head(&self) -> u64 {
        self.head
    }
}

/// Splits a message of `len` bytes into record payloads of at most `max` bytes: (start, end,
/// more). An empty message is one empty record.
pub fn fragments(len: u64, max: u64) -> impl Iterator<Item = (u64, u64, bool)> {
    let max = max.max(1);
    let n = len.div_ceil(max).max(1);
    (0..n).map(move |i| {
        let start = i * max;
        let end = (start + max).min(len);
        (start, end, i + 1 < n)
    })
}

#[cfg(test)]
mod tests;
