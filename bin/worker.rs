//! `pslite-worker`: a worker node running one application (`kv-app`, `bench`).

use clap::Parser;
use pslite::apps::cli::{run_worker, WorkerCli};
use pslite::apps::exit_with;

/// Runs a worker application against the cluster.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    inner: WorkerCli,
}

fn main() {
    exit_with("pslite-worker", run_worker(&Cli::parse().inner))
}
