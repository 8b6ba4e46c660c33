//! A key-value server's part in a resize (elastic servers): on a new key layout it exports the
//! rows of each range leaving it and hands them to the new owner's server of the same
//! application and value type; on a handoff it imports the rows and, once every key-value
//! server of the node did, the node tells the scheduler ([`crate::postoffice::range_arrived`]).
//! Which requests it serves meanwhile is [`super::holding`]'s.

use super::{RequestHandler, Served};
use crate::kv::value::Value;
use crate::postoffice::ranges::holding::{Holding, Verdict};
use crate::postoffice::ranges::layout::Move;
use crate::postoffice::Range;
use crate::rendezvous::RvMessage;
use crate::wire::{KeyLayout, KvHeader, Message, Meta, Node, Placement, RequestTag, Role};
use bytes::Bytes;

/// Why rendezvous request `msg` is not served here, `None` when it is: its key's rows moved
/// to another server or have not arrived (a zero-copy pull is not sent again: it fails with
/// this, naming the key).
pub(super) fn not_served(holding: &Holding, msg: &RvMessage) -> Option<String> {
    let RvMessage::TensorRequest { key, .. } = *msg else {
        return None;
    };
    match holding.verdict(&[key], None) {
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
                placement: Some(Placement::Handoff {
                    epoch,
                    begin: m.range.begin,
                    end: m.range.end,
                }),
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
        let msg = Message {
            meta,
            data: vec![Bytes::from(rows)],
        };
        if let Err(e) = self.po.send(msg) {
            tracing::error!(
                "cannot hand keys [{}, {}) to {}: {e}; their requests will wait",
                m.range.begin,
                m.range.end,
                Node::describe(m.to)
            );
        }
    }

    /// A server handed rows to this one.
    pub(super) fn on_handoff<V: Value>(&mut self, msg: Message)
    where
        H: RequestHandler<V>,
    {
        let from = msg.meta.sender;
        let Some(Placement::Handoff { epoch, begin, end }) = msg.meta.kv.placement else {
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
            None => Ok(msg.data.into_iter().next().unwrap_or_default()),
        };
        if let Some(rows) = self.holding.handoff(epoch, range, rows) {
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
        match done {
            Ok(()) => tracing::info!(
                "took keys [{}, {}) for key layout {epoch}: {bytes} bytes of {:?} rows",
                range.begin,
                range.end,
                V::DTYPE
            ),
            Err(why) => {
                tracing::error!("{why}; requests for these keys are refused with it");
                self.holding.failed(range, why);
            }
        }
        crate::postoffice::range_arrived(&self.po, epoch, bytes);
    }
}
