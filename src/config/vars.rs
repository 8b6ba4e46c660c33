//! The one reader of environment variables, used by [`crate::config::Config`] and
//! [`crate::van::rdma::RdmaConfig`].
//!
//! A [`Vars`] reads variables through a lookup function (the process environment, or a map in
//! tests). A variable may have a command-line flag whose value, when given, replaces it. Values
//! are trimmed before they are parsed or matched. Every error is an [`Error::Config`] that names
//! the variable (and its flag), the value given and the expected form:
//!
//! - missing: `DMLC_NUM_SERVER is not set (nor --num-servers given): expected a whole number ≥ 1`
//! - malformed, with a flag: `DMLC_NUM_SERVER (or --num-servers) is "two": expected …`
//! - malformed, without one: `RDMA_QP_SL is "8": expected a whole number from 0 to 7`

use crate::error::{Error, Result};
use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

/// The form [`Vars::seconds`] expects.
const SECONDS: &str = "a number of seconds > 0, e.g. 60 or 0.5";

/// A flag that can replace a variable: its name (`--root-port`) and its value, if given.
struct Flag<'a> {
    var: &'static str,
    name: &'static str,
    value: Option<&'a str>,
}

/// Reads variables through `lookup`, each one replaced by its flag's value when that is given.
pub(crate) struct Vars<'a, F> {
    lookup: F,
    flags: Vec<Flag<'a>>,
}

impl<'a, F: Fn(&str) -> Option<String>> Vars<'a, F> {
    /// A reader of the variables `lookup` returns, with no flags.
    pub(crate) fn new(lookup: F) -> Self {
        Vars {
            lookup,
            flags: Vec::new(),
        }
    }

    /// Adds the flag `name` (e.g. `--root-port`) to `var`: its `value`, when `Some`, replaces the
    /// variable, and errors about `var` name the flag too.
    pub(crate) fn with_flag(
        mut self,
        var: &'static str,
        name: &'static str,
        value: Option<&'a str>,
    ) -> Self {
        self.flags.push(Flag { var, name, value });
        self
    }

    fn flag_of(&self, var: &str) -> Option<&Flag<'a>> {
        self.flags.iter().find(|f| f.var == var)
    }

    /// The value of `var` as given (untrimmed): its flag's value if given, else the variable's;
    /// `None` when neither is set.
    pub(crate) fn raw(&self, var: &str) -> Option<String> {
        match self.flag_of(var).and_then(|f| f.value) {
            Some(v) => Some(v.to_string()),
            None => (self.lookup)(var),
        }
    }

    /// The value of `var` as given (untrimmed).
    ///
    /// # Errors
    /// When it is not set: `VAR is not set (nor --flag given): expected <expected>`.
    pub(crate) fn required(&self, var: &str, expected: &str) -> Result<String> {
        self.raw(var).ok_or_else(|| {
            Error::Config(match self.flag_of(var) {
                Some(f) => format!(
                    "{var} is not set (nor {} given): expected {expected}",
                    f.name
                ),
                None => format!("{var} is not set: expected {expected}"),
            })
        })
    }

    /// The error for `var` given as `value` when `expected` was expected:
    /// `VAR (or --flag) is "value": expected <expected>` (without the flag when `var` has none).
    pub(crate) fn invalid(&self, var: &str, value: &str, expected: &str) -> Error {
        Error::Config(match self.flag_of(var) {
            Some(f) => format!("{var} (or {}) is {value:?}: expected {expected}", f.name),
            None => format!("{var} is {value:?}: expected {expected}"),
        })
    }

    /// Parses the trimmed `value` of `var` as a `T` that `accept` takes.
    fn parse<T: FromStr>(
        &self,
        var: &str,
        value: &str,
        expected: &str,
        accept: impl Fn(&T) -> bool,
    ) -> Result<T> {
        match value.trim().parse::<T>() {
            Ok(v) if accept(&v) => Ok(v),
            _ => Err(self.invalid(var, value, expected)),
        }
    }

    /// `var` parsed as a `T` that `accept` takes; `None` when it is not set.
    ///
    /// # Errors
    /// When it does not parse or `accept` refuses it (see [`Vars::invalid`]).
    pub(crate) fn parsed<T: FromStr>(
        &self,
        var: &str,
        expected: &str,
        accept: impl Fn(&T) -> bool,
    ) -> Result<Option<T>> {
        self.raw(var)
            .map(|s| self.parse(var, &s, expected, accept))
            .transpose()
    }

    /// As [`Vars::parsed`], for a variable that must be set.
    ///
    /// # Errors
    /// As [`Vars::required`] and [`Vars::parsed`].
    pub(crate) fn required_parsed<T: FromStr>(
        &self,
        var: &str,
        expected: &str,
        accept: impl Fn(&T) -> bool,
    ) -> Result<T> {
        let s = self.required(var, expected)?;
        self.parse(var, &s, expected, accept)
    }

    /// `var` as a whole number from `lo` to `hi` (both included); `None` when it is not set.
    ///
    /// # Errors
    /// `VAR is "value": expected a whole number from <lo> to <hi>`.
    pub(crate) fn ranged<T: FromStr + PartialOrd + Display>(
        &self,
        var: &str,
        lo: T,
        hi: T,
    ) -> Result<Option<T>> {
        let expected = format!("a whole number from {lo} to {hi}");
        self.parsed(var, &expected, |v: &T| *v >= lo && *v <= hi)
    }

    /// `var` as a duration in seconds, fractions allowed, more than 0 and less than 10⁹;
    /// `None` when it is not set.
    ///
    /// # Errors
    /// `VAR is "value": expected a number of seconds > 0, e.g. 60 or 0.5`.
    pub(crate) fn seconds(&self, var: &str) -> Result<Option<Duration>> {
        let secs = self.parsed(var, SECONDS, |v: &f64| {
            *v > 0.0 && v.is_finite() && *v < 1e9
        })?;
        Ok(secs.map(Duration::from_secs_f64))
    }

    /// The value of `options` whose name is `var`'s trimmed value; `None` when it is not set.
    ///
    /// # Errors
    /// When no option has that name: `VAR is "value": expected <expected>`.
    pub(crate) fn choice<T: Copy>(
        &self,
        var: &str,
        options: &[(&str, T)],
        expected: &str,
    ) -> Result<Option<T>> {
        let Some(s) = self.raw(var) else {
            return Ok(None);
        };
        match options.iter().find(|(name, _)| *name == s.trim()) {
            Some(&(_, v)) => Ok(Some(v)),
            None => Err(self.invalid(var, &s, expected)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn text<T: std::fmt::Debug>(r: Result<T>) -> String {
        r.expect_err("an error").to_string()
    }

    #[test]
    fn missing_values_name_the_variable_and_its_flag() {
        let m = map(&[]);
        let v = Vars::new(|k| m.get(k).cloned()).with_flag("A", "--a", None);
        assert_eq!(
            text(v.required("A", "a thing")),
            "A is not set (nor --a given): expected a thing"
        );
        assert_eq!(
            text(v.required_parsed::<u8>("B", "a byte", |_| true)),
            "B is not set: expected a byte"
        );
        assert_eq!(v.raw("A"), None);
        assert_eq!(
            v.parsed::<u8>("A", "a byte", |_| true).expect("unset"),
            None
        );
        assert_eq!(v.ranged("B", 0u8, 7).expect("unset"), None);
        assert_eq!(v.seconds("B").expect("unset"), None);
        assert_eq!(v.choice("B", &[("x", 1)], "x").expect("unset"), None);
    }

    #[test]
    fn a_flag_replaces_its_variable_and_is_named_in_errors() {
        let m = map(&[("A", "1"), ("B", "2")]);
        let v = Vars::new(|k| m.get(k).cloned())
            .with_flag("A", "--a", Some(" 9 "))
            .with_flag("B", "--b", None);
        assert_eq!(v.raw("A").as_deref(), Some(" 9 "));
        assert_eq!(v.ranged("A", 0u8, 9).expect("valid"), Some(9));
        assert_eq!(v.ranged("B", 0u8, 9).expect("valid"), Some(2));
        assert_eq!(
            text(v.ranged("A", 0u8, 7)),
            "A (or --a) is \" 9 \": expected a whole number from 0 to 7"
        );
        assert_eq!(
            v.invalid("B", "x", "y").to_string(),
            "B (or --b) is \"x\": expected y"
        );
    }

    #[test]
    fn bad_values_name_the_variable_the_value_and_the_form() {
        let m = map(&[("S", "-1"), ("C", " tcp "), ("P", "0")]);
        let v = Vars::new(|k| m.get(k).cloned());
        assert_eq!(
            text(v.seconds("S")),
            "S is \"-1\": expected a number of seconds > 0, e.g. 60 or 0.5"
        );
        assert_eq!(
            text(v.choice("C", &[("zmq", 0)], "zmq")),
            "C is \" tcp \": expected zmq"
        );
        assert_eq!(
            text(v.required_parsed::<u16>("P", "a port", |&p| p > 0)),
            "P is \"0\": expected a port"
        );
    }

    #[test]
    fn choices_match_the_trimmed_value() {
        let m = map(&[("A", " rdma "), ("E", "")]);
        let v = Vars::new(|k| m.get(k).cloned());
        let opts = [("zmq", 0), ("", 0), ("rdma", 1)];
        assert_eq!(v.choice("A", &opts, "-").expect("valid"), Some(1));
        assert_eq!(v.choice("E", &opts, "-").expect("valid"), Some(0));
    }

    proptest! {
        /// `ranged` takes exactly the whole numbers from `lo` to `hi`, and says so otherwise.
        #[test]
        fn ranged_takes_exactly_its_range(lo in 0i64..100, span in 0i64..100, x in -50i64..250) {
            let hi = lo + span;
            let s = x.to_string();
            let v = Vars::new(|_: &str| Some(s.clone()));
            match v.ranged("X", lo, hi) {
                Ok(got) => prop_assert!(got == Some(x) && (lo..=hi).contains(&x)),
                Err(e) => {
                    prop_assert!(!(lo..=hi).contains(&x));
                    prop_assert_eq!(
                        e.to_string(),
                        format!("X is \"{x}\": expected a whole number from {lo} to {hi}")
                    );
                }
            }
        }

        /// Anything that is not a number is refused with the value quoted.
        #[test]
        fn text_is_not_a_number(s in "[a-z ]{1,8}") {
            let v = Vars::new(|_: &str| Some(s.clone()));
            let e = v.ranged("X", 0u32, 10).expect_err("not a number").to_string();
            prop_assert_eq!(e, format!("X is {s:?}: expected a whole number from 0 to 10"));
            prop_assert!(v.seconds("X").is_err());
        }

        /// Seconds: any finite positive number below 10⁹, as a `Duration`.
        #[test]
        fn seconds_are_positive_and_finite(x in -10.0f64..2e9) {
            let s = x.to_string();
            let v = Vars::new(|_: &str| Some(s.clone()));
            match v.seconds("T") {
                Ok(d) => prop_assert!(x > 0.0 && x < 1e9 && d == Some(Duration::from_secs_f64(x))),
                Err(_) => prop_assert!(x <= 0.0 || x >= 1e9),
            }
        }
    }
}
