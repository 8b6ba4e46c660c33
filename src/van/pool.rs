//! Registered memory: one large block carved into buffers (TF verbs' allocator-visitor approach:
//! register once, allocate many). The RDMA van registers the block as one memory region, so any
//! [`PoolBuf`] is a valid RDMA destination (address + rkey); the ZMQ van copies received content
//! into it.
//!
//! Allocation is first-fit over a free list of 64-byte-aligned chunks, coalesced on free.

use crate::error::{Error, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Chunk alignment and granularity, in bytes.
pub const ALIGN: usize = 64;

struct Inner {
    base: NonNull<u8>,
    layout: Layout,
    rkey: std::sync::atomic::AtomicU32,
    lkey: std::sync::atomic::AtomicU32,
    /// Free chunks: offset → length.
    free: Mutex<BTreeMap<usize, usize>>,
}

// SAFETY: the block is plain memory; chunks handed out are disjoint and the free list is behind
// a mutex.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: allocated in `MemoryPool::new` with this layout; every PoolBuf holds an Arc, so
        // none is alive here.
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// A block of `size` bytes to carve buffers from. Cloning shares the block.
#[derive(Clone)]
pub struct MemoryPool {
    inner: Arc<Inner>,
}

impl MemoryPool {
    /// Reserves `size` bytes (rounded up to [`ALIGN`]), zeroed; pages are touched only when used.
    ///
    /// # Errors
    /// [`Error::Van`] if the memory cannot be had.
    pub fn new(size: usize, rkey: u32) -> Result<MemoryPool> {
        let size = size.max(ALIGN).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(size, 4096)
            .map_err(|e| Error::Van(format!("memory pool of {size} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) })
            .ok_or_else(|| Error::Van(format!("cannot reserve a memory pool of {size} bytes")))?;
        let mut free = BTreeMap::new();
        free.insert(0, size);
        Ok(MemoryPool {
            inner: Arc::new(Inner {
                base,
                layout,
                rkey: rkey.into(),
                lkey: 0.into(),
                free: Mutex::new(free),
            }),
        })
    }

    /// The pool's size in bytes.
    pub fn size(&self) -> usize {
        self.inner.layout.size()
    }

    /// The rkey of the pool's memory region (on the ZMQ van, an identifier only).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sets the keys once the van registered the block.
    pub fn set_keys(&self, keys: crate::van::Registration) {
        use std::sync::atomic::Ordering::Release;
        self.inner.lkey.store(keys.lkey, Release);
        self.inner.rkey.store(keys.rkey, Release);
    }

    /// Address of the block's first byte (what the van registers).
    pub fn base(&self) -> usize {
        self.inner.base.as_ptr() as usize
    }

    /// Bytes not handed out.
    pub fn free_bytes(&self) -> usize {
        self.inner
            .free
            .lock()
            .map(|f| f.values().sum())
            .unwrap_or(0)
    }

    /// A buffer of `len` elements of `V` (zeroed the first time its memory is used).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if no free chunk is large enough, giving the sizes.
    pub fn alloc<V: bytemuck::Pod>(&self, len: usize) -> Result<PoolBuf<V>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<V>())
            .ok_or_else(|| Error::InvalidArgument(format!("{len} values do not fit in memory")))?;
        let chunk = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let mut free = self.inner.free.lock().map_err(|_| Error::Stopped)?;
        let Some((&off, &have)) = free.iter().find(|(_, &l)| l >= chunk) else {
            let total: usize = free.values().sum();
            return Err(Error::InvalidArgument(format!(
                "memory pool exhausted: {bytes} bytes asked, {total} of {} free (largest chunk {}); raise PS_POOL_BYTES",
                self.size(),
                free.values().max().copied().unwrap_or(0)
            )));
        };
        free.remove(&off);
        if have > chunk {
            free.insert(off + chunk, have - chunk);
        }
        Ok(PoolBuf {
            pool: self.inner.clone(),
            offset: off,
            chunk,
            len,
            _v: PhantomData,
        })
    }

    /// Whether `[addr, addr + len)` lies inside the pool.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        let base = self.inner.base.as_ptr() as usize;
        addr >= base && addr.saturating_add(len) <= base + self.size()
    }
}

/// A buffer of `len` elements of `V` inside a [`MemoryPool`]; returned to the pool on drop.
pub struct PoolBuf<V> {
    pool: Arc<Inner>,
    offset: usize,
    chunk: usize,
    len: usize,
    _v: PhantomData<V>,
}

// SAFETY: a PoolBuf owns its chunk exclusively; V is plain data.
unsafe impl<V: bytemuck::Pod + Send> Send for PoolBuf<V> {}
// SAFETY: shared access only reads.
unsafe impl<V: bytemuck::Pod + Sync> Sync for PoolBuf<V> {}

impl<V: bytemuck::Pod> PoolBuf<V> {
    /// Address of the first byte (the RDMA destination address).
    pub fn addr(&self) -> u64 {
        // SAFETY: offset is within the block.
        unsafe { self.pool.base.as_ptr().add(self.offset) as u64 }
    }

    /// The rkey of the pool it lives in.
    pub fn rkey(&self) -> u32 {
        self.pool.rkey.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Elements it can hold.
    pub fn capacity(&self) -> usize {
        self.chunk / std::mem::size_of::<V>().max(1)
    }

    /// Bytes it can hold.
    pub fn capacity_bytes(&self) -> usize {
        self.chunk
    }

    /// This buffer as the source of an RDMA WRITE of its first `len` elements (clamped to its
    /// length); the van keeps the buffer until the write completed.
    pub fn into_write_source(self) -> crate::van::WriteSource
    where
        V: Send + 'static,
    {
        let (addr, len) = (self.addr(), std::mem::size_of_val::<[V]>(&self));
        let lkey = self.pool.lkey.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: the bytes lie in the pool (registered with `lkey` once the van registered it;
        // before that no van can write) and belong to this buffer alone, which the hold keeps.
        unsafe { crate::van::WriteSource::new(addr, len, lkey, Box::new(self)) }
    }

    /// Sets the length (elements in use).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `len` exceeds [`capacity`](Self::capacity).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::InvalidArgument(format!(
                "length {len} exceeds the buffer's capacity {}",
                self.capacity()
            )));
        }
        self.len = len;
        Ok(())
    }

    /// The whole chunk as bytes.
    pub fn chunk_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the chunk is ours alone and lies within the block.
        unsafe {
            std::slice::from_raw_parts_mut(self.pool.base.as_ptr().add(self.offset), self.chunk)
        }
    }
}

impl<V: bytemuck::Pod> std::ops::Deref for PoolBuf<V> {
    type Target = [V];
    fn deref(&self) -> &[V] {
        // SAFETY: chunks are ALIGN-aligned (≥ align_of V for plain numbers), exclusive, in bounds.
        unsafe {
            std::slice::from_raw_parts(
                self.pool.base.as_ptr().add(self.offset) as *const V,
                self.len,
            )
        }
    }
}

impl<V: bytemuck::Pod> std::ops::DerefMut for PoolBuf<V> {
    fn deref_mut(&mut self) -> &mut [V] {
        // SAFETY: as in Deref, and we hold the only reference.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.pool.base.as_ptr().add(self.offset) as *mut V,
                self.len,
            )
        }
    }
}

impl<V> Drop for PoolBuf<V> {
    fn drop(&mut self) {
        let Ok(mut free) = self.pool.free.lock() else {
            return;
        };
        let (mut off, mut len) = (self.offset, self.chunk);
        if let Some((&next_off, &next_len)) = free.range(off + len..).next() {
            if next_off == off + len {
                free.remove(&next_off);
                len += next_len;
            }
        }
        if let Some((&prev_off, &prev_len)) = free.range(..off).next_back() {
            if prev_off + prev_len == off {
                free.remove(&prev_off);
                off = prev_off;
                len += prev_len;
            }
        }
        free.insert(off, len);
    }
}

impl<V: bytemuck::Pod + std::fmt::Debug> std::fmt::Debug for PoolBuf<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf")
            .field("addr", &self.addr())
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_disjoint_aligned_and_returned() {
        let pool = MemoryPool::new(4096, 5).expect("pool");
        let mut a = pool.alloc::<f32>(10).expect("a");
        let mut b = pool.alloc::<u8>(100).expect("b");
        assert_eq!(a.addr() % ALIGN as u64, 0);
        assert_eq!(b.addr() - a.addr(), 64);
        a.iter_mut().for_each(|x| *x = 1.5);
        b.iter_mut().for_each(|x| *x = 7);
        assert!(a.iter().all(|&x| x == 1.5) && b.iter().all(|&x| x == 7));
        assert!(pool.contains(a.addr() as usize, 40));
        assert_eq!(pool.free_bytes(), 4096 - 64 - 128);
        drop(a);
        drop(b);
        assert_eq!(pool.free_bytes(), 4096);
        // Coalesced: the whole block is one chunk again.
        let whole = pool.alloc::<u8>(4096).expect("whole");
        assert_eq!(whole.capacity(), 4096);
    }

    #[test]
    fn exhaustion_is_an_error_with_sizes() {
        let pool = MemoryPool::new(1024, 1).expect("pool");
        let _a = pool.alloc::<u8>(1000).expect("a");
        let err = pool.alloc::<u8>(100).expect_err("full").to_string();
        assert!(
            err.contains("memory pool exhausted: 100 bytes asked, 0 of 1024 free"),
            "{err}"
        );
    }

    proptest::proptest! {
        #[test]
        fn random_alloc_free_never_overlaps(ops in proptest::collection::vec((0usize..600, proptest::bool::ANY), 1..80)) {
            let pool = MemoryPool::new(8192, 1).expect("pool");
            let mut live: Vec<PoolBuf<u8>> = Vec::new();
            for (len, free_one) in ops {
                if free_one && !live.is_empty() {
                    live.remove(len % live.len());
                } else if let Ok(mut b) = pool.alloc::<u8>(len) {
                    let tag = (b.addr() / 64) as u8;
                    b.iter_mut().for_each(|x| *x = tag);
                    live.push(b);
                }
                for b in &live {
                    let tag = (b.addr() / 64) as u8;
                    proptest::prop_assert!(b.iter().all(|&x| x == tag), "a buffer was overwritten");
                }
            }
            drop(live);
            proptest::prop_assert_eq!(pool.free_bytes(), 8192);
        }
    }
}
