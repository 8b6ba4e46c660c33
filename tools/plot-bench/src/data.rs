//! Reading `bench --json` records and grouping them: pure functions, no drawing.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// The fields of one `bench --json` line that the plots use; unknown fields are ignored.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Record {
    /// "zmq" or "rdma" (any name is accepted and drawn as given).
    pub van: String,
    /// "push", "pull", "push-pull" or "push-then-pull" (any name is accepted).
    pub mode: String,
    /// Worker rank.
    pub worker: u64,
    /// Bytes per value.
    pub len: u64,
    /// `None` for one key per request; records with a value are left out of the plots.
    #[serde(default)]
    pub keys_per_request: Option<u64>,
    /// Pulls went through the rendezvous (`--zero-copy`).
    pub zero_copy: bool,
    /// Goodput, Gbit/s.
    pub goodput_gbps: f64,
    /// Median request latency, ms (checked, not drawn: the CDF shows it).
    pub p50_ms: f64,
    /// 99th percentile request latency, ms (checked, not drawn: the CDF shows it).
    pub p99_ms: f64,
    /// Requests completed.
    pub requests: u64,
    /// `[quantile, ms]` pairs, quantile ascending from 0.0 to 1.0; empty (bench writes none)
    /// for a run without a measured request: such a run has no CDF.
    pub latency_ms_quantiles: Vec<(f64, f64)>,
    /// JSON field `where`: where the run ran ("loopback", "Soft-RoCE guest", …), added by
    /// `scripts/plot-bench-sweep.sh` when PLOT_BENCH_WHERE is set; absent in older records.
    #[serde(default, rename = "where")]
    pub place: Option<String>,
}

/// What went wrong with the input, with the line it was on.
#[derive(Debug, PartialEq)]
pub enum InputError {
    /// Line `line` (1-based) is not a record: `what` says why.
    Line { line: usize, what: String },
    /// The input holds no record at all (only blank lines, or nothing).
    NoRecords,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Line { line, what } => write!(f, "line {line}: {what}"),
            InputError::NoRecords => write!(f, "no records (the file is empty or blank)"),
        }
    }
}

/// Parses JSON Lines: one record per non-blank line. Every record is checked (see [`check`]);
/// the first bad line is the error.
pub fn parse(text: &str) -> Result<Vec<Record>, InputError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let rec: Record = serde_json::from_str(raw).map_err(|e| InputError::Line {
            line,
            what: json_error(&e),
        })?;
        check(&rec).map_err(|what| InputError::Line { line, what })?;
        out.push(rec);
    }
    if out.is_empty() {
        return Err(InputError::NoRecords);
    }
    Ok(out)
}

/// serde_json's message with "at line 1 column N" (always line 1 here) as "(column N)".
fn json_error(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let msg = match msg.rsplit_once(" at line ") {
        Some((head, _)) => head.to_string(),
        None => msg,
    };
    let kind = match e.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "not JSON: ",
        _ => "",
    };
    format!("{kind}{msg} (column {})", e.column())
}

/// The checks serde's types cannot make: sizes positive, figures finite, the quantiles a
/// distribution (ascending quantiles in 0..=1, latencies finite, non-negative, non-decreasing)
/// or empty.
pub fn check(r: &Record) -> Result<(), String> {
    if r.len == 0 {
        return Err("\"len\" is 0 (a log axis needs positive sizes)".into());
    }
    for (name, v) in [
        ("goodput_gbps", r.goodput_gbps),
        ("p50_ms", r.p50_ms),
        ("p99_ms", r.p99_ms),
    ] {
        if !v.is_finite() || v < 0.0 {
            return Err(format!("\"{name}\" is {v}: expected a finite number >= 0"));
        }
    }
    let q = &r.latency_ms_quantiles;
    let mut prev = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (i, &(p, ms)) in q.iter().enumerate() {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!(
                "\"latency_ms_quantiles\"[{i}]: quantile {p} is outside 0..1"
            ));
        }
        if !ms.is_finite() || ms < 0.0 {
            return Err(format!(
                "\"latency_ms_quantiles\"[{i}]: latency {ms} ms is not a finite number >= 0"
            ));
        }
        if p <= prev.0 {
            return Err(format!(
                "\"latency_ms_quantiles\"[{i}]: quantile {p} does not ascend (after {})",
                prev.0
            ));
        }
        if ms < prev.1 {
            return Err(format!(
                "\"latency_ms_quantiles\"[{i}]: latency {ms} ms at quantile {p} is below {} ms \
                 at the quantile before",
                prev.1
            ));
        }
        prev = (p, ms);
    }
    Ok(())
}

/// One line of the goodput plot: a van, a mode, whether pulls were zero-copy, and where the
/// runs ran (the record's `where`, if any). Ordered by (van, mode, zero-copy) first, so the
/// lines of one van and mode from different places sit together in the legends.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub van: String,
    pub mode: String,
    pub zero_copy: bool,
    pub place: Option<String>,
}

impl SeriesKey {
    pub fn of(r: &Record) -> Self {
        SeriesKey {
            van: r.van.clone(),
            mode: r.mode.clone(),
            zero_copy: r.zero_copy,
            place: r.place.clone(),
        }
    }

    /// The (van, mode, zero-copy) part: what picks a line's hue.
    pub fn kind(&self) -> (&str, &str, bool) {
        (&self.van, &self.mode, self.zero_copy)
    }

    /// "zmq pull zero-copy{extra}, loopback": `extra` (e.g. " 4096 B") goes before the place;
    /// no place, no ", …".
    pub fn label(&self, extra: &str) -> String {
        let zc = if self.zero_copy { " zero-copy" } else { "" };
        let mut s = format!("{} {}{zc}{extra}", self.van, self.mode);
        if let Some(p) = &self.place {
            s.push_str(", ");
            s.push_str(p);
        }
        s
    }
}

impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label(""))
    }
}

/// The distinct places (`where`, `None` for records without one) in order of first appearance:
/// the first is drawn with solid lines, the others dashed (see `draw.rs`).
pub fn places(records: &[&Record]) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = Vec::new();
    for r in records {
        if !out.contains(&r.place) {
            out.push(r.place.clone());
        }
    }
    out
}

/// Splits the records into the one-key ones the plots draw and the number left out
/// (`keys_per_request` set: their goodput and latency count many keys per request, so they
/// are not comparable with the rest).
pub fn one_key(records: &[Record]) -> (Vec<&Record>, usize) {
    let kept: Vec<&Record> = records
        .iter()
        .filter(|r| r.keys_per_request.is_none())
        .collect();
    let left_out = records.len() - kept.len();
    (kept, left_out)
}

/// The records grouped by series, then by value size (both ascending), in input order within.
pub type Groups<'a> = BTreeMap<SeriesKey, BTreeMap<u64, Vec<&'a Record>>>;

pub fn group<'a>(records: &[&'a Record]) -> Groups<'a> {
    let mut g: Groups<'a> = BTreeMap::new();
    for r in records {
        g.entry(SeriesKey::of(r))
            .or_default()
            .entry(r.len)
            .or_default()
            .push(r);
    }
    g
}

/// The median: the middle value of an odd count, the mean of the two middle values of an even
/// count; `None` for no values. NaN-free input assumed (records are checked).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The run whose goodput is the median of the group's: the middle one by goodput, of an even
/// count the lower of the two middle ones (a real run, not an average); `None` for no runs.
/// Ties keep input order.
pub fn median_run<'a>(runs: &[&'a Record]) -> Option<&'a Record> {
    if runs.is_empty() {
        return None;
    }
    let mut v = runs.to_vec();
    v.sort_by(|a, b| a.goodput_gbps.total_cmp(&b.goodput_gbps));
    Some(v[(v.len() - 1) / 2])
}

/// One point of the goodput plot's line: the size, the median goodput and every run's goodput.
#[derive(Clone, Debug, PartialEq)]
pub struct SizePoint {
    pub len: u64,
    pub median_gbps: f64,
    pub runs_gbps: Vec<f64>,
}

/// The goodput plot's lines: per series, one point per value size, ascending.
pub fn goodput_series(groups: &Groups<'_>) -> Vec<(SeriesKey, Vec<SizePoint>)> {
    groups
        .iter()
        .map(|(key, by_len)| {
            let points = by_len
                .iter()
                .filter_map(|(&len, runs)| {
                    let runs_gbps: Vec<f64> = runs.iter().map(|r| r.goodput_gbps).collect();
                    median(&runs_gbps).map(|median_gbps| SizePoint {
                        len,
                        median_gbps,
                        runs_gbps,
                    })
                })
                .collect();
            (key.clone(), points)
        })
        .collect()
}

/// One curve of the latency CDF plot: the group, its size, how many runs it had, and the
/// median-goodput run's `(ms, quantile)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct Cdf {
    pub key: SeriesKey,
    pub len: u64,
    pub runs: usize,
    pub points: Vec<(f64, f64)>,
}

/// The CDF plot's curves: one per (van, mode, zero-copy, where, size), from the median-goodput run of
/// those with a latency distribution (none: no curve).
pub fn latency_cdfs(groups: &Groups<'_>) -> Vec<Cdf> {
    let mut out = Vec::new();
    for (key, by_len) in groups {
        for (&len, runs) in by_len {
            let runs: Vec<&Record> = runs
                .iter()
                .copied()
                .filter(|r| !r.latency_ms_quantiles.is_empty())
                .collect();
            if let Some(r) = median_run(&runs) {
                out.push(Cdf {
                    key: key.clone(),
                    len,
                    runs: runs.len(),
                    points: r
                        .latency_ms_quantiles
                        .iter()
                        .map(|&(q, ms)| (ms, q))
                        .collect(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(van: &str, mode: &str, len: u64, zc: bool, gbps: f64) -> Record {
        Record {
            van: van.into(),
            mode: mode.into(),
            worker: 0,
            len,
            keys_per_request: None,
            zero_copy: zc,
            goodput_gbps: gbps,
            p50_ms: 1.0,
            p99_ms: 2.0,
            requests: 10,
            latency_ms_quantiles: vec![(0.0, gbps * 0.5), (0.5, gbps), (1.0, gbps * 3.0)],
            place: None,
        }
    }

    fn at(place: &str, mut r: Record) -> Record {
        r.place = Some(place.into());
        r
    }

    const LINE: &str = r#"{"van":"zmq","mode":"push-pull","worker":0,"len":4096,"keys":8,"keys_per_request":null,"zero_copy":false,"goodput_gbps":1.5,"p50_ms":0.2,"p99_ms":0.9,"requests":1000,"latency_ms_quantiles":[[0.0,0.1],[0.5,0.2],[0.99,0.9],[1.0,1.2]],"verified":true}"#;

    #[test]
    fn parses_a_line_ignoring_unknown_fields_and_blank_lines() {
        let text = format!("\n{LINE}\n   \n{LINE}\n");
        let recs = parse(&text).expect("parses");
        assert_eq!(recs.len(), 2);
        let r = &recs[0];
        assert_eq!(
            (r.van.as_str(), r.mode.as_str(), r.len, r.zero_copy),
            ("zmq", "push-pull", 4096, false)
        );
        assert_eq!(r.keys_per_request, None);
        assert_eq!(r.goodput_gbps, 1.5);
        assert_eq!(r.requests, 1000);
        assert_eq!(r.latency_ms_quantiles[2], (0.99, 0.9));
        assert_eq!(r.place, None);

        let tagged = LINE.replacen('{', r#"{"where":"Soft-RoCE guest","#, 1);
        let r = &parse(&tagged).expect("parses")[0];
        assert_eq!(r.place.as_deref(), Some("Soft-RoCE guest"));
        let (_, what) = match parse(&LINE.replacen('{', r#"{"where":7,"#, 1)) {
            Err(InputError::Line { line, what }) => (line, what),
            other => panic!("expected a line error, got {other:?}"),
        };
        assert!(what.contains("invalid type"), "{what}");
    }

    #[test]
    fn groups_by_where_too_and_labels_it() {
        let recs = vec![
            at("loopback", rec("zmq", "pull", 4096, false, 9.0)),
            at("Soft-RoCE guest", rec("rdma", "pull", 4096, false, 0.1)),
            at("Soft-RoCE guest", rec("zmq", "pull", 4096, false, 0.2)),
            at("loopback", rec("zmq", "pull", 4096, false, 8.0)),
            rec("zmq", "pull", 4096, true, 1.0),
        ];
        let (kept, _) = one_key(&recs);
        assert_eq!(
            places(&kept),
            [
                Some("loopback".to_string()),
                Some("Soft-RoCE guest".to_string()),
                None
            ]
        );
        let g = group(&kept);
        let keys: Vec<String> = g.keys().map(|k| k.to_string()).collect();
        assert_eq!(
            keys,
            [
                "rdma pull, Soft-RoCE guest",
                "zmq pull, Soft-RoCE guest",
                "zmq pull, loopback",
                "zmq pull zero-copy"
            ]
        );
        let series = goodput_series(&g);
        assert_eq!(series[2].1[0].runs_gbps, vec![9.0, 8.0]);
        assert_eq!(series[1].1[0].runs_gbps, vec![0.2]);
        let cdfs = latency_cdfs(&g);
        assert_eq!(
            cdfs[1].key.label(" 4096 B"),
            "zmq pull 4096 B, Soft-RoCE guest"
        );
        assert_eq!(cdfs[3].key.label(" 4096 B"), "zmq pull zero-copy 4096 B");
    }

    #[test]
    fn malformed_lines_name_their_line_and_fault() {
        let bad = |text: &str| match parse(text) {
            Err(InputError::Line { line, what }) => (line, what),
            other => panic!("expected a line error, got {other:?}"),
        };
        let (line, what) = bad(&format!("{LINE}\n{{\"van\": \n"));
        assert_eq!(line, 2);
        assert!(what.starts_with("not JSON"), "{what}");

        let (line, what) = bad(&format!(
            "{LINE}\n\n{}",
            LINE.replace("\"van\":\"zmq\",", "")
        ));
        assert_eq!(line, 3);
        assert!(what.contains("missing field `van`"), "{what}");

        let (_, what) = bad(&LINE.replace("\"len\":4096", "\"len\":\"4096\""));
        assert!(what.contains("invalid type"), "{what}");

        let (_, what) = bad(&LINE.replace("\"len\":4096", "\"len\":0"));
        assert!(what.contains("\"len\" is 0"), "{what}");

        let (_, what) = bad(&LINE.replace("\"goodput_gbps\":1.5", "\"goodput_gbps\":-1"));
        assert!(what.contains("goodput_gbps"), "{what}");

        let (_, what) = bad(&LINE.replace("[0.5,0.2],[0.99,0.9]", "[0.99,0.9],[0.5,0.2]"));
        assert!(what.contains("does not ascend"), "{what}");

        let (_, what) = bad(&LINE.replace("[0.99,0.9]", "[0.99,0.1]"));
        assert!(what.contains("is below"), "{what}");

        let (_, what) = bad(&LINE.replace("[1.0,1.2]", "[1.5,1.2]"));
        assert!(what.contains("outside 0..1"), "{what}");

        // No distribution (a run without a measured request) is not an error.
        let none = LINE.replace("[[0.0,0.1],[0.5,0.2],[0.99,0.9],[1.0,1.2]]", "[]");
        assert_eq!(parse(&none).map(|r| r.len()), Ok(1));
    }

    #[test]
    fn no_records_is_an_error() {
        assert_eq!(parse(""), Err(InputError::NoRecords));
        assert_eq!(parse("\n  \n"), Err(InputError::NoRecords));
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn median_run_is_a_real_run_the_lower_middle_of_an_even_count() {
        let a = rec("zmq", "pull", 1, false, 3.0);
        let b = rec("zmq", "pull", 1, false, 1.0);
        let c = rec("zmq", "pull", 1, false, 2.0);
        let d = rec("zmq", "pull", 1, false, 4.0);
        assert_eq!(median_run(&[]), None);
        assert_eq!(median_run(&[&a, &b, &c]).map(|r| r.goodput_gbps), Some(2.0));
        assert_eq!(
            median_run(&[&a, &b, &c, &d]).map(|r| r.goodput_gbps),
            Some(2.0)
        );
    }

    #[test]
    fn groups_by_van_mode_zero_copy_then_size_and_drops_many_key_records() {
        let mut many = rec("zmq", "push-pull", 4096, false, 9.0);
        many.keys_per_request = Some(16);
        // In the goodput median, but not a CDF candidate: it would have been the median run.
        let mut no_cdf = rec("zmq", "push-pull", 4096, false, 2.5);
        no_cdf.latency_ms_quantiles.clear();
        let recs = vec![
            rec("zmq", "push-pull", 65536, false, 2.0),
            rec("zmq", "push-pull", 4096, false, 1.0),
            rec("rdma", "pull", 4096, true, 5.0),
            rec("zmq", "push-pull", 4096, false, 3.0),
            rec("rdma", "pull", 4096, false, 4.0),
            rec("zmq", "push-pull", 4096, false, 2.0),
            no_cdf,
            many,
        ];
        let (kept, left_out) = one_key(&recs);
        assert_eq!((kept.len(), left_out), (7, 1));
        let g = group(&kept);
        let keys: Vec<String> = g.keys().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["rdma pull", "rdma pull zero-copy", "zmq push-pull"]);

        let series = goodput_series(&g);
        let (k, pts) = &series[2];
        assert_eq!(k.to_string(), "zmq push-pull");
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[0].len, 4096);
        assert_eq!(pts[0].median_gbps, 2.25);
        assert_eq!(pts[0].runs_gbps, vec![1.0, 3.0, 2.0, 2.5]);
        assert_eq!((pts[1].len, pts[1].median_gbps), (65536, 2.0));

        let cdfs = latency_cdfs(&g);
        assert_eq!(cdfs.len(), 4);
        let c = &cdfs[3];
        assert_eq!(
            (c.key.to_string(), c.len, c.runs),
            ("zmq push-pull".into(), 65536, 1)
        );
        let c = &cdfs[2];
        assert_eq!(
            (c.key.to_string(), c.len, c.runs),
            ("zmq push-pull".into(), 4096, 3)
        );
        // The median-goodput run (2.0 Gbit/s) of the three: its own quantiles.
        assert_eq!(c.points, vec![(1.0, 0.0), (2.0, 0.5), (6.0, 1.0)]);
    }
}
