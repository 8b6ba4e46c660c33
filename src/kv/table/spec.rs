//! [`TableSpec`]: what an embedding table is, in one line that reads the same from every entry
//! point (`pslite-server --table`, `pslite-launch local --table`, `PS_TABLES`, Python's
//! `pslite.Table`), and its builder for Rust. The line's parser is in `spec/parse.rs`.
//!
//! ```text
//! app=0,dim=16,init=normal:0:0.01,opt=adagrad:lr=0.05,admit=count:2,budget=512MiB,evict=lru
//! ```
//!
//! | field | values | default |
//! | --- | --- | --- |
//! | `app` | the application id (ps-lite's `app_id`) the table serves, an `i32` | required |
//! | `dim` | values per row, 1 to 2^20 | required |
//! | `init` | `zeros`, `uniform:A:B` (A < B), `normal:MEAN:STD` (STD ≥ 0) | `zeros` |
//! | `seed` | the initializer's seed, a `u64` | the app id |
//! | `opt` | `sgd[:lr=X]`, `adagrad[:lr=X][:eps=X][:init_acc=X]`, `adam[:lr=X][:b1=X][:b2=X][:eps=X]`, `ftrl[:alpha=X][:beta=X][:l1=X][:l2=X]`; `:wd=X` (L2 weight decay, not with ftrl) | `sgd:lr=0.01` |
//! | `admit` | `all`, `count:N` (N from 1 to 255; `:width=W` counters per sketch row, a power of two), `prob:P` (0 < P ≤ 1) | `all` |
//! | `budget` | bytes per server: `1000000`, `64KiB`, `512MiB`, `2GiB`, `1TiB` (also `KB`, `MB`, `GB`, `TB`, powers of 10) | none (unbounded) |
//! | `evict` | `lru`, `ttl:T` (rows not pushed in the last T pushes of the table go, and LRU when full) | `lru` |

use std::fmt;

mod parse;
pub use parse::parse_bytes;

/// Largest `dim` a table takes (values per row).
pub const MAX_DIM: usize = 1 << 20;

/// How a row that the table does not hold starts: computed from (table seed, key) by a
/// counter-based generator (Philox4x64-10, Salmon et al. 2011), so every server, restart,
/// replacement and eviction gives a key the same initial row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// All values 0.
    Zeros,
    /// Uniform on `[low, high)`.
    Uniform {
        /// Lower bound.
        low: f32,
        /// Upper bound, > `low`.
        high: f32,
    },
    /// Normal (Box–Muller) with this mean and standard deviation.
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation, ≥ 0.
        std: f32,
    },
}

/// The update rule a push's gradients go through, one step per push and key. Each keeps its
/// slots (state) beside the row; formulas per value, with `g` the pushed gradient plus
/// `wd · w` where a weight decay is set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// `w -= lr · g`. No slots.
    Sgd {
        /// Step size, > 0.
        lr: f32,
    },
    /// AdaGrad (Duchi et al. 2011), as PyTorch's: `acc += g²; w -= lr · g / (√acc + eps)`.
    /// One slot per value (`acc`, starting at `init_acc`).
    Adagrad {
        /// Step size, > 0.
        lr: f32,
        /// Added to `√acc`, ≥ 0 (PyTorch's default 1e-10).
        eps: f32,
        /// `acc`'s starting value, ≥ 0 (TensorFlow's default is 0.1, PyTorch's 0).
        init_acc: f32,
    },
    /// Adam (Kingma & Ba 2015) with a step count per row, as sparse ("lazy") Adam:
    /// `t += 1; m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
    /// w -= lr · (m / (1 − b1^t)) / (√(v / (1 − b2^t)) + eps)`. Two slots per value (`m`, `v`)
    /// and one per row (`t`).
    Adam {
        /// Step size, > 0.
        lr: f32,
        /// First moment's decay, in [0, 1).
        b1: f32,
        /// Second moment's decay, in [0, 1).
        b2: f32,
        /// Added to the second moment's root, > 0.
        eps: f32,
    },
    /// FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction: a View from the Trenches",
    /// Algorithm 1), per value: `σ = (√(n + g²) − √n) / alpha; z += g − σ·w; n += g²;
    /// w = 0 if |z| ≤ l1, else −(z − sgn(z)·l1) / ((beta + √n) / alpha + l2)`. Two slots per
    /// value (`z`, `n`). The weight follows from `z` and `n` alone, so a row's initial values
    /// last until its first push.
    Ftrl {
        /// Step size α, > 0.
        alpha: f32,
        /// β, ≥ 0.
        beta: f32,
        /// L1 strength λ1, ≥ 0.
        l1: f32,
        /// L2 strength λ2, ≥ 0.
        l2: f32,
    },
}

impl Optimizer {
    /// The rule's name in a spec: `sgd`, `adagrad`, `adam`, `ftrl`.
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Adagrad { .. } => "adagrad",
            Optimizer::Adam { .. } => "adam",
            Optimizer::Ftrl { .. } => "ftrl",
        }
    }

    /// `f32` slots a row of `dim` values keeps beside it (Adam's step count is one of them,
    /// held as a `u32`).
    pub fn slot_values(&self, dim: usize) -> usize {
        match self {
            Optimizer::Sgd { .. } => 0,
            Optimizer::Adagrad { .. } => dim,
            Optimizer::Adam { .. } => 2 * dim + 1,
            Optimizer::Ftrl { .. } => 2 * dim,
        }
    }
}

/// When a key not held gets a row. Until then its pulls get the initial row and its pushes
/// are counted and dropped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// At its first push.
    All,
    /// At its `n`-th push, counted by a count-min sketch (Cormode & Muthukrishnan 2005, with
    /// conservative update; Monolith's occurrence threshold): 4 rows of `width` 8-bit counters.
    /// A sketch overcounts (a key may be admitted early), and its counts halve every `width`
    /// counted pushes (TinyLFU's reset), so a key must reach `n` pushes within about that
    /// many pushes of keys not admitted.
    Count {
        /// Pushes a key needs, 1 to 255.
        n: u32,
        /// Counters per sketch row, a power of two.
        width: usize,
    },
    /// Each push of a key not held admits it with probability `p` (Persia's admit
    /// probability), decided by a hash of (seed, key, the table's push count): the same on a
    /// replay of the same pushes.
    Probability {
        /// In (0, 1].
        p: f64,
    },
}

/// Counters per count-min row unless `admit=count:N:width=W` says otherwise (4 MiB for 4 rows).
pub const DEFAULT_SKETCH_WIDTH: usize = 1 << 20;

/// Which rows go when the budget is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// The least recently pushed rows (a row's recency is the table's push count when it was
    /// last pushed; pulls do not count, so a replay of the logged pushes gives the same order).
    Lru,
    /// Rows not pushed in the last `pushes` pushes of the table, checked every `pushes / 8`
    /// pushes; LRU too when the budget is full.
    Ttl {
        /// The time to live, in pushes of this table (requests, not keys), ≥ 1.
        pushes: u64,
    },
}

/// An embedding table: rows of `dim` `f32` values per `u64` key, served as application `app`.
/// Parse one from a spec line (`"app=0,dim=16,opt=adagrad:lr=0.05".parse()`; its `Display` is
/// the canonical line) or build one:
///
/// ```
/// use pslite::kv::table::{Init, Optimizer, TableSpec};
/// let spec = TableSpec::new(0, 16)
///     .init(Init::Normal { mean: 0.0, std: 0.01 })
///     .optimizer(Optimizer::Adagrad { lr: 0.05, eps: 1e-10, init_acc: 0.0 })
///     .budget(512 << 20);
/// assert_eq!(spec.to_string(), "app=0,dim=16,init=normal:0:0.01,seed=0,opt=adagrad:lr=0.05:eps=0.0000000001:init_acc=0,admit=all,budget=512MiB,evict=lru");
/// assert_eq!(spec.to_string().parse::<TableSpec>(), Ok(spec));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    /// The application id whose `f32` requests the table answers.
    pub app: i32,
    /// Values per row, 1 to [`MAX_DIM`].
    pub dim: usize,
    /// Initial rows.
    pub init: Init,
    /// The initializer's (and probability admission's) seed.
    pub seed: u64,
    /// The update rule.
    pub optimizer: Optimizer,
    /// L2 weight decay `wd` (`g += wd · w` before the step), ≥ 0; not with FTRL (use its `l2`).
    pub weight_decay: f32,
    /// When a key gets a row.
    pub admit: Admission,
    /// Bytes this table may hold on one server (rows, slots, index, sketch), `None`: no limit.
    pub budget: Option<u64>,
    /// Which rows go when the budget is full.
    pub evict: Eviction,
}

impl TableSpec {
    /// A table of `dim` values per row for application `app`: zeros, seed `app`, SGD with
    /// lr 0.01, every key admitted, no budget, LRU.
    pub fn new(app: i32, dim: usize) -> TableSpec {
        TableSpec {
            app,
            dim,
            init: Init::Zeros,
            seed: app as u64,
            optimizer: Optimizer::Sgd { lr: 0.01 },
            weight_decay: 0.0,
            admit: Admission::All,
            budget: None,
            evict: Eviction::Lru,
        }
    }

    /// With initial rows `init`.
    #[must_use]
    pub fn init(mut self, init: Init) -> TableSpec {
        self.init = init;
        self
    }

    /// With seed `seed`.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> TableSpec {
        self.seed = seed;
        self
    }

    /// With update rule `optimizer`.
    #[must_use]
    pub fn optimizer(mut self, optimizer: Optimizer) -> TableSpec {
        self.optimizer = optimizer;
        self
    }

    /// With L2 weight decay `wd`.
    #[must_use]
    pub fn weight_decay(mut self, wd: f32) -> TableSpec {
        self.weight_decay = wd;
        self
    }

    /// With admission `admit`.
    #[must_use]
    pub fn admit(mut self, admit: Admission) -> TableSpec {
        self.admit = admit;
        self
    }

    /// With a budget of `bytes` per server.
    #[must_use]
    pub fn budget(mut self, bytes: u64) -> TableSpec {
        self.budget = Some(bytes);
        self
    }

    /// With eviction `evict`.
    #[must_use]
    pub fn evict(mut self, evict: Eviction) -> TableSpec {
        self.evict = evict;
        self
    }

    /// Checks every field's range (the parser checks the same).
    ///
    /// # Errors
    /// "bad table spec 'LINE': FIELD: what is wrong; allowed: …".
    pub fn validate(&self) -> Result<(), String> {
        self.check_fields()
            .map_err(|(field, why)| format!("bad table spec '{self}': {field}: {why}"))
    }

    /// The first field out of its range, as (field, what is wrong; allowed: …).
    fn check_fields(&self) -> Result<(), (&'static str, String)> {
        if self.dim == 0 || self.dim > MAX_DIM {
            return Err((
                "dim",
                format!("{} is out of range; allowed: 1 to {MAX_DIM}", self.dim),
            ));
        }
        check_init(self.init).map_err(|why| ("init", why))?;
        check_optimizer(&self.optimizer, self.weight_decay).map_err(|why| ("opt", why))?;
        check_admission(self.admit).map_err(|why| ("admit", why))?;
        if let Eviction::Ttl { pushes: 0 } = self.evict {
            return Err(("evict", "ttl:0: allowed: ttl:T with T ≥ 1 pushes".into()));
        }
        Ok(())
    }
}

/// Whether `v` is finite and > 0.
fn positive(v: f32) -> bool {
    v.is_finite() && v > 0.0
}

/// Whether `v` is finite and ≥ 0.
fn non_negative(v: f32) -> bool {
    v.is_finite() && v >= 0.0
}

/// Whether `v` is in [0, 1).
fn fraction(v: f32) -> bool {
    v.is_finite() && (0.0..1.0).contains(&v)
}

/// Checks an initializer's parameters; the error says what is wrong.
fn check_init(init: Init) -> Result<(), String> {
    match init {
        Init::Zeros => {}
        Init::Uniform { low, high } => {
            if !(low.is_finite() && high.is_finite() && low < high && (high - low).is_finite()) {
                return Err(format!("uniform:{low}:{high} needs finite bounds A < B"));
            }
        }
        Init::Normal { mean, std } => {
            if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
                return Err(format!(
                    "normal:{mean}:{std} needs a finite mean and STD ≥ 0"
                ));
            }
        }
    }
    Ok(())
}

/// Checks an optimizer's parameters and weight decay `wd`: each in its range, no step that
/// divides by 0, and no `wd` with FTRL; the error says what is wrong.
fn check_optimizer(opt: &Optimizer, wd: f32) -> Result<(), String> {
    let ok = match *opt {
        Optimizer::Sgd { lr } => positive(lr),
        Optimizer::Adagrad { lr, eps, init_acc } => {
            positive(lr) && non_negative(eps) && non_negative(init_acc)
        }
        Optimizer::Adam { lr, b1, b2, eps } => {
            positive(lr) && fraction(b1) && fraction(b2) && positive(eps)
        }
        Optimizer::Ftrl {
            alpha,
            beta,
            l1,
            l2,
        } => positive(alpha) && non_negative(beta) && non_negative(l1) && non_negative(l2),
    };
    if !ok {
        return Err(format!(
            "{} is out of range; allowed: lr, alpha, eps (adam) > 0; b1, b2 in [0, 1); eps (adagrad), init_acc, beta, l1, l2 ≥ 0",
            OptText(opt, wd)
        ));
    }
    match *opt {
        Optimizer::Adagrad { eps, init_acc, .. } if eps == 0.0 && init_acc == 0.0 => {
            return Err(
                "adagrad with eps=0 and init_acc=0 divides 0 by 0 at a zero gradient: give eps > 0 or init_acc > 0".into(),
            );
        }
        Optimizer::Ftrl { beta, l2, .. } if beta == 0.0 && l2 == 0.0 => {
            return Err(
                "ftrl with beta=0 and l2=0 divides by 0 before a row's first gradient: give beta > 0 or l2 > 0".into(),
            );
        }
        _ => {}
    }
    if !non_negative(wd) {
        return Err(format!("wd={wd} must be ≥ 0"));
    }
    if wd != 0.0 && matches!(opt, Optimizer::Ftrl { .. }) {
        return Err("ftrl takes no wd: use its l2".into());
    }
    Ok(())
}

/// Checks admission's parameters; the error says what is wrong and what is allowed.
fn check_admission(admit: Admission) -> Result<(), String> {
    match admit {
        Admission::All => {}
        Admission::Count { n, width } => {
            if !(1..=255).contains(&n) {
                return Err(format!("count:{n}: allowed: 1 to 255 pushes"));
            }
            if !width.is_power_of_two() || !(64..=1 << 32).contains(&width) {
                return Err(format!(
                    "width={width}: allowed: a power of two from 64 to 2^32"
                ));
            }
        }
        Admission::Probability { p } => {
            if !(p > 0.0 && p <= 1.0) {
                return Err(format!("prob:{p}: allowed: 0 < P ≤ 1"));
            }
        }
    }
    Ok(())
}

/// `bytes` in the largest binary unit that divides it (`512MiB`), else in bytes.
pub fn bytes_text(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// An optimizer and its weight decay as a spec's `opt=` value.
struct OptText<'a>(&'a Optimizer, f32);

impl fmt::Display for OptText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.0 {
            Optimizer::Sgd { lr } => write!(f, "sgd:lr={lr}")?,
            Optimizer::Adagrad { lr, eps, init_acc } => {
                write!(f, "adagrad:lr={lr}:eps={eps}:init_acc={init_acc}")?
            }
            Optimizer::Adam { lr, b1, b2, eps } => {
                write!(f, "adam:lr={lr}:b1={b1}:b2={b2}:eps={eps}")?
            }
            Optimizer::Ftrl {
                alpha,
                beta,
                l1,
                l2,
            } => write!(f, "ftrl:alpha={alpha}:beta={beta}:l1={l1}:l2={l2}")?,
        }
        if self.1 != 0.0 {
            write!(f, ":wd={}", self.1)?;
        }
        Ok(())
    }
}

impl fmt::Display for Init {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Init::Zeros => write!(f, "zeros"),
            Init::Uniform { low, high } => write!(f, "uniform:{low}:{high}"),
            Init::Normal { mean, std } => write!(f, "normal:{mean}:{std}"),
        }
    }
}

impl fmt::Display for TableSpec {
    /// The canonical spec line: every field, in the module table's order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "app={},dim={},init={},seed={},opt={},admit=",
            self.app,
            self.dim,
            self.init,
            self.seed,
            OptText(&self.optimizer, self.weight_decay)
        )?;
        match self.admit {
            Admission::All => write!(f, "all")?,
            Admission::Count { n, width } if width == DEFAULT_SKETCH_WIDTH => {
                write!(f, "count:{n}")?
            }
            Admission::Count { n, width } => write!(f, "count:{n}:width={width}")?,
            Admission::Probability { p } => write!(f, "prob:{p}")?,
        }
        if let Some(b) = self.budget {
            write!(f, ",budget={}", bytes_text(b))?;
        }
        match self.evict {
            Eviction::Lru => write!(f, ",evict=lru"),
            Eviction::Ttl { pushes } => write!(f, ",evict=ttl:{pushes}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_s_line_parses_and_prints_back() {
        let s: TableSpec =
            "app=0,dim=16,init=normal:0:0.01,opt=adagrad:lr=0.05,admit=count:2,budget=512MiB,evict=lru"
                .parse()
                .expect("parses");
        assert_eq!(s.app, 0);
        assert_eq!(s.dim, 16);
        assert_eq!(
            s.init,
            Init::Normal {
                mean: 0.0,
                std: 0.01
            }
        );
        assert_eq!(
            s.optimizer,
            Optimizer::Adagrad {
                lr: 0.05,
                eps: 1e-10,
                init_acc: 0.0
            }
        );
        assert_eq!(
            s.admit,
            Admission::Count {
                n: 2,
                width: DEFAULT_SKETCH_WIDTH
            }
        );
        assert_eq!(s.budget, Some(512 << 20));
        assert_eq!(s.evict, Eviction::Lru);
        assert_eq!(s.seed, 0);
        assert_eq!(s.to_string().parse::<TableSpec>(), Ok(s));
    }

    #[test]
    fn every_form_round_trips() {
        for line in [
            "app=3,dim=1",
            "app=-2,dim=8,init=uniform:-0.5:0.5,seed=99,opt=sgd:lr=0.1:wd=0.001",
            "app=1,dim=4,opt=adam:lr=0.002:b1=0.8:b2=0.99:eps=0.000001,admit=prob:0.25",
            "app=1,dim=4,opt=ftrl:alpha=0.1:beta=1:l1=0.5:l2=2,admit=count:5:width=1024,budget=1000,evict=ttl:100",
        ] {
            let s: TableSpec = line.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            let back: TableSpec = s.to_string().parse().expect("canonical line parses");
            assert_eq!(back, s, "{line} → {s}");
        }
    }

    /// Asserts that each line fails to parse with an error that names the line and holds
    /// its wanted text.
    fn assert_bad(cases: &[(&str, &str)]) {
        for &(line, want) in cases {
            let e = line.parse::<TableSpec>().expect_err(line);
            assert!(e.starts_with(&format!("bad table spec '{line}': ")), "{e}");
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn bad_lines_name_the_field_and_what_is_allowed() {
        assert_bad(&[
            ("dim=4", "app: missing"),
            ("app=0", "dim: missing"),
            ("app=0,dim=0", "dim: '0': allowed: 1 to 1048576"),
            ("app=x,dim=4", "app: 'x' is not an application id"),
            (
                "app=0,dim=4,colour=red",
                "unknown field 'colour'; fields: app, dim",
            ),
            ("app=0,dim=4,dim=5", "dim: given twice"),
            ("app=0,dim=4,junk", "'junk' is not FIELD=VALUE"),
        ]);
    }

    #[test]
    fn bad_inits_name_what_is_allowed() {
        assert_bad(&[
            (
                "app=0,dim=4,init=gauss",
                "init: 'gauss'; allowed: zeros, uniform:A:B",
            ),
            (
                "app=0,dim=4,init=uniform:1:1",
                "init: uniform:1:1 needs finite bounds A < B",
            ),
            (
                "app=0,dim=4,init=uniform:-3e38:3e38",
                "needs finite bounds A < B",
            ),
        ]);
    }

    #[test]
    fn bad_optimizers_name_what_is_allowed() {
        assert_bad(&[
            (
                "app=0,dim=4,opt=rmsprop",
                "opt: unknown optimizer 'rmsprop'; allowed: sgd",
            ),
            (
                "app=0,dim=4,opt=sgd:beta=1",
                "opt: sgd has no 'beta'; it takes lr, wd",
            ),
            (
                "app=0,dim=4,opt=sgd:lr=-1",
                "opt: sgd:lr=-1 is out of range",
            ),
            ("app=0,dim=4,opt=adam:b1=1", "opt: adam:lr=0.001:b1=1"),
            (
                "app=0,dim=4,opt=ftrl:alpha=1:lr=1",
                "alpha and lr are the same",
            ),
            (
                "app=0,dim=4,opt=adagrad:eps=0",
                "adagrad with eps=0 and init_acc=0 divides 0 by 0",
            ),
            (
                "app=0,dim=4,opt=ftrl:beta=0",
                "ftrl with beta=0 and l2=0 divides by 0",
            ),
        ]);
    }

    #[test]
    fn bad_admissions_name_what_is_allowed() {
        assert_bad(&[
            (
                "app=0,dim=4,admit=count:0",
                "admit: count:0: allowed: 1 to 255",
            ),
            (
                "app=0,dim=4,admit=count:2:width=1000",
                "width=1000: allowed: a power of two",
            ),
            (
                "app=0,dim=4,admit=prob:1.5",
                "admit: prob:1.5: allowed: 0 < P ≤ 1",
            ),
            (
                "app=0,dim=4,admit=maybe",
                "admit: 'maybe'; allowed: all, count:N",
            ),
        ]);
    }

    #[test]
    fn bad_budgets_and_evictions_name_what_is_allowed() {
        assert_bad(&[
            (
                "app=0,dim=4,budget=12XB",
                "budget: '12XB'; allowed: a whole number of bytes",
            ),
            (
                "app=0,dim=4,evict=fifo",
                "evict: 'fifo'; allowed: lru, ttl:T",
            ),
            (
                "app=0,dim=4,evict=ttl:0",
                "ttl:0: allowed: ttl:T with T ≥ 1",
            ),
        ]);
    }

    #[test]
    fn byte_units() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
        assert_eq!(bytes_text(512 << 20), "512MiB");
        assert_eq!(bytes_text(1000), "1000");
    }
}
