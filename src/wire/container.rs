//! A [`Message`] as one byte string (the container the RDMA van writes into its rings, where
//! there are no frame boundaries): the frame count (`u32` little-endian), each frame's length
//! (`u64` little-endian), then the frames. Frame 0 is the encoded [`crate::wire::Meta`]
//! ([`encode_meta`]), frames 1.. are the message's data. Decoding checks every length before it
//! slices, then validates the frames as [`decode_frames`] does; it never panics.

use super::{decode_frames, encode_meta, Message, WireError, MAX_META_BYTES};
use bytes::Bytes;
use thiserror::Error;

/// Most frames a container may announce (the meta and 63 data frames).
pub const MAX_FRAMES: usize = 64;

/// What is wrong with a received container.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ContainerError {
    /// The byte string does not have the container's layout; the text says what is wrong.
    #[error("malformed message container: {0}")]
    Layout(String),
    /// The layout is right, but the frames are not a valid message.
    #[error(transparent)]
    Frames(#[from] WireError),
}

/// Encodes `msg` (its meta with `frame_lens` set, then its data frames) as one byte string of
/// `4 + 8 × (1 + frames) + meta + data` bytes.
///
/// # Errors
/// As [`encode_meta`]: a header over [`MAX_META_BYTES`] or a frame over
/// [`super::MAX_FRAME_BYTES`].
pub fn encode(mut msg: Message) -> Result<Vec<u8>, WireError> {
    let head = encode_meta(&mut msg)?;
    let n = 1 + msg.data.len();
    let mut out = Vec::with_capacity(4 + 8 * n + head.len() + msg.data_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    for f in &msg.data {
        out.extend_from_slice(&(f.len() as u64).to_le_bytes());
    }
    out.extend_from_slice(&head);
    for f in &msg.data {
        out.extend_from_slice(f);
    }
    Ok(out)
}

/// The inverse of [`encode`]: the frames are slices of `b` (no copy).
///
/// # Errors
/// [`ContainerError::Layout`] for a frame count of 0 or over [`MAX_FRAMES`], a table or frame
/// that overruns `b`, a meta frame over [`MAX_META_BYTES`], or trailing bytes;
/// [`ContainerError::Frames`] when the frames do not decode ([`decode_frames`]).
pub fn decode(b: Bytes) -> Result<Message, ContainerError> {
    let bad = |why: String| ContainerError::Layout(why);
    let n = b
        .get(..4)
        .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]) as usize)
        .ok_or_else(|| bad("shorter than its frame count".into()))?;
    if n == 0 || n > MAX_FRAMES {
        return Err(bad(format!("{n} frames")));
    }
    let mut at = 4 + 8 * n;
    if b.len() < at {
        return Err(bad("shorter than its frame table".into()));
    }
    let mut frames = Vec::with_capacity(n);
    for i in 0..n {
        let o = 4 + 8 * i;
        let len = u64::from_le_bytes(
            b[o..o + 8]
                .try_into()
                .map_err(|_| bad("frame table".into()))?,
        ) as usize;
        if i == 0 && len > MAX_META_BYTES {
            return Err(bad(format!("meta frame of {len} bytes")));
        }
        let end = at
            .checked_add(len)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| bad(format!("frame {i} of {len} bytes overruns the message")))?;
        frames.push(b.slice(at..end));
        at = end;
    }
    if at != b.len() {
        return Err(bad(format!("{} trailing bytes", b.len() - at)));
    }
    Ok(decode_frames(frames)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Meta;

    #[test]
    fn container_round_trip_and_rejections() {
        let msg = Message {
            meta: Meta {
                head: 5,
                ..Meta::default()
            },
            data: vec![Bytes::from_static(b"abc"), Bytes::new()],
        };
        let b = Bytes::from(encode(msg).expect("encodes"));
        let back = decode(b.clone()).expect("decodes");
        assert_eq!(back.meta.head, 5);
        assert_eq!(back.data, vec![Bytes::from_static(b"abc"), Bytes::new()]);
        assert!(decode(b.slice(..b.len() - 1)).is_err());
        assert!(decode(Bytes::from_static(&[0, 0, 0, 0])).is_err());
        assert!(decode(Bytes::from_static(&[
            1, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255
        ]))
        .is_err());
    }

    #[test]
    fn errors_say_which_layer_refused() {
        let mut b = encode(Message::default()).expect("encodes");
        b.push(0);
        assert_eq!(
            decode(Bytes::from(b)).unwrap_err().to_string(),
            "malformed message container: 1 trailing bytes"
        );
        // A well-formed container whose meta frame is not a meta.
        let junk = [1u8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xFF];
        assert!(matches!(
            decode(Bytes::copy_from_slice(&junk)),
            Err(ContainerError::Frames(_))
        ));
    }
}
