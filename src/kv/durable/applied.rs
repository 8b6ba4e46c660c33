//! Which state-changing requests a durable server applied recently, so that a request a worker
//! sends again after the server was replaced is answered without being applied twice
//! ("nothing applied twice"). Sans-IO.
//!
//! A request's part is named by its sender, the sender's customer id, the request's timestamp
//! (`RequestTag::timestamp`, which a `KVWorker` never reuses) and its part number
//! (`Placement::part`: a request sliced again while servers are added or drained may bring one
//! server two parts of it). Only the last [`KEEP`] per sender and
//! customer are kept: a server answers one connection's requests in order, so the requests
//! applied but not answered when a server dies are the last ones it applied from each worker
//! (those still in its send queue). A worker with more than [`KEEP`] requests outstanding to
//! one server could see the oldest applied twice after a restart.

use super::bytes::Reader;
use super::record::Entry;
use crate::wire::NodeId;
use std::collections::{HashMap, HashSet, VecDeque};

/// Requests remembered per (sender, customer).
pub const KEEP: usize = 8192;

/// The last applied (timestamp, part) of one (sender, customer), in the order applied.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
struct Recent {
    order: VecDeque<(i32, u32)>,
    set: HashSet<(i32, u32)>,
}

/// The recently applied requests of a server (see the module docs).
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    by_client: HashMap<(NodeId, i32), Recent>,
}

impl Applied {
    /// Whether part `part` of request `ts` of (`sender`, `customer`) was applied.
    pub fn contains(&self, sender: NodeId, customer: i32, (ts, part): (i32, u32)) -> bool {
        self.by_client
            .get(&(sender, customer))
            .is_some_and(|r| r.set.contains(&(ts, part)))
    }

    /// Whether some part of request `ts` of (`sender`, `customer`) was applied.
    pub fn has_request(&self, sender: NodeId, customer: i32, ts: i32) -> bool {
        self.by_client
            .get(&(sender, customer))
            .is_some_and(|r| r.set.iter().any(|&(t, _)| t == ts))
    }

    /// Whether request `ts` of (`sender`, `customer`) may have been applied and forgotten:
    /// [`KEEP`] of that client's are remembered and `ts` is older than each of them.
    pub fn forgotten(&self, sender: NodeId, customer: i32, ts: i32) -> bool {
        self.by_client
            .get(&(sender, customer))
            .is_some_and(|r| r.order.len() >= KEEP && r.set.iter().all(|&(t, _)| ts < t))
    }

    /// The highest timestamp remembered of (`sender`, `customer`), `None` when none is.
    pub fn latest(&self, sender: NodeId, customer: i32) -> Option<i32> {
        self.by_client
            .get(&(sender, customer))
            .and_then(|r| r.set.iter().map(|&(t, _)| t).max())
    }

    /// Records that part `part` of request `ts` of (`sender`, `customer`) was applied.
    pub fn insert(&mut self, sender: NodeId, customer: i32, (ts, part): (i32, u32)) {
        let r = self.by_client.entry((sender, customer)).or_default();
        if !r.set.insert((ts, part)) {
            return;
        }
        r.order.push_back((ts, part));
        if r.order.len() > KEEP {
            if let Some(old) = r.order.pop_front() {
                r.set.remove(&old);
            }
        }
    }

    /// Records what log entry `e` says of applied requests: one applied, or a sender
    /// forgotten (a key list says nothing of them).
    pub fn note(&mut self, e: &Entry<'_>) {
        match e {
            Entry::Applied(r) => self.insert(r.sender, r.customer, (r.timestamp, r.part)),
            Entry::Forget(s) => self.forget(*s),
            Entry::KeyList { .. } => {}
        }
    }

    /// Forgets `sender` (log entry kind 2, which nothing writes now: see `record`).
    pub fn forget(&mut self, sender: NodeId) {
        self.by_client.retain(|&(s, _), _| s != sender);
    }

    /// Requests remembered, over all senders.
    pub fn len(&self) -> usize {
        self.by_client.values().map(|r| r.order.len()).sum()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// As bytes (little-endian): the number of (sender, customer) pairs `u64`; per pair, sorted:
    /// sender `i32`, customer `i32`, count `u64`, the (timestamp `i32`, part `u32`) in the order
    /// applied.
    pub fn encode(&self) -> Vec<u8> {
        let mut clients: Vec<_> = self.by_client.iter().collect();
        clients.sort_by_key(|(k, _)| **k);
        let mut out = (clients.len() as u64).to_le_bytes().to_vec();
        for ((sender, customer), r) in clients {
            out.extend_from_slice(&sender.to_le_bytes());
            out.extend_from_slice(&customer.to_le_bytes());
            out.extend_from_slice(&(r.order.len() as u64).to_le_bytes());
            for (ts, part) in &r.order {
                out.extend_from_slice(&ts.to_le_bytes());
                out.extend_from_slice(&part.to_le_bytes());
            }
        }
        out
    }

    /// Reads what [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    /// A truncation or bytes left over, naming the field and offset.
    pub fn decode(bytes: &[u8]) -> Result<Applied, String> {
        let mut r = Reader::new("saved applied requests", bytes);
        let mut applied = Applied::default();
        for _ in 0..r.u64("the number of senders")? {
            let sender = r.i32("a sender")?;
            let customer = r.i32("a customer id")?;
            for _ in 0..r.u64("a count of timestamps")? {
                let ts = r.i32("a timestamp")?;
                let mut part = [0u8; 4];
                part.copy_from_slice(r.take(4, "a part")?);
                applied.insert(sender, customer, (ts, u32::from_le_bytes(part)));
            }
        }
        r.finish("the applied requests")?;
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model: the distinct (timestamp, part) applied per client are remembered
        /// (below KEEP; the eviction has its own test), and a round trip through bytes keeps
        /// exactly them; a truncation is an error.
        #[test]
        fn remembers_the_last_keep_per_client_and_round_trips(
            ops in proptest::collection::vec((0i32..3, 0i32..2, 0i32..400, 0u32..3), 0..300),
            extra in 0usize..2,
        ) {
            let mut a = Applied::default();
            let mut model: HashMap<(i32, i32), Vec<(i32, u32)>> = HashMap::new();
            for &(s, c, ts, part) in &ops {
                a.insert(s, c, (ts, part));
                let m = model.entry((s, c)).or_default();
                if !m.contains(&(ts, part)) {
                    m.push((ts, part));
                    if m.len() > KEEP { m.remove(0); }
                }
            }
            for s in 0..3 {
                for c in 0..2 {
                    for ts in 0..400 {
                        let m = model.get(&(s, c));
                        for part in 0..3 {
                            let want = m.is_some_and(|m| m.contains(&(ts, part)));
                            prop_assert_eq!(a.contains(s, c, (ts, part)), want);
                        }
                        let any = m.is_some_and(|m| m.iter().any(|&(t, _)| t == ts));
                        prop_assert_eq!(a.has_request(s, c, ts), any);
                    }
                }
            }
            let bytes = a.encode();
            prop_assert_eq!(Applied::decode(&bytes), Ok(a.clone()));
            if !bytes.is_empty() {
                let cut = bytes.len() - 1 - extra.min(bytes.len() - 1);
                prop_assert!(Applied::decode(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn the_oldest_is_forgotten_past_keep_and_a_sender_can_be_forgotten() {
        let mut a = Applied::default();
        for ts in 0..=KEEP as i32 {
            a.insert(9, 0, (ts, 0));
        }
        a.insert(11, 0, (5, 0));
        assert!(!a.contains(9, 0, (0, 0)), "pushed out");
        assert!(a.forgotten(9, 0, 0) && a.forgotten(9, 0, -4));
        assert!(
            !a.forgotten(9, 0, KEEP as i32 + 1),
            "newer than all: never applied"
        );
        assert!(
            !a.forgotten(11, 0, 4),
            "a client with fewer than KEEP forgets nothing"
        );
        assert!(a.contains(9, 0, (1, 0)) && a.contains(9, 0, (KEEP as i32, 0)));
        assert!(!a.contains(9, 0, (1, 1)), "another part of the request");
        a.forget(9);
        assert!(!a.contains(9, 0, (1, 0)));
        assert!(a.contains(11, 0, (5, 0)));
        assert_eq!(a.len(), 1);
    }
}
