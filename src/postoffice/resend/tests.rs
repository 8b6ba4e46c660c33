//! The resend book against a lossy network: drops, duplicates and reordering of data messages
//! and ACKs; each message is delivered exactly once and the books end empty.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

const A: NodeId = 9; // the sender (a worker)
const B: NodeId = 8; // the receiver (a server)

#[derive(Clone, Debug)]
enum Packet {
    Data { seq: u64, payload: u32 },
    Ack { seq: u64 },
}

/// Two books and the packets between them.
struct Net {
    a: ResendBook<u32>,
    b: ResendBook<u32>,
    flight: Vec<Packet>,
    delivered: HashMap<u32, u32>,
    now: Instant,
}

impl Net {
    fn new(timeout: Duration) -> Net {
        Net {
            a: ResendBook::new(timeout),
            b: ResendBook::new(timeout),
            flight: Vec::new(),
            delivered: HashMap::new(),
            now: Instant::now(),
        }
    }

    fn send(&mut self, payload: u32) {
        let seq = self.a.next_seq(B);
        self.a.sent(B, seq, payload, self.now);
        self.flight.push(Packet::Data { seq, payload });
    }

    /// Takes packet `i` off the wire and hands it over (unless `drop`), leaving a copy behind
    /// when `dup`.
    fn deliver(&mut self, i: usize, drop: bool, dup: bool) {
        let p = if dup {
            self.flight[i].clone()
        } else {
            self.flight.remove(i)
        };
        if drop {
            return;
        }
        match p {
            Packet::Data { seq, payload } => {
                if self.b.received(A, 0, seq) == Verdict::Deliver {
                    *self.delivered.entry(payload).or_default() += 1;
                }
                self.flight.push(Packet::Ack { seq });
            }
            Packet::Ack { seq } => self.a.acked(B, seq),
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        for (to, seq, _, payload) in self.a.tick(self.now) {
            assert_eq!(to, B);
            self.flight.push(Packet::Data { seq, payload });
        }
    }
}

proptest! {
    #[test]
    fn every_message_is_delivered_exactly_once_whatever_the_network_does(
        n in 1u32..40,
        steps in proptest::collection::vec((0u8..4, any::<usize>(), any::<bool>(), any::<bool>(), 0u64..30), 0..300),
        timeout_ms in 1u64..20,
    ) {
        let timeout = Duration::from_millis(timeout_ms);
        let mut net = Net::new(timeout);
        let mut next = 0u32;
        for (what, pick, drop, dup, ms) in steps {
            match what {
                0 if next < n => {
                    net.send(next);
                    next += 1;
                }
                1 | 2 if !net.flight.is_empty() => {
                    let i = pick % net.flight.len();
                    net.deliver(i, drop && what == 1, dup);
                }
                _ => net.advance(Duration::from_millis(ms)),
            }
            prop_assert!(net.delivered.values().all(|&c| c == 1), "a message delivered twice");
        }
        while next < n {
            net.send(next);
            next += 1;
        }
        // The network heals: everything in flight arrives, resends go out until all is acked.
        for _ in 0..(4 * n + 10) {
            while !net.flight.is_empty() {
                net.deliver(0, false, false);
            }
            if net.a.unacked() == 0 {
                break;
            }
            net.advance(timeout);
        }
        prop_assert_eq!(net.a.unacked(), 0, "every message acknowledged");
        prop_assert_eq!(net.delivered.len() as u32, n, "every message delivered");
        prop_assert!(net.delivered.values().all(|&c| c == 1));
        prop_assert_eq!(net.b.kept_above(), 0, "the receiver keeps nothing above its watermark");
    }
}

#[test]
fn an_unacknowledged_message_is_resent_once_per_timeout_until_acked() {
    let t = Duration::from_millis(10);
    let mut book: ResendBook<&str> = ResendBook::new(t);
    let t0 = Instant::now();
    let seq = book.next_seq(B);
    assert_eq!((seq, book.next_seq(B), book.next_seq(10)), (0, 1, 0));
    book.sent(B, seq, "push", t0);
    assert!(book.tick(t0 + t / 2).is_empty());
    assert_eq!(book.tick(t0 + t), vec![(B, 0, 0, "push")]);
    assert!(
        book.tick(t0 + t + t / 2).is_empty(),
        "not again before another timeout"
    );
    assert_eq!(book.tick(t0 + 2 * t), vec![(B, 0, 1, "push")]);
    assert_eq!(book.counts(), (2, 0), "two resends counted");
    book.acked(B, 0);
    book.acked(B, 0);
    assert!(book.tick(t0 + 10 * t).is_empty());
    assert_eq!(book.unacked(), 0);
}

#[test]
fn each_message_is_resent_when_its_own_timeout_passes() {
    // tick skips its scan until the earliest due time: that bound must be the earliest.
    let t = Duration::from_millis(10);
    let mut book: ResendBook<u32> = ResendBook::new(t);
    let t0 = Instant::now();
    for (i, at) in [(1, t0), (2, t0 + t / 2), (3, t0 + t / 4)] {
        let seq = book.next_seq(B);
        book.sent(B, seq, i, at);
    }
    assert!(book.tick(t0 + t - Duration::from_millis(1)).is_empty());
    assert_eq!(book.tick(t0 + t), vec![(B, 0, 0, 1)]);
    assert_eq!(book.tick(t0 + t + t / 4), vec![(B, 2, 0, 3)]);
    book.acked(B, 1);
    assert!(
        book.tick(t0 + t + t / 2).is_empty(),
        "acknowledged meanwhile"
    );
    assert_eq!(book.tick(t0 + 2 * t), vec![(B, 0, 1, 1)]);
}

#[test]
fn duplicates_are_dropped_and_the_receivers_memory_stays_bounded() {
    let mut book: ResendBook<()> = ResendBook::new(Duration::from_secs(1));
    assert_eq!(book.received(A, 0, 1), Verdict::Deliver);
    assert_eq!(book.kept_above(), 1, "1 overtook 0");
    assert_eq!(book.received(A, 0, 1), Verdict::Duplicate);
    assert_eq!(book.received(A, 0, 0), Verdict::Deliver);
    assert_eq!(book.kept_above(), 0, "the watermark moved past both");
    assert_eq!(book.received(A, 0, 0), Verdict::Duplicate);
    assert_eq!(book.counts(), (0, 2), "two duplicates counted");
    assert_eq!(book.received(11, 0, 0), Verdict::Deliver, "per sender");
    // Message 2 never comes: the window caps what is kept.
    for seq in 3..(3 + WINDOW as u64 + 10) {
        assert_eq!(book.received(A, 0, seq), Verdict::Deliver);
    }
    assert!(book.kept_above() <= WINDOW, "{}", book.kept_above());
}

#[test]
fn forgetting_a_lost_peer_hands_back_its_unacknowledged_messages() {
    let t0 = Instant::now();
    let mut book: ResendBook<u32> = ResendBook::new(Duration::from_millis(5));
    for (to, m) in [(B, 1), (10, 2), (B, 3)] {
        let seq = book.next_seq(to);
        book.sent(to, seq, m, t0);
    }
    let mut lost = book.forget(B);
    lost.sort_unstable();
    assert_eq!(lost, vec![1, 3]);
    assert_eq!(book.unacked(), 1);
    assert_eq!(book.next_seq(B), 0, "a new start for the peer");
}
