//! The request tracker of a [`KVWorker`](super::KVWorker): ps-lite's timestamped push/pull
//! protocol (`kv_app.h`: `KVWorker::Send`, `Process`, `RunCallback`), plus key caching.
//!
//! A request is pending under its timestamp until every server it went to answered. Each
//! server's part is sent by [`Tracker::send_part`] under that server's key-cache mirror
//! ([`crate::kv::keycache`]), which decides whether the keys travel or only the digest of a list
//! the server keeps. An answer ([`Tracker::on_answer`], on the customer thread) is settled into
//! the pending request; a server that does not keep a list it was named answers "unknown", and
//! the part is sent again with its keys. The last answer completes the request: its callback
//! runs (with the parts merged, [`super::call::merge`]), or its waiters ([`Tracker::wait`],
//! [`Tracker::take_parts`]) wake.
//!
//! Each server's part holds its bytes of the process's in-flight budget
//! ([`crate::postoffice::budget`], `PS_MAX_INFLIGHT_BYTES`) from before it is sent until it is
//! answered, fails, or is given up; the caller took them before [`Tracker::open`].
//!
//! **Lock order:** a server's mirror, then `pending`, then the budget's. A part is prepared and sent under its
//! server's mirror, so each server sees requests in the order its mirror recorded them;
//! `pending` is taken inside (to record what was asked) and alone everywhere else. No callback
//! runs under either lock.

use super::call::PulledPart;
use crate::error::{Error, Result};
use crate::kv::pairs::{view, KVPairs};
use crate::kv::request::Callback;
use crate::kv::value::Value;
use crate::kv::{Key, Timestamp};
use crate::metrics::Metrics;
use crate::postoffice::budget::Budget;
use crate::postoffice::Postoffice;
use crate::sync::lock;
use crate::wire::{KeyRef, Message, Node, Placement};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod expiry;
mod mirrors;
mod pending;
mod redirect;
mod replaced;

use pending::{not_outstanding, Outcome, Pending};

/// Pending requests by timestamp and the key-cache mirrors of the servers (see the module docs
/// for the lock order).
pub(super) struct Tracker<V> {
    /// What each server keeps for this worker (key caching), by server rank.
    mirrors: mirrors::Mirrors,
    pending: Mutex<HashMap<Timestamp, Pending<V>>>,
    /// Notified whenever a server's answer was settled.
    settled: Condvar,
    /// The process's bytes in flight: each part's are given back once it is answered.
    budget: Arc<Budget>,
    /// When [`expire`](Tracker::expire) last looked.
    looks: expiry::ExpiryClock,
    /// The node's metrics: requests sent, their latency per server, parts in flight.
    metrics: Arc<Metrics>,
    /// What the cluster's replacement of lost servers needs ([`replaced`]).
    replacing: replaced::Replacing,
}

impl<V> Drop for Tracker<V> {
    /// A worker dropped with requests out gives their bytes back (their answers, if any,
    /// find no customer).
    fn drop(&mut self) {
        let map = self.pending.get_mut().unwrap_or_else(|p| p.into_inner());
        for p in map.values_mut() {
            p.release_unanswered(&self.budget, &self.metrics);
        }
    }
}

impl<V: Value> Tracker<V> {
    /// No request pending; `servers` mirrors holding at most `cache_keys` keys each
    /// (`PS_KEY_CACHE_KEYS`); parts give their bytes back to `budget`.
    /// With `keep`, every part is kept until it is answered, to be sent again to a lost
    /// server's replacement ([`on_replaced`](Self::on_replaced)).
    pub(super) fn new(
        servers: usize,
        cache_keys: usize,
        budget: Arc<Budget>,
        metrics: Arc<Metrics>,
        keep: bool,
    ) -> Tracker<V> {
        Tracker {
            mirrors: mirrors::Mirrors::new(servers, cache_keys),
            pending: Mutex::new(HashMap::new()),
            settled: Condvar::new(),
            budget,
            looks: expiry::ExpiryClock::new(),
            metrics,
            replacing: replaced::Replacing::new(keep),
        }
    }

    /// Per server rank with parts outstanding: how many, and the oldest one's age and label
    /// (for "who waits on whom", [`crate::waits`]).
    pub(super) fn outstanding(&self, now: Instant) -> Vec<(usize, usize, Duration, String)> {
        let mut by: std::collections::BTreeMap<usize, (usize, Duration, String)> =
            Default::default();
        for p in lock(&self.pending).values() {
            let age = now.saturating_duration_since(p.opened);
            for (&s, _) in p.servers.iter().zip(&p.answered).filter(|(_, &a)| !a) {
                let e = by.entry(s).or_insert((0, Duration::ZERO, String::new()));
                e.0 += 1;
                if age >= e.1 {
                    (e.1, e.2) = (age, p.label.clone());
                }
            }
        }
        by.into_iter().map(|(s, (n, a, l))| (s, n, a, l)).collect()
    }

    /// Starts tracking request `ts` to the servers of rank `servers`, named `label`, each
    /// part holding `costs[i]` bytes of the budget (taken by the caller). Returns whether it
    /// waits for answers: a request to no server completes at once (its callback runs now, on
    /// this thread, with empty pairs; without one, `wait` returns at once).
    pub(super) fn open(
        &self,
        ts: Timestamp,
        (label, kind): (String, &'static str),
        servers: Vec<usize>,
        costs: &[u64],
        callback: Option<Callback<V>>,
    ) -> bool {
        let pending = Pending::new((label, kind), servers, costs, callback);
        if pending.servers.is_empty() {
            if let Some(cb) = pending.callback {
                cb(Ok(KVPairs::default()));
            } else {
                lock(&self.pending).insert(ts, pending);
            }
            return false;
        }
        self.metrics.requested(kind, pending.servers.len());
        lock(&self.pending).insert(ts, pending);
        true
    }

    /// Forgets request `ts` (a part of it could not be sent; the caller reports the error).
    /// False when it had already ended (a lost peer failed it, its callback ran): then the
    /// callback has reported the failure.
    pub(super) fn abandon(&self, ts: Timestamp) -> bool {
        let Some(mut p) = lock(&self.pending).remove(&ts) else {
            return false;
        };
        p.release_unanswered(&self.budget, &self.metrics);
        true
    }

    /// Sends `part` (a request's meta and its values and lens frames, frames 1 and 2) to server
    /// `server` with `keys`, under that server's mirror: the mirror decides whether the keys
    /// travel or a digest of a list the server keeps, after forgetting `stale` (a list the
    /// server said it does not keep). Records in the pending request what was asked, before
    /// sending. A failed send leaves the mirror not counting on a registration the server never
    /// got.
    ///
    /// # Errors
    /// As [`Postoffice::send`]; an unknown server rank.
    pub(super) fn send_part(
        &self,
        po: &Postoffice,
        server: usize,
        keys: &[Key],
        part: Message,
        stale: Option<u64>,
    ) -> Result<()> {
        let mirror = self
            .mirrors
            .get(server)
            .ok_or_else(|| Error::InvalidArgument(format!("internal: no server rank {server}")))?;
        let mut mirror = lock(&mirror);
        if let Some(d) = stale {
            mirror.forget(d);
        }
        let p = mirror.prepare(keys);
        let registered = match p.key_ref {
            Some(KeyRef::Register { digest, .. }) => Some(digest),
            _ => None,
        };
        let Message { mut meta, data } = part;
        meta.kv.keys = p.key_ref;
        let keys_frame = if p.send { p.keys.clone() } else { Bytes::new() };
        let msg = Message {
            meta,
            data: vec![
                keys_frame,
                data.get(1).cloned().unwrap_or_default(),
                data.get(2).cloned().unwrap_or_default(),
            ],
        };
        let keep = self.replacing.keeps();
        let slot = self.record_asked(server, &msg, p.keys);
        let ts = msg.meta.tag.timestamp;
        match po.send_on_path(msg) {
            Ok((_, path)) => {
                self.sent_on(ts, slot, path);
                Ok(())
            }
            // A request to a server whose channel failed: kept for its replacement (the
            // server's loss is not final), or failed with the server's loss.
            Err(e) if replaced::kept_for_replacement(keep, po.has_failed(), &e) => {
                tracing::warn!(
                    "a request to {} is kept for its replacement: {e}",
                    Node::describe(Node::server_id(server))
                );
                Ok(())
            }
            Err(e) => {
                if let Some(d) = registered {
                    mirror.forget(d);
                }
                Err(e)
            }
        }
    }

    /// Records in request `msg`'s pending entry what its part for `server` asked: `keys`, and
    /// a copy of `msg` (its frames shared, not copied), to send it again: with its keys (a
    /// server that does not keep the list it names), to a replacement, or sliced again (a
    /// server that answers "moved" or "not yet"). Returns the part's slot.
    fn record_asked(&self, server: usize, msg: &Message, keys: Bytes) -> Option<usize> {
        let mut map = lock(&self.pending);
        let pd = map.get_mut(&msg.meta.tag.timestamp)?;
        pd.changes = msg.meta.may_change_state();
        let slot = pd.slot_of(server, msg.meta.kv.placement.and_then(|p| p.part()))?;
        let asked = &mut pd.asked[slot];
        (asked.keys, asked.resend) = (keys, Some(msg.clone()));
        Some(slot)
    }

    /// Part `slot` of request `ts` went out on the path of generation `path` (recorded when
    /// parts are kept for replacements).
    fn sent_on(&self, ts: Timestamp, slot: Option<usize>, path: u32) {
        if !self.replacing.keeps() {
            return;
        }
        if let (Some(pd), Some(slot)) = (lock(&self.pending).get_mut(&ts), slot) {
            if let Some(a) = pd.asked.get_mut(slot) {
                a.path = path;
            }
        }
    }

    /// The server does not keep the key list `req` named (a `Cached` request): send it again,
    /// with `keys`.
    ///
    /// # Errors
    /// When it cannot be sent.
    fn resend_with_keys(
        &self,
        po: &Postoffice,
        server: usize,
        keys: &[u8],
        req: Message,
    ) -> Result<()> {
        let Some(KeyRef::Cached { digest }) = req.meta.kv.keys else {
            return Err(Error::InvalidArgument(
                "internal: only a request naming a cached key list is sent again".into(),
            ));
        };
        let keys = view::<Key>(keys, "keys").map_err(Error::InvalidArgument)?;
        self.send_part(po, server, &keys, req, Some(digest))
    }

    /// A server's answer `msg` arrived (customer thread): settles it, or sends the part again
    /// with its keys when the server does not keep the key list it named.
    pub(super) fn on_answer(&self, po: &Postoffice, msg: Message) {
        let (ts, from) = (msg.meta.tag.timestamp, msg.meta.sender);
        let server = Node::rank_of(from);
        let placement = msg.meta.kv.placement;
        let part = placement.and_then(|p| p.part());
        if let Some(p @ (Placement::Moved { .. } | Placement::NotYet { .. })) = placement {
            // Keys placed elsewhere, or not here yet: nothing was applied; slice them again.
            redirect::redirect(self, po, (ts, server), p);
            return;
        }
        if let Some(KeyRef::Unknown { .. }) = msg.meta.kv.keys {
            // The server keeps no such list: nothing was applied; ask again with the keys.
            let asked = lock(&self.pending).get_mut(&ts).and_then(|p| {
                let slot = p.slot_of(server, part)?;
                p.take_cached_resend(slot)
            });
            let outcome = match asked {
                Some((keys, req)) => match self.resend_with_keys(po, server, &keys, req) {
                    Ok(()) => return,
                    Err(e) => Outcome::Failed(e),
                },
                None => Outcome::Failed(Error::Remote {
                    node: Node::describe(from),
                    message: "answered \"unknown key list\" to a request that named none".into(),
                }),
            };
            self.settle(ts, (server, part), outcome);
            return;
        }
        let Message { mut meta, data } = msg;
        let also_refused = std::mem::take(&mut meta.also_refused);
        let outcome = Outcome::of_answer(meta, data);
        if let Outcome::Failed(failed) = &outcome {
            // Further requests refused in the same answer.
            for &also in &also_refused {
                self.settle(also, (server, None), Outcome::Failed(failed.clone()));
            }
        }
        self.settle(ts, (server, part), outcome);
    }

    /// Records the outcome of request `ts`'s part `part` (its number; `None`: the server's
    /// first part) at server rank `server`; completes the request (its waiter or callback)
    /// once every part is answered. The callback runs after the lock is released.
    fn settle(&self, ts: Timestamp, (server, part): (usize, Option<u32>), outcome: Outcome) {
        let completed = {
            let mut map = lock(&self.pending);
            let Some(p) = map.get_mut(&ts) else {
                tracing::debug!(
                    "late answer for timestamp {ts} from {}",
                    Node::describe(Node::server_id(server))
                );
                return;
            };
            let Some(slot) = p.slot_of(server, part) else {
                tracing::warn!(
                    "answer for {} from {}, which was not asked",
                    p.label,
                    Node::describe(Node::server_id(server))
                );
                return;
            };
            if p.answered[slot] {
                return;
            }
            p.answered[slot] = true;
            p.asked[slot].resend = None;
            self.metrics.answered(server, p.kind, p.opened.elapsed());
            self.budget.give(std::mem::take(&mut p.asked[slot].cost));
            if p.changes && !matches!(outcome, Outcome::Failed(_)) {
                self.replacing.answered(server, ts);
            }
            p.take(slot, server, outcome);
            if !p.complete() {
                return;
            }
            p.parts.sort_by_key(super::call::PulledPart::first_key);
            if p.callback.is_some() {
                map.remove(&ts)
            } else {
                None
            }
        };
        self.settled.notify_all();
        if let Some(mut p) = completed {
            if let Some(cb) = p.callback.take() {
                let r = match p.error {
                    Some(e) => Err(e),
                    None => super::call::merge(p.parts),
                };
                cb(r);
            }
        }
    }

    /// Ends every incomplete request with `error` (a peer is gone): each completes as if its
    /// silent servers had answered with it; waiters wake, callbacks run (after the lock).
    pub(super) fn fail_all(&self, error: &Error) {
        self.end_incomplete(|_| Some(error.clone()));
    }

    /// Ends the requests opened more than `timeout` (`PS_TIMEOUT`) before `now` that are not
    /// complete, as if their silent servers had answered with [`Error::Timeout`] naming them:
    /// their bytes of the budget come back even when nobody waits for them (a callback's, a
    /// push never waited for, an answer lost with a dropped connection). Runs at most once a
    /// second; called before each request is sent.
    pub(super) fn expire(&self, now: Instant, timeout: Duration) {
        if !self.looks.due(now) {
            return; // looked within the last second, or another thread looks now
        }
        self.end_incomplete(|p| {
            if now.saturating_duration_since(p.opened) <= timeout {
                return None;
            }
            Some(p.no_answer(timeout))
        });
    }

    /// Ends every incomplete request for which `why` gives an error: its unanswered parts
    /// give their bytes back and count as answered with it; waiters wake, callbacks run
    /// (after the lock).
    fn end_incomplete(&self, why: impl Fn(&Pending<V>) -> Option<Error>) {
        let with_callback: Vec<Pending<V>> = {
            let mut map = lock(&self.pending);
            let mut ended = Vec::new();
            for (&ts, p) in map.iter_mut() {
                if p.complete() {
                    continue;
                }
                let Some(error) = why(p) else { continue };
                p.release_unanswered(&self.budget, &self.metrics);
                p.end(error);
                if p.callback.is_some() {
                    ended.push(ts);
                }
            }
            ended.into_iter().filter_map(|ts| map.remove(&ts)).collect()
        };
        self.settled.notify_all();
        for mut p in with_callback {
            if let (Some(cb), Some(e)) = (p.callback.take(), p.error.take()) {
                cb(Err(e));
            }
        }
    }

    /// Blocks until request `ts` completed (at most `timeout`). A failed request and a finished
    /// push are forgotten; pulled parts stay for [`take_parts`](Self::take_parts).
    ///
    /// # Errors
    /// As [`take_parts`](Self::take_parts).
    pub(super) fn wait(&self, ts: Timestamp, timeout: Duration) -> Result<()> {
        let mut map = self.wait_complete(ts, timeout)?;
        let p = map.get_mut(&ts).ok_or_else(|| not_outstanding(ts))?;
        if let Some(e) = p.error.take() {
            map.remove(&ts);
            return Err(e);
        }
        if p.parts.is_empty() {
            map.remove(&ts);
        }
        Ok(())
    }

    /// Waits for request `ts` (at most `timeout`), forgets it, and returns its pulled parts in
    /// key order.
    ///
    /// # Errors
    /// The first server error ([`Error::Remote`]); [`Error::Timeout`] naming the servers that
    /// did not answer within `timeout` (`PS_TIMEOUT`); [`Error::InvalidArgument`] for a
    /// timestamp that is not outstanding.
    pub(super) fn take_parts(&self, ts: Timestamp, timeout: Duration) -> Result<Vec<PulledPart>> {
        let mut map = self.wait_complete(ts, timeout)?;
        let p = map.remove(&ts).ok_or_else(|| not_outstanding(ts))?;
        drop(map);
        match p.error {
            Some(e) => Err(e),
            None => Ok(p.parts),
        }
    }

    /// Waits until request `ts` completed; returns the locked map, which holds it. On the
    /// deadline the request is forgotten.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming the silent servers; [`Error::InvalidArgument`] for a timestamp
    /// that is not outstanding.
    fn wait_complete(
        &self,
        ts: Timestamp,
        timeout: Duration,
    ) -> Result<MutexGuard<'_, HashMap<Timestamp, Pending<V>>>> {
        let deadline = Instant::now() + timeout;
        let mut map = lock(&self.pending);
        loop {
            let p = map.get(&ts).ok_or_else(|| not_outstanding(ts))?;
            if p.complete() {
                return Ok(map);
            }
            let now = Instant::now();
            if now >= deadline {
                let e = p.no_answer(timeout);
                // The block lists this request too (it takes `pending`: unlocked meanwhile).
                drop(map);
                crate::waits::timed_out(&e);
                map = lock(&self.pending);
                if map.get(&ts).is_some_and(Pending::complete) {
                    // Answered while the block was written.
                    return Ok(map);
                }
                if let Some(mut p) = map.remove(&ts) {
                    p.release_unanswered(&self.budget, &self.metrics);
                }
                return Err(e);
            }
            let tick = (deadline - now).min(Duration::from_millis(200));
            map = crate::sync::wait_timeout(&self.settled, map, tick);
        }
    }
}

#[cfg(test)]
mod tests;
