//! `pslite-scheduler`: the scheduler node. Configuration from `DMLC_*` variables or flags.

use clap::Parser;
use pslite::apps::cli::{run_scheduler, SchedulerCli};
use pslite::apps::exit_with;

/// Runs the scheduler: assigns node ids, runs barriers, exits when every node finalized.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    inner: SchedulerCli,
}

fn main() {
    exit_with("pslite-scheduler", run_scheduler(&Cli::parse().inner))
}
