//! The binary end to end: draws tests/sample.jsonl into a temporary directory and checks the
//! SVGs' texts; bad inputs exit non-zero with a message naming the fault.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_plot-bench");

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sample.jsonl")
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("plot-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn plot(input: &Path, out: &Path) -> Output {
    Command::new(BIN)
        .arg(input)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run plot-bench")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The SVG `name` drawn into `out`, checked to be one.
fn svg(out: &Path, name: &str) -> String {
    let s = std::fs::read_to_string(out.join(name)).expect(name);
    assert!(s.starts_with("<svg"), "{name} is an SVG");
    s
}

/// Checks goodput-vs-len.svg of tests/sample.jsonl: its title, axes, a label per series and
/// the legend's note, the size and log goodput ticks, lines and dots.
fn check_goodput_vs_len(g: &str) {
    for want in [
        ">\npslite-rs bench: goodput vs value size\n<",
        ">\nvalue size (bytes per value, log scale)\n<",
        ">\ngoodput (Gbit/s, log scale)\n<",
        // No `where`: no place in the label.
        ">\nzmq push-pull\n<",
        ">\nzmq pull, loopback\n<",
        ">\nzmq pull, Soft-RoCE guest\n<",
        ">\nrdma pull, Soft-RoCE guest\n<",
        ">\nrdma pull zero-copy, Soft-RoCE guest\n<",
        ">\nline and large dots: median of runs\n<",
        ">\n10 kB\n<",
        ">\n1 MB\n<",
        // The log goodput axis: 0.25 and 21.5 Gbit/s both within labelled decades.
        ">\n0.2\n<",
        ">\n1\n<",
        ">\n20\n<",
        "<polyline",
        "<circle",
    ] {
        assert!(g.contains(want), "goodput-vs-len.svg lacks {want:?}");
    }
    assert!(!g.contains(">\nzmq pull\n<"), "zmq pull is split by place");
}

/// Checks latency-cdf.svg of tests/sample.jsonl: its title, axes, a label per curve, the
/// fraction ticks and the curves.
fn check_latency_cdf(c: &str) {
    for want in [
        ">\npslite-rs bench: request latency CDF\n<",
        ">\nrequest latency (ms, log scale)\n<",
        ">\nfraction of requests\n<",
        ">\nzmq push-pull 4096 B (3 runs)\n<",
        ">\nzmq push-pull 4096000 B (3 runs)\n<",
        ">\nzmq pull 1024000 B (2 runs), loopback\n<",
        ">\nzmq pull 1024000 B, Soft-RoCE guest\n<",
        ">\nrdma pull zero-copy 1024000 B, Soft-RoCE guest\n<",
        ">\n0.5\n<",
        ">\n1.0\n<",
        "<polyline",
    ] {
        assert!(c.contains(want), "latency-cdf.svg lacks {want:?}");
    }
}

#[test]
fn draws_both_svgs_with_titles_axes_and_legends() {
    let dir = TempDir::new("draw");
    let out = dir.0.join("plots"); // not there yet: created
    let o = plot(&fixture(), &out);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "one summary line: {stdout}");
    assert!(
        stdout.contains("20 records read (1 with keys_per_request left out)")
            && stdout.contains("5 series over 4 sizes, 9 latency curves")
            && stdout.contains("goodput-vs-len.svg")
            && stdout.contains("latency-cdf.svg"),
        "{stdout}"
    );

    let table = std::fs::read_to_string(out.join("medians.md")).expect("medians.md");
    assert!(
        table.starts_with("| median goodput, Gbit/s (runs) |") && table.lines().count() == 2 + 5,
        "a header, a rule and a row per series:\n{table}"
    );
    check_goodput_vs_len(&svg(&out, "goodput-vs-len.svg"));
    check_latency_cdf(&svg(&out, "latency-cdf.svg"));
}

#[test]
fn a_missing_file_fails_with_its_name() {
    let dir = TempDir::new("missing");
    let o = plot(&dir.0.join("nope.jsonl"), &dir.0);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("cannot read") && e.contains("nope.jsonl"), "{e}");
}

#[test]
fn a_malformed_line_fails_with_its_number() {
    let dir = TempDir::new("malformed");
    let good = std::fs::read_to_string(fixture()).expect("fixture");
    let first = good.lines().next().expect("a line");
    let input = dir.0.join("bad.jsonl");
    std::fs::write(
        &input,
        format!(
            "{first}\n\n{}\n",
            first.replace("\"len\":", "\"len\":\"x\",\"_\":")
        ),
    )
    .expect("write");
    let o = plot(&input, &dir.0);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("bad.jsonl: line 3: invalid type"), "{e}");
    assert!(!dir.0.join("goodput-vs-len.svg").exists(), "nothing drawn");
}

#[test]
fn no_records_fails() {
    let dir = TempDir::new("empty");
    let input = dir.0.join("empty.jsonl");
    std::fs::write(&input, "\n").expect("write");
    let o = plot(&input, &dir.0);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("no records"),
        "{}",
        text(&o.stderr)
    );
}
