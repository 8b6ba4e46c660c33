//! The command lines of the three roles, shared by `pslite-scheduler`, `pslite-server`,
//! `pslite-worker` and the launcher's `pslite-launch node ROLE` (which runs the same code, so a
//! cluster starts from a single built binary).

use super::{bench, init_logging, kv_app, lr};
use crate::config::Overrides;
use crate::error::{Error, Result};
use crate::{Config, KVServer, Postoffice, Role};
use clap::{Args, Subcommand};

/// Options of the scheduler.
#[derive(Args, Clone, Debug)]
pub struct SchedulerCli {
    /// Cluster configuration (each flag overrides its DMLC_*/PS_* variable).
    #[command(flatten)]
    pub cfg: Overrides,
}

/// Options of a server.
#[derive(Args, Clone, Debug)]
pub struct ServerCli {
    /// Cluster configuration (each flag overrides its DMLC_*/PS_* variable).
    #[command(flatten)]
    pub cfg: Overrides,
    /// An embedding table to serve, one per application id (repeat the flag, or separate
    /// specs with ';' in PS_TABLES), e.g.
    /// 'app=0,dim=16,init=normal:0:0.01,opt=adagrad:lr=0.05,admit=count:2,budget=512MiB,evict=lru'.
    /// Fields: app, dim (required), init (zeros | uniform:A:B | normal:MEAN:STD), seed,
    /// opt (sgd | adagrad | adam | ftrl, with :lr=X and the rule's own :NAME=X; :wd=X),
    /// admit (all | count:N | prob:P), budget (bytes: 512MiB, 2GiB), evict (lru | ttl:T).
    /// A table on application 0 takes its f32 requests from the summing handler, on
    /// application 1 the lr optimizer's.
    #[arg(
        long = "table",
        value_name = "SPEC",
        env = "PS_TABLES",
        value_delimiter = ';'
    )]
    pub tables: Vec<crate::kv::table::TableSpec>,
}

/// Options of a worker: the configuration and the application to run.
#[derive(Args, Clone, Debug)]
pub struct WorkerCli {
    /// Cluster configuration (each flag overrides its DMLC_*/PS_* variable).
    #[command(flatten)]
    pub cfg: Overrides,
    /// The application.
    #[command(subcommand)]
    pub app: WorkerApp,
}

/// Applications a worker runs.
#[derive(Subcommand, Clone, Debug)]
pub enum WorkerApp {
    /// ps-lite's test_kv_app: pushes, a pull, push-pulls; checks the sums exactly.
    KvApp(kv_app::KvAppArgs),
    /// BytePS's test_benchmark: goodput and latency of push/pull modes.
    Bench(bench::BenchArgs),
    /// Distributed sparse logistic regression on LIBSVM data (worker 0 reports per epoch).
    Lr(lr::LrArgs),
    /// A deterministic stream of push-pulls into an embedding table (rows/s, memory, a digest).
    Table(super::table_app::TableAppArgs),
    /// Click-through-rate prediction: a factorization machine on the servers' embedding tables.
    Ctr(super::ctr::CtrArgs),
}

/// Runs the scheduler until every node finalized.
///
/// # Errors
/// Configuration, start-up and barrier errors.
pub fn run_scheduler(cli: &SchedulerCli) -> Result<()> {
    let cfg = Config::from_env(Role::Scheduler, &cli.cfg)?;
    init_logging(&cfg);
    Postoffice::start(cfg)?.finalize()
}

/// Runs a server until every worker finalized: its embedding tables (`--table`), application
/// 0 with the default handler for every value type (but `f32` when a table serves it), and
/// application [`lr::LR_APP`] with the logistic-regression optimizer (unless a table serves it).
/// A server that joined the running job takes its share of the keys; `SIGUSR2` drains it
/// ([`super::elastic`]).
///
/// # Errors
/// Configuration, start-up and barrier errors (a lost worker among them); a bad table spec
/// or two tables of one application, before the server joins.
pub fn run_server(cli: &ServerCli) -> Result<()> {
    use crate::kv::server::serve_sums_of;
    use crate::wire::DType;
    // A spec that cannot make a table is refused before the server joins the cluster.
    crate::kv::table::check_specs(&cli.tables)?;
    let cfg = Config::from_env(Role::Server, &cli.cfg)?;
    init_logging(&cfg);
    let sigusr2 = super::elastic::catch_sigusr2();
    let po = Postoffice::start(cfg)?;
    let _tables = crate::kv::table::serve_tables(&po, &cli.tables)?;
    let taken = |app: i32| cli.tables.iter().any(|t| t.app == app);
    let sums: Vec<DType> = DType::VALUES
        .into_iter()
        .filter(|&d| !(d == DType::F32 && taken(0)))
        .collect();
    let _sums = serve_sums_of(&po, 0, &sums)?;
    let _lr = if taken(lr::LR_APP) {
        None
    } else {
        Some(KVServer::<f32>::new(
            &po,
            lr::LR_APP,
            lr::OptimizerHandler::new(),
        )?)
    };
    super::elastic::take_share(&po);
    super::elastic::drain_on_sigusr2(&po, sigusr2);
    let done = po.finalize();
    for spec in &cli.tables {
        eprintln!(
            "pslite: {}",
            crate::kv::table::handler::summary(spec, &po.metrics().table(spec.app))
        );
    }
    if !cli.tables.is_empty() {
        if let Some(peak) = super::peak_rss_bytes() {
            eprintln!(
                "pslite: server {}: peak RSS {:.1} MiB",
                po.my_rank(),
                peak as f64 / f64::from(1 << 20)
            );
        }
    }
    done
}

/// Appends `line` and a newline to `file` in one write (O_APPEND: the lines of workers writing
/// to one file do not mix).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the file when it cannot be opened or written.
fn append_line(file: &str, line: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| Error::InvalidArgument(format!("--json {file}: cannot open it: {e}")))?;
    f.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| Error::InvalidArgument(format!("--json {file}: cannot write it: {e}")))
}

/// Runs a worker application, then finalizes (also after a failure, so that the other nodes
/// are not left waiting for this one; the failure then ends every node with an error).
///
/// # Errors
/// Configuration and start-up errors; the application's error (a kv-app mismatch among them).
pub fn run_worker(cli: &WorkerCli) -> Result<()> {
    let cfg = Config::from_env(Role::Worker, &cli.cfg)?;
    init_logging(&cfg);
    let po = Postoffice::start(cfg)?;
    let result = run_app(&po, &cli.app);
    if let Err(e @ Error::Timeout(_)) = &result {
        // Before finalize, which may wait for the same silent nodes.
        crate::waits::timed_out(e);
    }
    // A failed application fails the job on every node (each exits non-zero, naming it).
    let fin = match &result {
        Ok(()) => po.finalize(),
        Err(e) => po.finalize_failed(e),
    };
    result.and(fin)
}

/// Runs `app` on this worker and prints its report: text lines, or JSON where asked.
///
/// # Errors
/// The application's error; a kv-app whose values came back wrong; a `bench --json FILE`
/// that cannot be written.
fn run_app(po: &std::sync::Arc<Postoffice>, app: &WorkerApp) -> Result<()> {
    match app {
        WorkerApp::KvApp(a) => kv_app::run(po, a).and_then(|rep| report_kv_app(po.my_rank(), &rep)),
        WorkerApp::Bench(a) => bench::run(po, a).and_then(|rep| print_bench(a, &rep)),
        WorkerApp::Lr(a) => lr::run(po, a, |rep| {
            if a.json {
                println!("{}", serde_json::to_string(rep).unwrap_or_default());
            } else {
                println!("{}", rep.text());
            }
        })
        .map(|_| ()),
        WorkerApp::Table(a) => super::table_app::run(po, a).map(|rep| {
            if a.json {
                println!("{}", serde_json::to_string(&rep).unwrap_or_default());
            } else {
                println!("{}", rep.text());
            }
        }),
        WorkerApp::Ctr(a) => {
            super::ctr::run(po, a, |rep| println!("{}", rep.line(a.json))).map(|_| ())
        }
    }
}

/// Prints worker `rank`'s kv-app report as ps-lite does (its timing, then `error: a, b`).
///
/// # Errors
/// [`Error::InvalidArgument`] counting the wrong values, when any came back wrong.
fn report_kv_app(rank: usize, rep: &kv_app::KvAppReport) -> Result<()> {
    println!("worker {rank}: {}", rep.timing());
    println!(
        "worker {rank}: error: {}, {}",
        rep.push_errors, rep.push_pull_errors
    );
    if rep.push_errors + rep.push_pull_errors > 0 {
        return Err(Error::InvalidArgument(format!(
            "kv-app: {} values wrong after pushes, {} after push-pulls",
            rep.push_errors, rep.push_pull_errors
        )));
    }
    Ok(())
}

/// Hands the bench report to the launcher, then prints it: one JSON line (`--json`), or
/// appended to `--json FILE` with the text line printed, or the text line alone.
///
/// # Errors
/// `--json FILE` cannot be written.
fn print_bench(a: &bench::BenchArgs, rep: &bench::BenchReport) -> Result<()> {
    bench::progress::report_to_launcher(rep);
    match a.json.as_deref() {
        Some("-") => println!("{}", serde_json::to_string(rep).unwrap_or_default()),
        Some(file) => {
            append_line(file, &serde_json::to_string(rep).unwrap_or_default())?;
            println!("{}", rep.text());
        }
        None => println!("{}", rep.text()),
    }
    Ok(())
}
