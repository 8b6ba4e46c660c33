//! Durable servers and recovery: `PS_CHECKPOINT_DIR`, `PS_CHECKPOINT_SYNC`,
//! `PS_CHECKPOINT_LOG_MB` and `PS_RECOVERY_TIMEOUT` (rows of the table in [`super`]).

use super::vars::Vars;
use crate::error::Result;
use std::path::PathBuf;
use std::time::Duration;

/// Default of `PS_CHECKPOINT_LOG_MB`: a snapshot is taken once the request log has grown past
/// this many MiB (or past twice the last snapshot, whichever is more).
pub const DEFAULT_LOG_MB: u64 = 256;

/// Default of `PS_RECOVERY_TIMEOUT`: how long the scheduler waits for a lost server's or
/// worker's replacement before the job fails.
pub const DEFAULT_RECOVERY: Duration = Duration::from_secs(60);

/// Where and how servers keep their state recoverable.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// `PS_CHECKPOINT_DIR`: server rank r keeps its files under `DIR/server-r/`.
    pub dir: PathBuf,
    /// `PS_CHECKPOINT_SYNC=1`: every log record and snapshot is flushed to the device (fsync)
    /// before the request is answered, so acknowledged pushes survive a machine crash; without
    /// it they survive the server process's death (they are in the page cache).
    pub sync: bool,
    /// `PS_CHECKPOINT_LOG_MB`: bytes of request log after which a snapshot starts a new log.
    pub log_bytes: u64,
    /// `PS_RECOVERY_TIMEOUT` (read by the scheduler): how long a lost server or worker waits
    /// for a replacement before the job fails.
    pub recovery_timeout: Duration,
}

/// The checkpoint settings, `None` when `PS_CHECKPOINT_DIR` is unset or empty.
pub(super) fn checkpoint<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
) -> Result<Option<Checkpoint>> {
    let sync = vars
        .choice(
            "PS_CHECKPOINT_SYNC",
            &[("0", false), ("", false), ("1", true)],
            "0 (no fsync) or 1 (fsync before answering)",
        )?
        .unwrap_or(false);
    let log_mb = vars.ranged("PS_CHECKPOINT_LOG_MB", 1u64, 1 << 30)?;
    let recovery = vars.seconds("PS_RECOVERY_TIMEOUT")?;
    let Some(dir) = vars
        .raw("PS_CHECKPOINT_DIR")
        .filter(|d| !d.trim().is_empty())
    else {
        return Ok(None);
    };
    Ok(Some(Checkpoint {
        dir: PathBuf::from(dir.trim()),
        sync,
        log_bytes: log_mb.unwrap_or(DEFAULT_LOG_MB) << 20,
        recovery_timeout: recovery.unwrap_or(DEFAULT_RECOVERY),
    }))
}
