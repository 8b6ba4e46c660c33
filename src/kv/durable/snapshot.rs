//! Snapshot files: one whole state per file, replaced atomically.
//!
//! Layout (little-endian): `PSLSNAP1` (8 bytes), format version `u32` (2: applied requests
//! named with their part), payload length `u64`, the payload, crc32c (Castagnoli) `u32` of
//! every byte before it. What the payload holds is the handler's business (its `save`); this
//! layer only guarantees it comes back whole.

use super::{le32, Damage, Fsync};
use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

/// The first 8 bytes of every snapshot file.
pub const MAGIC: &[u8; 8] = b"PSLSNAP1";
/// The format version this build writes and reads.
pub const VERSION: u32 = 2;
/// Bytes before the payload.
pub const HEADER: usize = 8 + 4 + 8;

/// The bytes of a snapshot file holding `payload`.
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len() + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = super::crc32c(&[&out]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The payload of snapshot file `file`'s bytes.
///
/// # Errors
/// [`Damage`] naming the offset: a wrong magic, an unknown version, a length that does not
/// match the file's, a checksum mismatch.
pub fn decode<'b>(file: &str, bytes: &'b [u8]) -> Result<&'b [u8], Damage> {
    let damage = |offset: usize, what: String| Damage {
        file: file.to_string(),
        offset: offset as u64,
        what,
    };
    if bytes.len() < HEADER + 4 {
        return Err(damage(
            bytes.len(),
            format!(
                "truncated: {} bytes, a snapshot has at least {}",
                bytes.len(),
                HEADER + 4
            ),
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err(damage(
            0,
            "not a pslite snapshot (no PSLSNAP1 magic)".into(),
        ));
    }
    let version = le32(&bytes[8..]);
    if version != VERSION {
        return Err(damage(
            8,
            format!("format version {version}; this build reads {VERSION}"),
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[12..20]);
    let len = u64::from_le_bytes(len);
    let want = (HEADER as u64 + 4).saturating_add(len);
    if want != bytes.len() as u64 {
        return Err(damage(
            12,
            format!(
                "the header says {len} payload bytes ({want} in all) but the file has {}",
                bytes.len()
            ),
        ));
    }
    let body = bytes.len() - 4;
    let stored = le32(&bytes[body..]);
    let crc = super::crc32c(&[&bytes[..body]]);
    if crc != stored {
        return Err(damage(
            body,
            format!("checksum mismatch (stored {stored:#010x}, computed {crc:#010x})"),
        ));
    }
    Ok(&bytes[HEADER..body])
}

/// Writes a snapshot of `payload` to `path`, atomically: into `path` + `.tmp` (written over,
/// not truncated first: it holds the snapshot before last), then exchanged with `path` (see
/// `exchange`), so `.tmp` is left holding the replaced snapshot, never read. With
/// [`Fsync::Yes`], the file is fsynced before the exchange and the directory after it.
///
/// # Errors
/// [`Error::Config`] naming the path and the OS error.
pub fn write(path: &Path, payload: &[u8], sync: Fsync) -> Result<()> {
    write_parts(path, &[payload], sync)
}

/// [`write()`] of the payload `parts` one after the other, written from where they are (a large
/// state is not copied into one buffer first).
///
/// # Errors
/// As [`write()`].
pub fn write_parts(path: &Path, parts: &[&[u8]], sync: Fsync) -> Result<()> {
    let io = |what: &str, e: std::io::Error| {
        Error::Config(format!("checkpoint {}: {what}: {e}", path.display()))
    };
    let tmp = path.with_extension("tmp");
    // Not truncated: its pages (the snapshot before last, see `exchange`) are written again
    // instead of fresh ones being allocated; cut to its new length below.
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&tmp)
        .map_err(|e| io("cannot create its .tmp", e))?;
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    head.extend_from_slice(&(len as u64).to_le_bytes());
    // Without fsync through a mapping (streaming stores, the checksum taken as it copies);
    // with fsync, or where it cannot map, with `write`.
    let mapped = sync == Fsync::No && super::mapped::write_whole(&f, &head, parts).is_ok();
    if !mapped {
        let crc = super::crc32c(&[&[&head[..]], parts].concat());
        let crc = crc.to_le_bytes();
        for p in [&head[..]]
            .into_iter()
            .chain(parts.iter().copied())
            .chain([&crc[..]])
        {
            f.write_all(p).map_err(|e| io("cannot write its .tmp", e))?;
        }
        let end = (HEADER + len + 4) as u64;
        f.set_len(end)
            .map_err(|e| io("cannot cut its .tmp to its length", e))?;
    }
    if sync == Fsync::Yes {
        f.sync_all().map_err(|e| io("cannot fsync its .tmp", e))?;
    }
    drop(f);
    exchange(&tmp, path).map_err(|e| io("cannot rename its .tmp into place", e))?;
    if sync == Fsync::Yes {
        if let Some(dir) = path.parent() {
            let d = std::fs::File::open(dir).map_err(|e| io("cannot open its directory", e))?;
            d.sync_all()
                .map_err(|e| io("cannot fsync its directory", e))?;
        }
    }
    Ok(())
}

/// Puts `tmp` in the place of `path` atomically, and where the file system can, the file that
/// was at `path` in the place of `tmp` (`renameat2` with `RENAME_EXCHANGE`): the next snapshot
/// is written into that file's pages, already in memory, instead of fresh ones (on a VM, fresh
/// page-cache pages cost ten times more to write than reused ones). Where it cannot (no file at
/// `path` yet, or no exchange on this file system or platform), a plain rename.
fn exchange(tmp: &Path, path: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
        let (from, to) = (c(tmp)?, c(path)?);
        // SAFETY: two NUL-terminated paths that live across the call.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            return Ok(());
        }
    }
    std::fs::rename(tmp, path)
}

/// Reads the snapshot at `path`.
///
/// # Errors
/// [`Error::Config`] when it cannot be read; [`Error::Corrupt`] with the [`Damage`] text.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::Config(format!("checkpoint {}: cannot read: {e}", path.display())))?;
    let name = path.display().to_string();
    decode(&name, &bytes)
        .map(<[u8]>::to_vec)
        .map_err(|d| Error::Corrupt(d.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_snapshot_comes_back_whole(payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let bytes = encode(&payload);
            prop_assert_eq!(decode("s", &bytes), Ok(&payload[..]));
        }

        /// Any flipped byte, and any truncation, is an error naming the file.
        #[test]
        fn any_damage_is_an_error(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let good = encode(&payload);
            let i = at.index(good.len());
            let mut flipped = good.clone();
            flipped[i] ^= flip;
            let e = decode("snap-7", &flipped).expect_err("a flipped byte is found");
            prop_assert!(e.to_string().starts_with("snap-7: damaged at byte "), "{}", e);
            let e = decode("snap-7", &good[..i]).expect_err("a truncation is found");
            prop_assert_eq!(e.file, "snap-7");
        }
    }

    #[test]
    fn the_errors_name_what_is_wrong() {
        let good = encode(b"weights");
        let mut bad = good.clone();
        bad[8] = 9;
        assert_eq!(
            decode("f", &bad).map_err(|d| d.to_string()),
            Err("f: damaged at byte 8: format version 9; this build reads 2".into())
        );
        let mut bad = good.clone();
        bad[HEADER] ^= 1;
        let e = decode("f", &bad).expect_err("damaged").to_string();
        assert!(
            e.starts_with(&format!(
                "f: damaged at byte {}: checksum mismatch",
                good.len() - 4
            )),
            "{e}"
        );
    }

    #[test]
    fn a_file_is_replaced_whole_and_read_back() {
        let dir = std::env::temp_dir().join(format!("pslite-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("server-0.snap");
        write(&path, b"first", Fsync::No).expect("written");
        write(&path, b"second", Fsync::Yes).expect("replaced");
        assert_eq!(read(&path).expect("read"), b"second");
        let tmp = path.with_extension("tmp");
        assert!(
            !tmp.exists() || read(&tmp).expect("whole") == b"first",
            "what is left at .tmp is the previous snapshot, kept for its pages"
        );
        let mut bytes = std::fs::read(&path).expect("bytes");
        bytes.truncate(bytes.len() - 1);
        std::fs::write(&path, bytes).expect("damaged");
        let e = read(&path).expect_err("refused").to_string();
        assert!(e.contains("server-0.snap: damaged at byte 12"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleaned");
    }

    #[test]
    fn a_snapshot_written_over_an_older_longer_one_reads_back_whole() {
        let d = std::env::temp_dir().join(format!("pslite-snap-reuse-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        let path = d.join("snapshot");
        for payload in [
            vec![1u8; 100_000],
            vec![2; 300_000],
            vec![3; 5],
            vec![4; 200_000],
        ] {
            write_parts(&path, &[&payload[..2], &payload[2..]], Fsync::No).expect("written");
            assert_eq!(read(&path).expect("whole"), payload);
        }
        // Where the file system exchanges, the previous snapshot's file waits to be reused.
        let tmp = path.with_extension("tmp");
        if tmp.exists() {
            assert_eq!(read(&tmp).expect("the previous snapshot"), vec![3; 5]);
        }
        std::fs::remove_dir_all(&d).expect("cleaned");
    }
}
