//! The key store's index: key → entry number, an open-addressing hash table (linear probing,
//! Fibonacci hashing) of 8-byte cells: a 32-bit tag of the key's hash and the entry number.
//! The key itself is in the entry, which a lookup reads anyway (it holds the value's place), so
//! a hit costs one cache miss in the table; a tag that matches by chance costs a look at one
//! more entry, once in 2^32 probes.
//!
//! The table is at most half full (at 60 % lookups took 1.8× as long, measured) and asks the
//! kernel for huge pages (`MADV_HUGEPAGE`): at 10M keys a lookup is a cache miss either way,
//! and with 4 KiB pages a TLB miss too. Fresh memory is dear on virtual machines (the kernel
//! zeroes every page, and the host may have to back it): 8-byte cells keep the table at 256 MiB
//! for 10M keys. `cargo bench --bench store` compares it with `std::collections::HashMap`
//! (SipHash) and hashbrown with foldhash (figures in BENCHMARKS.md). It grows by doubling,
//! rebuilding from the entries in order; removal shifts later cells back (no tombstones).

use crate::kv::Key;

/// A free cell's `entry`: cells hold entry + 1, so a table of zeroed memory is empty (fresh
/// pages, no pass to fill it). Entry numbers are below `u32::MAX`.
const EMPTY: u32 = 0;
/// Most cells in use, in tenths, before the table doubles.
const MAX_LOAD_TENTHS: usize = 5;

#[derive(Clone, Copy, bytemuck::Zeroable)]
struct Cell {
    /// The low 32 bits of the key's hash.
    tag: u32,
    /// The key's entry + 1; [`EMPTY`] for a free cell.
    entry: u32,
}

/// The keys of the entries an [`Index`] points into: `key_of(e)` is entry `e`'s key.
pub trait Keys {
    /// The key of entry `e` (an entry the index holds).
    fn key_of(&self, e: u32) -> Key;
    /// How many entries there are (all of them indexed).
    fn count(&self) -> usize;
}

impl Keys for [Key] {
    fn key_of(&self, e: u32) -> Key {
        self[e as usize]
    }
    fn count(&self) -> usize {
        self.len()
    }
}

/// A map from keys to the numbers of their entries (`u32`, below `u32::MAX`); the entries,
/// which hold the keys, are the caller's ([`Keys`]).
pub struct Index {
    cells: Vec<Cell>,
    /// 64 − log2(cells.len()): a hash's top bits pick the home cell.
    shift: u32,
    len: usize,
}

impl Default for Index {
    fn default() -> Self {
        Index::with_capacity(0)
    }
}

/// The hash: `key × 2^64/φ` (Fibonacci hashing). Its top bits pick the home cell (every bit of
/// the key reaches them, so keys spread whether they differ in low bits or high ones); its low
/// 32 bits are the tag.
#[inline]
fn hash(key: Key) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// `n` empty cells: zeroed memory (fresh pages when large), with huge pages asked for before
/// anything touches it.
///
/// # Errors
/// A text giving the size when the memory cannot be had.
fn empty_cells(n: usize) -> Result<Vec<Cell>, String> {
    let bytes = n.saturating_mul(std::mem::size_of::<Cell>());
    let v = bytemuck::allocation::try_zeroed_vec::<Cell>(n)
        .map_err(|()| format!("cannot allocate {bytes} bytes for the key index"))?;
    super::advise_huge_pages(v.as_ptr() as usize, bytes);
    Ok(v)
}

fn cells_for(keys: usize) -> usize {
    keys.saturating_mul(10)
        .div_ceil(MAX_LOAD_TENTHS)
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX / 2 + 1)
        .max(16)
}

impl Index {
    /// An index that holds `n` keys before it grows.
    ///
    /// # Panics
    /// When the memory cannot be had (as `Vec::with_capacity`); growing later is fallible.
    pub fn with_capacity(n: usize) -> Index {
        let cells = cells_for(n);
        Index {
            cells: empty_cells(cells).unwrap_or_else(|e| panic!("{e}")),
            shift: 64 - cells.trailing_zeros(),
            len: 0,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn home(&self, h: u64) -> usize {
        (h >> self.shift) as usize
    }

    /// Starts loading `key`'s home cell into the cache (a hint; no effect off x86-64). Loops
    /// over many keys call it a few keys ahead, so that their cache misses overlap.
    #[inline]
    pub fn prefetch(&self, key: Key) {
        #[cfg(target_arch = "x86_64")]
        {
            let i = self.home(hash(key));
            // SAFETY: `i < cells.len()` (the shift keeps the hash below it), and a prefetch
            // reads nothing architecturally.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    self.cells.as_ptr().add(i) as *const i8,
                )
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// The cell holding `key`, or the free cell ending its probe run.
    #[inline]
    fn find<K: Keys + ?Sized>(&self, key: Key, keys: &K) -> (usize, bool) {
        let h = hash(key);
        let tag = h as u32;
        let mask = self.cells.len() - 1;
        let mut i = self.home(h);
        loop {
            let c = self.cells[i];
            if c.entry == EMPTY {
                return (i, false);
            }
            if c.tag == tag && keys.key_of(c.entry - 1) == key {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// The entry of `key`.
    #[inline]
    pub fn get<K: Keys + ?Sized>(&self, key: Key, keys: &K) -> Option<u32> {
        match self.find(key, keys) {
            (i, true) => Some(self.cells[i].entry - 1),
            _ => None,
        }
    }

    /// Whether the next insertion of a new key makes the table grow.
    #[inline]
    pub fn is_full(&self) -> bool {
        (self.len + 1) * 10 > self.cells.len() * MAX_LOAD_TENTHS
    }

    /// Makes room for `more` keys beyond those held, so that inserting them does not grow the
    /// table one doubling at a time.
    ///
    /// # Errors
    /// A text giving the size when the memory cannot be had (the index is unchanged).
    pub fn reserve<K: Keys + ?Sized>(&mut self, more: usize, keys: &K) -> Result<(), String> {
        let want = cells_for(self.len.saturating_add(more));
        if want > self.cells.len() {
            self.rebuild(want, keys)?;
        }
        Ok(())
    }

    /// The entry of `key`, and `false`; or, when the key is absent, maps it to `entry` and
    /// returns `entry` and `true`. One probe sequence either way. `keys` holds the entries
    /// already indexed; entry `entry` (the new key's) need not exist yet.
    ///
    /// # Errors
    /// A text giving the size when the table must grow and the memory cannot be had.
    #[inline]
    pub fn get_or_insert<K: Keys + ?Sized>(
        &mut self,
        key: Key,
        entry: u32,
        keys: &K,
    ) -> Result<(u32, bool), String> {
        debug_assert!(entry < u32::MAX);
        if self.is_full() {
            self.rebuild(self.cells.len() * 2, keys)?;
        }
        Ok(match self.find(key, keys) {
            (i, true) => (self.cells[i].entry - 1, false),
            (i, false) => {
                self.cells[i] = Cell {
                    tag: hash(key) as u32,
                    entry: entry + 1,
                };
                self.len += 1;
                (entry, true)
            }
        })
    }

    /// Removes `key`, returning its entry (its entry must still be in `keys`). Later cells of
    /// its probe run shift back into the hole.
    pub fn remove<K: Keys + ?Sized>(&mut self, key: Key, keys: &K) -> Option<u32> {
        let (mut hole, found) = self.find(key, keys);
        if !found {
            return None;
        }
        let entry = self.cells[hole].entry - 1;
        let mask = self.cells.len() - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let c = self.cells[j];
            if c.entry == EMPTY {
                break;
            }
            // `c` may fill the hole unless its home lies cyclically in (hole, j].
            let home = self.home(hash(keys.key_of(c.entry - 1)));
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.cells[hole] = c;
                hole = j;
            }
        }
        self.cells[hole].entry = EMPTY;
        self.len -= 1;
        Some(entry)
    }

    /// A table of `cells` cells holding every entry of `keys` (which are all indexed), built
    /// in entry order.
    fn rebuild<K: Keys + ?Sized>(&mut self, cells: usize, keys: &K) -> Result<(), String> {
        debug_assert_eq!(keys.count(), self.len);
        self.cells = empty_cells(cells)?;
        self.shift = 64 - cells.trailing_zeros();
        let mask = cells - 1;
        let n = keys.count();
        for e in 0..n as u32 {
            if (e as usize) + 16 < n {
                self.prefetch(keys.key_of(e + 16));
            }
            let h = hash(keys.key_of(e));
            let mut i = self.home(h);
            while self.cells[i].entry != EMPTY {
                i = (i + 1) & mask;
            }
            self.cells[i] = Cell {
                tag: h as u32,
                entry: e + 1,
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A key-value map on the index: entries are a vector of keys, removal swaps the last in.
    #[derive(Default)]
    struct Map {
        ix: Index,
        keys: Vec<Key>,
        vals: Vec<u32>,
    }

    impl Map {
        fn get(&self, k: Key) -> Option<u32> {
            self.ix
                .get(k, &self.keys[..])
                .map(|e| self.vals[e as usize])
        }
        fn insert(&mut self, k: Key, v: u32) -> Option<u32> {
            let n = self.keys.len() as u32;
            match self.ix.get_or_insert(k, n, &self.keys[..]).expect("memory") {
                (e, false) => Some(std::mem::replace(&mut self.vals[e as usize], v)),
                (_, true) => {
                    self.keys.push(k);
                    self.vals.push(v);
                    None
                }
            }
        }
        fn remove(&mut self, k: Key) -> Option<u32> {
            let e = self.ix.remove(k, &self.keys[..])? as usize;
            let last = self.keys.len() - 1;
            if e != last {
                // Move the last entry into the gap: re-point its key.
                let moved = self.keys[last];
                self.ix.remove(moved, &self.keys[..]);
                self.keys.swap(e, last);
                self.vals.swap(e, last);
                self.keys.pop();
                let v = self.vals.pop();
                self.ix
                    .get_or_insert(moved, e as u32, &self.keys[..])
                    .expect("memory");
                return v;
            }
            self.keys.pop();
            self.vals.pop()
        }
    }

    proptest::proptest! {
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((0u64..64, proptest::num::u64::ANY, 0u32..1000), 0..400),
                            reserve in 0usize..100) {
            let mut m = Map::default();
            m.ix.reserve(reserve, &m.keys[..]).expect("memory");
            let mut model = HashMap::new();
            for (small, big, v) in ops {
                // Half the keys from a small set (repeats), half anywhere (incl. 0 and u64::MAX).
                let key = if v % 2 == 0 { small } else { big };
                if v % 5 == 0 {
                    proptest::prop_assert_eq!(m.remove(key), model.remove(&key));
                } else {
                    proptest::prop_assert_eq!(m.insert(key, v), model.insert(key, v));
                }
                proptest::prop_assert_eq!(m.ix.len(), model.len());
            }
            for (&k, &v) in &model {
                proptest::prop_assert_eq!(m.get(k), Some(v));
            }
            for k in 64..128u64 {
                proptest::prop_assert_eq!(m.get(k), model.get(&k).copied());
            }
        }
    }

    #[test]
    fn removal_keeps_every_other_key_reachable_in_a_crowded_run() {
        // Keys differing only in their top two bits and low bits share few home cells.
        let mut m = Map::default();
        let keys: Vec<Key> = (0..8u64).map(|i| (i << 62) | i).collect();
        for (v, &k) in keys.iter().enumerate() {
            m.insert(k, v as u32);
        }
        for (gone, &k) in keys.iter().enumerate() {
            assert_eq!(m.remove(k), Some(gone as u32));
            assert_eq!(m.get(k), None);
            for (v, &other) in keys.iter().enumerate().skip(gone + 1) {
                assert_eq!(m.get(other), Some(v as u32), "after removing {k}");
            }
        }
        assert!(m.ix.is_empty());
    }

    #[test]
    fn keys_differing_only_in_high_bits_spread() {
        let mut m = Map::default();
        for i in 0..10_000u64 {
            m.insert(i << 48, i as u32);
        }
        for i in 0..10_000u64 {
            assert_eq!(m.get(i << 48), Some(i as u32));
        }
        assert_eq!(m.get(1), None);
    }
}
