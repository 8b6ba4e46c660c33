//! The scheduler's side of elastic servers: the key layout, one resize at a time, and when its
//! rows have all arrived. Sans-IO: requests and reports in, the layout to broadcast out, time
//! passed in.

use super::layout::{Layout, Plan};
use crate::wire::{KeyLayout, Node, NodeId};
use std::time::Instant;

/// A resize whose rows are moving.
struct Moving {
    plan: Plan,
    started: Instant,
    /// The new owners that have not reported their rows.
    awaiting: Vec<NodeId>,
    bytes: u64,
    /// Why rows could not move, as the new owners reported.
    failed: Vec<String>,
    /// The node that asked.
    asked_by: NodeId,
}

/// The layout the scheduler holds and the resize in progress.
pub struct Coordinator {
    layout: Layout,
    moving: Option<Moving>,
    /// The last layout that settled, as broadcast (figures, who asked, failures).
    settled: Option<KeyLayout>,
}

impl Coordinator {
    /// Starting from `layout` (epoch 0: [`Layout::start`]).
    pub fn new(layout: Layout) -> Coordinator {
        Coordinator {
            layout,
            moving: None,
            settled: None,
        }
    }

    /// The current layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Server `server` to get a share of the keys (`add`) or to give all of its keys away,
    /// asked by node `by` at `now`. Returns the layout to broadcast (its moves to make).
    ///
    /// # Errors
    /// A text naming why not: a resize in progress, or as [`Layout::plan_add`] and
    /// [`Layout::plan_drain`].
    pub fn resize(
        &mut self,
        (server, add): (NodeId, bool),
        by: NodeId,
        now: Instant,
    ) -> Result<KeyLayout, String> {
        if let Some(m) = &self.moving {
            return Err(format!(
                "the keys are moving to layout {} already (waiting for {}); ask again when it \
                 settles",
                m.plan.epoch,
                describe_all(&m.awaiting)
            ));
        }
        let plan = if add {
            self.layout.plan_add(server)?
        } else {
            self.layout.plan_drain(server)?
        };
        self.layout = self.layout.apply(&plan)?;
        let mut awaiting: Vec<NodeId> = plan.moves.iter().map(|m| m.to).collect();
        awaiting.sort_unstable();
        awaiting.dedup();
        let mut wire = self.layout.to_wire(&plan, None);
        wire.asked_by = by;
        self.moving = Some(Moving {
            plan,
            started: now,
            awaiting,
            bytes: 0,
            failed: Vec::new(),
            asked_by: by,
        });
        Ok(wire)
    }

    /// Server `from` holds the rows moved to it for layout `epoch` (`bytes` of them; `failed`:
    /// why some could not move), at `now`. Returns the settled layout to broadcast once it was
    /// the last new owner.
    pub fn arrived(
        &mut self,
        (from, epoch): (NodeId, u64),
        (bytes, failed): (u64, Vec<String>),
        now: Instant,
    ) -> Option<KeyLayout> {
        let m = self.moving.as_mut().filter(|m| m.plan.epoch == epoch)?;
        let at = m.awaiting.iter().position(|&a| a == from)?;
        m.awaiting.remove(at);
        m.bytes += bytes;
        m.failed.extend(failed);
        if !m.awaiting.is_empty() {
            return None;
        }
        let m = self.moving.take()?;
        let micros = now.saturating_duration_since(m.started).as_micros() as u64;
        let mut wire = self.layout.to_wire(&m.plan, Some((m.bytes, micros)));
        (wire.failed, wire.asked_by) = (m.failed, m.asked_by);
        self.settled = Some(wire.clone());
        Some(wire)
    }

    /// A scheduler that took the job over learns the layout from a node's re-registration
    /// (`wire`, at `now`): the newest epoch wins, its moves awaited unless a node heard it
    /// settle (the new owners that reported to the silent scheduler report again).
    pub fn learn(&mut self, wire: &KeyLayout, now: Instant) {
        let Ok((layout, plan)) = Layout::from_wire(wire) else {
            return;
        };
        if wire.settled.is_some() && layout.epoch() >= self.layout.epoch() {
            self.settled = Some(wire.clone());
        }
        if layout.epoch() > self.layout.epoch() {
            let mut awaiting: Vec<NodeId> = plan.moves.iter().map(|m| m.to).collect();
            awaiting.sort_unstable();
            awaiting.dedup();
            self.layout = layout;
            self.moving = wire.settled.is_none().then(|| Moving {
                plan,
                started: now,
                awaiting,
                bytes: 0,
                failed: Vec::new(),
                asked_by: wire.asked_by,
            });
        } else if layout.epoch() == self.layout.epoch() && wire.settled.is_some() {
            self.moving = None;
        }
    }

    /// The current layout as a node learning it now is sent it: with its moves while they
    /// are not settled; otherwise settled, without its moves (nothing to export or await), with
    /// the figures, asker and failures of its settling when this scheduler knows them.
    pub fn current(&self) -> KeyLayout {
        match &self.moving {
            Some(m) => {
                let mut wire = self.layout.to_wire(&m.plan, None);
                wire.asked_by = m.asked_by;
                wire
            }
            None => {
                let plan = Plan {
                    epoch: self.layout.epoch(),
                    moves: Vec::new(),
                };
                let mut wire = self.layout.to_wire(&plan, Some((0, 0)));
                if let Some(s) = self.settled.as_ref().filter(|s| s.epoch == wire.epoch) {
                    (wire.settled, wire.asked_by) = (s.settled, s.asked_by);
                    wire.failed.clone_from(&s.failed);
                }
                wire
            }
        }
    }

    /// The epoch whose rows are moving, if any.
    pub fn moving(&self) -> Option<u64> {
        self.moving.as_ref().map(|m| m.plan.epoch)
    }
}

fn describe_all(ids: &[NodeId]) -> String {
    ids.iter()
        .map(|&id| Node::describe(id))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_resize_at_a_time_settles_when_every_new_owner_reported() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(Layout::start(3));
        let drain = c.resize((12, false), 9, t0).expect("drains");
        assert_eq!(drain.epoch, 1);
        assert_eq!(drain.moves.len(), 1);
        assert_eq!(drain.moves[0].to, 10);
        assert_eq!(drain.parts.len(), 2);
        let busy = c.resize((12, true), 9, t0).expect_err("one at a time");
        assert!(busy.contains("moving to layout 1"), "{busy}");
        assert!(
            c.arrived((8, 1), (5, vec![]), t0).is_none(),
            "8 receives nothing"
        );
        assert!(
            c.arrived((10, 0), (5, vec![]), t0).is_none(),
            "another epoch"
        );
        let settled = c
            .arrived((10, 1), (40, vec![]), t0 + Duration::from_millis(30))
            .expect("the last new owner");
        assert_eq!(settled.settled, Some((40, 30_000)));
        assert_eq!(c.moving(), None);
        let add = c.resize((12, true), 9, t0).expect("adds back");
        assert_eq!(add.epoch, 2);
        assert!(c.layout().part_of(12).is_some());
        let again = c
            .arrived((12, 2), (0, vec!["no rows".into()]), t0)
            .expect("settles");
        assert_eq!(
            again.parts,
            c.layout()
                .to_wire(
                    &Plan {
                        epoch: 2,
                        moves: vec![]
                    },
                    None
                )
                .parts
        );
        assert_eq!(
            (again.failed, again.asked_by),
            (vec!["no rows".to_string()], 9)
        );
    }

    #[test]
    fn refusals_name_the_reason() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(Layout::start(1));
        let only = c.resize((8, false), 9, t0).expect_err("the only server");
        assert!(only.contains("only server"), "{only}");
        let twice = c.resize((8, true), 9, t0).expect_err("owns keys");
        assert!(twice.contains("already owns keys"), "{twice}");
    }

    #[test]
    fn a_scheduler_taking_over_learns_the_newest_layout_and_its_moves() {
        let t0 = Instant::now();
        let mut old = Coordinator::new(Layout::start(3));
        let moving = old.resize((12, false), 9, t0).expect("drains");
        assert_eq!(
            old.current(),
            moving,
            "a node learning it now gets the moves"
        );
        let mut new = Coordinator::new(Layout::start(3));
        new.learn(
            &Layout::start(3).to_wire(
                &Plan {
                    epoch: 0,
                    moves: Vec::new(),
                },
                None,
            ),
            t0,
        );
        assert_eq!(new.moving(), None);
        new.learn(&moving, t0);
        assert_eq!((new.layout().epoch(), new.moving()), (1, Some(1)));
        assert!(
            new.resize((12, true), 9, t0).is_err(),
            "one resize at a time"
        );
        // The new owner reports again: settled, asked by the node that asked the old one.
        let settled = new
            .arrived((10, 1), (500, Vec::new()), t0 + Duration::from_millis(5))
            .expect("settled");
        assert_eq!((settled.settled, settled.asked_by), (Some((500, 5000)), 9));
        assert_eq!(new.current().settled, Some((500, 5000)), "its figures");
        assert_eq!(new.current().asked_by, 9, "the asker learns it settled");
        assert!(new.current().moves.is_empty());
        // A node that heard it settle ends the move as well.
        let mut heard = Coordinator::new(Layout::start(3));
        heard.learn(&moving, t0);
        heard.learn(&settled, t0);
        assert_eq!(heard.moving(), None);
        assert_eq!(
            heard.current().asked_by,
            9,
            "learnt from a node that heard it"
        );
        heard.learn(&moving, t0);
        assert_eq!(heard.moving(), None, "an older word does not reopen it");
    }
}
