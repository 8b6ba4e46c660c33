//! One `KVServer`'s checkpoint directory: the snapshot, the request log that follows it, and
//! the recently applied requests (issue 13).
//!
//! Files in the directory (`PS_CHECKPOINT_DIR/server-R/appA-T/` for server rank R,
//! application A and value type T):
//! - `snapshot`: the state as of the start of log generation G ([`super::snapshot`] framing);
//!   its payload, little-endian: G `u64`; the applied requests ([`Applied::encode`]) as length
//!   `u64` and bytes; the handler's state ([`RequestHandler::save`](crate::kv::RequestHandler::save),
//!   for the default handler the key store's layout in `kv/store/saved.rs`) as length `u64` and
//!   bytes.
//! - `log.G`: the entries ([`super::record`]) applied since, in [`super::log`] framing.
//!
//! A new snapshot is written to `snapshot.tmp` and renamed over `snapshot` (generation G + 1);
//! only then is `log.G+1` started and `log.G` removed. A crash between the two leaves the new
//! snapshot and no `log.G+1`: nothing is replayed twice.

use super::applied::Applied;
use super::bytes::Reader;
use super::log::{self, LogWriter};
use super::record::Entry;
use super::{snapshot, Fsync};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The snapshot's file name.
pub const SNAPSHOT: &str = "snapshot";

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
}

/// What a restored checkpoint holds: the handler's saved state and the log's bytes, whose
/// entries are to be applied on top in order ([`Restored::entries`]).
pub struct Restored {
    /// The handler's state in the snapshot.
    pub state: Vec<u8>,
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
        let records =
            log::decode(&self.log_name, &self.log).map_err(|d| Error::Corrupt(d.to_string()))?;
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

fn io(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> Error {
    let p = path.display().to_string();
    let what = what.to_string();
    move |e| Error::Config(format!("checkpoint {p}: {what}: {e}"))
}

impl Checkpoint {
    /// Starts a new checkpoint in `dir` (created if missing) for a handler whose state is
    /// `state`: files of an earlier run there are removed, and generation 1 begins.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn create(dir: &Path, sync: Fsync, limit: u64, state: &[u8]) -> Result<Checkpoint> {
        std::fs::create_dir_all(dir).map_err(io(dir, "cannot create the directory"))?;
        for entry in std::fs::read_dir(dir).map_err(io(dir, "cannot list"))? {
            let path = entry.map_err(io(dir, "cannot list"))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name == SNAPSHOT || name.starts_with("log.") || name.ends_with(".tmp") {
                std::fs::remove_file(&path).map_err(io(&path, "cannot remove"))?;
            }
        }
        let applied = Applied::default();
        let snapshot_bytes = write_snapshot(dir, sync, 1, &applied, state)?;
        Ok(Checkpoint {
            log: LogWriter::open(&dir.join("log.1"), sync)?,
            dir: dir.to_path_buf(),
            sync,
            generation: 1,
            log_bytes: 0,
            snapshot_bytes,
            limit,
            applied,
            lists: Default::default(),
        })
    }

    /// Reads the checkpoint in `dir` without changing it (for `pslite-launch inspect`): the
    /// snapshot's generation, applied requests and handler state, and the log's whole records
    /// (a torn last record left out).
    ///
    /// # Errors
    /// [`Error::Config`] when a file is missing or unreadable; [`Error::Corrupt`] naming the
    /// file and offset of any damage.
    pub fn read(dir: &Path) -> Result<(u64, Applied, Restored)> {
        let snap_path = dir.join(SNAPSHOT);
        let payload = snapshot::read(&snap_path)?;
        let (generation, applied, state) = parse_snapshot(&payload).map_err(|e| {
            corrupt(
                &snap_path.display().to_string(),
                snapshot::HEADER as u64,
                &e,
            )
        })?;
        let log_path = dir.join(format!("log.{generation}"));
        let log_name = log_path.display().to_string();
        let mut log = match std::fs::read(&log_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(&log_path, "cannot read")(e)),
        };
        let torn = log::decode(&log_name, &log)
            .map_err(|d| Error::Corrupt(d.to_string()))?
            .torn_at;
        if let Some(at) = torn {
            log.truncate(at as usize);
        }
        let restored = Restored {
            state: state.to_vec(),
            log_name,
            log,
            torn_at: torn,
            snapshot_bytes: payload.len() as u64,
        };
        Ok((generation, applied, restored))
    }

    /// Opens the checkpoint in `dir` to restore it: [`read`](Self::read), then a torn last
    /// record is cut off the log file, and appending carries on in that log.
    ///
    /// # Errors
    /// As [`read`](Self::read); [`Error::Config`] when the log cannot be cut or opened.
    pub fn open(dir: &Path, sync: Fsync, limit: u64) -> Result<(Checkpoint, Restored)> {
        let (generation, applied, restored) = Checkpoint::read(dir)?;
        let log_path = dir.join(format!("log.{generation}"));
        if let Some(at) = restored.torn_at {
            tracing::warn!(
                "{}: cut off a torn last record at byte {at} (written when the server died, \
                 never answered)",
                restored.log_name
            );
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&log_path)
                .map_err(io(&log_path, "cannot open"))?;
            f.set_len(at).map_err(io(&log_path, "cannot truncate"))?;
        }
        let cp = Checkpoint {
            log: LogWriter::open(&log_path, sync)?,
            dir: dir.to_path_buf(),
            sync,
            generation,
            log_bytes: restored.log.len() as u64,
            snapshot_bytes: restored.snapshot_bytes,
            limit,
            applied,
            lists: Default::default(),
        };
        Ok((cp, restored))
    }

    /// Appends `entry` to the log (and records an applied request as applied): when this
    /// returns, it survives the process's death (with `PS_CHECKPOINT_SYNC=1`, a crash).
    ///
    /// # Errors
    /// [`Error::Config`] naming the log and the OS error.
    pub fn append(&mut self, entry: &Entry<'_>) -> Result<()> {
        let mut scratch = Vec::new();
        self.log_bytes += self.log.append_parts(&entry.parts(&mut scratch))?;
        self.note(entry);
        Ok(())
    }

    /// Records what `entry` says (when replaying the log): a request applied, a sender
    /// forgotten, a key list logged.
    pub fn note(&mut self, entry: &Entry<'_>) {
        match entry {
            Entry::Applied(r) => self.applied.insert(r.sender, r.customer, r.timestamp),
            Entry::Forget(s) => self.applied.forget(*s),
            Entry::KeyList {
                sender,
                customer,
                digest,
                ..
            } => {
                self.lists.insert((*sender, *customer, *digest));
            }
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
    /// as the next generation, starts its log and removes the previous one.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error; the old generation stays in use.
    pub fn snapshot(&mut self, state: &[u8]) -> Result<()> {
        let next = self.generation + 1;
        self.snapshot_bytes = write_snapshot(&self.dir, self.sync, next, &self.applied, state)?;
        self.log = LogWriter::open(&self.dir.join(format!("log.{next}")), self.sync)?;
        let old = self.dir.join(format!("log.{}", self.generation));
        self.generation = next;
        self.log_bytes = 0;
        self.lists.clear();
        std::fs::remove_file(&old).map_err(io(&old, "cannot remove"))
    }

    /// The current generation (the log `log.G` being appended to).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// Writes the snapshot of generation `generation`; returns its payload's size.
fn write_snapshot(
    dir: &Path,
    sync: Fsync,
    generation: u64,
    applied: &Applied,
    state: &[u8],
) -> Result<u64> {
    let applied = applied.encode();
    let mut payload = Vec::with_capacity(24 + applied.len() + state.len());
    payload.extend_from_slice(&generation.to_le_bytes());
    payload.extend_from_slice(&(applied.len() as u64).to_le_bytes());
    payload.extend_from_slice(&applied);
    payload.extend_from_slice(&(state.len() as u64).to_le_bytes());
    payload.extend_from_slice(state);
    snapshot::write(&dir.join(SNAPSHOT), &payload, sync)?;
    Ok(payload.len() as u64)
}

/// A snapshot's payload: generation, applied requests, the handler's state.
///
/// # Errors
/// A text naming the field and its offset in the payload.
pub fn parse_snapshot(payload: &[u8]) -> std::result::Result<(u64, Applied, &[u8]), String> {
    let mut r = Reader::new("snapshot payload", payload);
    let generation = r.u64("the generation")?;
    let applied = Applied::decode(r.sized("the applied requests")?)?;
    let state = r.sized("the handler's state")?;
    r.finish("the handler's state")?;
    Ok((generation, applied, state))
}
