//! The applications behind `pslite-worker SUBCOMMAND` and the helpers the binaries share.
//! The binaries under `bin/` are thin command lines over these.

pub mod bench;
pub mod cli;
pub mod ctr;
pub mod elastic;
pub mod inspect;
pub mod kv_app;
pub mod lr;
pub mod staleness;
pub mod stats;
pub mod table_app;

use crate::config::Config;
use crate::error::Result;
use std::io::IsTerminal;

/// Keeps large buffers (message payloads of up to 256 MiB) on glibc's heap instead of fresh
/// `mmap`s, so each 1 MB value does not cost page faults and zeroing on every request. A process
/// setting: the binaries call it; a library user may too.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called before heavy allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

/// This process's peak resident set in bytes (`VmHWM` of `/proc/self/status`), `None` where
/// unknown.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Sets up `tracing` to stderr at the level of `PS_VERBOSE` (overridden by `RUST_LOG`), and the
/// "who waits on whom" block on `SIGUSR1` ([`crate::waits::on_sigusr1`]).
pub fn init_logging(cfg: &Config) {
    tune_allocator();
    init_tracing(cfg);
    // A node run by our binaries logs "who waits on whom" on SIGUSR1.
    crate::waits::on_sigusr1();
}

/// Sets up `tracing` to stderr at the level of `PS_VERBOSE` (overridden by `RUST_LOG`), once
/// per process; nothing else of the process changes (what an embedding, such as the Python
/// bindings, wants).
pub fn init_tracing(cfg: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cfg.log_filter()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Ends the process: exit 0 on `Ok`, else prints `NAME: error: TEXT` to stderr and exits 1.
pub fn exit_with(name: &str, r: Result<()>) -> ! {
    match r {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{name}: error: {e}");
            std::process::exit(1)
        }
    }
}

/// The epoch progress bar of a training application: `steps` steps drawn on standard error by
/// worker 0 (`rank` 0) when standard error is a terminal; hidden otherwise.
fn training_bar(rank: usize, steps: u64) -> indicatif::ProgressBar {
    if rank == 0 && std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(steps)
    } else {
        indicatif::ProgressBar::hidden()
    }
}
