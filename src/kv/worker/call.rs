//! One call of [`KVWorker::request`](super::KVWorker::request) (or a form of it): its pairs
//! checked and cut into the part each server gets (ps-lite's `KVWorker::Send` with the
//! `DefaultSlicer`; the key ranges are cut by [`crate::kv::slicer`]), and the parts the servers
//! answer merged back in key order (ps-lite's `KVWorker::RunCallback` merge).

use crate::config::bounds::REQUEST_OVERHEAD_BYTES;
use crate::error::{Error, Result};
use crate::kv::pairs::{check_shape, frame_of, view, KVPairs};
use crate::kv::request::Op;
use crate::kv::sarray::SArray;
use crate::kv::slicer::Slice;
use crate::kv::value::Value;
use crate::kv::{Key, Timestamp};
use crate::wire::{Message, Meta, Node};
use bytes::Bytes;

/// The values of a request: borrowed (copied into the frames) or shared (sliced, no copy).
pub(super) enum Vals<'a, V> {
    Borrowed(&'a [V]),
    Shared(&'a SArray<V>),
}

impl<V: Value> Vals<'_, V> {
    /// Number of values.
    pub(super) fn len(&self) -> usize {
        match self {
            Vals::Borrowed(v) => v.len(),
            Vals::Shared(v) => v.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One call's pairs and what it asks, before slicing. Shapes as
/// [`KVWorker::request`](super::KVWorker::request) states them.
pub(super) struct Call<'a, V> {
    pub(super) op: Op,
    pub(super) keys: &'a [Key],
    pub(super) vals: Vals<'a, V>,
    pub(super) lens: &'a [u32],
    /// Application command (`Meta.head`).
    pub(super) cmd: i32,
}

impl<V: Value> Call<'_, V> {
    /// Checks the shapes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: values in a pull; unsorted or duplicate keys, or lens that do
    /// not add up (as [`check_shape`]); a push of keys without values.
    pub(super) fn check(&self) -> Result<()> {
        if !self.op.pushes() && !self.vals.is_empty() {
            return Err(Error::InvalidArgument("a pull carries no values".into()));
        }
        check_shape(self.keys, self.vals.len(), self.lens).map_err(Error::InvalidArgument)?;
        if self.op.pushes() && !self.keys.is_empty() && self.vals.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "push of {} keys with no values",
                self.keys.len()
            )));
        }
        Ok(())
    }

    /// What the part of slice `s` holds of the in-flight budget (`PS_MAX_INFLIGHT_BYTES`): its
    /// keys, values (a push's) and lens, and [`REQUEST_OVERHEAD_BYTES`].
    pub(super) fn cost(&self, s: &Slice) -> u64 {
        let keys = s.keys.len() * std::mem::size_of::<Key>();
        let vals = if self.op.pushes() {
            s.vals.len() * std::mem::size_of::<V>()
        } else {
            0
        };
        let lens = if self.lens.is_empty() {
            0
        } else {
            s.keys.len() * std::mem::size_of::<u32>()
        };
        (keys + vals + lens) as u64 + REQUEST_OVERHEAD_BYTES
    }

    /// The request of timestamp `ts` to the server of slice `s`, from customer `customer_id`
    /// of application `app_id`: its meta, an empty keys frame (the key-cache mirror fills it
    /// in, see `Tracker::send_part`), the values (none unless it pushes) and the lens.
    pub(super) fn part(&self, s: &Slice, ts: Timestamp, app_id: i32, customer_id: i32) -> Message {
        let meta = Meta {
            head: self.cmd,
            tag: crate::wire::RequestTag {
                app_id,
                customer_id,
                timestamp: ts,
            },
            recver: Node::server_id(s.server),
            request: true,
            kv: crate::wire::KvHeader {
                push: self.op.pushes(),
                pull: self.op.pulls(),
                dtype: V::DTYPE,
                ..Default::default()
            },
            ..Meta::default()
        };
        let lens = if self.lens.is_empty() {
            &[][..]
        } else {
            &self.lens[s.keys.clone()]
        };
        let vals = match (&self.vals, self.op.pushes()) {
            (_, false) => Bytes::new(),
            (Vals::Borrowed(v), true) => {
                Bytes::copy_from_slice(bytemuck::cast_slice::<V, u8>(&v[s.vals.clone()]))
            }
            (Vals::Shared(v), true) => v.frame(s.vals.clone()),
        };
        Message {
            meta,
            data: vec![Bytes::new(), vals, frame_of(lens.to_vec())],
        }
    }
}

/// One server's answer to a pull: its three frames (keys, values, lens).
pub(super) struct PulledPart {
    /// Server rank.
    pub(super) server: usize,
    /// The keys (`Key`s as bytes; the request's, when the answer carried none).
    pub(super) keys: Bytes,
    /// The values, `V`s as bytes.
    pub(super) vals: Bytes,
    /// Values per key (`u32`s as bytes), or empty when all keys have equally many.
    pub(super) lens: Bytes,
}

impl PulledPart {
    /// Its first key (parts are merged in key order), 0 when it has none.
    pub(super) fn first_key(&self) -> Key {
        self.keys
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, Key::from_ne_bytes)
    }
}

/// Merges pulled parts (in key order) into one [`KVPairs`]: `lens` is filled in for every key
/// when any part has lens or the parts' keys have different numbers of values.
///
/// # Errors
/// [`Error::Remote`] naming the server whose answer is malformed.
pub(super) fn merge<V: Value>(parts: Vec<PulledPart>) -> Result<KVPairs<V>> {
    let mut out = KVPairs::default();
    let bad = |server: usize, e: String| Error::Remote {
        node: Node::describe(Node::server_id(server)),
        message: format!("malformed answer: {e}"),
    };
    // Each part without lens has one width (values per key); parts of different widths, like
    // parts with lens, need lens in the merged answer (one key per server, 1 and 3 values).
    let width = |p: &PulledPart| {
        let keys = p.keys.len() / std::mem::size_of::<Key>();
        (keys > 0).then(|| p.vals.len() / keys)
    };
    let mut widths = parts.iter().filter_map(width);
    let first = widths.next();
    let any_lens = parts.iter().any(|p| !p.lens.is_empty()) || widths.any(|w| Some(w) != first);
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

#[cfg(test)]
mod tests {
    use super::{merge, PulledPart};
    use crate::kv::pairs::frame_of;

    fn part(server: usize, keys: Vec<u64>, vals: Vec<f32>) -> PulledPart {
        PulledPart {
            server,
            keys: frame_of(keys),
            vals: frame_of(vals),
            lens: bytes::Bytes::new(),
        }
    }

    #[test]
    fn parts_of_different_widths_merge_with_lens() {
        // One key per server, each answer without lens (all its keys alike): 1 and 3 values.
        let merged = merge::<f32>(vec![
            part(0, vec![4], vec![1.0]),
            part(1, vec![1 << 63], vec![2.0, 3.0, 4.0]),
        ]);
        let merged = merged.expect("well-formed parts");
        assert_eq!(merged.keys, [4, 1 << 63]);
        assert_eq!(merged.vals, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(merged.lens, [1, 3]);
        // Parts of one width stay without lens.
        let even = merge::<f32>(vec![
            part(0, vec![4], vec![1.0, 2.0]),
            part(1, vec![9], vec![3.0, 4.0]),
        ]);
        assert!(even.expect("well-formed parts").lens.is_empty());
    }
}
