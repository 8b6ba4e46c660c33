//! A worker's requests to servers that have not been answered yet, kept to be sent again to a
//! lost server's replacement, and per server the highest state-changing request it answered
//! (the recovery cross-check, ANSWERED). Kept only while the cluster replaces lost servers.

use crate::wire::{DType, Message, NodeId};
use std::collections::HashMap;

/// A retained request's key: the server, the application, the customer, the timestamp.
pub(super) type Key = (NodeId, i32, i32, i32);

/// What a `KVServer` serves: an application and a value type.
type Served = (i32, DType);

/// Per customer id, the highest timestamp a server answered (`ControlMsg::Answered`).
type Highest = Vec<(i32, i32)>;

/// A worker's requests to servers that have not been answered yet, and per server the
/// highest state-changing request each answered (only while the cluster replaces lost
/// servers: `Postoffice::retaining`).
#[derive(Default)]
pub(super) struct Retained {
    pub(super) msgs: HashMap<Key, Message>,
    /// Per (server, application, value type, customer): the highest timestamp of a
    /// state-changing request the server answered without an error (the recovery
    /// cross-check, `ControlMsg::Answered`).
    highest: HashMap<(NodeId, i32, DType, i32), i32>,
}

impl Retained {
    /// Forgets a request (never sent).
    pub(super) fn release(&mut self, key: Key) {
        self.msgs.remove(&key);
    }

    /// Request `key` was answered, `ok` without an error (and not to be sent again with its
    /// keys): forgets it, and counts it among what its server answered when it may have
    /// changed state.
    pub(super) fn answer(&mut self, key: Key, ok: bool) {
        let Some(msg) = self.msgs.remove(&key) else {
            return;
        };
        let m = &msg.meta;
        if ok && m.may_change_state() {
            let (server, app, customer, ts) = key;
            // Later in serial-number order (RFC 1982): timestamps wrap around.
            self.highest
                .entry((server, app, m.dtype, customer))
                .and_modify(|h| {
                    if ts.wrapping_sub(*h) > 0 {
                        *h = ts
                    }
                })
                .or_insert(ts);
        }
    }

    /// What `server` answered, per (application, value type): the customers' highest
    /// timestamps, sorted.
    pub(super) fn answered_by(&self, server: NodeId) -> Vec<(Served, Highest)> {
        let mut by_app: std::collections::BTreeMap<Served, Highest> = Default::default();
        for (&(s, app, dtype, customer), &ts) in &self.highest {
            if s == server {
                by_app.entry((app, dtype)).or_default().push((customer, ts));
            }
        }
        by_app
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                (k, v)
            })
            .collect()
    }

    /// Takes the requests to `server`, oldest first per customer.
    pub(super) fn take_for(&mut self, server: NodeId) -> Vec<Message> {
        let keys: Vec<Key> = self
            .msgs
            .keys()
            .filter(|k| k.0 == server)
            .copied()
            .collect();
        let mut out: Vec<(Key, Message)> = keys
            .into_iter()
            .filter_map(|k| self.msgs.remove(&k).map(|m| (k, m)))
            .collect();
        out.sort_by_key(|(k, _)| *k);
        out.into_iter().map(|(_, m)| m).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Meta;

    fn req(server: NodeId, customer: i32, ts: i32) -> (Key, Message) {
        let meta = Meta {
            recver: server,
            customer_id: customer,
            timestamp: ts,
            request: true,
            ..Meta::default()
        };
        ((server, 0, customer, ts), Message::new(meta))
    }

    #[test]
    fn a_replaced_servers_unanswered_requests_come_back_oldest_first_and_only_its_own() {
        let mut r = Retained::default();
        for (k, m) in [
            req(8, 0, 5),
            req(10, 0, 1),
            req(8, 1, 2),
            req(8, 0, 3),
            req(8, 0, 4),
        ] {
            r.msgs.insert(k, m);
        }
        r.answer((8, 0, 0, 4), true);
        let again: Vec<(i32, i32)> = r
            .take_for(8)
            .iter()
            .map(|m| (m.meta.customer_id, m.meta.timestamp))
            .collect();
        assert_eq!(
            again,
            vec![(0, 3), (0, 5), (1, 2)],
            "answered ones are not sent again"
        );
        assert_eq!(r.msgs.len(), 1, "server 10's request stays");
        assert!(r.take_for(8).is_empty(), "taken once");
    }

    #[test]
    fn what_a_server_answered_is_its_highest_state_changing_request_per_customer_without_errors() {
        let mut r = Retained::default();
        let mut keep = |server, app, customer, ts, push: bool, head: i32, dtype: DType| {
            let meta = Meta {
                recver: server,
                app_id: app,
                customer_id: customer,
                timestamp: ts,
                request: true,
                push,
                pull: !push,
                head,
                dtype,
                ..Meta::default()
            };
            r.msgs
                .insert((server, app, customer, ts), Message::new(meta));
        };
        keep(8, 0, 0, 3, true, 0, DType::F32);
        keep(8, 0, 0, 7, true, 0, DType::F32);
        keep(8, 0, 0, 9, false, 0, DType::F32); // a pull changes nothing
        keep(8, 0, 0, 11, true, 0, DType::F32); // answered with an error
        keep(8, 0, 1, 4, false, 5, DType::F32); // an application command
        keep(8, 0, 2, 5, true, 0, DType::U8);
        keep(8, 1, 0, 6, true, 0, DType::F32);
        keep(10, 0, 0, 12, true, 0, DType::F32); // another server
        keep(8, 0, 3, 13, true, 0, DType::F32); // not answered yet
        keep(8, 2, 0, i32::MAX, true, 0, DType::F32);
        keep(8, 2, 0, i32::MIN, true, 0, DType::F32); // wrapped: later
        for (key, ok) in [
            ((8, 0, 0, 7), true),
            ((8, 0, 0, 3), true),
            ((8, 0, 0, 9), true),
            ((8, 0, 0, 11), false),
            ((8, 0, 1, 4), true),
            ((8, 0, 2, 5), true),
            ((8, 1, 0, 6), true),
            ((10, 0, 0, 12), true),
            ((8, 0, 0, 99), true), // never kept
            ((8, 2, 0, i32::MIN), true),
            ((8, 2, 0, i32::MAX), true),
        ] {
            r.answer(key, ok);
        }
        assert_eq!(
            r.answered_by(8),
            vec![
                ((0, DType::F32), vec![(0, 7), (1, 4)]),
                ((0, DType::U8), vec![(2, 5)]),
                ((1, DType::F32), vec![(0, 6)]),
                ((2, DType::F32), vec![(0, i32::MIN)]),
            ]
        );
        assert_eq!(r.answered_by(10), vec![((0, DType::F32), vec![(0, 12)])]);
        assert_eq!(r.take_for(8).len(), 1, "the unanswered one is still kept");
    }
}
