//! `KVWorker`: pushes and pulls, sliced by server key range and merged back (ps-lite's
//! `KVWorker<Val>`, `kv_app.h`), and zero-copy pulls through TF contrib/verbs' rendezvous.
//!
//! - this file: the API;
//! - `call.rs`: a call's pairs checked and cut into one part per server, and pulled parts
//!   merged back;
//! - `tracker.rs`: pending requests by timestamp, answers, key caching's send and resend, waits;
//! - `zpull.rs`: the rendezvous requester's driver (`zpull*`, and `pull_into` of one key into
//!   the pool).
//!
//! **Threads.** Any number of caller threads use one `KVWorker` (`&self` methods): they slice
//! and send requests, start rendezvous pulls, and block in `wait`, `take_pulled`, `pull_into`,
//! `push_pull_into` or `zpull_wait`. One customer thread (`customer-<route>`,
//! [`crate::postoffice::Customer`]) receives everything for this worker: answers, rendezvous
//! messages, RDMA write completions; it settles requests and runs request callbacks and `zpull`
//! callbacks. They share `WorkerState`.
//!
//! **Lock order** (all in `WorkerState`): a server's key-cache mirror, then `pending` (both in
//! the tracker); `zpulls` alone. No kv lock is held while a callback runs; messages are sent
//! under a mirror (a request's part) or under `zpulls` (a rendezvous request), so the
//! postoffice's own locks come after these.

mod call;
mod row_cache;
mod tracker;
mod zpull;

pub use row_cache::{CachePull, RowCache};

use super::pairs::KVPairs;
use super::request::{Op, RequestOptions};
use super::sarray::SArray;
use super::slicer::{slice, Slice};
use super::value::Value;
use super::{Key, Timestamp};
use crate::error::{Error, Result};
use crate::kv::carrier::{self, Arrival};
use crate::postoffice::CustomerEvent;
use crate::postoffice::{Customer, Postoffice, Route};
use call::{Call, Vals};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use tracker::Tracker;
use zpull::ZPulls;

/// The state shared by a worker's caller threads and its customer thread.
struct WorkerState<V> {
    po: Arc<Postoffice>,
    app_id: i32,
    customer_id: i32,
    /// Outstanding push/pull requests and the key-cache mirrors.
    requests: Tracker<V>,
    /// Outstanding rendezvous pulls.
    zpulls: Mutex<ZPulls<V>>,
}

impl<V: Value> crate::waits::Waits for WorkerState<V> {
    /// Its outstanding requests by server: how many parts, the oldest one's age and label.
    fn waits(&self, now: std::time::Instant) -> Vec<String> {
        let me = crate::wire::Node::describe(self.po.my_id());
        self.requests
            .outstanding(now)
            .into_iter()
            .map(|(server, n, age, label)| {
                format!(
                    "{me} (app {}, customer {}) waits for {}: {n} request part(s), the \
                     oldest {} old ({label})",
                    self.app_id,
                    self.customer_id,
                    crate::wire::Node::describe(crate::wire::Node::server_id(server)),
                    crate::waits::age(age)
                )
            })
            .collect()
    }
}

/// The worker side of a key-value application.
///
/// Keys of one call must be sorted and unique. Without `lens` every key gets
/// `vals.len() / keys.len()` values. A call is split over the servers by key range; its
/// timestamp completes when every server involved answered. Every [`KVWorker::wait`] has a
/// deadline of `PS_TIMEOUT`.
///
/// ```no_run
/// # fn main() -> pslite::Result<()> {
/// # let po: std::sync::Arc<pslite::Postoffice> = unimplemented!();
/// let kv = pslite::KVWorker::<f32>::new(&po, 0, 0)?;
/// let ts = kv.push(&[1, 2, 3], &[1.0, 2.0, 3.0], None)?;
/// kv.wait(ts)?;
/// let mut out = vec![0.0f32; 3];
/// kv.pull_into(&[1, 2, 3], &mut out)?;
/// # Ok(()) }
/// ```
pub struct KVWorker<V: Value> {
    state: Arc<WorkerState<V>>,
    /// Timestamps of requests and steps of rendezvous pulls.
    next_ts: AtomicI32,
    _customer: Customer,
    imm_slot: u8,
}

impl<V: Value> Drop for KVWorker<V> {
    fn drop(&mut self) {
        self.state.po.release_imm_slot(self.imm_slot);
    }
}

impl<V: Value> KVWorker<V> {
    /// Creates the worker of application `app_id` with customer id `customer_id`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if this (app, customer) pair already exists in the process,
    /// or all immediate slots of the process are taken.
    pub fn new(po: &Arc<Postoffice>, app_id: i32, customer_id: i32) -> Result<KVWorker<V>> {
        let route = Route::Worker {
            app_id,
            customer_id,
        };
        let imm_slot = po.register_imm_slot(route)?;
        let state = Arc::new(WorkerState {
            requests: Tracker::new(
                po.num_servers(),
                po.config().kv.key_cache_keys,
                po.budget().clone(),
                po.metrics().clone(),
                po.keeps_requests_for_replacements(),
            ),
            zpulls: Mutex::new(ZPulls::new(po.config().zero_copy.data_validation, imm_slot)),
            po: po.clone(),
            app_id,
            customer_id,
        });
        crate::waits::register(Arc::downgrade(&state) as std::sync::Weak<dyn crate::waits::Waits>);
        let s = state.clone();
        let customer = match Customer::new(po, route, move |ev| on_event(&s, ev)) {
            Ok(c) => c,
            Err(e) => {
                po.release_imm_slot(imm_slot);
                return Err(e);
            }
        };
        Ok(KVWorker {
            state,
            // A replacement's requests are numbered apart from its predecessor's.
            next_ts: AtomicI32::new(first_timestamp(po.incarnation())),
            _customer: customer,
            imm_slot,
        })
    }

    /// Pushes `vals` for `keys` (`lens`: values per key, or `None` for an even split).
    /// Returns the timestamp to [`wait`](Self::wait) on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for unsorted/duplicate keys or lengths that do not add up;
    /// [`Error::Van`] if a message cannot be sent.
    pub fn push(&self, keys: &[Key], vals: &[V], lens: Option<&[u32]>) -> Result<Timestamp> {
        let lens = lens.unwrap_or(&[]);
        self.request(Op::Push, keys, vals, lens, RequestOptions::default())
    }

    /// Pulls the values of `keys`; after [`wait`](Self::wait), [`take_pulled`](Self::take_pulled)
    /// gives them.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn pull(&self, keys: &[Key]) -> Result<Timestamp> {
        self.request(Op::Pull, keys, &[], &[], RequestOptions::default())
    }

    /// Pushes `vals` and pulls the result of the update in one round trip (ps-lite's `ZPushPull`).
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn push_pull(&self, keys: &[Key], vals: &[V], lens: Option<&[u32]>) -> Result<Timestamp> {
        let lens = lens.unwrap_or(&[]);
        self.request(Op::PushPull, keys, vals, lens, RequestOptions::default())
    }

    /// The general form (ps-lite's `ZPush`/`ZPull`/`ZPushPull` with `cmd` and callback): `op`
    /// on `keys` (sorted, unique), with `vals` (empty for [`Op::Pull`]) and `lens` (values per
    /// key, one entry per key summing to `vals.len()`, or empty for the even split
    /// `vals.len() / keys.len()`). `options` give the application command and an optional
    /// callback; a request with a callback completes into the callback alone: it cannot be
    /// waited on. Returns the request's timestamp.
    ///
    /// # Errors
    /// As [`push`](Self::push); [`Error::InvalidArgument`] if a pull carries values or a push
    /// of keys carries none.
    pub fn request(
        &self,
        op: Op,
        keys: &[Key],
        vals: &[V],
        lens: &[u32],
        options: RequestOptions<V>,
    ) -> Result<Timestamp> {
        self.send_request(op, keys, Vals::Borrowed(vals), lens, options)
    }

    /// As [`request`](Self::request) with shared values (ps-lite's `ZPush`): the values are
    /// sliced per server and handed to the van without a copy.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub fn request_shared(
        &self,
        op: Op,
        keys: &[Key],
        vals: &SArray<V>,
        lens: &[u32],
        options: RequestOptions<V>,
    ) -> Result<Timestamp> {
        self.send_request(op, keys, Vals::Shared(vals), lens, options)
    }

    /// Pushes shared values without copying them (ps-lite's `ZPush`).
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn push_shared(
        &self,
        keys: &[Key],
        vals: &SArray<V>,
        lens: Option<&[u32]>,
    ) -> Result<Timestamp> {
        let lens = lens.unwrap_or(&[]);
        self.request_shared(Op::Push, keys, vals, lens, RequestOptions::default())
    }

    /// Checks the call, slices it by server key range, tracks it under a new timestamp and
    /// sends one part to each server involved.
    ///
    /// # Errors
    /// As [`Call::check`]; as [`Postoffice::send`] (then the request is forgotten).
    fn send_request(
        &self,
        op: Op,
        keys: &[Key],
        vals: Vals<'_, V>,
        lens: &[u32],
        options: RequestOptions<V>,
    ) -> Result<Timestamp> {
        let RequestOptions { cmd, callback } = options;
        let call = Call {
            op,
            keys,
            vals,
            lens,
            cmd,
        };
        call.check()?;
        let layout = self.state.po.layout();
        let slices = slice(&layout, call.keys, call.vals.len(), call.lens);
        // Requests long unanswered give their bytes back before this one takes some.
        self.state
            .requests
            .expire(std::time::Instant::now(), self.timeout());
        let costs = self.take_budget(&call, &slices)?;
        let ts = self.next_ts.fetch_add(1, Ordering::Relaxed);
        let label = format!(
            "timestamp {ts} ({} of {} keys)",
            call.op.name(),
            call.keys.len()
        );
        let servers = slices.iter().map(|s| s.server).collect();
        if !self
            .state
            .requests
            .open(ts, (label, call.op.name()), servers, &costs, callback)
        {
            return Ok(ts);
        }
        self.send_parts(&call, &slices, (ts, layout.epoch()))
    }

    /// Sends request `ts`'s part for each of `slices` (tracked already; sliced by the key
    /// layout of `epoch`). Returns `ts`.
    ///
    /// # Errors
    /// As [`Postoffice::send`]: the first part that could not be sent (then the request is
    /// forgotten), unless the request had already ended (its callback reported that).
    fn send_parts(
        &self,
        call: &Call<'_, V>,
        slices: &[Slice],
        (ts, epoch): (Timestamp, u64),
    ) -> Result<Timestamp> {
        for (i, s) in slices.iter().enumerate() {
            let mut part = call.part(s, ts, self.state.app_id, self.state.customer_id);
            part.meta.kv.placement = Some(crate::wire::Placement::Part {
                epoch,
                part: i as u32,
            });
            let keys = &call.keys[s.keys.clone()];
            let sent = self
                .state
                .requests
                .send_part(&self.state.po, s.server, keys, part, None);
            if let Err(e) = sent {
                // A request that already ended (a lost peer failed it) reported through its
                // callback: report it once.
                return if self.state.requests.abandon(ts) {
                    Err(e)
                } else {
                    Ok(ts)
                };
            }
        }
        Ok(ts)
    }

    /// Takes the bytes of `call`'s parts (one per slice, returned) from the process's
    /// in-flight budget, waiting for earlier requests to complete while they do not fit; a
    /// customer thread (a callback) never waits, as it settles the answers that
    /// free room.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a part larger than `PS_MAX_INFLIGHT_BYTES` (the server
    /// would not take its frame); [`Error::Timeout`] when no room was freed within
    /// `PS_TIMEOUT`.
    fn take_budget(&self, call: &Call<'_, V>, slices: &[Slice]) -> Result<Vec<u64>> {
        let budget = self.state.po.budget();
        let costs: Vec<u64> = slices.iter().map(|s| call.cost(s)).collect();
        if let Some((s, c)) = slices.iter().zip(&costs).find(|(_, &c)| c > budget.max()) {
            return Err(Error::InvalidArgument(format!(
                "the {} of {} keys would send {c} bytes to server rank {}, more than \
                 PS_MAX_INFLIGHT_BYTES ({}), the largest request a server takes: split the \
                 call, or raise PS_MAX_INFLIGHT_BYTES on every node",
                call.op.name(),
                call.keys.len(),
                s.server,
                budget.max()
            )));
        }
        let on_customer = crate::postoffice::on_customer_thread();
        budget.take(costs.iter().sum(), self.timeout(), !on_customer)?;
        Ok(costs)
    }

    /// Blocks until request `ts` completed. Pulled values stay available to
    /// [`take_pulled`](Self::take_pulled); a finished push is forgotten.
    ///
    /// # Errors
    /// [`Error::Remote`] with a server's error text; [`Error::Timeout`] naming the servers that
    /// did not answer within `PS_TIMEOUT`; [`Error::InvalidArgument`] for a timestamp that is
    /// not outstanding (already waited for, or it had a callback).
    pub fn wait(&self, ts: Timestamp) -> Result<()> {
        self.state.requests.wait(ts, self.timeout())
    }

    /// Waits for pull (or push-pull) `ts` and returns its pairs, merged in key order (`lens`
    /// filled in for every key when any server sent lens).
    ///
    /// # Errors
    /// As [`wait`](Self::wait); [`Error::Remote`] if an answer is malformed.
    pub fn take_pulled(&self, ts: Timestamp) -> Result<KVPairs<V>> {
        call::merge(self.state.requests.take_parts(ts, self.timeout())?)
    }

    /// Pulls `keys` into `out` and waits: `out.len()` must equal the total pulled length. One
    /// key into a slice of the registered pool ([`alloc`](Self::alloc)) goes through the
    /// rendezvous, straight into `out`.
    ///
    /// # Errors
    /// As [`wait`](Self::wait); [`Error::InvalidArgument`] if `out` has the wrong length (the
    /// text gives both lengths).
    pub fn pull_into(&self, keys: &[Key], out: &mut [V]) -> Result<()> {
        let bytes = std::mem::size_of_val(out);
        // The pool is reserved on first use: only a one-key pull asks for it.
        if keys.len() == 1 && self.state.po.pool()?.contains(out.as_ptr() as usize, bytes) {
            let rkey = self.state.po.pool()?.rkey();
            return self.zpull_into_slice(keys[0], out, rkey);
        }
        let ts = self.pull(keys)?;
        self.wait_into(ts, keys.len(), out)
    }

    /// Pushes `vals` and pulls the result of the update into `out`, then waits (ps-lite's
    /// `ZPushPull` with its output array): `out.len()` must equal the total pulled length.
    ///
    /// # Errors
    /// As [`push`](Self::push) and [`pull_into`](Self::pull_into).
    pub fn push_pull_into(
        &self,
        keys: &[Key],
        vals: &[V],
        lens: Option<&[u32]>,
        out: &mut [V],
    ) -> Result<()> {
        let ts = self.push_pull(keys, vals, lens)?;
        self.wait_into(ts, keys.len(), out)
    }

    /// Waits for pull `ts` (of `nkeys` keys) and copies its values, in key order, into `out`.
    fn wait_into(&self, ts: Timestamp, nkeys: usize, out: &mut [V]) -> Result<()> {
        let parts = self.state.requests.take_parts(ts, self.timeout())?;
        let total: usize = parts.iter().map(|x| x.vals.len()).sum();
        let dst: &mut [u8] = bytemuck::cast_slice_mut(out);
        if total != dst.len() {
            return Err(Error::InvalidArgument(format!(
                "pulled {} values for {nkeys} keys but the buffer holds {}",
                total as f64 / std::mem::size_of::<V>() as f64,
                out.len()
            )));
        }
        let mut at = 0;
        for part in &parts {
            dst[at..at + part.vals.len()].copy_from_slice(&part.vals);
            at += part.vals.len();
        }
        Ok(())
    }

    /// The postoffice this worker sends through.
    pub fn postoffice(&self) -> &Arc<Postoffice> {
        &self.state.po
    }

    /// `PS_TIMEOUT`: the deadline of every wait.
    fn timeout(&self) -> std::time::Duration {
        self.state.po.config().timing.timeout
    }
}

/// An event for this worker's customer: a server's answer, or rendezvous traffic.
fn on_event<V: Value>(state: &WorkerState<V>, ev: CustomerEvent) {
    match carrier::arrival(ev) {
        None => {}
        Some(Arrival::KeyValue(msg)) => state.requests.on_answer(&state.po, msg),
        Some(Arrival::Control { meta, msg }) => zpull::on_control(state, meta.sender, msg),
        Some(Arrival::Content { from, imm, content }) => {
            zpull::on_content_message(state, from, imm, &content)
        }
        Some(Arrival::Written(w)) => zpull::on_remote_write(state, w),
        Some(Arrival::PeerLost { peer, error }) => {
            // The job cannot complete (a lost peer fails it): every request ends now.
            tracing::debug!(
                "failing every pending request: {} is gone",
                crate::wire::Node::describe(peer)
            );
            state.requests.fail_all(&error);
            zpull::fail_all(state, &error);
        }
        Some(Arrival::PeerReplaced { peer, incarnation })
            if crate::wire::Node::role_of(peer) == Some(crate::wire::Role::Server) =>
        {
            let ids = (state.app_id, state.customer_id);
            let rank = crate::wire::Node::rank_of(peer);
            state
                .requests
                .on_replaced(&state.po, (rank, incarnation), ids);
        }
        Some(Arrival::PeerReplaced { .. }) => {}
        // A worker reads the layout from the postoffice when it slices.
        Some(Arrival::Layout(_)) => {}
        // Only requests reach a route of answers: the postoffice delivers none here.
        Some(Arrival::Answered { from, .. }) => tracing::warn!(
            "a key-value worker got ANSWERED from {}; dropped",
            crate::wire::Node::describe(from)
        ),
    }
}

/// The first timestamp of a worker that is the `incarnation`-th holder of its id after the
/// first: `incarnation × 2^27` (the scheduler replaces a worker id at most 15 times), so that
/// late answers to its predecessor's requests (fewer than 2^27 of them) match none of its own,
/// and servers' records of applied requests never confuse the two.
fn first_timestamp(incarnation: u32) -> i32 {
    ((incarnation % 16) << 27) as i32
}
