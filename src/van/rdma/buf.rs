//! Registered buffers: memory the van owns and has registered with the device (the rings and
//! credit words of each channel), and the only place that reads or writes their bytes. The
//! device (or, through it, the peer) may write such memory at any time, so reads are volatile,
//! and the memory is made of atomics (interior mutability): it is written through shared
//! references.

use crate::error::{Error, Result};
use crate::van::ring::{HeaderBytes, HEADER};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Registered memory of at least 64 bytes, 8-byte aligned, zeroed, registered for local and
/// remote write. Field order is drop order: the memory region goes before the memory.
pub(super) struct RegisteredBuf {
    mr: Arc<MemoryRegion>,
    mem: Box<[AtomicU64]>,
    /// Registered bytes (the requested size rounded up to 8, at least 64).
    len: usize,
    /// Bytes pinned for it (whole pages), counted in `memlock::REGISTERED` until dropped.
    pinned: u64,
}

impl Drop for RegisteredBuf {
    fn drop(&mut self) {
        crate::van::memlock::REGISTERED.dec_by(self.pinned as i64);
    }
}

impl RegisteredBuf {
    /// Allocates and registers `bytes` bytes (rounded up to a multiple of 8, at least 64).
    ///
    /// # Errors
    /// [`Error::Van`] when the device refuses the registration (e.g. the locked-memory limit).
    pub fn new(pd: &Arc<ProtectionDomain>, bytes: usize) -> Result<RegisteredBuf> {
        let words = bytes.div_ceil(8).max(8);
        let mem: Box<[AtomicU64]> = (0..words + 8).map(|_| AtomicU64::new(0)).collect();
        let acc = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // SAFETY: the region stays registered while `mem` lives (both are dropped together, the
        // MR first: field order).
        let mr = unsafe { pd.reg_mr(mem.as_ptr() as usize, words * 8, acc) }.map_err(|e| {
            Error::Van(format!(
                "cannot register {bytes} bytes of memory (a ring or credit word, \
                     PS_RDMA_RING_BYTES): {e}; {}",
                crate::van::memlock::diagnose(words as u64 * 8)
            ))
        })?;
        let pinned = crate::van::memlock::pinned(mem.as_ptr() as usize, words * 8);
        crate::van::memlock::REGISTERED.inc_by(pinned as i64);
        Ok(RegisteredBuf {
            mr,
            mem,
            len: words * 8,
            pinned,
        })
    }

    /// The address of the first byte (what a WR's scatter/gather entry or a peer's write
    /// names).
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    /// The local key (for our WRs that read this buffer).
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// The remote key (for the peer's writes into this buffer).
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The first byte, writable: the atomics' cells allow writes through a shared reference.
    fn ptr(&self) -> *mut u8 {
        self.mem.as_ptr() as *mut u8
    }

    fn check(&self, at: u64, len: usize) -> usize {
        let at = at as usize;
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "{len} bytes at {at} overrun a registered buffer of {} bytes",
            self.len
        );
        at
    }

    /// Copies `bytes` to offset `at` (the caller's ring placement says no unread record lies
    /// there).
    ///
    /// # Panics
    /// When `at + bytes.len()` overruns the buffer (a bug in the caller's placement).
    pub fn write(&self, at: u64, bytes: &[u8]) {
        let at = self.check(at, bytes.len());
        // SAFETY: in bounds (checked); the device reads these bytes only for a WR posted after
        // this copy.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr().add(at), bytes.len()) }
    }

    /// Copies `out.len()` bytes from offset `at` (a record the ring state machine checked lies
    /// within the ring, and which the peer will not write again before our credit says it was
    /// consumed).
    ///
    /// # Panics
    /// When the range overruns the buffer.
    pub fn read(&self, at: u64, out: &mut [u8]) {
        let at = self.check(at, out.len());
        // SAFETY: in bounds (checked); see above for why the bytes are stable.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr().add(at), out.as_mut_ptr(), out.len()) }
    }

    /// Reads the record header at offset `at`, volatile (the device writes the ring).
    ///
    /// # Panics
    /// When the header overruns the buffer.
    pub fn read_header(&self, at: u64) -> HeaderBytes {
        let at = self.check(at, HEADER as usize);
        let mut h = [0u8; HEADER as usize];
        for (i, b) in h.iter_mut().enumerate() {
            // SAFETY: in bounds (checked); volatile because the device writes the ring.
            *b = unsafe { std::ptr::read_volatile(self.ptr().add(at + i)) };
        }
        h
    }

    /// Reads the little-endian `u64` at offset 0, volatile: a credit word the peer writes.
    pub fn read_word(&self) -> u64 {
        // SAFETY: 8 aligned bytes of our registered buffer (at least 64 long); the device
        // writes it, so read volatile.
        u64::from_le(unsafe { std::ptr::read_volatile(self.ptr() as *const u64) })
    }

    /// Writes `v` little-endian at offset 0, volatile: the source of a credit write. A write
    /// still reading an older value may see this newer one, which only returns more credit.
    pub fn write_word(&self, v: u64) {
        // SAFETY: 8 aligned bytes of our registered buffer (at least 64 long).
        unsafe { std::ptr::write_volatile(self.ptr() as *mut u64, v.to_le()) }
    }
}
