//! The ZMQ van while nodes join: the identity a connection claims (`join` before
//! this node has an id, `node:ID` after), the joining connection's watch for a refused
//! handshake, and the scheduler's answers to registrations it refuses, sent back over the
//! connection the registration came on, never to an address the refused node named.
//!
//! **The refusal's path.** The scheduler's ROUTER remembers, for each ADD_NODE request from a
//! node without an id, the routing id of its connection, under the address the node announced.
//! A refusal for that address ([`crate::van::Van::answer_joiner`]) is
//! queued and sent on the ROUTER by the receiving thread (the socket's only user), so the
//! scheduler opens no connection for it. The joining node reads it off its DEALER to the
//! scheduler (which otherwise only sends) until it has its id, and takes nothing else from
//! there.

use super::{zerr, ZmqVan};
use crate::auth::{Identity, Secret};
use crate::error::{Error, Result};
use crate::van::{Van, VanEvent};
use crate::wire::{decode_frames, encode_meta, Command, Message, Node, NodeId, SCHEDULER};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

/// Registrations whose connection is remembered at most (the oldest is forgotten first): a
/// flood of registrations cannot grow the table.
const JOINERS: usize = 1024;

/// What the ZMQ van keeps while nodes join.
#[derive(Default)]
pub(super) struct Joining {
    /// Connections opened before this node had an id (as `join`), to open again as `node:ID`
    /// once it has one: peer and address.
    pub(super) as_joiner: Vec<(NodeId, String, u16)>,
    /// (Scheduler) the routing id of the connection of each registration, by the address the
    /// node announced; and the order they came in.
    routing: HashMap<(String, u16), Bytes>,
    order: VecDeque<(String, u16)>,
    /// (Scheduler) answers to send on the ROUTER: routing id, then the message's frames.
    answers: Vec<Vec<Bytes>>,
    /// The refusal of this node's joining handshake, once the watch reported it.
    pub(super) refusal: Option<Error>,
}

impl Joining {
    /// Remembers that the registration of the node at `host:port` came over the connection
    /// `routing_id`.
    fn remember(&mut self, host: &str, port: u16, routing_id: Bytes) {
        let at = (host.to_string(), port);
        if self.routing.insert(at.clone(), routing_id).is_none() {
            self.order.push_back(at);
        }
        while self.order.len() > JOINERS {
            if let Some(old) = self.order.pop_front() {
                self.routing.remove(&old);
            }
        }
    }
}

impl ZmqVan {
    /// Has the connection `sock` to `peer` authenticate as this node (or as a joiner, before
    /// it has an id; the connection to the scheduler is then watched for a refusal).
    pub(super) fn authenticate(
        &self,
        sock: &zmq::Socket,
        peer: NodeId,
        host: &str,
        port: u16,
    ) -> Result<()> {
        let me = self.me.load(Ordering::Acquire);
        // A node holding its key proves that id from the start; one holding the token is a
        // joiner until the scheduler gives it an id.
        let bound = self.auth.secret.as_ref().and_then(Secret::bound_id);
        let who = match (me, bound) {
            (me, _) if me >= 0 => Identity::Node(me),
            (_, Some(id)) => Identity::Node(id),
            _ => Identity::Joiner,
        };
        if let Some(s) = &self.auth.secret {
            // A temporary connection proves this node to the node it stands for.
            let to = Node::of_temporary(peer).unwrap_or(peer);
            let (user, password) = s
                .credential(who, to, &crate::sync::lock(&self.auth.reach))
                .map_err(Error::Van)?;
            sock.set_plain_username(Some(&user))
                .and_then(|_| sock.set_plain_password(Some(&password)))
                .map_err(zerr("PLAIN credentials".into()))?;
            if who == Identity::Joiner {
                let again = (peer, host.to_string(), port);
                crate::sync::lock(&self.joining).as_joiner.push(again);
            }
        }
        if me < 0 && peer == SCHEDULER {
            self.watch(sock)?;
        }
        Ok(())
    }

    /// Watches the handshakes of `sock` (the connection to the scheduler before this node has
    /// an id) for a refusal, reported by [`recv`](Van::recv).
    fn watch(&self, sock: &zmq::Socket) -> Result<()> {
        // Not HANDSHAKE_FAILED_NO_DETAIL: a connection reset or a handshake timeout, which
        // libzmq retries; PS_TIMEOUT ends the start if it never succeeds.
        let events = zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32
            | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32;
        let watcher =
            super::monitors::monitor(&self.ctx, sock, events, "the joining connection's watch")?;
        *crate::sync::lock(&self.monitor) = Some(watcher);
        Ok(())
    }

    /// Polls the ROUTER `sock` for up to `ms`, with the joining connection's monitor beside it
    /// while there is one. `Ok(Err(refusal))` when the monitor reported a refused handshake,
    /// `Ok(Ok(readable))` otherwise.
    ///
    /// The monitor is taken out of its slot for the poll, not polled under the slot's lock: a
    /// thread that waits for that lock (`watch`, `set_node_id`) would starve while the RDMA
    /// van's bootstrap thread polls in a loop (std's Mutex is not fair; a Soft-RoCE guest's
    /// start hung there).
    pub(super) fn poll(&self, sock: &zmq::Socket, ms: i64) -> Result<Result<bool, Error>> {
        let Some(w) = crate::sync::lock(&self.monitor).take() else {
            return Ok(Ok(sock
                .poll(zmq::POLLIN, ms)
                .map_err(zerr("poll".into()))?
                > 0));
        };
        let mut items = [sock.as_poll_item(zmq::POLLIN), w.as_poll_item(zmq::POLLIN)];
        let polled = zmq::poll(&mut items, ms).map_err(zerr("poll".into()));
        let (refusal, readable) = (items[1].is_readable(), items[0].is_readable());
        let refused = if refusal { refusal_event(&w) } else { None };
        if let Some(e) = &refused {
            crate::sync::lock(&self.joining).refusal = Some(e.clone());
        }
        self.rewatch(w);
        polled?;
        Ok(refused.map_or(Ok(readable), Err))
    }

    /// Puts the monitor `w` that [`poll`](Self::poll) used back in its slot, unless this node
    /// has its id by now (then nothing is watched any more) or a newer one took the slot.
    fn rewatch(&self, w: zmq::Socket) {
        let mut slot = crate::sync::lock(&self.monitor);
        // `set_node_id` stores the id before it empties the slot, under the same lock.
        if slot.is_none() && self.me.load(Ordering::Acquire) < 0 {
            *slot = Some(w);
        }
    }

    /// This node got its id: connections opened as a joiner are opened again as this node
    /// (the scheduler accepts no more than ADD_NODE from a joiner), and the joining connection
    /// is no longer watched.
    pub(super) fn joined(&self, id: NodeId) {
        if let Some(bound) = self.auth.secret.as_ref().and_then(Secret::bound_id) {
            if bound != id {
                tracing::error!(
                    "the scheduler gave this node the id of {}, but its key (PS_AUTH_NODE_KEY) \
                     is the key of {}: its messages will be refused",
                    Node::describe(id),
                    Node::describe(bound)
                );
            }
        }
        // The watched connection stops reporting before its watcher can go (`rewatch` drops it
        // once the id is stored).
        let watched = self
            .senders
            .read()
            .ok()
            .and_then(|s| s.get(&SCHEDULER).cloned());
        if let Some(sock) = watched {
            super::monitors::unmonitor(&mut crate::sync::lock(&sock));
        }
        self.me.store(id, Ordering::Release);
        let again = std::mem::take(&mut crate::sync::lock(&self.joining).as_joiner);
        for (peer, host, port) in again {
            if let Err(e) = self.connect(peer, &host, port) {
                tracing::warn!("cannot connect to {} again: {e}", Node::describe(peer));
            }
        }
        crate::sync::lock(&self.monitor).take();
    }

    /// Sends the first frame `head` (with `flags`) of a message to the scheduler while this
    /// node has no id, on `sock`: without waiting, tried again every 10 ms, so that a
    /// refused handshake (which leaves libzmq no connection to queue the message for) fails
    /// the send with the refusal at once instead of after `PS_TIMEOUT`.
    ///
    /// # Errors
    /// `Some(refusal)`; `None` when the send timeout passed (the caller names it).
    pub(super) fn send_while_joining(
        &self,
        sock: &zmq::Socket,
        head: &[u8],
        flags: i32,
    ) -> std::result::Result<(), Option<Error>> {
        let deadline = std::time::Instant::now() + self.opts.send_timeout;
        loop {
            match sock.send(head, flags | zmq::DONTWAIT) {
                Ok(()) => return Ok(()),
                Err(zmq::Error::EAGAIN) => {}
                Err(e) => return Err(Some(Error::Van(format!("send to the scheduler: {e}")))),
            }
            if let Some(e) = crate::sync::lock(&self.joining).refusal.clone() {
                return Err(Some(e));
            }
            if std::time::Instant::now() >= deadline {
                return Err(None);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// (Scheduler, receiving thread) Remembers the connection of a registration: `msg` came
    /// with the routing id `routing_id`.
    pub(super) fn note_registration(&self, routing_id: &Bytes, msg: &Message) {
        let m = &msg.meta;
        if m.command() != Some(Command::AddNode) || !m.request || m.sender >= 0 {
            return;
        }
        let Some(node) = m.control.as_ref().and_then(|c| c.registering()) else {
            return;
        };
        crate::sync::lock(&self.joining).remember(&node.host, node.port, routing_id.clone());
    }

    /// Queues `msg` for the node without an id that registered announcing `host:port`, over
    /// the connection its registration came on.
    ///
    /// # Errors
    /// [`Error::Van`] when no registration from that address is known (the scheduler then
    /// cannot tell the node) or the message does not encode.
    pub(super) fn queue_answer(&self, host: &str, port: u16, mut msg: Message) -> Result<()> {
        let head = encode_meta(&mut msg)?;
        let mut joining = crate::sync::lock(&self.joining);
        let routing_id = joining
            .routing
            .get(&(host.to_string(), port))
            .cloned()
            .ok_or_else(|| {
                Error::Van(format!(
                    "no registration from {host}:{port} to answer over its connection"
                ))
            })?;
        let mut frames = vec![routing_id, Bytes::from(head)];
        frames.extend(msg.data);
        joining.answers.push(frames);
        drop(joining);
        self.answers_queued.store(true, Ordering::Release);
        Ok(())
    }

    /// Sends the queued answers on the ROUTER `sock` (its receiving thread, or `stop`). A
    /// connection that is gone drops its answer (ROUTER sockets drop what they cannot route).
    pub(super) fn send_answers(&self, sock: &zmq::Socket) {
        // Set after each answer is queued: receiving takes no lock while none is.
        if !self.answers_queued.swap(false, Ordering::AcqRel) {
            return;
        }
        let answers = std::mem::take(&mut crate::sync::lock(&self.joining).answers);
        for frames in answers {
            let last = frames.len() - 1;
            for (i, f) in frames.into_iter().enumerate() {
                let flag = if i < last { zmq::SNDMORE } else { 0 };
                if let Err(e) = sock.send(&f[..], flag | zmq::DONTWAIT) {
                    tracing::debug!("an answer to a refused node was not sent: {e}");
                    break;
                }
            }
        }
    }

    /// (A node without an id) The scheduler's refusal, read off the connection to it, if one
    /// came. Anything else from there is dropped: the scheduler answers over that connection
    /// only a registration it refuses.
    pub(super) fn scheduler_answer(&self) -> Option<Result<VanEvent>> {
        if self.me.load(Ordering::Acquire) >= 0 {
            return None;
        }
        let sock = self.senders.read().ok()?.get(&SCHEDULER)?.clone();
        // Never waits: senders hold this lock, and a poller that took it in a loop would
        // starve them.
        let frames = sock.try_lock().ok()?.recv_multipart(zmq::DONTWAIT).ok()?;
        let msg = match decode_frames(frames.into_iter().map(Bytes::from).collect()) {
            Ok(m) => m,
            Err(e) => return Some(Err(e.into())),
        };
        let m = &msg.meta;
        if m.command() == Some(Command::AddNode) && !m.request && m.error.is_some() {
            return Some(Ok(VanEvent::Message(msg)));
        }
        tracing::warn!(
            "dropped a message from the scheduler's address over the joining connection: only \
             a refusal comes that way"
        );
        None
    }
}

/// A handshake event of the watched connection: the refusal it means.
fn refusal_event(watcher: &zmq::Socket) -> Option<Error> {
    let frames = watcher.recv_multipart(zmq::DONTWAIT).ok()?;
    let (event, value) = super::monitors::monitor_event(frames.first()?)?;
    let at = frames
        .get(1)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .unwrap_or_default();
    let why = match event {
        zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => format!(
            "the scheduler at {at} refused this node's proof (ZAP status {value}): this node's \
             PS_AUTH_TOKEN differs from the scheduler's, or its PS_AUTH_NODE_KEY is not the key \
             the scheduler's token gives its rank"
        ),
        _ => format!(
            "the scheduler at {at} did not complete the handshake (ZMTP error {value:#x}): \
             one of the two authenticates with PS_AUTH_TOKEN and the other does not; give \
             every node the same PS_AUTH_TOKEN (or PS_AUTH=none to every node)"
        ),
    };
    Some(Error::Config(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_are_remembered_by_address_and_the_table_stays_bounded() {
        let mut j = Joining::default();
        j.remember("127.0.0.1", 7, Bytes::from_static(b"a"));
        j.remember("127.0.0.1", 7, Bytes::from_static(b"b"));
        assert_eq!(j.routing[&("127.0.0.1".to_string(), 7)], &b"b"[..]);
        for p in 0..(JOINERS as u16 + 10) {
            j.remember("198.18.0.1", p, Bytes::from_static(b"x"));
        }
        assert_eq!(j.routing.len(), JOINERS);
        assert_eq!(j.order.len(), JOINERS);
        assert!(!j.routing.contains_key(&("127.0.0.1".to_string(), 7)));
    }
}
