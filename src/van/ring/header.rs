//! The record header's byte layout (sans-IO): the one place that says how the 8 bytes at the
//! start of every record lie in a ring. The sender encodes a header into its send ring before
//! the RDMA write; the receiver decodes it from its receive ring in
//! [`RingReceiver::next`](super::RingReceiver::next).
//!
//! Layout: payload length (`u32` little-endian) at bytes 0..4, flags (`u32` little-endian) at
//! bytes 4..8. A padding header ([`FLAG_PAD`]) has length 0.

/// Header size in bytes: payload length and flags.
pub const HEADER: u64 = 8;
/// More records of the same message follow.
pub const FLAG_MORE: u32 = 1;
/// Padding up to the ring's end; the next record is at offset 0.
pub const FLAG_PAD: u32 = 2;

/// The bytes of one header as they lie in the ring.
pub type HeaderBytes = [u8; HEADER as usize];

/// One record header: the payload length in bytes and the flags ([`FLAG_MORE`], [`FLAG_PAD`];
/// other bits are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Payload bytes after the header (0 for padding).
    pub len: u32,
    /// Flag bits.
    pub flags: u32,
}

impl Header {
    /// The header of a record of `len` payload bytes; `more` when more records of the same
    /// message follow.
    pub fn record(len: u32, more: bool) -> Header {
        Header {
            len,
            flags: if more { FLAG_MORE } else { 0 },
        }
    }

    /// The padding header: the rest of the ring is skipped, the next record is at offset 0.
    pub fn padding() -> Header {
        Header {
            len: 0,
            flags: FLAG_PAD,
        }
    }

    /// Whether this is a padding header.
    pub fn is_padding(self) -> bool {
        self.flags & FLAG_PAD != 0
    }

    /// Whether more records of the same message follow.
    pub fn more(self) -> bool {
        self.flags & FLAG_MORE != 0
    }

    /// The 8 bytes to write into the ring.
    pub fn encode(self) -> HeaderBytes {
        let mut b = [0u8; HEADER as usize];
        b[..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// The header the 8 bytes `b` read from the ring say. Every byte string is some header;
    /// whether it fits the ring is [`RingReceiver::next`](super::RingReceiver::next)'s check.
    pub fn decode(b: HeaderBytes) -> Header {
        Header {
            len: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            flags: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_is_length_then_flags_little_endian() {
        assert_eq!(
            Header::record(0x0102_0304, true).encode(),
            [4, 3, 2, 1, 1, 0, 0, 0]
        );
        assert_eq!(Header::padding().encode(), [0, 0, 0, 0, 2, 0, 0, 0]);
        let h = Header::decode([5, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(h.len, 5);
        assert!(h.more() && h.is_padding());
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(len: u32, flags: u32) {
            let h = Header { len, flags };
            prop_assert_eq!(Header::decode(h.encode()), h);
        }

        #[test]
        fn record_headers_say_what_they_were_made_with(len: u32, more: bool) {
            let h = Header::decode(Header::record(len, more).encode());
            prop_assert_eq!((h.len, h.more(), h.is_padding()), (len, more, false));
        }
    }
}
