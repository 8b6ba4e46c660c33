//! Small statistics for benchmark figures.

use std::time::Duration;

/// The `q`-quantile (0 ≤ q ≤ 1, nearest rank) of `samples`, or zero when there are none.
pub fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

/// Goodput in Gbit/s: `bytes` of application data in `elapsed`.
pub fn gbps(bytes: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        return 0.0;
    }
    bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(percentile(&mut v, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&mut v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&mut v, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&mut [], 0.5), Duration::ZERO);
        assert_eq!(gbps(1_000_000_000, Duration::from_secs(8)), 1.0);
    }
}
