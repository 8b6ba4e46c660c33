//! A deterministic synthetic click log, Criteo-like: `fields` categorical fields with
//! heavy-tailed id frequencies, and labels drawn from a known logistic ground truth, so that the
//! best possible (Bayes) test AUC is known.
//!
//! **Fields and ids.** Field f (0-based, of F) has a vocabulary of
//! V_f = round(vocab_min · (vocab_max / vocab_min)^(f / (F − 1))) ids (geometric spread). Its
//! ids are drawn with Zipf frequencies: id r (0-based rank) has probability ∝ (r + 1)^(−zipf),
//! sampled in O(1) by Walker's alias method (Vose's construction) on a table built once. The
//! feature id of (field, id) is `xxh3_64_with_seed` of the 12 bytes `field (u32 LE) ‖ id (u64
//! LE)` with the generator's seed; a hash of 0 becomes 1, so no feature id is the reserved key
//! [`BIAS_KEY`].
//!
//! **Ground truth.** `p(click | x) = sigmoid(b0 + Σ_f w_f[id_f] + Σ_{f<g} ⟨v_f[id_f], v_g[id_g]⟩)`
//! (a factorization machine of dimension `k_true`). `w_f[r] = σ_w · a(r) · z` and each component
//! of `v_f[r] = σ_v · a(r) · z`, with z standard normal from a hash of (seed, field, r,
//! component), and a(r) = (1 + r / r_0)^(−1/2): rare ids carry smaller effects, which keeps the
//! part of the signal no finite training set can learn small. b0 is calibrated by bisection, on
//! 20 000 samples of a split of their own, so that the mean of p is `ctr`.
//!
//! **Samples.** Sample i of split s is drawn from a SplitMix64 stream seeded by a hash of (seed,
//! s, i): one uniform per field for its id, then one for the label (1 when below p). Any sample
//! can be made alone, so worker r of W generates its shard (rows i with i mod W = r) without a
//! file, and every run with the same options sees the same data.

use std::fmt;

/// The wide table's key of the global bias w0; no feature id equals it.
pub const BIAS_KEY: u64 = 0;

/// The options of the generator (every default is the documented workload's).
#[derive(Clone, Debug, PartialEq)]
pub struct GenConfig {
    /// Seed of everything: vocabularies' hashes, true weights, samples.
    pub seed: u64,
    /// Categorical fields per sample (F ≥ 1).
    pub fields: usize,
    /// Vocabulary of the first field (ids), ≥ 1.
    pub vocab_min: usize,
    /// Vocabulary of the last field (ids), ≥ `vocab_min`.
    pub vocab_max: usize,
    /// Zipf exponent of the id frequencies (> 0).
    pub zipf: f64,
    /// Dimension of the true latent vectors (0: no interactions).
    pub k_true: usize,
    /// Standard deviation σ_w of the true weight of a head id.
    pub weight_std: f64,
    /// Standard deviation σ_v of each component of a head id's true latent vector.
    pub latent_std: f64,
    /// Rank r_0 where an id's effect has shrunk by √2 (see the module docs).
    pub rank_scale: f64,
    /// Mean click probability the bias is calibrated to, in (0, 1).
    pub ctr: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 1,
            fields: 26,
            vocab_min: 10,
            vocab_max: 100_000,
            zipf: 1.1,
            k_true: 4,
            weight_std: 0.33,
            latent_std: 0.12,
            rank_scale: 10.0,
            ctr: 0.25,
        }
    }
}

impl GenConfig {
    /// Checks the options.
    ///
    /// # Errors
    /// A text naming the first option out of range.
    pub fn check(&self) -> Result<(), String> {
        if self.fields == 0 || self.fields > 1000 {
            return Err(format!("fields {}: expected 1..=1000", self.fields));
        }
        if self.vocab_min == 0 || self.vocab_max < self.vocab_min || self.vocab_max > 1 << 26 {
            return Err(format!(
                "vocabularies {}..{}: expected 1 ≤ min ≤ max ≤ 2^26",
                self.vocab_min, self.vocab_max
            ));
        }
        if !(self.zipf > 0.0 && self.zipf.is_finite()) {
            return Err(format!("zipf exponent {}: expected > 0", self.zipf));
        }
        if !(self.ctr > 0.0 && self.ctr < 1.0) {
            return Err(format!("ctr {}: expected in (0, 1)", self.ctr));
        }
        let finite = [self.weight_std, self.latent_std, self.rank_scale];
        if finite.iter().any(|x| !(x.is_finite() && *x >= 0.0)) || self.rank_scale == 0.0 {
            return Err("weight_std, latent_std ≥ 0 and rank_scale > 0 expected".into());
        }
        if self.k_true > 64 {
            return Err(format!("k_true {}: expected ≤ 64", self.k_true));
        }
        Ok(())
    }
}

/// Which set a sample belongs to; each split is its own stream of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The training set.
    Train,
    /// The test set.
    Test,
    /// The samples the bias is calibrated on.
    Calibration,
}

impl Split {
    fn tag(self) -> u64 {
        match self {
            Split::Train => 1,
            Split::Test => 2,
            Split::Calibration => 3,
        }
    }
}

/// One field's truth: its alias table, its feature ids, and its true weights and latent
/// vectors, each indexed by id (rank).
struct Field {
    /// Alias method: the probability of keeping the drawn column, per id.
    keep: Vec<f32>,
    /// Alias method: the id taken otherwise, per id.
    alias: Vec<u32>,
    /// Feature id of each id (never [`BIAS_KEY`]).
    keys: Vec<u64>,
    /// True weight of each id.
    w: Vec<f32>,
    /// True latent vectors, `k_true` per id.
    v: Vec<f32>,
}

/// The synthetic click log of one [`GenConfig`]: makes any sample of any split on demand.
pub struct Generator {
    cfg: GenConfig,
    fields: Vec<Field>,
    /// The calibrated global bias b0 of the truth.
    bias: f64,
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("cfg", &self.cfg)
            .field("vocabularies", &self.vocabularies())
            .field("bias", &self.bias)
            .finish()
    }
}

/// Samples of one split (or of one worker's shard of it), row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataset {
    /// Ids per row (the generator's `fields`).
    pub fields: usize,
    /// Index of each row in its split.
    pub index: Vec<u64>,
    /// Feature ids, `fields` per row.
    pub ids: Vec<u64>,
    /// Labels, 0 or 1.
    pub labels: Vec<f32>,
    /// The true click probability of each row.
    pub truth: Vec<f32>,
}

impl Dataset {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// The feature ids of row `r` (`fields` of them). Panics if `r` ≥ [`rows`](Self::rows).
    pub fn row(&self, r: usize) -> &[u64] {
        &self.ids[r * self.fields..(r + 1) * self.fields]
    }

    /// Mean label (the click-through rate), 0 for no rows.
    pub fn ctr(&self) -> f64 {
        self.labels.iter().map(|&y| y as f64).sum::<f64>() / self.rows().max(1) as f64
    }

    /// The best possible AUC on these rows: the AUC of the true probabilities.
    pub fn bayes_auc(&self) -> f64 {
        super::auc::auc(&self.truth, &self.labels)
    }

    /// The mean log-loss (natural log) of the true probabilities: the best possible.
    pub fn bayes_logloss(&self) -> f64 {
        super::auc::logloss(&self.truth, &self.labels)
    }
}

impl Generator {
    /// Builds the vocabularies, alias tables and true parameters of `cfg` and calibrates the
    /// bias. Costs O(Σ_f V_f · k_true) time and memory (about 0.3 M ids by default).
    ///
    /// # Errors
    /// [`GenConfig::check`]'s.
    pub fn new(cfg: &GenConfig) -> Result<Generator, String> {
        cfg.check()?;
        let f_count = cfg.fields;
        let fields = (0..f_count)
            .map(|f| Field::new(cfg, f, vocabulary(cfg, f)))
            .collect();
        let mut g = Generator {
            cfg: cfg.clone(),
            fields,
            bias: 0.0,
        };
        g.bias = g.calibrate();
        Ok(g)
    }

    /// The options.
    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Vocabulary size of each field.
    pub fn vocabularies(&self) -> Vec<usize> {
        self.fields.iter().map(|f| f.keys.len()).collect()
    }

    /// The calibrated bias b0 of the truth.
    pub fn bias(&self) -> f64 {
        self.bias
    }

    /// Sample `i` of `split`: its feature ids into `ids` (one per field; `ids.len()` must be
    /// `fields`), and returns (label 0 or 1, true click probability).
    pub fn sample_into(&self, split: Split, i: u64, ids: &mut [u64]) -> (f32, f32) {
        let mut rng = SplitMix64::new(mix(mix(self.cfg.seed ^ 0x5eed, split.tag()), i));
        let z = self.logit_of(&mut rng, ids);
        let p = sigmoid(self.bias + z);
        let y = if rng.uniform() < p { 1.0 } else { 0.0 };
        (y, p as f32)
    }

    /// Draws one id per field from `rng` (feature ids into `ids`) and returns the truth's logit
    /// without the bias.
    fn logit_of(&self, rng: &mut SplitMix64, ids: &mut [u64]) -> f64 {
        let k = self.cfg.k_true;
        let mut sum = [0f64; 64];
        let mut sq = 0f64;
        let mut z = 0f64;
        for (f, id) in self.fields.iter().zip(ids.iter_mut()) {
            let r = f.draw(rng);
            *id = f.keys[r];
            z += f.w[r] as f64;
            for (d, &x) in f.v[r * k..(r + 1) * k].iter().enumerate() {
                sum[d] += x as f64;
                sq += (x as f64) * (x as f64);
            }
        }
        let dot: f64 = sum[..k].iter().map(|s| s * s).sum();
        z + 0.5 * (dot - sq)
    }

    /// Rows `0..n` of `split` that fall to shard `shard` of `shards` (row i when i mod shards
    /// = shard), in order. `shards` ≥ 1 and `shard` < `shards` (otherwise no rows).
    pub fn dataset(&self, split: Split, n: u64, shard: u64, shards: u64) -> Dataset {
        let f = self.cfg.fields;
        let rows: Vec<u64> = if shards == 0 || shard >= shards {
            Vec::new()
        } else {
            (shard..n).step_by(shards as usize).collect()
        };
        let mut d = Dataset {
            fields: f,
            ids: vec![0; rows.len() * f],
            labels: Vec::with_capacity(rows.len()),
            truth: Vec::with_capacity(rows.len()),
            index: rows,
        };
        for (j, &i) in d.index.iter().enumerate() {
            let (y, p) = self.sample_into(split, i, &mut d.ids[j * f..(j + 1) * f]);
            d.labels.push(y);
            d.truth.push(p);
        }
        d
    }

    /// The bias that makes the mean click probability `ctr` over 20 000 calibration samples
    /// (bisection on the monotone mean).
    fn calibrate(&self) -> f64 {
        let mut ids = vec![0u64; self.cfg.fields];
        let zs: Vec<f64> = (0..20_000u64)
            .map(|i| {
                let tag = Split::Calibration.tag();
                let mut rng = SplitMix64::new(mix(mix(self.cfg.seed ^ 0x5eed, tag), i));
                self.logit_of(&mut rng, &mut ids)
            })
            .collect();
        let (mut lo, mut hi) = (-30.0f64, 30.0f64);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            let mean = zs.iter().map(|z| sigmoid(mid + z)).sum::<f64>() / zs.len() as f64;
            if mean < self.cfg.ctr {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    }
}

/// Vocabulary size of field `f`: the geometric spread of the module docs.
fn vocabulary(cfg: &GenConfig, f: usize) -> usize {
    if cfg.fields == 1 {
        return cfg.vocab_min;
    }
    let t = f as f64 / (cfg.fields - 1) as f64;
    let ratio = cfg.vocab_max as f64 / cfg.vocab_min as f64;
    ((cfg.vocab_min as f64 * ratio.powf(t)).round() as usize).clamp(cfg.vocab_min, cfg.vocab_max)
}

impl Field {
    fn new(cfg: &GenConfig, f: usize, vocab: usize) -> Field {
        let weights: Vec<f64> = (0..vocab)
            .map(|r| ((r + 1) as f64).powf(-cfg.zipf))
            .collect();
        let (keep, alias) = alias_table(&weights);
        let k = cfg.k_true;
        let mut w = Vec::with_capacity(vocab);
        let mut v = Vec::with_capacity(vocab * k);
        let mut keys = Vec::with_capacity(vocab);
        for r in 0..vocab {
            let a = (1.0 + r as f64 / cfg.rank_scale).powf(-0.5);
            let base = mix(mix(cfg.seed ^ 0x7e11, f as u64), r as u64);
            w.push((cfg.weight_std * a * normal(mix(base, 0))) as f32);
            for d in 0..k {
                v.push((cfg.latent_std * a * normal(mix(base, 1 + d as u64))) as f32);
            }
            keys.push(feature_id(cfg.seed, f, r as u64));
        }
        Field {
            keep,
            alias,
            keys,
            w,
            v,
        }
    }

    /// One id (rank) drawn with the field's Zipf frequencies.
    fn draw(&self, rng: &mut SplitMix64) -> usize {
        let n = self.keep.len();
        let x = rng.next();
        // High bits pick the column, low 24 bits the coin.
        let col = (((x >> 32) * n as u64) >> 32) as usize;
        let coin = (x & 0xff_ffff) as f32 / (1u32 << 24) as f32;
        if coin < self.keep[col] {
            col
        } else {
            self.alias[col] as usize
        }
    }
}

/// The feature id of id `id` of field `field`: `xxh3_64_with_seed(field u32 LE ‖ id u64 LE,
/// seed)`, with 0 (the [`BIAS_KEY`]) mapped to 1.
pub fn feature_id(seed: u64, field: usize, id: u64) -> u64 {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&(field as u32).to_le_bytes());
    bytes[4..].copy_from_slice(&id.to_le_bytes());
    match xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, seed) {
        BIAS_KEY => 1,
        h => h,
    }
}

/// Walker's alias table of `weights` (not normalised), Vose's construction: per column, the
/// probability of keeping it and the column taken otherwise.
fn alias_table(weights: &[f64]) -> (Vec<f32>, Vec<u32>) {
    let n = weights.len();
    let total: f64 = weights.iter().sum();
    let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
    let mut keep = vec![1.0f32; n];
    let mut alias: Vec<u32> = (0..n as u32).collect();
    let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| scaled[i] < 1.0);
    while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
        keep[s] = scaled[s] as f32;
        alias[s] = l as u32;
        scaled[l] -= 1.0 - scaled[s];
        if scaled[l] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    // Left-overs (rounding) keep their column.
    (keep, alias)
}

/// The logistic function.
pub fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// SplitMix64's finaliser of `a` combined with `b` (a counter-based hash).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A standard normal from the 64 bits `h` (Box–Muller on its two 32-bit halves).
fn normal(h: u64) -> f64 {
    let u1 = ((h >> 32) as f64 + 0.5) / 4_294_967_296.0;
    let u2 = ((h & 0xffff_ffff) as f64 + 0.5) / 4_294_967_296.0;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// SplitMix64 (Steele, Lea and Flood 2014): the stream of one sample.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> GenConfig {
        GenConfig {
            fields: 5,
            vocab_min: 3,
            vocab_max: 1000,
            ..GenConfig::default()
        }
    }

    #[test]
    fn the_alias_table_reproduces_the_frequencies() {
        let w = [5.0, 1.0, 3.0, 1.0];
        let (keep, alias) = alias_table(&w);
        // Probability of each id: (keep[i] + Σ_{j: alias[j]=i} (1 − keep[j])) / n.
        let mut p = [0f64; 4];
        for i in 0..4 {
            p[i] += keep[i] as f64 / 4.0;
            if keep[i] < 1.0 {
                p[alias[i] as usize] += (1.0 - keep[i] as f64) / 4.0;
            }
        }
        for (got, want) in p.iter().zip([0.5, 0.1, 0.3, 0.1]) {
            assert!((got - want).abs() < 1e-6, "{p:?}");
        }
    }

    #[test]
    fn vocabularies_spread_geometrically() {
        let g = Generator::new(&small()).expect("valid");
        assert_eq!(g.vocabularies(), vec![3, 13, 55, 234, 1000]);
    }

    #[test]
    fn heads_are_frequent_and_the_bias_gives_the_ctr() {
        let g = Generator::new(&small()).expect("valid");
        let d = g.dataset(Split::Train, 20_000, 0, 1);
        // Field 4 (1000 ids, Zipf 1.1): the head id has probability 1 / H(1000, 1.1) ≈ 0.18.
        let head = g.fields[4].keys[0];
        let share = (0..d.rows()).filter(|&r| d.row(r)[4] == head).count() as f64 / 20_000.0;
        assert!((share - 0.18).abs() < 0.015, "head share {share}");
        assert!((d.ctr() - 0.25).abs() < 0.02, "ctr {}", d.ctr());
        assert!(d.ids.iter().all(|&k| k != BIAS_KEY));
    }

    #[test]
    fn bad_options_are_named() {
        let e = Generator::new(&GenConfig {
            ctr: 1.5,
            ..small()
        })
        .expect_err("invalid");
        assert!(e.contains("ctr 1.5"), "{e}");
    }
}
