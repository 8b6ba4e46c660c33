//! One key-value request served: turned into a handler call (its key list resolved, see
//! [`crate::kv::keycache`]; checked against the cluster and this server's key range; logged
//! around the call with a checkpoint) and answered.

use super::durable;
use super::{ReqMeta, RequestHandler};
use crate::kv::keycache::KeptLists;
use crate::kv::pairs::{decode_checked, encode_owned, KVPairs};
use crate::kv::value::Value;
use crate::kv::Key;
use crate::postoffice::ranges::holding::{Holding, Verdict};
use crate::postoffice::{reply_meta, Postoffice};
use crate::wire::{KeyRef, Message, Meta, Node, NodeId, Placement};
use bytes::Bytes;

/// A request's kind as the metrics name it: `push`, `pull`, `push-pull`, or `command` (an
/// application command without values).
fn kind_of(m: &Meta) -> &'static str {
    match (m.kv.push, m.kv.pull) {
        (true, true) => "push-pull",
        (true, false) => "push",
        (false, true) => "pull",
        (false, false) => "command",
    }
}

/// A key-value request as the customer thread hands it on.
pub(super) struct Incoming {
    pub(super) msg: Message,
    /// `Err`: refuse the request with this text, applying nothing.
    pub(super) gate: Result<(), String>,
    /// Rendezvous pulls wait for keys' first pushes (the pushed keys are wanted back).
    pub(super) parked: bool,
}

/// What handles a request: the handler, the key lists kept for the workers, the checkpoint,
/// and which keys the server holds.
pub(super) struct Handling<'a, H> {
    pub(super) handler: &'a mut H,
    pub(super) lists: &'a mut KeptLists,
    pub(super) durable: Option<&'a mut durable::Durable>,
    pub(super) holding: &'a Holding,
}

/// Handles one key-value request and answers it. Returns the request's meta and pushed keys
/// when rendezvous pulls are parked, so they can be served once the keys have values.
///
/// With a checkpoint, a request that may change state (a push or an application command) is
/// logged: its record written before it is applied, made part of the log after, before the
/// answer goes out (without fsync a request whose record cannot be written is not applied;
/// with fsync the write, and so its error, comes after); one applied before this server
/// restarted is answered as a pull of its keys, applying nothing.
pub(super) fn serve_request<V: Value>(
    po: &Postoffice,
    server: Handling<'_, impl RequestHandler<V>>,
    req: Incoming,
) -> Option<(Meta, Vec<Key>)> {
    let Incoming { msg, gate, parked } = req;
    let Message { meta: m, mut data } = msg;
    let started = std::time::Instant::now();
    let mut reply = Message::new(reply_meta(&m));
    // The key list first, before anything can refuse the request: what the server keeps under
    // a digest then always follows the worker's registrations (see `super::keycache`).
    // Then the gate's refusal, answered as an error text like a malformed reference.
    let list = key_list(server.lists, &m, &mut data)
        .and_then(|list| gate.map(|()| list).map_err(Refused::Malformed));
    let list = match list {
        Ok(list) => list,
        Err(Refused::UnknownList { digest }) => {
            reply.meta.kv.keys = Some(KeyRef::Unknown { digest });
            send_answer(po, reply);
            return None;
        }
        Err(Refused::Malformed(e)) => {
            reply.meta.error = Some(e);
            send_answer(po, reply);
            return None;
        }
    };
    // Keys placed elsewhere, or not here yet, as the key layout changes: nothing is applied.
    if let Some(answer) = elsewhere(&server, &m, &data) {
        match answer {
            Ok(p) => reply.meta.kv.placement = Some(p),
            Err(e) => reply.meta.error = Some(e),
        }
        send_answer(po, reply);
        return None;
    }
    let mut pushed = None;
    let result = apply(po, server, (&m, &data, list), |keys| {
        if parked {
            pushed = Some(keys.to_vec());
        }
    });
    po.metrics().handled(kind_of(&m), started.elapsed());
    match result {
        Ok((res, asked)) if m.kv.pull => {
            // No keys but values: the request's keys (the worker has them).
            let as_requested =
                res.keys.is_empty() && asked && !(res.vals.is_empty() && res.lens.is_empty());
            if as_requested {
                reply.meta.kv.keys = Some(KeyRef::AsRequested);
            }
            reply.data = encode_owned(res);
        }
        Ok(_) => {}
        Err(e) => reply.meta.error = Some(e),
    }
    send_answer(po, reply);
    pushed.map(|keys| (m, keys))
}

/// How to answer request `m` whose keys are not all this server's at the layout it acts on
/// ([`placed`]); `None` when it serves them. A request this server applied before a restart is
/// answered as applied wherever its keys are now (they left with what it did).
fn elsewhere<H>(
    server: &Handling<'_, H>,
    m: &Meta,
    data: &[Bytes],
) -> Option<Result<Placement, String>> {
    let again =
        m.may_change_state() && server.durable.as_ref().is_some_and(|d| d.applied_before(m));
    placed(server.holding, m, data).filter(|_| !again)
}

/// Applies request `m` (its payload `data`, the kept key list `list` it uses) with the
/// handler: decoded and checked, logged around the handler when it may change state (with a
/// checkpoint), or, when applied before this server restarted, handled as a plain pull of its
/// keys. `on_push` gets the keys of a push. Returns the handler's pairs and whether the
/// request named any keys, or the error text to answer with.
fn apply<V: Value>(
    po: &Postoffice,
    server: Handling<'_, impl RequestHandler<V>>,
    (m, data, list): (&Meta, &[Bytes], Option<u64>),
    on_push: impl FnOnce(&[Key]),
) -> Result<(KVPairs<V>, bool), String> {
    let Handling {
        handler,
        lists,
        mut durable,
        holding: _,
    } = server;
    let may_change = m.may_change_state();
    let again = may_change && durable.as_ref().is_some_and(|d| d.applied_before(m));
    // Applied before the restart: answered as a plain pull of its keys (no command, no values).
    let rm = ReqMeta {
        cmd: if again { 0 } else { m.head },
        push: m.kv.push && !again,
        pull: m.kv.pull,
        sender: m.sender,
        timestamp: m.tag.timestamp,
    };
    // Logged (with a checkpoint): prepared before it is applied, committed after.
    let logs = may_change && !again;
    let mut prepared = None;
    // A kept list's keys were checked (sorted, unique) when it was registered.
    let mut req = decode_checked::<V>(data, list.is_some())?;
    if m.kv.push && req.vals.is_empty() && !req.keys.is_empty() {
        return Err("push without values".to_string());
    }
    if let Some(why) = out_of_place(po, m.sender) {
        return Err(why);
    }
    if again {
        req.vals = std::borrow::Cow::Borrowed(&[]);
        req.lens = std::borrow::Cow::Borrowed(&[]);
    }
    if let (true, Some(d)) = (logs, durable.as_deref_mut()) {
        prepared = Some(d.prepare(m, data, list)?);
    }
    if rm.push {
        on_push(&req.keys);
    }
    req.memo = list
        .and_then(|d| lists.get(m.sender, m.tag.customer_id, d))
        .map(|l| &mut l.memo);
    let asked = !req.keys.is_empty();
    let result = handler.handle(&rm, req).map(|res| (res, asked));
    match (result, durable, prepared) {
        (Ok(r), Some(d), Some(p)) => d.commit(p, m, data, list).map(|()| r),
        (r, _, _) => r,
    }
}

/// Why a request may not be served here, `None` when it may (a server serves the workers of
/// its cluster): its sender is not a worker of the node table. The sender is the one its
/// connection proved when the cluster has a token ([`crate::auth`]). Which keys it may serve
/// is [`placed`]'s.
fn out_of_place(po: &Postoffice, sender: NodeId) -> Option<String> {
    if Node::role_of(sender) != Some(crate::wire::Role::Worker)
        || Node::rank_of(sender) >= po.num_workers()
    {
        return Some(format!(
            "{} is not a worker of this cluster: only its {} workers send requests to servers",
            Node::describe(sender),
            po.num_workers()
        ));
    }
    None
}

/// Where request `m` stands in the key layout (its keys frame, `data[0]`, filled in from a
/// kept list already), `None` when this server serves it: `Ok` with the answer's placement
/// ("moved", "not yet"), or `Err` with the text to refuse it with (keys outside this server's
/// range at the worker's own layout: ps-lite's `GetServerKeyRanges` check,
/// [`crate::postoffice::range`]). See [`Holding`].
fn placed(holding: &Holding, m: &Meta, data: &[Bytes]) -> Option<Result<Placement, String>> {
    let keys = data.first()?;
    let key_at = |i: usize| {
        keys.get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    let (first, last) = (key_at(0)?, key_at(keys.len().checked_sub(8)?)?);
    let (epoch, part) = match m.kv.placement {
        Some(Placement::Part { epoch, part }) => (Some(epoch), part),
        _ => (None, 0),
    };
    match holding.verdict(&[first, last], epoch) {
        Verdict::Serve => None,
        Verdict::Moved { epoch } => Some(Ok(Placement::Moved { part, epoch })),
        Verdict::NotYet => Some(Ok(Placement::NotYet { part })),
        Verdict::Refuse(why) => Some(Err(why)),
    }
}

/// Why a request is answered without reaching the handler, before anything of it is applied.
enum Refused {
    /// It names a key list this server does not keep for the worker: the answer says
    /// [`KeyRef::Unknown`], and the worker sends the request again with its keys.
    UnknownList { digest: u64 },
    /// A malformed key reference: the answer carries this error text.
    Malformed(String),
}

/// The key list request `m` uses (key caching, [`crate::kv::keycache`]): registers the list it
/// sends (`KeyRef::Register`), or puts the kept list's keys into the empty keys frame of `data`
/// (`KeyRef::Cached`). Returns the digest of the kept list the request uses, `None` when its
/// keys travel and are not kept.
///
/// # Errors
/// [`Refused`] for a list this server does not keep or a malformed reference.
fn key_list(lists: &mut KeptLists, m: &Meta, data: &mut [Bytes]) -> Result<Option<u64>, Refused> {
    let (sender, customer) = (m.sender, m.tag.customer_id);
    match &m.kv.keys {
        None => Ok(None),
        Some(KeyRef::Register { digest, evict }) => Ok(lists
            .register(sender, customer, *digest, evict, data)
            .then_some(*digest)),
        Some(KeyRef::Cached { digest }) => {
            let keys = lists.get(sender, customer, *digest).map(|l| l.keys.clone());
            match (keys, data.first_mut()) {
                (Some(keys), Some(frame)) if frame.is_empty() => {
                    *frame = keys;
                    Ok(Some(*digest))
                }
                (None, _) => Err(Refused::UnknownList { digest: *digest }),
                _ => Err(Refused::Malformed(
                    "malformed request: a cached key list needs an empty keys frame".into(),
                )),
            }
        }
        Some(other) => Err(Refused::Malformed(format!(
            "malformed request: {other:?} belongs in an answer, not a request"
        ))),
    }
}

/// Sends `reply`; a failure is logged (the worker's `wait` names this server at its deadline).
fn send_answer(po: &Postoffice, reply: Message) {
    let to = reply.meta.recver;
    if let Err(e) = po.send(reply) {
        tracing::warn!("cannot answer {}: {e}", Node::describe(to));
    }
}
