//! Rate-limited warnings about refused peers: a stranger that sends a thousand
//! messages a second must not write a thousand log lines. No IO here: time is passed in.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most one warning per source in this long.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Sources remembered at most (a flood from many addresses forgets the oldest).
const SOURCES: usize = 1024;

/// Per source (an address), when it was last warned about and how many refusals were not
/// reported since.
#[derive(Default)]
pub struct RateLimited {
    last: HashMap<String, (Instant, u64)>,
}

impl RateLimited {
    /// Whether to warn about a refusal from `source` now: `Some(n)` with the `n` refusals from
    /// it left unreported since its last warning, `None` to stay quiet (counted).
    pub fn admit(&mut self, source: &str, now: Instant) -> Option<u64> {
        match self.last.get_mut(source) {
            Some((at, quiet)) if now.saturating_duration_since(*at) < WARN_EVERY => {
                *quiet += 1;
                None
            }
            Some((at, quiet)) => {
                let n = std::mem::take(quiet);
                *at = now;
                Some(n)
            }
            None => {
                if self.last.len() >= SOURCES {
                    let oldest = self.last.iter().min_by_key(|(_, (at, _))| *at);
                    if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                        self.last.remove(&k);
                    }
                }
                self.last.insert(source.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// The suffix of a warning after `n` quiet refusals: empty, or " (and N more since)".
pub fn more(n: u64) -> String {
    match n {
        0 => String::new(),
        n => format!(" ({n} more like it in the last {} s)", WARN_EVERY.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Per source, at most one warning in any WARN_EVERY, and every refusal is either
        /// warned about or counted in the next warning.
        #[test]
        fn one_warning_per_source_per_period_and_none_lost(
            events in proptest::collection::vec((0u8..4, 0u64..3000), 1..200)
        ) {
            let t0 = Instant::now();
            let mut r = RateLimited::default();
            let mut at = 0u64;
            let mut last: HashMap<u8, u64> = HashMap::new();
            let mut counted: HashMap<u8, u64> = HashMap::new();
            let mut refused: HashMap<u8, u64> = HashMap::new();
            for (src, step) in events {
                at += step * 10;
                let now = t0 + Duration::from_millis(at);
                *refused.entry(src).or_default() += 1;
                if let Some(n) = r.admit(&format!("10.0.0.{src}"), now) {
                    if let Some(prev) = last.insert(src, at) {
                        prop_assert!(at - prev >= WARN_EVERY.as_millis() as u64);
                    }
                    *counted.entry(src).or_default() += n + 1;
                }
            }
            for (src, n) in refused {
                let c = counted.get(&src).copied().unwrap_or(0);
                // What is not counted yet waits for the source's next warning.
                prop_assert!(c <= n);
                prop_assert!(c >= 1);
            }
        }
    }

    #[test]
    fn a_flood_of_sources_keeps_the_map_bounded() {
        let now = Instant::now();
        let mut r = RateLimited::default();
        for i in 0..5000 {
            assert_eq!(r.admit(&format!("s{i}"), now), Some(0));
        }
        assert!(r.last.len() <= SOURCES);
        assert_eq!(more(0), "");
        assert_eq!(more(3), " (3 more like it in the last 10 s)");
    }
}
