//! The request log: records appended one at a time, read back in order.
//!
//! A record (little-endian): payload length `u32`, crc32c `u32` of those 4 length bytes and
//! the log's generation (`u64`), crc32c `u32` of the payload, the payload, then zero bytes up
//! to the next multiple of [`ALIGN`]. Every append also writes [`TERMINATOR`] zero bytes after
//! its record: reading stops at a record header of zeros (or at the end of the file). So a
//! log file can be *reused* — a retired log becomes the next generation's with a terminator
//! written at its start, and its pages, already in memory, are overwritten instead of fresh
//! ones being allocated on the answer's path (`PS_CHECKPOINT_SYNC=0`; issue 13's cost) — and
//! what follows the terminator, left from the file's earlier use, is never read; the
//! generation in the length checksum keeps a stale record from passing for a current one.
//!
//! Without fsync (process death is what must be survived) an append writes the payload, its
//! padding and the terminator first and the 12-byte header last: a process killed in between
//! leaves the previous terminator in place, so the log ends before the record, which was never
//! acknowledged. Headers never cross a page (records start at multiples of [`ALIGN`]), so the
//! header's write is never cut in two. With fsync (the file is cut to the log's end when opened)
//! a record goes out in order, header first, over the last terminator and past the file's
//! end: a machine crash can leave a record cut short by the end of the file — a torn tail
//! (fewer than 12 header bytes left, or a header whose payload or padding is cut) — which
//! [`decode`] reports where it starts; the caller cuts the file there. A flipped byte
//! anywhere else fails a checksum or the zero padding: [`Damage`] names the offset. The
//! length has its own checksum so that damage to it cannot pass for a torn tail.

use super::{le32, Damage, Fsync};
use crate::error::{Error, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;

const HEADER: usize = 12;

/// Records start at multiples of this many bytes (a header never crosses a 4 KiB page).
pub const ALIGN: usize = 16;

/// Zero bytes written after every record, where reading stops.
pub const TERMINATOR: usize = 16;

/// Parts of a record shorter than this are gathered into one write; longer ones are written
/// from where they are.
const COPY_BELOW: usize = 64 << 10;

/// `n` rounded up to a multiple of [`ALIGN`].
fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The header of a record of `len` payload bytes whose crc32c is `crc`, in log `generation`.
fn header(len: u32, crc: u32, generation: u64) -> [u8; HEADER] {
    let len = len.to_le_bytes();
    let check = crc32c::crc32c_append(crc32c::crc32c(&len), &generation.to_le_bytes());
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(&len);
    h[4..8].copy_from_slice(&check.to_le_bytes());
    h[8..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A record's bytes in log `generation`, padding included (not the terminator).
pub fn encode(generation: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = header(payload.len() as u32, crc32c::crc32c(payload), generation).to_vec();
    out.extend_from_slice(payload);
    out.resize(aligned(out.len()), 0);
    out
}

/// What a log holds: its whole records in order, where they end, and where a torn tail
/// starts (`None` when the log ends cleanly).
#[derive(Debug, PartialEq, Eq)]
pub struct Records<'b> {
    /// Each record's payload, with its offset in the file.
    pub records: Vec<(u64, &'b [u8])>,
    /// Where the next record goes: after the last whole record.
    pub end: u64,
    /// Offset of a torn last record, to be cut off (it equals `end`).
    pub torn_at: Option<u64>,
}

/// The records of log file `file`'s bytes, of log `generation`.
///
/// # Errors
/// [`Damage`] naming the record's offset: a length or payload checksum mismatch, or nonzero
/// padding.
pub fn decode<'b>(file: &str, generation: u64, bytes: &'b [u8]) -> Result<Records<'b>, Damage> {
    let mut records = Vec::new();
    let mut at = 0usize;
    let done = |records, at: usize, torn: bool| {
        Ok(Records {
            records,
            end: at as u64,
            torn_at: torn.then_some(at as u64),
        })
    };
    loop {
        let rest = &bytes[at.min(bytes.len())..];
        if rest[..rest.len().min(HEADER)].iter().all(|&b| b == 0) {
            return done(records, at, false);
        }
        if rest.len() < HEADER {
            return done(records, at, true);
        }
        let damage = |what: String| Damage {
            file: file.to_string(),
            offset: at as u64,
            what,
        };
        let len = le32(&rest[..4]);
        if header(len, 0, generation)[4..8] != rest[4..8] {
            return Err(damage(format!(
                "record length checksum mismatch (damaged, or a record of another log than \
                 generation {generation})"
            )));
        }
        let len = len as usize;
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return done(records, at, true);
        };
        if crc32c::crc32c(payload) != le32(&rest[8..12]) {
            return Err(damage(format!(
                "record payload checksum mismatch ({len} bytes)"
            )));
        }
        // Padding cut by the end of the file: the record's write did not complete either.
        let Some(pad) = rest.get(HEADER + len..aligned(HEADER + len)) else {
            return done(records, at, true);
        };
        if pad.iter().any(|&b| b != 0) {
            return Err(damage("nonzero padding after the record".into()));
        }
        records.push((at as u64, payload));
        at += aligned(HEADER + len);
    }
}

/// An open log file that records are appended to.
pub struct LogWriter {
    file: std::fs::File,
    path: String,
    sync: Fsync,
    generation: u64,
    /// Where the next record starts (the terminator after the last one is there).
    len: u64,
    /// Bytes of disk the file has (its size, or more: preallocated, see [`PREALLOCATE`]).
    reserved: u64,
}

/// Disk space is reserved for the log this many bytes ahead (`fallocate` keeping the size, so
/// the file still ends after its last record): appending into reserved blocks skips the file
/// system's block allocation on the answer's path.
const PREALLOCATE: u64 = 64 << 20;

impl LogWriter {
    /// Opens the log of `generation` at `path` for appending after its first `end` bytes (the
    /// [`Records::end`] of its contents); with [`Fsync::Yes`] every append is fsynced before
    /// it returns, and the file is cut to `end` first (fsynced appends go to the file's end).
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn open(path: &Path, sync: Fsync, generation: u64, end: u64) -> Result<LogWriter> {
        LogWriter::opened(path, sync, generation, Some(end))
    }

    /// Creates the log of `generation` at `path` empty (an existing file is truncated).
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn create(path: &Path, sync: Fsync, generation: u64) -> Result<LogWriter> {
        LogWriter::opened(path, sync, generation, None)
    }

    /// The log of `generation` at `path`, made of the retired log `spare` when there is one
    /// (a terminator written at its start, then renamed to `path`: its pages are reused), else
    /// created empty.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn reuse(spare: &Path, path: &Path, sync: Fsync, generation: u64) -> Result<LogWriter> {
        let io = |what: &'static str| {
            move |e: std::io::Error| {
                Error::Config(format!("checkpoint {}: {what}: {e}", spare.display()))
            }
        };
        let file = match std::fs::OpenOptions::new().write(true).open(spare) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return LogWriter::create(path, sync, generation)
            }
            Err(e) => return Err(io("cannot open")(e)),
        };
        file.write_all_at(&[0; TERMINATOR], 0)
            .map_err(io("cannot write"))?;
        std::fs::rename(spare, path).map_err(io("cannot rename"))?;
        LogWriter::with_file(file, path, sync, generation, Some(0))
    }

    fn opened(path: &Path, sync: Fsync, generation: u64, end: Option<u64>) -> Result<LogWriter> {
        let io = |e: std::io::Error| {
            Error::Config(format!("checkpoint {}: cannot open: {e}", path.display()))
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(end.is_none())
            .write(true)
            .open(path)
            .map_err(io)?;
        LogWriter::with_file(file, path, sync, generation, end)
    }

    /// The writer of `file` (open at `path`), appending after its first `end` bytes (`None`:
    /// an empty file).
    fn with_file(
        file: std::fs::File,
        path: &Path,
        sync: Fsync,
        generation: u64,
        end: Option<u64>,
    ) -> Result<LogWriter> {
        let io = |e: std::io::Error| {
            Error::Config(format!("checkpoint {}: cannot open: {e}", path.display()))
        };
        let mut size = file.metadata().map_err(io)?.len();
        if let (Fsync::Yes, Some(end)) = (sync, end) {
            if size != end {
                file.set_len(end).map_err(io)?;
                size = end;
            }
        }
        Ok(LogWriter {
            file,
            path: path.display().to_string(),
            sync,
            generation,
            len: end.unwrap_or(0),
            reserved: size,
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
    /// bytes in the file. Same guarantees as [`append`](Self::append). A failed append leaves
    /// the log ending where it ended (its terminator is rewritten).
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error, or a payload over 4 GiB.
    pub fn append_parts(&mut self, parts: &[&[u8]]) -> Result<u64> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(total).map_err(|_| {
            Error::Config(format!(
                "checkpoint {}: a record of {total} bytes (at most 4 GiB)",
                self.path
            ))
        })?;
        let size = aligned(HEADER + total) as u64;
        let need = self.len + size + TERMINATOR as u64;
        if need > self.reserved {
            self.reserve(need + PREALLOCATE);
        }
        let crc = parts.iter().fold(0, |c, p| crc32c::crc32c_append(c, p));
        let head = header(len, crc, self.generation);
        match self.write_record(&head, parts, size) {
            Ok(()) => {
                self.len += size;
                Ok(size)
            }
            Err(e) => {
                // The header goes last (or with fsync, the file's end is cut back): put the
                // terminator back where the log ends.
                let mended = match self.sync {
                    Fsync::Yes => self
                        .file
                        .set_len(self.len)
                        .inspect(|()| self.reserved = self.len),
                    Fsync::No => self.file.write_all_at(&[0; HEADER], self.len),
                };
                match mended {
                    Ok(()) => Err(e),
                    Err(m) => Err(Error::Config(format!(
                        "{e}; and the log cannot be mended ({m}): it may be damaged from byte {}",
                        self.len
                    ))),
                }
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

    /// Writes a record of `size` bytes (header `head`, payload `parts`, padding) and the
    /// terminator after it at the log's end: the header first with fsync (then one fsync),
    /// last without.
    fn write_record(&mut self, head: &[u8; HEADER], parts: &[&[u8]], size: u64) -> Result<()> {
        let io = |e: std::io::Error| Error::Config(format!("checkpoint {}: {e}", self.path));
        let header_last = self.sync == Fsync::No;
        let mut at = self.len + HEADER as u64;
        let mut small = Vec::with_capacity(256);
        if !header_last {
            small.extend_from_slice(head);
            at = self.len;
        }
        for p in parts {
            if p.len() < COPY_BELOW {
                small.extend_from_slice(p);
            } else {
                self.file.write_all_at(&small, at).map_err(io)?;
                at += small.len() as u64;
                small.clear();
                self.file.write_all_at(p, at).map_err(io)?;
                at += p.len() as u64;
            }
        }
        let tail = (self.len + size + TERMINATOR as u64) - (at + small.len() as u64);
        small.resize(small.len() + tail as usize, 0);
        self.file.write_all_at(&small, at).map_err(io)?;
        if header_last {
            self.file.write_all_at(head, self.len).map_err(io)?;
        }
        if self.sync == Fsync::Yes {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GEN: u64 = 7;

    /// The records of `payloads` as a writer leaves them: each padded, a terminator after.
    fn log_of(payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out: Vec<u8> = payloads.iter().flat_map(|p| encode(GEN, p)).collect();
        out.extend_from_slice(&[0; TERMINATOR]);
        out
    }

    /// Each record's (start, end with its padding) in [`log_of`]'s bytes.
    fn spans(payloads: &[Vec<u8>]) -> Vec<(usize, usize)> {
        let mut at = 0;
        payloads
            .iter()
            .map(|p| {
                let span = (at, at + aligned(HEADER + p.len()));
                at = span.1;
                span
            })
            .collect()
    }

    fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8)
    }

    proptest! {
        /// Cut anywhere, a log yields the records (with their padding) wholly before the cut
        /// and ends inside the file; a torn tail is reported only where the first record not
        /// whole starts, and never when the cut is at a record's start or after the last one.
        #[test]
        fn a_truncated_log_yields_a_prefix_of_its_records(ps in payloads(), cut in any::<prop::sample::Index>()) {
            let bytes = log_of(&ps);
            let cut = cut.index(bytes.len() + 1);
            let r = decode("log", GEN, &bytes[..cut]).expect("a truncation is not damage");
            let spans = spans(&ps);
            let whole = spans.iter().filter(|&&(_, end)| end <= cut).count();
            let got: Vec<&[u8]> = r.records.iter().map(|(_, p)| *p).collect();
            let want: Vec<&[u8]> = ps[..whole].iter().map(|p| &p[..]).collect();
            prop_assert_eq!(got, want);
            prop_assert!(r.end as usize <= cut, "the end is inside the file");
            if let Some(&(start, _)) = spans.get(whole) {
                prop_assert!(r.torn_at.is_none() || r.torn_at == Some(start as u64));
                if cut == start {
                    prop_assert_eq!(r.torn_at, None);
                }
            } else {
                prop_assert_eq!(r.torn_at, None);
            }
        }

        /// A flipped byte anywhere in a whole log (its terminator's header bytes included) is
        /// an error naming the record it is in.
        #[test]
        fn a_flipped_byte_is_an_error(ps in payloads(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
            let mut bytes = log_of(&ps);
            let end = bytes.len() - TERMINATOR;
            let i = at.index(end + HEADER);
            bytes[i] ^= flip;
            let e = decode("requests.log", GEN, &bytes).expect_err("damage is found");
            let start = spans(&ps)
                .iter()
                .map(|&(s, _)| s)
                .chain([end])
                .rfind(|&s| s <= i)
                .unwrap_or(0);
            prop_assert_eq!(e.offset, start as u64);
            prop_assert_eq!(e.file, "requests.log");
        }

        /// A record of another generation (a reused file's stale contents) is not read as one
        /// of this log.
        #[test]
        fn a_record_of_another_generation_is_refused(p in proptest::collection::vec(any::<u8>(), 0..40)) {
            let bytes = log_of(&[p]);
            let e = decode("log.8", GEN + 1, &bytes).expect_err("not this generation's");
            prop_assert_eq!(e.offset, 0);
            prop_assert!(e.what.contains("another log than generation 8"));
        }
    }

    fn temp_log(name: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("pslite-{name}-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    fn read_back(path: &Path, generation: u64) -> (Vec<Vec<u8>>, u64) {
        let bytes = std::fs::read(path).expect("read");
        let r = decode("l", generation, &bytes).expect("whole");
        assert_eq!(r.torn_at, None);
        (r.records.iter().map(|(_, p)| p.to_vec()).collect(), r.end)
    }

    #[test]
    fn appended_records_are_read_back_after_reopening() {
        let path = temp_log("log");
        let mut w = LogWriter::create(&path, Fsync::No, 3).expect("create");
        w.append(b"push 1").expect("append");
        w.append(b"").expect("an empty record");
        w.append(&[9; 100 << 10])
            .expect("a large one, written from where it is");
        drop(w);
        let (got, end) = read_back(&path, 3);
        assert_eq!(got.len(), 3);
        let mut w = LogWriter::open(&path, Fsync::Yes, 3, end).expect("reopen");
        w.append(b"push 2").expect("append");
        let (got, _) = read_back(&path, 3);
        assert_eq!(got[..2], [b"push 1".to_vec(), Vec::new()]);
        assert_eq!(got[2], vec![9; 100 << 10]);
        assert_eq!(got[3], b"push 2".to_vec());
        std::fs::remove_file(&path).expect("cleaned");
    }

    #[test]
    fn a_reused_log_reads_empty_and_then_holds_only_its_own_records() {
        let (spare, path) = (temp_log("spare"), temp_log("reused"));
        let mut w = LogWriter::create(&spare, Fsync::No, 1).expect("create");
        for i in 0..50u8 {
            w.append(&[i; 300]).expect("append");
        }
        drop(w);
        let mut w = LogWriter::reuse(&spare, &path, Fsync::No, 3).expect("reused");
        assert!(!spare.exists(), "renamed");
        assert_eq!(
            read_back(&path, 3).0.len(),
            0,
            "the old records are behind the terminator"
        );
        w.append(b"new").expect("append");
        assert_eq!(read_back(&path, 3).0, vec![b"new".to_vec()]);
        assert!(
            std::fs::metadata(&path).expect("log").len() > 50 * 300,
            "the old file's bytes are kept (and overwritten)"
        );
        let fresh = LogWriter::reuse(&spare, &temp_log("fresh"), Fsync::No, 4).expect("created");
        assert_eq!(fresh.len, 0, "no spare: a new file");
        std::fs::remove_file(&path).expect("cleaned");
        let _ = std::fs::remove_file(temp_log("fresh"));
    }

    #[test]
    fn a_process_killed_before_the_header_leaves_the_log_ending_before_the_record() {
        let path = temp_log("headless");
        let mut w = LogWriter::create(&path, Fsync::No, 2).expect("create");
        w.append(b"kept").expect("append");
        drop(w);
        let end = read_back(&path, 2).1;
        // What a kill after the payload and terminator, before the header, leaves.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        f.write_all_at(&[5; 40], end + HEADER as u64)
            .expect("payload");
        f.write_all_at(&[0; TERMINATOR], end + 64)
            .expect("terminator");
        assert_eq!(read_back(&path, 2), (vec![b"kept".to_vec()], end));
        std::fs::remove_file(&path).expect("cleaned");
    }
}
