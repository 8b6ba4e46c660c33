//! The request log: records appended one at a time, read back in order. This file holds the
//! format and the reader; `writer.rs` appends, through a memory mapping (`../mapped.rs`) where
//! it can.
//!
//! A record (little-endian): payload length `u32`, crc32c `u32` of those 4 length bytes and
//! the log's generation (`u64`), crc32c `u32` of the payload, the payload, then zero bytes up
//! to the next multiple of [`ALIGN`]. Every append also writes [`TERMINATOR`] zero bytes after
//! its record: reading stops at a record header of zeros (or at the end of the file). So a
//! log file can be *reused* — a retired log becomes the next generation's with a terminator
//! written at its start, and its pages, already in memory, are overwritten instead of fresh
//! ones being allocated on the answer's path (`PS_CHECKPOINT_SYNC=0`: what checkpointing costs) — and
//! what follows the terminator, left from the file's earlier use, is never read; the
//! generation in the length checksum keeps a stale record from passing for a current one.
//!
//! Without fsync (process death is what must be survived) an append writes the payload, its
//! padding and the terminator first and the 12-byte header last: a process killed in between
//! leaves the previous terminator in place, so the log ends before the record, which was never
//! acknowledged. Headers never cross a page (records start at multiples of [`ALIGN`]), so the
//! header's write is never cut in two. The two halves are separate calls
//! ([`LogWriter::prepare`], [`LogWriter::commit`]): a server writes a request's record before
//! applying it and its header after, and a record whose request was refused is never committed
//! and is written over by the next. Where it can, the writer stores records through a mapping
//! of the file instead of `pwrite` (`durable::mapped`: streaming stores, the header in one 16-byte
//! store). With fsync (the file is cut to the log's end when opened)
//! a record goes out in order, header first, over the last terminator and past the file's
//! end: a machine crash can leave a record cut short by the end of the file — a torn tail
//! (fewer than 12 header bytes left, or a header whose payload or padding is cut) — which
//! [`decode`] reports where it starts; the caller cuts the file there. A flipped byte
//! anywhere else fails a checksum or the zero padding: [`Damage`] names the offset. The
//! length has its own checksum so that damage to it cannot pass for a torn tail.

mod writer;

pub use writer::{LogWriter, Prepared};

use super::{crc32c, le32, Damage, Fsync};

pub(super) const HEADER: usize = 12;

/// Records start at multiples of this many bytes (a header never crosses a 4 KiB page).
pub const ALIGN: usize = 16;

/// Zero bytes written after every record, where reading stops.
pub const TERMINATOR: usize = 16;
/// `n` rounded up to a multiple of [`ALIGN`].
fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The header of a record of `len` payload bytes whose crc32c is `crc`, in log `generation`.
fn header(len: u32, crc: u32, generation: u64) -> [u8; HEADER] {
    let len = len.to_le_bytes();
    let check = crc32c(&[&len, &generation.to_le_bytes()]);
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(&len);
    h[4..8].copy_from_slice(&check.to_le_bytes());
    h[8..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A record's bytes in log `generation`, padding included (not the terminator).
pub fn encode(generation: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = header(payload.len() as u32, crc32c(&[payload]), generation).to_vec();
    out.extend_from_slice(payload);
    out.resize(aligned(out.len()), 0);
    out
}

/// A log file is read this many bytes at a time ([`read`]).
const READ_PIECE: u64 = 16 << 20;

/// Reads log file `path` as far as its records go: piece by piece, until a zero header (the
/// terminator) or the end of the file is among the bytes read, found by hopping from header
/// to header by their lengths alone (the checksums are [`decode`]'s business). A reused file
/// (and a mapped one, grown ahead of its records) holds bytes after the terminator that are never
/// read, so a replacement reads about the log, not the whole file.
///
/// # Errors
/// The OS error.
pub fn read(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    let mut at = 0usize;
    loop {
        let got = (&mut f).take(READ_PIECE).read_to_end(&mut bytes)?;
        while let Some(h) = bytes.get(at..at + HEADER) {
            if h.iter().all(|&b| b == 0) {
                return Ok(bytes);
            }
            at += aligned(HEADER + le32(h) as usize);
        }
        if got == 0 {
            return Ok(bytes);
        }
    }
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
        if crc32c(&[payload]) != le32(&rest[8..12]) {
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
}
