//! A lost server replaced (recovery, `PS_CHECKPOINT_DIR`): the tracker keeps every part until
//! it is answered, and when the postoffice says a server was replaced
//! ([`CustomerEvent::PeerReplaced`](crate::postoffice::CustomerEvent::PeerReplaced)) it tells
//! the replacement what its predecessor answered (ANSWERED: the highest timestamp of a
//! state-changing request answered without an error), then sends it again, oldest first,
//! every part it has not answered. The replacement answers a part it finds among those applied
//! before the loss without applying it again (`kv::durable::applied`), and refuses to serve if
//! its restored checkpoint lacks an answered one (`kv::server::durable`).

use super::Tracker;
use crate::kv::value::Value;
use crate::postoffice::Postoffice;
use crate::sync::lock;
use crate::wire::{ControlMsg, Message, Meta, Node};
use std::collections::HashMap;
use std::sync::Mutex;

/// Whether parts are kept for replacements, and per server rank the highest timestamp of a
/// state-changing request it answered without an error. Its lock is taken alone, or inside
/// the tracker's `pending`.
pub(super) struct Replacing {
    keep: bool,
    highest: Mutex<HashMap<usize, i32>>,
}

impl Replacing {
    pub(super) fn new(keep: bool) -> Replacing {
        Replacing {
            keep,
            highest: Mutex::new(HashMap::new()),
        }
    }

    /// Whether every part is kept until it is answered.
    pub(super) fn keeps(&self) -> bool {
        self.keep
    }

    /// Server rank `server` answered state-changing request `ts` without an error.
    pub(super) fn answered(&self, server: usize, ts: i32) {
        if !self.keep {
            return;
        }
        lock(&self.highest)
            .entry(server)
            .and_modify(|h| *h = later(*h, ts))
            .or_insert(ts);
    }

    fn highest(&self, server: usize) -> Option<i32> {
        lock(&self.highest).get(&server).copied()
    }
}

/// The later of two timestamps in serial-number order (RFC 1982): timestamps wrap around.
fn later(a: i32, b: i32) -> i32 {
    if b.wrapping_sub(a) > 0 {
        b
    } else {
        a
    }
}

impl<V: Value> Tracker<V> {
    /// Server rank `server` was replaced (this worker's customer is application `app_id`,
    /// customer `customer_id`): tells the replacement what its predecessor answered, then
    /// sends it again every part it has not answered, oldest first. Does nothing when parts
    /// are not kept.
    pub(in crate::kv::worker) fn on_replaced(
        &self,
        po: &Postoffice,
        server: usize,
        (app_id, customer_id): (i32, i32),
    ) {
        if !self.replacing.keeps() {
            return;
        }
        let id = Node::server_id(server);
        if let Some(ts) = self.replacing.highest(server) {
            let meta = Meta {
                request: true,
                app_id,
                dtype: V::DTYPE,
                ..Meta::for_control(
                    id,
                    ControlMsg::Answered {
                        highest: vec![(customer_id, ts)],
                    },
                )
            };
            if let Err(e) = po.send(Message::new(meta)) {
                tracing::warn!(
                    "cannot tell {} what its predecessor answered: {e}",
                    Node::describe(id)
                );
            }
        }
        let again = self.unanswered_by(server);
        if !again.is_empty() {
            tracing::warn!(
                "sending {} again the {} requests of app {app_id}, customer {customer_id} it \
                 did not answer",
                Node::describe(id),
                again.len()
            );
        }
        for mut msg in again {
            msg.meta.seq = None;
            if let Err(e) = po.send(msg) {
                tracing::warn!("cannot send a request again to {}: {e}", Node::describe(id));
            }
        }
    }

    /// Copies of the parts sent to server rank `server` that it has not answered, oldest
    /// first.
    fn unanswered_by(&self, server: usize) -> Vec<Message> {
        let pending = lock(&self.pending);
        let mut out: Vec<(i32, Message)> = pending
            .iter()
            .filter_map(|(&ts, p)| {
                let slot = p.servers.iter().position(|&s| s == server)?;
                if p.answered[slot] {
                    return None;
                }
                p.asked[slot].resend.clone().map(|m| (ts, m))
            })
            .collect();
        out.sort_by_key(|(ts, _)| *ts);
        out.into_iter().map(|(_, m)| m).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_answered_timestamp_is_the_latest_in_serial_number_order() {
        let r = Replacing::new(true);
        for ts in [3, 7, 5] {
            r.answered(0, ts);
        }
        assert_eq!(r.highest(0), Some(7));
        assert_eq!(r.highest(1), None, "another server");
        r.answered(1, i32::MAX);
        r.answered(1, i32::MIN);
        assert_eq!(r.highest(1), Some(i32::MIN), "wrapped: later");
        let off = Replacing::new(false);
        off.answered(0, 1);
        assert_eq!(off.highest(0), None, "nothing kept without replacements");
    }
}
