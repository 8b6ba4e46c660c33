//! The 32-bit immediate of an RDMA WRITE WITH IMMEDIATE, as this crate lays it out (one home:
//! the rendezvous requester makes content-write immediates, the postoffice routes them, the RDMA
//! channel marks ring records).
//!
//! | bits | what |
//! | --- | --- |
//! | 31..24 | the slot ([`Imm::MAX_SLOT`] at most) of the customer a content write is for |
//! | 23..0 | the request index within that slot |
//!
//! Two values are reserved, as TensorFlow verbs reserves them: [`Imm::RECORD`] (`0xFFFF_FFFF`,
//! a ring record: the record is at the receiver's head) and [`Imm::ACK`] (`0xFFFF_FFFE`).
//! Both have slot 255, which is never handed out, so no content write carries them.

/// A 32-bit immediate: a ring record, or a content write's slot and request index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Imm(pub u32);

impl Imm {
    /// A ring record's immediate (TF verbs' control-message immediate).
    pub const RECORD: Imm = Imm(0xFFFF_FFFF);
    /// Reserved as TF verbs' ACK immediate; never a request index.
    pub const ACK: Imm = Imm(0xFFFF_FFFE);
    /// The highest slot a customer can hold (255 would make [`RECORD`](Self::RECORD) and
    /// [`ACK`](Self::ACK) content writes).
    pub const MAX_SLOT: u8 = 254;
    /// Bits of the request index.
    pub const INDEX_BITS: u32 = 24;
    const INDEX_MASK: u32 = (1 << Self::INDEX_BITS) - 1;

    /// The immediate of a content write for `slot` (clamped to [`MAX_SLOT`](Self::MAX_SLOT)),
    /// request index `index` (its low 24 bits).
    pub fn new(slot: u8, index: u32) -> Imm {
        Imm(u32::from(slot.min(Self::MAX_SLOT)) << Self::INDEX_BITS | (index & Self::INDEX_MASK))
    }

    /// The slot: the customer a content write is routed to.
    pub fn slot(self) -> u8 {
        (self.0 >> Self::INDEX_BITS) as u8
    }

    /// The request index within the slot.
    pub fn index(self) -> u32 {
        self.0 & Self::INDEX_MASK
    }

    /// Whether it marks a ring record rather than a content write.
    pub fn is_record(self) -> bool {
        self == Self::RECORD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_and_index_round_trip_and_no_slot_makes_a_reserved_value() {
        let i = Imm::new(7, 0x12_3456);
        assert_eq!((i.slot(), i.index()), (7, 0x12_3456));
        assert_eq!(i.0, 0x0712_3456);
        assert_eq!(Imm::new(3, 0xFFFF_FFFF).index(), 0xFF_FFFF, "index masked");
        assert_eq!(Imm::new(255, 0).slot(), Imm::MAX_SLOT, "slot clamped");
        for slot in 0..=255u8 {
            for index in [0, 0xFF_FFFE, 0xFF_FFFF] {
                let imm = Imm::new(slot, index);
                assert!(imm != Imm::RECORD && imm != Imm::ACK && !imm.is_record());
            }
        }
        assert!(Imm::RECORD.is_record());
        assert_eq!(Imm::RECORD.slot(), 255);
    }
}
