//! `KVServer`: answers the requests of one application for one value type, through a
//! [`RequestHandler`] (ps-lite's `KVServer<Val>` and `KVServerDefaultHandle`).

use super::pairs::{decode, encode_owned, KVPairs, KVRequest};
use super::value::Value;
use super::Key;
use crate::error::Result;
use crate::postoffice::{reply_meta, Customer, Postoffice, Route};
use crate::wire::{Message, Node, NodeId};
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
    /// Serves application `app_id`'s requests carrying `V` values with `handler`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] if this process already serves (`app_id`, `V`).
    pub fn new(
        po: &Arc<Postoffice>,
        app_id: i32,
        mut handler: impl RequestHandler<V>,
    ) -> Result<KVServer<V>> {
        let po2 = po.clone();
        let customer = Customer::new(
            po,
            Route::Server {
                app_id,
                dtype: V::DTYPE,
            },
            move |msg: Message| {
                let m = &msg.meta;
                let rm = ReqMeta {
                    cmd: m.head,
                    push: m.push,
                    pull: m.pull,
                    sender: m.sender,
                    timestamp: m.timestamp,
                };
                let result = decode::<V>(&msg.data).and_then(|req| {
                    if m.push && req.vals.is_empty() && !req.keys.is_empty() {
                        return Err("push without values".to_string());
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
            },
        )?;
        Ok(KVServer {
            _customer: customer,
            _v: PhantomData,
        })
    }
}
