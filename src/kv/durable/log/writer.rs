//! Appending records to a log file (the format is in [`super`]).

use super::{aligned, header, Fsync, HEADER, TERMINATOR};
use crate::error::{Error, Result};
use crate::kv::durable::mapped::Mapped;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Parts of a record shorter than this are gathered into one write; longer ones are written
/// from where they are.
const COPY_BELOW: usize = 64 << 10;

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
    /// Without fsync: the file mapped, records written with stores ([`crate::kv::durable::mapped`]), made
    /// at the first append. `Err` once mapping failed: `pwrite` from then on.
    map: std::result::Result<Option<Mapped>, ()>,
}

/// A record written after the log's end but not yet part of it ([`LogWriter::prepare`]).
#[must_use = "a prepared record is not in the log until it is committed"]
pub struct Prepared {
    /// Where the record starts: the log's end when it was prepared.
    at: u64,
    /// The record's bytes, padding included.
    size: u64,
    /// The payload's bytes.
    len: u32,
    /// The payload's crc32c, once its bytes are written (without fsync).
    crc: Option<u32>,
    /// Written through the mapping.
    mapped: bool,
}

/// Disk space is reserved for the log this many bytes ahead (`fallocate` keeping the size, so
/// the file still ends after its last record): appending into reserved blocks skips the file
/// system's block allocation on the answer's path.
const PREALLOCATE: u64 = 64 << 20;

impl LogWriter {
    /// Opens the log of `generation` at `path` for appending after its first `end` bytes (the
    /// [`end`](super::Records::end) of its contents); with [`Fsync::Yes`] every append is
    /// fsynced before it returns, and the file is cut to `end` first (fsynced appends go to the file's end).
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

    /// The log of `generation` at `path`, made of a retired log's file — `kept` (still open,
    /// and mapped), else the file at `spare` when there is one — with a terminator written at
    /// its start and renamed to `path`: its pages, in memory, are written again instead of
    /// fresh ones. Else created empty.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error.
    pub fn reuse(
        kept: Option<LogWriter>,
        spare: &Path,
        path: &Path,
        (sync, generation): (Fsync, u64),
    ) -> Result<LogWriter> {
        let io = |what: &'static str| {
            move |e: std::io::Error| {
                Error::Config(format!("checkpoint {}: {what}: {e}", spare.display()))
            }
        };
        let mut w = match kept {
            Some(w) => w,
            None => match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(spare)
            {
                Ok(f) => LogWriter::with_file(f, spare, sync, generation, Some(0))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return LogWriter::create(path, sync, generation)
                }
                Err(e) => return Err(io("cannot open")(e)),
            },
        };
        match &mut w.map {
            Ok(Some(m)) => m.zero(0, TERMINATOR),
            _ => w
                .file
                .write_all_at(&[0; TERMINATOR], 0)
                .map_err(io("cannot write"))?,
        }
        std::fs::rename(spare, path).map_err(io("cannot rename"))?;
        w.path = path.display().to_string();
        w.generation = generation;
        w.len = 0;
        Ok(w)
    }

    fn opened(path: &Path, sync: Fsync, generation: u64, end: Option<u64>) -> Result<LogWriter> {
        let io = |e: std::io::Error| {
            Error::Config(format!("checkpoint {}: cannot open: {e}", path.display()))
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(end.is_none())
            .read(true)
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
            map: Ok(None),
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
    /// large parts into a buffer first (a pushed frame goes from the message to the file);
    /// returns the record's bytes in the file: [`prepare`](Self::prepare), then
    /// [`commit`](Self::commit). Same guarantees as [`append`](Self::append). A failed append
    /// leaves the log ending where it ended.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error, or a payload over 4 GiB.
    pub fn append_parts(&mut self, parts: &[&[u8]]) -> Result<u64> {
        let p = self.prepare(parts)?;
        self.commit(p, parts)
    }

    /// Writes a record of payload `parts` after the log's end without making it part of the
    /// log: everything but its header (with fsync nothing yet: the whole record goes out at
    /// [`commit`](Self::commit), header first). Until it is committed the log still ends where
    /// it ended — a process killed now, or a [`Prepared`] dropped, leaves a record that is
    /// never read, and the next one is written over it. A server prepares a request's record
    /// before applying the request: the payload is read from memory once for the checksum and
    /// the copy, and the handler then finds it in the cache.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error, or a payload over 4 GiB; the log
    /// is unchanged.
    pub fn prepare(&mut self, parts: &[&[u8]]) -> Result<Prepared> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(total).map_err(|_| {
            Error::Config(format!(
                "checkpoint {}: a record of {total} bytes (at most 4 GiB)",
                self.path
            ))
        })?;
        let size = aligned(HEADER + total) as u64;
        let (at, end) = (self.len, self.len + size + TERMINATOR as u64);
        let mut p = Prepared {
            at,
            size,
            len,
            crc: None,
            mapped: false,
        };
        if self.sync == Fsync::Yes {
            return Ok(p);
        }
        if let Some(m) = self.mapped(end) {
            p.crc = Some(m.fill(at, parts, (size, TERMINATOR)));
            p.mapped = true;
            return Ok(p);
        }
        self.write_from(at + HEADER as u64, &[], parts, end)?;
        p.crc = Some(crate::kv::durable::crc32c(parts));
        Ok(p)
    }

    /// Makes record `p`, prepared of the same `parts`, part of the log: its header written
    /// (with fsync: the whole record, then fsynced). When this returns, the record survives the
    /// process's death (with [`Fsync::Yes`], the machine's crash); returns its bytes in the
    /// file.
    ///
    /// # Errors
    /// [`Error::Config`] naming the path and the OS error; the log then ends where it ended
    /// (its terminator is rewritten, or with fsync the file cut back), or the error says from
    /// which byte it may be damaged.
    ///
    /// # Panics
    /// If another record was appended since `p` was prepared.
    pub fn commit(&mut self, p: Prepared, parts: &[&[u8]]) -> Result<u64> {
        assert_eq!(p.at, self.len, "one record is prepared at a time");
        let crc = p.crc.unwrap_or_else(|| crate::kv::durable::crc32c(parts));
        let head = header(p.len, crc, self.generation);
        let end = p.at + p.size + TERMINATOR as u64;
        let io = |e: std::io::Error| Error::Config(format!("checkpoint {}: {e}", self.path));
        let written = match (&mut self.map, p.crc) {
            (Ok(Some(m)), Some(_)) if p.mapped => {
                m.seal(p.at, &head);
                Ok(())
            }
            (_, Some(_)) => self.file.write_all_at(&head, p.at).map_err(io),
            (_, None) => self.write_from(p.at, &head, parts, end).and_then(|()| {
                self.file
                    .sync_data()
                    .map_err(|e| Error::Config(format!("checkpoint {}: {e}", self.path)))
            }),
        };
        if let Err(e) = written {
            // Put the terminator back where the log ends (with fsync, cut the file there).
            let mended = match self.sync {
                Fsync::Yes => self
                    .file
                    .set_len(self.len)
                    .inspect(|()| self.reserved = self.len),
                Fsync::No => self.file.write_all_at(&[0; HEADER], self.len),
            };
            return match mended {
                Ok(()) => Err(e),
                Err(m) => Err(Error::Config(format!(
                    "{e}; and the log cannot be mended ({m}): it may be damaged from byte {}",
                    self.len
                ))),
            };
        }
        self.len += p.size;
        Ok(p.size)
    }

    /// The mapping to write a record through whose end (terminator included) is at `need`,
    /// grown to hold it. `None` with fsync, or once mapping failed (said once): records are
    /// written with `pwrite` then.
    fn mapped(&mut self, need: u64) -> Option<&mut Mapped> {
        if self.sync == Fsync::Yes {
            return None;
        }
        let mapped = match self.map.as_mut().map(Option::take) {
            Err(()) => return None,
            Ok(Some(mut m)) => m.grow(&self.file, need).map(|()| m),
            Ok(None) => Mapped::new(&self.file, (self.len, need)),
        };
        match mapped {
            Ok(m) => self.map = Ok(Some(m)),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::Unsupported {
                    tracing::warn!(
                        "checkpoint {}: cannot map the log ({e}): written with pwrite instead",
                        self.path
                    );
                }
                self.map = Err(());
                self.reserved = self.file.metadata().map_or(0, |m| m.len());
            }
        }
        self.map.as_mut().ok().and_then(Option::as_mut)
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

    /// Writes `first` and then `parts` with `pwrite` from byte `from` on (small parts
    /// gathered into one write, large ones written from where they are), then zero bytes up
    /// to `end` (padding and terminator), disk space reserved ahead first.
    fn write_from(&mut self, from: u64, first: &[u8], parts: &[&[u8]], end: u64) -> Result<()> {
        if end > self.reserved {
            self.reserve(end + PREALLOCATE);
        }
        let io = |e: std::io::Error| Error::Config(format!("checkpoint {}: {e}", self.path));
        let mut at = from;
        let mut small = Vec::with_capacity(256);
        small.extend_from_slice(first);
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
        small.resize(small.len() + (end - at - small.len() as u64) as usize, 0);
        self.file.write_all_at(&small, at).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::durable::log::decode;

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
        let mut w = LogWriter::reuse(None, &spare, &path, (Fsync::No, 3)).expect("reused");
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
        let fresh =
            LogWriter::reuse(None, &spare, &temp_log("fresh"), (Fsync::No, 4)).expect("created");
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

    /// A writer that writes with `pwrite`, as one whose mapping failed.
    fn unmapped(mut w: LogWriter) -> LogWriter {
        w.map = Err(());
        w
    }

    #[test]
    fn a_prepared_record_is_read_only_once_committed_and_a_dropped_one_is_written_over() {
        for mapped in [true, false] {
            let path = temp_log(&format!("prepared-{mapped}"));
            let w = LogWriter::create(&path, Fsync::No, 5).expect("create");
            let mut w = if mapped { w } else { unmapped(w) };
            w.append(b"first").expect("append");
            let p = w
                .prepare(&[b"refused by the handler", &[7; 5000]])
                .expect("prepared");
            assert_eq!(
                read_back(&path, 5).0,
                vec![b"first".to_vec()],
                "what a kill before the commit leaves (mapped: {mapped})"
            );
            drop(p);
            let parts: [&[u8]; 2] = [b"second ", &[8; 70_000]];
            let p = w.prepare(&parts).expect("prepared");
            assert_eq!(w.commit(p, &parts).expect("committed"), 16 + 70_016);
            let (got, end) = read_back(&path, 5);
            assert_eq!(got, vec![b"first".to_vec(), [parts[0], parts[1]].concat()]);
            assert_eq!(
                end,
                32 + 70_032,
                "the second record is where the dropped one was"
            );
            assert_eq!(w.map.as_ref().is_ok_and(Option::is_some), mapped);
            std::fs::remove_file(&path).expect("cleaned");
        }
    }

    #[test]
    fn a_mapped_log_grows_past_its_first_mapping_and_reads_back_byte_for_byte() {
        let path = temp_log("grown");
        let mut w = LogWriter::create(&path, Fsync::No, 9).expect("create");
        // 24 records of about 1 MB with odd lengths: several growths of the mapping, payloads
        // starting and ending off the 64-byte lines the streaming stores write.
        let payloads: Vec<Vec<u8>> = (0..24u32)
            .map(|i| {
                (0..(1 << 20) + 13 * i)
                    .map(|j| (j * 31 + i) as u8)
                    .collect()
            })
            .collect();
        for p in &payloads {
            w.append(p).expect("append");
        }
        assert!(
            w.map.as_ref().is_ok_and(Option::is_some),
            "written through the mapping"
        );
        assert_eq!(read_back(&path, 9).0, payloads);
        drop(w);
        assert_eq!(read_back(&path, 9).0, payloads, "after the writer is gone");
        std::fs::remove_file(&path).expect("cleaned");
    }

    #[test]
    fn a_record_over_4_gib_is_refused_and_the_log_stays_as_it_was() {
        let path = temp_log("over-4-gib");
        let mut w = LogWriter::create(&path, Fsync::No, 1).expect("create");
        w.append(b"before").expect("append");
        let mib = vec![1u8; 1 << 20];
        // 4100 MiB: over the 4 GiB a record may hold.
        let parts = vec![&mib[..]; 4100];
        let e = w.prepare(&parts).err().expect("refused");
        assert!(e.to_string().contains("at most 4 GiB"), "{e}");
        w.append(b"after").expect("append");
        assert_eq!(
            read_back(&path, 1).0,
            vec![b"before".to_vec(), b"after".to_vec()]
        );
        std::fs::remove_file(&path).expect("cleaned");
    }

    #[test]
    fn reading_a_reused_log_stops_near_its_terminator_not_at_the_files_end() {
        let (spare, path) = (temp_log("long-spare"), temp_log("short-reused"));
        let mut w = LogWriter::create(&spare, Fsync::No, 1).expect("create");
        for i in 0..40u8 {
            w.append(&[i; 1 << 20]).expect("append");
        }
        let mut w = LogWriter::reuse(Some(w), &spare, &path, (Fsync::No, 2)).expect("reused");
        w.append(b"only this").expect("append");
        let file = std::fs::metadata(&path).expect("log").len();
        let bytes = crate::kv::durable::log::read(&path).expect("read");
        assert!(file >= 40 << 20, "the file keeps its old bytes ({file})");
        assert!(
            bytes.len() <= 16 << 20,
            "one piece read ({} bytes)",
            bytes.len()
        );
        let r = decode("l", 2, &bytes).expect("whole");
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records[0].1, b"only this");
        std::fs::remove_file(&path).expect("cleaned");
    }
}
