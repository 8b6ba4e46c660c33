//! [`Huge`]: a zeroed array in memory mapped for it alone, aligned to a 2 MiB huge page and
//! asked to be backed by huge pages (`MADV_HUGEPAGE`) before any byte is touched, so that every
//! page of it can be one, whatever the allocator did before. A table's records and index are
//! read at random: with 4 KiB pages most lookups would miss the TLB as well as the cache.

use std::ptr::NonNull;

/// A huge page's bytes.
const HUGE_PAGE: usize = 2 << 20;

/// `len` values of `T`, zeroed at first (see the module docs).
pub struct Huge<T: bytemuck::Pod> {
    ptr: NonNull<T>,
    len: usize,
}

impl<T: bytemuck::Pod> Huge<T> {
    /// `len` zeroed values. Aborts like a failed allocation when the mapping fails.
    ///
    /// # Panics
    /// When `len` values of `T` do not fit the address space.
    pub fn zeroed(len: usize) -> Huge<T> {
        let bytes = Huge::<T>::mapped_bytes(len);
        let span = bytes
            .checked_add(HUGE_PAGE)
            .unwrap_or_else(|| panic!("{len} values do not fit the address space"));
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let layout = std::alloc::Layout::from_size_align(bytes, HUGE_PAGE)
                .unwrap_or(std::alloc::Layout::new::<u64>());
            std::alloc::handle_alloc_error(layout);
        }
        let start = (p as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let (head, tail) = (start - p as usize, p as usize + span - (start + bytes));
        // SAFETY: both ranges are inside the mapping just made and outside [start, start +
        // bytes), which is kept; page-aligned (the mapping and start are, and bytes is a
        // whole number of the system's pages).
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((start + bytes) as *mut libc::c_void, tail);
            }
        }
        crate::kv::store::advise_huge_pages(start, bytes);
        let ptr = NonNull::new(p.cast::<u8>().wrapping_add(head).cast::<T>())
            .unwrap_or(NonNull::dangling());
        Huge { ptr, len }
    }

    /// Bytes mapped for `len` values: whole pages of the system's size, at least one.
    ///
    /// # Panics
    /// When they do not fit the address space.
    fn mapped_bytes(len: usize) -> usize {
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        len.max(1)
            .checked_mul(std::mem::size_of::<T>().max(1))
            .and_then(|b| b.checked_next_multiple_of(page))
            .filter(|&b| b <= isize::MAX as usize / 2)
            .unwrap_or_else(|| panic!("{len} values do not fit the address space"))
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Huge<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` maps `len` values (zero bits, a valid T as it is Pod, then written) for
        // `self`'s life; page-aligned, so aligned for T.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: bytemuck::Pod> std::ops::DerefMut for Huge<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for Deref, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: bytemuck::Pod> Drop for Huge<T> {
    fn drop(&mut self) {
        // SAFETY: mapped in `zeroed` with this size; nothing refers to it any more.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), Huge::<T>::mapped_bytes(self.len));
        }
    }
}

// SAFETY: a Huge owns its values like a Box<[T]>.
unsafe impl<T: bytemuck::Pod + Send> Send for Huge<T> {}
// SAFETY: as for Send: shared access is through &[T].
unsafe impl<T: bytemuck::Pod + Sync> Sync for Huge<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_zeroed_aligned_and_writable() {
        for len in [1, 5, 4096, (3 << 20) + 7] {
            let mut h = Huge::<u64>::zeroed(len);
            assert_eq!(h.len(), len);
            assert_eq!(h.as_ptr() as usize % HUGE_PAGE, 0);
            assert!(h.iter().all(|&w| w == 0));
            h[len - 1] = 7;
            assert_eq!(h[len - 1], 7);
        }
        let b = Huge::<[u8; 5]>::zeroed(1000);
        assert_eq!(b.len(), 1000);
        assert!(b.iter().all(|x| *x == [0; 5]));
    }

    #[test]
    #[should_panic(expected = "do not fit the address space")]
    fn a_size_past_the_address_space_is_refused() {
        let _ = Huge::<u64>::zeroed(usize::MAX / 4);
    }
}
