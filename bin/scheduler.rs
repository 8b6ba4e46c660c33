//! `pslite-scheduler`: the scheduler node. Configuration from `DMLC_*` variables or flags.

use clap::Parser;
use pslite::apps::{exit_with, init_logging};
use pslite::config::Overrides;
use pslite::{Config, Postoffice, Role};

/// Runs the scheduler: assigns node ids, runs barriers, exits when every node finalized.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    cfg: Overrides,
}

fn main() {
    let cli = Cli::parse();
    exit_with(
        "pslite-scheduler",
        Config::from_env(Role::Scheduler, &cli.cfg).and_then(|cfg| {
            init_logging(&cfg);
            Postoffice::start(cfg)?.finalize()
        }),
    )
}
