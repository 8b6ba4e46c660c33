//! A table's index: key → row slot, an open-addressing hash table with linear probing of
//! 5-byte buckets in one array — a tag byte (8 bits of the key's hash, 0 for an empty bucket)
//! then the slot (`u32`, little-endian), so a probe reads one cache line (two when a bucket
//! straddles, 4 times in 64). The key itself lives with its row, which a lookup reads anyway,
//! so a probe past a bucket whose tag differs costs nothing more, and a tag that matches by
//! chance (1 in 255) costs a look at one more row.
//!
//! Sized for a budget it is allocated once at 80 % load for the table's most rows (6.25 bytes
//! per row) and never grows; without a budget it doubles past 80 %. Removal shifts later
//! buckets of the cluster back (no tombstones), so a table that evicts forever never degrades.

use super::admit::fmix64;
use super::huge::Huge;

/// Most buckets in use, as a fraction `LOAD_NUM / LOAD_DEN`, before the index is full.
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;

/// Fewest buckets.
const MIN_BUCKETS: usize = 16;

/// Key → slot, with the keys held by the caller (`key_of(slot)`).
pub struct Index {
    buckets: Huge<Bucket>,
    len: usize,
}

/// A tag byte, then the slot's 4 bytes (little-endian).
type Bucket = [u8; 5];

/// The bucket count that holds `rows` keys at the load limit.
pub fn buckets_for(rows: usize) -> usize {
    rows.saturating_mul(LOAD_DEN)
        .div_ceil(LOAD_NUM)
        .max(MIN_BUCKETS)
}

/// Bytes of an index of `buckets` buckets.
pub fn bytes_for(buckets: usize) -> usize {
    buckets * 5
}

/// The hash a key's bucket and tag come from (for the `_hashed` methods, which save computing
/// it twice).
#[inline]
pub fn hash(key: u64) -> u64 {
    fmix64(key)
}

#[inline]
fn tag_of(h: u64) -> u8 {
    (h as u8).max(1)
}

impl Index {
    /// An index of `buckets` buckets (zeroed memory: fresh pages, touched as they fill).
    pub fn with_buckets(buckets: usize) -> Index {
        let buckets = buckets.max(MIN_BUCKETS);
        Index {
            buckets: Huge::zeroed(buckets),
            len: 0,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Buckets.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        bytes_for(self.buckets.len())
    }

    /// Whether one more key fits under the load limit.
    pub fn has_room(&self) -> bool {
        (self.len + 1) * LOAD_DEN <= self.buckets.len() * LOAD_NUM
    }

    #[inline]
    fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.buckets.len() as u128) >> 64) as usize
    }

    /// The slot in bucket `i`.
    #[inline]
    fn slot(&self, i: usize) -> u32 {
        let b = &self.buckets[i];
        u32::from_le_bytes([b[1], b[2], b[3], b[4]])
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.buckets.len() {
            0
        } else {
            i + 1
        }
    }

    /// Asks the CPU to fetch the home bucket of the key whose [`hash`] is `h` (for a lookup a
    /// few keys later).
    #[inline]
    pub fn prefetch_hashed(&self, h: u64) {
        let i = self.home(h);
        prefetch_read(self.buckets.as_ptr().wrapping_add(i));
    }

    /// The first bucket on `key`'s probe whose tag matches and which `accept`s, `None` when
    /// the probe reaches an empty bucket first.
    #[inline]
    fn probe(&self, key: u64, accept: impl Fn(usize) -> bool) -> Option<usize> {
        self.probe_hashed(fmix64(key), accept)
    }

    /// [`probe`](Self::probe) of the key whose [`hash`] is `h`.
    #[inline]
    fn probe_hashed(&self, h: u64, accept: impl Fn(usize) -> bool) -> Option<usize> {
        let tag = tag_of(h);
        let mut i = self.home(h);
        loop {
            let t = self.buckets[i][0];
            if t == 0 {
                return None;
            }
            if t == tag && accept(i) {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// For the key whose [`hash`] is `h`: the slot of the first bucket on its probe whose tag
    /// matches, without reading a key — a candidate to check against its record (a tag matches
    /// by chance 1 time in 255) — or `None` when the key is surely not held.
    #[inline]
    pub fn candidate_hashed(&self, h: u64) -> Option<u32> {
        self.probe_hashed(h, |_| true).map(|i| self.slot(i))
    }

    /// The bucket holding `key`, `None` when it holds none.
    #[inline]
    fn position(&self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<usize> {
        self.probe(key, |i| key_of(self.slot(i)) == key)
    }

    /// `key`'s slot, `None` when it holds none.
    #[inline]
    pub fn find(&self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        self.position(key, key_of).map(|i| self.slot(i))
    }

    /// Adds `key` → `slot`; `key` must not be held and [`has_room`](Self::has_room) must hold.
    pub fn insert(&mut self, key: u64, slot: u32) {
        debug_assert!(self.len < self.buckets.len());
        let h = fmix64(key);
        let mut i = self.home(h);
        while self.buckets[i][0] != 0 {
            i = self.next(i);
        }
        self.buckets[i] = bucket(tag_of(h), slot);
        self.len += 1;
    }

    /// Removes `key`, returning its slot; later buckets of its cluster shift back so that
    /// every key stays reachable from its home.
    pub fn remove(&mut self, key: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        let i = self.position(key, &key_of)?;
        let slot = self.slot(i);
        // Backward-shift deletion (Knuth's Algorithm R): move a later entry into the hole when
        // its home is not cyclically inside (hole, its bucket].
        let mut hole = i;
        let mut j = self.next(i);
        while self.buckets[j][0] != 0 {
            let home = self.home(fmix64(key_of(self.slot(j))));
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.buckets[hole] = self.buckets[j];
                hole = j;
            }
            j = self.next(j);
        }
        self.buckets[hole] = [0; 5];
        self.len -= 1;
        Some(slot)
    }

    /// Doubles the buckets, placing every key again.
    pub fn grow(&mut self, key_of: impl Fn(u32) -> u64) {
        let mut bigger = Index::with_buckets(self.buckets.len() * 2);
        for (i, b) in self.buckets.iter().enumerate() {
            if b[0] != 0 {
                let s = self.slot(i);
                bigger.insert(key_of(s), s);
            }
        }
        *self = bigger;
    }
}

/// A bucket of `tag` and `slot`.
#[inline]
fn bucket(tag: u8, slot: u32) -> Bucket {
    let s = slot.to_le_bytes();
    [tag, s[0], s[1], s[2], s[3]]
}

#[inline]
fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Inserts and removes in any order agree with a `HashMap`, through wrap-around and
        /// growth.
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec((any::<bool>(), 0u64..300), 1..600)) {
            let mut keys: Vec<u64> = Vec::new();
            let mut index = Index::with_buckets(16);
            let mut model: HashMap<u64, u32> = HashMap::new();
            for (add, k) in ops {
                let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                if add {
                    if model.contains_key(&key) { continue; }
                    if !index.has_room() { index.grow(|s| keys[s as usize]); }
                    let slot = keys.len() as u32;
                    keys.push(key);
                    index.insert(key, slot);
                    model.insert(key, slot);
                } else {
                    prop_assert_eq!(index.remove(key, |s| keys[s as usize]), model.remove(&key));
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for &key in &keys {
                prop_assert_eq!(index.find(key, |s| keys[s as usize]), model.get(&key).copied());
            }
        }
    }
}
