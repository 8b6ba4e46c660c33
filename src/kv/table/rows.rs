//! A table's rows: fixed-size records in chunks that never move, addressed by slot (`u32`).
//! A record is 8-byte words: the key, the recency stamp, then the row's `dim` values and its
//! optimizer slots as `f32`s (padded to a whole word). Key and stamp sit in front of the values
//! they describe, so a lookup's key check brings the row's first values into the cache.

/// The stamp of a free slot (never below an eviction threshold).
pub const FREE: u64 = u64::MAX;

/// Bytes a chunk aims at: several 2 MiB huge pages (asked for with `MADV_HUGEPAGE`: rows are
/// read at random, and with 4 KiB pages a lookup is a TLB miss too), few allocations; a
/// budget's last chunk is cut to its rows.
const CHUNK_BYTES: usize = 8 << 20;

/// Records in chunks of `1 << shift` slots.
pub struct Rows {
    chunks: Vec<Box<[u64]>>,
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
        (full * per + rest) * r.stride * 8 + n.div_ceil(per) * std::mem::size_of::<Box<[u64]>>()
    }

    /// Bytes the chunks hold.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len() * 8).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Box<[u64]>>()
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
            let chunk = vec![0u64; records * self.stride].into_boxed_slice();
            crate::kv::store::advise_huge_pages(chunk.as_ptr() as usize, chunk.len() * 8);
            self.chunks.push(chunk);
        }
        self.used += 1;
        Some(slot as u32)
    }

    #[inline]
    fn at(&self, slot: u32) -> (usize, usize) {
        let s = slot as usize;
        (s >> self.shift, (s & ((1 << self.shift) - 1)) * self.stride)
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

    /// Sets the stamp of `slot`.
    #[inline]
    pub fn set_stamp(&mut self, slot: u32, stamp: u64) {
        self.record_mut(slot)[1] = stamp;
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

    /// Asks the CPU to fetch `slot`'s record, every cache line of it.
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        let (c, off) = self.at(slot);
        if let Some(chunk) = self.chunks.get(c) {
            #[cfg(target_arch = "x86_64")]
            for line in (0..self.stride * 8).step_by(64) {
                // SAFETY: a prefetch is a hint; the addresses are inside the chunk anyway.
                unsafe {
                    std::arch::x86_64::_mm_prefetch(
                        chunk
                            .as_ptr()
                            .wrapping_add(off)
                            .cast::<i8>()
                            .wrapping_add(line),
                        std::arch::x86_64::_MM_HINT_T0,
                    );
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (chunk, off);
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
