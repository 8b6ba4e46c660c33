//! The spec line's parser: [`TableSpec`]'s `FromStr`, one field's value at a time, and
//! [`parse_bytes`] for budgets.

use std::str::FromStr;

use super::{Admission, Eviction, Init, Optimizer, TableSpec, DEFAULT_SKETCH_WIDTH, MAX_DIM};

/// The fields a spec line has.
const FIELDS: &str = "app, dim, init, seed, opt, admit, budget, evict";

/// The error text for `field` of spec line `line`: "bad table spec 'LINE': FIELD: WHY".
fn bad(line: &str, field: &str, why: String) -> String {
    format!("bad table spec '{line}': {field}: {why}")
}

/// The fields of a spec line read so far, each parsed as it comes except `opt` and `admit`,
/// whose text is kept and parsed once every field is read (after `app` and `dim` are known to
/// be there).
struct Fields<'a> {
    /// The whole line, for error texts.
    line: &'a str,
    /// Field names given so far (each may come once).
    seen: Vec<&'a str>,
    /// `app=`, parsed.
    app: Option<i32>,
    /// `dim=`, parsed and in range.
    dim: Option<usize>,
    /// `seed=`, parsed.
    seed: Option<u64>,
    /// `opt=`'s text, parsed at the end.
    opt: Option<&'a str>,
    /// `admit=`'s text, parsed at the end.
    admit: Option<&'a str>,
    /// The defaults, with `init`, `budget` and `evict` as given.
    spec: TableSpec,
}

impl<'a> Fields<'a> {
    fn new(line: &'a str) -> Fields<'a> {
        Fields {
            line,
            seen: Vec::new(),
            app: None,
            dim: None,
            seed: None,
            opt: None,
            admit: None,
            spec: TableSpec::new(0, 1),
        }
    }

    /// Reads one `FIELD=VALUE` part of the line.
    fn take(&mut self, part: &'a str) -> Result<(), String> {
        let line = self.line;
        let Some((field, value)) = part.split_once('=') else {
            return Err(format!(
                "bad table spec '{line}': '{part}' is not FIELD=VALUE; fields: {FIELDS}"
            ));
        };
        let (field, value) = (field.trim(), value.trim());
        if self.seen.contains(&field) {
            return Err(bad(line, field, "given twice".into()));
        }
        self.seen.push(field);
        let named = |field: &'static str| move |why: String| bad(line, field, why);
        match field {
            "app" => self.app = Some(parse_app(value).map_err(named("app"))?),
            "dim" => self.dim = Some(parse_dim(value).map_err(named("dim"))?),
            "init" => self.spec.init = parse_init(value).map_err(named("init"))?,
            "seed" => self.seed = Some(parse_seed(value).map_err(named("seed"))?),
            "opt" => self.opt = Some(value),
            "admit" => self.admit = Some(value),
            "budget" => self.spec.budget = Some(parse_bytes(value).map_err(named("budget"))?),
            "evict" => self.spec.evict = parse_evict(value).map_err(named("evict"))?,
            other => {
                return Err(format!(
                    "bad table spec '{line}': unknown field '{other}'; fields: {FIELDS}"
                ))
            }
        }
        Ok(())
    }

    /// The spec from the fields read: `app` and `dim` must have come; then the optimizer and
    /// admission are parsed and the whole spec checked.
    fn finish(self) -> Result<TableSpec, String> {
        let line = self.line;
        let mut spec = self.spec;
        spec.app = self
            .app
            .ok_or_else(|| bad(line, "app", "missing: every table names its app".into()))?;
        spec.dim = self
            .dim
            .ok_or_else(|| bad(line, "dim", "missing: values per row, 1 to 1048576".into()))?;
        spec.seed = self.seed.unwrap_or(spec.app as u64);
        if let Some(t) = self.opt {
            let (o, wd) = parse_optimizer(t).map_err(|e| bad(line, "opt", e))?;
            spec.optimizer = o;
            spec.weight_decay = wd;
        }
        if let Some(t) = self.admit {
            spec.admit = parse_admit(t).map_err(|e| bad(line, "admit", e))?;
        }
        spec.validate().map_err(|e| {
            // The same check names the canonical line; name the one given instead.
            e.replacen(&format!("'{spec}'"), &format!("'{line}'"), 1)
        })?;
        Ok(spec)
    }
}

impl FromStr for TableSpec {
    type Err = String;

    /// Parses a spec line (the module's table); fields in any order, each at most once.
    fn from_str(line: &str) -> Result<TableSpec, String> {
        let mut fields = Fields::new(line);
        for part in line.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            fields.take(part)?;
        }
        fields.finish()
    }
}

fn number<T: FromStr>(text: &str, what: &str) -> Result<T, String> {
    text.trim()
        .parse::<T>()
        .map_err(|_| format!("{what} '{text}' is not a number"))
}

fn parse_app(v: &str) -> Result<i32, String> {
    v.parse::<i32>()
        .map_err(|_| format!("'{v}' is not an application id (an i32)"))
}

fn parse_dim(v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|d| (1..=MAX_DIM).contains(d))
        .ok_or_else(|| format!("'{v}': allowed: 1 to {MAX_DIM}"))
}

fn parse_seed(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| format!("'{v}' is not a whole number ≥ 0 (a u64)"))
}

fn parse_init(v: &str) -> Result<Init, String> {
    let parts: Vec<&str> = v.split(':').collect();
    match parts.as_slice() {
        ["zeros"] => Ok(Init::Zeros),
        ["uniform", a, b] => Ok(Init::Uniform {
            low: number(a, "A")?,
            high: number(b, "B")?,
        }),
        ["normal", m, s] => Ok(Init::Normal {
            mean: number(m, "MEAN")?,
            std: number(s, "STD")?,
        }),
        _ => Err(format!(
            "'{v}'; allowed: zeros, uniform:A:B, normal:MEAN:STD"
        )),
    }
}

/// The optimizer and its weight decay from `NAME[:k=v]*`.
fn parse_optimizer(v: &str) -> Result<(Optimizer, f32), String> {
    let mut parts = v.split(':');
    let name = parts.next().unwrap_or("").trim();
    let allowed = optimizer_params(name)?;
    let given = optimizer_values(name, allowed, parts)?;
    let get = |k: &str, default: f32| {
        given
            .iter()
            .find(|&&(g, _)| g == k)
            .map_or(default, |&(_, x)| x)
    };
    let opt = match name {
        "sgd" => Optimizer::Sgd {
            lr: get("lr", 0.01),
        },
        "adagrad" => Optimizer::Adagrad {
            lr: get("lr", 0.01),
            eps: get("eps", 1e-10),
            init_acc: get("init_acc", 0.0),
        },
        "adam" => Optimizer::Adam {
            lr: get("lr", 0.001),
            b1: get("b1", 0.9),
            b2: get("b2", 0.999),
            eps: get("eps", 1e-8),
        },
        _ => {
            if given.iter().any(|&(g, _)| g == "alpha") && given.iter().any(|&(g, _)| g == "lr") {
                return Err("ftrl's alpha and lr are the same step size: give one".into());
            }
            Optimizer::Ftrl {
                alpha: get("alpha", get("lr", 0.05)),
                beta: get("beta", 1.0),
                l1: get("l1", 0.0),
                l2: get("l2", 0.0),
            }
        }
    };
    Ok((opt, get("wd", 0.0)))
}

/// The parameters optimizer `name` takes (`wd` among them where it takes a weight decay).
fn optimizer_params(name: &str) -> Result<&'static [&'static str], String> {
    Ok(match name {
        "sgd" => &["lr", "wd"],
        "adagrad" => &["lr", "eps", "init_acc", "wd"],
        "adam" => &["lr", "b1", "b2", "eps", "wd"],
        "ftrl" => &["alpha", "lr", "beta", "l1", "l2"],
        _ => {
            return Err(format!(
                "unknown optimizer '{name}'; allowed: sgd, adagrad, adam, ftrl"
            ))
        }
    })
}

/// The `k=v` parameters given to optimizer `name`, in order: each one of `allowed`, at most
/// once, with a number.
fn optimizer_values<'a>(
    name: &str,
    allowed: &[&str],
    parts: impl Iterator<Item = &'a str>,
) -> Result<Vec<(&'a str, f32)>, String> {
    let mut given: Vec<(&str, f32)> = Vec::new();
    for kv in parts {
        let Some((k, x)) = kv.split_once('=') else {
            return Err(format!(
                "'{kv}' is not NAME=VALUE; {name} takes {}",
                allowed.join(", ")
            ));
        };
        let k = k.trim();
        if !allowed.contains(&k) {
            return Err(format!(
                "{name} has no '{k}'; it takes {}",
                allowed.join(", ")
            ));
        }
        if given.iter().any(|&(g, _)| g == k) {
            return Err(format!("{name}'s '{k}' given twice"));
        }
        given.push((k, number(x, k)?));
    }
    Ok(given)
}

fn parse_admit(v: &str) -> Result<Admission, String> {
    let parts: Vec<&str> = v.split(':').collect();
    match parts.as_slice() {
        ["all"] => Ok(Admission::All),
        ["count", n] | ["count", n, _] => {
            let width = match parts.get(2) {
                None => DEFAULT_SKETCH_WIDTH,
                Some(w) => {
                    let w = w
                        .strip_prefix("width=")
                        .ok_or_else(|| format!("'{w}'; allowed after count:N: width=W"))?;
                    number(w, "width")?
                }
            };
            Ok(Admission::Count {
                n: number(n, "N")?,
                width,
            })
        }
        ["prob", p] => Ok(Admission::Probability { p: number(p, "P")? }),
        _ => Err(format!("'{v}'; allowed: all, count:N[:width=W], prob:P")),
    }
}

fn parse_evict(v: &str) -> Result<Eviction, String> {
    match v.split_once(':') {
        None if v == "lru" => Ok(Eviction::Lru),
        Some(("ttl", t)) => Ok(Eviction::Ttl {
            pushes: number(t, "T")?,
        }),
        _ => Err(format!("'{v}'; allowed: lru, ttl:T (T pushes)")),
    }
}

/// Bytes from `1000`, `64KiB`, `512MiB`, `2GiB`, `1TiB`, `10MB` (10^6), `1GB`, `1TB`.
///
/// # Errors
/// A text naming the value and the forms allowed.
pub fn parse_bytes(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => u64::MAX,
    };
    let n = digits.parse::<u64>().ok();
    match n.and_then(|n| n.checked_mul(scale)).filter(|_| scale != u64::MAX) {
        Some(b) => Ok(b),
        None => Err(format!(
            "'{v}'; allowed: a whole number of bytes, or with KiB, MiB, GiB, TiB (powers of 2) or KB, MB, GB, TB (powers of 10)"
        )),
    }
}
