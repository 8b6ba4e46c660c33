//! The requester's driver of zero-copy (rendezvous) pulls: TF contrib/verbs' meta-data-cache
//! rendezvous ([`crate::rendezvous::Requester`], sans-IO) carried out on a `KVWorker`.
//!
//! The caller's thread starts a pull ([`KVWorker::zpull`] and its blocking forms); the customer
//! thread feeds the requester what arrives through the [`crate::kv::carrier`]:
//! META_DATA_RESPONSE / ERROR_STATUS ([`on_control`]), content as a message
//! ([`on_content_message`], copied into the destination) or as an RDMA write that already
//! landed ([`on_remote_write`]). The requester's actions are carried out here
//! ([`run_actions`]): allocate a destination (from the registered pool, growing the pull's own
//! buffer), send a TENSOR_REQUEST / TENSOR_RE_REQUEST, complete or fail a pull.
//!
//! **Lock:** one mutex, [`ZPulls`], alone (never with the tracker's locks). Content is copied
//! into a destination only under it and only for an outstanding pull, and a pull ends (timeout,
//! failure, completion) under it, so after a pull ended nothing writes into its destination.
//! Ended pulls are reported after the lock is released.

use super::{KVWorker, WorkerState};
use crate::error::{Error, Result};
use crate::kv::carrier;
use crate::kv::value::Value;
use crate::kv::Key;
use crate::rendezvous::{Dest, ReqAction, Requester, RvMessage, TensorMeta};
use crate::sync::lock;
use crate::van::pool::PoolBuf;
use crate::van::RemoteWrite;
use crate::wire::{Meta, Node, NodeId};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// Where a rendezvous pull's content goes.
pub(super) enum Destination<V> {
    /// A pool buffer the pull owns (replaced by a larger one if the value grew).
    Owned(PoolBuf<V>),
    /// A caller's slice of `cap` bytes at `addr` inside the pool (memory region `rkey`), valid
    /// while the caller waits (`pull_into`).
    Borrowed { addr: usize, cap: usize, rkey: u32 },
}

impl<V: Value> Destination<V> {
    /// Address and bytes of the destination.
    fn span(&self) -> (usize, usize) {
        match self {
            Destination::Owned(buf) => (buf.addr() as usize, buf.capacity_bytes()),
            Destination::Borrowed { addr, cap, .. } => (*addr, *cap),
        }
    }

    /// The destination as the request names it to the server.
    fn dest(&self) -> Dest {
        match self {
            Destination::Owned(buf) => Dest {
                addr: buf.addr(),
                rkey: buf.rkey(),
                capacity: buf.capacity_bytes() as u64,
            },
            Destination::Borrowed { addr, cap, rkey } => Dest {
                addr: *addr as u64,
                rkey: *rkey,
                capacity: *cap as u64,
            },
        }
    }
}

/// What a pull ends with: its destination and the value's length in values, or the error.
type Landed<V> = Result<(Destination<V>, usize)>;

/// Called once when a pull ends, after the [`ZPulls`] lock is released (on the customer
/// thread, or on the caller's when the request cannot be sent).
type OnEnd<V> = Box<dyn FnOnce(Landed<V>) + Send>;

/// One outstanding pull.
struct ZPull<V> {
    key: Key,
    server: NodeId,
    dest: Destination<V>,
    on_end: OnEnd<V>,
}

/// A pull that ended, to be reported outside the lock.
struct Ended<V> {
    on_end: OnEnd<V>,
    result: Landed<V>,
}

impl<V> Ended<V> {
    fn report(self) {
        (self.on_end)(self.result)
    }
}

/// The requester and its outstanding pulls by request index (the write's immediate).
pub(super) struct ZPulls<V> {
    requester: Requester,
    pulls: HashMap<u32, ZPull<V>>,
}

impl<V: Value> ZPulls<V> {
    /// No pull outstanding; checksums when `data_validation` (`PS_DATA_VALIDATION`); request
    /// indices carry immediate slot `imm_slot`.
    pub(super) fn new(data_validation: bool, imm_slot: u8) -> ZPulls<V> {
        ZPulls {
            requester: Requester::with_slot(data_validation, imm_slot),
            pulls: HashMap::new(),
        }
    }

    /// Ends request `index` with `e`: the requester forgets it, and the pull is handed back to
    /// be reported. After this no write can reach its destination (writes are copied under the
    /// same lock, for outstanding requests only).
    fn abandon(&mut self, index: u32, e: Error) -> Option<Ended<V>> {
        self.requester.cancel(index);
        self.pulls.remove(&index).map(|p| Ended {
            on_end: p.on_end,
            result: Err(e),
        })
    }

    /// Makes the destination of request `index` hold `bytes` (growing an owned buffer from the
    /// pool of `state`); `None` when the request is not outstanding.
    ///
    /// # Errors
    /// The pool is exhausted; a borrowed slice is too small (naming key and both sizes).
    fn allocate(&mut self, state: &WorkerState<V>, index: u32, bytes: u64) -> Option<Result<Dest>> {
        let pull = self.pulls.get_mut(&index)?;
        let grown = match &mut pull.dest {
            Destination::Owned(buf) if buf.capacity_bytes() as u64 >= bytes => Ok(()),
            Destination::Owned(buf) => {
                let len = (bytes as usize).div_ceil(std::mem::size_of::<V>());
                state
                    .po
                    .pool()
                    .and_then(|p| p.alloc::<V>(len))
                    .map(|b| *buf = b)
            }
            Destination::Borrowed { cap, .. } if *cap as u64 >= bytes => Ok(()),
            Destination::Borrowed { cap, .. } => Err(Error::InvalidArgument(format!(
                "key {}: the value is {bytes} bytes but the buffer holds {cap}",
                pull.key
            ))),
        };
        Some(grown.map(|()| pull.dest.dest()))
    }

    /// Request `index` completed with `meta`: its destination holds the value.
    fn complete(&mut self, index: u32, meta: TensorMeta) -> Option<Ended<V>> {
        let mut pull = self.pulls.remove(&index)?;
        let len = meta.len as usize;
        let result = match &mut pull.dest {
            Destination::Owned(buf) => buf.set_len(len),
            Destination::Borrowed { .. } => Ok(()),
        };
        Some(Ended {
            on_end: pull.on_end,
            result: result.map(|()| (pull.dest, len)),
        })
    }

    /// Request `index` failed at its server (ERROR_STATUS) or in the requester.
    fn fail(&mut self, index: u32, error: String) -> Option<Ended<V>> {
        let pull = self.pulls.remove(&index)?;
        let e = Error::Remote {
            node: Node::describe(pull.server),
            message: format!("zero-copy pull of key {}: {error}", pull.key),
        };
        Some(Ended {
            on_end: pull.on_end,
            result: Err(e),
        })
    }
}

/// Carries out the requester's actions, in order (an allocation's actions after those queued
/// before it); returns the pulls that ended.
fn run_actions<V: Value>(
    state: &WorkerState<V>,
    st: &mut ZPulls<V>,
    actions: Vec<ReqAction>,
) -> Vec<Ended<V>> {
    let mut ended = Vec::new();
    let mut queue = VecDeque::from(actions);
    while let Some(a) = queue.pop_front() {
        match a {
            ReqAction::Allocate { index, bytes } => match st.allocate(state, index, bytes) {
                None => {}
                Some(Ok(d)) => queue.extend(st.requester.allocated(index, d)),
                Some(Err(e)) => ended.extend(st.abandon(index, e)),
            },
            ReqAction::Send { to, msg } => {
                let index = msg.request_index();
                if let Err(e) = send_control(state, to, &msg) {
                    ended.extend(st.abandon(index, e));
                }
            }
            ReqAction::Complete { index, meta } => ended.extend(st.complete(index, meta)),
            ReqAction::Fail { index, error } => ended.extend(st.fail(index, error)),
        }
    }
    ended
}

/// Sends TENSOR_REQUEST / TENSOR_RE_REQUEST `msg` to server `to`.
///
/// # Errors
/// As [`crate::Postoffice::send`].
fn send_control<V: Value>(state: &WorkerState<V>, to: NodeId, msg: &RvMessage) -> Result<()> {
    let meta = Meta {
        tag: crate::wire::RequestTag {
            app_id: state.app_id,
            customer_id: state.customer_id,
            ..Default::default()
        },
        recver: to,
        request: true,
        kv: crate::wire::KvHeader {
            pull: true,
            dtype: V::DTYPE,
            ..Default::default()
        },
        ..Meta::default()
    };
    state.po.send(carrier::control(meta, msg)).map(|_| ())
}

/// Carries out the requester's `actions`, then reports the pulls that ended, outside the lock.
fn run_and_report<V: Value>(
    state: &WorkerState<V>,
    mut st: MutexGuard<'_, ZPulls<V>>,
    actions: Vec<ReqAction>,
) {
    let ended = run_actions(state, &mut st, actions);
    drop(st);
    for e in ended {
        e.report();
    }
}

/// Every outstanding pull ends with `error` (a peer is gone; see
/// [`CustomerEvent::PeerLost`](crate::postoffice::CustomerEvent::PeerLost)).
pub(super) fn fail_all<V: Value>(state: &WorkerState<V>, error: &Error) {
    let mut st = lock(&state.zpulls);
    let indices: Vec<u32> = st.pulls.keys().copied().collect();
    let ended: Vec<Ended<V>> = indices
        .into_iter()
        .filter_map(|i| st.abandon(i, error.clone()))
        .collect();
    drop(st);
    for e in ended {
        e.report();
    }
}

/// A META_DATA_RESPONSE or ERROR_STATUS from server `from`.
pub(super) fn on_control<V: Value>(state: &WorkerState<V>, from: NodeId, msg: RvMessage) {
    let mut st = lock(&state.zpulls);
    let actions = st.requester.on_message(from, msg);
    run_and_report(state, st, actions);
}

/// An RDMA write of a rendezvous pull's content landed in its destination: nothing to copy.
pub(super) fn on_remote_write<V: Value>(state: &WorkerState<V>, w: RemoteWrite) {
    let RemoteWrite { from, imm, len } = w;
    let len = u64::from(len);
    let mut st = lock(&state.zpulls);
    let crc = match (
        state.po.config().zero_copy.data_validation,
        st.pulls.get(&imm),
    ) {
        (true, Some(pull)) if pull.server == from => {
            let (addr, cap) = pull.dest.span();
            // SAFETY: the destination is ours while the request is outstanding (under this
            // lock); `len` is checked against its capacity first.
            (len as usize <= cap).then(|| {
                crate::wire::crc32c(&[unsafe {
                    std::slice::from_raw_parts(addr as *const u8, len as usize)
                }])
            })
        }
        _ => None,
    };
    let actions = st.requester.on_write(from, imm, len, crc);
    run_and_report(state, st, actions);
}

/// A rendezvous pull's content arrived as a message (the van cannot write): copy it into the
/// destination.
pub(super) fn on_content_message<V: Value>(
    state: &WorkerState<V>,
    from: NodeId,
    imm: u32,
    content: &[u8],
) {
    let len = content.len();
    let mut st = lock(&state.zpulls);
    if let Some(pull) = st.pulls.get_mut(&imm) {
        if pull.server == from {
            match &mut pull.dest {
                Destination::Owned(buf) if len <= buf.capacity_bytes() => {
                    buf.chunk_bytes_mut()[..len].copy_from_slice(content)
                }
                // SAFETY: the caller of pull_into holds this slice of `cap` bytes until its
                // request ends, which only happens under this lock.
                Destination::Borrowed { addr, cap, .. } if len <= *cap => unsafe {
                    std::ptr::copy_nonoverlapping(content.as_ptr(), *addr as *mut u8, len)
                },
                _ => {}
            }
        }
    }
    let crc = state
        .po
        .config()
        .zero_copy
        .data_validation
        .then(|| crate::wire::crc32c(&[content]));
    let actions = st.requester.on_write(from, imm, len as u64, crc);
    run_and_report(state, st, actions);
}

/// The owned buffer a callback pull ([`KVWorker::zpull`]) ends with.
fn owned<V>(landed: (Destination<V>, usize)) -> Result<PoolBuf<V>> {
    match landed.0 {
        Destination::Owned(buf) => Ok(buf),
        Destination::Borrowed { .. } => Err(Error::InvalidArgument(
            "internal: borrowed target with callback".into(),
        )),
    }
}

impl<V: Value> KVWorker<V> {
    /// A buffer of `len` values from this node's registered memory pool: the destination of
    /// zero-copy pulls ([`zpull`](Self::zpull), or [`pull_into`](Self::pull_into) of one key).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the pool (`PS_POOL_BYTES`) is exhausted.
    pub fn alloc(&self, len: usize) -> Result<PoolBuf<V>> {
        self.state.po.pool()?.alloc(len)
    }

    /// Pulls `key` through the rendezvous (TF contrib/verbs zero-copy protocol, see
    /// [`crate::rendezvous`]) into `buf`, then calls `done` with the buffer, its length set to
    /// the value's. If the value is longer than `buf` holds, a larger pool buffer replaces it.
    /// In steady state this is one request and one write into `buf` (on the RDMA van, without a
    /// copy); the first pull, and each change of the value's length, costs one meta-data round
    /// trip. `done` runs on the worker's customer thread.
    ///
    /// # Errors
    /// Every failure reaches `done`: server errors (ERROR_STATUS) as [`Error::Remote`]; a
    /// request that cannot be sent as [`Error::Van`], at once, on this thread; an exhausted
    /// pool (for a grown value) as [`Error::InvalidArgument`]. The call itself returns
    /// `Ok(())` once the pull is started.
    pub fn zpull(
        &self,
        key: Key,
        buf: PoolBuf<V>,
        done: impl FnOnce(Result<PoolBuf<V>>) + Send + 'static,
    ) -> Result<()> {
        let on_end: OnEnd<V> = Box::new(move |r| done(r.and_then(owned)));
        self.zpull_start(key, Destination::Owned(buf), on_end)
            .map(|_| ())
    }

    /// [`zpull`](Self::zpull) and wait, with the `PS_TIMEOUT` deadline.
    ///
    /// # Errors
    /// As [`zpull`](Self::zpull); [`Error::Timeout`] naming the server.
    pub fn zpull_wait(&self, key: Key, buf: PoolBuf<V>) -> Result<PoolBuf<V>> {
        self.zpull_and_wait(key, Destination::Owned(buf))
            .and_then(owned)
    }

    /// Meta-data round trips (META_DATA_RESPONSE) the rendezvous needed so far for `key`: 1
    /// after the first pull, +1 per change of the value's length.
    pub fn meta_round_trips(&self, key: Key) -> u64 {
        let server = self.server_for(key);
        lock(&self.state.zpulls).requester.round_trips(server, key)
    }

    /// Pulls the one key `key` through the rendezvous straight into `out`, a slice of the
    /// registered pool (`pull_into`'s zero-copy path), and waits.
    ///
    /// # Errors
    /// As [`zpull_wait`](Self::zpull_wait); [`Error::InvalidArgument`] if the value is not
    /// `out.len()` values long.
    pub(super) fn zpull_into_slice(&self, key: Key, out: &mut [V], rkey: u32) -> Result<()> {
        let dest = Destination::Borrowed {
            addr: out.as_mut_ptr() as usize,
            cap: std::mem::size_of_val(out),
            rkey,
        };
        let (_, len) = self.zpull_and_wait(key, dest)?;
        if len != out.len() {
            return Err(Error::InvalidArgument(format!(
                "pulled {len} values for 1 keys but the buffer holds {}",
                out.len()
            )));
        }
        Ok(())
    }

    /// Starts a pull of `key` into `dest` and waits for it to end, with the `PS_TIMEOUT`
    /// deadline (then the pull is cancelled: nothing writes into `dest` afterwards).
    ///
    /// # Errors
    /// As [`zpull`](Self::zpull); [`Error::Timeout`] naming the server.
    fn zpull_and_wait(&self, key: Key, dest: Destination<V>) -> Landed<V> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let on_end: OnEnd<V> = Box::new(move |r| {
            let _ = tx.send(r);
        });
        let index = self.zpull_start(key, dest, on_end)?;
        let timeout = self.state.po.config().timing.timeout;
        rx.recv_timeout(timeout)
            .unwrap_or_else(|_| Err(self.zpull_timeout(key, index)))
    }

    /// The id of the server owning `key` in the current key layout.
    fn server_for(&self, key: Key) -> NodeId {
        self.state.po.layout().owner_of(key)
    }

    /// Cancels pull `index` of `key` at its deadline; the timeout error naming its server.
    fn zpull_timeout(&self, key: Key, index: u32) -> Error {
        // After this, no write can touch the destination: writes are copied under the same lock.
        let mut st = lock(&self.state.zpulls);
        st.requester.cancel(index);
        let server = st.pulls.remove(&index).map(|p| p.server);
        drop(st);
        Error::Timeout(format!(
            "zero-copy pull of key {key}: no answer within {:.0} s (PS_TIMEOUT) from {}",
            self.state.po.config().timing.timeout.as_secs_f64(),
            server.map_or_else(|| "its server".to_string(), Node::describe)
        ))
    }

    /// Starts a pull of `key` into `dest`, ending in `on_end`; returns its request index.
    fn zpull_start(&self, key: Key, dest: Destination<V>, on_end: OnEnd<V>) -> Result<u32> {
        let server = self.server_for(key);
        let step = self.next_ts.fetch_add(1, Ordering::Relaxed) as i64;
        let mut st = lock(&self.state.zpulls);
        let (index, actions) = st.requester.start(server, key, step, V::DTYPE);
        st.pulls.insert(
            index,
            ZPull {
                key,
                server,
                dest,
                on_end,
            },
        );
        run_and_report(&self.state, st, actions);
        Ok(index)
    }
}
