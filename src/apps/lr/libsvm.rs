//! A LIBSVM-format reader: `label idx:val idx:val …` per line, labels ±1 or 0/1, ids ≥ 1.
//! Rows are kept in CSR form.

use crate::error::{Error, Result};
use std::path::Path;

/// Sparse rows with 0/1 labels (CSR).
///
/// Shapes: `labels.len() = rows`; `indptr.len() = rows + 1`; row r's features are
/// `idx[indptr[r]..indptr[r + 1]]` with values `val[…]` at the same positions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataset {
    /// Label of each row, 0.0 or 1.0.
    pub labels: Vec<f32>,
    /// Row starts into `idx`/`val`, plus the end.
    pub indptr: Vec<usize>,
    /// Feature ids (≥ 1).
    pub idx: Vec<u32>,
    /// Feature values.
    pub val: Vec<f32>,
}

impl Dataset {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Features of row `r`: `(ids, values)`.
    pub fn row(&self, r: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.indptr[r], self.indptr[r + 1]);
        (&self.idx[a..b], &self.val[a..b])
    }

    /// Reads every row of `path` for which `keep(row_number)` holds (row numbers count data
    /// lines from 0; blank lines and `#` comments are skipped).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file and 1-based line number of a malformed line,
    /// or the file that cannot be read.
    pub fn read(path: &Path, keep: impl Fn(usize) -> bool) -> Result<Dataset> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::InvalidArgument(format!("cannot read {}: {e}", path.display())))?;
        Dataset::parse(&text, &path.display().to_string(), keep)
    }

    /// As [`Dataset::read`], from text; `name` is used in errors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `name` and the line number of a malformed line.
    pub fn parse(text: &str, name: &str, keep: impl Fn(usize) -> bool) -> Result<Dataset> {
        let mut d = Dataset {
            indptr: vec![0],
            ..Dataset::default()
        };
        let mut row = 0usize;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |what: String| Error::InvalidArgument(format!("{name}:{}: {what}", n + 1));
            let mut parts = line.split_whitespace();
            let label_s = parts.next().unwrap_or("");
            let label = match label_s.parse::<f32>() {
                Ok(1.0) => 1.0,
                Ok(-1.0) | Ok(0.0) => 0.0,
                _ => {
                    return Err(bad(format!(
                        "bad label {label_s:?}: expected +1, -1, 1 or 0"
                    )))
                }
            };
            let take = keep(row);
            row += 1;
            let mut last = 0u32;
            for p in parts {
                let (i, v) = p
                    .split_once(':')
                    .ok_or_else(|| bad(format!("bad feature {p:?}: expected idx:value")))?;
                let i: u32 = i.parse().ok().filter(|&i| i >= 1).ok_or_else(|| {
                    bad(format!(
                        "bad feature id in {p:?}: expected a whole number ≥ 1"
                    ))
                })?;
                let v: f32 = v
                    .parse()
                    .ok()
                    .filter(|v: &f32| v.is_finite())
                    .ok_or_else(|| {
                        bad(format!(
                            "bad feature value in {p:?}: expected a finite number"
                        ))
                    })?;
                if i <= last {
                    return Err(bad(format!("feature ids must ascend: {i} after {last}")));
                }
                last = i;
                if take {
                    d.idx.push(i);
                    d.val.push(v);
                }
            }
            if take {
                d.labels.push(label);
                d.indptr.push(d.idx.len());
            }
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_features_and_shards() {
        let text = "+1 1:1 5:0.5\n\n-1 2:1 # comment\n0 3:2\n1 4:1\n";
        let all = Dataset::parse(text, "t", |_| true).expect("valid");
        assert_eq!(all.labels, vec![1.0, 0.0, 0.0, 1.0]);
        assert_eq!(all.indptr, vec![0, 2, 3, 4, 5]);
        assert_eq!(all.row(0), (&[1u32, 5][..], &[1.0f32, 0.5][..]));
        let odd = Dataset::parse(text, "t", |r| r % 2 == 1).expect("valid");
        assert_eq!(odd.labels, vec![0.0, 1.0]);
        assert_eq!(odd.idx, vec![2, 4]);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let cases = [
            (
                "1 1:1\n2 1:1\n",
                "f.svm:2: bad label \"2\": expected +1, -1, 1 or 0",
            ),
            (
                "1 1:1\n-1 3\n",
                "f.svm:2: bad feature \"3\": expected idx:value",
            ),
            (
                "\n\n1 0:1\n",
                "f.svm:3: bad feature id in \"0:1\": expected a whole number ≥ 1",
            ),
            (
                "1 x:1\n",
                "f.svm:1: bad feature id in \"x:1\": expected a whole number ≥ 1",
            ),
            (
                "1 1:nan\n",
                "f.svm:1: bad feature value in \"1:nan\": expected a finite number",
            ),
            ("1 4:1 2:1\n", "f.svm:1: feature ids must ascend: 2 after 4"),
        ];
        for (text, want) in cases {
            let err = Dataset::parse(text, "f.svm", |_| true).expect_err(text);
            assert_eq!(err.to_string(), format!("invalid argument: {want}"));
        }
    }
}
