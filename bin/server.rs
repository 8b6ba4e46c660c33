//! `pslite-server`: a server node answering pushes and pulls of application 0 with the default
//! handler (sum pushes, answer pulls), for every value type.

use clap::Parser;
use pslite::apps::{exit_with, init_logging};
use pslite::config::Overrides;
use pslite::{Config, DefaultHandler, KVServer, Postoffice, Role};

/// Runs a server until every worker finalized.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    cfg: Overrides,
}

fn main() {
    let cli = Cli::parse();
    exit_with(
        "pslite-server",
        Config::from_env(Role::Server, &cli.cfg).and_then(|cfg| {
            init_logging(&cfg);
            let po = Postoffice::start(cfg)?;
            let _f32 = KVServer::<f32>::new(&po, 0, DefaultHandler::new())?;
            let _f64 = KVServer::<f64>::new(&po, 0, DefaultHandler::new())?;
            let _i32 = KVServer::<i32>::new(&po, 0, DefaultHandler::new())?;
            let _i64 = KVServer::<i64>::new(&po, 0, DefaultHandler::new())?;
            let _u8 = KVServer::<u8>::new(&po, 0, DefaultHandler::new())?;
            let _u32 = KVServer::<u32>::new(&po, 0, DefaultHandler::new())?;
            let _u64 = KVServer::<u64>::new(&po, 0, DefaultHandler::new())?;
            po.finalize()
        }),
    )
}
