//! What a durable server's request log holds: one entry per state-changing request it
//! applied, written before the request is answered, and one per worker replaced.
//! Sans-IO: bytes in, bytes out; [`super::log`] frames and checksums each entry.
//!
//! An entry (little-endian) starts with its kind `u8`:
//! - 1, an applied request: sender `i32`, customer id `i32`, timestamp `i32`, application
//!   command `i32`, part `u32` (the request's part this server got, [`Request::part`]), flags
//!   `u8` (1 push, 2 pull), the number of data frames `u32`, then each
//!   frame as length `u64` and bytes — the request's keys, values and lengths frames exactly
//!   as the handler saw them (a cached key list already replaced by its keys);
//!   With flag 4 (`keys_by_digest`), the keys frame is replaced by the 8-byte digest of a key
//!   list logged before in the same log (kind 3);
//! - 2, a sender forgotten: sender `i32`. Nothing writes it: a replacement worker numbers its
//!   requests from `incarnation × 2^27` on (`Stamp::incarnation`), so the ids of requests its
//!   predecessor had applied never match its own. Readers still accept it;
//! - 3, a key list (key caching): sender `i32`, customer id `i32`, digest `u64`, the keys as
//!   length `u64` and bytes. Logged once per log generation, before the first request that
//!   names it, so a request repeating a cached list logs its values, not its keys again.

use super::bytes::Reader;
use crate::wire::NodeId;

const APPLIED: u8 = 1;
const FORGET: u8 = 2;
const KEY_LIST: u8 = 3;

/// [`Request::part`] of a request that carries no part number.
pub const WHOLE: u32 = u32::MAX;

/// An applied request as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'b> {
    /// The worker that sent it.
    pub sender: NodeId,
    /// The worker's customer id.
    pub customer: i32,
    /// The worker's timestamp.
    pub timestamp: i32,
    /// Which part of the request it was (`Placement::part`; [`WHOLE`] for a request sent
    /// whole): a request sliced again while servers are added or drained may bring this
    /// server a second part of it.
    pub part: u32,
    /// The application command (`Meta::head`).
    pub cmd: i32,
    /// It pushed values.
    pub push: bool,
    /// It pulled values.
    pub pull: bool,
    /// Its keys are the key list of this digest (a [`Entry::KeyList`] logged before), and
    /// `frames[0]` is empty.
    pub keys_by_digest: Option<u64>,
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
    /// A key list requests of (`sender`, `customer`) name by `digest` from here on.
    KeyList {
        /// The worker.
        sender: NodeId,
        /// Its customer id.
        customer: i32,
        /// The list's digest (key caching).
        digest: u64,
        /// The keys (`u64` each, little-endian).
        keys: &'b [u8],
    },
}

impl<'b> Entry<'b> {
    /// The entry's bytes as parts to write one after the other: small headers, and the data
    /// frames where they are (see the module docs). `scratch` holds the headers.
    pub fn parts<'s>(&'s self, scratch: &'s mut Vec<Vec<u8>>) -> Vec<&'s [u8]> {
        let base = scratch.len();
        let (head, frames): (Vec<u8>, Vec<&[u8]>) = match self {
            Entry::Forget(_) => {
                scratch.push(self.encode());
                return vec![&scratch[base]];
            }
            Entry::KeyList {
                sender,
                customer,
                digest,
                keys,
            } => {
                let mut head = vec![KEY_LIST];
                head.extend_from_slice(&sender.to_le_bytes());
                head.extend_from_slice(&customer.to_le_bytes());
                head.extend_from_slice(&digest.to_le_bytes());
                (head, vec![keys])
            }
            Entry::Applied(r) => {
                let mut head = vec![APPLIED];
                for v in [r.sender, r.customer, r.timestamp, r.cmd] {
                    head.extend_from_slice(&v.to_le_bytes());
                }
                head.extend_from_slice(&r.part.to_le_bytes());
                let by_digest = r.keys_by_digest.is_some();
                head.push(u8::from(r.push) | (u8::from(r.pull) << 1) | (u8::from(by_digest) << 2));
                if let Some(d) = r.keys_by_digest {
                    head.extend_from_slice(&d.to_le_bytes());
                }
                head.extend_from_slice(&(r.frames.len() as u32).to_le_bytes());
                (head, r.frames.clone())
            }
        };
        scratch.push(head);
        for f in &frames {
            scratch.push((f.len() as u64).to_le_bytes().to_vec());
        }
        let mut out: Vec<&[u8]> = vec![&scratch[base]];
        for (i, f) in frames.into_iter().enumerate() {
            out.push(&scratch[base + i + 1]);
            out.push(f);
        }
        out
    }

    /// The entry's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        if let Entry::Forget(sender) = self {
            let mut out = vec![FORGET];
            out.extend_from_slice(&sender.to_le_bytes());
            return out;
        }
        let mut scratch = Vec::new();
        self.parts(&mut scratch).concat()
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
        KEY_LIST => {
            let (sender, customer) = (r.i32("the sender")?, r.i32("the customer id")?);
            let digest = r.u64("the digest")?;
            let keys = r.sized("the keys")?;
            Entry::KeyList {
                sender,
                customer,
                digest,
                keys,
            }
        }
        APPLIED => {
            let (sender, customer) = (r.i32("the sender")?, r.i32("the customer id")?);
            let (timestamp, cmd) = (r.i32("the timestamp")?, r.i32("the command")?);
            let mut part = [0u8; 4];
            part.copy_from_slice(r.take(4, "the part")?);
            let part = u32::from_le_bytes(part);
            let flags = r.u8("the flags")?;
            let keys_by_digest = if flags & 4 != 0 {
                Some(r.u64("the key list's digest")?)
            } else {
                None
            };
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
                part,
                cmd,
                push: flags & 1 != 0,
                pull: flags & 2 != 0,
                keys_by_digest,
                frames,
            })
        }
        k => {
            return Err(format!(
                "log entry: unknown kind {k} at offset 0 (expected 1, 2 or 3)"
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
            part in any::<u32>(), push: bool, pull: bool,
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
            kind in 0u8..3, digest in any::<Option<u64>>(),
        ) {
            let frames: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
            let e = match kind {
                0 => Entry::Forget(sender),
                1 => Entry::KeyList { sender, customer, digest: digest.unwrap_or(7), keys: frames.first().copied().unwrap_or(&[]) },
                _ => Entry::Applied(Request { sender, customer, timestamp: ts, part, cmd, push, pull, keys_by_digest: digest, frames }),
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
            Err("log entry: unknown kind 7 at offset 0 (expected 1, 2 or 3)".into())
        );
    }
}
