//! `KVServer`: answers the requests of one application for one value type, through a
//! [`RequestHandler`] (ps-lite's `KVServer<Val>` and `KVServerDefaultHandle`).

use super::keycache::{Kept, Memo};
use super::pairs::{decode_checked, encode_owned, KVPairs, KVRequest};
use super::store::{KeyStore, Resolved};
use super::value::Value;
use super::Key;
use crate::error::Result;
use crate::postoffice::{reply_meta, Customer, Postoffice, Route};
use crate::rendezvous::responder::Lookup;
use crate::rendezvous::{RespAction, Responder, RvMessage, TensorMeta, HEAD_RV, HEAD_RV_WRITE};
use crate::wire::{KeyRef, Message, Node, NodeId};
use bytes::Bytes;
use std::collections::HashMap;
use std::marker::PhantomData;
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
        mut handler: impl RequestHandler<V>,
    ) -> Result<KVServer<V>> {
        let po2 = po.clone();
        let mut rv = Responder::new(V::DTYPE, po.config().data_validation);
        let mut lists = KeptLists::new(po.config().key_cache_keys);
        let customer = Customer::new(
            po,
            Route::Server {
                app_id,
                dtype: V::DTYPE,
            },
            move |msg: Message| {
                if msg.meta.head == HEAD_RV {
                    serve_rendezvous(&po2, &mut rv, &handler, msg);
                    return;
                }
                let pushed = serve_request(&po2, &mut handler, &mut lists, rv.has_parked(), msg);
                // Rendezvous pulls that waited for these keys (tag matching).
                if let Some((m, keys)) = pushed {
                    for key in keys {
                        let actions = rv.on_value_ready(key, |k| lookup(&handler, k));
                        run_actions(&po2, &m, &handler, actions);
                    }
                }
            },
        )?;
        Ok(KVServer {
            _customer: customer,
            _v: PhantomData,
        })
    }
}

/// The key lists a server keeps, per worker customer (key caching, see [`super::keycache`]).
struct KeptLists {
    capacity: usize,
    by_worker: HashMap<(NodeId, i32), Kept>,
}

impl KeptLists {
    fn new(capacity: usize) -> KeptLists {
        KeptLists {
            capacity,
            by_worker: HashMap::new(),
        }
    }

    fn of(&mut self, worker: NodeId, customer: i32) -> &mut Kept {
        let cap = self.capacity;
        self.by_worker
            .entry((worker, customer))
            .or_insert_with(|| Kept::new(cap))
    }
}

/// Handles one key-value request and answers it. Returns the request's meta and pushed keys
/// when rendezvous pulls are parked (`parked`), so they can be served once the keys have values.
fn serve_request<V: Value>(
    po: &Postoffice,
    handler: &mut impl RequestHandler<V>,
    lists: &mut KeptLists,
    parked: bool,
    msg: Message,
) -> Option<(crate::wire::Meta, Vec<Key>)> {
    let Message { meta: m, mut data } = msg;
    let rm = ReqMeta {
        cmd: m.head,
        push: m.push,
        pull: m.pull,
        sender: m.sender,
        timestamp: m.timestamp,
    };
    let kept = lists.of(m.sender, m.customer_id);
    let mut reply = Message::new(reply_meta(&m));
    // A cached key list: its keys take the place of the empty keys frame.
    if let Some(KeyRef::Cached { digest }) = &m.keys {
        match (kept.get(*digest), data.first_mut()) {
            (Some(list), Some(frame)) if frame.is_empty() => *frame = list.keys.clone(),
            (None, _) => {
                reply.meta.keys = Some(KeyRef::Unknown { digest: *digest });
                send_answer(po, reply);
                return None;
            }
            _ => {
                reply.meta.error = Some("malformed request: a cached key list with keys".into());
                send_answer(po, reply);
                return None;
            }
        }
    }
    let mut pushed = None;
    // A cached list's keys were checked (sorted, unique) when it was registered.
    let keys_checked = matches!(m.keys, Some(KeyRef::Cached { .. }));
    let result = decode_checked::<V>(&data, keys_checked).and_then(|mut req| {
        if m.push && req.vals.is_empty() && !req.keys.is_empty() {
            return Err("push without values".to_string());
        }
        if m.push && parked {
            pushed = Some(req.keys.to_vec());
        }
        let digest = match &m.keys {
            Some(KeyRef::Register { digest, evict }) => {
                kept.register(*digest, evict, data[0].clone());
                Some(*digest)
            }
            Some(KeyRef::Cached { digest }) => Some(*digest),
            _ => None,
        };
        req.memo = digest.and_then(|d| kept.get(d)).map(|l| &mut l.memo);
        let asked = !req.keys.is_empty();
        handler.handle(&rm, req).map(|res| (res, asked))
    });
    match result {
        Ok((res, asked)) if m.pull => {
            if res.keys.is_empty() && asked {
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

/// Responses after which an unclaimed rendezvous clone is dropped.
const CLONE_MAX_AGE: u64 = 4096;

fn lookup<V: Value>(handler: &impl RequestHandler<V>, key: Key) -> Lookup<'_> {
    handler.value(key).map(|v| {
        (
            TensorMeta::of(V::DTYPE, v.len() as u64),
            bytemuck::cast_slice::<V, u8>(v),
        )
    })
}

fn serve_rendezvous<V: Value>(
    po: &Postoffice,
    rv: &mut Responder,
    handler: &impl RequestHandler<V>,
    msg: Message,
) {
    let m = &msg.meta;
    let decoded = msg
        .data
        .first()
        .ok_or_else(|| "rendezvous message without a body".to_string())
        .and_then(|b| RvMessage::decode(b));
    let rvmsg = match decoded {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(
                "dropped a rendezvous message from {}: {e}",
                Node::describe(m.sender)
            );
            return;
        }
    };
    let actions = rv.on_message(m.sender, rvmsg, handler.serves_values(), |k| {
        lookup(handler, k)
    });
    // A clone unclaimed after this many later responses belongs to a requester that gave up.
    let dropped = rv.expire(CLONE_MAX_AGE);
    if dropped > 0 {
        tracing::debug!("dropped {dropped} rendezvous clones whose re-request never came");
    }
    run_actions(po, m, handler, actions);
}

/// Writes `content` straight into the requester's destination when the van can (RDMA WRITE WITH
/// IMMEDIATE from a registered pool buffer: one copy here, none on the worker). False: the caller
/// sends the content as a message instead (ZMQ van, pool exhausted, or the write failed — then
/// the requester still gets its content, by the slower path).
fn rdma_write(po: &Postoffice, to: NodeId, content: &[u8], addr: u64, rkey: u32, imm: u32) -> bool {
    if po.config().van != crate::config::VanType::Rdma {
        return false;
    }
    let Ok(mut buf) = po.pool().and_then(|p| p.alloc::<u8>(content.len())) else {
        return false;
    };
    buf.copy_from_slice(content);
    match po.write_imm(to, buf, addr, rkey, imm) {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(
                "RDMA write to {} failed ({e}); sending the content as a message",
                Node::describe(to)
            );
            false
        }
    }
}

/// Carries out the responder's actions on the ZMQ van: control messages as `HEAD_RV` answers,
/// writes as `HEAD_RV_WRITE` answers holding the immediate and the content.
fn run_actions<V: Value>(
    po: &Postoffice,
    req: &crate::wire::Meta,
    handler: &impl RequestHandler<V>,
    actions: Vec<RespAction>,
) {
    for a in actions {
        let mut meta = reply_meta(req);
        let (to, data) = match a {
            RespAction::Send { to, msg } => {
                meta.head = HEAD_RV;
                (to, vec![Bytes::from(msg.encode())])
            }
            RespAction::WriteStored {
                to,
                key,
                addr,
                rkey,
                imm,
            } => {
                let content = handler
                    .value(key)
                    .map(bytemuck::cast_slice::<V, u8>)
                    .unwrap_or(&[]);
                if rdma_write(po, to, content, addr, rkey, imm) {
                    continue;
                }
                meta.head = HEAD_RV_WRITE;
                (
                    to,
                    vec![
                        Bytes::copy_from_slice(&imm.to_le_bytes()),
                        Bytes::copy_from_slice(content),
                    ],
                )
            }
            RespAction::WriteClone {
                to,
                data,
                addr,
                rkey,
                imm,
            } => {
                if rdma_write(po, to, &data, addr, rkey, imm) {
                    continue;
                }
                meta.head = HEAD_RV_WRITE;
                (to, vec![Bytes::copy_from_slice(&imm.to_le_bytes()), data])
            }
        };
        meta.recver = to;
        meta.pull = true;
        meta.push = false;
        if let Err(e) = po.send(Message { meta, data }) {
            tracing::warn!("cannot answer {}: {e}", Node::describe(to));
        }
    }
}
