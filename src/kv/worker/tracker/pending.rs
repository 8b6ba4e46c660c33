//! One pending request of the [`Tracker`](super::Tracker): what each of its servers was asked,
//! which answered, and what their answers brought ([`Outcome`]).

use super::super::call::PulledPart;
use crate::error::Error;
use crate::kv::request::Callback;
use crate::kv::Timestamp;
use crate::metrics::Metrics;
use crate::postoffice::budget::Budget;
use crate::wire::{KeyRef, Message, Meta, Node};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// What was asked of one server: the keys (for the answer, which carries none when they are
/// the request's), and the request itself while it is not answered and names a cached key list
/// (sent again, with its keys, if the server does not keep the list) or the cluster replaces
/// lost servers (sent again to the replacement,
/// [`Tracker::on_replaced`](super::Tracker::on_replaced)).
pub(super) struct Asked {
    pub(super) keys: Bytes,
    pub(super) resend: Option<Message>,
    /// The generation of the path it went out on (how many times its server's id had been
    /// replaced, [`Postoffice::send_on_path`](crate::postoffice::Postoffice::send_on_path)); 0
    /// until the send returned. Only kept parts record it.
    pub(super) path: u32,
    /// Its bytes of the in-flight budget, until it is answered (then 0).
    pub(super) cost: u64,
}

/// A request waiting for its servers' answers.
pub(super) struct Pending<V> {
    /// Names the request in errors and logs: "timestamp 7 (push of 3 keys)".
    pub(super) label: String,
    /// Ranks of the servers it went to; the vectors below are indexed alike.
    pub(super) servers: Vec<usize>,
    pub(super) answered: Vec<bool>,
    pub(super) asked: Vec<Asked>,
    /// Pulled parts, in answer order until complete, then in key order.
    pub(super) parts: Vec<PulledPart>,
    /// The first failure of any server.
    pub(super) error: Option<Error>,
    pub(super) callback: Option<Callback<V>>,
    /// When it was opened: one not answered within `PS_TIMEOUT` of it is ended by
    /// [`Tracker::expire`](super::Tracker::expire).
    pub(super) opened: Instant,
    /// `push`, `pull` or `push-pull` (the metrics' `kind` label).
    pub(super) kind: &'static str,
    /// It may change the servers' state (a push or an application command).
    pub(super) changes: bool,
}

impl<V> Pending<V> {
    /// Request `label` of `kind`, opened now, to the servers of rank `servers`, none answered;
    /// each part holds `costs[i]` bytes of the budget (0 where `costs` is short). What each
    /// server is asked is filled in as its part is prepared, before it is sent.
    pub(super) fn new(
        (label, kind): (String, &'static str),
        servers: Vec<usize>,
        costs: &[u64],
        callback: Option<Callback<V>>,
    ) -> Pending<V> {
        Pending {
            label,
            answered: vec![false; servers.len()],
            asked: (0..servers.len())
                .map(|i| Asked {
                    keys: Bytes::new(),
                    resend: None,
                    path: 0,
                    cost: costs.get(i).copied().unwrap_or(0),
                })
                .collect(),
            servers,
            parts: Vec::new(),
            error: None,
            callback,
            opened: Instant::now(),
            kind,
            changes: false,
        }
    }

    /// Whether every server answered.
    pub(super) fn complete(&self) -> bool {
        self.answered.iter().all(|&a| a)
    }

    /// The slot (index in the vectors) of server rank `server`; `None` if it was not asked.
    pub(super) fn slot(&self, server: usize) -> Option<usize> {
        self.servers.iter().position(|&s| s == server)
    }

    /// The slot of part `part` (the number its message carried, [`Placement::Part`]) if it
    /// went to server rank `server`; without a number, the server's first slot.
    ///
    /// [`Placement::Part`]: crate::wire::Placement::Part
    pub(super) fn slot_of(&self, server: usize, part: Option<u32>) -> Option<usize> {
        match part {
            Some(p) => Some(p as usize).filter(|&i| self.servers.get(i) == Some(&server)),
            None => self.slot(server),
        }
    }

    /// A new part, to server rank `server`, for keys a server answered "moved" or "not yet"
    /// (holding none of the budget: the redirected part gave its bytes back). Returns its slot.
    pub(super) fn add_part(&mut self, server: usize) -> usize {
        self.servers.push(server);
        self.answered.push(false);
        self.asked.push(Asked {
            keys: Bytes::new(),
            resend: None,
            path: 0,
            cost: 0,
        });
        self.servers.len() - 1
    }

    /// Takes server `server`'s `outcome` (its part is `slot`): the first error, or its pulled
    /// pairs.
    pub(super) fn take(&mut self, slot: usize, server: usize, outcome: Outcome) {
        match outcome {
            Outcome::Failed(e) => {
                self.error.get_or_insert(e);
            }
            Outcome::Pushed => {}
            Outcome::Pulled { keys, vals, lens } => self.parts.push(PulledPart {
                server,
                keys: keys.unwrap_or_else(|| self.asked[slot].keys.clone()),
                vals,
                lens,
            }),
        }
    }

    /// Gives back to `budget` the bytes of every part not answered yet (each counted as
    /// no longer in flight in `metrics`).
    pub(super) fn release_unanswered(&mut self, budget: &Budget, metrics: &Metrics) {
        for (answered, asked) in self.answered.iter().zip(&mut self.asked) {
            if !answered {
                budget.give(std::mem::take(&mut asked.cost));
                metrics.unanswered(1);
            }
        }
    }

    /// Ends the request with `error`: every part counts as answered (nothing is sent again),
    /// and `error` is its error unless a server's came first. The caller released the
    /// unanswered parts' bytes.
    pub(super) fn end(&mut self, error: Error) {
        for (answered, asked) in self.answered.iter_mut().zip(&mut self.asked) {
            *answered = true;
            asked.resend = None;
        }
        self.error.get_or_insert(error);
    }

    /// The server of part `slot` does not keep the key list the part named: the part's keys
    /// and the request to send again (taken: sent again once). `None` when the part named no
    /// cached list.
    pub(super) fn take_cached_resend(&mut self, slot: usize) -> Option<(Bytes, Message)> {
        let a = self.asked.get_mut(slot)?;
        let keys = a.resend.as_ref().and_then(|m| m.meta.kv.keys.as_ref());
        if !matches!(keys, Some(KeyRef::Cached { .. })) {
            return None;
        }
        a.resend.take().map(|req| (a.keys.clone(), req))
    }

    /// The error for this request, not answered within `timeout` (`PS_TIMEOUT`): its label
    /// and the servers that stayed silent.
    pub(super) fn no_answer(&self, timeout: Duration) -> Error {
        let silent: Vec<String> = self
            .servers
            .iter()
            .zip(&self.answered)
            .filter(|(_, &a)| !a)
            .map(|(&s, _)| Node::describe(Node::server_id(s)))
            .collect();
        Error::Timeout(format!(
            "{}: no answer within {:.0} s (PS_TIMEOUT) from {}",
            self.label,
            timeout.as_secs_f64(),
            silent.join(", ")
        ))
    }
}

/// The slot of the part `msg` is (its number, [`crate::wire::Placement::Part`]: a part's
/// number is its slot).
pub(super) fn slot_of_part(msg: &Message) -> Option<usize> {
    msg.meta
        .kv
        .placement
        .and_then(|p| p.part())
        .map(|p| p as usize)
}

/// What one server's answer to a request brought.
pub(super) enum Outcome {
    /// The request failed there (the server's error, or the worker could not send it).
    Failed(Error),
    /// A push done.
    Pushed,
    /// Pulled pairs; `keys: None` when they are the request's (`KeyRef::AsRequested`).
    Pulled {
        keys: Option<Bytes>,
        vals: Bytes,
        lens: Bytes,
    },
}

impl Outcome {
    /// What an answer (its `meta` and `data` frames: keys, values, lens) brought: the
    /// server's error ([`Error::Remote`] naming it), the pulled pairs, or a push done.
    pub(super) fn of_answer(meta: Meta, data: Vec<Bytes>) -> Outcome {
        if let Some(e) = meta.error {
            return Outcome::Failed(Error::Remote {
                node: Node::describe(meta.sender),
                message: e,
            });
        }
        if !meta.kv.pull {
            return Outcome::Pushed;
        }
        let as_requested = meta.kv.keys == Some(KeyRef::AsRequested);
        let mut it = data.into_iter();
        let (keys, vals, lens) = (
            it.next().unwrap_or_default(),
            it.next().unwrap_or_default(),
            it.next().unwrap_or_default(),
        );
        Outcome::Pulled {
            keys: (!as_requested).then_some(keys),
            vals,
            lens,
        }
    }
}

/// The error for a timestamp nobody waits for.
pub(super) fn not_outstanding(ts: Timestamp) -> Error {
    Error::InvalidArgument(format!(
        "timestamp {ts} is not outstanding (already waited for, or it had a callback)"
    ))
}
