//! [`DefaultHandler`]: sum pushes into a key store, answer pulls from it (ps-lite's
//! `KVServerDefaultHandle`, `kv_app.h`).

use super::{ReqMeta, RequestHandler, ServesValues};
use crate::kv::keycache::Memo;
use crate::kv::pairs::{KVPairs, KVRequest};
use crate::kv::store::{KeyStore, Resolved};
use crate::kv::value::Value;
use crate::kv::Key;
use crate::wire::DType;

/// Sums pushes into a store; answers pulls from it (ps-lite's `KVServerDefaultHandle`).
///
/// A key's length is fixed by its first push; a push of another length is refused with an error
/// naming the key and both lengths, and nothing of that request is applied. Pulling a key that
/// was never pushed is an error naming the key. Values live in a [`KeyStore`]: a request's keys
/// are resolved into runs of contiguous values (one hash lookup per key), and a key list the
/// server keeps for the worker (key caching) keeps its resolution, so repeating it costs one
/// summing loop or one copy per run, nothing per key. Pull answers carry no keys (the worker
/// has them) and no lengths when all are equal.
///
/// It serves zero-copy (rendezvous) pulls: [`ServesValues::value`] shows the stored values and
/// [`ServesValues::value_regions`] the store's chunks, so a pull is one RDMA write from the
/// store on the RDMA van.
pub struct DefaultHandler<V> {
    store: KeyStore<V>,
}

/// A [`KVServer`](super::KVServer) with a [`DefaultHandler`] for every value type (`f32`,
/// `f64`, `i32`, `i64`, `u8`, `u32`, `u64`) of application `app_id`: what `pslite-server`
/// serves as application 0. Dropping them stops serving.
///
/// # Errors
/// As [`KVServer::new`](super::KVServer::new).
pub fn serve_sums(
    po: &std::sync::Arc<crate::postoffice::Postoffice>,
    app_id: i32,
) -> crate::Result<Vec<Box<dyn Send>>> {
    serve_sums_of(po, app_id, &DType::VALUES)
}

/// [`serve_sums`] for the value types `dtypes` only ([`DType::None`] is skipped).
///
/// # Errors
/// As [`KVServer::new`](super::KVServer::new).
pub fn serve_sums_of(
    po: &std::sync::Arc<crate::postoffice::Postoffice>,
    app_id: i32,
    dtypes: &[DType],
) -> crate::Result<Vec<Box<dyn Send>>> {
    use super::KVServer;
    let mut out: Vec<Box<dyn Send>> = Vec::new();
    for &d in dtypes {
        out.push(crate::with_value_type!(d,
            V => Box::new(KVServer::<V>::new(po, app_id, DefaultHandler::new())?),
            None => continue));
    }
    Ok(out)
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

    /// The stored value of `key` (its values, as long as its first push), `None` if it was
    /// never pushed.
    pub fn get(&self, key: Key) -> Option<&[V]> {
        self.store.get(key)
    }

    /// The store.
    pub fn store(&self) -> &KeyStore<V> {
        &self.store
    }
}

impl<V: Value> ServesValues<V> for DefaultHandler<V> {
    fn value(&self, key: Key) -> Option<&[V]> {
        self.get(key)
    }

    fn value_regions(&self) -> Vec<(usize, usize)> {
        self.store.regions()
    }
}

impl<V: Value> RequestHandler<V> for DefaultHandler<V> {
    fn values(&self) -> Option<&dyn ServesValues<V>> {
        Some(self)
    }

    /// The store's keys and values ([`KeyStore::save`]).
    fn save(&self) -> Option<Vec<u8>> {
        Some(self.store.save())
    }

    /// [`save`](Self::save) into `out`, reusing its memory ([`KeyStore::save_into`]).
    fn save_into(&self, out: &mut Vec<u8>) -> bool {
        self.store.save_into(out);
        true
    }

    /// Replaces the store with a saved one ([`KeyStore::restore`]). Call it before serving:
    /// the old store's memory regions are freed.
    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        self.store = KeyStore::restore(state)?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::pairs::KVRequest;
    use std::borrow::Cow;

    fn push(h: &mut DefaultHandler<f32>, keys: &[Key], vals: &[f32]) {
        let meta = ReqMeta {
            cmd: 0,
            push: true,
            pull: false,
            sender: 9,
            timestamp: 0,
        };
        let req = KVRequest {
            keys: Cow::Borrowed(keys),
            vals: Cow::Borrowed(vals),
            lens: Cow::Borrowed(&[]),
            memo: None,
        };
        h.handle(&meta, req).expect("pushed");
    }

    #[test]
    fn a_saved_handler_restores_its_sums() {
        let mut h = DefaultHandler::<f32>::new();
        push(&mut h, &[1, 5, 7], &[1.0, 2.0, 3.0]);
        push(&mut h, &[5], &[10.0]);
        let state = h.save().expect("the default handler saves");
        let mut back = DefaultHandler::<f32>::new();
        back.restore(&state).expect("restores");
        assert_eq!(back.get(5), Some(&[12.0][..]));
        assert_eq!(back.get(7), Some(&[3.0][..]));
        assert_eq!(back.store().len(), 3);
        let e = back
            .restore(&state[..state.len() - 1])
            .expect_err("truncated");
        assert!(e.starts_with("saved store truncated: the values"), "{e}");
        assert_eq!(
            back.get(5),
            Some(&[12.0][..]),
            "a refused restore changes nothing"
        );
    }
}
