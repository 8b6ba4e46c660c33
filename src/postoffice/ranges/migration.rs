//! One range's move from its old owner to its new one, with every push applied exactly once.
//!
//! The old owner serves the range until its **cut**: then it stops applying pushes to it and
//! sends the range's state — the rows and the ids of the pushes applied to them — to the new
//! owner in one [`Handoff`], again at every tick until the new owner acknowledges it. A push that
//! reaches the old owner after the cut is answered [`Verdict::Moved`], unless the rows already
//! hold it (its answer was lost and the worker sent it again): then it is answered again and
//! applied nowhere. The new owner answers [`Verdict::NotYet`] until the handoff arrives, then
//! applies what its rows do not hold. So a push is applied by the old owner before the cut (and
//! travels in the handoff) or by the new owner after it, never both: the applied ids travel
//! with the rows (the request log follows its keys).
//!
//! A worker sends a push to the owner its layout names, again on [`Verdict::Moved`] to the new
//! owner, and again after a pause on [`Verdict::NotYet`] or silence, until it is answered
//! ([`Verdict::Apply`] or [`Verdict::Answered`]).
//!
//! Generic over the state `S` (a table's rows, the default handler's values) and over how it
//! records applied pushes ([`RangeState`]). Sans-IO: the caller delivers messages and ticks and
//! sends what is returned.

use super::layout::Move;
use crate::wire::NodeId;

/// A push's identity: its worker and the worker's number for it (a request timestamp).
pub type PushId = (NodeId, i64);

/// What a range's state must tell the protocol.
pub trait RangeState: Clone {
    /// Whether push `id` is in these rows already.
    fn holds(&self, id: PushId) -> bool;
}

/// What a server does with a push for the moving range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Apply it to the rows (they do not hold it), then answer.
    Apply,
    /// The rows hold it already: answer, apply nothing.
    Answered,
    /// The range is the new owner's from `epoch` on: send it there.
    Moved {
        /// The epoch of the layout that names the new owner.
        epoch: u64,
        /// The new owner.
        to: NodeId,
    },
    /// (New owner) the range's rows have not arrived: send it again later.
    NotYet,
}

/// The range's state on its way to the new owner.
#[derive(Clone, Debug, PartialEq)]
pub struct Handoff<S> {
    /// The move.
    pub movement: Move,
    /// The epoch it leads to.
    pub epoch: u64,
    /// The rows, with the pushes applied to them.
    pub state: S,
}

/// The old owner's side of one move.
pub struct Outgoing<S> {
    movement: Move,
    epoch: u64,
    /// After the cut: what was handed off, and whether the new owner has it.
    cut: Option<(Handoff<S>, bool)>,
}

impl<S: RangeState> Outgoing<S> {
    /// The old owner of `movement`'s range, serving it until [`cut`](Self::cut); `epoch` is
    /// the epoch the move leads to.
    pub fn new(movement: Move, epoch: u64) -> Outgoing<S> {
        Outgoing {
            movement,
            epoch,
            cut: None,
        }
    }

    /// A push for the range; `rows` is the range's state here (read before the cut, the state
    /// handed off after it).
    pub fn push(&self, id: PushId, rows: &S) -> Verdict {
        match &self.cut {
            None if rows.holds(id) => Verdict::Answered,
            None => Verdict::Apply,
            Some((h, _)) if h.state.holds(id) => Verdict::Answered,
            Some(_) => Verdict::Moved {
                epoch: self.epoch,
                to: self.movement.to,
            },
        }
    }

    /// The cut: from now on the range's pushes go to the new owner. Returns the handoff to
    /// send it (`rows`: the range's state as it is now, the last push applied).
    pub fn cut(&mut self, rows: S) -> Handoff<S> {
        let h = Handoff {
            movement: self.movement,
            epoch: self.epoch,
            state: rows,
        };
        self.cut = Some((h.clone(), false));
        h
    }

    /// Whether the range was cut (its rows are no longer this server's to change).
    pub fn is_cut(&self) -> bool {
        self.cut.is_some()
    }

    /// The state handed off, after the cut.
    pub fn handed_off(&self) -> Option<&S> {
        self.cut.as_ref().map(|(h, _)| &h.state)
    }

    /// The new owner acknowledged the handoff: the move is done here (the rows may be dropped
    /// once no push can still need [`Verdict::Answered`]: after the workers' timeout).
    pub fn acked(&mut self) {
        if let Some((_, acked)) = &mut self.cut {
            *acked = true;
        }
    }

    /// Whether the new owner acknowledged the handoff.
    pub fn done(&self) -> bool {
        matches!(self.cut, Some((_, true)))
    }

    /// At a tick: the handoff to send again while it is not acknowledged.
    pub fn due(&self) -> Option<Handoff<S>> {
        match &self.cut {
            Some((h, false)) => Some(h.clone()),
            _ => None,
        }
    }
}

/// The new owner's side of one move.
pub struct Incoming<S> {
    movement: Move,
    rows: Option<S>,
}

impl<S: RangeState> Incoming<S> {
    /// The new owner of `movement`'s range, waiting for its handoff.
    pub fn new(movement: Move) -> Incoming<S> {
        Incoming {
            movement,
            rows: None,
        }
    }

    /// The handoff arrived (maybe again: the acknowledgement was lost). Returns whether it
    /// was taken: false for another move's. Either way it is to be acknowledged when taken.
    pub fn handoff(&mut self, h: Handoff<S>) -> bool {
        if h.movement != self.movement {
            return false;
        }
        if self.rows.is_none() {
            self.rows = Some(h.state);
        }
        true
    }

    /// A push for the range.
    pub fn push(&self, id: PushId) -> Verdict {
        match &self.rows {
            None => Verdict::NotYet,
            Some(rows) if rows.holds(id) => Verdict::Answered,
            Some(_) => Verdict::Apply,
        }
    }

    /// The range's state here, once it arrived (to apply pushes to, and to serve).
    pub fn rows(&mut self) -> Option<&mut S> {
        self.rows.as_mut()
    }

    /// Whether the range's rows arrived.
    pub fn serving(&self) -> bool {
        self.rows.is_some()
    }
}
