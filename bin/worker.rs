//! `pslite-worker`: a worker node running one application.

use clap::{Parser, Subcommand};
use pslite::apps::{bench, exit_with, init_logging, kv_app};
use pslite::config::Overrides;
use pslite::{Config, Error, Postoffice, Role};

/// Runs a worker application against the cluster.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    cfg: Overrides,
    #[command(subcommand)]
    app: App,
}

#[derive(Subcommand)]
enum App {
    /// ps-lite's test_kv_app: pushes, a pull, push-pulls; checks the sums exactly.
    KvApp(kv_app::KvAppArgs),
    /// BytePS's test_benchmark: goodput and latency of push/pull modes.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let r = Config::from_env(Role::Worker, &cli.cfg).and_then(|cfg| {
        init_logging(&cfg);
        let po = Postoffice::start(cfg)?;
        let result = match &cli.app {
            App::KvApp(a) => kv_app::run(&po, a).and_then(|rep| {
                println!(
                    "worker {}: error: {}, {}",
                    po.my_rank(),
                    rep.push_errors,
                    rep.push_pull_errors
                );
                if rep.push_errors + rep.push_pull_errors > 0 {
                    return Err(Error::InvalidArgument(format!(
                        "kv-app: {} values wrong after pushes, {} after push-pulls",
                        rep.push_errors, rep.push_pull_errors
                    )));
                }
                Ok(())
            }),
            App::Bench(a) => bench::run(&po, a).map(|rep| {
                if a.json {
                    println!("{}", serde_json::to_string(&rep).unwrap_or_default());
                } else {
                    println!("{}", rep.text());
                }
            }),
        };
        // Finalize even after a failure, so the others are not left waiting for this node.
        let fin = po.finalize();
        result.and(fin)
    });
    exit_with("pslite-worker", r)
}
