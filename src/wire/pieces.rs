//! Payload frames in pieces. The ZMQ van sends no ZMQ frame longer than [`PIECE_BYTES`], so a
//! node caps every ZMQ frame it reads at that (`ZMQ_MAXMSGSIZE`). libzmq applies that cap from
//! a connection's first byte on, before it has authenticated, so what a stranger can make a
//! node hold is one piece per connection, not a role's whole frame bound.
//!
//! A payload frame longer than a piece leaves as consecutive pieces of `piece` bytes, the last
//! one shorter or equal: slices of the frame's buffer, no copy. The meta frame still lists each
//! payload frame's whole length, so the receiver knows how many pieces make each frame, and
//! whether one is over its bound, before it reads any ([`Assembly`]). A frame of one piece is
//! kept as received; only one of several pieces is copied into one buffer. No IO here.

use super::codec::decode_meta;
use super::{Message, Meta, WireError};
use bytes::{Bytes, BytesMut};

/// The longest ZMQ frame a van sends: 4 MiB, so that values of up to 4 MiB (BytePS's default
/// partition is 4 MB) travel in one piece, uncopied. A node takes no ZMQ frame longer than
/// this or than its role's frame bound, whichever is less (the scheduler's:
/// [`MAX_META_BYTES`](super::MAX_META_BYTES), 1 MiB).
pub const PIECE_BYTES: usize = 4 << 20;

/// How many pieces of `piece` bytes a frame of `len` bytes leaves in: at least one (an empty
/// frame is one empty piece).
pub fn piece_count(len: u64, piece: usize) -> u64 {
    len.div_ceil(piece.max(1) as u64).max(1)
}

/// The pieces of `frame`: slices (no copy) of `piece` bytes, the last one `1..=piece` bytes
/// (or the empty frame itself).
pub fn pieces(frame: Bytes, piece: usize) -> impl Iterator<Item = Bytes> {
    let piece = piece.max(1);
    let n = piece_count(frame.len() as u64, piece) as usize;
    (0..n).map(move |i| {
        let start = i * piece;
        frame.slice(start..(start + piece).min(frame.len()))
    })
}

/// A received message put together from its pieces, as they arrive: the meta frame first
/// ([`Assembly::new`]), then each payload frame's pieces in order ([`Assembly::push`]).
#[derive(Debug)]
pub struct Assembly {
    meta: Meta,
    piece: usize,
    /// The payload frames complete so far.
    done: Vec<Bytes>,
    /// The frame being joined from several pieces, and how many of its pieces arrived.
    joining: Option<(BytesMut, u64)>,
}

impl Assembly {
    /// Starts the message whose meta frame is `head`, sent in pieces of `piece` bytes, each of
    /// its payload frames at most `max_frame` bytes (the receiving node's bound).
    ///
    /// # Errors
    /// The meta does not decode ([`decode_meta`]); [`WireError::OverBound`] naming the first
    /// payload frame longer than `max_frame`, before any of it is read.
    pub fn new(head: &[u8], piece: usize, max_frame: u64) -> Result<Assembly, WireError> {
        let meta = decode_meta(head)?;
        if let Some((index, &len)) = meta
            .stamp
            .frame_lens
            .iter()
            .enumerate()
            .find(|(_, &l)| l > max_frame)
        {
            return Err(WireError::OverBound {
                index,
                len,
                max: max_frame,
            });
        }
        Ok(Assembly {
            done: Vec::with_capacity(meta.stamp.frame_lens.len()),
            meta,
            piece: piece.max(1),
            joining: None,
        })
    }

    /// The header of the message (its `frame_lens` list each payload frame's whole length).
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Whether every announced piece has arrived.
    pub fn complete(&self) -> bool {
        self.done.len() == self.meta.stamp.frame_lens.len()
    }

    /// Takes the next piece.
    ///
    /// # Errors
    /// [`WireError::FrameCount`] when every announced frame is complete already;
    /// [`WireError::FrameLength`] when the piece is not as long as its place in its frame
    /// requires (`piece` bytes, the last one what remains).
    pub fn push(&mut self, bytes: Bytes) -> Result<(), WireError> {
        let index = self.done.len();
        let Some(&len) = self.meta.stamp.frame_lens.get(index) else {
            return Err(WireError::FrameCount {
                announced: self.meta.stamp.frame_lens.len(),
                got: index + 1,
            });
        };
        let count = piece_count(len, self.piece);
        let (mut buf, arrived) = match self.joining.take() {
            Some(j) => j,
            None if count == 1 => {
                if bytes.len() as u64 != len {
                    return Err(WireError::FrameLength {
                        index,
                        announced: len,
                        got: bytes.len(),
                    });
                }
                self.done.push(bytes);
                return Ok(());
            }
            // `len` is at most the node's bound, checked in `new`.
            None => (BytesMut::with_capacity(len as usize), 0),
        };
        let want = (len - arrived * self.piece as u64).min(self.piece as u64);
        if bytes.len() as u64 != want {
            return Err(WireError::FrameLength {
                index,
                announced: len,
                got: buf.len() + bytes.len(),
            });
        }
        buf.extend_from_slice(&bytes);
        if arrived + 1 == count {
            self.done.push(buf.freeze());
        } else {
            self.joining = Some((buf, arrived + 1));
        }
        Ok(())
    }

    /// The message.
    ///
    /// # Errors
    /// [`WireError::FrameCount`] when pieces are missing.
    pub fn finish(self) -> Result<Message, WireError> {
        if !self.complete() {
            return Err(WireError::FrameCount {
                announced: self.meta.stamp.frame_lens.len(),
                got: self.done.len(),
            });
        }
        Ok(Message {
            meta: self.meta,
            data: self.done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode_meta;
    use proptest::prelude::*;

    fn message(lens: &[usize]) -> (Vec<u8>, Message) {
        let mut msg = Message {
            meta: Meta::default(),
            data: lens
                .iter()
                .enumerate()
                .map(|(i, &n)| Bytes::from((0..n).map(|b| (b * 7 + i) as u8).collect::<Vec<_>>()))
                .collect(),
        };
        (encode_meta(&mut msg).expect("encodes"), msg)
    }

    proptest! {
        /// Any frames, cut into pieces of any size and put together again, are the frames
        /// sent, byte for byte; the pieces are never longer than a piece.
        #[test]
        fn frames_cut_into_pieces_come_back_whole(
            lens in prop::collection::vec(0usize..70, 0..6), piece in 1usize..20,
        ) {
            let (head, msg) = message(&lens);
            let mut a = Assembly::new(&head, piece, 1000).expect("meta");
            for f in &msg.data {
                for p in pieces(f.clone(), piece) {
                    prop_assert!(p.len() <= piece);
                    prop_assert!(!a.complete());
                    a.push(p).expect("piece");
                }
            }
            prop_assert!(a.complete());
            let back = a.finish().expect("whole");
            prop_assert_eq!(back.data, msg.data);
        }

        /// A piece missing, one too many or one cut short is an error, never a wrong frame.
        #[test]
        fn wrong_pieces_are_errors(
            lens in prop::collection::vec(1usize..70, 1..5), piece in 1usize..20, which in any::<prop::sample::Index>(),
        ) {
            let (head, msg) = message(&lens);
            let all: Vec<Bytes> = msg.data.iter().flat_map(|f| pieces(f.clone(), piece)).collect();
            let drop_at = which.index(all.len());
            // One missing.
            let mut a = Assembly::new(&head, piece, 1000).expect("meta");
            let mut failed = false;
            for (i, p) in all.iter().enumerate() {
                if i != drop_at {
                    failed |= a.push(p.clone()).is_err();
                }
            }
            prop_assert!(failed || a.finish().is_err());
            // One too many.
            let mut a = Assembly::new(&head, piece, 1000).expect("meta");
            for p in &all {
                a.push(p.clone()).expect("piece");
            }
            prop_assert!(
                matches!(a.push(Bytes::from_static(b"x")), Err(WireError::FrameCount { .. })),
                "an extra piece is refused"
            );
            // One cut short.
            let mut a = Assembly::new(&head, piece, 1000).expect("meta");
            let mut failed = false;
            for (i, p) in all.iter().enumerate() {
                let p = if i == drop_at { p.slice(..p.len() - 1) } else { p.clone() };
                failed |= a.push(p).is_err();
                if failed { break }
            }
            prop_assert!(failed, "a short piece is refused");
        }
    }

    #[test]
    fn a_frame_over_the_bound_is_refused_before_any_piece_is_read() {
        let (head, _) = message(&[3, 2000, 5]);
        let e = Assembly::new(&head, 100, 1999).expect_err("over");
        assert_eq!(
            e,
            WireError::OverBound {
                index: 1,
                len: 2000,
                max: 1999
            }
        );
        assert!(
            e.to_string()
                .contains("data frame 1 of 2000 bytes exceeds this node's bound of 1999 bytes"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_frame_is_one_empty_piece() {
        let p: Vec<Bytes> = pieces(Bytes::new(), 4).collect();
        assert_eq!(p, vec![Bytes::new()]);
        assert_eq!(piece_count(0, 4), 1);
        assert_eq!(piece_count(8, 4), 2);
        assert_eq!(piece_count(9, 4), 3);
    }
}
