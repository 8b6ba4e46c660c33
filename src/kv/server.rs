//! `KVServer`: answers the requests of one application for one value type, through a
//! [`RequestHandler`] (ps-lite's `KVServer<Val>` and `KVServerDefaultHandle`).

use super::pairs::{decode, encode_owned, KVPairs, KVRequest};
use super::value::Value;
use super::Key;
use crate::error::Result;
use crate::postoffice::{reply_meta, Customer, Postoffice, Route};
use crate::rendezvous::responder::Lookup;
use crate::rendezvous::{RespAction, Responder, RvMessage, TensorMeta, HEAD_RV, HEAD_RV_WRITE};
use crate::wire::{Message, Node, NodeId};
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
/// was never pushed is an error naming the key.
#[derive(Default)]
pub struct DefaultHandler<V> {
    store: HashMap<Key, Vec<V>>,
}

impl<V: Value> DefaultHandler<V> {
    /// An empty store.
    pub fn new() -> Self {
        DefaultHandler {
            store: HashMap::new(),
        }
    }

    /// The stored value of `key`.
    pub fn get(&self, key: Key) -> Option<&[V]> {
        self.store.get(&key).map(|v| v.as_slice())
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
        if meta.push {
            let lens = req.key_lens();
            // Check every key before changing anything.
            for (key, &len) in req.keys.iter().zip(&lens) {
                if let Some(have) = self.store.get(key) {
                    if have.len() != len {
                        return Err(format!(
                            "length mismatch for key {key}: pushed {len} values, but its length is {} (fixed at its first push)",
                            have.len()
                        ));
                    }
                }
            }
            let mut at = 0;
            for (key, &len) in req.keys.iter().zip(&lens) {
                let src = &req.vals[at..at + len];
                at += len;
                match self.store.get_mut(key) {
                    Some(dst) => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = d.sum(s)),
                    None => {
                        self.store.insert(*key, src.to_vec());
                    }
                }
            }
        }
        if !meta.pull {
            return Ok(KVPairs::default());
        }
        let mut out = KVPairs {
            keys: req.keys.to_vec(),
            vals: Vec::new(),
            lens: Vec::with_capacity(req.keys.len()),
        };
        for key in req.keys.iter() {
            let v = self
                .store
                .get(key)
                .ok_or_else(|| format!("key {key} was never pushed, so it has no value to pull"))?;
            out.vals.extend_from_slice(v);
            out.lens.push(v.len() as u32);
        }
        Ok(out)
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
                let m = &msg.meta;
                let rm = ReqMeta {
                    cmd: m.head,
                    push: m.push,
                    pull: m.pull,
                    sender: m.sender,
                    timestamp: m.timestamp,
                };
                let mut pushed = Vec::new();
                let result = decode::<V>(&msg.data).and_then(|req| {
                    if m.push && req.vals.is_empty() && !req.keys.is_empty() {
                        return Err("push without values".to_string());
                    }
                    if m.push && rv.has_parked() {
                        pushed = req.keys.to_vec();
                    }
                    handler.handle(&rm, req)
                });
                let mut reply = Message::new(reply_meta(m));
                match result {
                    Ok(res) if m.pull => reply.data = encode_owned(res),
                    Ok(_) => {}
                    Err(e) => reply.meta.error = Some(e),
                }
                if let Err(e) = po2.send(reply) {
                    tracing::warn!("cannot answer {}: {e}", Node::describe(m.sender));
                }
                // Rendezvous pulls that waited for these keys (tag matching).
                for key in pushed {
                    let actions = rv.on_value_ready(key, |k| lookup(&handler, k));
                    run_actions(&po2, m, &handler, actions);
                }
            },
        )?;
        Ok(KVServer {
            _customer: customer,
            _v: PhantomData,
        })
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
