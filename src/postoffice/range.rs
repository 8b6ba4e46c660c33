//! Key ranges: server i of n owns `[u64::MAX / n * i, u64::MAX / n * (i + 1))`; the last server
//! owns everything from its begin to `u64::MAX` inclusive (ps-lite's `GetServerKeyRanges`).

/// A half-open key range `[begin, end)`. The last server's range also owns `u64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// First key.
    pub begin: u64,
    /// One past the last key (`u64::MAX` for the last server, which owns `u64::MAX` too).
    pub end: u64,
}

impl Range {
    /// Whether `key` is in the range (`end` = `u64::MAX` includes `u64::MAX`).
    pub fn holds(&self, key: u64) -> bool {
        key >= self.begin && (key < self.end || self.end == u64::MAX)
    }
}

/// The key ranges of `n` servers, in rank order.
///
/// # Panics
/// Never for `n ≥ 1`; `n = 0` gives an empty vector.
pub fn server_key_ranges(n: usize) -> Vec<Range> {
    let n64 = n as u64;
    (0..n64)
        .map(|i| Range {
            begin: u64::MAX / n64.max(1) * i,
            end: if i + 1 == n64 {
                u64::MAX
            } else {
                u64::MAX / n64 * (i + 1)
            },
        })
        .collect()
}

/// The rank of the server owning `key` among `ranges` (as made by [`server_key_ranges`]).
pub fn server_of(ranges: &[Range], key: u64) -> usize {
    ranges.partition_point(|r| r.begin <= key).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_key_space_in_order() {
        for n in 1..9 {
            let r = server_key_ranges(n);
            assert_eq!(r.len(), n);
            assert_eq!(r[0].begin, 0);
            assert_eq!(r[n - 1].end, u64::MAX);
            for w in r.windows(2) {
                assert_eq!(w[0].end, w[1].begin);
            }
            assert_eq!(server_of(&r, 0), 0);
            assert_eq!(server_of(&r, u64::MAX), n - 1);
            for (i, range) in r.iter().enumerate() {
                assert_eq!(server_of(&r, range.begin), i);
                assert_eq!(server_of(&r, range.end - 1), i);
            }
        }
    }

    #[test]
    fn two_servers_split_at_half() {
        let r = server_key_ranges(2);
        assert_eq!(
            r[0],
            Range {
                begin: 0,
                end: u64::MAX / 2
            }
        );
        assert_eq!(server_of(&r, u64::MAX / 2 - 1), 0);
        assert_eq!(server_of(&r, u64::MAX / 2), 1);
    }
}
