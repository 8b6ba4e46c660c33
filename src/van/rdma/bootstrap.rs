//! Channel bootstrap over the ZMQ van, and the bootstrap thread (`rdma-bootstrap`).
//!
//! Each side of a worker↔server pair, on `connect`, prepares its channel and sends its
//! [`Endpoint`] to the other in a `VanConnect` message; whichever side has both its prepared
//! channel and the peer's endpoint does the handshake. The endpoint may come first (the peer
//! connected before we did): it waits in [`Pending::EndpointFirst`] until our `connect`.
//!
//! The bootstrap thread receives everything the ZMQ van gets: `VanConnect` messages are handled
//! here, every other event (scheduler control, messages between nodes without a channel) is
//! forwarded to the van's event queue.

use super::channels::{Pending, PendingMap};
use super::connect::{Endpoint, PreparedChannel};
use super::van::VanState;
use crate::error::{Error, Result};
use crate::van::{Van, VanEvent};
use crate::wire::{Command, ControlMsg, Message, Meta, Node, NodeId};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl VanState {
    /// Connects the ZMQ van to node `id` at `host:port`, and for a worker↔server pair prepares
    /// our channel and sends its endpoint (once: later calls find the channel).
    ///
    /// # Errors
    /// [`Error::Van`] when ZMQ cannot connect, the channel cannot be prepared, its endpoint
    /// cannot be sent, or a handshake with an endpoint that came first fails.
    pub(super) fn connect(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        self.zmq.connect(id, host, port)?;
        let me = self.me.load(Ordering::Acquire);
        if !Node::is_worker_server_pair(me, id) {
            return Ok(());
        }
        if self.channels.has_channel(&self.channels.pending(), id) {
            return Ok(());
        }
        // Made without holding `pending`: registering the rings takes a while.
        let prepared = PreparedChannel::new(&self.dev, id)?;
        let ours = prepared.endpoint(&self.dev);
        let theirs = {
            let mut pending = self.channels.pending();
            if self.channels.has_channel(&pending, id) {
                return Ok(()); // a concurrent `connect` to the same peer won; ours is dropped
            }
            match pending.insert(id, Pending::Prepared(prepared)) {
                Some(Pending::EndpointFirst(theirs)) => Some(theirs),
                _ => None,
            }
        };
        self.announce(me, id, &ours)?;
        match theirs {
            Some(remote) => self.on_endpoint(id, remote),
            None => Ok(()),
        }
    }

    /// `id` was replaced by a new node at `host:port`: the old channel is failed and
    /// dropped (its late completions name an older generation), an endpoint the new node
    /// already sent is kept, and a new channel is prepared and announced.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub(super) fn replace(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        let old = {
            let mut pending = self.channels.pending();
            if !matches!(pending.get(&id), Some(Pending::EndpointFirst(_))) {
                pending.remove(&id);
            }
            self.channels.remove_connected(&pending, id)
        };
        if let Some(c) = old {
            let _ = c.fail(format!("replaced by a new node at {host}:{port}"));
        }
        self.connect(id, host, port)
    }

    /// Sends our endpoint to `peer` over ZMQ.
    fn announce(&self, me: NodeId, peer: NodeId, ours: &Endpoint) -> Result<()> {
        let body = bincode::serde::encode_to_vec(ours, bincode::config::standard())
            .map_err(|e| Error::Van(format!("cannot encode the QP endpoint: {e}")))?;
        let meta = Meta {
            sender: me,
            ..Meta::for_control(peer, ControlMsg::VanConnect)
        };
        self.zmq.send(Message {
            meta,
            data: vec![Bytes::from(body)],
        })?;
        Ok(())
    }

    /// The peer's endpoint: the handshake if our channel is prepared, else it waits for our
    /// `connect`. A second endpoint from a connected peer (a replacement that connected to
    /// us before we heard of it) fails and drops that channel; the endpoint waits for our
    /// [`replace`](Self::replace).
    ///
    /// # Errors
    /// [`Error::Van`] when the handshake or the writing of the backlog fails (recorded: later
    /// sends to the peer fail with it too).
    fn on_endpoint(&self, peer: NodeId, remote: Endpoint) -> Result<()> {
        let mut pending = self.channels.pending();
        match pending.remove(&peer) {
            Some(Pending::Prepared(p)) => self.handshake(pending, p, remote),
            Some(Pending::Failed(why)) => {
                tracing::warn!("ignored an RDMA endpoint from {}", Node::describe(peer));
                pending.insert(peer, Pending::Failed(why));
                Ok(())
            }
            Some(Pending::EndpointFirst(_)) | None => {
                let old = self.channels.remove_connected(&pending, peer);
                pending.insert(peer, Pending::EndpointFirst(remote));
                drop(pending);
                if let Some(c) = old {
                    let _ = c.fail("a second endpoint came (the peer was replaced)".into());
                }
                Ok(())
            }
        }
    }

    /// Connects `prepared` with the peer's endpoint, publishes the channel, then (without
    /// `pending`) writes the messages that waited for it.
    fn handshake(
        &self,
        mut pending: PendingMap<'_>,
        prepared: PreparedChannel,
        remote: Endpoint,
    ) -> Result<()> {
        let peer = prepared.peer();
        let c = match prepared.handshake(&self.dev, remote) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                let who = Node::describe(peer);
                tracing::error!("RDMA channel to {who}: {e}");
                let why = format!("RDMA channel to {who} failed: {e}");
                pending.insert(peer, Pending::Failed(why));
                return Err(e);
            }
        };
        self.channels.insert_connected(&pending, c.clone());
        drop(pending);
        c.flush_backlog(self.send_timeout).inspect_err(|e| {
            let _ = c.fail(e.to_string());
        })
    }

    /// The bootstrap thread: forwards ZMQ events (scheduler control, messages between nodes
    /// without a channel) and handles endpoints, until the van stops.
    pub(super) fn bootstrap_loop(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            match self.zmq.recv(Duration::from_millis(100)) {
                Ok(Some(VanEvent::Message(msg)))
                    if msg.meta.command() == Some(Command::VanConnect) =>
                {
                    self.on_bootstrap(&msg)
                }
                Ok(Some(ev)) => {
                    let _ = self.events.send(Ok(ev));
                }
                Ok(None) => {}
                Err(Error::Stopped) => return,
                Err(e) => {
                    let _ = self.events.send(Err(e));
                }
            }
        }
    }

    fn on_bootstrap(&self, msg: &Message) {
        let peer = msg.meta.sender;
        let decoded = msg.data.first().map(|b| {
            bincode::serde::decode_from_slice::<Endpoint, _>(b, bincode::config::standard())
        });
        let Some(Ok((remote, _))) = decoded else {
            tracing::warn!(
                "dropped a malformed RDMA bootstrap from {}",
                Node::describe(peer)
            );
            return;
        };
        // A failure is recorded for the peer's senders (and logged) by `on_endpoint`.
        let _ = self.on_endpoint(peer, remote);
    }
}
