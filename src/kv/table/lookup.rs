//! Looking up a list of keys with the cache misses of different keys overlapping: a
//! software pipeline of three stages a few keys apart. While key `i` is checked against its
//! record and handed on, key `i + RECORD_AHEAD`'s index bucket is read (fetched earlier) and
//! its record asked for, and key `i + BUCKET_AHEAD`'s bucket is asked for. A lookup then costs
//! about the time its cache lines take to stream in, not the sum of three memory round trips
//! one after another (the index bucket, the record, the next key's bucket).
//!
//! Nothing here changes the index or the records: a table runs it on parts of one list from
//! several threads at once ([`super::Table::pull`], [`super::Table::push`]).

use super::index::{self, Index};
use super::rows::Records;

/// Keys ahead whose index bucket is asked for.
const BUCKET_AHEAD: usize = 16;

/// Keys ahead whose bucket is read and whose record is asked for.
const RECORD_AHEAD: usize = 8;

/// Hashes and candidates kept (a power of two above `BUCKET_AHEAD`).
const RING: usize = 32;

/// No candidate: the key is not held.
const NONE: u32 = u32::MAX;

/// Calls `f(i, slot)` for each key of `keys` in order: `slot` is the record holding
/// `keys[i]`, `None` when the index holds none. `bytes` is how much of each record the caller
/// reads (the prefetch asks for those lines only).
#[inline]
pub fn each<R: Records>(
    index: &Index,
    rows: &R,
    keys: &[u64],
    bytes: usize,
    mut f: impl FnMut(usize, Option<u32>),
) {
    let n = keys.len();
    // Hashes of keys i..i + BUCKET_AHEAD, and candidates of keys i..i + RECORD_AHEAD, at i % RING.
    let mut hashes = [0u64; RING];
    let mut ring = [NONE; RING];
    let candidate = |h: u64| match index.candidate_hashed(h) {
        Some(s) => {
            rows.prefetch(s, bytes);
            s
        }
        None => NONE,
    };
    for (j, &k) in keys[..BUCKET_AHEAD.min(n)].iter().enumerate() {
        hashes[j] = index::hash(k);
        index.prefetch_hashed(hashes[j]);
    }
    for j in 0..RECORD_AHEAD.min(n) {
        ring[j] = candidate(hashes[j]);
    }
    for (i, &key) in keys.iter().enumerate() {
        let c = ring[i % RING];
        if i + RECORD_AHEAD < n {
            let j = (i + RECORD_AHEAD) % RING;
            ring[j] = candidate(hashes[j]);
        }
        if let Some(&k) = keys.get(i + BUCKET_AHEAD) {
            let j = (i + BUCKET_AHEAD) % RING;
            hashes[j] = index::hash(k);
            index.prefetch_hashed(hashes[j]);
        }
        let slot = if c == NONE {
            None
        } else if rows.key(c) == key {
            Some(c)
        } else {
            // The tag matched by chance: the key may sit further along its probe.
            index.find(key, |s| rows.key(s))
        };
        f(i, slot);
    }
}
