//! The unique keys of a batch of ids and the inverse that maps each id to its key: what a
//! worker sends for a batch of embedding lookups (`pslite.torch`), whose keys must be sorted and
//! unique. One pass through an open-addressing hash table (linear probing, Fibonacci hashing:
//! Knuth, TAOCP vol. 3, 6.4), then a sort of the distinct keys only.

use super::Key;

/// `(keys, inverse)` of `ids`: `keys` the distinct ids sorted (shape (n,)), `inverse` one per
/// id with `keys[inverse[i]] == ids[i]` (int64: PyTorch's and NumPy's index type). O(len)
/// expected time for the table, O(n log n) for the sort. Panics on 2^32 − 1 ids or more.
pub fn unique(ids: &[Key]) -> (Vec<Key>, Vec<i64>) {
    assert!(
        ids.len() < u32::MAX as usize,
        "unique: 2^32 − 1 ids or more"
    );
    let len = ids.len();
    let cap = (2 * len).next_power_of_two().max(2);
    let shift = 64 - cap.trailing_zeros();
    let mask = cap - 1;
    let mut slot_key: Vec<Key> = vec![0; cap];
    let mut slot_first = vec![u32::MAX; cap];
    let mut firsts: Vec<Key> = Vec::new();
    let mut first_of: Vec<u32> = Vec::with_capacity(len);
    for &id in ids {
        let mut at = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize;
        loop {
            if slot_first[at] == u32::MAX {
                slot_first[at] = firsts.len() as u32;
                slot_key[at] = id;
                first_of.push(firsts.len() as u32);
                firsts.push(id);
                break;
            }
            if slot_key[at] == id {
                first_of.push(slot_first[at]);
                break;
            }
            at = (at + 1) & mask;
        }
    }
    let mut order: Vec<u32> = (0..firsts.len() as u32).collect();
    order.sort_unstable_by_key(|&f| firsts[f as usize]);
    let mut rank = vec![0i64; firsts.len()];
    for (r, &f) in order.iter().enumerate() {
        rank[f as usize] = r as i64;
    }
    let keys = order.iter().map(|&f| firsts[f as usize]).collect();
    let inverse = first_of.iter().map(|&f| rank[f as usize]).collect();
    (keys, inverse)
}

#[cfg(test)]
mod tests {
    use super::unique;
    use proptest::prelude::*;

    proptest! {
        /// The keys are the sorted distinct ids, and each id's inverse points at itself.
        #[test]
        fn keys_are_sorted_distinct_and_the_inverse_maps_back(
            ids in proptest::collection::vec(prop_oneof![0u64..20, any::<u64>()], 0..300)
        ) {
            let (keys, inverse) = unique(&ids);
            let mut want = ids.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(&keys, &want);
            prop_assert_eq!(inverse.len(), ids.len());
            for (i, &id) in ids.iter().enumerate() {
                prop_assert_eq!(keys[inverse[i] as usize], id);
            }
        }
    }
}
