//! What a durable server's request log holds: one entry per state-changing request it
//! applied, written before the request is answered (issue 13), and one per worker replaced.
//! Sans-IO: bytes in, bytes out; [`super::log`] frames and checksums each entry.
//!
//! An entry (little-endian) starts with its kind `u8`:
//! - 1, an applied request: sender `i32`, customer id `i32`, timestamp `i32`, application
//!   command `i32`, flags `u8` (1 push, 2 pull), the number of data frames `u32`, then each
//!   frame as length `u64` and bytes — the request's keys, values and lengths frames exactly
//!   as the handler saw them (a cached key list already replaced by its keys);
//! - 2, a sender forgotten: sender `i32` (a replacement worker took its id).

use super::bytes::Reader;
use crate::wire::NodeId;

const APPLIED: u8 = 1;
const FORGET: u8 = 2;

/// An applied request as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'b> {
    /// The worker that sent it.
    pub sender: NodeId,
    /// The worker's customer id.
    pub customer: i32,
    /// The worker's timestamp.
    pub timestamp: i32,
    /// The application command (`Meta::head`).
    pub cmd: i32,
    /// It pushed values.
    pub push: bool,
    /// It pulled values.
    pub pull: bool,
    /// Its data frames: keys, values, lengths.
    pub frames: Vec<&'b [u8]>,
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<'b> {
    /// A request was applied.
    Applied(Request<'b>),
    /// Requests of this sender are forgotten from here on.
    Forget(NodeId),
}

impl<'b> Entry<'b> {
    /// The entry's bytes as parts to write one after the other: small headers, and the data
    /// frames where they are (see the module docs). `scratch` holds the headers.
    pub fn parts<'s>(&'s self, scratch: &'s mut Vec<Vec<u8>>) -> Vec<&'s [u8]> {
        let base = scratch.len();
        let Entry::Applied(r) = self else {
            scratch.push(self.encode());
            return vec![&scratch[base]];
        };
        let mut head = vec![APPLIED];
        for v in [r.sender, r.customer, r.timestamp, r.cmd] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.push(u8::from(r.push) | (u8::from(r.pull) << 1));
        head.extend_from_slice(&(r.frames.len() as u32).to_le_bytes());
        scratch.push(head);
        for f in &r.frames {
            scratch.push((f.len() as u64).to_le_bytes().to_vec());
        }
        let mut out: Vec<&[u8]> = vec![&scratch[base]];
        for (i, f) in r.frames.iter().enumerate() {
            out.push(&scratch[base + i + 1]);
            out.push(f);
        }
        out
    }

    /// The entry's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Entry::Forget(sender) => {
                let mut out = vec![FORGET];
                out.extend_from_slice(&sender.to_le_bytes());
                out
            }
            Entry::Applied(r) => {
                let size: usize = r.frames.iter().map(|f| 8 + f.len()).sum();
                let mut out = Vec::with_capacity(22 + size);
                out.push(APPLIED);
                for v in [r.sender, r.customer, r.timestamp, r.cmd] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out.push(u8::from(r.push) | (u8::from(r.pull) << 1));
                out.extend_from_slice(&(r.frames.len() as u32).to_le_bytes());
                for f in &r.frames {
                    out.extend_from_slice(&(f.len() as u64).to_le_bytes());
                    out.extend_from_slice(f);
                }
                out
            }
        }
    }
}

/// Reads an entry [`Entry::encode`] wrote.
///
/// # Errors
/// An unknown kind, a truncation or bytes left over, naming the field and offset.
pub fn decode(bytes: &[u8]) -> Result<Entry<'_>, String> {
    let mut r = Reader::new("log entry", bytes);
    let entry = match r.u8("its kind")? {
        FORGET => Entry::Forget(r.i32("the sender")?),
        APPLIED => {
            let (sender, customer) = (r.i32("the sender")?, r.i32("the customer id")?);
            let (timestamp, cmd) = (r.i32("the timestamp")?, r.i32("the command")?);
            let flags = r.u8("the flags")?;
            let mut n = [0u8; 4];
            n.copy_from_slice(r.take(4, "the number of frames")?);
            let n = u32::from_le_bytes(n);
            if n > 3 {
                return Err(format!("log entry: {n} data frames, expected at most 3"));
            }
            let frames = (0..n)
                .map(|_| r.sized("a data frame"))
                .collect::<Result<_, _>>()?;
            Entry::Applied(Request {
                sender,
                customer,
                timestamp,
                cmd,
                push: flags & 1 != 0,
                pull: flags & 2 != 0,
                frames,
            })
        }
        k => {
            return Err(format!(
                "log entry: unknown kind {k} at offset 0 (expected 1 or 2)"
            ))
        }
    };
    r.finish("the entry")?;
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every entry reads back as written; every truncation is an error.
        #[test]
        fn entries_round_trip_and_truncations_fail(
            sender in -20i32..20, customer in 0i32..3, ts in any::<i32>(), cmd in any::<i32>(),
            push: bool, pull: bool,
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
            forget: bool,
        ) {
            let frames: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
            let e = if forget {
                Entry::Forget(sender)
            } else {
                Entry::Applied(Request { sender, customer, timestamp: ts, cmd, push, pull, frames })
            };
            let bytes = e.encode();
            prop_assert_eq!(decode(&bytes), Ok(e.clone()));
            let mut scratch = Vec::new();
            prop_assert_eq!(e.parts(&mut scratch).concat(), bytes.clone());
            for cut in 0..bytes.len() {
                prop_assert!(decode(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn an_unknown_kind_is_named() {
        assert_eq!(
            decode(&[7]),
            Err("log entry: unknown kind 7 at offset 0 (expected 1 or 2)".into())
        );
    }
}
