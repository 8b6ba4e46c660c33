//! One `KVServer`'s checkpoint directory: the snapshot, the request log that follows it, and
//! the recently applied requests.
//!
//! Files in the directory (`PS_CHECKPOINT_DIR/server-R/appA-T/` for server rank R,
//! application A and value type T):
//! - `snapshot`: the state as of the start of log generation G ([`super::snapshot`] framing);
//!   its payload, little-endian: G `u64`; the run's id `u64` (drawn by the scheduler: a
//!   replacement restores only its own run's checkpoint); the applied requests
//!   ([`Applied::encode`]) as length `u64` and bytes; the handler's state ([`RequestHandler::save`](crate::kv::RequestHandler::save),
//!   for the default handler the key store's layout in `kv/store/saved.rs`) as length `u64` and
//!   bytes.
//! - `log.G`: the entries ([`super::record`]) applied since, in [`super::log`] framing.
//! - `log.spare` (without fsync): a retired log's file, to become the next `log.G+1`.
//! - `snapshot.tmp`: the snapshot before last (never read), whose file the next snapshot is
//!   written over.
//!
//! - `lock`: held (`flock`) by the process using the directory: a replacement cannot restore
//!   while the server it replaces still runs (paused, say) and writes.
//!
//! A new snapshot: `log.G+1` is created empty (without fsync: `log.spare`, a terminator
//! written at its start, is renamed to it; the retired log's file stays open and mapped), the
//! snapshot of generation G + 1 is written to `snapshot.tmp` (over the file of the snapshot
//! before last, whose pages are in memory) and exchanged with `snapshot` (`RENAME_EXCHANGE`;
//! where the file system cannot, renamed over it), then appending moves to `log.G+1` and
//! `log.G` is removed (without fsync: renamed to `log.spare`). A crash (or error) before the
//! exchange leaves generation G whole (`log.G+1` is ignored, and emptied when G + 1 comes);
//! after it, generation G + 1 whole: nothing is lost or replayed twice. Logs of other
//! generations left by a crash are removed when the directory is opened. A new run's
//! checkpoint renames an earlier run's files to `gone.` + their name and removes them on a
//! thread.

use super::applied::Applied;
use super::bytes::Reader;
use super::log::{self, LogWriter, Prepared};
use super::record::Entry;
use super::{snapshot, Fsync};
use crate::error::{Error, Result};
use files::{lock_dir, remove_later, remove_other_logs, GONE};
use std::path::{Path, PathBuf};

mod files;

/// The snapshot's file name.
pub const SNAPSHOT: &str = "snapshot";

/// A retired log's file name, kept to be the next generation's log (without fsync).
const SPARE: &str = "log.spare";

/// An open checkpoint: where the next entries go and when the next snapshot is due.
pub struct Checkpoint {
    dir: PathBuf,
    sync: Fsync,
    generation: u64,
    log: LogWriter,
    log_bytes: u64,
    snapshot_bytes: u64,
    limit: u64,
    /// The requests applied recently (kept in the snapshot; the log's entries add to it).
    pub applied: Applied,
    /// Key lists (sender, customer, digest) logged in the current log generation.
    lists: std::collections::HashSet<(crate::wire::NodeId, i32, u64)>,
    /// The run these files belong to.
    run: u64,
    /// Without fsync: the retired log (`log.spare`), still open and mapped, to become the
    /// next generation's log.
    spare: Option<LogWriter>,
    /// The directory's lock, held while this lives.
    _lock: std::fs::File,
}

/// What a restored checkpoint holds: the handler's saved state and the log's bytes, whose
/// entries are to be applied on top in order ([`Restored::entries`]).
pub struct Restored {
    /// The snapshot's generation.
    pub generation: u64,
    /// The run the checkpoint was written in.
    pub run: u64,
    /// The handler's state in the snapshot.
    pub state: Vec<u8>,
    /// Where the handler's state starts in the snapshot file (for errors).
    pub state_at: u64,
    /// The log file's path, for errors.
    pub log_name: String,
    /// The log's whole records (a torn tail already cut off).
    pub log: Vec<u8>,
    /// Where a torn last record started in the log file, if there was one.
    pub torn_at: Option<u64>,
    /// Bytes of the snapshot's payload.
    pub snapshot_bytes: u64,
}

impl Restored {
    /// The log's entries in order, each with its offset in the log file.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the log file and the offset of a damaged record or entry.
    pub fn entries(&self) -> Result<Vec<(u64, Entry<'_>)>> {
        let records = log::decode(&self.log_name, self.generation, &self.log)
            .map_err(|d| Error::Corrupt(d.to_string()))?;
        records
            .records
            .into_iter()
            .map(|(at, bytes)| {
                super::record::decode(bytes)
                    .map(|e| (at, e))
                    .map_err(|e| corrupt(&self.log_name, at, &e))
            })
            .collect()
    }
}

/// [`Error::Corrupt`]: "FILE: damaged at byte AT: WHAT".
pub fn corrupt(file: &str, at: u64, what: &str) -> Error {
    Error::Corrupt(
        super::Damage {
            file: file.to_string(),
            offset: at,
            what: what.to_string(),
        }
        .to_string(),
    )
}

/// Turns an OS error `what` on `path` into [`Error::Config`]: "checkpoint PATH: WHAT: ERROR".
fn io(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> Error {
    let p = path.display().to_string();
    let what = what.to_string();
    move |e| Error::Config(format!("checkpoint {p}: {what}: {e}"))
}

impl Checkpoint {
    /// Starts a new checkpoint in `dir` (created if missing) for run `run` and a handler whose
    /// state is `state`: files of an earlier run there are removed, and generation 1 begins.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn create(
        dir: &Path,
        (sync, limit): (Fsync, u64),
        run: u64,
        state: &[u8],
    ) -> Result<Checkpoint> {
        std::fs::create_dir_all(dir).map_err(io(dir, "cannot create the directory"))?;
        let lock = lock_dir(dir)?;
        // An earlier run's files are renamed out of the way at once and removed on a thread:
        // removing large files (freeing, discarding their blocks) would hold the server's
        // start up. A `gone.` file a killed process left is removed with them.
        let mut gone = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir, "cannot list"))? {
            let path = entry.map_err(io(dir, "cannot list"))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with(GONE) {
                gone.push(path);
            } else if name == SNAPSHOT || name.starts_with("log.") || name.ends_with(".tmp") {
                let to = dir.join(format!("{GONE}{name}"));
                std::fs::rename(&path, &to).map_err(io(&path, "cannot move away"))?;
                gone.push(to);
            }
        }
        remove_later(gone);
        let applied = Applied::default();
        let log = LogWriter::create(&dir.join("log.1"), sync, 1)?;
        let snapshot_bytes = write_snapshot(dir, sync, (1, run), &applied, state)?;
        Ok(Checkpoint {
            log,
            run,
            _lock: lock,
            dir: dir.to_path_buf(),
            sync,
            generation: 1,
            log_bytes: 0,
            snapshot_bytes,
            limit,
            applied,
            lists: Default::default(),
            spare: None,
        })
    }

    /// Reads the checkpoint in `dir` without changing it (for `pslite-launch inspect`): the
    /// snapshot's applied requests, and what [`Restored`] holds (a torn last record of the log
    /// left out).
    ///
    /// # Errors
    /// [`Error::Config`] when a file is missing or unreadable; [`Error::Corrupt`] naming the
    /// file and offset of any damage.
    pub fn read(dir: &Path) -> Result<(Applied, Restored)> {
        let snap_path = dir.join(SNAPSHOT);
        let payload = snapshot::read(&snap_path)?;
        let snap = parse_snapshot(&payload).map_err(|e| {
            corrupt(
                &snap_path.display().to_string(),
                snapshot::HEADER as u64,
                &e,
            )
        })?;
        let log_path = dir.join(format!("log.{}", snap.generation));
        let log_name = log_path.display().to_string();
        let mut log = match log::read(&log_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(&log_path, "cannot read")(e)),
        };
        let records = log::decode(&log_name, snap.generation, &log)
            .map_err(|d| Error::Corrupt(d.to_string()))?;
        let (end, torn) = (records.end, records.torn_at);
        // After the end: a torn record, or what a reused file held before.
        log.truncate(end as usize);
        let restored = Restored {
            generation: snap.generation,
            run: snap.run,
            state: snap.state.to_vec(),
            state_at: (snapshot::HEADER + snap.state_at) as u64,
            log_name,
            log,
            torn_at: torn,
            snapshot_bytes: payload.len() as u64,
        };
        Ok((snap.applied, restored))
    }

    /// Opens the checkpoint in `dir` to restore it: takes its lock, [`read`](Self::read)s it,
    /// cuts a torn last record off the log file, and carries on appending to that log.
    ///
    /// # Errors
    /// As [`read`](Self::read); [`Error::Config`] when the directory is locked by another
    /// process, or the log cannot be cut or opened.
    pub fn open(dir: &Path, sync: Fsync, limit: u64) -> Result<(Checkpoint, Restored)> {
        let lock = lock_dir(dir)?;
        let (applied, restored) = Checkpoint::read(dir)?;
        let log_path = dir.join(format!("log.{}", restored.generation));
        remove_other_logs(dir, &log_path, sync)?;
        if let Some(at) = restored.torn_at {
            tracing::warn!(
                "{}: cut off a torn last record at byte {at} (being written when the server \
                 died; the workers tell what they saw answered, which is checked against the log)",
                restored.log_name
            );
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&log_path)
                .map_err(io(&log_path, "cannot open"))?;
            f.set_len(at).map_err(io(&log_path, "cannot truncate"))?;
        }
        let cp = Checkpoint {
            log: LogWriter::open(
                &log_path,
                sync,
                restored.generation,
                restored.log.len() as u64,
            )?,
            dir: dir.to_path_buf(),
            sync,
            generation: restored.generation,
            log_bytes: restored.log.len() as u64,
            snapshot_bytes: restored.snapshot_bytes,
            limit,
            applied,
            lists: Default::default(),
            run: restored.run,
            spare: None,
            _lock: lock,
        };
        Ok((cp, restored))
    }

    /// Appends `entry` to the log (and records an applied request as applied): when this
    /// returns, it survives the process's death (with `PS_CHECKPOINT_SYNC=1`, a crash).
    ///
    /// # Errors
    /// [`Error::Config`] naming the log and the OS error.
    pub fn append(&mut self, entry: &Entry<'_>) -> Result<()> {
        let p = self.prepare(entry)?;
        self.commit(p, entry)
    }

    /// Writes `entry`'s record after the log's end without making it part of the log
    /// ([`LogWriter::prepare`]): until [`commit`](Self::commit)ted (dropped, or the process
    /// killed) it is never read.
    ///
    /// # Errors
    /// [`Error::Config`] naming the log and the OS error; the log is unchanged.
    pub fn prepare(&mut self, entry: &Entry<'_>) -> Result<Prepared> {
        let mut scratch = Vec::new();
        self.log.prepare(&entry.parts(&mut scratch))
    }

    /// Makes `entry`'s prepared record `p` part of the log, as [`append`](Self::append).
    ///
    /// # Errors
    /// [`Error::Config`] naming the log and the OS error.
    pub fn commit(&mut self, p: Prepared, entry: &Entry<'_>) -> Result<()> {
        let mut scratch = Vec::new();
        self.log_bytes += self.log.commit(p, &entry.parts(&mut scratch))?;
        self.note(entry);
        Ok(())
    }

    /// Records what `entry` says (when replaying the log): a request applied, a sender
    /// forgotten, a key list logged.
    pub fn note(&mut self, entry: &Entry<'_>) {
        self.applied.note(entry);
        if let Entry::KeyList {
            sender,
            customer,
            digest,
            ..
        } = entry
        {
            self.lists.insert((*sender, *customer, *digest));
        }
    }

    /// Whether key list `digest` of (`sender`, `customer`) is in the current log.
    pub fn has_list(&self, sender: crate::wire::NodeId, customer: i32, digest: u64) -> bool {
        self.lists.contains(&(sender, customer, digest))
    }

    /// Whether a snapshot is due: the log outgrew `PS_CHECKPOINT_LOG_MB` and twice the last
    /// snapshot.
    pub fn due(&self) -> bool {
        self.log_bytes > self.limit.max(2 * self.snapshot_bytes)
    }

    /// Writes a snapshot of `state` (the handler's state now, with every logged entry applied)
    /// as the next generation, moves appending to its (new, empty) log and removes the
    /// previous log (see the module docs for the order).
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error. Before the snapshot is renamed into
    /// place the current generation stays in use, whole; after, the new one is.
    pub fn snapshot(&mut self, state: &[u8]) -> Result<()> {
        let next = self.generation + 1;
        let next_log = self.dir.join(format!("log.{next}"));
        // Its directory entry is made durable (PS_CHECKPOINT_SYNC) by the snapshot's rename's
        // directory fsync below. Without fsync the retired log's file (and its pages, in
        // memory) is used again: writing into them is cheaper than into fresh ones.
        let log = match self.sync {
            Fsync::No => LogWriter::reuse(
                self.spare.take(),
                &self.dir.join(SPARE),
                &next_log,
                (self.sync, next),
            )?,
            Fsync::Yes => LogWriter::create(&next_log, self.sync, next)?,
        };
        let written = write_snapshot(&self.dir, self.sync, (next, self.run), &self.applied, state);
        let bytes = match written {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&next_log);
                return Err(e);
            }
        };
        self.snapshot_bytes = bytes;
        let retired = std::mem::replace(&mut self.log, log);
        let old = self.dir.join(format!("log.{}", self.generation));
        self.generation = next;
        self.log_bytes = 0;
        self.lists.clear();
        if self.sync == Fsync::No {
            // Kept for the next generation's log; nothing reads it any more.
            match std::fs::rename(&old, self.dir.join(SPARE)) {
                Ok(()) => {
                    self.spare = Some(retired);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!("checkpoint {}: cannot keep for reuse: {e}", old.display())
                }
            }
        }
        // Renamed at once, removed later: a later checkpoint in this directory may make a
        // new file of the same name before the removal runs.
        let gone = self.dir.join(format!("{GONE}log.{}", next - 1));
        match std::fs::rename(&old, &gone) {
            Ok(()) => remove_later(vec![gone]),
            Err(e) => tracing::warn!("checkpoint {}: cannot move away: {e}", old.display()),
        }
        Ok(())
    }

    /// The current generation (the log `log.G` being appended to).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Writes the snapshot of (generation, run); returns its payload's size.
fn write_snapshot(
    dir: &Path,
    sync: Fsync,
    (generation, run): (u64, u64),
    applied: &Applied,
    state: &[u8],
) -> Result<u64> {
    let applied = applied.encode();
    let mut head = Vec::with_capacity(24);
    head.extend_from_slice(&generation.to_le_bytes());
    head.extend_from_slice(&run.to_le_bytes());
    head.extend_from_slice(&(applied.len() as u64).to_le_bytes());
    let state_len = (state.len() as u64).to_le_bytes();
    let parts = [&head[..], &applied, &state_len, state];
    snapshot::write_parts(&dir.join(SNAPSHOT), &parts, sync)?;
    Ok(parts.iter().map(|p| p.len() as u64).sum())
}

/// A snapshot's payload, read.
pub struct Snap<'b> {
    /// The generation: `log.G` follows it.
    pub generation: u64,
    /// The run it was written in.
    pub run: u64,
    /// The requests applied recently.
    pub applied: Applied,
    /// The handler's state.
    pub state: &'b [u8],
    /// Where the handler's state starts in the payload.
    pub state_at: usize,
}

/// A snapshot's payload: generation, run, applied requests, the handler's state.
///
/// # Errors
/// A text naming the field and its offset in the payload.
pub fn parse_snapshot(payload: &[u8]) -> std::result::Result<Snap<'_>, String> {
    let mut r = Reader::new("snapshot payload", payload);
    let generation = r.u64("the generation")?;
    let run = r.u64("the run id")?;
    let applied = Applied::decode(r.sized("the applied requests")?)?;
    let state = r.sized("the handler's state")?;
    r.finish("the handler's state")?;
    let state_at = payload.len() - state.len();
    Ok(Snap {
        generation,
        run,
        applied,
        state,
        state_at,
    })
}

#[cfg(test)]
mod tests;
