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

/// The distribution of `samples` as `[quantile, milliseconds]` pairs at quantiles 0, 0.01, …,
/// 0.99, 0.995, 0.999 and 1 (nearest rank; quantile 0 is the smallest sample); empty when there
/// are none.
pub fn quantiles(samples: &mut [Duration]) -> Vec<[f64; 2]> {
    if samples.is_empty() {
        return Vec::new();
    }
    let qs = (0..100)
        .map(|i| i as f64 / 100.0)
        .chain([0.995, 0.999, 1.0]);
    qs.map(|q| {
        [
            q,
            percentile(samples, q).max(samples[0]).as_secs_f64() * 1e3,
        ]
    })
    .collect()
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
        let q = quantiles(&mut v);
        assert_eq!(q.len(), 103);
        assert_eq!(q[0], [0.0, 1.0]);
        assert_eq!(q[50], [0.5, 50.0]);
        assert_eq!(q[102], [1.0, 100.0]);
        assert!(q
            .windows(2)
            .all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]));
    }
}
