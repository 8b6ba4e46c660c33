//! A table's rows: fixed-size records in chunks that never move, addressed by slot (`u32`).
//! A record is 8-byte words: the key, the recency stamp, then the row's `dim` values and its
//! optimizer slots as `f32`s (padded to a whole word). Key and stamp sit in front of the values
//! they describe, so a lookup's key check brings the row's first values into the cache.

use super::huge::Huge;

/// The stamp of a free slot (never below an eviction threshold).
pub const FREE: u64 = u64::MAX;

/// Bytes a chunk aims at: several 2 MiB huge pages (asked for with `MADV_HUGEPAGE`: rows are
/// read at random, and with 4 KiB pages a lookup is a TLB miss too), few allocations; a
/// budget's last chunk is cut to its rows.
const CHUNK_BYTES: usize = 8 << 20;

/// Records in chunks of `1 << shift` slots.
pub struct Rows {
    chunks: Vec<Huge<u64>>,
    /// Words per record.
    stride: usize,
    /// `f32` values per record (row and slots).
    floats: usize,
    shift: u32,
    /// Slots handed out so far (`0..used` exist).
    used: usize,
    /// Most slots (the budget's rows), `usize::MAX` without a budget.
    cap: usize,
}

impl Rows {
    /// Words per record of `floats` `f32`s.
    pub fn stride_for(floats: usize) -> usize {
        2 + floats.div_ceil(2)
    }

    /// No records yet; records of `floats` values, at most `cap` of them.
    pub fn new(floats: usize, cap: usize) -> Rows {
        let stride = Rows::stride_for(floats);
        let per_chunk = (CHUNK_BYTES / (stride * 8)).max(1);
        // The largest power of two not above per_chunk.
        let shift = usize::BITS - 1 - per_chunk.leading_zeros();
        Rows {
            chunks: Vec::new(),
            stride,
            floats,
            shift,
            used: 0,
            cap,
        }
    }

    /// Bytes one record takes.
    pub fn record_bytes(&self) -> usize {
        self.stride * 8
    }

    /// Bytes the chunks of `n` records take when at most `cap` exist (the last chunk holds only
    /// up to `cap`).
    pub fn bytes_for(floats: usize, n: usize) -> usize {
        let r = Rows::new(floats, n);
        let per = 1usize << r.shift;
        let full = n / per;
        let rest = n % per;
        (full * per + rest) * r.stride * 8 + n.div_ceil(per) * std::mem::size_of::<Huge<u64>>()
    }

    /// Bytes the chunks hold.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len() * 8).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Huge<u64>>()
    }

    /// Slots handed out (free ones included).
    pub fn used(&self) -> usize {
        self.used
    }

    /// A new slot past the used ones, `None` at the cap. Its record is zeroed.
    pub fn take(&mut self) -> Option<u32> {
        if self.used >= self.cap || self.used >= u32::MAX as usize {
            return None;
        }
        let slot = self.used;
        let chunk = slot >> self.shift;
        if chunk == self.chunks.len() {
            let per = 1usize << self.shift;
            let records = per.min(self.cap - slot);
            if self.cap != usize::MAX && self.chunks.capacity() == 0 {
                self.chunks.reserve_exact(self.cap.div_ceil(per));
            }
            self.chunks.push(Huge::zeroed(records * self.stride));
        }
        self.used += 1;
        Some(slot as u32)
    }

    #[inline]
    fn at(&self, slot: u32) -> (usize, usize) {
        locate(slot, self.shift, self.stride)
    }

    /// The record's words.
    #[inline]
    fn record(&self, slot: u32) -> &[u64] {
        let (c, off) = self.at(slot);
        &self.chunks[c][off..off + self.stride]
    }

    #[inline]
    fn record_mut(&mut self, slot: u32) -> &mut [u64] {
        let (c, off) = self.at(slot);
        &mut self.chunks[c][off..off + self.stride]
    }

    /// The key of `slot`.
    #[inline]
    pub fn key(&self, slot: u32) -> u64 {
        let (c, off) = self.at(slot);
        self.chunks[c][off]
    }

    /// The stamp of `slot` ([`FREE`] for a free one).
    #[inline]
    pub fn stamp(&self, slot: u32) -> u64 {
        let (c, off) = self.at(slot);
        self.chunks[c][off + 1]
    }

    /// Sets the key and stamp of `slot`.
    #[inline]
    pub fn set_head(&mut self, slot: u32, key: u64, stamp: u64) {
        let r = self.record_mut(slot);
        r[0] = key;
        r[1] = stamp;
    }

    /// The stamp and the values (row, then optimizer slots) of `slot`, to change.
    #[inline]
    pub fn stamp_and_values_mut(&mut self, slot: u32) -> (&mut u64, &mut [f32]) {
        let floats = self.floats;
        let (head, values) = self.record_mut(slot).split_at_mut(2);
        (
            &mut head[1],
            &mut bytemuck::cast_slice_mut::<u64, f32>(values)[..floats],
        )
    }

    /// The row and slot values of `slot`.
    #[inline]
    pub fn values(&self, slot: u32) -> &[f32] {
        let floats = self.floats;
        &bytemuck::cast_slice::<u64, f32>(&self.record(slot)[2..])[..floats]
    }

    /// The row and slot values of `slot`, to change.
    #[inline]
    pub fn values_mut(&mut self, slot: u32) -> &mut [f32] {
        let floats = self.floats;
        &mut bytemuck::cast_slice_mut::<u64, f32>(&mut self.record_mut(slot)[2..])[..floats]
    }

    /// Asks the CPU to fetch the cache lines of `slot`'s record that hold its first `bytes`
    /// bytes (key and stamp are 16, the row `dim · 4` more: a lookup needs no slots).
    #[inline]
    pub fn prefetch(&self, slot: u32, bytes: usize) {
        let (c, off) = self.at(slot);
        if let Some(chunk) = self.chunks.get(c) {
            prefetch_lines(
                chunk.as_ptr().wrapping_add(off).cast(),
                bytes.min(self.stride * 8),
            );
        }
    }

    /// The words of the used slots, chunk by chunk (for a snapshot).
    pub fn words(&self) -> impl Iterator<Item = &[u64]> {
        let per = 1usize << self.shift;
        let used = self.used;
        self.chunks.iter().enumerate().map(move |(i, c)| {
            let records = (used - i * per).min(per);
            &c[..records * self.stride]
        })
    }

    /// Hands out slots up to `used` and fills their words from `words` (what
    /// [`words`](Self::words) gave, concatenated).
    ///
    /// # Errors
    /// When `used` is above the cap or `words` has another length.
    pub fn fill(&mut self, used: usize, words: &[u8]) -> Result<(), String> {
        if used > self.cap || used >= u32::MAX as usize {
            return Err(format!(
                "saved table: {used} rows saved, the table holds at most {}",
                self.cap.min(u32::MAX as usize - 1)
            ));
        }
        let want = used.checked_mul(self.stride * 8);
        if want != Some(words.len()) {
            return Err(format!(
                "saved table: {} bytes of rows for {used} records of {} bytes",
                words.len(),
                self.stride * 8
            ));
        }
        *self = Rows::new(self.floats, self.cap);
        let per = 1usize << self.shift;
        for _ in 0..used {
            self.take();
        }
        for (i, chunk) in self.chunks.iter_mut().enumerate() {
            let records = (used - i * per).min(per);
            let n = records * self.stride;
            let start = i * per * self.stride * 8;
            let src = &words[start..start + n * 8];
            for (w, b) in chunk[..n].iter_mut().zip(src.chunks_exact(8)) {
                let mut le = [0u8; 8];
                le.copy_from_slice(b);
                *w = u64::from_le_bytes(le);
            }
        }
        Ok(())
    }
}

/// Reading a record's key and asking for its cache lines: what a lookup needs of the records
/// (the table's pipelined lookups), from [`Rows`] or from [`RowsRaw`].
pub trait Records {
    /// The key of held `slot`.
    fn key(&self, slot: u32) -> u64;
    /// Asks for the lines of `slot`'s first `bytes` bytes.
    fn prefetch(&self, slot: u32, bytes: usize);
}

impl Records for Rows {
    #[inline]
    fn key(&self, slot: u32) -> u64 {
        Rows::key(self, slot)
    }

    #[inline]
    fn prefetch(&self, slot: u32, bytes: usize) {
        Rows::prefetch(self, slot, bytes);
    }
}

/// The records of a [`Rows`] borrowed mutably, as raw pointers, so that several threads step
/// different rows at once: each reads any record's key, and changes the stamp and values only
/// of slots no other thread touches ([`stamp_and_values`](Self::stamp_and_values)). Keys are
/// never written through it.
pub struct RowsRaw<'a> {
    chunks: Vec<*mut u64>,
    stride: usize,
    floats: usize,
    shift: u32,
    used: usize,
    _rows: std::marker::PhantomData<&'a mut Rows>,
}

// SAFETY: the pointers are into chunks borrowed mutably for 'a; threads read keys (never
// written meanwhile) and write only the stamps and values of the slots each was given, which
// `stamp_and_values`'s contract keeps apart.
unsafe impl Send for RowsRaw<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for RowsRaw<'_> {}

impl Rows {
    /// Raw access to the records for stepping rows from several threads ([`RowsRaw`]).
    pub fn raw(&mut self) -> RowsRaw<'_> {
        RowsRaw {
            chunks: self.chunks.iter_mut().map(|c| c.as_mut_ptr()).collect(),
            stride: self.stride,
            floats: self.floats,
            shift: self.shift,
            used: self.used,
            _rows: std::marker::PhantomData,
        }
    }
}

impl RowsRaw<'_> {
    /// A pointer to the first word of `slot`'s record.
    #[inline]
    fn record(&self, slot: u32) -> *mut u64 {
        let s = slot as usize;
        assert!(s < self.used, "slot {s} of {} used", self.used);
        let (chunk, off) = locate(slot, self.shift, self.stride);
        // In bounds: the chunk of a used slot exists and holds the whole record.
        self.chunks[chunk].wrapping_add(off)
    }

    /// The stamp and the values (row, then optimizer slots) of `slot`, to change.
    ///
    /// # Safety
    /// No other thread may read or write `slot`'s stamp or values while the references live
    /// (they may read its key).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn stamp_and_values(&self, slot: u32) -> (&mut u64, &mut [f32]) {
        let r = self.record(slot);
        // SAFETY: the record is inside its chunk (`record`), its words 1.. are the stamp and
        // `floats` f32s (stride = 2 + floats / 2 rounded up), and the caller keeps other
        // threads off them.
        unsafe {
            (
                &mut *r.add(1),
                std::slice::from_raw_parts_mut(r.add(2).cast::<f32>(), self.floats),
            )
        }
    }
}

impl Records for RowsRaw<'_> {
    #[inline]
    fn key(&self, slot: u32) -> u64 {
        // SAFETY: inside the chunk (`record`); keys are not written while `self` lives.
        unsafe { self.record(slot).read() }
    }

    #[inline]
    fn prefetch(&self, slot: u32, bytes: usize) {
        let s = slot as usize;
        if s < self.used {
            prefetch_lines(self.record(slot).cast(), bytes.min(self.stride * 8));
        }
    }
}

/// Where `slot`'s record is, in chunks of `1 << shift` records of `stride` words: the chunk,
/// and the offset in words within it.
#[inline]
fn locate(slot: u32, shift: u32, stride: usize) -> (usize, usize) {
    let s = slot as usize;
    (s >> shift, (s & ((1 << shift) - 1)) * stride)
}

/// Asks the CPU for the cache lines of `bytes` bytes from `start`.
#[inline]
fn prefetch_lines(start: *const i8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        // The lines from start's to the last byte's.
        let lines = ((start as usize & 63) + bytes.max(1) - 1) / 64 + 1;
        let mut p = start;
        for _ in 0..lines {
            // SAFETY: a prefetch is a hint; it never faults, whatever the address.
            unsafe { std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0) };
            p = p.wrapping_add(64);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}
