//! The request log: records appended one at a time, read back in order.
//!
//! A record (little-endian): payload length `u32`, crc32c `u32` of those 4 length bytes,
//! crc32c `u32` of the payload, the payload. Reading stops at the end of the file. A record cut
//! short there (fewer than 12 header bytes left, or a whole header whose payload is cut) is a
//! torn tail: the writer died before the record was complete, so before it was acknowledged;
//! [`decode`] says where it starts and the caller truncates the file there. A flipped byte
//! anywhere else fails a checksum: [`Damage`] names the offset. The length has its own
//! checksum so that damage to it cannot pass for a torn tail.

use super::{le32, Damage, Fsync};
use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

const HEADER: usize = 12;

/// Parts of a record shorter than this are gathered into one write; longer ones are written
/// from where they are.
const COPY_BELOW: usize = 64 << 10;

/// A record's bytes in the log.
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc32c::crc32c(&len).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// What a log holds: its whole records in order, and where a torn tail starts (`None` when
/// the file ends with a whole record).
#[derive(Debug, PartialEq, Eq)]
pub struct Records<'b> {
    /// Each record's payload, with its offset in the file.
    pub records: Vec<(u64, &'b [u8])>,
    /// Offset of a torn last record, to be cut off.
    pub torn_at: Option<u64>,
}

/// The records of log file `file`'s bytes.
///
/// # Errors
/// [`Damage`] naming the record's offset: a length or payload checksum mismatch.
pub fn decode<'b>(file: &str, bytes: &'b [u8]) -> Result<Records<'b>, Damage> {
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < HEADER {
            return Ok(Records {
                records,
                torn_at: Some(at as u64),
            });
        }
        let damage = |what: String| Damage {
            file: file.to_string(),
            offset: at as u64,
            what,
        };
        if crc32c::crc32c(&rest[..4]) != le32(&rest[4..8]) {
            return Err(damage("record length checksum mismatch".into()));
        }
        let len = le32(&rest[..4]) as usize;
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return Ok(Records {
                records,
                torn_at: Some(at as u64),
            });
        };
        if crc32c::crc32c(payload) != le32(&rest[8..12]) {
            return Err(damage(format!(
                "record payload checksum mismatch ({len} bytes)"
            )));
        }
        records.push((at as u64, payload));
        at += HEADER + len;
    }
    Ok(Records {
        records,
        torn_at: None,
    })
}

/// An open log file that records are appended to.
pub struct LogWriter {
    file: std::fs::File,
    path: String,
    sync: Fsync,
    /// Bytes in the file (where the next record starts).
    len: u64,
    /// Bytes of disk reserved for the file (beyond `len`: preallocated, see [`PREALLOCATE`]).
    reserved: u64,
}

/// Disk space is reserved for the log this many bytes ahead (`fallocate` keeping the size, so
/// the file still ends after its last record): appending into reserved blocks skips the file
/// system's block allocation on the answer's path.
const PREALLOCATE: u64 = 64 << 20;

impl LogWriter {
    /// Opens (or creates) the log at `path` for appending; with [`Fsync::Yes`] every append is
    /// fsynced before it returns.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn open(path: &Path, sync: Fsync) -> Result<LogWriter> {
        LogWriter::opened(path, sync, false)
    }

    /// Creates the log at `path` empty (an existing file is truncated), for appending.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn create(path: &Path, sync: Fsync) -> Result<LogWriter> {
        LogWriter::opened(path, sync, true)
    }

    fn opened(path: &Path, sync: Fsync, empty: bool) -> Result<LogWriter> {
        let io = |e: std::io::Error| {
            Error::Config(format!("checkpoint {}: cannot open: {e}", path.display()))
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if empty {
            file.set_len(0).map_err(io)?;
        }
        let len = file.metadata().map_err(io)?.len();
        Ok(LogWriter {
            file,
            path: path.display().to_string(),
            sync,
            len,
            reserved: len,
        })
    }

    /// Appends one record: when this returns, the record survives the process's death (and,
    /// with [`Fsync::Yes`], the machine's crash).
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        self.append_parts(&[payload]).map(|_| ())
    }

    /// Appends one record whose payload is `parts` one after the other, without copying the
    /// large parts (a pushed frame goes from the message to the file); returns the record's
    /// bytes in the file. Same guarantees as [`append`](Self::append). A failed append is
    /// cut off the file again, so later records do not follow half of one.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error, or a payload over 4 GiB.
    pub fn append_parts(&mut self, parts: &[&[u8]]) -> Result<u64> {
        let start = self.len;
        let need = start + (HEADER + parts.iter().map(|p| p.len()).sum::<usize>()) as u64;
        if need > self.reserved {
            self.reserve(need + PREALLOCATE);
        }
        let written = self.write_record(parts);
        match written {
            Ok(n) => {
                self.len += n;
                Ok(n)
            }
            Err(e) => {
                if let Err(cut) = self.file.set_len(start) {
                    return Err(Error::Config(format!(
                        "{e}; and the part written cannot be cut off ({cut}): the log is \
                         damaged from byte {start}"
                    )));
                }
                Err(e)
            }
        }
    }

    /// Reserves disk blocks for the file up to `until` bytes, keeping its size (best effort:
    /// a file system without `fallocate` allocates as it writes).
    fn reserve(&mut self, until: u64) {
        use std::os::fd::AsRawFd;
        let (from, len) = (self.reserved, until - self.reserved);
        // SAFETY: fallocate(2) on the descriptor this writer owns; it changes no bytes.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                from as libc::off_t,
                len as libc::off_t,
            )
        };
        self.reserved = if r == 0 { until } else { u64::MAX };
    }

    fn write_record(&mut self, parts: &[&[u8]]) -> Result<u64> {
        let io = |e: std::io::Error| Error::Config(format!("checkpoint {}: {e}", self.path));
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(total).map_err(|_| {
            Error::Config(format!(
                "checkpoint {}: a record of {total} bytes (at most 4 GiB)",
                self.path
            ))
        })?;
        let crc = parts.iter().fold(0, |c, p| crc32c::crc32c_append(c, p));
        let len = len.to_le_bytes();
        let mut small = Vec::with_capacity(HEADER + 256);
        small.extend_from_slice(&len);
        small.extend_from_slice(&crc32c::crc32c(&len).to_le_bytes());
        small.extend_from_slice(&crc.to_le_bytes());
        for p in parts {
            if p.len() < COPY_BELOW {
                small.extend_from_slice(p);
            } else {
                self.file.write_all(&small).map_err(io)?;
                small.clear();
                self.file.write_all(p).map_err(io)?;
            }
        }
        self.file.write_all(&small).map_err(io)?;
        if self.sync == Fsync::Yes {
            self.file.sync_data().map_err(io)?;
        }
        Ok((HEADER + total) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn log_of(payloads: &[Vec<u8>]) -> Vec<u8> {
        payloads.iter().flat_map(|p| encode(p)).collect()
    }

    fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8)
    }

    proptest! {
        /// Cut anywhere, a log yields the records wholly before the cut, and a torn tail
        /// exactly when the cut is inside a record.
        #[test]
        fn a_truncated_log_yields_a_prefix_of_its_records(ps in payloads(), cut in any::<prop::sample::Index>()) {
            let bytes = log_of(&ps);
            let cut = cut.index(bytes.len() + 1);
            let r = decode("log", &bytes[..cut]).expect("a truncation is not damage");
            let mut ends = Vec::new();
            let mut at = 0;
            for p in &ps {
                at += HEADER + p.len();
                ends.push(at);
            }
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            let got: Vec<&[u8]> = r.records.iter().map(|(_, p)| *p).collect();
            let want: Vec<&[u8]> = ps[..whole].iter().map(|p| &p[..]).collect();
            prop_assert_eq!(got, want);
            let boundary = cut == 0 || ends.contains(&cut);
            prop_assert_eq!(r.torn_at.is_none(), boundary);
        }

        /// A flipped byte anywhere in a whole log is an error naming the record it is in.
        #[test]
        fn a_flipped_byte_is_an_error(ps in payloads(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
            prop_assume!(!ps.is_empty());
            let mut bytes = log_of(&ps);
            let i = at.index(bytes.len());
            bytes[i] ^= flip;
            let e = decode("requests.log", &bytes).expect_err("damage is found");
            let start = ps
                .iter()
                .scan(0usize, |a, p| { let s = *a; *a += HEADER + p.len(); Some(s) })
                .filter(|&s| s <= i)
                .last()
                .unwrap_or(0);
            prop_assert_eq!(e.offset, start as u64);
            prop_assert_eq!(e.file, "requests.log");
        }
    }

    #[test]
    fn appended_records_are_read_back_after_reopening() {
        let path = std::env::temp_dir().join(format!("pslite-log-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut w = LogWriter::open(&path, Fsync::No).expect("open");
        w.append(b"push 1").expect("append");
        w.append(b"").expect("an empty record");
        drop(w);
        let mut w = LogWriter::open(&path, Fsync::Yes).expect("reopen");
        w.append(b"push 2").expect("append");
        let bytes = std::fs::read(&path).expect("read");
        let r = decode("l", &bytes).expect("whole");
        let got: Vec<&[u8]> = r.records.iter().map(|(_, p)| *p).collect();
        assert_eq!(got, vec![&b"push 1"[..], b"", b"push 2"]);
        assert_eq!(r.torn_at, None);
        std::fs::remove_file(&path).expect("cleaned");
    }
}
