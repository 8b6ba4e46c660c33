//! The optimizers' steps on one row: `w` (`dim` values), its slots (laid out per rule below)
//! and a pushed gradient `g` (`dim` values). The formulas are [`Optimizer`]'s; each loop runs
//! over the row's values in order, with no fused multiply-add, so a step is bit-for-bit the
//! scalar formula (the tests hold it to a naive reference).
//!
//! Slot layout (`Optimizer::slot_values(dim)` values after the row):
//! - SGD: none;
//! - AdaGrad: `acc[dim]`;
//! - Adam: `m[dim]`, `v[dim]`, then the row's step count `t` as a `u32`'s bits;
//! - FTRL: `z[dim]`, `n[dim]`.

use super::spec::Optimizer;

/// Sets a new row's slots: AdaGrad's `acc` to `init_acc`, everything else to 0.
pub fn init_slots(opt: &Optimizer, slots: &mut [f32]) {
    match *opt {
        Optimizer::Adagrad { init_acc, .. } => slots.fill(init_acc),
        _ => slots.fill(0.0),
    }
}

/// One step of `opt` on row `w` with slots `slots` and gradient `g` (`wd`: L2 weight decay,
/// `g + wd · w`, applied when ≠ 0).
///
/// # Panics
/// If the lengths disagree with `w.len()` (the table checks them before).
#[inline]
pub fn step(opt: &Optimizer, wd: f32, w: &mut [f32], slots: &mut [f32], g: &[f32]) {
    let dim = w.len();
    assert_eq!(g.len(), dim);
    assert_eq!(slots.len(), opt.slot_values(dim));
    let decay = |g: f32, w: f32| if wd != 0.0 { g + wd * w } else { g };
    match *opt {
        Optimizer::Sgd { lr } => {
            for (w, &g) in w.iter_mut().zip(g) {
                *w -= lr * decay(g, *w);
            }
        }
        Optimizer::Adagrad { lr, eps, .. } => {
            for ((w, acc), &g) in w.iter_mut().zip(slots.iter_mut()).zip(g) {
                let g = decay(g, *w);
                *acc += g * g;
                *w -= lr * g / (acc.sqrt() + eps);
            }
        }
        Optimizer::Adam { lr, b1, b2, eps } => {
            let (m, rest) = slots.split_at_mut(dim);
            let (v, t) = rest.split_at_mut(dim);
            let steps = t[0].to_bits().saturating_add(1);
            t[0] = f32::from_bits(steps);
            let exponent = steps.min(i32::MAX as u32) as i32;
            let c1 = 1.0 - b1.powi(exponent);
            let c2 = 1.0 - b2.powi(exponent);
            for (((w, m), v), &g) in w.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
                let g = decay(g, *w);
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * g * g;
                *w -= lr * (*m / c1) / ((*v / c2).sqrt() + eps);
            }
        }
        Optimizer::Ftrl {
            alpha,
            beta,
            l1,
            l2,
        } => {
            let (z, n) = slots.split_at_mut(dim);
            for (((w, z), n), &g) in w.iter_mut().zip(z.iter_mut()).zip(n.iter_mut()).zip(g) {
                let n_new = *n + g * g;
                let sigma = (n_new.sqrt() - n.sqrt()) / alpha;
                *z += g - sigma * *w;
                *n = n_new;
                *w = if z.abs() <= l1 {
                    0.0
                } else {
                    -(*z - z.signum() * l1) / ((beta + n.sqrt()) / alpha + l2)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The formulas of [`Optimizer`]'s docs, one value at a time, written out plainly.
    fn naive(opt: &Optimizer, wd: f32, w: &mut [f32], slots: &mut [f32], g: &[f32]) {
        let d = w.len();
        let mut t = 0u32;
        if let Optimizer::Adam { .. } = opt {
            t = slots[2 * d].to_bits() + 1;
            slots[2 * d] = f32::from_bits(t);
        }
        for i in 0..d {
            let gi = if wd != 0.0 { g[i] + wd * w[i] } else { g[i] };
            match *opt {
                Optimizer::Sgd { lr } => w[i] -= lr * gi,
                Optimizer::Adagrad { lr, eps, .. } => {
                    slots[i] += gi * gi;
                    w[i] -= lr * gi / (slots[i].sqrt() + eps);
                }
                Optimizer::Adam { lr, b1, b2, eps } => {
                    slots[i] = b1 * slots[i] + (1.0 - b1) * gi;
                    slots[d + i] = b2 * slots[d + i] + (1.0 - b2) * gi * gi;
                    let m_hat = slots[i] / (1.0 - b1.powi(t as i32));
                    let v_hat = slots[d + i] / (1.0 - b2.powi(t as i32));
                    w[i] -= lr * m_hat / (v_hat.sqrt() + eps);
                }
                Optimizer::Ftrl {
                    alpha,
                    beta,
                    l1,
                    l2,
                } => {
                    let (z, n) = (slots[i], slots[d + i]);
                    let sigma = ((n + gi * gi).sqrt() - n.sqrt()) / alpha;
                    let z = z + (gi - sigma * w[i]);
                    let n = n + gi * gi;
                    slots[i] = z;
                    slots[d + i] = n;
                    w[i] = if z.abs() <= l1 {
                        0.0
                    } else {
                        let sign = if z < 0.0 { -1.0 } else { 1.0 };
                        -(z - sign * l1) / ((beta + n.sqrt()) / alpha + l2)
                    };
                }
            }
        }
    }

    fn optimizers() -> impl Strategy<Value = (Optimizer, f32)> {
        prop_oneof![
            (0.001f32..1.0).prop_map(|lr| Optimizer::Sgd { lr }),
            (0.001f32..1.0, 0.0f32..0.1, 0.0f32..1.0)
                .prop_map(|(lr, eps, init_acc)| { Optimizer::Adagrad { lr, eps, init_acc } }),
            (0.0001f32..0.1, 0.0f32..0.99, 0.5f32..0.9999, 1e-8f32..1e-3)
                .prop_map(|(lr, b1, b2, eps)| Optimizer::Adam { lr, b1, b2, eps }),
            (0.01f32..1.0, 0.0f32..2.0, 0.0f32..1.0, 0.0f32..2.0).prop_map(
                |(alpha, beta, l1, l2)| Optimizer::Ftrl {
                    alpha,
                    beta,
                    l1,
                    l2
                }
            ),
        ]
        .prop_flat_map(|o| {
            let wd = if matches!(o, Optimizer::Ftrl { .. }) {
                Just(0.0f32).boxed()
            } else {
                prop_oneof![Just(0.0f32), 0.0f32..0.1].boxed()
            };
            (Just(o), wd)
        })
    }

    proptest! {
        /// Several steps of every rule equal the naive formulas bit for bit.
        #[test]
        fn steps_equal_the_naive_formulas(
            (opt, wd) in optimizers(),
            dim in 1usize..20,
            grads in proptest::collection::vec(-10.0f32..10.0, 200),
            start in proptest::collection::vec(-1.0f32..1.0, 20),
        ) {
            let mut w = start[..dim].to_vec();
            let mut slots = vec![0.0f32; opt.slot_values(dim)];
            init_slots(&opt, &mut slots);
            let (mut w2, mut slots2) = (w.clone(), slots.clone());
            for g in grads.chunks_exact(dim).take(6) {
                step(&opt, wd, &mut w, &mut slots, g);
                naive(&opt, wd, &mut w2, &mut slots2, g);
                prop_assert_eq!(
                    w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    w2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                );
                prop_assert_eq!(
                    slots.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    slots2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }

    /// Hand-computed steps: each rule's first step from a known row.
    #[test]
    fn first_steps_by_hand() {
        // SGD: 1 − 0.1·(2 + 0.5·1) = 0.75.
        let mut w = [1.0f32];
        step(&Optimizer::Sgd { lr: 0.1 }, 0.5, &mut w, &mut [], &[2.0]);
        assert_eq!(w, [0.75]);
        // AdaGrad: acc = 0.5 + 9 = 9.5; w = 1 − 0.1·3/√9.5.
        let mut w = [1.0f32];
        let mut acc = [0.5f32];
        let opt = Optimizer::Adagrad {
            lr: 0.1,
            eps: 0.0,
            init_acc: 0.5,
        };
        step(&opt, 0.0, &mut w, &mut acc, &[3.0]);
        assert_eq!(acc, [9.5]);
        assert!((w[0] - (1.0 - 0.3 / 9.5f32.sqrt())).abs() < 1e-7);
        // Adam's first step moves by lr·sign(g) (bias-corrected m/√v = g/|g|), up to eps.
        let opt = Optimizer::Adam {
            lr: 0.01,
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
        };
        let mut w = [0.0f32, 0.0];
        let mut s = [0.0f32; 5];
        step(&opt, 0.0, &mut w, &mut s, &[4.0, -0.5]);
        assert!(
            (w[0] + 0.01).abs() < 1e-6 && (w[1] - 0.01).abs() < 1e-6,
            "{w:?}"
        );
        assert_eq!(s[4].to_bits(), 1, "step count");
        // FTRL: n = 4, σ = 2/α = 20, z = 2 − 20·0 = 2 > l1 = 1: w = −(2 − 1)/((1 + 2)/0.1 + 0).
        let opt = Optimizer::Ftrl {
            alpha: 0.1,
            beta: 1.0,
            l1: 1.0,
            l2: 0.0,
        };
        let mut w = [0.0f32];
        let mut s = [0.0f32; 2];
        step(&opt, 0.0, &mut w, &mut s, &[2.0]);
        assert_eq!(s, [2.0, 4.0]);
        assert!((w[0] + 1.0 / 30.0).abs() < 1e-7, "{w:?}");
        // Below l1 the weight is exactly 0.
        let mut w = [0.0f32];
        let mut s = [0.0f32; 2];
        step(&opt, 0.0, &mut w, &mut s, &[0.5]);
        assert_eq!(w, [0.0]);
    }
}
