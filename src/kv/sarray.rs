//! `SArray`: a shared, immutable array of values (ps-lite's `SArray`): cloning and slicing share
//! the memory, so pushing one costs no copy.

use super::value::Value;
use bytes::Bytes;
use std::marker::PhantomData;

/// Shared values: `len` elements of `V`, reference-counted.
///
/// ```
/// let grads = pslite::kv::SArray::from_vec(vec![0.5f32; 1024]);
/// let again = grads.clone(); // shares the memory
/// assert_eq!(again.len(), 1024);
/// assert_eq!(grads[3], 0.5);
/// ```
#[derive(Clone)]
pub struct SArray<V> {
    bytes: Bytes,
    _v: PhantomData<V>,
}

impl<V: Value> SArray<V> {
    /// Takes `v` without copying it.
    pub fn from_vec(v: Vec<V>) -> SArray<V> {
        SArray {
            bytes: super::pairs::frame_of(v),
            _v: PhantomData,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / std::mem::size_of::<V>()
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Elements `range` as a shared frame (no copy).
    pub(crate) fn frame(&self, range: std::ops::Range<usize>) -> Bytes {
        let s = std::mem::size_of::<V>();
        self.bytes.slice(range.start * s..range.end * s)
    }
}

impl<V: Value> std::ops::Deref for SArray<V> {
    type Target = [V];
    fn deref(&self) -> &[V] {
        // A Vec<V>'s memory is aligned for V, and `from_vec` is the only constructor.
        bytemuck::cast_slice(&self.bytes)
    }
}

impl<V: Value> From<Vec<V>> for SArray<V> {
    fn from(v: Vec<V>) -> Self {
        SArray::from_vec(v)
    }
}

impl<V: Value> std::fmt::Debug for SArray<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SArray").field("len", &self.len()).finish()
    }
}
