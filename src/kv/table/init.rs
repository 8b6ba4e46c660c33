//! Initial rows: a pure function of (table seed, key, value index), from the counter-based
//! generator Philox4x64-10 (Salmon, Moraes, Dror, Shaw 2011, "Parallel random numbers: as easy
//! as 1, 2, 3"; the Random123 library's `philox4x64`, NumPy's `Philox`). No generator state is
//! kept, so the same key starts from the same row on every server, after a restart, a
//! replacement or an eviction, whatever order keys arrive in.

use super::spec::Init;

const M0: u64 = 0xD2E7_470E_E14C_6C93;
const M1: u64 = 0xCA5A_8263_9512_1157;
const W0: u64 = 0x9E37_79B9_7F4A_7C15;
const W1: u64 = 0xBB67_AE85_84CA_A73B;

/// Philox4x64 with 10 rounds: four 64-bit words from a 256-bit counter and a 128-bit key.
pub fn philox4x64(ctr: [u64; 4], key: [u64; 2]) -> [u64; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = u128::from(M0) * u128::from(c[0]);
        let p1 = u128::from(M1) * u128::from(c[2]);
        c = [
            (p1 >> 64) as u64 ^ c[1] ^ k[0],
            p1 as u64,
            (p0 >> 64) as u64 ^ c[3] ^ k[1],
            p0 as u64,
        ];
    }
    c
}

/// The Philox key's second word for initial rows (the first is the table's seed); other uses
/// of the generator take other words.
const INIT_STREAM: u64 = 0x7061_7261_6d73; // "params"

/// A uniform in [0, 1) from the top 24 bits of `x` (every value an exact `f32`).
#[inline]
fn unit_f32(x: u64) -> f32 {
    (x >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

/// Writes the initial row of `key` into `row` (`dim` values): value `i` comes from block
/// `i / 4` (Uniform) or `i / 8` (Normal) of Philox with counter `[key, block, 0, 0]` and key
/// `[seed, INIT_STREAM]`.
///
/// - `Zeros`: 0.
/// - `Uniform { low, high }`: `low + (high − low) · u`, `u` from 24 bits.
/// - `Normal { mean, std }`: Box–Muller on each 64-bit word (its high 32 bits give `u1` in
///   (0, 1], the low 32 bits `u2`): `mean + std · √(−2 ln u1) · cos 2πu2`, then `… sin 2πu2`
///   for the next value; computed in `f64`, rounded to `f32`.
pub fn initial_row(init: &Init, seed: u64, key: u64, row: &mut [f32]) {
    let pkey = [seed, INIT_STREAM];
    match *init {
        Init::Zeros => row.fill(0.0),
        Init::Uniform { low, high } => {
            for (block, out) in row.chunks_mut(4).enumerate() {
                let r = philox4x64([key, block as u64, 0, 0], pkey);
                for (o, &x) in out.iter_mut().zip(&r) {
                    *o = low + (high - low) * unit_f32(x);
                }
            }
        }
        Init::Normal { mean, std } => {
            let (mean, std) = (f64::from(mean), f64::from(std));
            for (block, out) in row.chunks_mut(8).enumerate() {
                let r = philox4x64([key, block as u64, 0, 0], pkey);
                for (pair, &x) in out.chunks_mut(2).zip(&r) {
                    let u1 = ((x >> 32) as f64 + 1.0) * (1.0 / 4_294_967_296.0);
                    let u2 = (x & 0xFFFF_FFFF) as f64 * (1.0 / 4_294_967_296.0);
                    let radius = (-2.0 * u1.ln()).sqrt();
                    let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
                    pair[0] = (mean + std * radius * c) as f32;
                    if let Some(second) = pair.get_mut(1) {
                        *second = (mean + std * radius * s) as f32;
                    }
                }
            }
        }
    }
}

/// A uniform draw in [0, 1) for probability admission: Philox with counter
/// `[key, push count, 1, 0]` and key `[seed, INIT_STREAM]`, so it is a pure function of the
/// push it decides.
pub fn admission_draw(seed: u64, key: u64, push: u64) -> f64 {
    let r = philox4x64([key, push, 1, 0], [seed, INIT_STREAM]);
    (r[0] >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers: Random123's `kat_vectors` (philox4x64 10, zeros) and NumPy's
    /// `Philox(key=[7, 123], counter=[41, 5, 0, 0]).random_raw(4)` (NumPy adds one to the
    /// counter before its first block).
    #[test]
    fn philox_gives_the_known_answers() {
        assert_eq!(
            philox4x64([0; 4], [0; 2]),
            [
                0x1655_4d9e_ca36_314c,
                0xdb20_fe9d_672d_0fdc,
                0xd7e7_72ce_e186_176b,
                0x7e68_b68a_ec7b_a23b
            ]
        );
        assert_eq!(
            philox4x64([42, 5, 0, 0], [7, 123]),
            [
                0x74c1_2974_bb97_da6b,
                0x2825_476b_db2a_e2b4,
                0x43c8_ea92_5b15_5363,
                0x221b_1162_aa14_3f84
            ]
        );
    }

    #[test]
    fn rows_depend_on_seed_and_key_only() {
        let init = Init::Normal {
            mean: 0.5,
            std: 2.0,
        };
        let row = |seed, key| {
            let mut r = vec![0.0f32; 13];
            initial_row(&init, seed, key, &mut r);
            r
        };
        assert_eq!(row(1, 77), row(1, 77));
        assert_ne!(row(1, 77), row(1, 78));
        assert_ne!(row(1, 77), row(2, 77));
        // A shorter row is the longer one's prefix.
        let mut short = vec![0.0f32; 5];
        initial_row(&init, 1, 77, &mut short);
        assert_eq!(short[..], row(1, 77)[..5]);
    }

    #[test]
    fn draws_have_the_asked_moments() {
        let n = 200_000usize;
        let mut v = vec![0.0f32; n];
        let normal = Init::Normal {
            mean: 1.0,
            std: 0.5,
        };
        for (k, chunk) in v.chunks_mut(16).enumerate() {
            initial_row(&normal, 9, k as u64, chunk);
        }
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
        assert!((var.sqrt() - 0.5).abs() < 0.01, "std {}", var.sqrt());
        let uniform = Init::Uniform {
            low: -2.0,
            high: 6.0,
        };
        for (k, chunk) in v.chunks_mut(16).enumerate() {
            initial_row(&uniform, 9, k as u64, chunk);
        }
        assert!(v.iter().all(|&x| (-2.0..6.0).contains(&x)));
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.05, "mean {mean}");
        let below = v.iter().filter(|&&x| x < 0.0).count() as f64 / n as f64;
        assert!((below - 0.25).abs() < 0.01, "P(x < 0) = {below}");
    }

    #[test]
    fn admission_draws_are_uniform_and_pure() {
        assert_eq!(admission_draw(3, 10, 4), admission_draw(3, 10, 4));
        let hits = (0..100_000u64)
            .filter(|&i| admission_draw(3, i, i / 7) < 0.3)
            .count();
        assert!((hits as f64 / 100_000.0 - 0.3).abs() < 0.01, "{hits}");
    }
}
