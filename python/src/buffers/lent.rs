//! Python buffers lent to pslite's frames without a copy (`copy=False`), and their release
//! with the GIL held once the frames are gone.

use super::PyValue;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

/// Python buffers whose frames the van has let go of, released (`PyBuffer_Release` needs the
/// GIL) by the next call into the bindings instead of on the van's thread.
static RETIRED: std::sync::Mutex<Vec<Box<dyn Send>>> = std::sync::Mutex::new(Vec::new());

/// A Python buffer lent to pslite's frames without a copy (`copy=False`): it stays exported,
/// so its memory stays in place, until the last frame holding it is dropped.
struct Lent<T: PyValue> {
    buf: Option<PyBuffer<T>>,
    addr: usize,
    bytes: usize,
}

impl<T: PyValue> AsRef<[u8]> for Lent<T> {
    fn as_ref(&self) -> &[u8] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY: the buffer (C-contiguous, `bytes` long at `addr`) stays exported while
        // `self.buf` holds it; the caller of `copy=False` promised not to change it meanwhile.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.bytes) }
    }
}

impl<T: PyValue> Drop for Lent<T> {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            if let Ok(mut retired) = RETIRED.lock() {
                retired.push(Box::new(b));
            }
        }
    }
}

/// `buf`'s elements as a shared array, without a copy (ps-lite's `ZPush` of an `SArray`).
///
/// # Errors
/// As [`pslite::kv::SArray::from_owner`] (not reached for a buffer
/// [`input`](super::input) accepted).
pub fn lend<T: PyValue>(buf: PyBuffer<T>) -> pslite::Result<pslite::kv::SArray<T>> {
    let (addr, bytes) = (
        buf.buf_ptr() as usize,
        buf.item_count() * std::mem::size_of::<T>(),
    );
    pslite::kv::SArray::from_owner(Lent {
        buf: Some(buf),
        addr,
        bytes,
    })
}

/// Releases the buffers the van let go of; called with the GIL held.
pub fn release_retired(_py: Python<'_>) {
    let retired = match RETIRED.lock() {
        Ok(mut r) if !r.is_empty() => std::mem::take(&mut *r),
        _ => return,
    };
    drop(retired);
}
