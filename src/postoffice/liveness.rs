//! The scheduler's liveness book: when each node was last heard of, and which nodes are lost
//! (silent for longer than `PS_HEARTBEAT_TIMEOUT`; ps-lite's `Postoffice::GetDeadNodes`).
//! Sans-IO: the caller passes the time in. A lost node stays lost until a replacement takes its
//! place ([`Liveness::revive`]).

use crate::wire::NodeId;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Last heartbeat per node, and the nodes declared lost.
#[derive(Default, Debug)]
pub struct Liveness {
    last_seen: HashMap<NodeId, Instant>,
    lost: BTreeSet<NodeId>,
    /// Heartbeats counted as missed since each node was last heard of ([`Liveness::missed`]).
    missed: HashMap<NodeId, u64>,
}

impl Liveness {
    /// Node `id` was heard of at `now` (it registered, or a heartbeat came).
    pub fn seen(&mut self, id: NodeId, now: Instant) {
        self.last_seen.insert(id, now);
        self.missed.remove(&id);
    }

    /// Heartbeats newly missed by each node not lost, in id order (none listed when 0): a node
    /// silent for `s` has missed `floor(s / interval) - 1` heartbeats (one interval is slack),
    /// of which those not returned by an earlier call since it was last heard of are returned.
    pub fn missed(&mut self, now: Instant, interval: Duration) -> Vec<(NodeId, u64)> {
        let mut out = Vec::new();
        for (&id, &t) in &self.last_seen {
            if self.lost.contains(&id) || interval.is_zero() {
                continue;
            }
            let beats = (now.saturating_duration_since(t).as_nanos() / interval.as_nanos()) as u64;
            let due = beats.saturating_sub(1);
            let counted = self.missed.entry(id).or_default();
            if due > *counted {
                out.push((id, due - *counted));
                *counted = due;
            }
        }
        out.sort_unstable();
        out
    }

    /// How long ago each node was last heard of, in id order, with whether it is lost.
    pub fn ages(&self, now: Instant) -> Vec<(NodeId, Duration, bool)> {
        let mut v: Vec<_> = self
            .last_seen
            .iter()
            .map(|(&id, &t)| {
                (
                    id,
                    now.saturating_duration_since(t),
                    self.lost.contains(&id),
                )
            })
            .collect();
        v.sort_unstable_by_key(|&(id, _, _)| id);
        v
    }

    /// Declares lost every node last heard of more than `timeout` before `now`; returns the
    /// nodes newly declared, in id order, each with how long it had been silent.
    pub fn check(&mut self, now: Instant, timeout: Duration) -> Vec<(NodeId, Duration)> {
        let mut newly: Vec<(NodeId, Duration)> = self
            .last_seen
            .iter()
            .map(|(&id, &t)| (id, now.duration_since(t)))
            .filter(|&(id, silent)| silent > timeout && !self.lost.contains(&id))
            .collect();
        newly.sort_unstable();
        self.lost.extend(newly.iter().map(|&(id, _)| id));
        newly
    }

    /// This process was paused (the clock jumped): every node not lost counts as heard of at
    /// `now`, since their heartbeats may be waiting unread.
    pub fn excuse_pause(&mut self, now: Instant) {
        for (id, t) in self.last_seen.iter_mut() {
            if !self.lost.contains(id) {
                *t = now;
            }
        }
    }

    /// A replacement took lost node `id`'s place at `now`: it is alive again.
    pub fn revive(&mut self, id: NodeId, now: Instant) {
        self.lost.remove(&id);
        self.last_seen.insert(id, now);
    }

    /// The nodes declared lost so far.
    pub fn lost(&self) -> &BTreeSet<NodeId> {
        &self.lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Over any sequence of checks while a node stays silent, the heartbeats reported
        /// missed add up to `floor(silence / interval) - 1` at the last check, each counted once.
        #[test]
        fn missed_heartbeats_add_up_once(
            steps in proptest::collection::vec(0u64..2500, 1..30),
            interval_ms in 100u64..1000,
        ) {
            let t0 = Instant::now();
            let interval = Duration::from_millis(interval_ms);
            let mut live = Liveness::default();
            live.seen(9, t0);
            let (mut now_ms, mut total) = (0u64, 0u64);
            for step in steps {
                now_ms += step;
                for (id, n) in live.missed(t0 + Duration::from_millis(now_ms), interval) {
                    prop_assert_eq!(id, 9);
                    prop_assert!(n > 0);
                    total += n;
                }
            }
            prop_assert_eq!(total, (now_ms / interval_ms).saturating_sub(1));
            // Heard of again: nothing more is missed for a whole interval.
            let back = t0 + Duration::from_millis(now_ms);
            live.seen(9, back);
            prop_assert!(live.missed(back + interval, interval).is_empty());
        }

        /// Against a model: a node is declared lost once, at the first check more than
        /// `timeout` after its last heartbeat before that check, and never while it is heard of.
        #[test]
        fn lost_exactly_when_silent_past_the_timeout(
            events in proptest::collection::vec((0u8..3, 0i32..4, 0u64..40), 1..60),
            timeout_ms in 1u64..20,
        ) {
            let t0 = Instant::now();
            let timeout = Duration::from_millis(timeout_ms);
            let mut live = Liveness::default();
            let mut last: HashMap<NodeId, u64> = HashMap::new();
            let mut declared: BTreeSet<NodeId> = BTreeSet::new();
            let mut now_ms = 0u64;
            for (kind, id, step) in events {
                now_ms += step;
                let now = t0 + Duration::from_millis(now_ms);
                if kind == 0 {
                    let mut want: Vec<(NodeId, Duration)> = last
                        .iter()
                        .filter(|(id, &t)| now_ms - t > timeout_ms && !declared.contains(id))
                        .map(|(&id, &t)| (id, Duration::from_millis(now_ms - t)))
                        .collect();
                    want.sort_unstable();
                    prop_assert_eq!(live.check(now, timeout), want.clone());
                    declared.extend(want.iter().map(|&(id, _)| id));
                    prop_assert_eq!(live.lost(), &declared);
                } else {
                    live.seen(id, now);
                    last.insert(id, now_ms);
                }
            }
        }
    }

    #[test]
    fn a_node_heard_within_the_timeout_is_not_lost() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut live = Liveness::default();
        live.seen(9, t0);
        live.seen(8, t0);
        live.seen(9, t0 + 9 * s);
        assert_eq!(live.check(t0 + 10 * s, 5 * s), vec![(8, 10 * s)]);
        assert_eq!(live.check(t0 + 11 * s, 5 * s), vec![], "once");
        assert_eq!(live.check(t0 + 15 * s, 5 * s), vec![(9, 6 * s)]);
        assert_eq!(live.lost().iter().copied().collect::<Vec<_>>(), vec![8, 9]);
    }
}
