//! Reassembly of fragmented messages (sans-IO). A message larger than one record travels as
//! records flagged [`FLAG_MORE`](super::FLAG_MORE) followed by one record without it
//! ([`fragments`](super::fragments) splits it); a receiver feeds each record's payload, in ring
//! order, to a [`Reassembler`], which yields the message once its last record came.

/// The unfinished message of one direction of one channel.
#[derive(Debug, Default)]
pub struct Reassembler {
    partial: Vec<u8>,
}

impl Reassembler {
    /// A reassembler holding nothing.
    pub fn new() -> Reassembler {
        Reassembler::default()
    }

    /// Takes the payload of the next record in ring order (`more`: the record's
    /// [`FLAG_MORE`](super::FLAG_MORE)). Returns the whole message when this record ends it;
    /// `None` while more records are to come. A message of one record is handed back as it
    /// came, without a copy.
    pub fn push(&mut self, payload: Vec<u8>, more: bool) -> Option<Vec<u8>> {
        if more {
            self.partial.extend_from_slice(&payload);
            return None;
        }
        if self.partial.is_empty() {
            return Some(payload);
        }
        let mut whole = std::mem::take(&mut self.partial);
        whole.extend_from_slice(&payload);
        Some(whole)
    }

    /// Bytes of an unfinished message held (0 between messages).
    pub fn pending(&self) -> usize {
        self.partial.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fragments;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_record_passes_through_and_parts_join() {
        let mut r = Reassembler::new();
        assert_eq!(r.push(b"abc".to_vec(), false), Some(b"abc".to_vec()));
        assert_eq!(r.push(b"ab".to_vec(), true), None);
        assert_eq!(r.pending(), 2);
        assert_eq!(r.push(Vec::new(), true), None);
        assert_eq!(r.push(b"c".to_vec(), false), Some(b"abc".to_vec()));
        assert_eq!(r.pending(), 0);
        assert_eq!(r.push(Vec::new(), false), Some(Vec::new()));
    }

    proptest! {
        #[test]
        fn fragments_reassemble_to_the_messages_in_order(
            sizes in proptest::collection::vec(0usize..2000, 1..20),
            max in 1u64..700,
        ) {
            let messages: Vec<Vec<u8>> = sizes.iter().enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
                .collect();
            let mut r = Reassembler::new();
            let mut got = Vec::new();
            for m in &messages {
                for (a, b, more) in fragments(m.len() as u64, max) {
                    if let Some(whole) = r.push(m[a as usize..b as usize].to_vec(), more) {
                        got.push(whole);
                    }
                }
            }
            prop_assert_eq!(got, messages);
            prop_assert_eq!(r.pending(), 0);
        }
    }
}
