//! What `ctr`'s worker 0 reports: the data, each epoch's test figures, with `--staleness` the
//! test figures during training, the reference's result, the table specs.

use super::reference;

/// Figures of one epoch, as worker 0 measured them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EpochReport {
    /// 1-based epoch.
    pub epoch: usize,
    /// Test ROC AUC.
    pub auc: f64,
    /// Test mean log-loss (natural log).
    pub logloss: f64,
    /// The best possible test AUC: the true probabilities'.
    pub bayes_auc: f64,
    /// The true probabilities' test log-loss.
    pub bayes_logloss: f64,
    /// Mean training log-loss of worker 0's minibatches (before each step).
    pub train_loss: f64,
    /// Training samples per second over all workers (worker 0's samples × workers / its epoch
    /// time).
    pub samples_per_s: f64,
    /// Seconds of the epoch's training on worker 0.
    pub seconds: f64,
    /// Workers.
    pub workers: usize,
    /// Servers.
    pub servers: usize,
}

impl EpochReport {
    /// One line of text.
    pub fn text(&self) -> String {
        format!(
            "epoch {}: test AUC {:.4} (best possible {:.4}), log-loss {:.4} (best {:.4}), train loss {:.4}, {:.0} samples/s ({} workers, {} servers)",
            self.epoch, self.auc, self.bayes_auc, self.logloss, self.bayes_logloss, self.train_loss,
            self.samples_per_s, self.workers, self.servers
        )
    }
}

/// What worker 0 reports.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(tag = "report", rename_all = "snake_case")]
pub enum Report {
    /// The data: sizes, click-through rate, best possible test AUC.
    Data {
        /// Training samples (all workers).
        train: u64,
        /// Test samples.
        test: u64,
        /// Mean test label.
        ctr: f64,
        /// The true probabilities' test AUC.
        bayes_auc: f64,
        /// Vocabulary of each field.
        vocabularies: Vec<usize>,
    },
    /// An epoch's figures.
    Epoch(EpochReport),
    /// With `--staleness`: a test evaluation during training, or the last one.
    Progress(ProgressReport),
    /// The in-process reference's result.
    Reference(reference::ReferenceReport),
    /// The table specs that match the options.
    Tables {
        /// `--table` specs: wide, embedding.
        specs: [String; 2],
    },
}

impl Report {
    /// One or more lines of text.
    pub fn text(&self) -> String {
        match self {
            Report::Data {
                train,
                test,
                ctr,
                bayes_auc,
                vocabularies,
            } => format!(
                "data: {train} training and {test} test samples, {} fields (vocabularies {}..{}), test CTR {ctr:.4}, best possible test AUC {bayes_auc:.4}",
                vocabularies.len(),
                vocabularies.first().copied().unwrap_or(0),
                vocabularies.last().copied().unwrap_or(0),
            ),
            Report::Epoch(e) => e.text(),
            Report::Progress(p) => p.text(),
            Report::Reference(r) => format!(
                "reference (one process, in-process tables): test AUC {:.4} (best possible {:.4}) in {:.1} s",
                r.auc(),
                r.bayes_auc,
                r.seconds
            ),
            Report::Tables { specs } => specs
                .iter()
                .map(|s| format!("--table {s}"))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The report as `--json` or text wants it.
    pub fn line(&self, json: bool) -> String {
        if json {
            serde_json::to_string(self).unwrap_or_default()
        } else {
            self.text()
        }
    }
}

/// With `--staleness`: worker 0's test figures at one of its clocks (`--eval-every`), or at
/// the end of training (`last`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProgressReport {
    /// Worker 0's clock (its training steps so far).
    pub clock: u64,
    /// Seconds since the training started (on worker 0).
    pub seconds: f64,
    /// Test ROC AUC.
    pub auc: f64,
    /// Test mean log-loss (natural log).
    pub logloss: f64,
    /// The staleness bound τ (`None`: no bound).
    pub staleness: Option<u64>,
    /// Seconds worker 0 waited at its clocks for slower workers so far.
    pub waited: f64,
    /// After every worker's last step.
    pub last: bool,
}

impl ProgressReport {
    /// One line of text.
    pub fn text(&self) -> String {
        let tau = self.staleness.map_or("inf".into(), |t| t.to_string());
        format!(
            "{} clock {} at {:.2} s: test AUC {:.4}, log-loss {:.4} (staleness {tau}, worker 0 waited {:.2} s)",
            if self.last { "final:" } else { "progress:" },
            self.clock,
            self.seconds,
            self.auc,
            self.logloss,
            self.waited
        )
    }
}
