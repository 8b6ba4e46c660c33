//! The key store behind [`crate::kv::DefaultHandler`]: values in an arena of never-moving chunks,
//! an index from key to entry, and key lists *resolved* into runs of contiguous values — so a
//! push is summed, and a pull answered, run by run (one vectorised loop or one `memcpy` per run)
//! rather than key by key. No IO, no locks: the server's customer thread owns it.
//!
//! Semantics (ps-lite's `KVServerDefaultHandle`, stricter): a key's value length is fixed by its
//! first push; a push of another length is an error naming the key and both lengths, and
//! nothing of that request is applied. Pulling a key never pushed is an error naming the key.

mod arena;
mod index;
mod parallel;
mod resolved;
mod saved;

pub use index::{Index, Keys};
pub use resolved::{Lens, Resolved};

use self::resolved::KeyLens;

use self::arena::Arena;
use super::value::Value;
use super::Key;

/// Asks the kernel to back `[addr, addr + bytes)` with huge pages where it can (Linux
/// `MADV_HUGEPAGE`; only whole 2 MiB pages inside the range; a hint, errors ignored). For memory
/// read at random (the index), before it is first touched.
pub(crate) fn advise_huge_pages(addr: usize, bytes: usize) {
    const HUGE: usize = 2 << 20;
    let start = addr.div_ceil(HUGE) * HUGE;
    let end = (addr + bytes) / HUGE * HUGE;
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: advice only, on memory this process owns; it changes no contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, end);
}

/// How many keys ahead the resolving loops prefetch index cells.
const PREFETCH: usize = 16;

/// A key and where its value lies.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Key,
    off: usize,
    chunk: u32,
    len: u32,
}

impl Keys for [Entry] {
    #[inline]
    fn key_of(&self, e: u32) -> Key {
        self[e as usize].key
    }
    fn count(&self) -> usize {
        self.len()
    }
}

/// Values of type `V` by key.
pub struct KeyStore<V> {
    index: Index,
    entries: Vec<Entry>,
    arena: Arena<V>,
}

impl<V: Value> Default for KeyStore<V> {
    fn default() -> Self {
        KeyStore {
            index: Index::default(),
            entries: Vec::new(),
            arena: Arena::default(),
        }
    }
}

fn mismatch(key: Key, pushed: usize, stored: u32) -> String {
    format!(
        "length mismatch for key {key}: pushed {pushed} values, but its length is {stored} (fixed at its first push)"
    )
}

fn never_pushed(key: Key) -> String {
    format!("key {key} was never pushed, so it has no value to pull")
}

impl<V: Value> KeyStore<V> {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The keys held, in no particular order.
    pub fn keys(&self) -> Vec<Key> {
        self.entries.iter().map(|e| e.key).collect()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes reserved for values.
    pub fn reserved_bytes(&self) -> usize {
        self.arena.reserved_bytes()
    }

    /// The memory holding the values: `(address, bytes)` of each chunk, oldest first. Chunks
    /// never move or shrink while the store lives; new ones are appended.
    pub fn regions(&self) -> Vec<(usize, usize)> {
        self.arena
            .chunks
            .iter()
            .map(|c| (c.data.as_ptr() as usize, std::mem::size_of_val(&*c.data)))
            .collect()
    }

    /// The value of `key`.
    pub fn get(&self, key: Key) -> Option<&[V]> {
        let e = self.entries[self.index.get(key, &self.entries[..])? as usize];
        Some(self.arena.slice(e.chunk, e.off, e.len as usize))
    }

    /// Resolves the keys of a pull (sorted, unique); large requests in parallel chunks.
    ///
    /// # Errors
    /// A text naming the first key (in key order) that was never pushed.
    pub fn resolve_pull(&self, keys: &[Key]) -> Result<Resolved, String> {
        parallel::find_chunked(keys, None, |k, w| self.find_all(k, w))?
            .ok_or_else(|| "internal: a pull's lookup ended without a result".to_string())
    }

    /// A large push whose keys are all held: its resolution, found in parallel chunks. `None`
    /// when the request is small or a key is new (the caller then enters keys one by one).
    ///
    /// # Errors
    /// As [`KeyStore::resolve_push`]: the first key, in key order, whose length differs.
    fn find_push(&self, keys: &[Key], lens: Lens<'_>) -> Result<Option<Resolved>, String> {
        if keys.len() < parallel::PAR_MIN_KEYS {
            return Ok(None);
        }
        parallel::find_chunked(keys, Some(lens), |k, w| self.find_all(k, w))
    }

    /// Resolves the keys of a push (sorted, unique; `lens` as checked by the decoder), creating
    /// the keys it does not hold yet with zeroed values. Apply the values with
    /// [`push`](Self::push).
    ///
    /// # Errors
    /// A text naming the first key whose length differs from its stored length (then nothing
    /// is created), or naming a length or a count the store cannot hold.
    pub fn resolve_push(&mut self, keys: &[Key], lens: Lens<'_>) -> Result<Resolved, String> {
        // Every key held already (a repeated list): a lookup, in parallel when large.
        if let Some(found) = self.find_push(keys, lens)? {
            return Ok(found);
        }
        let mut out = Resolved::new(KeyLens::of(lens)?);
        out.keys = keys.len();
        // One pass: find each key or enter it, new keys into one region (in order) whose place
        // is set once its size is known. A wrong length undoes what the pass entered.
        let first_new = self.entries.len();
        let entered = self
            .enter_all(keys, lens, &mut out)
            .and_then(|new_values| self.place_new(first_new, new_values, &mut out));
        match entered {
            Ok(()) => Ok(out),
            Err(e) => {
                self.undo(first_new);
                Err(e)
            }
        }
    }

    /// [`resolve_push`](Self::resolve_push)'s pass: finds each key of `keys` or enters it
    /// (a new key's entry has no chunk yet, and its offset counts from the start of the new
    /// values), adding its run to `out`. Returns the number of new values.
    ///
    /// # Errors
    /// As [`resolve_push`](Self::resolve_push); the caller undoes what was entered.
    fn enter_all(
        &mut self,
        keys: &[Key],
        lens: Lens<'_>,
        out: &mut Resolved,
    ) -> Result<usize, String> {
        let mut new_values = 0usize;
        for (i, &key) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + PREFETCH) {
                self.index.prefetch(ahead);
            }
            if self.index.is_full() {
                // Grow once, for every key left in this request, not doubling by doubling.
                self.index.reserve(keys.len() - i, &self.entries[..])?;
            }
            let len = lens.of(i);
            let next = self.entries.len();
            if next >= u32::MAX as usize - 1 {
                return Err(format!(
                    "the store is full ({next} keys): cannot take key {key}"
                ));
            }
            // Everything that can refuse a new key is checked before the index holds it: the
            // undo forgets entries, and an index cell without its entry would outlive it.
            let Ok(len32) = u32::try_from(len) else {
                return Err(format!("key {key}: {len} values is too many for one key"));
            };
            self.room_for_entries(keys.len() - i)?;
            match self
                .index
                .get_or_insert(key, next as u32, &self.entries[..])?
            {
                (e, false) => {
                    let e = self.entries[e as usize];
                    if e.len as usize != len {
                        return Err(mismatch(key, len, e.len));
                    }
                    out.add(e.chunk, false, e.off, len);
                }
                (_, true) => {
                    self.entries.push(Entry {
                        key,
                        off: new_values,
                        chunk: u32::MAX,
                        len: len32,
                    });
                    out.add(u32::MAX, true, new_values, len);
                    new_values += len;
                }
            }
        }
        Ok(new_values)
    }

    /// Makes room for one more entry if the entries are full: grows once for the `left` keys
    /// of the request still to enter (a first push of 10M keys: one 240 MB block, not a
    /// doubling chain copying twice that).
    ///
    /// # Errors
    /// A text naming the allocation the store cannot take.
    #[inline]
    fn room_for_entries(&mut self, left: usize) -> Result<(), String> {
        if self.entries.len() < self.entries.capacity() {
            return Ok(());
        }
        let more = left.max(self.entries.len());
        self.entries.try_reserve_exact(more).map_err(|_| {
            format!(
                "cannot allocate {} bytes for the key store's entries",
                more.saturating_mul(std::mem::size_of::<Entry>())
            )
        })
    }

    /// Places the `new_values` values of the keys entered from entry `first_new` on: one
    /// region of the arena, into which their entries and `out`'s fresh runs now point.
    ///
    /// # Errors
    /// As the arena's allocation.
    fn place_new(
        &mut self,
        first_new: usize,
        new_values: usize,
        out: &mut Resolved,
    ) -> Result<(), String> {
        if self.entries.len() == first_new {
            return Ok(());
        }
        let (chunk, base) = self.arena.alloc(new_values)?;
        for e in &mut self.entries[first_new..] {
            e.chunk = chunk;
            e.off += base;
        }
        for r in out.runs.iter_mut().filter(|r| r.fresh) {
            r.chunk = chunk;
            r.off += base;
        }
        Ok(())
    }

    /// Forgets the keys a failed [`resolve_push`](Self::resolve_push) entered: those whose
    /// entries are `first_new..`.
    fn undo(&mut self, first_new: usize) {
        if self.entries.len() == first_new {
            return;
        }
        // Newest first: each removal leaves the entries below it, which the index still holds.
        for e in (first_new..self.entries.len()).rev() {
            self.index.remove(self.entries[e].key, &self.entries[..]);
        }
        self.entries.truncate(first_new);
    }

    /// Finds every key of `keys` (sorted, unique). For a pull (`want` is `None`) the lengths
    /// are the stored ones and a missing key is an error; for a push (`want` the request's
    /// lengths) a missing key ends the search with `None` (the caller enters the keys) and a
    /// stored length other than the request's is an error.
    fn find_all(&self, keys: &[Key], want: Option<Lens<'_>>) -> Result<Option<Resolved>, String> {
        let mut out = Resolved::new(KeyLens::Uniform(0));
        let mut per_key: Vec<u32> = Vec::new();
        if want.is_none() {
            per_key.reserve(keys.len());
        }
        let mut uniform = true;
        for (i, &key) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + PREFETCH) {
                self.index.prefetch(ahead);
            }
            let Some(e) = self.index.get(key, &self.entries[..]) else {
                return match want {
                    None => Err(never_pushed(key)),
                    Some(_) => Ok(None),
                };
            };
            let e = self.entries[e as usize];
            match want {
                Some(l) if l.of(i) != e.len as usize => {
                    return Err(mismatch(key, l.of(i), e.len));
                }
                Some(_) => {}
                None => {
                    uniform &= per_key.first().is_none_or(|&w| w == e.len);
                    per_key.push(e.len);
                }
            }
            out.add(e.chunk, false, e.off, e.len as usize);
        }
        out.keys = keys.len();
        out.lens = match (want, uniform, per_key.first()) {
            (Some(l), _, _) => KeyLens::of(l)?,
            (None, true, Some(&w)) => KeyLens::Uniform(w),
            (None, true, None) => KeyLens::Uniform(0),
            (None, false, _) => KeyLens::PerKey(per_key),
        };
        Ok(Some(out))
    }

    /// Applies pushed `vals` (key order, `res.values()` of them) to a list resolved by
    /// [`resolve_push`](Self::resolve_push) or settled: created values are copied in, the others
    /// summed ([`Value::sum`]).
    ///
    /// # Panics
    /// If `vals.len() != res.values()` (the decoder checked the shapes).
    pub fn push(&mut self, res: &Resolved, vals: &[V]) {
        assert_eq!(vals.len(), res.values, "pushed values vs resolved list");
        let mut at = 0;
        for r in &res.runs {
            let src = &vals[at..at + r.len];
            at += r.len;
            let dst = self.arena.slice_mut(r.chunk, r.off, r.len);
            if r.fresh {
                dst.copy_from_slice(src);
            } else {
                parallel::sum_into(dst, src);
            }
        }
    }

    /// Replaces the values of a list resolved by [`resolve_push`](Self::resolve_push) with
    /// `vals` (key order, `res.values()` of them): rows moved here from another server.
    ///
    /// # Panics
    /// If `vals.len() != res.values()`.
    pub fn assign(&mut self, res: &Resolved, vals: &[V]) {
        assert_eq!(vals.len(), res.values, "assigned values vs resolved list");
        let mut at = 0;
        for r in &res.runs {
            self.arena
                .slice_mut(r.chunk, r.off, r.len)
                .copy_from_slice(&vals[at..at + r.len]);
            at += r.len;
        }
    }

    /// The values of a resolved list, in key order.
    pub fn gather(&self, res: &Resolved) -> Vec<V> {
        let mut out = Vec::with_capacity(res.values);
        for r in &res.runs {
            parallel::extend(&mut out, self.arena.slice(r.chunk, r.off, r.len));
        }
        out
    }
}

/// `dst[i] = dst[i].sum(src[i])`: one loop the compiler vectorises for every value type.
#[inline]
fn sum_into<V: Value>(dst: &mut [V], src: &[V]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = d.sum(s);
    }
}

#[cfg(test)]
mod tests;
