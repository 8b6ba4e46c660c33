//! Property tests of the ring: a sender and a receiver over a simulated ring memory, with random
//! message sizes (some larger than the ring), a slow consumer, and lazy credit returns.

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

/// The simulated receive ring; `owner[i]` is the unconsumed record covering byte i, to catch any
/// write over unread bytes.
struct Sim {
    mem: Vec<u8>,
    sender: RingSender,
    receiver: RingReceiver,
    /// Records written and not yet seen by the receiver (the immediates in flight).
    imms: VecDeque<()>,
    /// The credit word on the sender (the receiver writes it).
    credit_word: u64,
    min_record: u64,
    unread: Vec<bool>,
}

impl Sim {
    fn new(cap: u64, min_record: u64) -> Sim {
        let sender = RingSender::with_min_record(cap, min_record);
        let cap = sender.capacity();
        Sim {
            min_record: (min_record.div_ceil(ALIGN) * ALIGN).clamp(ALIGN, cap / 4 / ALIGN * ALIGN),
            mem: vec![0; cap as usize],
            sender,
            receiver: RingReceiver::with_min_record(cap, min_record),
            imms: VecDeque::new(),
            credit_word: 0,
            unread: vec![false; cap as usize],
        }
    }

    fn put_header(&mut self, off: u64, h: Header) {
        let o = off as usize;
        self.mem[o..o + HEADER as usize].copy_from_slice(&h.encode());
    }

    /// Tries to write one record; false when the ring is full.
    fn send(&mut self, payload: &[u8], more: bool) -> bool {
        let Some(p) = self.sender.reserve(payload.len() as u64) else {
            return false;
        };
        if let Some(pad) = p.pad_at {
            assert!(
                !self.unread[pad as usize..].iter().any(|&u| u),
                "padding over unread bytes"
            );
            self.put_header(pad, Header::padding());
        }
        let (o, s) = (p.offset as usize, p.size as usize);
        assert!(o + s <= self.mem.len(), "record past the ring's end");
        assert!(
            !self.unread[o..o + s].iter().any(|&u| u),
            "write over unread bytes at {o}"
        );
        self.put_header(p.offset, Header::record(payload.len() as u32, more));
        self.mem[o + 8..o + 8 + payload.len()].copy_from_slice(payload);
        self.unread[o..o + s].iter_mut().for_each(|u| *u = true);
        self.imms.push_back(());
        true
    }

    /// Takes one record if an immediate is pending.
    fn recv(&mut self) -> Option<(Vec<u8>, bool)> {
        self.imms.pop_front()?;
        let mem = &self.mem;
        let r = self
            .receiver
            .next(|off| {
                let o = off as usize;
                mem[o..o + HEADER as usize].try_into().unwrap_or_default()
            })
            .expect("valid record");
        let a = r.payload_at as usize;
        let data = self.mem[a..a + r.len as usize].to_vec();
        let start = (r.payload_at - HEADER) as usize;
        let size = ((r.len + HEADER).div_ceil(ALIGN) * ALIGN).max(self.min_record) as usize;
        self.unread[start..start + size]
            .iter_mut()
            .for_each(|u| *u = false);
        self.receiver.consume(&r);
        Some((data, r.more))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn fifo_intact_no_overwrite_no_deadlock(
        cap in (4u64..64).prop_map(|k| k * 64),
        max_records in 1u64..40,
        sizes in proptest::collection::vec(0usize..3000, 1..40),
        consumer in proptest::collection::vec(0u8..4, 1..50),
    ) {
        let mut sim = Sim::new(cap, min_record(cap, max_records));
        let max = sim.sender.max_payload();
        let messages: Vec<Vec<u8>> = sizes.iter().enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        // Outgoing records: (message index, payload range, more).
        let mut out: VecDeque<(usize, u64, u64, bool)> = messages.iter().enumerate()
            .flat_map(|(i, m)| fragments(m.len() as u64, max).map(move |(a, b, more)| (i, a, b, more)))
            .collect();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut reassembler = Reassembler::new();
        let mut step = 0usize;
        let mut idle = 0;
        while got.len() < messages.len() {
            step += 1;
            prop_assert!(idle < 1000, "no progress: deadlock");
            // The sender writes as much as credits allow.
            let mut progressed = false;
            while let Some(&(i, a, b, more)) = out.front() {
                if !sim.send(&messages[i][a as usize..b as usize], more) {
                    break;
                }
                out.pop_front();
                progressed = true;
                prop_assert!(sim.imms.len() as u64 <= max_records.max(4), "more records unread than receive WRs");
            }
            // The consumer is slow but alive: reads 0..3 records a step, and at least one per
            // pass over its schedule.
            let n = consumer[step % consumer.len()].max(u8::from(step.is_multiple_of(consumer.len())));
            for _ in 0..n {
                if let Some((data, more)) = sim.recv() {
                    if let Some(whole) = reassembler.push(data, more) {
                        got.push(whole);
                    }
                    progressed = true;
                }
            }
            // Credits go back lazily, and always once the receiver drained what was written.
            if let Some(pos) = sim.receiver.credit_due(sim.imms.is_empty()) {
                sim.credit_word = pos;
                sim.receiver.credit_sent(pos);
            }
            prop_assert!(sim.sender.credit(sim.credit_word).is_ok());
            idle = if progressed { 0 } else { idle + 1 };
        }
        prop_assert_eq!(got, messages, "FIFO order and bytes");
        prop_assert_eq!(reassembler.pending(), 0);
        prop_assert!(sim.sender.in_flight() <= cap);
    }
}

#[test]
fn a_full_ring_waits_for_credits() {
    let mut s = RingSender::new(256);
    let p = s.reserve(100).expect("room");
    assert_eq!(
        p,
        Placement {
            pad_at: None,
            offset: 0,
            size: 128
        }
    );
    assert!(s.reserve(100).is_some());
    assert_eq!(
        s.reserve(1),
        None,
        "full until the receiver returns credits"
    );
    s.credit(128).expect("valid credit");
    let p = s.reserve(50).expect("room after credits");
    assert_eq!(p.offset, 0, "wrapped to the ring's start");
    assert_eq!(
        s.credit(10_000).unwrap_err(),
        "credit for position 10000, but only 320 bytes were sent"
    );
}

#[test]
fn padding_moves_a_record_to_offset_zero() {
    let mut s = RingSender::new(512);
    assert_eq!(s.reserve(150).map(|p| p.offset), Some(0)); // 192 bytes
    assert_eq!(s.reserve(150).map(|p| p.offset), Some(192)); // 384
    s.credit(384).expect("credit");
    let p = s.reserve(150).expect("room");
    assert_eq!(
        p,
        Placement {
            pad_at: Some(384),
            offset: 0,
            size: 192
        }
    );
}

#[test]
fn corrupt_headers_are_errors() {
    let mut r = RingReceiver::new(256);
    assert!(r
        .next(|_| Header::record(1000, false).encode())
        .unwrap_err()
        .contains("does not fit a 256-byte ring"));
    assert!(r
        .next(|_| Header::padding().encode())
        .unwrap_err()
        .contains("two padding headers"));
    // A header of a record that fits, but past what half the ring may hold, is refused too.
    assert!(r
        .next(|_| Header::record(129, true).encode())
        .unwrap_err()
        .contains("does not fit"));
}

#[test]
fn fragments_cover_the_message() {
    assert_eq!(fragments(0, 10).collect::<Vec<_>>(), vec![(0, 0, false)]);
    assert_eq!(
        fragments(25, 10).collect::<Vec<_>>(),
        vec![(0, 10, true), (10, 20, true), (20, 25, false)]
    );
}
