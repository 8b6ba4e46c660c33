//! Encoding and validating decoding of messages as frames.
//!
//! Frame 0 is the bincode 2 (standard config, varint integers) encoding of [`Meta`], at most
//! [`MAX_META_BYTES`]. Frames 1.. are payload, each at most [`MAX_FRAME_BYTES`], and their count and
//! lengths must equal `Stamp::frame_lens`. Anything else is a [`WireError`]; decoding never panics.

use super::{Message, Meta};
use bytes::Bytes;
use thiserror::Error;

/// Largest encoded header accepted: 1 MiB (a node table of thousands of nodes fits).
pub const MAX_META_BYTES: usize = 1 << 20;

/// Largest payload frame accepted: 4 GiB − 1.
pub const MAX_FRAME_BYTES: u64 = u32::MAX as u64;

/// What is wrong with a received message.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum WireError {
    /// No frames at all.
    #[error("malformed message: no frames (expected a meta frame)")]
    Empty,
    /// The meta frame is larger than [`MAX_META_BYTES`].
    #[error("malformed message: meta frame of {0} bytes exceeds the limit of {MAX_META_BYTES}")]
    MetaTooLarge(usize),
    /// The meta frame does not decode.
    #[error("malformed message: meta frame does not decode: {0}")]
    BadMeta(String),
    /// The meta frame has bytes after the encoded header.
    #[error("malformed message: meta frame has {0} trailing bytes")]
    TrailingBytes(usize),
    /// The number of payload frames differs from the meta's list.
    #[error("malformed message: meta announces {announced} data frames, {got} arrived")]
    FrameCount {
        /// Frames the meta lists.
        announced: usize,
        /// Frames that arrived.
        got: usize,
    },
    /// A payload frame's length differs from the meta's list.
    #[error("malformed message: data frame {index} is {got} bytes, meta announces {announced}")]
    FrameLength {
        /// Payload frame index (0 is the first after the meta).
        index: usize,
        /// Bytes the meta lists.
        announced: u64,
        /// Bytes that arrived.
        got: usize,
    },
    /// A payload frame is longer than the receiving node's bound (`PS_MAX_INFLIGHT_BYTES` for a
    /// server, [`MAX_META_BYTES`] for the scheduler): refused before it is read.
    #[error("malformed message: data frame {index} of {len} bytes exceeds this node's bound of {max} bytes")]
    OverBound {
        /// Payload frame index.
        index: usize,
        /// Its length in bytes, as the meta announces it.
        len: u64,
        /// The node's bound.
        max: u64,
    },
    /// A payload frame exceeds [`MAX_FRAME_BYTES`].
    #[error("malformed message: data frame {index} of {len} bytes exceeds the limit of {MAX_FRAME_BYTES}")]
    FrameTooLarge {
        /// Payload frame index.
        index: usize,
        /// Its length in bytes.
        len: u64,
    },
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_META_BYTES>()
}

/// Encodes `msg.meta` with `frame_lens` set from `msg.data`, as frame 0.
///
/// # Errors
/// [`WireError::MetaTooLarge`] if the header exceeds [`MAX_META_BYTES`];
/// [`WireError::FrameTooLarge`] if a payload frame exceeds [`MAX_FRAME_BYTES`].
pub fn encode_meta(msg: &mut Message) -> Result<Vec<u8>, WireError> {
    msg.meta.stamp.frame_lens = msg.data.iter().map(|d| d.len() as u64).collect();
    if let Some((index, &len)) = msg
        .meta
        .stamp
        .frame_lens
        .iter()
        .enumerate()
        .find(|(_, &l)| l > MAX_FRAME_BYTES)
    {
        return Err(WireError::FrameTooLarge { index, len });
    }
    let head = bincode::serde::encode_to_vec(&msg.meta, config())
        .map_err(|e| WireError::BadMeta(e.to_string()))?;
    if head.len() > MAX_META_BYTES {
        return Err(WireError::MetaTooLarge(head.len()));
    }
    Ok(head)
}

/// Decodes a meta frame (frame 0 of a message) whole, nothing after it.
///
/// # Errors
/// [`WireError::MetaTooLarge`], [`WireError::BadMeta`] or [`WireError::TrailingBytes`].
pub fn decode_meta(head: &[u8]) -> Result<Meta, WireError> {
    if head.len() > MAX_META_BYTES {
        return Err(WireError::MetaTooLarge(head.len()));
    }
    let (meta, used): (Meta, usize) = bincode::serde::decode_from_slice(head, config())
        .map_err(|e| WireError::BadMeta(e.to_string()))?;
    if used != head.len() {
        return Err(WireError::TrailingBytes(head.len() - used));
    }
    Ok(meta)
}

/// Decodes and validates a received message: frame 0 is the meta, the rest its payload.
///
/// # Errors
/// A [`WireError`] naming what is wrong; no frame is trusted before it is checked.
pub fn decode_frames(mut frames: Vec<Bytes>) -> Result<Message, WireError> {
    if frames.is_empty() {
        return Err(WireError::Empty);
    }
    let data = frames.split_off(1);
    let meta = decode_meta(&frames[0])?;
    if meta.stamp.frame_lens.len() != data.len() {
        return Err(WireError::FrameCount {
            announced: meta.stamp.frame_lens.len(),
            got: data.len(),
        });
    }
    for (index, (&announced, frame)) in meta.stamp.frame_lens.iter().zip(&data).enumerate() {
        if announced > MAX_FRAME_BYTES {
            return Err(WireError::FrameTooLarge {
                index,
                len: announced,
            });
        }
        if announced != frame.len() as u64 {
            return Err(WireError::FrameLength {
                index,
                announced,
                got: frame.len(),
            });
        }
    }
    Ok(Message { meta, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ControlMsg, DType, Node, NodeTable, Role, Takeover};

    fn sample() -> Message {
        Message {
            meta: Meta {
                head: 3,
                tag: crate::wire::RequestTag {
                    app_id: 1,
                    customer_id: 2,
                    timestamp: 77,
                },
                sender: 9,
                recver: 8,
                request: true,
                kv: crate::wire::KvHeader {
                    push: true,
                    pull: false,
                    dtype: DType::F32,
                    keys: Some(crate::wire::KeyRef::Register {
                        digest: 0xfeed,
                        evict: vec![1, 2],
                    }),
                    placement: None,
                },
                body: "hello".into(),
                error: None,
                rendezvous: Some(crate::wire::Rendezvous::Write { imm: 0x0100_0007 }),
                stamp: crate::wire::Stamp {
                    seq: Some(41),
                    frame_lens: vec![],
                    incarnation: 3,
                },
                control: Some(ControlMsg::NodeTable(NodeTable {
                    nodes: vec![Node {
                        role: Role::Server,
                        id: 8,
                        host: "127.0.0.1".into(),
                        port: 4242,
                        requested_rank: Some(3),
                    }],
                    replace_within_ms: 60_000,
                    run_id: 0xfeed_beef,
                    reach: vec![(8, "ab".repeat(32))],
                    replacement: Some(Takeover {
                        start_open: true,
                        barriers_done: vec![(4, 3)],
                        incarnation: 2,
                        joined: true,
                    }),
                })),
                also_refused: vec![5, 9],
            },
            data: vec![
                Bytes::from(vec![1u8; 16]),
                Bytes::from(vec![2u8; 8]),
                Bytes::new(),
            ],
        }
    }

    fn frames_of(msg: &mut Message) -> Vec<Bytes> {
        let head = encode_meta(msg).expect("encodes");
        let mut frames = vec![Bytes::from(head)];
        frames.extend(msg.data.iter().cloned());
        frames
    }

    #[test]
    fn frame_0_keeps_its_flat_field_order() {
        // Every field in its place on the wire, written out apart from `WireMeta`: bincode
        // writes a tuple's elements one after the other, as it writes a struct's fields.
        let mut m = sample().meta;
        m.error = Some("refused".into());
        m.also_refused = vec![5, 6];
        m.stamp.frame_lens = vec![7];
        m.kv.placement = Some(crate::wire::Placement::Part { epoch: 3, part: 1 });
        let flat = (
            (m.head, m.tag.app_id, m.tag.customer_id, m.tag.timestamp),
            (
                m.sender, m.recver, m.request, m.kv.push, m.kv.pull, m.kv.dtype,
            ),
            (
                m.body.clone(),
                m.error.clone(),
                m.control.clone(),
                m.kv.keys.clone(),
            ),
            (m.rendezvous, m.stamp.seq, m.stamp.frame_lens.clone()),
            (m.stamp.incarnation, m.also_refused.clone(), m.kv.placement),
        );
        let want = bincode::serde::encode_to_vec(&flat, config()).expect("encodes");
        assert_eq!(
            bincode::serde::encode_to_vec(&m, config()).expect("encodes"),
            want
        );
        let (back, _): (Meta, usize) =
            bincode::serde::decode_from_slice(&want, config()).expect("decodes");
        assert_eq!(back, m);
    }

    #[test]
    fn round_trip_keeps_meta_and_frames() {
        let mut msg = sample();
        let back = decode_frames(frames_of(&mut msg)).expect("decodes");
        assert_eq!(back.meta, msg.meta);
        assert_eq!(back.meta.stamp.frame_lens, vec![16, 8, 0]);
        assert_eq!(back.data, msg.data);
    }

    #[test]
    fn empty_message_is_rejected() {
        assert_eq!(decode_frames(vec![]).unwrap_err(), WireError::Empty);
    }

    #[test]
    fn truncated_meta_is_rejected_at_every_length() {
        let mut msg = sample();
        let head = encode_meta(&mut msg).expect("encodes");
        for cut in 0..head.len() {
            let frames = vec![Bytes::copy_from_slice(&head[..cut])];
            let err = decode_frames(frames).expect_err("truncated meta must not decode");
            assert!(
                matches!(err, WireError::BadMeta(_) | WireError::FrameCount { .. }),
                "cut {cut}: {err}"
            );
        }
    }

    #[test]
    fn trailing_bytes_after_meta_are_rejected() {
        let mut msg = sample();
        let mut head = encode_meta(&mut msg).expect("encodes");
        head.extend_from_slice(&[0, 0, 0]);
        let mut frames = vec![Bytes::from(head)];
        frames.extend(msg.data.iter().cloned());
        assert_eq!(
            decode_frames(frames).unwrap_err(),
            WireError::TrailingBytes(3)
        );
    }

    #[test]
    fn missing_and_short_data_frames_are_rejected() {
        let mut msg = sample();
        let mut frames = frames_of(&mut msg);
        frames.pop();
        assert_eq!(
            decode_frames(frames.clone()).unwrap_err().to_string(),
            "malformed message: meta announces 3 data frames, 2 arrived"
        );
        frames.push(Bytes::new());
        frames[1] = Bytes::from(vec![1u8; 15]);
        assert_eq!(
            decode_frames(frames).unwrap_err(),
            WireError::FrameLength {
                index: 0,
                announced: 16,
                got: 15
            }
        );
    }

    #[test]
    fn oversized_meta_and_announced_frames_are_rejected() {
        let big = vec![0u8; MAX_META_BYTES + 1];
        assert_eq!(
            decode_frames(vec![Bytes::from(big)]).unwrap_err(),
            WireError::MetaTooLarge(MAX_META_BYTES + 1)
        );
        let mut msg = Message::new(Meta {
            stamp: crate::wire::Stamp {
                frame_lens: vec![MAX_FRAME_BYTES + 1],
                ..Default::default()
            },
            ..Meta::default()
        });
        // Hand-craft a meta announcing an oversized frame (encode_meta would recompute the lens).
        let head = bincode::serde::encode_to_vec(&msg.meta, config()).expect("encodes");
        msg.data.clear();
        let err = decode_frames(vec![Bytes::from(head), Bytes::new()]).unwrap_err();
        assert_eq!(
            err,
            WireError::FrameTooLarge {
                index: 0,
                len: MAX_FRAME_BYTES + 1
            }
        );
    }

    #[test]
    fn oversized_body_cannot_be_encoded() {
        let mut msg = Message::new(Meta {
            body: "x".repeat(MAX_META_BYTES + 10),
            ..Meta::default()
        });
        assert!(matches!(
            encode_meta(&mut msg),
            Err(WireError::MetaTooLarge(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(head in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
                                    extra in 0usize..3) {
            let mut frames = vec![Bytes::from(head)];
            for i in 0..extra { frames.push(Bytes::from(vec![0u8; i])); }
            let _ = decode_frames(frames);
        }
    }
}
