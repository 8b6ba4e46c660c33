//! Durable server state (`KVServer`'s side is [`crate::kv::server`]'s `durable.rs`): the on-disk
//! framing of a server's checkpoint — snapshot files and the request log — with checksums that
//! turn every damage into an error naming the file and the byte offset, never into silently
//! wrong values.
//!
//! - [`snapshot`]: one whole state per file (`PSLSNAP1` magic, format version, length, payload,
//!   crc32c of all before), written to a temporary file and renamed into place, so a reader
//!   sees the old file or the new one, never half of one.
//! - [`log`]: records appended one by one, each with a crc32c of its length (and the log's
//!   generation) and one of its payload, padded to 16 bytes and followed by a zero terminator,
//!   so that a retired log's file can be reused for the next generation. A record cut short at
//!   the end of the file (a crash while writing it, before it was acknowledged) is a torn
//!   tail: reported, and the records before it are whole. Any other damage is an error.
//!
//! - [`bytes`]: a cursor for handlers reading their saved state back, naming field and offset.
//!
//! The encoding and decoding are pure functions over bytes (property-tested: any truncation of
//! a log yields a prefix of its records, any flipped byte of a snapshot or log is an error);
//! the file functions around them only read, write, rename and (if asked) fsync.

pub mod applied;
pub mod bytes;
pub mod checkpoint;
pub mod log;
mod mapped;
mod prefault;
pub mod record;
pub mod snapshot;

use std::fmt;

/// Damage found in a checkpoint file: which file, where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The file (its path as given).
    pub file: String,
    /// Byte offset in the file where the damaged part starts.
    pub offset: u64,
    /// What is wrong, e.g. "record checksum mismatch".
    pub what: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: damaged at byte {}: {}",
            self.file, self.offset, self.what
        )
    }
}

/// Whether writes are flushed to the device (`PS_CHECKPOINT_SYNC`): without, a write survives
/// the process's death (it is in the page cache) but not the machine's crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// Leave flushing to the kernel.
    No,
    /// `fsync` the file (and, after a rename, its directory) before returning.
    Yes,
}

/// The little-endian `u32` in the first 4 bytes of `b` (the caller checked there are 4).
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// crc32c (Castagnoli) of `parts` one after the other: the checksum of log records and
/// snapshots.
pub use crate::wire::crc32c;
