//! A key store as bytes: the payload of a [`DefaultHandler`](crate::kv::DefaultHandler)'s
//! checkpoint snapshot (the snapshot file around it is [`crate::kv::durable`]).
//!
//! Layout (little-endian): the value type's name (`u8` length, then e.g. `f32`), the key count
//! `n` (`u64`), the keys (`u64` × n, ascending), their lengths (`u32` × n), then the values
//! (the value type's bytes, key after key). Readable outside the server: e.g. NumPy's
//! `frombuffer` at those offsets.

use super::{KeyStore, Lens};
use crate::kv::durable::bytes::Reader;
use crate::kv::pairs::{check_sorted, view};
use crate::kv::value::Value;
use crate::kv::Key;

impl<V: Value> KeyStore<V> {
    /// Every key with its value, as bytes (see the module docs), keys ascending.
    pub fn save(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.save_into(&mut out);
        out
    }

    /// [`save`](Self::save) into `out`, replacing what it held and reusing its memory.
    pub fn save_into(&self, out: &mut Vec<u8>) {
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_unstable_by_key(|&i| self.entries[i].key);
        let name = V::DTYPE.to_string();
        let values: usize = self.entries.iter().map(|e| e.len as usize).sum();
        let size = 1 + name.len() + 8 + order.len() * 12 + values * std::mem::size_of::<V>();
        out.clear();
        out.reserve(size);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(order.len() as u64).to_le_bytes());
        for &i in &order {
            out.extend_from_slice(&self.entries[i].key.to_le_bytes());
        }
        for &i in &order {
            out.extend_from_slice(&self.entries[i].len.to_le_bytes());
        }
        for &i in &order {
            let e = self.entries[i];
            let vals = self.arena.slice(e.chunk, e.off, e.len as usize);
            out.extend_from_slice(bytemuck::cast_slice(vals));
        }
    }

    /// A store holding what [`save`](Self::save) wrote.
    ///
    /// # Errors
    /// A text naming what is wrong: another value type, a truncation (with its offset), keys
    /// out of order, bytes left over.
    pub fn restore(bytes: &[u8]) -> Result<KeyStore<V>, String> {
        let mut r = Reader::new("saved store", bytes);
        let name_len = r.take(1, "the value type's name length")?[0] as usize;
        let name = r.take(name_len, "the value type's name")?;
        let want = V::DTYPE.to_string();
        if name != want.as_bytes() {
            return Err(format!(
                "the saved store holds {} values; this one holds {want}",
                String::from_utf8_lossy(name)
            ));
        }
        let n = usize::try_from(r.u64("the key count")?)
            .map_err(|_| "saved store: key count too large".to_string())?;
        let keys = view::<Key>(r.take(n.saturating_mul(8), "the keys")?, "keys")?;
        check_sorted(&keys).map_err(|e| format!("saved store: {e}"))?;
        let lens = view::<u32>(r.take(n.saturating_mul(4), "the lengths")?, "lens")?;
        let values: usize = lens.iter().map(|&l| l as usize).sum();
        let size = std::mem::size_of::<V>();
        let vals = view::<V>(r.take(values.saturating_mul(size), "the values")?, "values")?;
        r.finish("the values")?;
        let mut store = KeyStore::new();
        let r = store.resolve_push(&keys, Lens::PerKey(&lens))?;
        store.push(&r, &vals);
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Saved and restored, every key has the same value.
        #[test]
        fn a_store_comes_back_equal(pairs in proptest::collection::btree_map(any::<u64>(), proptest::collection::vec(any::<i64>(), 1..5), 0..40)) {
            let mut s = KeyStore::<i64>::new();
            for (k, v) in &pairs {
                let r = s.resolve_push(&[*k], Lens::Uniform(v.len())).expect("resolves");
                s.push(&r, v);
            }
            let back = KeyStore::<i64>::restore(&s.save()).expect("restores");
            prop_assert_eq!(back.len(), pairs.len());
            for (k, v) in &pairs {
                prop_assert_eq!(back.get(*k), Some(&v[..]));
            }
        }

        /// Any truncation is an error naming its offset, never a smaller store.
        #[test]
        fn a_truncated_store_is_refused(cut in any::<prop::sample::Index>()) {
            let mut s = KeyStore::<f32>::new();
            let r = s.resolve_push(&[3, 9], Lens::PerKey(&[2, 1])).expect("resolves");
            s.push(&r, &[1.0, 2.0, 3.0]);
            let bytes = s.save();
            let cut = cut.index(bytes.len());
            let e = KeyStore::<f32>::restore(&bytes[..cut]).err().expect("refused");
            prop_assert!(e.contains("truncated") && e.contains("at offset"), "{}", e);
        }
    }

    #[test]
    fn the_errors_say_what_is_wrong() {
        let mut s = KeyStore::<f32>::new();
        let r = s.resolve_push(&[1, 2], Lens::Uniform(1)).expect("resolves");
        s.push(&r, &[1.0, 2.0]);
        let bytes = s.save();
        assert_eq!(
            KeyStore::<f64>::restore(&bytes).err().as_deref(),
            Some("the saved store holds f32 values; this one holds f64")
        );
        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(
            KeyStore::<f32>::restore(&extra).err().as_deref(),
            Some("saved store: 1 bytes left over after the values (offset 44)")
        );
        let mut swapped = bytes;
        swapped[12..20].copy_from_slice(&2u64.to_le_bytes());
        swapped[20..28].copy_from_slice(&1u64.to_le_bytes());
        let e = KeyStore::<f32>::restore(&swapped).err().unwrap_or_default();
        assert!(e.starts_with("saved store: "), "{e}");
    }
}
