//! What the training apps share for bounded staleness: the `--staleness` option and the
//! straggler simulation `PS_SLOW_WORKER` (a worker made slower, to measure what τ buys).

use crate::error::{Error, Result};
use crate::postoffice::{Clocked, Postoffice};
use std::time::{Duration, Instant};

/// A staleness bound τ as `--staleness` gives it: clocks (`Some`), or no bound (`None`:
/// asynchronous).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staleness(pub Option<u64>);

/// Parses `--staleness`: a whole number of clocks, or `inf` for no bound.
///
/// # Errors
/// A text naming the value and the expected form.
pub fn parse_staleness(s: &str) -> std::result::Result<Staleness, String> {
    match s {
        "inf" | "∞" => Ok(Staleness(None)),
        _ => s.parse().map(|t| Staleness(Some(t))).map_err(|_| {
            format!("--staleness {s:?}: expected a whole number of clocks, or inf (no bound)")
        }),
    }
}

/// `PS_SLOW_WORKER=RANK:FACTOR`: worker RANK sleeps after each training step for
/// (FACTOR − 1) times the step's own time, so it trains FACTOR times slower.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Straggler {
    /// Sleep per second of step; 0 on every other worker.
    extra: f64,
}

impl Straggler {
    /// This worker's (`rank` of `workers`) straggler setting from `value`, `PS_SLOW_WORKER`'s
    /// value.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable and the value when it is not `RANK:FACTOR` with a
    /// RANK below `workers` and a FACTOR ≥ 1.
    pub fn parse(value: Option<&str>, rank: usize, workers: usize) -> Result<Straggler> {
        let Some(v) = value else {
            return Ok(Straggler::default());
        };
        let bad = || {
            Error::Config(format!(
                "PS_SLOW_WORKER is {v:?}: expected RANK:FACTOR, a worker rank and a factor ≥ 1 \
                 (2: twice as slow)"
            ))
        };
        let (r, f) = v.split_once(':').ok_or_else(bad)?;
        let r: usize = r.trim().parse().map_err(|_| bad())?;
        let f: f64 = f.trim().parse().map_err(|_| bad())?;
        if !(f >= 1.0 && f.is_finite()) {
            return Err(bad());
        }
        if r >= workers {
            return Err(Error::Config(format!(
                "PS_SLOW_WORKER is {v:?}: the job has {workers} workers, ranks 0 to {}",
                workers.saturating_sub(1)
            )));
        }
        Ok(Straggler {
            extra: if r == rank { f - 1.0 } else { 0.0 },
        })
    }

    /// This worker's setting from the environment.
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn from_env(rank: usize, workers: usize) -> Result<Straggler> {
        Straggler::parse(
            std::env::var("PS_SLOW_WORKER").ok().as_deref(),
            rank,
            workers,
        )
    }

    /// After a step that took `step`: sleeps as the setting says.
    pub fn after(&self, step: Duration) {
        if self.extra > 0.0 {
            std::thread::sleep(step.mul_f64(self.extra));
        }
    }

    /// Whether this worker is slowed.
    pub fn is_slow(&self) -> bool {
        self.extra > 0.0
    }
}

/// A training loop's steps under bounded staleness: at each step's end, the sleep
/// `PS_SLOW_WORKER` asks of this worker, then its clock ([`Postoffice::clock`]).
pub struct StepClock {
    slow: Straggler,
    tau: Option<u64>,
    since: Instant,
}

impl StepClock {
    /// The steps of this worker with staleness bound `tau`; the first step begins now.
    ///
    /// # Errors
    /// A bad `PS_SLOW_WORKER` ([`Straggler::parse`]).
    pub fn new(po: &Postoffice, tau: Option<u64>) -> Result<StepClock> {
        Ok(StepClock {
            slow: Straggler::from_env(po.my_rank(), po.num_workers())?,
            tau,
            since: Instant::now(),
        })
    }

    /// A step begins now (its time is what the straggler's sleep scales).
    pub fn begin(&mut self) {
        self.since = Instant::now();
    }

    /// The step ended: the straggler's sleep, then the clock; the next step begins when it
    /// returns.
    ///
    /// # Errors
    /// As [`Postoffice::clock`].
    pub fn end(&mut self, po: &Postoffice) -> Result<Clocked> {
        self.slow.after(self.since.elapsed());
        let c = po.clock(self.tau)?;
        self.since = Instant::now();
        Ok(c)
    }

    /// Whether `PS_SLOW_WORKER` slows this worker.
    pub fn is_slow(&self) -> bool {
        self.slow.is_slow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_their_errors() {
        assert_eq!(parse_staleness("8"), Ok(Staleness(Some(8))));
        assert_eq!(parse_staleness("inf"), Ok(Staleness(None)));
        assert_eq!(
            parse_staleness("-1"),
            Err("--staleness \"-1\": expected a whole number of clocks, or inf (no bound)".into())
        );
        assert!(Straggler::parse(Some("2:2"), 2, 4)
            .expect("valid")
            .is_slow());
        assert!(!Straggler::parse(Some("2:2"), 1, 4)
            .expect("valid")
            .is_slow());
        assert!(!Straggler::parse(None, 0, 4).expect("unset").is_slow());
        assert_eq!(
            Straggler::parse(Some("4:2"), 0, 4)
                .expect_err("no worker 4")
                .to_string(),
            "PS_SLOW_WORKER is \"4:2\": the job has 4 workers, ranks 0 to 3"
        );
        assert_eq!(
            Straggler::parse(Some("2:0.5"), 2, 4)
                .expect_err("factor below 1")
                .to_string(),
            "PS_SLOW_WORKER is \"2:0.5\": expected RANK:FACTOR, a worker rank and a factor ≥ 1 \
             (2: twice as slow)"
        );
    }
}
