//! Memory bounds: how much a worker keeps in flight, how much a server parks for
//! applications it does not serve yet, the largest frame a node takes, and how many
//! connections it accepts. With them a worker's loop that never waits blocks instead of
//! growing queues, a server parks at most what every worker may have in flight, and no peer,
//! member or not, makes a node read a frame over its limit or hold more connections than the
//! cap. What they do not bound: a hostile member (it holds a credential) that ignores the budget
//! and floods an application that *is* served fills that server's receive queue, as the
//! queues between a ZMQ socket and its customer thread have no limit of their own.

use super::vars::Vars;
use crate::error::Result;
use crate::wire::{Role, MAX_FRAME_BYTES, MAX_META_BYTES};

/// Default of `PS_MAX_INFLIGHT_BYTES`: 256 MiB per worker.
pub const DEFAULT_MAX_INFLIGHT_BYTES: u64 = 256 << 20;

/// Default of `PS_MAX_UNAUTHENTICATED`: 16 connections, 8 from one address (a server or worker
/// holds at most 16 frames of 4 MiB for them, the scheduler 16 of 1 MiB).
pub const DEFAULT_MAX_UNAUTHENTICATED: usize = 16;

/// Smallest `PS_MAX_INFLIGHT_BYTES`: a request's header alone may take 1 MiB.
pub const MIN_INFLIGHT_BYTES: u64 = MAX_META_BYTES as u64;

/// What a request counts beside its payload in a worker's in-flight bytes and a server's
/// parked bytes: about what its header and bookkeeping hold in memory, so that many small
/// requests are bounded as well as a few large ones.
pub const REQUEST_OVERHEAD_BYTES: u64 = 1024;

/// The bounds of one node (`PS_MAX_INFLIGHT_BYTES`, `PS_MAX_CONNECTIONS`,
/// `PS_MAX_UNAUTHENTICATED`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    /// `PS_MAX_INFLIGHT_BYTES`: the bytes of a worker's requests sent and not yet answered
    /// (payload — keys, values, lengths — plus [`REQUEST_OVERHEAD_BYTES`] per server part).
    /// A push or pull that would pass it blocks until earlier requests complete, for at most
    /// `PS_TIMEOUT`; one request part larger than it is refused. The same on every node: a
    /// server parks at most this much per worker, and takes no larger frame.
    pub max_inflight_bytes: u64,
    /// `PS_MAX_CONNECTIONS`: connections a node's van accepts at a time; one more is closed
    /// at once.
    pub max_connections: usize,
    /// `PS_MAX_UNAUTHENTICATED`: of those, connections whose handshake has not succeeded yet,
    /// and half of it (at least one) from one source address. Over either cap (or over
    /// `PS_MAX_CONNECTIONS`), the oldest unauthenticated connection in its scope is closed.
    /// Each can make the node hold one ZMQ frame of at most [`crate::wire::PIECE_BYTES`].
    pub max_unauthenticated: usize,
}

impl Bounds {
    /// The default for a cluster of `servers` and `workers`: [`DEFAULT_MAX_INFLIGHT_BYTES`],
    /// and twice the connections the cluster opens to one node (one from each other node, and
    /// a node's replacement or second connection while its first closes) plus 32.
    pub fn default_for(servers: usize, workers: usize) -> Bounds {
        Bounds {
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            max_connections: 2 * (1 + servers + workers) + 32,
            max_unauthenticated: DEFAULT_MAX_UNAUTHENTICATED,
        }
    }

    /// Bytes (payload plus [`REQUEST_OVERHEAD_BYTES`] each) a server keeps parked for
    /// applications it does not serve yet (a `KVServer` registers a moment after the start,
    /// or a replacement is restoring): what `workers` workers may have in flight.
    pub fn parked_bytes(&self, workers: usize) -> u64 {
        self.max_inflight_bytes.saturating_mul(workers as u64)
    }

    /// The longest payload frame a node of `role` accepts (a message announcing a longer one
    /// is dropped, its pieces read and let go one at a time, [`mod@crate::wire::pieces`]): the scheduler gets headers only ([`MAX_META_BYTES`]), a server request
    /// parts (at most `max_inflight_bytes`), a worker answers of any size ([`MAX_FRAME_BYTES`]:
    /// what it pulls is its own choice).
    pub fn max_frame_bytes(&self, role: Role) -> u64 {
        match role {
            Role::Scheduler => MAX_META_BYTES as u64,
            Role::Server => self
                .max_inflight_bytes
                .clamp(MAX_META_BYTES as u64, MAX_FRAME_BYTES),
            Role::Worker => MAX_FRAME_BYTES,
        }
    }
}

/// `PS_MAX_INFLIGHT_BYTES` and `PS_MAX_CONNECTIONS` for a cluster of `servers` and
/// `workers`.
pub(super) fn bounds<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    servers: usize,
    workers: usize,
) -> Result<Bounds> {
    let default = Bounds::default_for(servers, workers);
    Ok(Bounds {
        max_inflight_bytes: vars
            .ranged("PS_MAX_INFLIGHT_BYTES", MIN_INFLIGHT_BYTES, 1 << 40)?
            .unwrap_or(default.max_inflight_bytes),
        max_connections: vars
            .ranged("PS_MAX_CONNECTIONS", 1usize, 1 << 20)?
            .unwrap_or(default.max_connections),
        max_unauthenticated: vars
            .ranged("PS_MAX_UNAUTHENTICATED", 2usize, 1 << 16)?
            .unwrap_or(default.max_unauthenticated),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Bounds> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        bounds(&Vars::new(|k: &str| map.get(k).cloned()), 2, 4)
    }

    #[test]
    fn defaults_follow_the_cluster_and_variables_replace_them() {
        let b = read(&[]).expect("defaults");
        assert_eq!(b, Bounds::default_for(2, 4));
        assert_eq!(b.max_connections, 2 * 7 + 32);
        assert_eq!(b.parked_bytes(4), 4 * DEFAULT_MAX_INFLIGHT_BYTES);
        let b = read(&[
            ("PS_MAX_INFLIGHT_BYTES", "33554432"),
            ("PS_MAX_CONNECTIONS", " 9 "),
            ("PS_MAX_UNAUTHENTICATED", "4"),
        ])
        .expect("set");
        assert_eq!((b.max_inflight_bytes, b.max_connections), (32 << 20, 9));
        assert_eq!(b.max_unauthenticated, 4);
        assert_eq!(b.max_frame_bytes(Role::Server), 32 << 20);
        assert_eq!(b.max_frame_bytes(Role::Scheduler), MAX_META_BYTES as u64);
        assert_eq!(b.max_frame_bytes(Role::Worker), MAX_FRAME_BYTES);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = read(&[("PS_MAX_INFLIGHT_BYTES", "1000")]).expect_err("too small");
        assert!(e.to_string().contains("PS_MAX_INFLIGHT_BYTES"), "{e}");
        let e = read(&[("PS_MAX_CONNECTIONS", "0")]).expect_err("zero");
        assert!(e.to_string().contains("PS_MAX_CONNECTIONS"), "{e}");
        let e = read(&[("PS_MAX_UNAUTHENTICATED", "1")]).expect_err("one");
        assert!(e.to_string().contains("PS_MAX_UNAUTHENTICATED"), "{e}");
    }
}
