//! The requesting side (TF's `RdmaTensorRequest`): one pull of one key from one server, with the
//! per-(server, key) meta-data cache. Sans-IO: the driver feeds calls and messages in and carries
//! out the [`ReqAction`]s.
//!
//! Life of a request: `start` → (cache hit) `Allocate` → `allocated` → `Send(TENSOR_REQUEST)` →
//! write with immediate = index → `Complete`. On a cache miss or changed meta-data the server
//! answers `META_DATA_RESPONSE` instead of writing: the cache is updated, `Allocate` asks for a
//! destination of the new size, `allocated` sends `TENSOR_RE_REQUEST`, and the write follows.
//! `ERROR_STATUS` fails the request with the server's text. Messages for an index that is not
//! outstanding, from the wrong peer, or in the wrong phase are ignored (duplicates, stale
//! answers), so each request completes or fails exactly once.

use super::message::{RvMessage, TensorMeta};
use super::Dest;
use crate::wire::Imm;
use crate::wire::Key;
use crate::wire::{DType, Node, NodeId};
use std::collections::HashMap;

/// What the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum ReqAction {
    /// Provide a destination of at least `bytes` bytes for request `index`, then call
    /// [`Requester::allocated`].
    Allocate {
        /// Request index.
        index: u32,
        /// Bytes needed.
        bytes: u64,
    },
    /// Send `msg` to node `to`.
    Send {
        /// Receiver (the server).
        to: NodeId,
        /// The message.
        msg: RvMessage,
    },
    /// Request `index` completed: its destination holds `meta.bytes` bytes of content.
    Complete {
        /// Request index.
        index: u32,
        /// Meta-data of the content.
        meta: TensorMeta,
    },
    /// Request `index` failed.
    Fail {
        /// Request index.
        index: u32,
        /// Why (the server's text for `ERROR_STATUS`).
        error: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Waiting for a destination; `re` when it follows a meta-data response.
    Allocating { re: bool },
    /// Request sent; a write (cache hit) or a meta-data response may come.
    Requested,
    /// Re-request sent; only the write may come.
    ReRequested,
}

#[derive(Clone, Debug)]
struct Pending {
    server: NodeId,
    key: Key,
    step: i64,
    dtype: DType,
    phase: Phase,
    /// The meta-data the content must match (the cached one, or the one the server sent).
    expected: Option<TensorMeta>,
    checksum: Option<u32>,
    dest: Option<Dest>,
}

/// The requester: outstanding requests by index, and the meta-data cache.
#[derive(Default)]
pub struct Requester {
    validation: bool,
    cache: HashMap<(NodeId, Key), TensorMeta>,
    pending: HashMap<u32, Pending>,
    slot: Option<u8>,
    pub(super) next: u32,
    round_trips: HashMap<(NodeId, Key), u64>,
}

impl Requester {
    /// A requester; `validation` (`PS_DATA_VALIDATION=1`) checks every content's crc32c.
    pub fn new(validation: bool) -> Requester {
        Requester {
            validation,
            ..Requester::default()
        }
    }

    /// A requester whose request indices carry `slot` ([`Imm::slot`], 0–254), so that a
    /// node's van can route a remote write's immediate to it.
    pub fn with_slot(validation: bool, slot: u8) -> Requester {
        Requester {
            validation,
            slot: Some(slot.min(Imm::MAX_SLOT)),
            ..Requester::default()
        }
    }

    fn fresh_index(&mut self) -> u32 {
        loop {
            let i = match self.slot {
                None => self.next,
                Some(s) => Imm::new(s, self.next).0,
            };
            self.next = self.next.wrapping_add(1);
            if i < Imm::ACK.0 && !self.pending.contains_key(&i) {
                return i;
            }
        }
    }

    /// Starts a pull of `key` (`dtype` values) from `server` at step `step`. Returns the request
    /// index (the immediate of its content write) and the first actions.
    pub fn start(
        &mut self,
        server: NodeId,
        key: Key,
        step: i64,
        dtype: DType,
    ) -> (u32, Vec<ReqAction>) {
        let index = self.fresh_index();
        let cached = self
            .cache
            .get(&(server, key))
            .copied()
            .filter(|m| m.dtype == dtype);
        let mut p = Pending {
            server,
            key,
            step,
            dtype,
            phase: Phase::Requested,
            expected: cached,
            checksum: None,
            dest: None,
        };
        let actions = match cached {
            Some(meta) => {
                p.phase = Phase::Allocating { re: false };
                vec![ReqAction::Allocate {
                    index,
                    bytes: meta.bytes,
                }]
            }
            None => vec![ReqAction::Send {
                to: server,
                msg: RvMessage::TensorRequest {
                    key,
                    step,
                    request_index: index,
                    remote_addr: 0,
                    rkey: 0,
                    dtype,
                    cached: None,
                },
            }],
        };
        self.pending.insert(index, p);
        (index, actions)
    }

    /// The driver's answer to [`ReqAction::Allocate`].
    pub fn allocated(&mut self, index: u32, dest: Dest) -> Vec<ReqAction> {
        let Some(p) = self.pending.get_mut(&index) else {
            return vec![];
        };
        let Phase::Allocating { re } = p.phase else {
            return vec![];
        };
        let need = p.expected.map_or(0, |m| m.bytes);
        if dest.capacity < need {
            let p = self.pending.remove(&index);
            let key = p.map_or(0, |p| p.key);
            return vec![ReqAction::Fail {
                index,
                error: format!(
                    "destination of {} bytes is too small for key {key} ({need} bytes)",
                    dest.capacity
                ),
            }];
        }
        p.dest = Some(dest);
        let msg = if re {
            p.phase = Phase::ReRequested;
            RvMessage::TensorReRequest {
                key: p.key,
                step: p.step,
                request_index: index,
                remote_addr: dest.addr,
                rkey: dest.rkey,
            }
        } else {
            p.phase = Phase::Requested;
            RvMessage::TensorRequest {
                key: p.key,
                step: p.step,
                request_index: index,
                remote_addr: dest.addr,
                rkey: dest.rkey,
                dtype: p.dtype,
                cached: p.expected,
            }
        };
        vec![ReqAction::Send { to: p.server, msg }]
    }

    /// A control message from `from`.
    pub fn on_message(&mut self, from: NodeId, msg: RvMessage) -> Vec<ReqAction> {
        let index = msg.request_index();
        let Some(p) = self.pending.get_mut(&index) else {
            return vec![];
        };
        if p.server != from {
            return vec![];
        }
        match msg {
            RvMessage::MetaDataResponse { meta, .. }
                if p.phase == Phase::Requested && meta.dtype != p.dtype =>
            {
                let (key, dtype) = (p.key, p.dtype);
                self.pending.remove(&index);
                vec![ReqAction::Fail {
                    index,
                    error: format!(
                        "key {key} holds {} values, requested as {dtype}",
                        meta.dtype
                    ),
                }]
            }
            RvMessage::MetaDataResponse { meta, checksum, .. } if p.phase == Phase::Requested => {
                self.cache.insert((p.server, p.key), meta);
                *self.round_trips.entry((p.server, p.key)).or_insert(0) += 1;
                p.expected = Some(meta);
                p.checksum = checksum;
                if meta.is_dead {
                    self.pending.remove(&index);
                    return vec![ReqAction::Complete { index, meta }];
                }
                p.phase = Phase::Allocating { re: true };
                vec![ReqAction::Allocate {
                    index,
                    bytes: meta.bytes,
                }]
            }
            RvMessage::ErrorStatus { message, .. } => {
                self.pending.remove(&index);
                vec![ReqAction::Fail {
                    index,
                    error: message,
                }]
            }
            _ => vec![],
        }
    }

    /// A content write from `from` with immediate `imm`, of `len` bytes whose crc32c is `crc`
    /// (the driver computes it in validation mode only).
    pub fn on_write(
        &mut self,
        from: NodeId,
        imm: u32,
        len: u64,
        crc: Option<u32>,
    ) -> Vec<ReqAction> {
        let Some(p) = self.pending.get(&imm) else {
            return vec![];
        };
        if p.server != from
            || !matches!(p.phase, Phase::Requested | Phase::ReRequested)
            || p.dest.is_none()
        {
            return vec![];
        }
        let Some(p) = self.pending.remove(&imm) else {
            return vec![];
        };
        let Some(meta) = p.expected else {
            return vec![ReqAction::Fail {
                index: imm,
                error: "content arrived before its meta-data".into(),
            }];
        };
        if len != meta.bytes {
            return vec![ReqAction::Fail {
                index: imm,
                error: format!(
                    "{} wrote {len} bytes for key {}, its meta-data says {}",
                    Node::describe(from),
                    p.key,
                    meta.bytes
                ),
            }];
        }
        if self.validation {
            if let (Some(want), Some(got)) = (p.checksum, crc) {
                if want != got {
                    return vec![ReqAction::Fail {
                        index: imm,
                        error: format!("checksum mismatch for key {}: sent crc32c {want:#010x}, received {got:#010x}", p.key),
                    }];
                }
            }
        }
        vec![ReqAction::Complete { index: imm, meta }]
    }

    /// Gives up on request `index` (its wait timed out); a late answer is then ignored.
    pub fn cancel(&mut self, index: u32) {
        self.pending.remove(&index);
    }

    /// Outstanding requests.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// Meta-data round trips (META_DATA_RESPONSE received) so far for `key` on `server`.
    pub fn round_trips(&self, server: NodeId, key: Key) -> u64 {
        self.round_trips.get(&(server, key)).copied().unwrap_or(0)
    }

    /// Cached meta-data of `key` on `server`.
    pub fn cached(&self, server: NodeId, key: Key) -> Option<TensorMeta> {
        self.cache.get(&(server, key)).copied()
    }
}
