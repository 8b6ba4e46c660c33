//! The van's channels by peer, in the two states of [`connect`](super::connect): connected
//! ([`Channel`], in `up`), and not yet ([`Pending`]: our prepared channel with the messages
//! waiting for it, the peer's endpoint that came before our QP existed, or a failed handshake).
//! A peer is in at most one of the two maps.
//!
//! Lock order: `pending` → `up`. The bootstrap moves a peer from `pending` to `up` while it
//! holds `pending`, so whoever takes `pending` after finding no connected channel (a sender
//! without a prepared channel, the poller with a receive completion) knows the peer is either
//! connected by now or has no channel. Nobody holds `pending` while waiting for the poller.

use super::channel::Channel;
use super::connect::{Endpoint, PreparedChannel};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::wire::{Message, NodeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// A peer whose channel is not connected.
pub(super) enum Pending {
    /// `connect` made our QP and sent its endpoint; the peer's has not come yet. Messages to
    /// the peer wait in it.
    Prepared(PreparedChannel),
    /// The peer's endpoint came before `connect` made our QP.
    EndpointFirst(Endpoint),
    /// The handshake failed: sends to the peer fail with this text.
    Failed(String),
}

/// The table of pending peers, locked.
pub(super) type PendingMap<'a> = MutexGuard<'a, HashMap<NodeId, Pending>>;

/// Channels by peer. Field order is drop order, before the device.
#[derive(Default)]
pub(super) struct Channels {
    up: RwLock<HashMap<NodeId, Arc<Channel>>>,
    pending: Mutex<HashMap<NodeId, Pending>>,
}

impl Channels {
    /// The connected channel to `peer`.
    pub fn connected(&self, peer: NodeId) -> Option<Arc<Channel>> {
        let up = self.up.read().unwrap_or_else(|p| p.into_inner());
        up.get(&peer).cloned()
    }

    /// The connected channel to `peer` for a receive completion. The QP can receive as soon
    /// as the handshake moved it to RTR, a moment before the channel is published: when `peer`
    /// is not in `up`, this waits for a handshake in progress (it holds `pending` until the
    /// channel is in `up`) and looks again. `None`: no channel (the completion is dropped).
    pub fn receiving(&self, peer: NodeId) -> Option<Arc<Channel>> {
        self.connected(peer).or_else(|| {
            let _settled = self.pending();
            self.connected(peer)
        })
    }

    /// Every connected channel.
    pub fn all_connected(&self) -> Vec<Arc<Channel>> {
        let up = self.up.read().unwrap_or_else(|p| p.into_inner());
        up.values().cloned().collect()
    }

    /// Locks the pending peers.
    pub fn pending(&self) -> PendingMap<'_> {
        lock(&self.pending)
    }

    /// Whether `peer` has a channel, connected, prepared or failed.
    pub fn has_channel(&self, pending: &PendingMap<'_>, peer: NodeId) -> bool {
        matches!(
            pending.get(&peer),
            Some(Pending::Prepared(_) | Pending::Failed(_))
        ) || self.connected(peer).is_some()
    }

    /// Publishes `c` as connected (its peer was just taken out of `pending`, which the caller
    /// still holds).
    pub fn insert_connected(&self, _pending: &PendingMap<'_>, c: Arc<Channel>) {
        let mut up = self.up.write().unwrap_or_else(|p| p.into_inner());
        up.insert(c.peer(), c);
    }

    /// Takes `peer`'s connected channel out (the peer was replaced; the caller holds
    /// `pending`).
    pub fn remove_connected(
        &self,
        _pending: &PendingMap<'_>,
        peer: NodeId,
    ) -> Option<Arc<Channel>> {
        let mut up = self.up.write().unwrap_or_else(|p| p.into_inner());
        up.remove(&peer)
    }

    /// Queues `msg` in its receiver's prepared channel: `Ok(None)`. `Ok(Some(msg))` back when
    /// the receiver has no prepared channel (none at all, or one connected by now: look again).
    ///
    /// # Errors
    /// [`Error::Van`] with the handshake's failure.
    pub fn queue_if_prepared(&self, msg: Message) -> Result<Option<Message>> {
        let mut pending = self.pending();
        match pending.get_mut(&msg.meta.recver) {
            Some(Pending::Prepared(p)) => {
                p.queue(msg);
                Ok(None)
            }
            Some(Pending::Failed(why)) => Err(Error::Van(why.clone())),
            Some(Pending::EndpointFirst(_)) | None => Ok(Some(msg)),
        }
    }

    /// Drops every channel (the van stopped).
    pub fn clear(&self) {
        self.pending().clear();
        self.up.write().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
