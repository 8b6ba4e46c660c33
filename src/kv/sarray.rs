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

    /// Shares memory another owner keeps (a Python array's buffer, say) without copying it:
    /// `owner`'s bytes are the values, and `owner` is dropped when the last clone or frame of
    /// this array is (after the van sent it). The owner must not change the bytes meanwhile:
    /// the van reads them while it sends.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the bytes are not a whole
    /// number of `V`s or not aligned for `V`.
    pub fn from_owner<O: AsRef<[u8]> + Send + 'static>(owner: O) -> crate::Result<SArray<V>> {
        // Checked where the bytes end up: an owner holding them inline moves into `Bytes`.
        let bytes = Bytes::from_owner(owner);
        let size = std::mem::size_of::<V>();
        if bytes.is_empty() {
            return Ok(SArray::from_vec(Vec::new()));
        }
        if !bytes.len().is_multiple_of(size)
            || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<V>())
        {
            return Err(crate::Error::InvalidArgument(format!(
                "an SArray of {} needs whole, aligned elements: {} bytes at address {:#x}",
                std::any::type_name::<V>(),
                bytes.len(),
                bytes.as_ptr() as usize
            )));
        }
        Ok(SArray {
            bytes,
            _v: PhantomData,
        })
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
        if self.bytes.is_empty() {
            // An empty `Bytes` points anywhere, perhaps not aligned for V.
            return &[];
        }
        // A Vec<V>'s memory is aligned for V, and `from_owner` checks its owner's.
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

#[cfg(test)]
mod tests {
    use super::SArray;

    #[test]
    fn from_owner_shares_whole_aligned_elements_only() {
        let words: Vec<u64> = vec![1, 2, 3];
        let bytes: Vec<u8> = bytemuck::cast_slice(&words).to_vec();
        let shared = SArray::<u32>::from_owner(bytemuck::cast_slice::<u64, u8>(&words).to_vec());
        assert_eq!(shared.map(|s| s.to_vec()), Ok(vec![1, 0, 2, 0, 3, 0]));
        let short = SArray::<u32>::from_owner(bytes[..6].to_vec());
        assert!(short.is_err_and(|e| e
            .to_string()
            .contains("needs whole, aligned elements: 6 bytes")));
        // A static byte slice at an odd address is refused for u32.
        static RAW: [u8; 9] = [0; 9];
        let odd = &RAW[(RAW.as_ptr() as usize).is_multiple_of(2) as usize..][..8];
        assert!(SArray::<u32>::from_owner(odd).is_err());
        assert!(SArray::<u8>::from_owner(odd).is_ok_and(|s| s.len() == 8));
        // Empty arrays, whatever their address, are empty.
        assert!(
            SArray::<u64>::from_owner(&RAW[1..1]).is_ok_and(|s| s.is_empty() && s[..].is_empty())
        );
        assert!(SArray::<f64>::from_vec(Vec::new())[..].is_empty());
    }
}
