//! A checkpoint directory's files besides the snapshot and the log: its lock (one process uses
//! it at a time), and files no longer read, removed on a thread of their own (an earlier run's,
//! renamed to `gone.` + their name; logs a crash left).

use super::{io, SPARE};
use crate::error::{Error, Result};
use crate::kv::durable::Fsync;
use std::path::{Path, PathBuf};

/// How long [`lock_dir`] waits for another process to release a checkpoint directory (a
/// killed server's descriptors close a moment after it died).
pub(super) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Takes `dir`'s lock file, waiting up to [`LOCK_WAIT`] for another holder to go.
///
/// # Errors
/// [`Error::Config`]: another process still holds it (the server being replaced still runs,
/// paused say), or the file cannot be made.
pub(super) fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path, "cannot open"))?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    // SAFETY: flock(2) on a descriptor this function owns.
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if std::time::Instant::now() >= deadline {
            return Err(Error::Config(format!(
                "checkpoint {} is in use by another process (for {} s): is the server it \
                 belongs to still running (paused, say)? Stop it first",
                dir.display(),
                LOCK_WAIT.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(f)
}

/// Files of an earlier run are renamed to `gone.` + their name before they are removed.
pub(super) const GONE: &str = "gone.";

/// Removes `files` on a thread of its own: removing a large file (freeing, discarding its
/// blocks) can take a while, and nothing reads these any more. Where no thread can be started
/// they stay (files of an earlier run as `gone.`, removed by the next [`Checkpoint::create`](super::Checkpoint::create)).
pub(super) fn remove_later(files: Vec<PathBuf>) {
    if files.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("checkpoint-rm".into())
        .spawn(move || {
            for f in files {
                match std::fs::remove_file(&f) {
                    // Removed meanwhile by another checkpoint's thread (a create listed it).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => tracing::warn!("checkpoint {}: cannot remove: {e}", f.display()),
                    Ok(()) => {}
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start a thread to remove checkpoint files: {e}");
    }
}

/// Removes the logs in `dir` other than `current` that a crash left (a `log.G+1` created before
/// its snapshot's rename; a `log.G` after it), and with fsync the spare (not reused then).
///
/// # Errors
/// [`Error::Config`] naming the directory or file and the OS error.
pub(super) fn remove_other_logs(dir: &Path, current: &Path, sync: Fsync) -> Result<()> {
    let mut gone = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir, "cannot list"))? {
        let path = entry.map_err(io(dir, "cannot list"))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let other_log = name.starts_with("log.") && name != SPARE && path != current;
        if other_log || (name == SPARE && sync == Fsync::Yes) {
            std::fs::remove_file(&path).map_err(io(&path, "cannot remove"))?;
        } else if name.starts_with(GONE) {
            // Left by a server killed before its thread removed them.
            gone.push(path);
        }
    }
    remove_later(gone);
    Ok(())
}
