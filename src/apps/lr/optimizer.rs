//! The server side of logistic regression: a request handler that applies SGD or AdaGrad to the
//! weights it owns when gradients are pushed, and answers pulls with the weights (0 for a key
//! never updated). It is configured by a [`CMD_CONFIG`] request that every worker sends to every
//! server before training (identical configurations are accepted again; a different one is an
//! error naming both).

use crate::kv::durable::bytes::Reader;
use crate::kv::{KVPairs, KVRequest, Key, ReqMeta, RequestHandler, ServesValues};
use crate::postoffice::Range;
use std::collections::HashMap;

/// Request command: the values carry `[optimizer, learning_rate, l2]` (optimizer 0 SGD,
/// 1 AdaGrad) for each key; the keys only address the servers.
pub const CMD_CONFIG: i32 = 1;
/// Request command: the values are gradients of the keys' weights.
pub const CMD_GRADIENT: i32 = 2;

/// AdaGrad's ε in `w -= lr · g / (√h + ε)`.
const EPS: f32 = 1e-8;

/// The update rule.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// `w -= lr · (g + l2 · w)`.
    Sgd,
    /// `h += g²; w -= lr · g / (√h + ε)`, with `g` including `l2 · w`.
    Adagrad,
}

/// Hyperparameters of the update rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptConfig {
    /// The rule.
    pub optimizer: Optimizer,
    /// Step size, > 0.
    pub learning_rate: f32,
    /// L2 penalty, ≥ 0.
    pub l2: f32,
}

impl OptConfig {
    /// The three values a worker sends per key in a [`CMD_CONFIG`] request.
    pub fn encode(&self) -> [f32; 3] {
        let o = match self.optimizer {
            Optimizer::Sgd => 0.0,
            Optimizer::Adagrad => 1.0,
        };
        [o, self.learning_rate, self.l2]
    }

    /// Reads the values of a [`CMD_CONFIG`] request.
    ///
    /// # Errors
    /// A text naming the bad field.
    pub fn decode(v: &[f32]) -> Result<OptConfig, String> {
        let [o, lr, l2] = v else {
            return Err(format!(
                "optimizer config needs 3 values per key, got {}",
                v.len()
            ));
        };
        let optimizer = match *o as i32 {
            0 => Optimizer::Sgd,
            1 => Optimizer::Adagrad,
            _ => return Err(format!("unknown optimizer code {o}")),
        };
        if !(*lr > 0.0 && lr.is_finite() && *l2 >= 0.0 && l2.is_finite()) {
            return Err(format!(
                "bad hyperparameters: learning rate {lr} (> 0), l2 {l2} (≥ 0)"
            ));
        }
        Ok(OptConfig {
            optimizer,
            learning_rate: *lr,
            l2: *l2,
        })
    }
}

/// Weights and AdaGrad state of the keys of one server.
#[derive(Default)]
pub struct OptimizerHandler {
    cfg: Option<OptConfig>,
    w: HashMap<Key, f32>,
    h: HashMap<Key, f32>,
}

impl OptimizerHandler {
    /// Unconfigured, all weights 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The weight of `key` (0 if never updated).
    pub fn weight(&self, key: Key) -> f32 {
        self.w.get(&key).copied().unwrap_or(0.0)
    }

    /// Applies one gradient `g` to `key` under `cfg`.
    pub fn apply(&mut self, cfg: &OptConfig, key: Key, g: f32) {
        let w = self.w.entry(key).or_insert(0.0);
        let g = g + cfg.l2 * *w;
        match cfg.optimizer {
            Optimizer::Sgd => *w -= cfg.learning_rate * g,
            Optimizer::Adagrad => {
                let h = self.h.entry(key).or_insert(0.0);
                *h += g * g;
                *w -= cfg.learning_rate * g / (h.sqrt() + EPS);
            }
        }
    }
}

impl ServesValues<f32> for OptimizerHandler {
    fn value(&self, key: Key) -> Option<&[f32]> {
        self.w.get(&key).map(std::slice::from_ref)
    }
}

impl RequestHandler<f32> for OptimizerHandler {
    fn values(&self) -> Option<&dyn ServesValues<f32>> {
        Some(self)
    }

    /// The configuration, weights and AdaGrad sums, as bytes (little-endian): a `u8` (1 when
    /// configured) and the three config values (`f32`: optimizer code, learning rate, l2);
    /// then the weights, the AdaGrad sums: each a count `u64` and `(key u64, value f32)` pairs,
    /// keys ascending.
    fn save(&self) -> Option<Vec<u8>> {
        let mut out = vec![u8::from(self.cfg.is_some())];
        for v in self.cfg.map_or([0.0; 3], |c| c.encode()) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for map in [&self.w, &self.h] {
            let mut pairs: Vec<(Key, f32)> = map.iter().map(|(&k, &v)| (k, v)).collect();
            pairs.sort_unstable_by_key(|p| p.0);
            out.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
            for (k, v) in pairs {
                out.extend_from_slice(&k.to_le_bytes());
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        Some(out)
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut r = Reader::new("saved optimizer", state);
        let configured = r.take(1, "the configured flag")?[0] == 1;
        let raw = [
            r.f32("the optimizer code")?,
            r.f32("the learning rate")?,
            r.f32("l2")?,
        ];
        let cfg = configured
            .then(|| OptConfig::decode(&raw))
            .transpose()
            .map_err(|e| format!("saved optimizer: {e}"))?;
        let mut maps = [HashMap::new(), HashMap::new()];
        for (map, what) in maps.iter_mut().zip(["weights", "AdaGrad sums"]) {
            let n = r.u64(what)?;
            for _ in 0..n {
                let k = r.u64(what)?;
                map.insert(k, r.f32(what)?);
            }
        }
        r.finish("the AdaGrad sums")?;
        let [w, h] = maps;
        *self = OptimizerHandler { cfg, w, h };
        Ok(())
    }

    /// The configuration, and the weights and AdaGrad sums of the keys in `range`, in
    /// [`save`](Self::save)'s format (they stay here, no longer served).
    fn export_range(&mut self, range: Range) -> Result<Vec<u8>, String> {
        let part = |m: &HashMap<Key, f32>| {
            m.iter()
                .filter(|(&k, _)| range.holds(k))
                .map(|(&k, &v)| (k, v))
                .collect()
        };
        let moving = OptimizerHandler {
            cfg: self.cfg,
            w: part(&self.w),
            h: part(&self.h),
        };
        moving
            .save()
            .ok_or_else(|| "the optimizer cannot save".to_string())
    }

    /// Takes the weights and AdaGrad sums [`export_range`](Self::export_range) wrote,
    /// replacing those of the same keys, and the configuration if this server has none.
    ///
    /// # Errors
    /// Rows that do not decode, keys outside `range`, or another configuration.
    fn import_range(&mut self, range: Range, rows: &[u8]) -> Result<(), String> {
        let mut moved = OptimizerHandler::new();
        moved.restore(rows)?;
        if let Some(&k) = moved
            .w
            .keys()
            .chain(moved.h.keys())
            .find(|&&k| !range.holds(k))
        {
            return Err(format!(
                "moved weight of key {k} is outside the range {range:?}"
            ));
        }
        match (self.cfg, moved.cfg) {
            (Some(have), Some(got)) if have != got => {
                return Err(format!(
                    "moved weights were trained as {got:?}; this server is configured as {have:?}"
                ))
            }
            (None, got) => self.cfg = got,
            _ => {}
        }
        self.w.extend(moved.w);
        self.h.extend(moved.h);
        Ok(())
    }

    fn handle(&mut self, meta: &ReqMeta, req: KVRequest<'_, f32>) -> Result<KVPairs<f32>, String> {
        match (meta.cmd, meta.push) {
            (CMD_CONFIG, true) => {
                let lens = req.key_lens();
                let first = lens.first().copied().unwrap_or(0);
                let cfg = OptConfig::decode(&req.vals[..first.min(req.vals.len())])?;
                match self.cfg {
                    Some(have) if have != cfg => {
                        return Err(format!(
                            "optimizer already configured as {have:?}; refusing {cfg:?}"
                        ))
                    }
                    _ => self.cfg = Some(cfg),
                }
            }
            (CMD_GRADIENT, true) => {
                let cfg = self
                    .cfg
                    .ok_or("gradient pushed before the optimizer was configured (CMD_CONFIG)")?;
                let lens = req.key_lens();
                if lens.iter().any(|&l| l != 1) {
                    return Err("logistic regression weights have one value per key".into());
                }
                for (&k, &g) in req.keys.iter().zip(req.vals.iter()) {
                    if !g.is_finite() {
                        return Err(format!("gradient of key {k} is not finite: {g}"));
                    }
                    self.apply(&cfg, k, g);
                }
            }
            (cmd, true) => return Err(format!("unknown command {cmd} for the optimizer")),
            _ => {}
        }
        if !meta.pull {
            return Ok(KVPairs::default());
        }
        Ok(KVPairs {
            keys: req.keys.to_vec(),
            vals: req.keys.iter().map(|&k| self.weight(k)).collect(),
            lens: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_move_with_their_range() {
        let cfg = OptConfig {
            optimizer: Optimizer::Adagrad,
            learning_rate: 0.1,
            l2: 0.0,
        };
        let mut old = OptimizerHandler::new();
        old.cfg = Some(cfg);
        for k in [1, 5, 9] {
            old.apply(&cfg, k, 1.0);
        }
        let range = Range { begin: 4, end: 10 };
        let rows = old.export_range(range).expect("exports");
        let mut new = OptimizerHandler::new();
        new.import_range(range, &rows).expect("imports");
        assert_eq!(new.cfg, Some(cfg));
        assert_eq!(new.weight(5), old.weight(5));
        assert_eq!(new.h.get(&9), old.h.get(&9));
        assert_eq!(new.weight(1), 0.0, "key 1 stayed");
        let e = new
            .import_range(Range { begin: 6, end: 10 }, &rows)
            .expect_err("key 5 is outside");
        assert!(e.contains("key 5 is outside"), "{e}");
    }

    #[test]
    fn sgd_step_by_hand() {
        let cfg = OptConfig {
            optimizer: Optimizer::Sgd,
            learning_rate: 0.5,
            l2: 0.1,
        };
        let mut h = OptimizerHandler::new();
        h.apply(&cfg, 7, 2.0); // w = 0 - 0.5 * (2 + 0.1 * 0) = -1
        assert_eq!(h.weight(7), -1.0);
        h.apply(&cfg, 7, 1.0); // g = 1 + 0.1 * -1 = 0.9; w = -1 - 0.45 = -1.45
        assert!((h.weight(7) - -1.45).abs() < 1e-6);
    }

    #[test]
    fn adagrad_step_by_hand() {
        let cfg = OptConfig {
            optimizer: Optimizer::Adagrad,
            learning_rate: 0.1,
            l2: 0.0,
        };
        let mut h = OptimizerHandler::new();
        h.apply(&cfg, 1, 3.0); // h = 9; w = -0.1 * 3 / 3 = -0.1
        assert!((h.weight(1) - -0.1).abs() < 1e-6);
        h.apply(&cfg, 1, 4.0); // h = 25; w = -0.1 - 0.1 * 4 / 5 = -0.18
        assert!((h.weight(1) - -0.18).abs() < 1e-6);
    }

    #[test]
    fn config_round_trip_and_refusals() {
        let cfg = OptConfig {
            optimizer: Optimizer::Adagrad,
            learning_rate: 0.2,
            l2: 0.01,
        };
        assert_eq!(OptConfig::decode(&cfg.encode()), Ok(cfg));
        assert!(OptConfig::decode(&[0.0, -1.0, 0.0])
            .unwrap_err()
            .contains("learning rate -1"));
        assert!(OptConfig::decode(&[5.0, 1.0, 0.0])
            .unwrap_err()
            .contains("unknown optimizer code 5"));
    }

    #[test]
    fn a_saved_optimizer_restores_weights_and_adagrad_sums() {
        let cfg = OptConfig {
            optimizer: Optimizer::Adagrad,
            learning_rate: 0.1,
            l2: 0.01,
        };
        let mut h = OptimizerHandler::new();
        h.cfg = Some(cfg);
        for (k, g) in [(3, 0.5), (7, -1.0), (3, 0.25)] {
            h.apply(&cfg, k, g);
        }
        let state = h.save().expect("saves");
        let mut back = OptimizerHandler::new();
        back.restore(&state).expect("restores");
        assert_eq!(back.cfg, Some(cfg));
        assert_eq!(back.w, h.w);
        assert_eq!(back.h, h.h);
        // The next step continues exactly where the saved one would have.
        h.apply(&cfg, 3, 0.125);
        back.apply(&cfg, 3, 0.125);
        assert_eq!(back.weight(3).to_bits(), h.weight(3).to_bits());
        let e = back
            .restore(&state[..state.len() - 2])
            .expect_err("truncated");
        assert!(
            e.starts_with("saved optimizer truncated: AdaGrad sums needs 4 bytes"),
            "{e}"
        );
        assert_eq!(
            back.weight(7),
            h.weight(7),
            "a refused restore changes nothing"
        );
    }
}
