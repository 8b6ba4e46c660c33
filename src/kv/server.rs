//! `KVServer`: answers the requests of one application for one value type, through a
//! [`RequestHandler`] (ps-lite's `KVServer<Val>` and `KVServerDefaultHandle`).

use super::keycache::{KeptLists, Memo};
use super::pairs::{decode_checked, encode_owned, KVPairs, KVRequest};
use super::store::{KeyStore, Resolved};
use super::value::Value;
use super::zero_copy::ServerRv;
use super::Key;
use crate::error::Result;
use crate::postoffice::{reply_meta, Customer, Postoffice, Route};
use crate::van::VanEvent;
use crate::wire::{KeyRef, Message, Node, NodeId, Rendezvous};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// What a handler learns about a request besides its pairs.
#[derive(Clone, Debug)]
pub struct ReqMeta {
    /// Application command (`cmd` of `KVWorker::request`; 0 for plain push/pull).
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

    /// Whether [`value`](Self::value) shows stored values, so that zero-copy (rendezvous) pulls
    /// can be served. Default: no (such pulls get ERROR_STATUS).
    fn serves_values(&self) -> bool {
        false
    }

    /// The current value of `key`, `None` if it has none yet (a rendezvous pull then waits for
    /// the first push of the key: tag matching).
    fn value(&self, _key: Key) -> Option<&[V]> {
        None
    }

    /// The memory regions, `(address, bytes)`, that hold the values [`value`](Self::value)
    /// shows, so that a zero-copy pull is one RDMA WRITE from the value itself (the server
    /// registers each region once, for local reads only, on the first zero-copy pull, and
    /// deregisters it when the `KVServer` is dropped). The regions must stay allocated and in
    /// place while the handler lives, and the values in them may change only in
    /// [`handle`](Self::handle) for pushes and application commands (`cmd` ≠ 0): the server holds
    /// those back while a write from the regions is in flight; a plain pull must not change
    /// them. Default: none (values are copied into a registered buffer first).
    fn value_regions(&self) -> Vec<(usize, usize)> {
        Vec::new()
    }
}

/// Sums pushes into a store; answers pulls from it (ps-lite's `KVServerDefaultHandle`).
///
/// A key's length is fixed by its first push; a push of another length is refused with an error
/// naming the key and both lengths, and nothing of that request is applied. Pulling a key that
/// was never pushed is an error naming the key. Values live in a [`KeyStore`]: a request's keys
/// are resolved into runs of contiguous values (one hash lookup per key), and a key list the
/// server keeps for the worker (key caching) keeps its resolution, so repeating it costs one
/// summing loop or one copy per run, nothing per key. Pull answers carry no keys (the worker
/// has them) and no lengths when all are equal.
pub struct DefaultHandler<V> {
    store: KeyStore<V>,
}

impl<V: Value> Default for DefaultHandler<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Value> DefaultHandler<V> {
    /// An empty store.
    pub fn new() -> Self {
        DefaultHandler {
            store: KeyStore::new(),
        }
    }

    /// The stored value of `key`.
    pub fn get(&self, key: Key) -> Option<&[V]> {
        self.store.get(key)
    }

    /// The store.
    pub fn store(&self) -> &KeyStore<V> {
        &self.store
    }
}

impl<V: Value> RequestHandler<V> for DefaultHandler<V> {
    fn serves_values(&self) -> bool {
        true
    }

    fn value(&self, key: Key) -> Option<&[V]> {
        self.get(key)
    }

    fn value_regions(&self) -> Vec<(usize, usize)> {
        self.store.regions()
    }

    fn handle(&mut self, meta: &ReqMeta, req: KVRequest<'_, V>) -> Result<KVPairs<V>, String> {
        let mut req = req;
        let mut memo = req.memo.take();
        let lens = req.lens();
        // Without a memo, a push-pull answers from the push's own resolution.
        let mut resolved_here = None;
        if meta.push {
            if resolved(&memo).is_some_and(|r| r.has_lens(lens)) {
                if let Some(r) = resolved(&memo) {
                    self.store.push(r, &req.vals);
                }
            } else {
                let r = self.store.resolve_push(&req.keys, lens)?;
                self.store.push(&r, &req.vals);
                match memo.as_deref_mut() {
                    Some(m) => m.set(r.settled()),
                    None => resolved_here = Some(r),
                }
            }
        }
        if !meta.pull {
            return Ok(KVPairs::default());
        }
        if let Some(r) = resolved(&memo).or(resolved_here.as_ref()) {
            return Ok(answer(&self.store, r));
        }
        let r = self.store.resolve_pull(&req.keys)?;
        let out = answer(&self.store, &r);
        if let Some(m) = memo {
            m.set(r);
        }
        Ok(out)
    }
}

/// The resolution kept with a cached key list.
fn resolved<'m>(memo: &'m Option<&mut Memo>) -> Option<&'m Resolved> {
    memo.as_deref().and_then(|m| m.get::<Resolved>())
}

/// A pull answer for the request's keys (empty `keys`: "as requested").
fn answer<V: Value>(store: &KeyStore<V>, r: &Resolved) -> KVPairs<V> {
    KVPairs {
        keys: Vec::new(),
        vals: store.gather(r),
        lens: r.lens_frame(),
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
        let po2 = po.clone();
        let mut served = Served {
            handler: ManuallyDrop::new(handler),
            rv: ServerRv::new(po, V::DTYPE),
            timeout: po.config().timeout,
            po: po.clone(),
        };
        let cache = po.config().key_cache_keys;
        let mut lists = KeptLists::new(cache, cache.saturating_mul(po.num_workers().max(1)));
        let customer = Customer::new(
            po,
            Route::Server {
                app_id,
                dtype: V::DTYPE,
            },
            move |ev: VanEvent| {
                let VanEvent::Message(msg) = ev else {
                    tracing::warn!("a key-value server got a remote write; dropped");
                    return;
                };
                let Served {
                    handler,
                    rv,
                    timeout,
                    ..
                } = &mut served;
                if msg.meta.rendezvous == Some(Rendezvous::Control) {
                    rv.serve(&po2, &**handler, msg);
                    return;
                }
                // A push, or an application command (which may change values), waits for the
                // zero-copy writes of stored values still in flight.
                let may_change = msg.meta.push || msg.meta.head != 0;
                let gate = if may_change && !rv.in_flight.wait_idle(*timeout) {
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
                if let Some((m, keys)) = serve_request(&po2, &mut **handler, &mut lists, req) {
                    // Rendezvous pulls that waited for these keys (tag matching).
                    rv.pushed(&po2, &m, &**handler, keys);
                }
            },
        )?;
        Ok(KVServer {
            _customer: customer,
            _v: PhantomData,
        })
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

/// Handles one key-value request and answers it. Returns the request's meta and pushed keys
/// when rendezvous pulls are parked, so they can be served once the keys have values.
fn serve_request<V: Value>(
    po: &Postoffice,
    handler: &mut impl RequestHandler<V>,
    lists: &mut KeptLists,
    req: Incoming,
) -> Option<(crate::wire::Meta, Vec<Key>)> {
    let Incoming { msg, gate, parked } = req;
    let Message { meta: m, mut data } = msg;
    let rm = ReqMeta {
        cmd: m.head,
        push: m.push,
        pull: m.pull,
        sender: m.sender,
        timestamp: m.timestamp,
    };
    let mut reply = Message::new(reply_meta(&m));
    // The key list first, before anything can refuse the request: what the server keeps under
    // a digest then always follows the worker's registrations (see `super::keycache`).
    let (sender, customer) = (m.sender, m.customer_id);
    let mut list = None;
    match &m.keys {
        None => {}
        Some(KeyRef::Register { digest, evict }) => {
            list = lists
                .register(sender, customer, *digest, evict, &data)
                .then_some(*digest);
        }
        Some(KeyRef::Cached { digest }) => {
            let keys = lists.get(sender, customer, *digest).map(|l| l.keys.clone());
            match (keys, data.first_mut()) {
                (Some(keys), Some(frame)) if frame.is_empty() => {
                    *frame = keys;
                    list = Some(*digest);
                }
                (None, _) => {
                    reply.meta.keys = Some(KeyRef::Unknown { digest: *digest });
                    send_answer(po, reply);
                    return None;
                }
                _ => {
                    reply.meta.error = Some(
                        "malformed request: a cached key list needs an empty keys frame".into(),
                    );
                    send_answer(po, reply);
                    return None;
                }
            }
        }
        Some(other) => {
            reply.meta.error = Some(format!(
                "malformed request: {other:?} belongs in an answer, not a request"
            ));
            send_answer(po, reply);
            return None;
        }
    }
    if let Err(e) = gate {
        reply.meta.error = Some(e);
        send_answer(po, reply);
        return None;
    }
    let mut pushed = None;
    // A kept list's keys were checked (sorted, unique) when it was registered.
    let result = decode_checked::<V>(&data, list.is_some()).and_then(|mut req| {
        if m.push && req.vals.is_empty() && !req.keys.is_empty() {
            return Err("push without values".to_string());
        }
        if m.push && parked {
            pushed = Some(req.keys.to_vec());
        }
        req.memo = list
            .and_then(|d| lists.get(sender, customer, d))
            .map(|l| &mut l.memo);
        let asked = !req.keys.is_empty();
        handler.handle(&rm, req).map(|res| (res, asked))
    });
    match result {
        Ok((res, asked)) if m.pull => {
            // No keys but values: the request's keys (the worker has them).
            let as_requested =
                res.keys.is_empty() && asked && !(res.vals.is_empty() && res.lens.is_empty());
            if as_requested {
                reply.meta.keys = Some(KeyRef::AsRequested);
            }
            reply.data = encode_owned(res);
        }
        Ok(_) => {}
        Err(e) => reply.meta.error = Some(e),
    }
    send_answer(po, reply);
    pushed.map(|keys| (m, keys))
}

fn send_answer(po: &Postoffice, reply: Message) {
    let to = reply.meta.recver;
    if let Err(e) = po.send(reply) {
        tracing::warn!("cannot answer {}: {e}", Node::describe(to));
    }
}

/// A handler with the rendezvous state that may still be writing from its memory. Dropping it
/// waits for those writes (at most `PS_TIMEOUT`); if some never complete, the handler is leaked
/// rather than freeing memory a NIC may still read.
struct Served<H> {
    handler: ManuallyDrop<H>,
    rv: ServerRv,
    timeout: std::time::Duration,
    po: Arc<Postoffice>,
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
