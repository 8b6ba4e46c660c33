//! Slicing a call's keys and values by the servers' key layout (ps-lite's `DefaultSlicer`, over
//! [`Layout`]'s parts rather than ranges by rank). Index arithmetic only: no copies, no IO.

use super::Key;
use crate::postoffice::ranges::layout::Layout;
use crate::wire::Node;
use std::ops::Range as Span;

/// The part of a call that goes to one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Server rank.
    pub server: usize,
    /// Indices into the call's keys (and lens).
    pub keys: Span<usize>,
    /// Indices into the call's values.
    pub vals: Span<usize>,
}

/// Splits sorted `keys` over the parts of `layout`, in key order (a server holds one part).
/// `lens` empty means `nvals / keys.len()` values per key. Servers that get no key are left
/// out. Shapes must be checked before (see [`super::pairs::check_shape`]).
pub fn slice(layout: &Layout, keys: &[Key], nvals: usize, lens: &[u32]) -> Vec<Slice> {
    let parts = layout.parts();
    let width = if keys.is_empty() {
        0
    } else {
        nvals / keys.len()
    };
    let mut out = Vec::new();
    let (mut k, mut v) = (0usize, 0usize);
    while k < keys.len() {
        let at = parts
            .partition_point(|p| p.range.begin <= keys[k])
            .saturating_sub(1);
        let server = Node::rank_of(parts[at].owner);
        let end_key = parts.get(at + 1).map(|p| p.range.begin);
        let k_end = match end_key {
            Some(e) => k + keys[k..].partition_point(|&key| key < e),
            None => keys.len(),
        };
        let nv = if lens.is_empty() {
            (k_end - k) * width
        } else {
            lens[k..k_end].iter().map(|&l| l as usize).sum()
        };
        out.push(Slice {
            server,
            keys: k..k_end,
            vals: v..v + nv,
        });
        k = k_end;
        v += nv;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postoffice::range::{server_key_ranges, server_of};

    fn even(n: usize) -> Layout {
        Layout::start(n)
    }

    #[test]
    fn even_width_split() {
        let r = server_key_ranges(3);
        let keys = [1, 2, r[1].begin, r[2].begin + 5, u64::MAX];
        let s = slice(&even(3), &keys, 10, &[]);
        assert_eq!(
            s,
            vec![
                Slice {
                    server: 0,
                    keys: 0..2,
                    vals: 0..4
                },
                Slice {
                    server: 1,
                    keys: 2..3,
                    vals: 4..6
                },
                Slice {
                    server: 2,
                    keys: 3..5,
                    vals: 6..10
                },
            ]
        );
    }

    #[test]
    fn explicit_lens_and_skipped_servers() {
        let r = server_key_ranges(3);
        let keys = [0, r[2].begin];
        let s = slice(&even(3), &keys, 5, &[2, 3]);
        assert_eq!(
            s,
            vec![
                Slice {
                    server: 0,
                    keys: 0..1,
                    vals: 0..2
                },
                Slice {
                    server: 2,
                    keys: 1..2,
                    vals: 2..5
                },
            ]
        );
    }

    proptest::proptest! {
        #[test]
        fn slices_partition_the_call(mut keys in proptest::collection::btree_set(proptest::num::u64::ANY, 0..50),
                                     n in 1usize..6, width in 0usize..4) {
            let r = server_key_ranges(n);
            let keys: Vec<u64> = std::mem::take(&mut keys).into_iter().collect();
            let s = slice(&even(n), &keys, keys.len() * width, &[]);
            let mut next_k = 0; let mut next_v = 0; let mut last_server = None;
            for part in &s {
                proptest::prop_assert_eq!(part.keys.start, next_k);
                proptest::prop_assert_eq!(part.vals.start, next_v);
                proptest::prop_assert!(last_server < Some(part.server));
                for &k in &keys[part.keys.clone()] { proptest::prop_assert_eq!(server_of(&r, k), part.server); }
                next_k = part.keys.end; next_v = part.vals.end; last_server = Some(part.server);
            }
            proptest::prop_assert_eq!(next_k, keys.len());
            proptest::prop_assert_eq!(next_v, keys.len() * width);
        }
    }
}
