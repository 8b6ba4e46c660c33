//! What the launcher makes of its workers' bench lines (`@pslite {…}` on their standard error,
//! [`pslite::apps::bench::progress`]): one combined progress line for all workers when the
//! launcher's standard output is a terminal, and at the end one summary across workers — total
//! goodput (the sum of the workers'), p50/p99 of every worker's requests together, and the
//! requests counted.

use pslite::apps::bench::progress::MARK;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

/// One worker's progress: done and total (ms or rounds).
#[derive(Clone, Copy, Default)]
struct Step {
    done: u64,
    total: u64,
}

/// The workers' progress and reports so far, and the progress line when drawn.
#[derive(Default)]
struct Inner {
    steps: BTreeMap<u64, Step>,
    unit: String,
    reports: Vec<serde_json::Value>,
}

/// Shared by the output copiers of every node.
#[derive(Clone)]
pub struct Board {
    inner: Arc<Mutex<Inner>>,
    /// The combined progress line (stdout is a terminal), else hidden.
    bar: indicatif::ProgressBar,
}

impl Board {
    /// A board whose progress line shows when standard output is a terminal.
    pub fn new() -> Board {
        let bar = if std::io::stdout().is_terminal() {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stdout(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {msg}") {
                bar.set_style(style);
            }
            bar
        } else {
            indicatif::ProgressBar::hidden()
        };
        Board {
            inner: Arc::default(),
            bar,
        }
    }

    /// Takes a line of a node's output: a worker's bench line is recorded (true: not to be
    /// printed); anything else is printed by [`print`](Self::print).
    pub fn take(&self, line: &str) -> bool {
        let Some(json) = line.strip_prefix(MARK) else {
            return false;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            return false;
        };
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = v.get("progress") {
            let n = |k: &str| p.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
            inner.steps.insert(
                n("worker"),
                Step {
                    done: n("done"),
                    total: n("total"),
                },
            );
            if let Some(u) = p.get("unit").and_then(serde_json::Value::as_str) {
                inner.unit = u.to_string();
            }
            self.draw(&inner);
        } else if let Some(r) = v.get("report") {
            // A worker started again (--restart) reports again: its last report counts.
            let w = r.get("worker").and_then(serde_json::Value::as_u64);
            inner
                .reports
                .retain(|x| x.get("worker").and_then(serde_json::Value::as_u64) != w);
            inner.reports.push(r.clone());
        } else {
            return false;
        }
        true
    }

    /// Redraws the progress line: all workers' done over all their totals, and each worker's
    /// share.
    fn draw(&self, inner: &Inner) {
        if self.bar.is_hidden() {
            return;
        }
        let done: u64 = inner.steps.values().map(|s| s.done).sum();
        let total: u64 = inner.steps.values().map(|s| s.total).sum();
        let each: Vec<String> = inner
            .steps
            .iter()
            .map(|(w, s)| format!("w{w} {:.0}%", 100.0 * s.done as f64 / s.total.max(1) as f64))
            .collect();
        self.bar.set_length(total.max(1));
        self.bar.set_position(done);
        self.bar.set_message(format!(
            "bench, {} workers: {done}/{total} {} ({})",
            inner.steps.len(),
            inner.unit,
            each.join(" ")
        ));
    }

    /// Prints `line` to stderr or stdout without tearing the progress line.
    pub fn print(&self, line: &str, to_stderr: bool) {
        self.bar.suspend(|| {
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "{line}");
            }
        });
    }

    /// Clears the progress line and prints the summary across workers (when any reported).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = summary(&inner.reports) {
            println!("{s}");
        }
    }
}

/// The summary line of the workers' bench `reports`; `None` without reports.
pub fn summary(reports: &[serde_json::Value]) -> Option<String> {
    if reports.is_empty() {
        return None;
    }
    let f = |r: &serde_json::Value, k: &str| r.get(k).and_then(serde_json::Value::as_f64);
    let goodput: f64 = reports.iter().filter_map(|r| f(r, "goodput_gbps")).sum();
    let requests: f64 = reports.iter().filter_map(|r| f(r, "requests")).sum();
    let dists: Vec<(f64, Vec<[f64; 2]>)> = reports
        .iter()
        .filter_map(|r| {
            let q: Vec<[f64; 2]> =
                serde_json::from_value(r.get("latency_ms_quantiles")?.clone()).ok()?;
            Some((f(r, "requests")?, q))
        })
        .filter(|(n, q)| *n > 0.0 && !q.is_empty())
        .collect();
    let lat = match (merged_quantile(&dists, 0.5), merged_quantile(&dists, 0.99)) {
        (Some(p50), Some(p99)) => format!(", latency p50 {p50:.3} ms p99 {p99:.3} ms"),
        _ => String::new(),
    };
    let keys: f64 = reports.iter().filter_map(|r| f(r, "keys_per_s")).sum();
    let keys = if keys > 0.0 {
        format!(", {:.2} M keys/s", keys / 1e6)
    } else {
        String::new()
    };
    let verified = reports
        .iter()
        .all(|r| r.get("verified").and_then(serde_json::Value::as_bool) == Some(true));
    Some(format!(
        "pslite-launch: bench across {} workers: goodput {goodput:.2} Gbit/s (sum){keys}{lat} \
         (all workers' {requests:.0} requests together){}",
        reports.len(),
        if verified {
            ", pulled bytes verified on every worker"
        } else {
            ", NOT every worker verified its pulled bytes"
        }
    ))
}

/// The `p`-quantile of the mixture of distributions `dists`, each `(weight, [quantile,
/// value] points)` with quantiles ascending from 0 to 1: the value where the weighted sum of
/// the distributions' CDFs (each linear between its points) reaches `p`, by bisection. `None`
/// when there is none.
pub fn merged_quantile(dists: &[(f64, Vec<[f64; 2]>)], p: f64) -> Option<f64> {
    let weight: f64 = dists.iter().map(|(w, _)| w).sum();
    let lo = dists
        .iter()
        .filter_map(|(_, q)| q.first())
        .map(|x| x[1])
        .reduce(f64::min)?;
    let hi = dists
        .iter()
        .filter_map(|(_, q)| q.last())
        .map(|x| x[1])
        .reduce(f64::max)?;
    if weight <= 0.0 {
        return None;
    }
    let cdf = |x: f64| -> f64 { dists.iter().map(|(w, q)| w * cdf_at(q, x)).sum::<f64>() / weight };
    let (mut a, mut b) = (lo, hi);
    for _ in 0..100 {
        let m = (a + b) / 2.0;
        if cdf(m) >= p {
            b = m;
        } else {
            a = m;
        }
    }
    Some(b)
}

/// The CDF at `x` of the distribution given by `points` (`[quantile, value]`, ascending):
/// the largest quantile whose value is at most `x`, linear between points.
fn cdf_at(points: &[[f64; 2]], x: f64) -> f64 {
    match points.iter().position(|pt| pt[1] > x) {
        None => 1.0,
        Some(0) => 0.0,
        Some(i) => {
            let ([q0, x0], [q1, x1]) = (points[i - 1], points[i]);
            if x1 > x0 {
                q0 + (q1 - q0) * (x - x0) / (x1 - x0)
            } else {
                q0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantile points of the uniform distribution on [a, b].
    fn uniform(a: f64, b: f64) -> Vec<[f64; 2]> {
        (0..=100)
            .map(|i| {
                let q = i as f64 / 100.0;
                [q, a + (b - a) * q]
            })
            .collect()
    }

    #[test]
    fn one_distribution_gives_its_own_quantiles() {
        let d = [(10.0, uniform(1.0, 3.0))];
        assert!((merged_quantile(&d, 0.5).unwrap() - 2.0).abs() < 1e-6);
        assert!((merged_quantile(&d, 0.99).unwrap() - 2.98).abs() < 1e-6);
    }

    #[test]
    fn a_mixture_weights_by_requests() {
        // 3/4 of the requests on [0, 1], 1/4 on [10, 11]: the median is in the first, the
        // 99th percentile in the second.
        let d = [(300.0, uniform(0.0, 1.0)), (100.0, uniform(10.0, 11.0))];
        let p50 = merged_quantile(&d, 0.5).unwrap();
        assert!((p50 - 2.0 / 3.0).abs() < 1e-6, "{p50}");
        let p99 = merged_quantile(&d, 0.99).unwrap();
        assert!((p99 - 10.96).abs() < 1e-6, "{p99}");
        assert_eq!(merged_quantile(&[], 0.5), None);
    }

    #[test]
    fn the_summary_adds_goodput_and_merges_latency() {
        let r = |g: f64| {
            serde_json::json!({"goodput_gbps": g, "requests": 100, "verified": true,
                "latency_ms_quantiles": uniform(1.0, 2.0)})
        };
        let s = summary(&[r(1.5), r(2.0)]).unwrap();
        assert!(
            s.contains("across 2 workers: goodput 3.50 Gbit/s (sum)"),
            "{s}"
        );
        assert!(s.contains("latency p50 1.500 ms p99 1.990 ms"), "{s}");
        assert!(s.contains("200 requests"), "{s}");
        assert!(s.contains("verified on every worker"), "{s}");
        assert_eq!(summary(&[]), None);
    }
}
