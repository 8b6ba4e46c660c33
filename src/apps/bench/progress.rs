//! A bench's progress: a bar on a terminal, and under `pslite-launch` (which sets
//! [`LAUNCHER_VAR`] in every worker, whose output goes to pipes) machine-readable lines the
//! launcher reads and draws one combined progress line and an end-of-run summary from
//! (`launcher/report.rs`). The lines go to standard error, each `@pslite ` + a JSON object:
//!
//! - `@pslite {"progress":{"worker":0,"done":1200,"total":5000,"unit":"ms"}}` — at most every
//!   [`EVERY`];
//! - `@pslite {"report":{…}}` — once, the worker's [`BenchReport`](super::BenchReport).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Set (to 1) by `pslite-launch` in its children: bench reports to it.
pub const LAUNCHER_VAR: &str = "PSLITE_LAUNCHER_LINES";

/// What starts a line for the launcher.
pub const MARK: &str = "@pslite ";

/// How often a progress line is written at most.
pub const EVERY: Duration = Duration::from_millis(250);

/// A bench's progress: `total` rounds (`unit` = "rounds") or milliseconds.
pub struct Progress {
    bar: indicatif::ProgressBar,
    launcher: bool,
    worker: usize,
    total: u64,
    unit: &'static str,
    last: Option<Instant>,
}

impl Progress {
    /// Progress of worker `worker` to `rounds` rounds, or (without) through `time`.
    pub fn new(worker: usize, rounds: Option<usize>, time: Duration) -> Progress {
        let (total, unit) = match rounds {
            Some(n) => (n as u64, "rounds"),
            None => (time.as_millis() as u64, "ms"),
        };
        let bar = if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(&format!(
                "bench {{bar:40}} {{pos}}/{{len}} {unit}"
            )) {
                bar.set_style(style);
            }
            bar
        } else {
            indicatif::ProgressBar::hidden()
        };
        Progress {
            bar,
            launcher: std::env::var(LAUNCHER_VAR).is_ok_and(|v| v == "1"),
            worker,
            total,
            unit,
            last: None,
        }
    }

    /// `done` rounds or milliseconds so far.
    pub fn set(&mut self, done: u64) {
        self.bar.set_position(done);
        if !self.launcher || self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        let line = serde_json::json!({"progress": {
            "worker": self.worker, "done": done.min(self.total), "total": self.total, "unit": self.unit
        }});
        eprintln!("{MARK}{line}");
    }

    /// The run ended: the bar goes.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Tells the launcher (when there is one) this worker's report.
pub fn report_to_launcher(report: &super::BenchReport) {
    if std::env::var(LAUNCHER_VAR).is_ok_and(|v| v == "1") {
        let line = serde_json::json!({ "report": report });
        eprintln!("{MARK}{line}");
    }
}
