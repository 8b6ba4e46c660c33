//! A worker-side cache of pulled rows within a staleness bound (SSP's client cache, Ho et al.
//! 2013; Petuum's "process cache"): a row pulled at clock `c` is served from the cache until
//! clock `c + τ`, so the hot keys of a power-law workload are pulled once per τ + 1 clocks
//! instead of at every step. Pushes are not cached: a worker's own updates reach it when the
//! row is pulled again.
//!
//! Rows have a fixed length (`dim` values, an embedding table's). At most `capacity` rows are
//! kept; a row that finds the cache full is not cached (the next clocks free the rows that
//! expire, oldest first). Hits, misses and the staleness of each hit (the clocks between the
//! row's pull and its use) are counted in [`crate::metrics::StalenessMetrics`].

use super::KVWorker;
use crate::error::{Error, Result};
use crate::kv::{Key, Value};
use crate::metrics::StalenessMetrics;
use std::collections::{HashMap, VecDeque};

/// A row cache: keys → (the clock they were pulled at, their slot in `vals`).
pub struct RowCache<V> {
    dim: usize,
    capacity: usize,
    tau: u64,
    rows: HashMap<Key, (u64, usize), foldhash::fast::RandomState>,
    /// The cached rows by the clock they were pulled at, oldest first (each once).
    order: VecDeque<(u64, Key)>,
    vals: Vec<V>,
    free: Vec<usize>,
    metrics: Option<StalenessMetrics>,
    /// Scratch of one pull: the missed keys and their positions.
    missed: Vec<Key>,
    at: Vec<usize>,
}

/// What one [`RowCache::pull_into`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachePull {
    /// Rows served from the cache.
    pub hits: usize,
    /// Rows pulled from the servers.
    pub misses: usize,
    /// The largest staleness of a hit, in clocks (0 with no hit).
    pub max_staleness: u64,
}

impl<V: Value> RowCache<V> {
    /// A cache of at most `capacity` rows of `dim` values, each served for `tau` clocks after
    /// its pull; `metrics`: where hits, misses and staleness are counted.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `dim` 0.
    pub fn new(
        dim: usize,
        capacity: usize,
        tau: u64,
        metrics: Option<StalenessMetrics>,
    ) -> Result<RowCache<V>> {
        if dim == 0 {
            return Err(Error::InvalidArgument(
                "row cache: dim must be at least 1".into(),
            ));
        }
        Ok(RowCache {
            dim,
            capacity,
            tau,
            rows: HashMap::default(),
            order: VecDeque::new(),
            vals: Vec::new(),
            free: Vec::new(),
            metrics,
            missed: Vec::new(),
            at: Vec::new(),
        })
    }

    /// Rows cached now.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is cached.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Forgets the rows pulled more than τ clocks before `clock` (clocks given to a cache
    /// never decrease).
    fn expire(&mut self, clock: u64) {
        while let Some(&(pulled, key)) = self.order.front() {
            if pulled.saturating_add(self.tau) >= clock {
                break;
            }
            self.order.pop_front();
            if let Some((_, slot)) = self.rows.remove(&key) {
                self.free.push(slot);
            }
        }
    }

    /// The rows of `keys` at clock `clock` into `out` (`dim` values per key): cached rows
    /// pulled at clock ≥ `clock − τ` are copied, the others pulled from the servers through
    /// `kv` in one request and cached (while there is room). [`start`](Self::start) and
    /// [`finish`](Self::finish) in one call.
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`finish`](Self::finish).
    pub fn pull_into(
        &mut self,
        kv: &KVWorker<V>,
        keys: &[Key],
        clock: u64,
        out: &mut [V],
    ) -> Result<CachePull> {
        let (r, pending) = self.start(kv, keys, clock, out)?;
        self.finish(kv, pending, clock, out)?;
        Ok(r)
    }

    /// The first half of [`pull_into`](Self::pull_into): copies the hits into `out` and sends
    /// the pull of the misses, whose timestamp it returns (`None`: every row was a hit), so
    /// that other pulls can be in flight with it. Call [`finish`](Self::finish) with the same
    /// `out` before this cache's next `start`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `out` is not `dim` values per key; the pull's (unsorted
    /// keys among them).
    pub fn start(
        &mut self,
        kv: &KVWorker<V>,
        keys: &[Key],
        clock: u64,
        out: &mut [V],
    ) -> Result<(CachePull, Option<crate::kv::Timestamp>)> {
        let dim = self.dim;
        if out.len() != keys.len() * dim {
            return Err(Error::InvalidArgument(format!(
                "row cache: {} values for {} keys of dim {dim}",
                out.len(),
                keys.len()
            )));
        }
        self.expire(clock);
        let mut r = CachePull::default();
        self.missed.clear();
        self.at.clear();
        for (i, &k) in keys.iter().enumerate() {
            match self.rows.get(&k) {
                Some(&(pulled, slot)) => {
                    out[i * dim..(i + 1) * dim]
                        .copy_from_slice(&self.vals[slot * dim..(slot + 1) * dim]);
                    let age = clock.saturating_sub(pulled);
                    r.hits += 1;
                    r.max_staleness = r.max_staleness.max(age);
                    if let Some(m) = &self.metrics {
                        m.cache_staleness.observe(age as f64);
                    }
                }
                None => {
                    self.missed.push(k);
                    self.at.push(i);
                }
            }
        }
        r.misses = self.missed.len();
        if let Some(m) = &self.metrics {
            m.cache_hits.inc_by(r.hits as u64);
            m.cache_misses.inc_by(r.misses as u64);
        }
        let pending = match self.missed.is_empty() {
            true => None,
            false => Some(kv.pull(&self.missed)?),
        };
        Ok((r, pending))
    }

    /// The second half of [`pull_into`](Self::pull_into): the missed rows of the pull
    /// `pending` into `out`, and into the cache as of `clock`.
    ///
    /// # Errors
    /// The pull's; [`Error::InvalidArgument`] when the servers' rows are not `dim` values.
    pub fn finish(
        &mut self,
        kv: &KVWorker<V>,
        pending: Option<crate::kv::Timestamp>,
        clock: u64,
        out: &mut [V],
    ) -> Result<()> {
        let Some(ts) = pending else { return Ok(()) };
        let dim = self.dim;
        let got = kv.take_pulled(ts)?;
        if got.vals.len() != self.missed.len() * dim {
            return Err(Error::InvalidArgument(format!(
                "row cache of dim {dim}: the servers gave {} values for {} rows",
                got.vals.len(),
                self.missed.len()
            )));
        }
        for (j, &i) in self.at.iter().enumerate() {
            out[i * dim..(i + 1) * dim].copy_from_slice(&got.vals[j * dim..(j + 1) * dim]);
        }
        self.keep(clock, &got.vals);
        Ok(())
    }

    /// Caches the rows just pulled (`missed`, their values `pulled`) as of `clock`, while there
    /// is room.
    fn keep(&mut self, clock: u64, pulled: &[V]) {
        let dim = self.dim;
        for (j, &k) in self.missed.iter().enumerate() {
            let slot = match self.free.pop() {
                Some(s) => s,
                None if self.rows.len() < self.capacity => {
                    self.vals.resize(self.vals.len() + dim, V::default());
                    self.vals.len() / dim - 1
                }
                None => break,
            };
            self.vals[slot * dim..(slot + 1) * dim]
                .copy_from_slice(&pulled[j * dim..(j + 1) * dim]);
            self.rows.insert(k, (clock, slot));
            self.order.push_back((clock, k));
        }
    }
}
