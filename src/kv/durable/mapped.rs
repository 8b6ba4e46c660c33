//! Checkpoint files mapped into memory: without fsync (`PS_CHECKPOINT_SYNC=0`, Linux on x86-64
//! and AArch64, ext4, XFS or tmpfs) log records and snapshots are written with CPU stores into
//! the files' page-cache pages instead of `pwrite` (what checkpointing costs).
//!
//! Why: `pwrite` looks up, locks and marks every 4 KiB page on the way, and copies with
//! ordinary stores, which first read each destination line into the cache (and so push the
//! handler's values out of it). Here the pages are mapped once, and a large part of a record
//! is copied with streaming (non-temporal) stores: the log is written once and read only by a
//! replacement, so its lines skip the cache. `cargo bench --bench log` measures both against
//! `memcpy` (BENCHMARKS.md has the figures).
//!
//! What survives: a store into a shared file mapping lands in the page cache itself, so the
//! process's death loses nothing stored before it (streaming stores still in the core's
//! write-combining buffers are drained, never dropped). A machine crash needs
//! `PS_CHECKPOINT_SYNC=1`, which writes with `pwrite` and fsyncs instead.
//!
//! Order within a record: the payload, its padding and the terminator after it first, then
//! the record's first 16 bytes — the 12-byte header and the 4 bytes after it — with one
//! 16-byte store instruction. A process killed at any instruction therefore leaves either the
//! previous terminator at the record's start (the log ends before it: it was never
//! acknowledged) or the whole record.
//!
//! A log's mapping reserves [`RESERVE`] bytes of address space once (less where the process
//! may not have that much), however long the file is, so it never moves: the file grows under
//! it. The mapping's usable part is the file (the log's end is its terminator, not the file's
//! end). Its blocks are allocated (`fallocate`) before they are used, so that a store never
//! meets a full disk (which would raise SIGBUS). The file grows ahead of the records (once
//! fewer than half its length, at most 32 MiB, would be left after the next record: to at
//! least double, by at most 64 MiB beyond the record), and the pages up to as far ahead of
//! the record are faulted in writable (`MADV_POPULATE_WRITE`) on [`super::prefault`]'s thread
//! while the server serves, so that the stores rarely fault. The file must not be shortened
//! while the server writes through the mapping: the checkpoint directory's lock keeps other
//! servers out, and `pslite-launch inspect` only reads. (A dropped mapping is unmapped a
//! little later, on that thread; a file shortened meanwhile costs nothing: only `madvise`
//! still reaches it, which returns an error past the file's end.)

use super::log::HEADER;
use super::prefault;
use std::fs::File;
use std::io;

/// A log file's length is a multiple of this many bytes. A new log's file is as short as its
/// first record allows; each growth at least doubles it, by at most [`MAX_STEP`] more than the
/// records need, so a small log costs little fresh memory and a large one few steps.
const STEP: u64 = 1 << 20;

/// The most a log's file grows beyond what the records need.
const MAX_STEP: u64 = 64 << 20;

/// The address space a log's mapping reserves: a log longer than this between two snapshots
/// is written with `pwrite` from there on. Where `mmap` cannot have that much (a 39-bit
/// AArch64 address space, `ulimit -v`), half as much is tried, down to the file's length.
const RESERVE: usize = 256 << 30;

/// A payload is checksummed and copied this many bytes at a time: the piece the checksum
/// read is still in the L1 cache when it is copied.
const PIECE: usize = 16 << 10;

/// A log file mapped read-write and shared: `len` bytes from its start in use (the file is
/// that long), `reserved` bytes of address space.
pub(crate) struct Mapped {
    base: *mut u8,
    len: usize,
    reserved: usize,
    /// Pages below this were faulted in, or asked of [`prefault`]'s thread.
    ahead: usize,
}

// SAFETY: the mapping is owned by this value; it is written only through `&mut self`.
unsafe impl Send for Mapped {}

impl Mapped {
    /// Maps log `file` (open for reading and writing) to write a record from byte `at` to
    /// byte `min`: all of the file usable, and at least `min` bytes, the file grown to a
    /// multiple of 1 MiB with its blocks allocated. The bytes before `at` (records of a reused
    /// or restored log) are not faulted in.
    ///
    /// # Errors
    /// The OS error of `fallocate` (no room on the disk; a file system without it) or `mmap`;
    /// [`io::ErrorKind::Unsupported`] on a platform without the 16-byte store this needs.
    pub(crate) fn new(file: &File, (at, min): (u64, u64)) -> io::Result<Mapped> {
        mappable(file)?;
        let len = steps(file.metadata()?.len().max(min).max(1));
        allocate(file, 0, len)?;
        let mut reserve = RESERVE;
        let mut m = loop {
            match Mapped::map(file, reserve.max(len as usize)) {
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && reserve > len as usize => {
                    reserve /= 2
                }
                mapped => break mapped?,
            }
        };
        m.len = len as usize;
        m.ahead = (at - at % STEP) as usize;
        m.fault_in(min);
        Ok(m)
    }

    /// A new shared read-write mapping of `len` bytes of `file` from its start, all usable
    /// (the caller sets [`len`](Self::len) to the file's length when it is shorter).
    ///
    /// # Errors
    /// The OS error of `mmap`.
    fn map(file: &File, len: usize) -> io::Result<Mapped> {
        use std::os::fd::AsRawFd;
        // SAFETY: a new shared mapping of `len` bytes of a file; the bytes past its end are
        // never stored to (`len` is cut to the file's length then) and SIGBUS is not reached.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped {
            base: base.cast(),
            len,
            reserved: len,
            ahead: 0,
        })
    }

    /// Makes at least `min` bytes of the file usable, growing it ahead once fewer than half
    /// its length (at most 32 MiB) would be left after them: to at least double, by at most
    /// [`MAX_STEP`] beyond `min`. Then [`fault_in`](Self::fault_in).
    ///
    /// # Errors
    /// As [`new`](Self::new), or the log outgrew the mapping's reserved address space; the
    /// mapping is unchanged then.
    pub(crate) fn grow(&mut self, file: &File, min: u64) -> io::Result<()> {
        let now = self.len as u64;
        if min + (now / 2).min(MAX_STEP / 2) > now {
            let len = steps(min.max((2 * now).min(min + MAX_STEP)));
            if len > self.reserved as u64 {
                return Err(outgrown());
            }
            allocate(file, now, len)?;
            self.len = len as usize;
        }
        self.fault_in(min);
        Ok(())
    }

    /// Faults the pages up to `min` in now (those not asked of the thread before), and asks
    /// [`prefault`]'s thread for those up to half the usable length (at most 32 MiB) further.
    fn fault_in(&mut self, min: u64) {
        let need = (steps(min) as usize).min(self.len);
        if need > self.ahead {
            // SAFETY: inside the mapping (`need` ≤ `len`).
            prefault::populate_now(unsafe { self.base.add(self.ahead) }, need - self.ahead);
            self.ahead = need;
        }
        let target = (need + (self.len / 2).min(MAX_STEP as usize / 2)).min(self.len);
        if target > self.ahead {
            prefault::populate_later(self.base, self.ahead, target);
            self.ahead = target;
        }
    }

    /// Writes a record of `size` bytes at `at` and a terminator of `terminator` zero bytes
    /// after it, all but the record's first 16 bytes: the payload `parts` one after the other
    /// after the header, zero padding up to `size`. The checksum is taken piece by piece as
    /// the payload is copied, so each byte is read from memory once; returns the payload's
    /// crc32c. [`seal`](Self::seal) then stores the header.
    ///
    /// # Panics
    /// If `at` is not a multiple of 16, `size` is under 16 or shorter than the header and
    /// parts, or the record and terminator do not fit in the mapping.
    pub(crate) fn fill(
        &mut self,
        at: u64,
        parts: &[&[u8]],
        (size, terminator): (u64, usize),
    ) -> u32 {
        let (at, size) = (at as usize, size as usize);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(at.is_multiple_of(16) && size >= 16 && size >= HEADER + total);
        assert!(
            at + size + terminator <= self.len,
            "the record fits the mapping"
        );
        // SAFETY: bytes at..at + size + terminator are inside the mapping (asserted), and
        // `&mut self` is the only writer.
        let record =
            unsafe { std::slice::from_raw_parts_mut(self.base.add(at), size + terminator) };
        let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        let i = HEADER + copy_parts(&mut record[HEADER..], parts, &mut crc);
        record[i..].fill(0);
        crc.finalize() as u32
    }

    /// Stores the header `head` of the record [`fill`](Self::fill)ed at `at`: its first 16
    /// bytes (the header and the 4 bytes after it) in one store, after every store before it.
    ///
    /// # Panics
    /// If the 16 bytes at `at` are not inside the mapping.
    pub(crate) fn seal(&mut self, at: u64, head: &[u8; HEADER]) {
        let at = at as usize;
        assert!(at + 16 <= self.len, "inside the mapping");
        // SAFETY: inside the mapping (asserted); `&mut self` is the only writer.
        let first16 = unsafe { std::slice::from_raw_parts_mut(self.base.add(at), 16) };
        let mut first = [0u8; 16];
        first[..HEADER].copy_from_slice(head);
        first[HEADER..].copy_from_slice(&first16[HEADER..]);
        store_fenced_16(first16, first);
    }

    /// Writes `n` zero bytes at `at` (a terminator), in stores of 16 bytes where it can.
    ///
    /// # Panics
    /// If the bytes are not inside the mapping.
    pub(crate) fn zero(&mut self, at: u64, n: usize) {
        let at = at as usize;
        assert!(at + n <= self.len, "inside the mapping");
        // SAFETY: inside the mapping (asserted); `&mut self` is the only writer.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(at), n) }.fill(0);
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // After the fault-ins asked for it; this value no longer touches it.
        prefault::unmap(self.base, self.reserved);
    }
}

/// The error of a log longer than [`RESERVE`].
fn outgrown() -> io::Error {
    io::Error::other(format!(
        "the log outgrew the {} GiB of address space its mapping reserves",
        RESERVE >> 30
    ))
}

/// Whether `file` can be written through a mapping here: Linux on x86-64 or AArch64 (the
/// 16-byte store the log's header needs) and a file system that writes in place
/// ([`in_place`]).
///
/// # Errors
/// [`io::ErrorKind::Unsupported`] where it cannot; the OS error of `fstatfs`.
fn mappable(file: &File) -> io::Result<()> {
    if !cfg!(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )) {
        return Err(io::ErrorKind::Unsupported.into());
    }
    in_place(file)
}

/// Whether `file` is on a file system that writes a written block again in place (ext4, XFS,
/// tmpfs): on a copy-on-write one (btrfs, say) making a reused page writable needs new disk
/// space, and a full disk would be SIGBUS at a store instead of an error.
///
/// # Errors
/// [`io::ErrorKind::Unsupported`] on any other file system; the OS error of `fstatfs`.
fn in_place(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const TMPFS: i64 = 0x0102_1994;
    // SAFETY: fstatfs(2) into a zeroed struct this function owns.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    match s.f_type as i64 {
        EXT4 | XFS | TMPFS => Ok(()),
        _ => Err(io::ErrorKind::Unsupported.into()),
    }
}

/// Copies `parts` one after the other to the start of `dst` with [`copy_streaming`], adding
/// them to `crc` piece by piece as they are copied (each byte is read from memory once);
/// returns the bytes copied.
fn copy_parts(dst: &mut [u8], parts: &[&[u8]], crc: &mut crc_fast::Digest) -> usize {
    let mut i = 0;
    for piece in parts.iter().flat_map(|p| p.chunks(PIECE)) {
        crc.update(piece);
        copy_streaming(&mut dst[i..i + piece.len()], piece);
        i += piece.len();
    }
    i
}

/// Writes `head`, then `parts`, then the crc32c of all of them (little-endian `u32`) as the
/// whole of `file`, which is cut or grown to exactly that length first: a snapshot, through a
/// mapping with streaming stores (Linux on x86-64 and AArch64, on ext4, XFS or tmpfs). The
/// caller renames it into place.
///
/// # Errors
/// As [`Mapped::new`]; [`io::ErrorKind::Unsupported`] where it does not map (the caller
/// writes with `pwrite` then).
pub(crate) fn write_whole(file: &File, head: &[u8], parts: &[&[u8]]) -> io::Result<()> {
    mappable(file)?;
    let body = head.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    let len = body + 4;
    file.set_len(len as u64)?;
    allocate(file, 0, len as u64)?;
    let m = Mapped::map(file, len)?;
    prefault::populate_now(m.base, len);
    // SAFETY: the whole mapping, `len` bytes of a file that long; `m` is the only writer.
    let all = unsafe { std::slice::from_raw_parts_mut(m.base, m.len) };
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    copy_parts(all, &[&[head], parts].concat(), &mut crc);
    all[body..].copy_from_slice(&(crc.finalize() as u32).to_le_bytes());
    // The streaming stores ordered before the file is renamed into place.
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// `n` rounded up to a multiple of [`STEP`].
fn steps(n: u64) -> u64 {
    n.div_ceil(STEP) * STEP
}

/// Allocates the blocks of bytes `from..to` of `file`, which becomes at least `to` bytes long.
///
/// # Errors
/// The OS error (`ENOSPC`: no room; `EOPNOTSUPP`: a file system without `fallocate`, whose
/// mapped stores could meet a full disk).
fn allocate(file: &File, from: u64, to: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate(2) on a descriptor the caller owns; mode 0 changes no bytes.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            from as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Stores `bytes` into `dst` (16 bytes) with one instruction, after every store before it
/// (streaming ones included) is ordered before it.
fn store_fenced_16(dst: &mut [u8], bytes: [u8; 16]) {
    assert_eq!(dst.len(), 16);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; `dst` is 16 writable bytes. The fence orders the
    // streaming stores before this one.
    unsafe {
        use std::arch::x86_64::{_mm_loadu_si128, _mm_sfence, _mm_storeu_si128};
        _mm_sfence();
        _mm_storeu_si128(
            dst.as_mut_ptr().cast(),
            _mm_loadu_si128(bytes.as_ptr().cast()),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: NEON is part of AArch64; `dst` is 16 writable bytes. `st1` of one 16-byte
    // register is one instruction; the release fence orders the stores before it.
    unsafe {
        use std::arch::aarch64::{vld1q_u8, vst1q_u8};
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        vst1q_u8(dst.as_mut_ptr(), vld1q_u8(bytes.as_ptr()));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    dst.copy_from_slice(&bytes); // not reached: `Mapped::new` refuses these platforms
}

/// Copies `src` into `dst` (of the same length), the whole 64-byte lines of `dst` with
/// streaming stores on x86-64 (AVX-512, AVX or SSE2, whichever the processor has), the rest
/// with ordinary ones. The caller fences before a store that must follow these.
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if src.len() >= 4096 {
        let head = dst.as_ptr().align_offset(64).min(src.len());
        let lines = (src.len() - head) / 64;
        dst[..head].copy_from_slice(&src[..head]);
        let body = head..head + lines * 64;
        stream::lines(&mut dst[body.clone()], &src[body.clone()]);
        dst[body.end..].copy_from_slice(&src[body.end..]);
        return;
    }
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
mod stream {
    use std::arch::x86_64::*;

    /// Copies whole 64-byte lines into `dst` (64-byte aligned) with streaming stores.
    pub(crate) fn lines(dst: &mut [u8], src: &[u8]) {
        assert!(dst.len() == src.len() && dst.len().is_multiple_of(64));
        assert_eq!(dst.as_ptr().align_offset(64), 0);
        // SAFETY: each variant runs only where the processor has its instructions; bounds
        // and alignment are asserted above.
        unsafe {
            if is_x86_feature_detected!("avx512f") {
                avx512(dst, src)
            } else if is_x86_feature_detected!("avx") {
                avx(dst, src)
            } else {
                sse2(dst, src)
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(dst: &mut [u8], src: &[u8]) {
        for (d, s) in dst.chunks_exact_mut(64).zip(src.chunks_exact(64)) {
            _mm512_stream_si512(d.as_mut_ptr().cast(), _mm512_loadu_si512(s.as_ptr().cast()));
        }
    }

    #[target_feature(enable = "avx")]
    unsafe fn avx(dst: &mut [u8], src: &[u8]) {
        for (d, s) in dst.chunks_exact_mut(32).zip(src.chunks_exact(32)) {
            _mm256_stream_si256(d.as_mut_ptr().cast(), _mm256_loadu_si256(s.as_ptr().cast()));
        }
    }

    unsafe fn sse2(dst: &mut [u8], src: &[u8]) {
        for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
            _mm_stream_si128(d.as_mut_ptr().cast(), _mm_loadu_si128(s.as_ptr().cast()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A new empty file in the temporary directory, open for reading and writing.
    fn temp_file(name: &str) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("pslite-{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .expect("file");
        (path, f)
    }

    #[test]
    fn a_whole_file_written_through_a_mapping_is_its_parts_and_their_checksum() {
        let (path, f) = temp_file("whole");
        std::fs::write(&path, vec![9u8; 3 << 20]).expect("a longer file before");
        let big: Vec<u8> = (0..(1 << 20) + 7).map(|i| (i * 13) as u8).collect();
        write_whole(&f, b"head", &[b"a", &big]).expect("mapped (ext4 or tmpfs here)");
        let want = [&b"head"[..], b"a", &big].concat();
        let crc = crate::kv::durable::crc32c(&[&want]).to_le_bytes();
        assert_eq!(
            std::fs::read(&path).expect("read"),
            [&want[..], &crc].concat()
        );
        std::fs::remove_file(&path).expect("cleaned");
    }

    #[test]
    fn a_log_mapping_grows_ahead_in_place_and_keeps_its_bytes() {
        let (path, f) = temp_file("ahead");
        let len = || std::fs::metadata(&path).expect("file").len();
        let mut m = Mapped::new(&f, (0, 1 << 20)).expect("mapped (ext4 or tmpfs here)");
        let base = m.base;
        assert_eq!(len(), 1 << 20);
        let first: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        m.fill(0, &[&first], (300_016, 16));
        m.seal(0, &[1; HEADER]);
        // Half the file still free after 400 KB: no growth.
        m.grow(&f, 400 << 10).expect("grow");
        assert_eq!(len(), 1 << 20);
        // Less than half left: the file at least doubles, the mapping stays where it is.
        m.grow(&f, 700 << 10).expect("grow");
        assert_eq!((len(), m.base), (2 << 20, base));
        m.grow(&f, 100 << 20).expect("grow");
        assert!(len() >= 100 << 20 && m.base == base, "{} bytes", len());
        let last = vec![0xabu8; 5000];
        m.fill(99 << 20, &[&last], (5024, 16));
        // Dropped while its new pages may still be faulting in on the thread.
        drop(m);
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(&bytes[..HEADER], &[1; HEADER]);
        assert_eq!(&bytes[HEADER..HEADER + first.len()], &first[..]);
        let at = (99 << 20) + HEADER;
        assert_eq!(&bytes[at..at + last.len()], &last[..]);
        std::fs::remove_file(&path).expect("cleaned");
    }

    proptest! {
        /// Whatever the destination's alignment and the length, the copy is byte for byte.
        #[test]
        fn a_streaming_copy_is_exact(offset in 0usize..64, len in 0usize..20_000, seed in any::<u8>()) {
            let src: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed) ^ 0x5a).collect();
            let mut buf = vec![0u8; len + 128];
            copy_streaming(&mut buf[offset..offset + len], &src);
            prop_assert_eq!(&buf[offset..offset + len], &src[..]);
            prop_assert!(buf[..offset].iter().chain(&buf[offset + len..]).all(|&b| b == 0));
        }
    }
}
