//! `pslite-server`: a server node answering pushes and pulls of application 0 with the default
//! handler (sum pushes, answer pulls), for every value type.

use clap::Parser;
use pslite::apps::cli::{run_server, ServerCli};
use pslite::apps::exit_with;

/// Runs a server until every worker finalized.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    inner: ServerCli,
}

fn main() {
    exit_with("pslite-server", run_server(&Cli::parse().inner))
}
