//! The responding side (TF's `RdmaTensorResponse`) with tag matching. Sans-IO: the driver passes
//! requests and a view of the stored values in, and carries out the [`RespAction`]s.
//!
//! On TENSOR_REQUEST: if the key has no value yet, the request waits (tag matching, the seed's
//! "additional design notes" 1) until [`Responder::on_value_ready`]. Otherwise its meta-data is
//! compared with the requester's cached one: equal (and not in validation mode) → write the
//! stored value straight to the request's destination; different, first time, or validation mode
//! → keep a clone of the content and answer META_DATA_RESPONSE; the clone is written when the
//! TENSOR_RE_REQUEST names the new destination.

use super::message::{RvMessage, TensorMeta};
use super::{ERR_DTYPE, ERR_NOT_SERVED};
use crate::wire::Key;
use crate::wire::{DType, NodeId};
use bytes::Bytes;
use std::collections::{HashMap, HashSet, VecDeque};

/// How many answered (requester, index) pairs are remembered to drop duplicate requests.
const REMEMBER: usize = 1 << 16;

/// What the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum RespAction {
    /// Send `msg` to `to`.
    Send {
        /// The requester.
        to: NodeId,
        /// The message.
        msg: RvMessage,
    },
    /// Write the stored value of `key`, as it is now, to `addr`/`rkey` of `to` with immediate `imm`.
    WriteStored {
        /// The requester.
        to: NodeId,
        /// Whose value.
        key: Key,
        /// Destination address.
        addr: u64,
        /// Destination rkey.
        rkey: u32,
        /// Immediate: the request index.
        imm: u32,
    },
    /// Write `data` (the clone kept since the meta-data response) to `addr`/`rkey` of `to`.
    WriteClone {
        /// The requester.
        to: NodeId,
        /// Content.
        data: Bytes,
        /// Destination address.
        addr: u64,
        /// Destination rkey.
        rkey: u32,
        /// Immediate: the request index.
        imm: u32,
    },
}

/// A stored value as the driver shows it: meta-data and content bytes.
pub type Lookup<'a> = Option<(TensorMeta, &'a [u8])>;

#[derive(Clone, Debug)]
struct Parked {
    from: NodeId,
    msg: RvMessage,
}

/// The responder: waiting requests by key, clones by (requester, index).
#[derive(Default)]
pub struct Responder {
    validation: bool,
    dtype: DType,
    parked: HashMap<Key, Vec<Parked>>,
    clones: HashMap<(NodeId, u32), (Bytes, u64)>,
    /// Responses made so far: the age of a clone, in responses.
    clock: u64,
    seen: HashSet<(NodeId, u32)>,
    seen_order: VecDeque<(NodeId, u32)>,
}

impl Responder {
    /// A responder for values of `dtype`; `validation` sends a checksum with every response.
    pub fn new(dtype: DType, validation: bool) -> Responder {
        Responder {
            validation,
            dtype,
            ..Responder::default()
        }
    }

    /// A request from `from` for a key this server does not serve now (its rows moved to
    /// another server, or have not arrived): answered ERROR_STATUS with `why` (once per
    /// request, as [`on_message`](Self::on_message) answers). Any other message: nothing.
    pub fn refuse(&mut self, from: NodeId, msg: &RvMessage, why: String) -> Vec<RespAction> {
        match *msg {
            RvMessage::TensorRequest {
                key,
                step,
                request_index,
                ..
            } if self.first_time(from, request_index) => {
                vec![error(from, (key, step, request_index), ERR_NOT_SERVED, why)]
            }
            _ => Vec::new(),
        }
    }

    /// A request from `from`; `lookup` shows the stored value of a key (`None`: not yet
    /// pushed). `serves` is false when the handler cannot show values at all.
    pub fn on_message<'a>(
        &mut self,
        from: NodeId,
        msg: RvMessage,
        serves: bool,
        lookup: impl Fn(Key) -> Lookup<'a>,
    ) -> Vec<RespAction> {
        if let RvMessage::TensorRequest { request_index, .. } = msg {
            if !self.first_time(from, request_index) {
                return vec![];
            }
        }
        match msg {
            RvMessage::TensorRequest {
                key,
                step,
                request_index,
                ..
            } if !serves => vec![error(
                from,
                (key, step, request_index),
                ERR_NOT_SERVED,
                "this server's request handler does not serve zero-copy pulls".into(),
            )],
            RvMessage::TensorRequest {
                key,
                dtype,
                step,
                request_index,
                ..
            } if dtype != self.dtype => {
                vec![error(
                    from,
                    (key, step, request_index),
                    ERR_DTYPE,
                    format!(
                        "key {key} holds {} values, requested as {dtype}",
                        self.dtype
                    ),
                )]
            }
            RvMessage::TensorRequest { key, .. } => match lookup(key) {
                None => {
                    self.parked
                        .entry(key)
                        .or_default()
                        .push(Parked { from, msg });
                    vec![]
                }
                Some(value) => self.respond(from, &msg, value),
            },
            RvMessage::TensorReRequest {
                request_index,
                remote_addr,
                rkey,
                ..
            } => self.re_request(from, request_index, remote_addr, rkey),
            _ => vec![],
        }
    }

    /// Whether request `index` of `from` is new; remembers the last [`REMEMBER`] requests, so
    /// each is answered once and a duplicate (the same index again) is dropped.
    fn first_time(&mut self, from: NodeId, index: u32) -> bool {
        if !self.seen.insert((from, index)) {
            return false;
        }
        self.seen_order.push_back((from, index));
        if self.seen_order.len() > REMEMBER {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    /// TENSOR_RE_REQUEST: write the clone kept for request `index` of `from` to the newly
    /// allocated destination; nothing for a duplicate or stale re-request.
    fn re_request(&mut self, from: NodeId, index: u32, addr: u64, rkey: u32) -> Vec<RespAction> {
        match self.clones.remove(&(from, index)).map(|(data, _)| data) {
            Some(data) => vec![RespAction::WriteClone {
                to: from,
                data,
                addr,
                rkey,
                imm: index,
            }],
            None => vec![],
        }
    }

    fn respond(
        &mut self,
        from: NodeId,
        msg: &RvMessage,
        (meta, data): (TensorMeta, &[u8]),
    ) -> Vec<RespAction> {
        let RvMessage::TensorRequest {
            key,
            request_index,
            remote_addr,
            rkey,
            cached,
            ..
        } = *msg
        else {
            return vec![];
        };
        if cached == Some(meta) && !self.validation {
            return vec![RespAction::WriteStored {
                to: from,
                key,
                addr: remote_addr,
                rkey,
                imm: request_index,
            }];
        }
        let clone = Bytes::copy_from_slice(data);
        let checksum = self.validation.then(|| crate::wire::crc32c(&[&clone]));
        self.clock += 1;
        self.clones
            .insert((from, request_index), (clone, self.clock));
        vec![RespAction::Send {
            to: from,
            msg: RvMessage::MetaDataResponse {
                request_index,
                meta,
                checksum,
            },
        }]
    }

    /// `key` has a value now: answers the requests that waited for it.
    pub fn on_value_ready<'a>(
        &mut self,
        key: Key,
        lookup: impl Fn(Key) -> Lookup<'a>,
    ) -> Vec<RespAction> {
        let Some(waiting) = self.parked.remove(&key) else {
            return vec![];
        };
        let Some(value) = lookup(key) else {
            self.parked.insert(key, waiting);
            return vec![];
        };
        waiting
            .iter()
            .flat_map(|p| self.respond(p.from, &p.msg, value))
            .collect()
    }

    /// Drops the clones kept for more than `max_age` later responses without a re-request (the
    /// requester gave up: its wait timed out). Returns how many were dropped. The driver calls
    /// it now and then; ages count responses, so the machine needs no clock.
    pub fn expire(&mut self, max_age: u64) -> usize {
        let before = self.clones.len();
        let now = self.clock;
        self.clones.retain(|_, (_, born)| now - *born <= max_age);
        before - self.clones.len()
    }

    /// Requests waiting for a value, and clones waiting for a re-request.
    pub fn waiting(&self) -> (usize, usize) {
        (self.parked.values().map(Vec::len).sum(), self.clones.len())
    }

    /// Keys that have requests waiting.
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }
}

/// ERROR_STATUS to `to` for its request `(key, step, request_index)`, with `code` and text.
fn error(
    to: NodeId,
    (key, step, request_index): (Key, i64, u32),
    code: u32,
    message: String,
) -> RespAction {
    RespAction::Send {
        to,
        msg: RvMessage::ErrorStatus {
            key,
            step,
            request_index,
            code,
            message,
        },
    }
}
