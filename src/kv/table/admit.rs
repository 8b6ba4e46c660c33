//! Admission: whether a push of a key the table does not hold creates its row.
//!
//! The count-min sketch (Cormode & Muthukrishnan 2005) is written here rather than taken from a
//! crate: it must be saved into a checkpoint and restored bit for bit and hash the same on every
//! server. `pdatastructs` 0.7 keeps its counters private (nothing to save); `streaming_algorithms`
//! 0.3 has conservative update and serde, but would bring `rand` 0.7, `bincode` 1 and
//! `twox-hash` 1 in beside the versions this crate uses, for about sixty lines. Conservative
//! update (Estan & Varghese 2002) raises only the counters at the key's minimum, so a key's
//! estimate is at most its pushes plus its collisions', and counters stop at the threshold:
//! 8 bits hold any `count:N`.
//!
//! A sketch that only counts up fills: after many times `width` distinct keys, most counters
//! sit at the threshold's edge and every new key would pass at once. So counts decay as in
//! TinyLFU (Einziger, Friedman, Manes 2017, the "reset" operation): after every
//! `RESET_PER_COLUMN · width` counted pushes, every counter halves. A key must then reach N
//! pushes within about a reset period, and the decay is a pure function of the counted pushes
//! (it replays the same).

use super::init::admission_draw;
use super::spec::Admission;
use crate::kv::durable::bytes::Reader;

/// Rows of the sketch.
pub const DEPTH: usize = 4;

/// Counted pushes per counter column between two halvings of every counter: one, so that a
/// counter takes about one hit a period and a new key's four counters all reach N−1 rarely.
pub const RESET_PER_COLUMN: u64 = 1;

/// A count-min sketch of `DEPTH` rows of `width` 8-bit counters, with conservative update,
/// counting up to `cap`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sketch {
    counters: Vec<u8>,
    mask: u64,
    cap: u8,
    /// Pushes counted since the counters last halved.
    added: u64,
}

/// Murmur3's 64-bit finalizer: every bit of `x` reaches every bit of the result.
#[inline]
pub fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Sketch {
    /// An empty sketch, `width` (a power of two) counters per row, counting up to `cap`.
    pub fn new(width: usize, cap: u8) -> Sketch {
        Sketch {
            counters: vec![0; DEPTH * width],
            added: 0,
            mask: width as u64 - 1,
            cap,
        }
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }

    #[inline]
    fn cells(&self, key: u64) -> [usize; DEPTH] {
        let h = fmix64(key ^ 0x5bd1_e995_a1b2_c3d4);
        let h2 = fmix64(h) | 1;
        let width = (self.mask + 1) as usize;
        std::array::from_fn(|row| {
            row * width + (h.wrapping_add((row as u64).wrapping_mul(h2)) & self.mask) as usize
        })
    }

    /// `key`'s estimate: the least of its counters (≥ its true count, up to `cap`).
    pub fn estimate(&self, key: u64) -> u8 {
        self.cells(key)
            .iter()
            .map(|&c| self.counters[c])
            .min()
            .unwrap_or(0)
    }

    /// Counts one occurrence of `key` (conservative update: counters below the new estimate
    /// are raised to it, none beyond `cap`) and returns its new estimate; every
    /// `RESET_PER_COLUMN · width` calls, halves every counter afterwards.
    pub fn add(&mut self, key: u64) -> u8 {
        let est = self.raise(key);
        self.added += 1;
        if self.added >= RESET_PER_COLUMN * (self.mask + 1) {
            self.added = 0;
            for c in &mut self.counters {
                *c >>= 1;
            }
        }
        est
    }

    /// The conservative update of [`add`](Self::add), without the decay.
    fn raise(&mut self, key: u64) -> u8 {
        let cells = self.cells(key);
        let est = cells
            .iter()
            .map(|&c| self.counters[c])
            .min()
            .unwrap_or(0)
            .saturating_add(1)
            .min(self.cap);
        for c in cells {
            if self.counters[c] < est {
                self.counters[c] = est;
            }
        }
        est
    }

    /// The counters, for a snapshot.
    pub fn counters(&self) -> &[u8] {
        &self.counters
    }

    /// Pushes counted since the counters last halved, for a snapshot.
    pub fn added(&self) -> u64 {
        self.added
    }

    /// Replaces the counters and the count since the last halving with saved ones (the
    /// counters, then the count).
    ///
    /// # Errors
    /// When the saved sketch has another size.
    pub fn restore(&mut self, r: &mut Reader<'_>) -> Result<(), String> {
        let saved = r.sized("admission sketch")?;
        if saved.len() != self.counters.len() {
            return Err(format!(
                "saved table: the admission sketch holds {} counters, this table's {}",
                saved.len(),
                self.counters.len()
            ));
        }
        self.counters.copy_from_slice(saved);
        self.added = r.u64("the admission sketch's pushes since its last halving")?;
        Ok(())
    }
}

/// A table's admission state.
#[derive(Clone, Debug, PartialEq)]
pub enum Admit {
    /// Every key at its first push.
    All,
    /// At the `n`-th push, counted by the sketch.
    Count {
        /// Pushes needed.
        n: u8,
        /// The counts.
        sketch: Sketch,
    },
    /// With probability `p` per push.
    Probability {
        /// In (0, 1].
        p: f64,
        /// Seed of the draws (the table's).
        seed: u64,
    },
}

impl Admit {
    /// The state for `spec`'s admission, empty.
    pub fn new(spec: &Admission, seed: u64) -> Admit {
        match *spec {
            Admission::All => Admit::All,
            Admission::Count { n, width } => {
                let n = n.clamp(1, 255) as u8;
                Admit::Count {
                    n,
                    sketch: Sketch::new(width, n),
                }
            }
            Admission::Probability { p } => Admit::Probability { p, seed },
        }
    }

    /// Bytes of the sketch (0 without one).
    pub fn bytes(&self) -> usize {
        match self {
            Admit::Count { sketch, .. } => sketch.bytes(),
            _ => 0,
        }
    }

    /// Bytes [`Admit::new`] would hold for `spec`.
    pub fn bytes_for(spec: &Admission) -> usize {
        match *spec {
            Admission::Count { width, .. } => DEPTH * width,
            _ => 0,
        }
    }

    /// Whether this push of `key` (not held), the table's push number `push`, creates its row;
    /// counts it.
    #[inline]
    pub fn admits(&mut self, key: u64, push: u64) -> bool {
        match self {
            Admit::All => true,
            Admit::Count { n, sketch } => sketch.add(key) >= *n,
            Admit::Probability { p, seed } => admission_draw(*seed, key, push) < *p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Between halvings, a sketch never undercounts (up to its cap), whatever the
        /// collisions.
        #[test]
        fn estimates_are_never_below_the_true_count(keys in proptest::collection::vec(0u64..500, 1..2000)) {
            let mut s = Sketch::new(64, 200);
            let mut truth: HashMap<u64, u32> = HashMap::new();
            for &k in &keys {
                s.raise(k);
                *truth.entry(k).or_default() += 1;
            }
            for (&k, &n) in &truth {
                prop_assert!(u32::from(s.estimate(k)) >= n.min(200), "key {} seen {} estimated {}", k, n, s.estimate(k));
            }
        }
    }

    #[test]
    fn a_wide_sketch_admits_at_exactly_the_nth_push() {
        let mut a = Admit::new(
            &Admission::Count {
                n: 3,
                width: 1 << 16,
            },
            0,
        );
        for key in 0..1000u64 {
            assert!(!a.admits(key, 0), "key {key}, 1st push");
            assert!(!a.admits(key, 0), "key {key}, 2nd push");
            assert!(a.admits(key, 0), "key {key}, 3rd push");
        }
    }

    #[test]
    fn counts_halve_so_a_stream_of_new_keys_does_not_fill_the_sketch() {
        // 64 columns: every 64 counted pushes, every counter halves.
        let mut a = Admit::new(&Admission::Count { n: 3, width: 64 }, 0);
        for key in 0..100_000u64 {
            a.admits(key, 0);
        }
        // A fresh key still needs its pushes: one push alone does not reach 3.
        let admitted_at_once = (1_000_000..1_000_100u64)
            .filter(|&k| a.admits(k, 0))
            .count();
        assert!(
            admitted_at_once < 10,
            "{admitted_at_once} of 100 new keys at their first push"
        );
        // Without the halving the same stream leaves every counter at 2 or more.
        let mut s = Sketch::new(64, 3);
        for key in 0..100_000u64 {
            s.raise(key);
        }
        assert!(s.counters().iter().all(|&c| c >= 2));
    }

    #[test]
    fn counters_stop_at_the_threshold() {
        let mut s = Sketch::new(64, 5);
        for _ in 0..1000 {
            s.add(7);
        }
        assert_eq!(s.estimate(7), 5);
        assert!(s.counters().iter().all(|&c| c <= 5));
    }

    #[test]
    fn probability_admission_is_a_pure_function_of_key_and_push() {
        let mut a = Admit::new(&Admission::Probability { p: 0.1 }, 42);
        let mut b = a.clone();
        let first: Vec<bool> = (0..1000).map(|i| a.admits(i % 37, i)).collect();
        let again: Vec<bool> = (0..1000).map(|i| b.admits(i % 37, i)).collect();
        assert_eq!(first, again);
        let admitted = first.iter().filter(|&&x| x).count();
        assert!(
            (60..=140).contains(&admitted),
            "{admitted} of 1000 at p = 0.1"
        );
    }
}
