//! The resend book when a node's id is taken by a replacement: node A's process dies and a new
//! one (holder 1, a book of its own that numbers from 0 again) takes its id, while the first
//! holder's messages and B's ACKs of them are still on the wire. Its peer B is told of the
//! takeover at any moment (or only at the end). An ACK for A's id reaches whichever process
//! holds it then.

use super::*;
use proptest::prelude::*;

const A: NodeId = 9; // the replaced node
const B: NodeId = 8; // its peer

/// Payloads: A's first holder's from 0, A's replacement's from here.
const SECOND: u32 = 1000;

#[derive(Clone, Copy, Debug)]
enum Packet {
    /// Data from A's `holder`-th holder.
    ToB { holder: u32, seq: u64, payload: u32 },
    /// B acknowledges holder `holder`'s message `seq` (`ControlMsg::Ack::holder`).
    AckToA { holder: u32, seq: u64 },
}

struct Net {
    /// A's live process, and which holder it is.
    a: ResendBook<u32>,
    holder: u32,
    b: ResendBook<u32>,
    /// B heard of the takeover (`ResendBook::replaced`).
    told: bool,
    flight: Vec<Packet>,
    /// What B delivered, in order; how many it had when it first delivered A's replacement's,
    /// or was told.
    at_b: Vec<u32>,
    cut: Option<usize>,
    /// A's current holder's next payload.
    next: u32,
    timeout: Duration,
    now: Instant,
}

impl Net {
    fn new(timeout: Duration) -> Net {
        Net {
            a: ResendBook::new(timeout),
            holder: 0,
            b: ResendBook::new(timeout),
            told: false,
            flight: Vec::new(),
            at_b: Vec::new(),
            cut: None,
            next: 0,
            timeout,
            now: Instant::now(),
        }
    }

    fn a_sends(&mut self) {
        let (seq, payload) = (self.a.next_seq(B), self.next);
        self.a.sent(B, seq, payload, self.now);
        self.next += 1;
        let holder = self.holder;
        self.flight.push(Packet::ToB {
            holder,
            seq,
            payload,
        });
    }

    fn deliver(&mut self, i: usize, drop: bool, dup: bool) {
        let p = if dup {
            self.flight[i]
        } else {
            self.flight.remove(i)
        };
        if drop {
            return;
        }
        match p {
            Packet::ToB {
                holder,
                seq,
                payload,
            } => match self.b.received(A, holder, seq) {
                Verdict::Deliver => {
                    if payload >= SECOND && self.cut.is_none() {
                        self.cut = Some(self.at_b.len());
                    }
                    self.at_b.push(payload);
                    self.flight.push(Packet::AckToA { holder, seq });
                }
                Verdict::Duplicate => self.flight.push(Packet::AckToA { holder, seq }),
                Verdict::Stale => {}
            },
            Packet::AckToA { holder, seq } if holder == self.holder => self.a.acked(B, seq),
            Packet::AckToA { .. } => {}
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        for (_, seq, _, payload) in self.a.tick(self.now) {
            let holder = self.holder;
            self.flight.push(Packet::ToB {
                holder,
                seq,
                payload,
            });
        }
    }

    /// A's first holder dies; its replacement starts a book of its own.
    fn replace(&mut self) {
        if self.holder == 0 {
            self.a = ResendBook::new(self.timeout);
            self.holder = 1;
            self.next = SECOND;
        }
    }

    /// B hears of the takeover.
    fn tell(&mut self) {
        if self.holder == 1 && !self.told {
            self.b.replaced(A, 1);
            self.told = true;
            self.cut.get_or_insert(self.at_b.len());
        }
    }

    /// The network heals: everything in flight arrives, A's replacement resends until all is
    /// acknowledged (at most `rounds` timeouts).
    fn heal(&mut self, rounds: u32) {
        for _ in 0..rounds {
            while !self.flight.is_empty() {
                self.deliver(0, false, false);
            }
            if self.a.unacked() == 0 {
                break;
            }
            self.advance(self.timeout);
        }
    }
}

/// The payloads `got`, sorted.
fn sorted(got: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = got.collect();
    v.sort_unstable();
    v
}

proptest! {
    #[test]
    fn a_replacements_messages_are_delivered_once_and_its_predecessors_not_after_them(
        n in (0u32..20, 1u32..20),
        steps in proptest::collection::vec((0u8..7, any::<usize>(), any::<bool>(), any::<bool>(), 0u64..30), 0..300),
        timeout_ms in 1u64..20,
    ) {
        let mut net = Net::new(Duration::from_millis(timeout_ms));
        for (what, pick, drop, dup, ms) in steps {
            match what {
                0 if net.next % SECOND < n.0 => net.a_sends(),
                1 | 2 if !net.flight.is_empty() => {
                    let i = pick % net.flight.len();
                    net.deliver(i, drop && what == 1, dup);
                }
                3 => net.replace(),
                4 => net.tell(),
                _ => net.advance(Duration::from_millis(ms)),
            }
        }
        net.replace();
        net.tell();
        while net.next < SECOND + n.1 {
            net.a_sends();
        }
        net.heal(4 * n.1 + 10);
        prop_assert_eq!(net.a.unacked(), 0, "the replacement's messages acknowledged");
        let want: Vec<u32> = (SECOND..net.next).collect();
        prop_assert_eq!(sorted(net.at_b.iter().copied().filter(|&p| p >= SECOND)), want, "each of the replacement's once: {:?}", net.at_b);
        let cut = net.cut.unwrap_or(net.at_b.len());
        prop_assert!(net.at_b[cut..].iter().all(|&p| p >= SECOND), "the first holder's after the replacement's: {:?}", net.at_b);
        let mut first = sorted(net.at_b.iter().copied().filter(|&p| p < SECOND));
        first.dedup();
        prop_assert_eq!(first.len(), net.at_b.len() - (net.next - SECOND) as usize, "the first holder's at most once: {:?}", net.at_b);
    }
}

#[test]
fn a_later_holder_starts_its_numbers_afresh_and_an_earlier_one_is_stale_after_it() {
    let mut book: ResendBook<()> = ResendBook::new(Duration::from_secs(1));
    assert_eq!(book.received(A, 0, 0), Verdict::Deliver);
    assert_eq!(
        book.received(A, 1, 0),
        Verdict::Deliver,
        "the replacement's first"
    );
    assert_eq!(book.received(A, 0, 1), Verdict::Stale);
    book.replaced(A, 1);
    assert_eq!(
        book.received(A, 1, 0),
        Verdict::Duplicate,
        "the word of the takeover keeps what the replacement sent"
    );
    book.replaced(A, 2);
    assert_eq!(book.received(A, 2, 0), Verdict::Deliver);
}

#[test]
fn told_again_of_the_same_holder_the_book_keeps_numbering_for_it() {
    let t0 = Instant::now();
    let mut book: ResendBook<u32> = ResendBook::new(Duration::from_secs(1));
    let seq = book.next_seq(A);
    book.sent(A, seq, 1, t0);
    assert_eq!(book.replaced(A, 1), vec![1], "the first holder's copy");
    let seq = book.next_seq(A);
    book.sent(A, seq, 2, t0);
    assert!(book.replaced(A, 1).is_empty(), "the same holder again");
    assert_eq!(book.next_seq(A), 1, "numbering for holder 1 goes on");
    assert_eq!(book.unacked(), 1);
}
