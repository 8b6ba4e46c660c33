//! A worker's bounded-staleness metrics: its clock, the time it waited at its clocks, and its
//! row cache's hits, misses and observed staleness.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Bounded staleness on a worker ([`crate::postoffice::Postoffice::clock`],
/// [`crate::kv::worker::RowCache`]). Clones count into the same metrics.
#[derive(Clone)]
pub struct StalenessMetrics {
    /// Its clock.
    pub clock: Gauge,
    /// Microseconds it waited for slower workers at its clocks (idle time).
    pub clock_wait_us: Counter,
    /// Rows served from the row cache.
    pub cache_hits: Counter,
    /// Rows pulled from the servers through the row cache.
    pub cache_misses: Counter,
    /// The staleness of each row served from the cache: clocks between its pull and its use.
    pub cache_staleness: Histogram,
}

impl Default for StalenessMetrics {
    fn default() -> StalenessMetrics {
        StalenessMetrics {
            clock: Gauge::default(),
            clock_wait_us: Counter::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            cache_staleness: Histogram::new([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
        }
    }
}

impl StalenessMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "pslite_clock",
            "this worker's bounded-staleness clock (steps it told the scheduler of)",
            self.clock.clone(),
        );
        r.register(
            "pslite_clock_wait_microseconds",
            "microseconds this worker waited at its clocks for slower workers (staleness bound)",
            self.clock_wait_us.clone(),
        );
        r.register(
            "pslite_row_cache_hits",
            "rows this worker served from its row cache (within the staleness bound)",
            self.cache_hits.clone(),
        );
        r.register(
            "pslite_row_cache_misses",
            "rows this worker pulled from the servers through its row cache",
            self.cache_misses.clone(),
        );
        r.register(
            "pslite_row_cache_staleness_clocks",
            "staleness of each row served from the row cache: clocks between its pull and its use",
            self.cache_staleness.clone(),
        );
    }
}
