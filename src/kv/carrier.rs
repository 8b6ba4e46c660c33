//! The rendezvous carrier: how the zero-copy pull protocol's traffic (TF contrib/verbs, see
//! [`crate::rendezvous`]) travels between a worker's requester (`worker/zpull.rs`) and a
//! server's responder (`server/zserve.rs`). Both drivers encode and decode through this module
//! alone; nothing else in `kv` reads [`Meta::rendezvous`].
//!
//! - **Control messages** (TENSOR_REQUEST, TENSOR_RE_REQUEST, META_DATA_RESPONSE,
//!   ERROR_STATUS): a data message marked [`Rendezvous::Control`], frame 0 the encoded
//!   [`RvMessage`].
//! - **Content** (the value a pull asked for), where the van can write to the requester
//!   (`po.memory().can_write(to)`, the RDMA van): one RDMA WRITE WITH IMMEDIATE into the
//!   destination the request named, the immediate being the request index (TF verbs' write of
//!   the tensor); the requester's van reports it as a [`CustomerEvent::RemoteWrite`].
//! - **Content** elsewhere (the ZMQ van, or a write that failed): a data message marked
//!   [`Rendezvous::Write`] with the immediate the write would have carried, frame 0 the
//!   content, which the requester copies into the destination.

use crate::postoffice::CustomerEvent;
use crate::postoffice::Postoffice;
use crate::rendezvous::RvMessage;
use crate::van::{RemoteWrite, WriteSource};
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, Rendezvous};
use bytes::Bytes;

/// One event for a key-value customer (a `KVWorker`'s or a `KVServer`'s), sorted by carrier.
pub(super) enum Arrival {
    /// Not rendezvous traffic: a key-value request (at a server) or answer (at a worker).
    KeyValue(Message),
    /// A rendezvous control message `msg`, with the header `meta` that carried it.
    Control { meta: Meta, msg: RvMessage },
    /// Content that travelled as a message: `content` goes to the destination of request
    /// `imm`, from node `from`.
    Content {
        from: NodeId,
        imm: u32,
        content: Bytes,
    },
    /// Content that landed by RDMA in the destination of request `write.imm`: nothing to copy.
    Written(RemoteWrite),
    /// A peer is gone (see [`CustomerEvent::PeerLost`]): what waits on it fails with `error`.
    PeerLost { peer: NodeId, error: crate::Error },
    /// A lost peer's id is now held by a replacement (see [`CustomerEvent::PeerReplaced`]).
    PeerReplaced { peer: NodeId, incarnation: u32 },
    /// The servers' key layout changed (see [`CustomerEvent::Layout`]).
    Layout(std::sync::Arc<crate::wire::KeyLayout>),
    /// At a replacement server: worker `from` saw the replaced server answer, per customer,
    /// the state-changing requests up to this timestamp (`Command::Answered`).
    Answered {
        from: NodeId,
        answered: Vec<(i32, i32)>,
    },
}

/// Sorts and decodes a customer's event. `None`: a malformed rendezvous message (no frame 0,
/// or a control message that does not decode) or a control command other than ANSWERED,
/// logged and dropped.
pub(super) fn arrival(ev: CustomerEvent) -> Option<Arrival> {
    let msg = match ev {
        CustomerEvent::RemoteWrite(w) => return Some(Arrival::Written(w)),
        CustomerEvent::PeerLost { peer, error } => return Some(Arrival::PeerLost { peer, error }),
        CustomerEvent::PeerReplaced { peer, incarnation } => {
            return Some(Arrival::PeerReplaced { peer, incarnation })
        }
        CustomerEvent::Layout(layout) => return Some(Arrival::Layout(layout)),
        CustomerEvent::Message(msg) => msg,
    };
    if let Some(control) = &msg.meta.control {
        let from = msg.meta.sender;
        if let ControlMsg::Answered { highest } = control {
            let answered = highest.clone();
            return Some(Arrival::Answered { from, answered });
        }
        tracing::warn!(
            "dropped a {:?} for a key-value customer from {}",
            control.command(),
            Node::describe(from)
        );
        return None;
    }
    let Some(kind) = msg.meta.rendezvous else {
        return Some(Arrival::KeyValue(msg));
    };
    let Message { meta, data } = msg;
    let Some(frame) = data.into_iter().next() else {
        tracing::warn!(
            "dropped a rendezvous message without a body from {}",
            Node::describe(meta.sender)
        );
        return None;
    };
    match kind {
        Rendezvous::Write { imm } => Some(Arrival::Content {
            from: meta.sender,
            imm,
            content: frame,
        }),
        Rendezvous::Control => match RvMessage::decode(&frame) {
            Ok(msg) => Some(Arrival::Control { meta, msg }),
            Err(e) => {
                tracing::warn!(
                    "dropped a rendezvous message from {}: {e}",
                    Node::describe(meta.sender)
                );
                None
            }
        },
    }
}

/// Control message `msg` under header `meta` (routing fields set by the caller).
pub(super) fn control(mut meta: Meta, msg: &RvMessage) -> Message {
    meta.rendezvous = Some(Rendezvous::Control);
    Message {
        meta,
        data: vec![Bytes::from(msg.encode())],
    }
}

/// `content` for the destination of request `imm`, as a message under header `meta` (when the
/// van cannot write it).
pub(super) fn content(mut meta: Meta, imm: u32, content: Bytes) -> Message {
    meta.rendezvous = Some(Rendezvous::Write { imm });
    Message {
        meta,
        data: vec![content],
    }
}

/// Where a content write goes: node, remote address and rkey (from the request), and the
/// immediate (the request index).
#[derive(Clone, Copy, Debug)]
pub(super) struct WriteTo {
    pub(super) to: NodeId,
    pub(super) addr: u64,
    pub(super) rkey: u32,
    pub(super) imm: u32,
}

/// Writes `src` as [`WriteTo`] says, by RDMA WRITE WITH IMMEDIATE. False: the caller sends the
/// content as a [`content`] message instead (the van cannot write, or the write failed, logged:
/// the requester still gets its content, by the slower path).
pub(super) fn write(po: &Postoffice, src: WriteSource, w: WriteTo) -> bool {
    match po.write_imm(w.to, src, w.addr, w.rkey, w.imm) {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(
                "RDMA write to {} failed ({e}); sending the content as a message",
                Node::describe(w.to)
            );
            false
        }
    }
}

/// Writes a copy of `content` from a registered pool buffer (one copy here, none on the
/// requester). False: the caller sends the content as a message instead (pool exhausted, or as
/// [`write()`]).
pub(super) fn write_copy(po: &Postoffice, content: &[u8], w: WriteTo) -> bool {
    let Ok(mut buf) = po.pool().and_then(|p| p.alloc::<u8>(content.len())) else {
        return false;
    };
    buf.copy_from_slice(content);
    write(po, buf.into_write_source(), w)
}
