//! Which keys one key-value server serves while the servers' key layout changes (elastic
//! servers, [`crate::postoffice::ranges`]): the layout it acts on, the ranges moved to it whose
//! rows have not arrived, rows that arrived before the layout that sends them, and ranges
//! whose rows could not move. Sans-IO: a key-value server's customer thread
//! (`kv::server::moving`) asks it for a verdict on each request and tells it of layouts and
//! handoffs.
//!
//! A request's verdict, for its keys (sorted) and the layout epoch the worker sliced it by:
//! - every key is this server's: served, unless one is in a range whose rows have not
//!   arrived (**not yet**: the worker sends it again shortly);
//! - a key is another server's and the worker sliced by an older layout: **moved** (the
//!   worker slices the part again by this server's epoch or later and sends it on); the
//!   worker's layout is newer than this server's: **not yet**; same epoch: refused, the
//!   worker's slicing is wrong.
//!
//! A range's old owner exports its rows when it adopts the layout that moves it, on the
//! customer thread between two requests: what it applied before is in the rows it hands off,
//! what arrives after is answered "moved". The new owner answers "not yet" until the rows are
//! imported. So each part is applied once, by one owner.
//!
//! With checkpoints ([`Holding::until_settled`]) the new owner serves a range only once the
//! layout settled (every new owner holds its rows): until then a replacement of it, restored
//! from the snapshot taken at the import, may take the rows again without losing a push.

use super::layout::{Layout, Move};
use crate::postoffice::Range;
use crate::wire::{KeyLayout, Node, NodeId};
use std::sync::Arc;

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Apply and answer it.
    Serve,
    /// Answer "moved": the keys are placed elsewhere from this epoch on.
    Moved {
        /// This server's layout epoch.
        epoch: u64,
    },
    /// Answer "not yet": send it again shortly.
    NotYet,
    /// Refuse it with this text.
    Refuse(String),
}

/// Rows that arrived for the layout after this server's, not adopted yet.
struct Early {
    epoch: u64,
    range: Range,
    from: NodeId,
    rows: Result<bytes::Bytes, String>,
}

/// How many handoffs are kept for layouts not adopted yet. One range moves to a server per
/// layout, and a layout starts only once the one before settled, so one handoff at most is
/// ahead of its layout; more come only from a confused or hostile peer.
const MAX_EARLY: usize = 2;

/// One key-value server's view of the layout.
pub struct Holding {
    me: NodeId,
    layout: Arc<Layout>,
    /// Ranges moved here whose rows have not arrived: their layout's epoch, the range, the
    /// old owner.
    awaiting: Vec<(u64, Range, NodeId)>,
    early: Vec<Early>,
    /// Ranges whose rows could not move, and why.
    failed: Vec<(Range, String)>,
    /// With checkpoints: ranges imported whose layout has not settled (their epoch), served
    /// once it has; `None`: served once imported.
    settling: Option<Vec<(u64, Range)>>,
    /// The last epoch known settled.
    settled: u64,
}

impl Holding {
    /// Server `me` acting on `layout`.
    pub fn new(me: NodeId, layout: Arc<Layout>) -> Holding {
        Holding {
            me,
            layout,
            awaiting: Vec::new(),
            early: Vec::new(),
            failed: Vec::new(),
            settling: None,
            settled: 0,
        }
    }

    /// As [`new`](Self::new), serving a range moved here only once its layout settled
    /// ([`settled`](Self::settled)), not at its import (a server with checkpoints).
    pub fn until_settled(me: NodeId, layout: Arc<Layout>) -> Holding {
        Holding {
            settling: Some(Vec::new()),
            ..Holding::new(me, layout)
        }
    }

    /// The last epoch known settled ([`settled`](Self::settled)).
    pub fn settled_through(&self) -> u64 {
        self.settled
    }

    /// Layout `epoch` settled: the ranges imported for it (or before) are served. So are the
    /// ranges still awaited for it: every new owner reported its rows, so this server is a
    /// replacement of one that took them (and snapshotted them first, with a checkpoint), and
    /// the old owner hands them over no more.
    pub fn settled(&mut self, epoch: u64) {
        self.settled = self.settled.max(epoch);
        self.awaiting.retain(|&(e, _, _)| e > epoch);
        if let Some(s) = &mut self.settling {
            s.retain(|&(e, _)| e > epoch);
        }
    }

    /// The epoch this server acts on.
    pub fn epoch(&self) -> u64 {
        self.layout.epoch()
    }

    /// The verdict on a request for `keys` (sorted) sliced by layout `epoch` (`None`: sliced
    /// by this server's).
    pub fn verdict(&self, keys: &[u64], epoch: Option<u64>) -> Verdict {
        let (Some(&first), Some(&last)) = (keys.first(), keys.last()) else {
            return Verdict::Serve;
        };
        let mine = self.layout.part_of(self.me);
        let overlaps =
            |r: &Range| r.holds(first) || r.holds(last) || (first < r.begin && r.begin <= last);
        if mine.is_some_and(|p| p.holds(first) && p.holds(last)) {
            let settling = self.settling.iter().flatten().map(|(_, r)| r);
            if self
                .awaiting
                .iter()
                .map(|(_, r, _)| r)
                .chain(settling)
                .any(overlaps)
            {
                return Verdict::NotYet;
            }
            return match self.failed.iter().find(|(r, _)| overlaps(r)) {
                Some((_, why)) => Verdict::Refuse(why.clone()),
                None => Verdict::Serve,
            };
        }
        let here = self.epoch();
        match epoch.unwrap_or(here) {
            e if e < here => Verdict::Moved { epoch: here },
            e if e > here => Verdict::NotYet,
            _ => {
                let outside = if mine.is_some_and(|p| p.holds(first)) {
                    last
                } else {
                    first
                };
                let me = Node::describe(self.me);
                Verdict::Refuse(match mine {
                    Some(p) => format!(
                        "key {outside} is outside the range of {me} [{}, {}) at key layout \
                         {here}: requests are sliced by key range",
                        p.begin, p.end
                    ),
                    None => format!(
                        "key {outside} is outside the range of {me}: it holds no keys at key \
                         layout {here}"
                    ),
                })
            }
        }
    }

    /// Adopts `wire` (a newer layout; `None` for an older or malformed one). Returns the moves
    /// out of this server, whose rows to export and hand off now, and the rows that arrived
    /// early for the moves into it, to import now.
    pub fn adopt(&mut self, wire: &KeyLayout) -> Option<Adopted> {
        let (layout, plan) = Layout::from_wire(wire).ok()?;
        if layout.epoch() <= self.epoch() {
            return None;
        }
        self.layout = Arc::new(layout);
        let out = plan
            .moves
            .iter()
            .filter(|m| m.from == self.me)
            .copied()
            .collect();
        let mut arrived = Vec::new();
        let me = self.me;
        for m in plan.moves.iter().filter(|m| m.to == me) {
            match self
                .early
                .iter()
                .position(|e| e.epoch == plan.epoch && e.range == m.range && e.from == m.from)
            {
                Some(i) => {
                    let e = self.early.remove(i);
                    self.hold(plan.epoch, e.range);
                    arrived.push((e.range, e.rows));
                }
                None => self.awaiting.push((plan.epoch, m.range, m.from)),
            }
        }
        self.early.retain(|e| e.epoch > plan.epoch);
        // A range that moves again is no longer this server's concern.
        self.failed.retain(|(r, _)| {
            !plan
                .moves
                .iter()
                .any(|m| m.range == *r && m.from == self.me)
        });
        Some(Adopted { out, arrived })
    }

    /// A handoff of `range`'s rows for layout `epoch` arrived from server `from`. Returns them
    /// to import now, or `None` when kept until that layout is adopted ([`MAX_EARLY`] at
    /// most) or dropped: a layout already passed, a range not awaited, or another server than
    /// the range's old owner.
    pub fn handoff(
        &mut self,
        (epoch, range, from): (u64, Range, NodeId),
        rows: Result<bytes::Bytes, String>,
    ) -> Option<Result<bytes::Bytes, String>> {
        if epoch > self.epoch() {
            if self.early.len() < MAX_EARLY {
                self.early.push(Early {
                    epoch,
                    range,
                    from,
                    rows,
                });
            }
            return None;
        }
        let i = self
            .awaiting
            .iter()
            .position(|&(e, r, f)| e == epoch && r == range && f == from)?;
        self.awaiting.remove(i);
        self.hold(epoch, range);
        Some(rows)
    }

    /// `range`'s rows arrived for layout `epoch`: with checkpoints, held until it settles.
    fn hold(&mut self, epoch: u64, range: Range) {
        match &mut self.settling {
            Some(s) if epoch > self.settled => s.push((epoch, range)),
            _ => {}
        }
    }

    /// The rows of `range` could not be imported: requests for it are refused with `why`.
    pub fn failed(&mut self, range: Range, why: String) {
        self.failed.push((range, why));
    }

    /// The rows of `range` were imported: it is served again if it had failed before.
    pub fn imported(&mut self, range: Range) {
        self.failed.retain(|(r, _)| *r != range);
    }
}

/// What adopting a layout asks of the server.
pub struct Adopted {
    /// Moves out of this server: export and hand off.
    pub out: Vec<Move>,
    /// Rows that arrived early: import.
    pub arrived: Vec<(Range, Result<bytes::Bytes, String>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(layout: &Layout, plan: &super::super::layout::Plan) -> KeyLayout {
        layout.to_wire(plan, None)
    }

    #[test]
    fn verdicts_through_a_drain() {
        let l0 = Arc::new(Layout::even(&[8, 10, 12]));
        let plan = l0.plan_drain(12).expect("drains");
        let l1 = l0.apply(&plan).expect("applies");
        let moved = plan.moves[0].range;
        let (a, z) = (moved.begin, moved.begin + 5);
        let mut old = Holding::new(12, l0.clone());
        let mut new = Holding::new(10, l0.clone());
        assert_eq!(old.verdict(&[a, z], Some(0)), Verdict::Serve);
        // The worker learned the layout before the new owner: not yet.
        assert_eq!(new.verdict(&[a, z], Some(1)), Verdict::NotYet);
        let out = old.adopt(&wire(&l1, &plan)).expect("newer");
        assert_eq!(out.out, plan.moves);
        assert_eq!(old.verdict(&[a, z], Some(0)), Verdict::Moved { epoch: 1 });
        assert_eq!(old.verdict(&[a, z], Some(2)), Verdict::NotYet);
        let refused = old.verdict(&[a, z], Some(1));
        assert!(
            matches!(&refused, Verdict::Refuse(t) if t.contains("holds no keys at key layout 1")),
            "{refused:?}"
        );
        // Rows before the layout: kept, imported when it is adopted.
        assert!(new
            .handoff((1, moved, 12), Ok(bytes::Bytes::from_static(b"rows")))
            .is_none());
        let adopted = new.adopt(&wire(&l1, &plan)).expect("newer");
        assert!(adopted.out.is_empty());
        assert_eq!(adopted.arrived.len(), 1);
        assert_eq!(new.verdict(&[a, z], Some(1)), Verdict::Serve);
        assert!(new.adopt(&wire(&l1, &plan)).is_none(), "adopted once");
    }

    #[test]
    fn with_checkpoints_the_new_owner_serves_a_range_once_its_layout_settled() {
        let l0 = Arc::new(Layout::even(&[8, 10]));
        let plan = l0.plan_add(12).expect("adds");
        let l1 = l0.apply(&plan).expect("applies");
        let r = plan.moves[0].range;
        let mut new = Holding::until_settled(12, l0);
        new.adopt(&wire(&l1, &plan)).expect("newer");
        assert!(new.handoff((1, r, 10), Ok(bytes::Bytes::new())).is_some());
        assert_eq!(
            new.verdict(&[r.begin], Some(1)),
            Verdict::NotYet,
            "imported"
        );
        new.settled(0);
        assert_eq!(new.verdict(&[r.begin], Some(1)), Verdict::NotYet);
        new.settled(1);
        assert_eq!(new.verdict(&[r.begin, r.end - 1], Some(1)), Verdict::Serve);
        // A replacement of the new owner awaiting rows its predecessor took (and snapshotted)
        // serves them once the layout settled, and takes no handoff for them any more.
        let mut again = Holding::until_settled(12, Arc::new(Layout::even(&[8, 10])));
        again.adopt(&wire(&l1, &plan)).expect("newer");
        assert_eq!(again.verdict(&[r.begin], Some(1)), Verdict::NotYet);
        again.settled(1);
        assert_eq!(again.verdict(&[r.begin], Some(1)), Verdict::Serve);
        assert!(again.handoff((1, r, 10), Ok(bytes::Bytes::new())).is_none());
    }

    #[test]
    fn the_new_owner_says_not_yet_until_the_rows_arrive() {
        let l0 = Arc::new(Layout::even(&[8, 10]));
        let plan = l0.plan_add(12).expect("adds");
        let l1 = l0.apply(&plan).expect("applies");
        let r = plan.moves[0].range;
        let mut new = Holding::new(12, l0);
        assert!(matches!(
            new.verdict(&[r.begin], Some(0)),
            Verdict::Refuse(_)
        ));
        new.adopt(&wire(&l1, &plan)).expect("newer");
        assert_eq!(new.verdict(&[r.begin, r.end - 1], Some(1)), Verdict::NotYet);
        assert_eq!(new.verdict(&[r.begin], Some(0)), Verdict::NotYet);
        assert!(
            new.handoff((1, r, 8), Ok(bytes::Bytes::new())).is_none(),
            "only the old owner hands the rows over"
        );
        assert_eq!(new.verdict(&[r.begin], Some(1)), Verdict::NotYet);
        assert!(new.handoff((1, r, 10), Ok(bytes::Bytes::new())).is_some());
        assert_eq!(new.verdict(&[r.begin, r.end - 1], Some(1)), Verdict::Serve);
        assert!(
            new.handoff((1, r, 10), Ok(bytes::Bytes::new())).is_none(),
            "taken once"
        );
        new.failed(r, "no rows".into());
        assert_eq!(
            new.verdict(&[r.begin], Some(1)),
            Verdict::Refuse("no rows".into())
        );
        new.imported(r);
        assert_eq!(
            new.verdict(&[r.begin], Some(1)),
            Verdict::Serve,
            "rows that came back"
        );
    }
}
