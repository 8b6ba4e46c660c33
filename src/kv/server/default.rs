//! [`DefaultHandler`]: sum pushes into a key store, answer pulls from it (ps-lite's
//! `KVServerDefaultHandle`, `kv_app.h`).

use super::{ReqMeta, RequestHandler, ServesValues};
use crate::kv::keycache::Memo;
use crate::kv::pairs::{KVPairs, KVRequest};
use crate::kv::store::{KeyStore, Resolved};
use crate::kv::value::Value;
use crate::kv::Key;
use crate::postoffice::Range;
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

    /// The stored keys of `range`, in key order, with their values: `u64` count, the keys
    /// (`u64`), their lengths (`u32`), the values (`V`), all little-endian. The rows stay in
    /// the store (it frees no key); the server no longer serves them, and an import of the
    /// same keys overwrites them.
    fn export_range(&mut self, range: Range) -> Result<Vec<u8>, String> {
        let mut keys: Vec<Key> = self
            .store
            .keys()
            .into_iter()
            .filter(|&k| range.holds(k))
            .collect();
        keys.sort_unstable();
        let mut lens = Vec::with_capacity(keys.len());
        let mut vals: Vec<V> = Vec::new();
        for &k in &keys {
            let v = self.store.get(k).unwrap_or(&[]);
            lens.push(v.len() as u32);
            vals.extend_from_slice(v);
        }
        let mut out = Vec::with_capacity(8 + keys.len() * 12 + std::mem::size_of_val(&vals[..]));
        out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        out.extend_from_slice(bytemuck::cast_slice(&keys));
        out.extend_from_slice(bytemuck::cast_slice(&lens));
        out.extend_from_slice(bytemuck::cast_slice(&vals));
        Ok(out)
    }

    /// Stores rows [`export_range`](Self::export_range) wrote, replacing the values of keys
    /// held already.
    ///
    /// # Errors
    /// Rows that do not decode, keys outside `range`, or a key held with another length.
    fn import_range(&mut self, range: Range, rows: &[u8]) -> Result<(), String> {
        let pairs = decode_rows::<V>(rows)?;
        if let Some(k) = pairs.keys.iter().find(|&&k| !range.holds(k)) {
            return Err(format!(
                "moved row of key {k} is outside the range {range:?}"
            ));
        }
        let r = self
            .store
            .resolve_push(&pairs.keys, crate::kv::store::Lens::PerKey(&pairs.lens))?;
        self.store.assign(&r, &pairs.vals);
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

/// Rows as [`DefaultHandler::export_range`] writes them.
fn decode_rows<V: Value>(rows: &[u8]) -> Result<KVPairs<V>, String> {
    let bad = |what: &str| format!("moved rows are malformed: {what}");
    let n = rows
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| bad("no count"))? as usize;
    let keys_end = n
        .checked_mul(8)
        .and_then(|k| k.checked_add(8))
        .filter(|&e| e <= rows.len())
        .ok_or_else(|| bad("fewer keys than the count"))?;
    let lens_end = keys_end
        .checked_add(n * 4)
        .filter(|&e| e <= rows.len())
        .ok_or_else(|| bad("fewer lengths than keys"))?;
    let keys: Vec<Key> = crate::kv::pairs::view::<Key>(&rows[8..keys_end], "keys")?.into_owned();
    let lens: Vec<u32> =
        crate::kv::pairs::view::<u32>(&rows[keys_end..lens_end], "lens")?.into_owned();
    let vals: Vec<V> = crate::kv::pairs::view::<V>(&rows[lens_end..], "values")?.into_owned();
    crate::kv::pairs::check_shape(&keys, vals.len(), &lens).map_err(|e| bad(&e))?;
    Ok(KVPairs { keys, vals, lens })
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
