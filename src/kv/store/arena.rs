//! The key store's value arena: chunks of zeroed memory that values are carved from, never
//! moved or freed while the store lives — so a value's address stays valid for a remote write
//! (the RDMA van registers each chunk once, as TF verbs' allocator visitor registers each region
//! its allocator adds) and a resolved key list stays valid forever.
//!
//! Chunks double from 1 MiB up to 256 MiB; the new values of one request always come from one
//! chunk, in request order, so a key list pushed for the first time in one request lies in one
//! contiguous run.

/// The first chunk's size, in bytes.
const FIRST_CHUNK_BYTES: usize = 1 << 20;
/// Chunks stop doubling at this size (a request needing more gets a chunk of its own size).
const MAX_CHUNK_BYTES: usize = 256 << 20;

/// A chunk: its memory and how much of it is handed out.
pub(super) struct Chunk<V> {
    pub(super) data: Box<[V]>,
    used: usize,
}

/// Chunks of `V`s.
pub(super) struct Arena<V> {
    pub(super) chunks: Vec<Chunk<V>>,
}

impl<V> Default for Arena<V> {
    fn default() -> Self {
        Arena { chunks: Vec::new() }
    }
}

impl<V: bytemuck::Pod> Arena<V> {
    /// `n` contiguous zeroed elements: (chunk number, offset in elements).
    ///
    /// # Errors
    /// A text when the memory cannot be had or the chunk count outgrows `u32`.
    pub(super) fn alloc(&mut self, n: usize) -> Result<(u32, usize), String> {
        if let Some(last) = self.chunks.last_mut() {
            if last.data.len() - last.used >= n {
                let off = last.used;
                last.used += n;
                return Ok(((self.chunks.len() - 1) as u32, off));
            }
        }
        let size = std::mem::size_of::<V>().max(1);
        let next_bytes = self.chunks.last().map_or(FIRST_CHUNK_BYTES, |c| {
            (c.data.len() * size * 2).min(MAX_CHUNK_BYTES)
        });
        let cap = n.max(next_bytes / size).max(1);
        let number = u32::try_from(self.chunks.len())
            .map_err(|_| "the value store has too many chunks".to_string())?;
        let data = bytemuck::allocation::try_zeroed_slice_box::<V>(cap).map_err(|()| {
            format!(
                "cannot allocate {} bytes for the value store",
                cap.saturating_mul(size)
            )
        })?;
        self.chunks.push(Chunk { data, used: n });
        Ok((number, 0))
    }

    /// Elements `off..off + len` of chunk `chunk`.
    #[inline]
    pub(super) fn slice(&self, chunk: u32, off: usize, len: usize) -> &[V] {
        &self.chunks[chunk as usize].data[off..off + len]
    }

    /// As [`slice`](Self::slice), mutable.
    #[inline]
    pub(super) fn slice_mut(&mut self, chunk: u32, off: usize, len: usize) -> &mut [V] {
        &mut self.chunks[chunk as usize].data[off..off + len]
    }

    /// Bytes of all chunks (reserved, not necessarily touched).
    pub(super) fn reserved_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| std::mem::size_of_val(&*c.data))
            .sum()
    }
}
