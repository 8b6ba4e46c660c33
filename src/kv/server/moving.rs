//! A key-value server's part in a resize (elastic servers): on a new key layout it exports the
//! rows of each range leaving it and hands them to the new owner's server of the same
//! application and value type; on a handoff it imports the rows and, once every key-value
//! server of the node did, the node tells the scheduler ([`crate::postoffice::range_arrived`]).
//! Which requests it serves meanwhile is [`crate::postoffice::ranges::holding`]'s.

use super::{RequestHandler, Served};
use crate::kv::value::Value;
use crate::postoffice::ranges::holding::{Holding, Verdict};
use crate::postoffice::ranges::layout::{Layout, Move};
use crate::postoffice::{Postoffice, Range};
use crate::rendezvous::RvMessage;
use crate::wire::{KeyLayout, KvHeader, Message, Meta, Node, NodeId, Placement, RequestTag, Role};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;

/// Why rendezvous request `msg` is not served here, `None` when it is: its key's rows moved
/// to another server or have not arrived (a zero-copy pull is not sent again: it fails with
/// this, naming the key).
pub(super) fn not_served(holding: &Holding, msg: &RvMessage) -> Option<String> {
    let RvMessage::TensorRequest { key, .. } = *msg else {
        return None;
    };
    // As a request sliced by the first layout: a key that left this server is "moved".
    match holding.verdict(&[key], Some(0)) {
        Verdict::Serve => None,
        Verdict::Refuse(why) => Some(why),
        Verdict::Moved { epoch } => Some(format!(
            "key {key} moved to another server at key layout {epoch}; pull it again"
        )),
        Verdict::NotYet => Some(format!(
            "key {key}'s row is moving to this server; pull it again"
        )),
    }
}

/// The largest piece of rows one handoff message carries.
const MAX_PIECE_BYTES: u64 = 64 << 20;

/// Handoffs arriving in pieces, by (epoch, first key, old owner): the pieces so far.
#[derive(Default)]
pub(super) struct Pieces {
    arriving: HashMap<(u64, u64, NodeId), Vec<Option<Bytes>>>,
    /// Per layout epoch, how many key-value servers of the old owner hand rows over
    /// ([`Placement::Handoff::of`]), for rows kept until their layout is adopted.
    of: HashMap<u64, u32>,
}

impl Pieces {
    /// The old owner of layout `epoch`'s range hands rows over from `of` key-value servers.
    fn note_of(&mut self, epoch: u64, of: u32, current: u64) {
        self.of.retain(|&e, _| e >= current);
        if self.of.len() < 4 {
            self.of.insert(epoch, of);
        }
    }

    /// How many handoffs layout `epoch` brings (1 when unknown).
    fn of(&self, epoch: u64) -> u32 {
        self.of.get(&epoch).copied().unwrap_or(1)
    }

    /// Piece `piece` of `pieces` of the handoff `id`; returns the whole export once every
    /// piece arrived. Dropped: a malformed piece number, a handoff of a layout before
    /// `current` (this server's), a third handoff arriving at once (one range moves to a
    /// server per layout).
    fn add(
        &mut self,
        id: (u64, u64, NodeId),
        (piece, pieces): (u32, u32),
        frame: Bytes,
        current: u64,
    ) -> Option<Bytes> {
        if pieces == 1 && piece == 0 {
            return Some(frame);
        }
        self.arriving.retain(|k, _| k.0 >= current);
        let known = self.arriving.contains_key(&id);
        if piece >= pieces
            || id.0 < current
            || pieces as u64 > (1 << 40) / MAX_PIECE_BYTES
            || (!known && self.arriving.len() >= 2)
        {
            return None;
        }
        let slots = self
            .arriving
            .entry(id)
            .or_insert_with(|| vec![None; pieces as usize]);
        *slots.get_mut(piece as usize)? = Some(frame);
        if slots.iter().any(Option::is_none) {
            return None;
        }
        let slots = self.arriving.remove(&id)?;
        let mut whole = Vec::with_capacity(slots.iter().flatten().map(Bytes::len).sum());
        for s in slots.into_iter().flatten() {
            whole.extend_from_slice(&s);
        }
        Some(Bytes::from(whole))
    }
}

/// Whether `msg` hands rows over (a server's [`Placement::Handoff`]).
pub(super) fn is_handoff(msg: &Message) -> bool {
    matches!(msg.meta.kv.placement, Some(Placement::Handoff { .. }))
}

/// A handoff sent, kept until its layout settles: sent again to a replacement of its new
/// owner (which restores a checkpoint without the rows).
pub(super) struct Kept {
    epoch: u64,
    to: NodeId,
    pieces: Vec<Message>,
}

/// The [`Holding`] a key-value server of `po` starts with, and the layout it adopts at once
/// (one whose moves have not settled: it exports or awaits their rows); with checkpoints
/// (`durable`), ranges moved here are served once their layout settled.
pub(super) fn start_holding(po: &Postoffice, durable: bool) -> (Holding, Option<Arc<KeyLayout>>) {
    let me = po.my_id();
    let current = po.layout();
    let pending = crate::postoffice::unsettled_layout(po);
    let before = pending.as_ref().and_then(|w| {
        let (_, plan) = Layout::from_wire(w).ok()?;
        current.before(&plan).ok()
    });
    let start = before.map_or(current, Arc::new);
    let holding = if durable {
        Holding::until_settled(me, start)
    } else {
        Holding::new(me, start)
    };
    (holding, pending)
}

impl<H> Served<H> {
    /// The key layout changed: hand off the rows leaving, import those that arrived early;
    /// or it settled: serve the ranges held until then, forget the handoffs kept.
    pub(super) fn on_layout<V: Value>(&mut self, wire: &KeyLayout)
    where
        H: RequestHandler<V>,
    {
        if let Some(adopted) = self.holding.adopt(wire) {
            for m in adopted.out {
                self.hand_off::<V>(m, wire.epoch);
            }
            let of = self.pieces.of(wire.epoch);
            for (range, rows) in adopted.arrived {
                self.import::<V>((wire.epoch, of), range, rows);
            }
        }
        if wire.settled.is_some() && wire.epoch <= self.holding.epoch() {
            self.holding.settled(wire.epoch);
            self.kept.retain(|k| k.epoch > wire.epoch);
        }
    }

    /// Catches up with a layout (or its settling) this server missed: one broadcast while it
    /// was being created, before its customer's route opened.
    pub(super) fn catch_up<V: Value>(&mut self)
    where
        H: RequestHandler<V>,
    {
        let (wire, settled) = crate::postoffice::layout_wire(&self.po);
        if let Some(w) = wire.filter(|w| w.epoch > self.holding.epoch()) {
            self.on_layout::<V>(&w);
        }
        if settled > self.holding.settled_through() && settled <= self.holding.epoch() {
            self.holding.settled(settled);
            self.kept.retain(|k| k.epoch > settled);
        }
    }

    /// Peer `peer` was replaced: the handoffs to it whose layout has not settled go again
    /// (its replacement restored a checkpoint without them).
    pub(super) fn on_peer_replaced(&self, peer: NodeId) {
        for k in self.kept.iter().filter(|k| k.to == peer) {
            tracing::warn!(
                "handing the rows for key layout {} again to the replacement of {}",
                k.epoch,
                Node::describe(peer)
            );
            for msg in &k.pieces {
                let mut msg = msg.clone();
                msg.meta.stamp = Default::default();
                if let Err(e) = self.po.send(msg) {
                    tracing::error!("cannot hand rows again to {}: {e}", Node::describe(peer));
                    break;
                }
            }
        }
    }

    /// Exports the rows of move `m` (to layout `epoch`) and sends them to the new owner.
    fn hand_off<V: Value>(&mut self, m: Move, epoch: u64)
    where
        H: RequestHandler<V>,
    {
        let rows = self.handler.export_range(m.range);
        let meta = Meta {
            tag: RequestTag {
                app_id: self.app_id,
                customer_id: 0,
                timestamp: 0,
            },
            recver: m.to,
            request: true,
            kv: KvHeader {
                dtype: V::DTYPE,
                placement: None,
                ..KvHeader::default()
            },
            error: rows.as_ref().err().cloned(),
            ..Meta::default()
        };
        let rows = rows.unwrap_or_default();
        let bytes = rows.len() as u64;
        let membership = &self.po.metrics().membership;
        membership.ranges_moved.inc();
        membership.bytes_migrated.inc_by(bytes);
        tracing::info!(
            "handing keys [{}, {}) to {} for key layout {epoch}: {bytes} bytes of {:?} rows",
            m.range.begin,
            m.range.end,
            Node::describe(m.to),
            V::DTYPE
        );
        let pieces = self.send_pieces(meta, Bytes::from(rows), (m, epoch));
        // Only a server with a checkpoint may be replaced and need them again.
        if self.durable.is_some() {
            self.kept.push(Kept {
                epoch,
                to: m.to,
                pieces,
            });
        }
    }

    /// Sends `rows` (the export of move `m` to layout `epoch`) under `meta` in pieces of at
    /// most a server's frame bound; returns every piece (to send again to a replacement), the
    /// ones a failed send left unsent too.
    fn send_pieces(&self, mut meta: Meta, rows: Bytes, (m, epoch): (Move, u64)) -> Vec<Message> {
        // This server counts before its route opens (created during a move).
        let servers = crate::postoffice::key_value_servers(&self.po) + usize::from(!self.opened);
        let of = u32::try_from(servers).unwrap_or(u32::MAX);
        let piece_bytes = self
            .po
            .config()
            .bounds
            .max_frame_bytes(Role::Server)
            .min(MAX_PIECE_BYTES) as usize;
        let Ok(pieces) = u32::try_from(rows.len().div_ceil(piece_bytes).max(1)) else {
            tracing::error!(
                "the rows of keys [{}, {}) are too large to move",
                m.range.begin,
                m.range.end
            );
            return Vec::new();
        };
        let all: Vec<Message> = (0..pieces)
            .map(|piece| {
                meta.kv.placement = Some(Placement::Handoff {
                    epoch,
                    begin: m.range.begin,
                    end: m.range.end,
                    piece,
                    pieces,
                    of,
                });
                let at = piece as usize * piece_bytes;
                let part = rows.slice(at.min(rows.len())..(at + piece_bytes).min(rows.len()));
                Message {
                    meta: meta.clone(),
                    data: vec![part],
                }
            })
            .collect();
        for msg in &all {
            if let Err(e) = self.po.send(msg.clone()) {
                tracing::error!(
                    "cannot hand keys [{}, {}) to {}: {e}; their requests will wait",
                    m.range.begin,
                    m.range.end,
                    Node::describe(m.to)
                );
                break;
            }
        }
        all
    }

    /// A server handed rows to this one.
    pub(super) fn on_handoff<V: Value>(&mut self, msg: Message)
    where
        H: RequestHandler<V>,
    {
        let from = msg.meta.sender;
        let Some(Placement::Handoff {
            epoch,
            begin,
            end,
            piece,
            pieces,
            of,
        }) = msg.meta.kv.placement
        else {
            return;
        };
        if Node::role_of(from) != Some(Role::Server) || Node::rank_of(from) >= self.po.num_servers()
        {
            tracing::warn!(
                "dropped rows handed over by {}: only a server of this cluster hands rows over",
                Node::describe(from)
            );
            return;
        }
        let range = Range { begin, end };
        let rows = match msg.meta.error {
            Some(why) => Err(format!(
                "the rows of keys [{begin}, {end}) could not move from {}: {why}",
                Node::describe(from)
            )),
            None => {
                let frame = msg.data.into_iter().next().unwrap_or_default();
                let current = self.holding.epoch();
                match self
                    .pieces
                    .add((epoch, begin, from), (piece, pieces), frame, current)
                {
                    Some(whole) => Ok(whole),
                    None => return, // more pieces to come, or dropped
                }
            }
        };
        self.pieces.note_of(epoch, of, self.holding.epoch());
        if let Some(rows) = self.holding.handoff((epoch, range, from), rows) {
            self.import::<V>((epoch, of), range, rows);
        }
    }

    /// Imports `range`'s rows for layout `epoch` (or records why they are missing), and
    /// counts them as arrived (one of `of` handoffs). With a checkpoint, takes a snapshot
    /// first: a replacement of this server then restores the rows, and takes them again from
    /// the old owner only if it died before.
    fn import<V: Value>(
        &mut self,
        (epoch, of): (u64, u32),
        range: Range,
        rows: Result<Bytes, String>,
    ) where
        H: RequestHandler<V>,
    {
        let bytes = rows.as_ref().map_or(0, |r| r.len() as u64);
        let done = rows.and_then(|r| {
            self.handler.import_range(range, &r).map_err(|e| {
                format!(
                    "the rows of keys [{}, {}) were not taken: {e}",
                    range.begin, range.end
                )
            })
        });
        // With a checkpoint the rows count as taken once a snapshot holds them.
        let done = done.and_then(|()| match &mut self.durable {
            Some(d) => d.snapshot_now(&*self.handler).map_err(|e| {
                format!(
                    "the rows of keys [{}, {}) were taken but not kept: {e}",
                    range.begin, range.end
                )
            }),
            None => Ok(()),
        });
        let failure = match done {
            Ok(()) => {
                self.holding.imported(range);
                tracing::info!(
                    "took keys [{}, {}) for key layout {epoch}: {bytes} bytes of {:?} rows",
                    range.begin,
                    range.end,
                    V::DTYPE
                );
                None
            }
            Err(why) => {
                tracing::error!("{why}; requests for these keys are refused with it");
                self.holding.failed(range, why.clone());
                Some(why)
            }
        };
        crate::postoffice::range_arrived(&self.po, (epoch, of), bytes, failure);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_in_pieces_is_whole_once_every_piece_arrived_in_any_order() {
        let mut p = Pieces::default();
        let id = (1, 100, 12);
        let b = |s: &'static [u8]| Bytes::from_static(s);
        assert_eq!(p.add(id, (0, 1), b(b"all"), 1), Some(b(b"all")));
        assert_eq!(p.add(id, (2, 3), b(b"ef"), 1), None);
        assert_eq!(p.add(id, (0, 3), b(b"ab"), 1), None);
        assert_eq!(p.add(id, (0, 3), b(b"ab"), 1), None, "a piece again");
        assert_eq!(p.add(id, (1, 3), b(b"cd"), 1), Some(b(b"abcdef")));
        assert!(p.arriving.is_empty());
        assert_eq!(p.add(id, (3, 3), b(b"x"), 1), None, "no piece 3 of 3");
        assert_eq!(
            p.add((0, 100, 12), (0, 2), b(b"x"), 1),
            None,
            "a layout passed"
        );
        assert!(p.arriving.is_empty(), "malformed pieces are not kept");
        assert_eq!(p.add((7, 100, 12), (0, 2), b(b"x"), 1), None);
        assert_eq!(p.add((8, 100, 12), (0, 2), b(b"x"), 1), None);
        assert_eq!(p.add((9, 100, 12), (0, 2), b(b"x"), 1), None);
        assert_eq!(p.arriving.len(), 2, "two handoffs in pieces at most");
    }
}
