//! `plot-bench INPUT.jsonl --out DIR`: draws pslite-rs benchmark results as SVG.
//!
//! # What it draws
//! - `DIR/goodput-vs-len.svg`: x = value size (bytes per value, log scale), y = goodput
//!   (Gbit/s, log scale, so runs a hundred times slower stay readable; a goodput of 0 sits on
//!   the axis' bottom). One line per (where, van, mode, zero-copy) through the MEDIAN goodput of
//!   the records at each size (of an even count, the mean of the middle two), and each record's
//!   goodput as a dot.
//! - `DIR/latency-cdf.svg`: request latency CDFs, x = latency (ms, log scale), y = fraction of
//!   requests (0..1). One curve per (where, van, mode, zero-copy, size), drawn from ONE record:
//!   the run with the median goodput of its group (of an even count, the lower of the two middle
//!   runs; runs without a latency distribution are not candidates), so every curve is a
//!   distribution that was measured, not an average of several. Darker for larger values.
//!
//! In both, a line's hue is its (van, mode, zero-copy) and its dash pattern its `where`: the
//! place first seen in the input solid, the next ones dashed, short-dashed, long-dashed (then
//! repeating). Legend labels read "zmq pull, loopback" ("zmq pull 4096 B (3 runs), loopback" in
//! the CDF plot); records without `where` have no place in their label.
//!
//! - `DIR/medians.md`: the goodput plot's medians as a Markdown table (a row per line, a column
//!   per size), for BENCHMARKS.md.
//!
//! No PNG: plotters' bitmap backend needs the `image` crate and, to draw any text, a font file
//! (its built-in font only measures text); the SVGs need neither (see `draw.rs`).
//!
//! # Input: JSON Lines, one object per worker per run, as `bench --json FILE` appends them
//! Fields read (others are ignored):
//! - `where`: optional string, where the run ran ("loopback", "Soft-RoCE guest"; the sweep
//!   script adds it from PLOT_BENCH_WHERE); records with different ones are never pooled;
//! - `van`: string, "zmq" or "rdma"; `mode`: string, "push", "pull", "push-pull" or
//!   "push-then-pull" (other names are drawn as given);
//! - `worker`: integer rank; `len`: bytes per value, an integer above 0;
//! - `keys_per_request`: null, or an integer: such records are counted and LEFT OUT, since a
//!   request then carries many keys and its goodput and latency are not comparable with one key
//!   per request;
//! - `zero_copy`: bool; `goodput_gbps` (Gbit/s), `p50_ms`, `p99_ms`: finite numbers, not
//!   negative; `requests`: integer;
//! - `latency_ms_quantiles`: an array of `[quantile, ms]` pairs, quantiles strictly ascending
//!   within 0..1, latencies not decreasing (bench writes 0, 0.01, …, 0.99, 0.995, 0.999, 1); an
//!   empty one (a run without a measured request) keeps the run out of the CDF plot only.
//!
//! Records sharing (where, van, mode, len, zero_copy) are repeated runs, and workers: each worker's
//! record is one dot (the sweep runs one worker). Blank lines are skipped; any other line that is
//! not such a record is an error naming its line number and the fault.
//!
//! # Regenerating the committed plots
//! `scripts/plot-bench` (zmq sweep on the host's loopback, `where` "loopback") or
//! `scripts/plot-bench --rdma` (plus the RDMA and zmq vans in the Soft-RoCE guest, `where`
//! "Soft-RoCE guest") runs `scripts/plot-bench-sweep.sh` into `plots/bench.jsonl`, then
//! `cargo run --release --manifest-path tools/plot-bench/Cargo.toml -- plots/bench.jsonl --out plots`.

mod data;
mod draw;

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Draws pslite-rs `bench --json` results (JSON Lines) as goodput-vs-len.svg and
/// latency-cdf.svg.
#[derive(Parser, Debug)]
#[command(name = "plot-bench", version)]
struct Args {
    /// JSON Lines file of `bench --json` records.
    input: PathBuf,
    /// Directory to write the SVG files into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

fn run(args: &Args) -> Result<String, String> {
    let input = args.input.display();
    let text =
        std::fs::read_to_string(&args.input).map_err(|e| format!("cannot read {input}: {e}"))?;
    let records = data::parse(&text).map_err(|e| format!("{input}: {e}"))?;
    let (kept, left_out) = data::one_key(&records);
    if kept.is_empty() {
        return Err(format!(
            "{input}: no records to draw: all {left_out} records have keys_per_request set"
        ));
    }
    let groups = data::group(&kept);
    let series = data::goodput_series(&groups);
    let cdfs = data::latency_cdfs(&groups);
    let keys: Vec<data::SeriesKey> = groups.keys().cloned().collect();
    let places = data::places(&kept);

    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let goodput = args.out.join("goodput-vs-len.svg");
    let cdf = args.out.join("latency-cdf.svg");
    draw::goodput_vs_len(&goodput, &series, &places)
        .map_err(|e| format!("drawing {}: {e}", goodput.display()))?;
    draw::latency_cdf(&cdf, &cdfs, &keys, &places)
        .map_err(|e| format!("drawing {}: {e}", cdf.display()))?;
    let table = args.out.join("medians.md");
    std::fs::write(&table, medians_table(&series))
        .map_err(|e| format!("cannot write {}: {e}", table.display()))?;

    let skipped = if left_out > 0 {
        format!(" ({left_out} with keys_per_request left out)")
    } else {
        String::new()
    };
    Ok(format!(
        "plot-bench: {} records read{skipped}; {} series over {} sizes, {} latency curves; wrote {}, {}, {}",
        records.len(),
        series.len(),
        groups
            .values()
            .flat_map(|by_len| by_len.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        cdfs.len(),
        goodput.display(),
        cdf.display(),
        table.display()
    ))
}

/// The goodput plot's medians as a Markdown table (`DIR/medians.md`): a row per series, a
/// column per value size, each cell the median Gbit/s of its runs and their count.
fn medians_table(series: &[(data::SeriesKey, Vec<data::SizePoint>)]) -> String {
    let lens: std::collections::BTreeSet<u64> = series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|p| p.len))
        .collect();
    let mut out = String::from("| median goodput, Gbit/s (runs) |");
    for l in &lens {
        out.push_str(&format!(" {l} B |"));
    }
    out.push_str("\n| --- |");
    out.push_str(&" --- |".repeat(lens.len()));
    out.push('\n');
    for (key, pts) in series {
        out.push_str(&format!("| {key} |"));
        for l in &lens {
            match pts.iter().find(|p| p.len == *l) {
                Some(p) => {
                    out.push_str(&format!(" {:.3} ({}) |", p.median_gbps, p.runs_gbps.len()))
                }
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    }
    out
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plot-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
