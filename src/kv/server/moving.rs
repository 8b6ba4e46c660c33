//! A key-value server's part in a resize (elastic servers): on a new key layout it exports the
//! rows of each range leaving it and hands them to the new owner's server of the same
//! application and value type; on a handoff it imports the rows and, once every key-value
//! server of the node did, the node tells the scheduler ([`crate::postoffice::range_arrived`]).
//! Which requests it serves meanwhile is [`crate::postoffice::ranges::holding`]'s.

use super::{RequestHandler, Served};
use crate::kv::value::Value;
use crate::postoffice::ranges::holding::{Holding, Verdict};
use crate::postoffice::ranges::layout::Move;
use crate::postoffice::Range;
use crate::rendezvous::RvMessage;
use crate::wire::{KeyLayout, KvHeader, Message, Meta, Node, NodeId, Placement, RequestTag, Role};
use bytes::Bytes;
use std::collections::HashMap;

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
}

impl Pieces {
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

impl<H> Served<H> {
    /// The key layout changed: hand off the rows leaving, import those that arrived early.
    pub(super) fn on_layout<V: Value>(&mut self, wire: &KeyLayout)
    where
        H: RequestHandler<V>,
    {
        let Some(adopted) = self.holding.adopt(wire) else {
            return;
        };
        for m in adopted.out {
            self.hand_off::<V>(m, wire.epoch);
        }
        for (range, rows) in adopted.arrived {
            self.import::<V>(wire.epoch, range, rows);
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
        self.send_pieces(meta, Bytes::from(rows), (m, epoch));
    }

    /// Sends `rows` (the export of move `m` to layout `epoch`) under `meta` in pieces of at
    /// most a server's frame bound.
    fn send_pieces(&self, mut meta: Meta, rows: Bytes, (m, epoch): (Move, u64)) {
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
            return;
        };
        for piece in 0..pieces {
            meta.kv.placement = Some(Placement::Handoff {
                epoch,
                begin: m.range.begin,
                end: m.range.end,
                piece,
                pieces,
            });
            let at = piece as usize * piece_bytes;
            let part = rows.slice(at.min(rows.len())..(at + piece_bytes).min(rows.len()));
            let msg = Message {
                meta: meta.clone(),
                data: vec![part],
            };
            if let Err(e) = self.po.send(msg) {
                tracing::error!(
                    "cannot hand keys [{}, {}) to {}: {e}; their requests will wait",
                    m.range.begin,
                    m.range.end,
                    Node::describe(m.to)
                );
                return;
            }
        }
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
        if let Some(rows) = self.holding.handoff((epoch, range, from), rows) {
            self.import::<V>(epoch, range, rows);
        }
    }

    /// Imports `range`'s rows for layout `epoch` (or records why they are missing), and
    /// counts them as arrived.
    fn import<V: Value>(&mut self, epoch: u64, range: Range, rows: Result<Bytes, String>)
    where
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
        crate::postoffice::range_arrived(&self.po, epoch, bytes, failure);
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
