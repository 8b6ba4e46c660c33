//! The factorization machine (Rendle, "Factorization Machines", ICDM 2010) over binary
//! features: its prediction, and the gradient of its log-loss.
//!
//! For a sample whose active features are the set I (every x_i = 1),
//! ŷ = sigmoid(w0 + Σ_{i∈I} w_i + ½ Σ_d [(Σ_{i∈I} v_{i,d})² − Σ_{i∈I} v_{i,d}²]),
//! the pairwise term Σ_{i<j} ⟨v_i, v_j⟩ computed in O(|I| · dim) (Rendle's lemma 3.1). With
//! g = ŷ − y, the log-loss −[y ln ŷ + (1 − y) ln(1 − ŷ)] has the gradient ∂/∂w0 = g,
//! ∂/∂w_i = g and ∂/∂v_{i,d} = g · (Σ_{j∈I} v_{j,d} − v_{i,d}).

/// The parameters a set of samples touches: the bias, and the rows of the features they use,
/// addressed by the samples' indices (positions in the batch's key list).
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// The bias w0.
    pub w0: f32,
    /// Linear weights, one per feature.
    pub w: &'a [f32],
    /// Embeddings, `dim` per feature (row-major).
    pub v: &'a [f32],
}

/// Gradients in the shapes of [`Rows`]: summed over the samples of a batch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grads {
    /// ∂loss/∂w0.
    pub w0: f32,
    /// ∂loss/∂w_i, one per feature.
    pub w: Vec<f32>,
    /// ∂loss/∂v_i, `dim` per feature.
    pub v: Vec<f32>,
}

impl Grads {
    /// Zero gradients for `features` rows of embedding dimension `dim`.
    pub fn reset(&mut self, features: usize, dim: usize) {
        self.w0 = 0.0;
        self.w.clear();
        self.w.resize(features, 0.0);
        self.v.clear();
        self.v.resize(features * dim, 0.0);
    }
}

/// A factorization machine of embedding dimension `dim` (Rendle 2010; module docs).
#[derive(Clone, Debug)]
pub struct Fm {
    dim: usize,
    /// Σ_i v_{i,d} of the sample being computed.
    sum: Vec<f32>,
}

impl Fm {
    /// A machine whose embeddings have `dim` values.
    pub fn new(dim: usize) -> Fm {
        Fm {
            dim,
            sum: vec![0.0; dim],
        }
    }

    /// The embedding dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The logit (pre-sigmoid score) of the sample whose active features are `idx` (indices
    /// into `rows`; each must be < `rows.w.len()`, else this panics). Leaves Σ_i v_i of the
    /// sample in `self.sum` for [`backward`](Self::backward).
    pub fn logit(&mut self, rows: &Rows<'_>, idx: &[u32]) -> f32 {
        let d = self.dim;
        self.sum.iter_mut().for_each(|s| *s = 0.0);
        let (mut z, mut sq) = (rows.w0, 0f32);
        for &i in idx {
            let i = i as usize;
            z += rows.w[i];
            for (s, &x) in self.sum.iter_mut().zip(&rows.v[i * d..(i + 1) * d]) {
                *s += x;
                sq += x * x;
            }
        }
        let dot: f32 = self.sum.iter().map(|s| s * s).sum();
        z + 0.5 * (dot - sq)
    }

    /// The sample's log-loss at label `y` (0 or 1), and its gradient times `scale` added into
    /// `grads` (shaped as `rows`). Computes the sample's [`logit`](Self::logit) first.
    pub fn backward(
        &mut self,
        rows: &Rows<'_>,
        idx: &[u32],
        y: f32,
        scale: f32,
        grads: &mut Grads,
    ) -> f64 {
        let z = self.logit(rows, idx);
        let g = (sigmoid(z) - y) * scale;
        grads.w0 += g;
        let d = self.dim;
        for &i in idx {
            let i = i as usize;
            grads.w[i] += g;
            let gv = &mut grads.v[i * d..(i + 1) * d];
            for ((gx, &s), &x) in gv
                .iter_mut()
                .zip(&self.sum)
                .zip(&rows.v[i * d..(i + 1) * d])
            {
                *gx += g * (s - x);
            }
        }
        log_loss(z, y)
    }

    /// The mean log-loss of a batch of samples (`idx`: `fields` indices per sample, one label
    /// per sample) and its gradient, written into `grads` (reset to the shapes of `rows`
    /// first): each sample's gradient is divided by the batch size.
    pub fn batch_gradient(
        &mut self,
        rows: &Rows<'_>,
        idx: &[u32],
        fields: usize,
        labels: &[f32],
        grads: &mut Grads,
    ) -> f64 {
        grads.reset(rows.w.len(), self.dim);
        let n = labels.len();
        if n == 0 {
            return 0.0;
        }
        let scale = 1.0 / n as f32;
        let total: f64 = idx
            .chunks_exact(fields)
            .zip(labels)
            .map(|(s, &y)| self.backward(rows, s, y, scale, grads))
            .sum();
        total / n as f64
    }
}

/// The logistic function.
pub fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// The log-loss of logit `z` at label `y` ∈ {0, 1}, computed stably:
/// softplus(z) − y·z = ln(1 + e^z) − y·z.
pub fn log_loss(z: f32, y: f32) -> f64 {
    let z = z as f64;
    let softplus = z.max(0.0) + (-z.abs()).exp().ln_1p();
    softplus - y as f64 * z
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three features' rows of a sample and a second sample, with small values.
    fn params(dim: usize) -> (f32, Vec<f32>, Vec<f32>) {
        let w = vec![0.3, -0.2, 0.1];
        let v = (0..3 * dim)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 10.0)
            .collect();
        (0.05, w, v)
    }

    #[test]
    fn the_pairwise_term_is_the_sum_over_pairs() {
        let (w0, w, v) = params(4);
        let rows = Rows { w0, w: &w, v: &v };
        let mut fm = Fm::new(4);
        let got = fm.logit(&rows, &[0, 1, 2]);
        let dot = |a: usize, b: usize| (0..4).map(|d| v[a * 4 + d] * v[b * 4 + d]).sum::<f32>();
        let want = w0 + w.iter().sum::<f32>() + dot(0, 1) + dot(0, 2) + dot(1, 2);
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        let dim = 3;
        let (w0, w, v) = params(dim);
        // Two samples of 3 fields sharing features; the second has feature 2 twice.
        let samples: Vec<u32> = vec![0, 2, 1, 0, 2, 2];
        let labels = [1.0, 0.0];
        let mut fm = Fm::new(dim);
        let loss = |fm: &mut Fm, w0: f32, w: &[f32], v: &[f32]| {
            let mut g = Grads::default();
            fm.batch_gradient(&Rows { w0, w, v }, &samples, 3, &labels, &mut g)
        };
        let mut grads = Grads::default();
        let rows = Rows { w0, w: &w, v: &v };
        fm.batch_gradient(&rows, &samples, 3, &labels, &mut grads);
        let eps = 1e-2f32;
        let check = |what: String, analytic: f32, plus: f64, minus: f64| {
            let numeric = (plus - minus) / (2.0 * eps as f64);
            assert!(
                (numeric - analytic as f64).abs() < 2e-4,
                "{what}: analytic {analytic}, numeric {numeric}"
            );
        };
        check(
            "w0".into(),
            grads.w0,
            loss(&mut fm, w0 + eps, &w, &v),
            loss(&mut fm, w0 - eps, &w, &v),
        );
        for i in 0..w.len() {
            let (mut p, mut m) = (w.clone(), w.clone());
            p[i] += eps;
            m[i] -= eps;
            check(
                format!("w[{i}]"),
                grads.w[i],
                loss(&mut fm, w0, &p, &v),
                loss(&mut fm, w0, &m, &v),
            );
        }
        for j in 0..v.len() {
            let (mut p, mut m) = (v.clone(), v.clone());
            p[j] += eps;
            m[j] -= eps;
            check(
                format!("v[{}][{}]", j / dim, j % dim),
                grads.v[j],
                loss(&mut fm, w0, &w, &p),
                loss(&mut fm, w0, &w, &m),
            );
        }
    }

    #[test]
    fn log_loss_is_stable_and_right() {
        assert!((log_loss(0.0, 1.0) - 2f64.ln()).abs() < 1e-12);
        assert!((log_loss(2.0, 0.0) - (1.0 + 2f64.exp()).ln()).abs() < 1e-9);
        assert!(log_loss(-100.0, 0.0) < 1e-40);
        assert!((log_loss(-100.0, 1.0) - 100.0).abs() < 1e-9);
    }
}
