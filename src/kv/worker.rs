//! `KVWorker`: pushes and pulls, sliced by server key range and merged back (ps-lite's
//! `KVWorker<Val>`).

use super::carrier::{self, Arrival};
use super::keycache::Mirror;
use super::pairs::{check_shape, frame_of, view, KVPairs};
use super::request::{Callback, Op, RequestOptions};
use super::sarray::SArray;
use super::slicer::slice;
use super::value::Value;
use super::{Key, Timestamp};
use crate::error::{Error, Result};
use crate::postoffice::{Customer, Postoffice, Route};
use crate::rendezvous::{Dest, ReqAction, Requester};
use crate::sync::lock;
use crate::van::pool::PoolBuf;
use crate::van::{RemoteWrite, VanEvent};
use crate::wire::{KeyRef, Message, Meta, Node, NodeId};
use bytes::Bytes;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct Part {
    server: usize,
    keys: Bytes,
    vals: Bytes,
    lens: Bytes,
}

/// What was asked of one server: the keys (for the answer, which carries none when they are
/// the request's), and the request itself while it names a cached key list (sent again, with
/// its keys, if the server does not keep the list).
struct Asked {
    keys: Bytes,
    resend: Option<Message>,
}

struct Pending<V> {
    what: String,
    servers: Vec<usize>,
    answered: Vec<bool>,
    asked: Vec<Asked>,
    parts: Vec<Part>,
    error: Option<Error>,
    callback: Option<Callback<V>>,
}

impl<V> Pending<V> {
    fn done(&self) -> bool {
        self.answered.iter().all(|&a| a)
    }
}

struct Shared<V> {
    /// Key caching: what each server keeps for this worker, by server rank. Lock order: a
    /// mirror, then `pending`; a request to a server is prepared and sent under its mirror's
    /// lock, so each server sees requests in the order its mirror recorded them.
    mirrors: Vec<Mutex<Mirror>>,
    pending: Mutex<HashMap<Timestamp, Pending<V>>>,
    cv: Condvar,
    rv: Mutex<RvState<V>>,
    po: Arc<Postoffice>,
    app_id: i32,
    customer_id: i32,
}

/// Where a rendezvous pull's content goes.
enum Target<V> {
    /// A pool buffer the pull owns (replaced by a larger one if the value grew).
    Owned(PoolBuf<V>),
    /// A caller's slice inside the pool, valid while the caller waits (`pull_into`).
    Borrowed { addr: usize, cap: usize, rkey: u32 },
}

/// The values of a request: borrowed (copied into the frames) or shared (sliced, no copy).
enum Vals<'a, V> {
    Borrowed(&'a [V]),
    Shared(&'a SArray<V>),
}

impl<V: Value> Vals<'_, V> {
    fn len(&self) -> usize {
        match self {
            Vals::Borrowed(v) => v.len(),
            Vals::Shared(v) => v.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to do when a rendezvous pull ends.
enum Done<V> {
    Callback(Box<dyn FnOnce(Result<PoolBuf<V>>) + Send>),
    Waiter(crossbeam_channel::Sender<Result<usize>>),
}

struct RvOp<V> {
    key: Key,
    server: NodeId,
    target: Target<V>,
    done: Done<V>,
}

struct RvState<V> {
    machine: Requester,
    ops: HashMap<u32, RvOp<V>>,
}

impl<V> RvState<V> {
    /// Ends request `index` with `e`: the machine forgets it, and its op is handed back to be
    /// reported. After this no write can reach its destination (writes are copied under the
    /// same lock, for outstanding requests only).
    fn abandon(&mut self, index: u32, e: Error) -> Option<Finished<V>> {
        self.machine.cancel(index);
        self.ops.remove(&index).map(|op| Finished {
            done: op.done,
            result: Err(e),
        })
    }
}

/// A finished rendezvous pull, to be reported outside the lock.
struct Finished<V> {
    done: Done<V>,
    result: Result<(Target<V>, usize)>,
}

impl<V: Value> Finished<V> {
    fn report(self) {
        match (self.done, self.result) {
            (Done::Callback(cb), Ok((Target::Owned(buf), _))) => cb(Ok(buf)),
            (Done::Callback(cb), Ok(_)) => cb(Err(Error::InvalidArgument(
                "internal: borrowed target with callback".into(),
            ))),
            (Done::Callback(cb), Err(e)) => cb(Err(e)),
            (Done::Waiter(tx), r) => {
                let _ = tx.send(r.map(|(_, len)| len));
            }
        }
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
    po: Arc<Postoffice>,
    app_id: i32,
    customer_id: i32,
    next_ts: AtomicI32,
    shared: Arc<Shared<V>>,
    _customer: Customer,
    imm_slot: u8,
    _v: PhantomData<V>,
}

impl<V: Value> Drop for KVWorker<V> {
    fn drop(&mut self) {
        self.po.release_imm_slot(self.imm_slot);
    }
}

impl<V: Value> KVWorker<V> {
    /// Creates the worker of application `app_id` with customer id `customer_id`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if this (app, customer) pair already exists in the process.
    pub fn new(po: &Arc<Postoffice>, app_id: i32, customer_id: i32) -> Result<KVWorker<V>> {
        let imm_slot = po.register_imm_slot(Route::Worker {
            app_id,
            customer_id,
        })?;
        let cache = po.config().key_cache_keys;
        let shared = Arc::new(Shared {
            mirrors: (0..po.num_servers())
                .map(|_| Mutex::new(Mirror::new(cache)))
                .collect(),
            pending: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
            rv: Mutex::new(RvState {
                machine: Requester::with_slot(po.config().data_validation, imm_slot),
                ops: HashMap::new(),
            }),
            po: po.clone(),
            app_id,
            customer_id,
        });
        let s = shared.clone();
        let customer = match Customer::new(
            po,
            Route::Worker {
                app_id,
                customer_id,
            },
            move |ev| on_event(&s, ev),
        ) {
            Ok(c) => c,
            Err(e) => {
                po.release_imm_slot(imm_slot);
                return Err(e);
            }
        };
        Ok(KVWorker {
            po: po.clone(),
            app_id,
            customer_id,
            next_ts: AtomicI32::new(0),
            shared,
            _customer: customer,
            imm_slot,
            _v: PhantomData,
        })
    }

    /// Pushes `vals` for `keys` (`lens`: values per key, or `None` for an even split).
    /// Returns the timestamp to [`wait`](Self::wait) on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for unsorted/duplicate keys or lengths that do not add up;
    /// [`Error::Van`] if a message cannot be sent.
    pub fn push(&self, keys: &[Key], vals: &[V], lens: Option<&[u32]>) -> Result<Timestamp> {
        self.request(
            Op::Push,
            keys,
            vals,
            lens.unwrap_or(&[]),
            RequestOptions::default(),
        )
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
        self.request(
            Op::PushPull,
            keys,
            vals,
            lens.unwrap_or(&[]),
            RequestOptions::default(),
        )
    }

    /// The general form (ps-lite's `ZPush`/`ZPull`/`ZPushPull` with `cmd` and callback): `op`
    /// on `keys`, with `vals` (empty for [`Op::Pull`]) and `lens` (values per key, one per key,
    /// or empty for the even split `vals.len() / keys.len()`). `options` give the application
    /// command and an optional callback; a request with a callback completes into the callback
    /// alone: it cannot be waited on.
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
        self.request_shared(
            Op::Push,
            keys,
            vals,
            lens.unwrap_or(&[]),
            RequestOptions::default(),
        )
    }

    fn send_request(
        &self,
        op: Op,
        keys: &[Key],
        vals: Vals<'_, V>,
        lens: &[u32],
        options: RequestOptions<V>,
    ) -> Result<Timestamp> {
        let RequestOptions { cmd, callback } = options;
        let (push, pull) = (op.pushes(), op.pulls());
        if !push && !vals.is_empty() {
            return Err(Error::InvalidArgument("a pull carries no values".into()));
        }
        check_shape(keys, vals.len(), lens).map_err(Error::InvalidArgument)?;
        if push && !keys.is_empty() && vals.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "push of {} keys with no values",
                keys.len()
            )));
        }
        let slices = slice(self.po.server_key_ranges(), keys, vals.len(), lens);
        let ts = self.next_ts.fetch_add(1, Ordering::Relaxed);
        let what = format!("timestamp {ts} ({} of {} keys)", op.name(), keys.len());
        let servers: Vec<usize> = slices.iter().map(|s| s.server).collect();
        let pending = Pending {
            what,
            answered: vec![false; servers.len()],
            // Filled in as each server's request is prepared, before it is sent.
            asked: servers
                .iter()
                .map(|_| Asked {
                    keys: Bytes::new(),
                    resend: None,
                })
                .collect(),
            servers,
            parts: Vec::new(),
            error: None,
            callback,
        };
        if pending.servers.is_empty() {
            // Nothing to send: complete at once.
            if let Some(cb) = pending.callback {
                cb(Ok(KVPairs::default()));
            } else {
                lock(&self.shared.pending).insert(ts, pending);
            }
            return Ok(ts);
        }
        lock(&self.shared.pending).insert(ts, pending);
        for s in &slices {
            let l = if lens.is_empty() {
                &[][..]
            } else {
                &lens[s.keys.clone()]
            };
            let v = match (&vals, push) {
                (_, false) => Bytes::new(),
                (Vals::Borrowed(v), true) => {
                    Bytes::copy_from_slice(bytemuck::cast_slice::<V, u8>(&v[s.vals.clone()]))
                }
                (Vals::Shared(v), true) => v.frame(s.vals.clone()),
            };
            let meta = Meta {
                head: cmd,
                app_id: self.app_id,
                customer_id: self.customer_id,
                timestamp: ts,
                recver: Node::server_id(s.server),
                request: true,
                push,
                pull,
                dtype: V::DTYPE,
                ..Meta::default()
            };
            let part = Message {
                meta,
                data: vec![Bytes::new(), v, frame_of(l.to_vec())],
            };
            let sent = send_part(&self.shared, s.server, &keys[s.keys.clone()], part, None);
            if let Err(e) = sent {
                lock(&self.shared.pending).remove(&ts);
                return Err(e);
            }
        }
        Ok(ts)
    }

    /// Blocks until request `ts` completed. Pulled values stay available to
    /// [`take_pulled`](Self::take_pulled); a finished push is forgotten.
    ///
    /// # Errors
    /// [`Error::Remote`] with a server's error text; [`Error::Timeout`] naming the servers that
    /// did not answer within `PS_TIMEOUT`; [`Error::InvalidArgument`] for an unknown timestamp.
    pub fn wait(&self, ts: Timestamp) -> Result<()> {
        let mut map = self.wait_done(ts)?;
        let p = map.get_mut(&ts).ok_or_else(|| unknown(ts))?;
        if let Some(e) = p.error.take() {
            map.remove(&ts);
            return Err(e);
        }
        if p.parts.is_empty() {
            map.remove(&ts);
        }
        Ok(())
    }

    /// Waits for pull (or push-pull) `ts` and returns its pairs, merged in key order.
    ///
    /// # Errors
    /// As [`wait`](Self::wait); [`Error::Remote`] if an answer is malformed.
    pub fn take_pulled(&self, ts: Timestamp) -> Result<KVPairs<V>> {
        let mut map = self.wait_done(ts)?;
        let p = map.remove(&ts).ok_or_else(|| unknown(ts))?;
        drop(map);
        if let Some(e) = p.error {
            return Err(e);
        }
        merge(p.parts)
    }

    /// Pulls `keys` into `out` and waits: `out.len()` must equal the total pulled length.
    ///
    /// # Errors
    /// As [`wait`](Self::wait); [`Error::InvalidArgument`] if `out` has the wrong length (the
    /// text gives both lengths).
    pub fn pull_into(&self, keys: &[Key], out: &mut [V]) -> Result<()> {
        let bytes = std::mem::size_of_val(out);
        if keys.len() == 1 && self.po.pool()?.contains(out.as_ptr() as usize, bytes) {
            let pool = self.po.pool()?;
            let target = Target::Borrowed {
                addr: out.as_mut_ptr() as usize,
                cap: bytes,
                rkey: pool.rkey(),
            };
            let len = self.zpull_blocking(keys[0], target)?;
            if len != out.len() {
                return Err(Error::InvalidArgument(format!(
                    "pulled {len} values for 1 keys but the buffer holds {}",
                    out.len()
                )));
            }
            return Ok(());
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
        let mut map = self.wait_done(ts)?;
        let p = map.remove(&ts).ok_or_else(|| unknown(ts))?;
        drop(map);
        if let Some(e) = p.error {
            return Err(e);
        }
        let total: usize = p.parts.iter().map(|x| x.vals.len()).sum();
        let dst: &mut [u8] = bytemuck::cast_slice_mut(out);
        if total != dst.len() {
            return Err(Error::InvalidArgument(format!(
                "pulled {} values for {nkeys} keys but the buffer holds {}",
                total as f64 / std::mem::size_of::<V>() as f64,
                out.len()
            )));
        }
        let mut at = 0;
        for part in &p.parts {
            dst[at..at + part.vals.len()].copy_from_slice(&part.vals);
            at += part.vals.len();
        }
        Ok(())
    }

    fn wait_done(&self, ts: Timestamp) -> Result<MutexGuard<'_, HashMap<Timestamp, Pending<V>>>> {
        let timeout = self.po.config().timeout;
        let deadline = Instant::now() + timeout;
        let mut map = lock(&self.shared.pending);
        loop {
            let p = map.get(&ts).ok_or_else(|| unknown(ts))?;
            if p.done() {
                return Ok(map);
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<String> = p
                    .servers
                    .iter()
                    .zip(&p.answered)
                    .filter(|(_, &a)| !a)
                    .map(|(&s, _)| Node::describe(Node::server_id(s)))
                    .collect();
                let msg = format!(
                    "{}: no answer within {:.0} s (PS_TIMEOUT) from {}",
                    p.what,
                    timeout.as_secs_f64(),
                    missing.join(", ")
                );
                map.remove(&ts);
                return Err(Error::Timeout(msg));
            }
            map = self
                .shared
                .cv
                .wait_timeout(map, (deadline - now).min(Duration::from_millis(200)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The postoffice this worker sends through.
    pub fn postoffice(&self) -> &Arc<Postoffice> {
        &self.po
    }

    /// A buffer of `len` values from this node's registered memory pool: the destination of
    /// zero-copy pulls ([`zpull`](Self::zpull), or [`pull_into`](Self::pull_into) of one key).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the pool (`PS_POOL_BYTES`) is exhausted.
    pub fn alloc(&self, len: usize) -> Result<PoolBuf<V>> {
        self.po.pool()?.alloc(len)
    }

    /// Pulls `key` through the rendezvous (TF contrib/verbs zero-copy protocol, see
    /// [`crate::rendezvous`]) into `buf`, then calls `done` with the buffer, its length set to
    /// the value's. If the value is longer than `buf` holds, a larger pool buffer replaces it.
    /// In steady state this is one request and one write into `buf` (on the RDMA van, without a
    /// copy); the first pull, and each change of the value's length, costs one meta-data round
    /// trip. `done` runs on the worker's customer thread.
    ///
    /// # Errors
    /// [`Error::Van`] if the request cannot be sent (then `done` is not called). Server errors
    /// (ERROR_STATUS) reach `done` as [`Error::Remote`].
    pub fn zpull(
        &self,
        key: Key,
        buf: PoolBuf<V>,
        done: impl FnOnce(Result<PoolBuf<V>>) + Send + 'static,
    ) -> Result<()> {
        self.zpull_start(key, Target::Owned(buf), Done::Callback(Box::new(done)))
            .map(|_| ())
    }

    /// [`zpull`](Self::zpull) and wait, with the `PS_TIMEOUT` deadline.
    ///
    /// # Errors
    /// As [`zpull`](Self::zpull); [`Error::Timeout`] naming the server.
    pub fn zpull_wait(&self, key: Key, buf: PoolBuf<V>) -> Result<PoolBuf<V>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let index = self.zpull_start(
            key,
            Target::Owned(buf),
            Done::Callback(Box::new(move |r| {
                let _ = tx.send(r);
            })),
        )?;
        let timeout = self.po.config().timeout;
        rx.recv_timeout(timeout)
            .unwrap_or_else(|_| Err(self.zpull_timeout(key, index)))
    }

    /// Meta-data round trips (META_DATA_RESPONSE) the rendezvous needed so far for `key`: 1
    /// after the first pull, +1 per change of the value's length.
    pub fn meta_round_trips(&self, key: Key) -> u64 {
        let server = self.server_for(key);
        lock(&self.shared.rv).machine.round_trips(server, key)
    }

    fn zpull_blocking(&self, key: Key, target: Target<V>) -> Result<usize> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let index = self.zpull_start(key, target, Done::Waiter(tx))?;
        let timeout = self.po.config().timeout;
        rx.recv_timeout(timeout)
            .unwrap_or_else(|_| Err(self.zpull_timeout(key, index)))
    }

    /// The id of the server owning `key`.
    fn server_for(&self, key: Key) -> NodeId {
        Node::server_id(crate::postoffice::range::server_of(
            self.po.server_key_ranges(),
            key,
        ))
    }

    fn zpull_timeout(&self, key: Key, index: u32) -> Error {
        // After this, no write can touch the destination: writes are copied under the same lock.
        let mut st = lock(&self.shared.rv);
        st.machine.cancel(index);
        let server = st.ops.remove(&index).map(|op| op.server);
        drop(st);
        Error::Timeout(format!(
            "zero-copy pull of key {key}: no answer within {:.0} s (PS_TIMEOUT) from {}",
            self.po.config().timeout.as_secs_f64(),
            server.map_or_else(|| "its server".to_string(), Node::describe)
        ))
    }

    fn zpull_start(&self, key: Key, target: Target<V>, done: Done<V>) -> Result<u32> {
        let server = self.server_for(key);
        let step = self.next_ts.fetch_add(1, Ordering::Relaxed) as i64;
        let mut st = lock(&self.shared.rv);
        let (index, actions) = st.machine.start(server, key, step, V::DTYPE);
        st.ops.insert(
            index,
            RvOp {
                key,
                server,
                target,
                done,
            },
        );
        finish(&self.shared, st, actions);
        Ok(index)
    }
}

/// Carries out the requester's actions; returns the pulls that ended.
fn drive<V: Value>(
    shared: &Shared<V>,
    st: &mut RvState<V>,
    mut actions: Vec<ReqAction>,
) -> Vec<Finished<V>> {
    let mut finished = Vec::new();
    while let Some(a) = (!actions.is_empty()).then(|| actions.remove(0)) {
        match a {
            ReqAction::Allocate { index, bytes } => {
                let Some(op) = st.ops.get_mut(&index) else {
                    continue;
                };
                let dest = match &mut op.target {
                    Target::Owned(buf) if buf.capacity_bytes() as u64 >= bytes => Ok(()),
                    Target::Owned(buf) => {
                        let len = (bytes as usize).div_ceil(std::mem::size_of::<V>());
                        shared
                            .po
                            .pool()
                            .and_then(|p| p.alloc::<V>(len))
                            .map(|b| *buf = b)
                    }
                    Target::Borrowed { cap, .. } if *cap as u64 >= bytes => Ok(()),
                    Target::Borrowed { cap, .. } => Err(Error::InvalidArgument(format!(
                        "key {}: the value is {bytes} bytes but the buffer holds {cap}",
                        op.key
                    ))),
                }
                .map(|()| match &op.target {
                    Target::Owned(buf) => Dest {
                        addr: buf.addr(),
                        rkey: buf.rkey(),
                        capacity: buf.capacity_bytes() as u64,
                    },
                    Target::Borrowed { addr, cap, rkey } => Dest {
                        addr: *addr as u64,
                        rkey: *rkey,
                        capacity: *cap as u64,
                    },
                });
                match dest {
                    Ok(d) => actions.extend(st.machine.allocated(index, d)),
                    Err(e) => finished.extend(st.abandon(index, e)),
                }
            }
            ReqAction::Send { to, msg } => {
                let meta = Meta {
                    app_id: shared.app_id,
                    customer_id: shared.customer_id,
                    recver: to,
                    request: true,
                    pull: true,
                    dtype: V::DTYPE,
                    ..Meta::default()
                };
                let index = msg.request_index();
                if let Err(e) = shared.po.send(carrier::control(meta, &msg)) {
                    finished.extend(st.abandon(index, e));
                }
            }
            ReqAction::Complete { index, meta } => {
                if let Some(mut op) = st.ops.remove(&index) {
                    let len = meta.len as usize;
                    let result = match &mut op.target {
                        Target::Owned(buf) => buf.set_len(len),
                        Target::Borrowed { .. } => Ok(()),
                    };
                    finished.push(Finished {
                        done: op.done,
                        result: result.map(|()| (op.target, len)),
                    });
                }
            }
            ReqAction::Fail { index, error } => {
                if let Some(op) = st.ops.remove(&index) {
                    let e = Error::Remote {
                        node: Node::describe(op.server),
                        message: format!("zero-copy pull of key {}: {error}", op.key),
                    };
                    finished.push(Finished {
                        done: op.done,
                        result: Err(e),
                    });
                }
            }
        }
    }
    finished
}

/// An RDMA write of a rendezvous pull's content landed in its destination: nothing to copy.
fn on_remote_write<V: Value>(shared: &Shared<V>, w: RemoteWrite) {
    let RemoteWrite { from, imm, len } = w;
    let len = u64::from(len);
    let mut st = lock(&shared.rv);
    let crc = match (shared.po.config().data_validation, st.ops.get(&imm)) {
        (true, Some(op)) if op.server == from => {
            let (addr, cap) = match &op.target {
                Target::Owned(buf) => (buf.addr() as usize, buf.capacity_bytes()),
                Target::Borrowed { addr, cap, .. } => (*addr, *cap),
            };
            // SAFETY: the destination is ours while the request is outstanding (under this
            // lock); `len` is checked against its capacity first.
            (len as usize <= cap).then(|| {
                crc32c::crc32c(unsafe {
                    std::slice::from_raw_parts(addr as *const u8, len as usize)
                })
            })
        }
        _ => None,
    };
    let actions = st.machine.on_write(from, imm, len, crc);
    finish(shared, st, actions);
}

/// A rendezvous pull's content arrived as a message (the van cannot write): copy it into the
/// destination.
fn on_content_message<V: Value>(shared: &Shared<V>, from: NodeId, imm: u32, content: &[u8]) {
    let len = content.len();
    let mut st = lock(&shared.rv);
    if let Some(op) = st.ops.get_mut(&imm) {
        if op.server == from {
            match &mut op.target {
                Target::Owned(buf) if len <= buf.capacity_bytes() => {
                    buf.chunk_bytes_mut()[..len].copy_from_slice(content)
                }
                // SAFETY: the caller of pull_into holds this slice of `cap` bytes until its
                // request ends, which only happens under this lock.
                Target::Borrowed { addr, cap, .. } if len <= *cap => unsafe {
                    std::ptr::copy_nonoverlapping(content.as_ptr(), *addr as *mut u8, len)
                },
                _ => {}
            }
        }
    }
    let crc = shared
        .po
        .config()
        .data_validation
        .then(|| crc32c::crc32c(content));
    let actions = st.machine.on_write(from, imm, len as u64, crc);
    finish(shared, st, actions);
}

/// Drives the requester's `actions`, then reports the pulls that ended, outside the lock.
fn finish<V: Value>(
    shared: &Shared<V>,
    mut st: MutexGuard<'_, RvState<V>>,
    actions: Vec<ReqAction>,
) {
    let finished = drive(shared, &mut st, actions);
    drop(st);
    for f in finished {
        f.report();
    }
}

/// Sends `part` (a request's meta and its values and lens frames, frames 1 and 2) to server
/// `server` with `keys`, under that server's mirror: the mirror decides whether the keys travel
/// or a digest of a list the server keeps, after forgetting `stale` (a list the server said it
/// does not keep). Records in the pending request what was asked, before sending. A failed send
/// leaves the mirror not counting on a registration the server never got.
///
/// # Errors
/// As [`Postoffice::send`]; an unknown server rank.
fn send_part<V: Value>(
    shared: &Shared<V>,
    server: usize,
    keys: &[Key],
    part: Message,
    stale: Option<u64>,
) -> Result<()> {
    let mirror = shared
        .mirrors
        .get(server)
        .ok_or_else(|| Error::InvalidArgument(format!("internal: no server rank {server}")))?;
    let mut mirror = lock(mirror);
    if let Some(d) = stale {
        mirror.forget(d);
    }
    let p = mirror.prepare(keys);
    let registered = match p.key_ref {
        Some(KeyRef::Register { digest, .. }) => Some(digest),
        _ => None,
    };
    let Message { mut meta, data } = part;
    meta.keys = p.key_ref;
    let keys_frame = if p.send { p.keys.clone() } else { Bytes::new() };
    let msg = Message {
        meta,
        data: vec![
            keys_frame,
            data.get(1).cloned().unwrap_or_default(),
            data.get(2).cloned().unwrap_or_default(),
        ],
    };
    let asked = Asked {
        keys: p.keys,
        resend: (!p.send).then(|| msg.clone()),
    };
    if let Some(pd) = lock(&shared.pending).get_mut(&msg.meta.timestamp) {
        if let Some(slot) = pd.servers.iter().position(|&s| s == server) {
            pd.asked[slot] = asked;
        }
    }
    shared.po.send(msg).map(|_| ()).inspect_err(|_| {
        if let Some(d) = registered {
            mirror.forget(d);
        }
    })
}

/// The server does not keep the key list `req` named (a `Cached` request): send it again,
/// with `keys`.
///
/// # Errors
/// When it cannot be sent.
fn resend_with_keys<V: Value>(
    shared: &Shared<V>,
    server: usize,
    keys: &[u8],
    req: Message,
) -> Result<()> {
    let Some(KeyRef::Cached { digest }) = req.meta.keys else {
        return Err(Error::InvalidArgument(
            "internal: only a request naming a cached key list is sent again".into(),
        ));
    };
    let keys = view::<Key>(keys, "keys").map_err(Error::InvalidArgument)?;
    send_part(shared, server, &keys, req, Some(digest))
}

fn unknown(ts: Timestamp) -> Error {
    Error::InvalidArgument(format!(
        "timestamp {ts} is not outstanding (already waited for, or it had a callback)"
    ))
}

/// What one server's answer to a request brought.
enum Outcome {
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

/// An event for this worker's customer: a server's answer, or rendezvous traffic.
fn on_event<V: Value>(shared: &Shared<V>, ev: VanEvent) {
    match carrier::arrival(ev) {
        None => {}
        Some(Arrival::KeyValue(msg)) => on_answer(shared, msg),
        Some(Arrival::Control { meta, msg }) => {
            // META_DATA_RESPONSE or ERROR_STATUS.
            let mut st = lock(&shared.rv);
            let actions = st.machine.on_message(meta.sender, msg);
            finish(shared, st, actions);
        }
        Some(Arrival::Content { from, imm, content }) => {
            on_content_message(shared, from, imm, &content)
        }
        Some(Arrival::Written(w)) => on_remote_write(shared, w),
    }
}

fn on_answer<V: Value>(shared: &Shared<V>, msg: Message) {
    let (ts, from) = (msg.meta.timestamp, msg.meta.sender);
    let server = Node::rank_of(from);
    if let Some(KeyRef::Unknown { .. }) = msg.meta.keys {
        // The server keeps no such list: nothing was applied; ask again with the keys.
        let asked = lock(&shared.pending).get_mut(&ts).and_then(|p| {
            let slot = p.servers.iter().position(|&s| s == server)?;
            let a = &mut p.asked[slot];
            a.resend.take().map(|req| (a.keys.clone(), req))
        });
        let outcome = match asked {
            Some((keys, req)) => match resend_with_keys(shared, server, &keys, req) {
                Ok(()) => return,
                Err(e) => Outcome::Failed(e),
            },
            None => Outcome::Failed(Error::Remote {
                node: Node::describe(from),
                message: "answered \"unknown key list\" to a request that named none".into(),
            }),
        };
        settle(shared, ts, server, outcome);
        return;
    }
    let outcome = if let Some(e) = msg.meta.error {
        Outcome::Failed(Error::Remote {
            node: Node::describe(from),
            message: e,
        })
    } else if msg.meta.pull {
        let as_requested = msg.meta.keys == Some(KeyRef::AsRequested);
        let mut it = msg.data.into_iter();
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
    } else {
        Outcome::Pushed
    };
    settle(shared, ts, server, outcome);
}

/// Records server `server`'s outcome for request `ts`; completes the request (its waiter or
/// callback) once every server involved answered.
fn settle<V: Value>(shared: &Shared<V>, ts: Timestamp, server: usize, outcome: Outcome) {
    let finished = {
        let mut map = lock(&shared.pending);
        let Some(p) = map.get_mut(&ts) else {
            tracing::debug!(
                "late answer for timestamp {ts} from {}",
                Node::describe(Node::server_id(server))
            );
            return;
        };
        let Some(slot) = p.servers.iter().position(|&s| s == server) else {
            tracing::warn!(
                "answer for {} from {}, which was not asked",
                p.what,
                Node::describe(Node::server_id(server))
            );
            return;
        };
        if p.answered[slot] {
            return;
        }
        p.answered[slot] = true;
        p.asked[slot].resend = None;
        match outcome {
            Outcome::Failed(e) => {
                p.error.get_or_insert(e);
            }
            Outcome::Pushed => {}
            Outcome::Pulled { keys, vals, lens } => p.parts.push(Part {
                server,
                keys: keys.unwrap_or_else(|| p.asked[slot].keys.clone()),
                vals,
                lens,
            }),
        }
        if !p.done() {
            return;
        }
        p.parts.sort_by_key(|x| x.server);
        if p.callback.is_some() {
            map.remove(&ts)
        } else {
            None
        }
    };
    shared.cv.notify_all();
    if let Some(mut p) = finished {
        if let Some(cb) = p.callback.take() {
            let r = match p.error {
                Some(e) => Err(e),
                None => merge(p.parts),
            };
            cb(r);
        }
    }
}

fn merge<V: Value>(parts: Vec<Part>) -> Result<KVPairs<V>> {
    let mut out = KVPairs::default();
    let bad = |server: usize, e: String| Error::Remote {
        node: Node::describe(Node::server_id(server)),
        message: format!("malformed answer: {e}"),
    };
    let any_lens = parts.iter().any(|p| !p.lens.is_empty());
    for p in &parts {
        let keys = view::<Key>(&p.keys, "keys").map_err(|e| bad(p.server, e))?;
        let vals = view::<V>(&p.vals, "values").map_err(|e| bad(p.server, e))?;
        let lens = view::<u32>(&p.lens, "lens").map_err(|e| bad(p.server, e))?;
        check_shape(&keys, vals.len(), &lens).map_err(|e| bad(p.server, e))?;
        if any_lens {
            if lens.is_empty() {
                let w = if keys.is_empty() {
                    0
                } else {
                    (vals.len() / keys.len()) as u32
                };
                out.lens.extend(std::iter::repeat_n(w, keys.len()));
            } else {
                out.lens.extend_from_slice(&lens);
            }
        }
        out.keys.extend_from_slice(&keys);
        out.vals.extend_from_slice(&vals);
    }
    Ok(out)
}
