//! The scheduler's book of replacements (`PS_CHECKPOINT_DIR`): which lost servers and workers
//! are awaited, until when (`PS_RECOVERY_TIMEOUT`), and how many times each id was replaced.
//! Sans-IO, time passed in.

use crate::wire::{Node, NodeId, Role};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Lost nodes awaiting a replacement, with the deadline for it, and the replacements so far.
pub(super) struct Replacements {
    /// `PS_RECOVERY_TIMEOUT` when lost servers and workers may be replaced; `None`: any loss
    /// fails the job.
    window: Option<Duration>,
    /// Lost nodes awaiting a replacement, with the deadline for it.
    awaiting: BTreeMap<NodeId, Instant>,
    /// Replacements so far per id.
    replaced: BTreeMap<NodeId, u32>,
}

impl Replacements {
    /// A book replacing lost servers and workers within `window`, or none (`None`).
    pub(super) fn new(window: Option<Duration>) -> Replacements {
        Replacements {
            window,
            awaiting: BTreeMap::new(),
            replaced: BTreeMap::new(),
        }
    }

    /// Whether lost servers and workers are replaced.
    pub(super) fn on(&self) -> bool {
        self.window.is_some()
    }

    /// The replacement window (zero when nodes are not replaced).
    pub(super) fn window(&self) -> Duration {
        self.window.unwrap_or_default()
    }

    /// `id` was declared lost at `now`: awaited until `now` + the window when it is a server or
    /// worker and nodes are replaced. Returns the window it is awaited for, `None` when it is
    /// not.
    pub(super) fn await_replacement(&mut self, id: NodeId, now: Instant) -> Option<Duration> {
        let window = self
            .window
            .filter(|_| Node::role_of(id) != Some(Role::Scheduler))?;
        self.awaiting.insert(id, now + window);
        Some(window)
    }

    /// Whether `id`'s replacement is awaited.
    pub(super) fn awaits(&self, id: NodeId) -> bool {
        self.awaiting.contains_key(&id)
    }

    /// The lowest awaited id of `role`.
    pub(super) fn first_awaited(&self, role: Role) -> Option<NodeId> {
        self.awaiting
            .keys()
            .copied()
            .find(|&id| Node::role_of(id) == Some(role))
    }

    /// How many times `id` was replaced.
    pub(super) fn holders(&self, id: NodeId) -> u32 {
        self.replaced.get(&id).copied().unwrap_or(0)
    }

    /// A replacement takes `id` over: no longer awaited; returns its incarnation (1 for the
    /// first replacement).
    pub(super) fn take_over(&mut self, id: NodeId) -> u32 {
        self.awaiting.remove(&id);
        let incarnation = self.replaced.entry(id).or_default();
        *incarnation += 1;
        *incarnation
    }

    /// `id`'s current holder, re-registering with a rebuilt scheduler, says it is the
    /// `incarnation`-th replacement (0: the first holder).
    pub(super) fn at_least(&mut self, id: NodeId, incarnation: u32) {
        if incarnation > 0 {
            let n = self.replaced.entry(id).or_default();
            *n = (*n).max(incarnation);
        }
    }

    /// The awaited nodes whose deadline passed at `now`, no longer awaited (lost for good).
    pub(super) fn late(&mut self, now: Instant) -> Vec<NodeId> {
        let late: Vec<NodeId> = self
            .awaiting
            .iter()
            .filter(|&(_, &deadline)| now >= deadline)
            .map(|(&id, _)| id)
            .collect();
        for id in &late {
            self.awaiting.remove(id);
        }
        late
    }
}
