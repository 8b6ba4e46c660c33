//! A lost server replaced (recovery, `PS_CHECKPOINT_DIR`): the tracker keeps every part until
//! it is answered, and when the postoffice says a server was replaced
//! ([`CustomerEvent::PeerReplaced`](crate::postoffice::CustomerEvent::PeerReplaced)) it tells
//! the replacement what its predecessor answered (ANSWERED: the highest timestamp of a
//! state-changing request answered without an error), then sends it again, oldest first,
//! every part it has not answered. The replacement answers a part it finds among those applied
//! before the loss without applying it again (`kv::durable::applied`), and refuses to serve if
//! its restored checkpoint lacks an answered one (`kv::server::durable`).

use super::Tracker;
use crate::error::Error;
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
    /// Server rank `server` was replaced, by its `incarnation`-th holder (this worker's
    /// customer is application `app_id`, customer `customer_id`): tells the replacement what
    /// its predecessor answered, then sends it again every part that went to the predecessor
    /// (on an older path) and is not answered, oldest first. Under the server's mirror, so
    /// that no part of this worker reaches the replacement before them. Does nothing when parts
    /// are not kept.
    pub(in crate::kv::worker) fn on_replaced(
        &self,
        po: &Postoffice,
        (server, incarnation): (usize, u32),
        (app_id, customer_id): (i32, i32),
    ) {
        if !self.replacing.keeps() {
            return;
        }
        let Some(mirror) = self.mirrors.get(server) else {
            return;
        };
        let _in_order = lock(&mirror);
        let id = Node::server_id(server);
        self.tell_answered(po, server, (app_id, customer_id));
        let again = self.unanswered_by(server, incarnation);
        if !again.is_empty() {
            tracing::warn!(
                "sending {} again the {} requests of app {app_id}, customer {customer_id} it \
                 did not answer",
                Node::describe(id),
                again.len()
            );
        }
        for mut msg in again {
            msg.meta.stamp.seq = None;
            let ts = msg.meta.tag.timestamp;
            let slot = super::pending::slot_of_part(&msg);
            match po.send_on_path(msg) {
                Ok((_, path)) => self.sent_on(ts, slot, path),
                Err(e) => {
                    tracing::warn!("cannot send a request again to {}: {e}", Node::describe(id))
                }
            }
        }
    }

    /// Tells the replacement of server rank `server` the highest state-changing request of
    /// this customer (application `app_id`, customer `customer_id`) its predecessor answered
    /// (ANSWERED), if any.
    fn tell_answered(&self, po: &Postoffice, server: usize, (app_id, customer_id): (i32, i32)) {
        let id = Node::server_id(server);
        if let Some(ts) = self.replacing.highest(server) {
            let meta = Meta {
                request: true,
                tag: crate::wire::RequestTag {
                    app_id,
                    ..Default::default()
                },
                kv: crate::wire::KvHeader {
                    dtype: V::DTYPE,
                    ..Default::default()
                },
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
    }

    /// Copies of the parts sent to server rank `server` on a path older than generation
    /// `incarnation` that it has not answered, oldest first (a request sliced again while
    /// servers are added or drained may have several parts there).
    fn unanswered_by(&self, server: usize, incarnation: u32) -> Vec<Message> {
        let pending = lock(&self.pending);
        let mut out: Vec<(i32, usize, Message)> = pending
            .iter()
            .flat_map(|(&ts, p)| {
                (0..p.servers.len())
                    .filter(|&slot| p.servers[slot] == server && !p.answered[slot])
                    .filter(|&slot| p.asked[slot].path < incarnation)
                    .filter_map(|slot| p.asked[slot].resend.clone().map(|m| (ts, slot, m)))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by_key(|(ts, slot, _)| (*ts, *slot));
        out.into_iter().map(|(_, _, m)| m).collect()
    }
}

/// Whether a part whose send failed with `e` is kept for its server's replacement (and the
/// request goes on waiting) rather than failing the request: only when parts are kept
/// (`keep`, the cluster replaces lost servers), the job has not failed (`failed`: a peer is
/// lost for good, so no replacement comes), and the send failed for the server's channel
/// ([`Error::Van`], [`Error::PeerLost`]).
pub(super) fn kept_for_replacement(keep: bool, failed: bool, e: &Error) -> bool {
    keep && !failed && matches!(e, Error::Van(_) | Error::PeerLost(_))
}

#[cfg(test)]
mod tests {
    use super::super::Outcome;
    use super::*;
    use crate::postoffice::budget::Budget;
    use std::sync::Arc;

    /// A tracker over 2 servers that keeps parts for replacements.
    fn tracker() -> Tracker<f32> {
        let budget = Arc::new(Budget::new(1 << 30));
        let metrics = Arc::new(crate::metrics::Metrics::new("zmq", budget.gauge(), |_| {}));
        Tracker::new(2, 1024, budget, metrics, true)
    }

    /// Opens request `ts` to `servers` (a push when `push`), recording each part as sent on
    /// the path of generation `path`.
    fn open(t: &Tracker<f32>, ts: i32, servers: &[usize], push: bool, path: u32) {
        let kind = if push { "push" } else { "pull" };
        assert!(t.open(
            ts,
            (format!("ts {ts}"), kind),
            servers.to_vec(),
            &[0, 0],
            None
        ));
        let mut pending = lock(&t.pending);
        let p = pending.get_mut(&ts).expect("opened");
        p.changes = push;
        for (slot, &s) in servers.iter().enumerate() {
            let meta = Meta {
                recver: Node::server_id(s),
                tag: crate::wire::RequestTag {
                    timestamp: ts,
                    ..Default::default()
                },
                request: true,
                kv: crate::wire::KvHeader {
                    push,
                    pull: !push,
                    ..Default::default()
                },
                ..Meta::default()
            };
            p.asked[slot].resend = Some(Message::new(meta));
            p.asked[slot].path = path;
        }
    }

    fn timestamps(msgs: &[Message]) -> Vec<i32> {
        msgs.iter().map(|m| m.meta.tag.timestamp).collect()
    }

    #[test]
    fn a_replaced_servers_unanswered_parts_come_back_oldest_first_and_only_its_own() {
        let t = tracker();
        open(&t, 5, &[0], true, 0);
        open(&t, 1, &[1], true, 0);
        open(&t, 2, &[0, 1], true, 0);
        open(&t, 3, &[0], false, 0);
        open(&t, 4, &[0], true, 0);
        open(&t, 6, &[0], true, 1); // sent to the replacement already
        t.settle(4, (0, None), Outcome::Pushed);
        t.settle(2, (1, None), Outcome::Pushed);
        assert_eq!(
            timestamps(&t.unanswered_by(0, 1)),
            vec![2, 3, 5],
            "answered ones and those on the new path are not sent again"
        );
        assert_eq!(
            timestamps(&t.unanswered_by(1, 1)),
            vec![1],
            "server 1's own"
        );
        assert_eq!(
            timestamps(&t.unanswered_by(0, 2)),
            vec![2, 3, 5, 6],
            "a second replacement"
        );
    }

    #[test]
    fn every_unanswered_part_of_a_request_at_the_replaced_server_comes_back() {
        // Request 7 went to servers 1 and 0; server 0 answered "moved" and the keys were
        // sliced again into a second part for server 1, which answered its first part only.
        let t = tracker();
        open(&t, 7, &[1, 0], true, 0);
        {
            let mut pending = lock(&t.pending);
            let p = pending.get_mut(&7).expect("opened");
            p.answered[1] = true;
            let slot = p.add_part(1);
            let again = p.asked[0].resend.clone();
            p.asked[slot].resend = again;
        }
        t.settle(7, (1, Some(0)), Outcome::Pushed);
        assert_eq!(
            timestamps(&t.unanswered_by(1, 1)),
            vec![7],
            "the second part at server 1 goes again"
        );
    }

    #[test]
    fn what_a_server_answered_is_its_highest_state_changing_request_without_an_error() {
        let t = tracker();
        open(&t, 3, &[0], true, 0);
        open(&t, 7, &[0], true, 0);
        open(&t, 9, &[0], false, 0); // a pull changes nothing
        open(&t, 11, &[0], true, 0); // answered with an error
        open(&t, 12, &[1], true, 0); // another server
        open(&t, 13, &[0], true, 0); // not answered yet
        t.settle(7, (0, None), Outcome::Pushed);
        t.settle(3, (0, None), Outcome::Pushed);
        let pulled = Outcome::Pulled {
            keys: None,
            vals: Default::default(),
            lens: Default::default(),
        };
        t.settle(9, (0, None), pulled);
        t.settle(
            11,
            (0, None),
            Outcome::Failed(crate::Error::Remote {
                node: "server rank 0 (id 8)".into(),
                message: "refused".into(),
            }),
        );
        t.settle(12, (1, None), Outcome::Pushed);
        assert_eq!(t.replacing.highest(0), Some(7));
        assert_eq!(t.replacing.highest(1), Some(12));
        assert_eq!(timestamps(&t.unanswered_by(0, 1)), vec![13]);
    }

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
