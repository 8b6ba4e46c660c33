//! `KVServer`: answers the requests of one application for one value type, through a
//! [`RequestHandler`] (ps-lite's `KVServer<Val>`, `kv_app.h`).
//!
//! - this file: [`KVServer`], the [`RequestHandler`] trait and [`ReqMeta`], and
//!   `serve_request`, which turns one key-value request into a handler call and its answer
//!   (key caching: the key list a request names, see [`crate::kv::keycache`]);
//! - [`default`]: [`DefaultHandler`], sum pushes and answer pulls;
//! - `zserve`: the responder's driver of zero-copy (rendezvous) pulls.
//!
//! **Threads.** Everything of one `KVServer` runs on its customer thread (`customer-<route>`,
//! [`crate::postoffice::Customer`]): requests and rendezvous messages are handled one at a
//! time, in arrival order, and the handler, the kept key lists and the rendezvous responder
//! are owned by that thread, without locks. The only state shared with another thread is the
//! count of zero-copy writes in flight from the handler's memory: the RDMA van's poller
//! releases a write's hold on its completion (`zserve::InFlight`, one mutex and condvar).

pub mod default;
pub(crate) mod durable;
mod zserve;

pub use default::{serve_sums, serve_sums_of, DefaultHandler};

use super::carrier::{self, Arrival};
use super::keycache::KeptLists;
use super::pairs::{decode_checked, encode_owned, KVPairs, KVRequest};
use super::value::Value;
use super::Key;
use crate::error::Result;
use crate::postoffice::CustomerEvent;
use crate::postoffice::{reply_meta, Customer, Postoffice, Route};
use crate::wire::{KeyRef, Message, Meta, Node, NodeId};
use bytes::Bytes;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;
use zserve::ServerRv;

/// What a handler learns about a request besides its pairs.
#[derive(Clone, Debug)]
pub struct ReqMeta {
    /// Application command ([`RequestOptions::cmd`](crate::kv::RequestOptions::cmd) of
    /// `KVWorker::request`; 0 for plain push/pull).
    pub cmd: i32,
    /// A push (values are in the request).
    pub push: bool,
    /// A pull (the answer must carry values).
    pub pull: bool,
    /// The requesting worker.
    pub sender: NodeId,
    /// The worker's timestamp.
    pub timestamp: i32,
}

/// Server-side logic: gets each request, returns the pairs to answer with (ignored unless the
/// request pulls) or an error text, which the worker's `wait` returns as
/// [`crate::Error::Remote`]. Requests of one `KVServer` are handled one at a time, in order.
pub trait RequestHandler<V: Value>: Send + 'static {
    /// Handles one request. `req.keys` are sorted and unique (checked before).
    ///
    /// # Errors
    /// A text naming what was wrong; the server goes on serving.
    fn handle(&mut self, meta: &ReqMeta, req: KVRequest<'_, V>) -> Result<KVPairs<V>, String>;

    /// The handler's stored values, when it serves zero-copy (rendezvous) pulls from them
    /// ([`ServesValues`]; a handler that does returns `Some(self)`). Default: `None` (such
    /// pulls get ERROR_STATUS).
    fn values(&self) -> Option<&dyn ServesValues<V>> {
        None
    }

    /// The handler's state as bytes, for a checkpoint snapshot (issue 13: durable servers;
    /// [`crate::kv::durable`] frames and checksums them). Default: `None`, a handler whose
    /// state cannot be saved.
    fn save(&self) -> Option<Vec<u8>> {
        None
    }

    /// [`save`](Self::save) into `out`, replacing what it held; `false` when the state cannot
    /// be saved. The server passes the same buffer at every snapshot, so a handler that writes
    /// into it (rather than into a new `Vec`) saves the page faults of a fresh allocation of
    /// the state's size. Default: [`save`](Self::save), moved into `out`.
    fn save_into(&self, out: &mut Vec<u8>) -> bool {
        match self.save() {
            Some(state) => {
                *out = state;
                true
            }
            None => false,
        }
    }

    /// Replaces the handler's state with bytes [`save`](Self::save) returned.
    ///
    /// # Errors
    /// A text naming what is wrong with `state`; the default refuses (nothing to restore
    /// into).
    fn restore(&mut self, _state: &[u8]) -> Result<(), String> {
        Err("this handler cannot restore saved state (RequestHandler::restore)".into())
    }
}

/// A [`RequestHandler`] whose stored values zero-copy (rendezvous) pulls are served from
/// (TensorFlow verbs' rendezvous; opt in with [`RequestHandler::values`]).
pub trait ServesValues<V: Value> {
    /// The current value of `key`, `None` if it has none yet (a rendezvous pull then waits for
    /// the first push of the key: tag matching).
    fn value(&self, key: Key) -> Option<&[V]>;

    /// The memory regions, `(address, bytes)`, that hold the values [`value`](Self::value)
    /// shows, so that a zero-copy pull is one RDMA WRITE from the value itself (the server
    /// registers each region once, for local reads only, on the first zero-copy pull, and
    /// deregisters it when the `KVServer` is dropped). The regions must stay allocated and in
    /// place while the handler lives, and the values in them may change only in
    /// [`RequestHandler::handle`] for pushes and application commands (`cmd` ≠ 0): the server
    /// holds those back while a write from the regions is in flight; a plain pull must not
    /// change them. Default: none (values are copied into a registered buffer first).
    fn value_regions(&self) -> Vec<(usize, usize)> {
        Vec::new()
    }
}

/// The server side of application `app_id` for values of type `V`. Requests are handled on
/// its own thread; dropping it stops serving.
pub struct KVServer<V: Value> {
    _customer: Customer,
    _v: PhantomData<V>,
}

impl<V: Value> KVServer<V> {
    /// Serves application `app_id`'s requests carrying `V` values with `handler`, and
    /// rendezvous (zero-copy) pulls of the values the handler shows.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] if this process already serves (`app_id`, `V`).
    pub fn new(
        po: &Arc<Postoffice>,
        app_id: i32,
        handler: impl RequestHandler<V>,
    ) -> Result<KVServer<V>> {
        let mut handler = handler;
        let durable = durable::Durable::open::<V>(po, app_id, &mut handler)?;
        let cache = po.config().kv.key_cache_keys;
        let mut served = Served {
            durable,
            handler: ManuallyDrop::new(handler),
            rv: ServerRv::new(po, V::DTYPE),
            lists: KeptLists::new(cache, cache.saturating_mul(po.num_workers().max(1))),
            timeout: po.config().timing.timeout,
            po: po.clone(),
        };
        let customer = Customer::new(
            po,
            Route::Server {
                app_id,
                dtype: V::DTYPE,
            },
            move |ev: CustomerEvent| served.on_event(ev),
        )?;
        Ok(KVServer {
            _customer: customer,
            _v: PhantomData,
        })
    }
}

/// What a `KVServer`'s customer thread owns: the handler, the rendezvous state that may still
/// be writing from the handler's memory, and the key lists kept for the workers. Dropping it
/// waits for those writes (at most `PS_TIMEOUT`); if some never complete, the handler is leaked
/// rather than freeing memory a NIC may still read.
struct Served<H> {
    handler: ManuallyDrop<H>,
    /// The checkpoint (`PS_CHECKPOINT_DIR`), `None` when off.
    durable: Option<durable::Durable>,
    rv: ServerRv,
    lists: KeptLists,
    timeout: Duration,
    po: Arc<Postoffice>,
}

impl<H> Served<H> {
    /// One event for this server: a rendezvous control message goes to the responder, a
    /// key-value request to the handler.
    fn on_event<V: Value>(&mut self, ev: CustomerEvent)
    where
        H: RequestHandler<V>,
    {
        let Served {
            handler,
            durable,
            rv,
            lists,
            timeout,
            po,
        } = self;
        let msg = match carrier::arrival(ev) {
            None => return,
            Some(Arrival::KeyValue(msg)) => msg,
            Some(Arrival::Control { meta, msg }) => {
                rv.serve(po, &**handler, &meta, msg);
                return;
            }
            Some(Arrival::Written(_)) => {
                tracing::warn!("a key-value server got a remote write; dropped");
                return;
            }
            // The postoffice refuses what would go to the peer; nothing waits here.
            Some(Arrival::PeerLost { .. }) => return,
            // A replaced worker's requests come from its replacement; nothing to do here.
            Some(Arrival::PeerReplaced { .. }) => return,
            Some(Arrival::Content { from, .. }) => {
                tracing::warn!(
                    "a key-value server got rendezvous content from {}; dropped",
                    Node::describe(from)
                );
                return;
            }
            Some(Arrival::Answered { from, answered }) => {
                if let Some(d) = durable {
                    d.check_answered(po, from, &answered);
                }
                return;
            }
        };
        // A push, or an application command (which may change values), waits for the
        // zero-copy writes of stored values still in flight.
        let may_change = msg.meta.may_change_state();
        let refusal = durable.as_ref().and_then(|d| d.refusal());
        let gate = if let Some(why) = refusal {
            Err(why.to_string())
        } else if may_change && !rv.in_flight.wait_idle(*timeout) {
            Err(format!(
                "zero-copy pulls of this server's values were still being written after {:.0} s (PS_TIMEOUT); the request was not applied",
                timeout.as_secs_f64()
            ))
        } else {
            Ok(())
        };
        let req = Incoming {
            msg,
            gate,
            parked: rv.has_parked(),
        };
        let server = Handling {
            handler: &mut **handler,
            lists,
            durable: durable.as_mut(),
        };
        if let Some((m, keys)) = serve_request(po, server, req) {
            // Rendezvous pulls that waited for these keys (tag matching).
            rv.pushed(po, &m, &**handler, keys);
        }
        if let Some(d) = durable {
            d.maybe_snapshot(&**handler);
        }
    }
}

impl<H> Drop for Served<H> {
    fn drop(&mut self) {
        if self.rv.in_flight.wait_idle(self.timeout) {
            self.rv.deregister(&self.po);
            // SAFETY: dropped once, here; nothing reads it afterwards.
            unsafe { ManuallyDrop::drop(&mut self.handler) }
        } else {
            tracing::warn!(
                "zero-copy writes from a key-value server's values did not complete within {:.0} s: its memory is kept",
                self.timeout.as_secs_f64()
            );
        }
    }
}

/// A request's kind as the metrics name it: `push`, `pull`, `push-pull`, or `command` (an
/// application command without values).
fn kind_of(m: &Meta) -> &'static str {
    match (m.kv.push, m.kv.pull) {
        (true, true) => "push-pull",
        (true, false) => "push",
        (false, true) => "pull",
        (false, false) => "command",
    }
}

/// A key-value request as the customer thread hands it on.
struct Incoming {
    msg: Message,
    /// `Err`: refuse the request with this text, applying nothing.
    gate: Result<(), String>,
    /// Rendezvous pulls wait for keys' first pushes (the pushed keys are wanted back).
    parked: bool,
}

/// What handles a request: the handler, the key lists kept for the workers, the checkpoint.
struct Handling<'a, H> {
    handler: &'a mut H,
    lists: &'a mut KeptLists,
    durable: Option<&'a mut durable::Durable>,
}

/// Handles one key-value request and answers it. Returns the request's meta and pushed keys
/// when rendezvous pulls are parked, so they can be served once the keys have values.
///
/// With a checkpoint, a request that may change state (a push or an application command) is
/// logged: its record written before it is applied, made part of the log after, before the
/// answer goes out (without fsync a request whose record cannot be written is not applied;
/// with fsync the write, and so its error, comes after); one applied before this server
/// restarted is answered as a pull of its keys, applying nothing (issue 13).
fn serve_request<V: Value>(
    po: &Postoffice,
    server: Handling<'_, impl RequestHandler<V>>,
    req: Incoming,
) -> Option<(Meta, Vec<Key>)> {
    let Incoming { msg, gate, parked } = req;
    let Message { meta: m, mut data } = msg;
    let started = std::time::Instant::now();
    let mut reply = Message::new(reply_meta(&m));
    // The key list first, before anything can refuse the request: what the server keeps under
    // a digest then always follows the worker's registrations (see `super::keycache`).
    // Then the gate's refusal, answered as an error text like a malformed reference.
    let list = key_list(server.lists, &m, &mut data)
        .and_then(|list| gate.map(|()| list).map_err(Refused::Malformed));
    let list = match list {
        Ok(list) => list,
        Err(Refused::UnknownList { digest }) => {
            reply.meta.kv.keys = Some(KeyRef::Unknown { digest });
            send_answer(po, reply);
            return None;
        }
        Err(Refused::Malformed(e)) => {
            reply.meta.error = Some(e);
            send_answer(po, reply);
            return None;
        }
    };
    let mut pushed = None;
    let result = apply(po, server, (&m, &data, list), |keys| {
        if parked {
            pushed = Some(keys.to_vec());
        }
    });
    po.metrics().handled(kind_of(&m), started.elapsed());
    match result {
        Ok((res, asked)) if m.kv.pull => {
            // No keys but values: the request's keys (the worker has them).
            let as_requested =
                res.keys.is_empty() && asked && !(res.vals.is_empty() && res.lens.is_empty());
            if as_requested {
                reply.meta.kv.keys = Some(KeyRef::AsRequested);
            }
            reply.data = encode_owned(res);
        }
        Ok(_) => {}
        Err(e) => reply.meta.error = Some(e),
    }
    send_answer(po, reply);
    pushed.map(|keys| (m, keys))
}

/// Applies request `m` (its payload `data`, the kept key list `list` it uses) with the
/// handler: decoded and checked, logged around the handler when it may change state (with a
/// checkpoint), or, when applied before this server restarted, handled as a plain pull of its
/// keys. `on_push` gets the keys of a push. Returns the handler's pairs and whether the
/// request named any keys, or the error text to answer with.
fn apply<V: Value>(
    po: &Postoffice,
    server: Handling<'_, impl RequestHandler<V>>,
    (m, data, list): (&Meta, &[Bytes], Option<u64>),
    on_push: impl FnOnce(&[Key]),
) -> Result<(KVPairs<V>, bool), String> {
    let Handling {
        handler,
        lists,
        mut durable,
    } = server;
    let may_change = m.may_change_state();
    let again = may_change && durable.as_ref().is_some_and(|d| d.applied_before(m));
    // Applied before the restart: answered as a plain pull of its keys (no command, no values).
    let rm = ReqMeta {
        cmd: if again { 0 } else { m.head },
        push: m.kv.push && !again,
        pull: m.kv.pull,
        sender: m.sender,
        timestamp: m.tag.timestamp,
    };
    // Logged (with a checkpoint): prepared before it is applied, committed after.
    let logs = may_change && !again;
    let mut prepared = None;
    // A kept list's keys were checked (sorted, unique) when it was registered.
    let mut req = decode_checked::<V>(data, list.is_some())?;
    if m.kv.push && req.vals.is_empty() && !req.keys.is_empty() {
        return Err("push without values".to_string());
    }
    if let Some(why) = out_of_place(po, m.sender, &req.keys) {
        return Err(why);
    }
    if again {
        req.vals = std::borrow::Cow::Borrowed(&[]);
        req.lens = std::borrow::Cow::Borrowed(&[]);
    }
    if let (true, Some(d)) = (logs, durable.as_deref_mut()) {
        prepared = Some(d.prepare(m, data, list)?);
    }
    if rm.push {
        on_push(&req.keys);
    }
    req.memo = list
        .and_then(|d| lists.get(m.sender, m.tag.customer_id, d))
        .map(|l| &mut l.memo);
    let asked = !req.keys.is_empty();
    let result = handler.handle(&rm, req).map(|res| (res, asked));
    match (result, durable, prepared) {
        (Ok(r), Some(d), Some(p)) => d.commit(p, m, data, list).map(|()| r),
        (r, _, _) => r,
    }
}

/// Why a request may not be served here, `None` when it may (issue 14: a server serves the
/// workers of its cluster, and only the keys of its own range — ps-lite's `GetServerKeyRanges`,
/// [`crate::postoffice::range`]): its sender is not a worker of the node table, or one of its
/// `keys` (sorted) is outside this server's range. The sender is the one its connection
/// proved when the cluster has a token ([`crate::auth`]).
fn out_of_place(po: &Postoffice, sender: NodeId, keys: &[Key]) -> Option<String> {
    if Node::role_of(sender) != Some(crate::wire::Role::Worker)
        || Node::rank_of(sender) >= po.num_workers()
    {
        return Some(format!(
            "{} is not a worker of this cluster: only its {} workers send requests to servers",
            Node::describe(sender),
            po.num_workers()
        ));
    }
    let me = po.my_id();
    let range = po.server_key_ranges().get(Node::rank_of(me))?;
    let inside = |k: Key| k >= range.begin && (k < range.end || range.end == u64::MAX);
    let outside = [keys.first()?, keys.last()?]
        .into_iter()
        .find(|&&k| !inside(k))?;
    Some(format!(
        "key {outside} is outside the range of {} [{}, {}): requests are sliced by key range",
        Node::describe(me),
        range.begin,
        range.end
    ))
}

/// Why a request is answered without reaching the handler, before anything of it is applied.
enum Refused {
    /// It names a key list this server does not keep for the worker: the answer says
    /// [`KeyRef::Unknown`], and the worker sends the request again with its keys.
    UnknownList { digest: u64 },
    /// A malformed key reference: the answer carries this error text.
    Malformed(String),
}

/// The key list request `m` uses (key caching, [`crate::kv::keycache`]): registers the list it
/// sends (`KeyRef::Register`), or puts the kept list's keys into the empty keys frame of `data`
/// (`KeyRef::Cached`). Returns the digest of the kept list the request uses, `None` when its
/// keys travel and are not kept.
///
/// # Errors
/// [`Refused`] for a list this server does not keep or a malformed reference.
fn key_list(lists: &mut KeptLists, m: &Meta, data: &mut [Bytes]) -> Result<Option<u64>, Refused> {
    let (sender, customer) = (m.sender, m.tag.customer_id);
    match &m.kv.keys {
        None => Ok(None),
        Some(KeyRef::Register { digest, evict }) => Ok(lists
            .register(sender, customer, *digest, evict, data)
            .then_some(*digest)),
        Some(KeyRef::Cached { digest }) => {
            let keys = lists.get(sender, customer, *digest).map(|l| l.keys.clone());
            match (keys, data.first_mut()) {
                (Some(keys), Some(frame)) if frame.is_empty() => {
                    *frame = keys;
                    Ok(Some(*digest))
                }
                (None, _) => Err(Refused::UnknownList { digest: *digest }),
                _ => Err(Refused::Malformed(
                    "malformed request: a cached key list needs an empty keys frame".into(),
                )),
            }
        }
        Some(other) => Err(Refused::Malformed(format!(
            "malformed request: {other:?} belongs in an answer, not a request"
        ))),
    }
}

/// Sends `reply`; a failure is logged (the worker's `wait` names this server at its deadline).
fn send_answer(po: &Postoffice, reply: Message) {
    let to = reply.meta.recver;
    if let Err(e) = po.send(reply) {
        tracing::warn!("cannot answer {}: {e}", Node::describe(to));
    }
}
