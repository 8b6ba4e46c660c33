//! Wire format: the [`Meta`] header (serde + bincode 2), [`ControlMsg`] commands, and raw data
//! frames. No IO here: the vans move [`Message`]s, this module only says what they look like and
//! validates what arrives.
//!
//! A message on the wire is a sequence of frames: frame 0 is the bincode-encoded [`Meta`], frames
//! 1.. are payload bytes (for key-value traffic: keys, values, lengths, as ps-lite's `SArray`s).
//! The meta lists the byte length of every payload frame, so a truncated, missing or extra frame
//! is detected before anything reads it.

mod checksum;
mod codec;
#[doc(hidden)]
pub mod container;
mod control;
mod ids;
mod imm;
mod meta;
#[doc(hidden)]
pub mod pieces;

#[doc(hidden)]
pub use checksum::crc32c;
#[doc(hidden)]
pub use codec::{
    decode_frames, decode_meta, encode_meta, WireError, MAX_FRAME_BYTES, MAX_META_BYTES,
};
pub use control::{
    BarrierFailure, BarrierWait, Command, ControlMsg, KeyLayout, KeyMove, KeyPart, NodeTable,
    Rejoin, Takeover,
};
pub use ids::{place, NodeId, SCHEDULER};
pub use imm::Imm;
pub use meta::{
    DType, KeyRef, KvHeader, Meta, Node, Placement, Rendezvous, RequestTag, Role, Stamp,
};
#[doc(hidden)]
pub use pieces::{pieces, Assembly, PIECE_BYTES};

use bytes::Bytes;

/// A key of the key-value layer (`u64`, as ps-lite's `Key`): in the keys frame, in rendezvous
/// messages, and in key ranges.
pub type Key = u64;

/// One message: a header and its payload frames (zero or more byte buffers).
///
/// For key-value requests and responses (ps-lite's `KVPairs`) the frames are, in order:
/// keys (`u64` little-endian, 8 bytes each), values (`meta.kv.dtype`, native little-endian),
/// lengths (`u32`, 4 bytes each; empty when every key has the same length).
#[derive(Clone, Debug, Default)]
pub struct Message {
    /// The header.
    pub meta: Meta,
    /// Payload frames, moved without copying where the transport allows it.
    pub data: Vec<Bytes>,
}

impl Message {
    /// A message with a header and no payload.
    pub fn new(meta: Meta) -> Self {
        Message {
            meta,
            data: Vec::new(),
        }
    }

    /// Total payload bytes (sum of the data frames' lengths).
    pub fn data_bytes(&self) -> usize {
        self.data.iter().map(|d| d.len()).sum()
    }
}
