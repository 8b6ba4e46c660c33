//! Stale synchronous parallel (SSP, Ho et al. 2013, "More Effective Distributed ML via a Stale
//! Synchronous Parallel Parameter Server"; the OSDI'14 Parameter Server's bounded delay):
//! the workers' clocks. Sans-IO: the postoffice feeds clock messages in and sends what these
//! return.
//!
//! - Each worker has a clock, 0 at the start, advanced by one per [`Gate::advance`] (one
//!   training step, or one group of steps). A worker at clock `c` with staleness bound τ may run
//!   only while the slowest worker is at clock ≥ `c − τ` (the **floor**). τ = 0 is bulk
//!   synchronous (a barrier per clock), no bound is asynchronous.
//! - The scheduler keeps every worker's clock ([`ClockBook`]): a worker tells it each new clock
//!   (CLOCK); when the floor rises it tells every worker (FLOOR), naming the slowest worker. A
//!   worker within its bound never waits for an answer, so the protocol costs one small
//!   message per clock per worker, plus one per worker each time the slowest one moves on.
//!   A worker that must wait says so (`waits`) and is answered the floor at once, even when it
//!   did not rise: it knows whom it waits for.
//! - A worker that takes no more steps says so (its clock becomes [`DONE`]): workers that
//!   train a step or two more (shards of unequal size) do not wait for it.
//! - Messages may come twice or out of order: a clock or a floor only ever rises. A waiting
//!   worker says its clock again every second (`waits` too): that repairs a lost FLOOR and
//!   teaches a scheduler that took the job over.

use crate::wire::{Node, NodeId};
use std::collections::BTreeMap;

#[cfg(test)]
mod tests;

/// The clock a worker that takes no more steps tells the scheduler: the others no longer wait
/// for it.
pub const DONE: u64 = u64::MAX;

/// The floor of the workers' clocks, as the scheduler tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Floor {
    /// The slowest worker's clock.
    pub floor: u64,
    /// A worker at that clock.
    pub slowest: NodeId,
}

/// Whom a [`Floor`] goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorTo {
    /// Every worker: the floor rose.
    Workers,
    /// The worker that waits.
    One(NodeId),
}

/// The scheduler's book of the workers' clocks.
#[derive(Clone, Debug, Default)]
pub struct ClockBook {
    clocks: BTreeMap<NodeId, u64>,
    floor: u64,
}

impl ClockBook {
    /// A book of `workers` (node ids), every clock at 0.
    pub fn new(workers: impl IntoIterator<Item = NodeId>) -> ClockBook {
        ClockBook {
            clocks: workers.into_iter().map(|w| (w, 0)).collect(),
            floor: 0,
        }
    }

    /// Whether the book has any worker (one is made at the first CLOCK, from the node table).
    pub fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// The book's workers (whom a risen floor goes to).
    pub fn workers(&self) -> Vec<NodeId> {
        self.clocks.keys().copied().collect()
    }

    /// The floor and a worker at it (the lowest id); `None` with no workers.
    pub fn floor(&self) -> Option<Floor> {
        self.clocks
            .iter()
            .min_by_key(|&(&id, &c)| (c, id))
            .map(|(&slowest, &floor)| Floor { floor, slowest })
    }

    /// Worker `worker` is at clock `clock` (`waits`: it waits there). Returns the floor to
    /// send, and to whom: every worker when it rose, the sender when it `waits`;
    /// `None` otherwise, and for a node that is not one of the book's workers.
    pub fn tick(&mut self, worker: NodeId, clock: u64, waits: bool) -> Option<(Floor, FloorTo)> {
        let c = self.clocks.get_mut(&worker)?;
        *c = (*c).max(clock);
        let floor = self.floor()?;
        if floor.floor > self.floor {
            self.floor = floor.floor;
            return Some((floor, FloorTo::Workers));
        }
        waits.then_some((floor, FloorTo::One(worker)))
    }
}

/// A worker's side: its clock, its bound, the last floor it heard of, and whether it said it
/// takes no more steps.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    clock: u64,
    floor: Option<Floor>,
    done: bool,
}

impl Gate {
    /// Advances the clock by one; returns the new clock (to tell the scheduler).
    pub fn advance(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// This worker's clock.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// This worker takes no more steps: [`told`](Self::told) is [`DONE`] from now on.
    pub fn finish(&mut self) {
        self.done = true;
    }

    /// The clock to tell the scheduler (again): [`DONE`] after [`finish`](Self::finish), else
    /// the clock.
    pub fn told(&self) -> u64 {
        if self.done {
            DONE
        } else {
            self.clock
        }
    }

    /// The floor heard of (0 until one came).
    pub fn floor(&self) -> u64 {
        self.floor.map_or(0, |f| f.floor)
    }

    /// A FLOOR from the scheduler (an older one than the last is ignored; one at the same
    /// floor may name another slowest worker, the one the scheduler knows now).
    pub fn on_floor(&mut self, floor: Floor) {
        if self.floor.is_none_or(|f| floor.floor >= f.floor) {
            self.floor = Some(floor);
        }
    }

    /// Whether this worker may run at its clock with staleness bound `staleness` (`None`: no
    /// bound, it always may).
    pub fn may_run(&self, staleness: Option<u64>) -> bool {
        staleness.is_none_or(|tau| self.clock.saturating_sub(tau) <= self.floor())
    }

    /// What a wait that timed out says: this worker's clock and bound, and the slowest worker
    /// heard of with its clock.
    pub fn straggler_text(&self, staleness: u64) -> String {
        let need = self.clock.saturating_sub(staleness);
        let slowest = match self.floor {
            Some(f) => format!("{} is at clock {}", Node::describe(f.slowest), f.floor),
            None => "no worker's clock was heard of (is the scheduler running?)".into(),
        };
        format!(
            "bounded staleness: this worker, at clock {}, waits for every worker to reach \
             clock {need} (staleness {staleness}); {slowest}",
            self.clock
        )
    }
}
