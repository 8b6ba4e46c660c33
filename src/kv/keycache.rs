//! Key caching, as in the OSDI'14 parameter server (Li et al., "Scaling Distributed Machine
//! Learning with the Parameter Server", section 4.2 "Key caching"), which neither ps-lite has:
//! a worker that sends a server the same key list again sends a 64-bit digest of it instead of
//! the keys. For single-`f32` keys the keys are 2/3 of a push's bytes.
//!
//! Sans-IO: [`Mirror`] (worker side, one per server) decides how each request refers to its
//! keys; [`Kept`] (server side, one per worker customer) holds the lists. The protocol, on
//! [`KeyRef`] in the request's meta:
//!
//! - `Register { digest, evict }`: the keys travel; the server keeps them under `digest` for
//!   this worker (replacing any list of that digest), after dropping the lists in `evict`.
//! - `Cached { digest }`: no keys travel; the server uses the list kept under `digest`. If it
//!   keeps none (it restarted, or its `PS_KEY_CACHE_KEYS` is smaller), it applies nothing and
//!   answers `Unknown`; the worker sends the request again with its keys (one extra round trip,
//!   never a wrong answer). The re-sent request may then be applied after requests the worker
//!   sent later; sums do not depend on that order.
//!
//! **Collisions.** The worker keeps every list it registered, and sends `Cached { digest }` only
//! after comparing the request's keys byte for byte with the list it registered under that
//! digest (it finds candidates by length, first and last key, so a repeated list costs that
//! comparison and no digest). Different keys with an equal digest are sent with `Register`, which replaces the
//! server's list. Since a worker's requests reach a server in order (one connection, one
//! customer thread), the list the server holds under a digest is always the last one the worker
//! registered under it: a collision costs the keys' bytes, never a push to the wrong keys.
//!
//! **Lists that never repeat pay nothing.** A sparse model's worker sends a new key list almost
//! every request. The worker registers a list only the second time it meets it: the first time
//! its keys travel plainly and only its digest is remembered (among the digests of the last
//! lists seen once, as many lists as `PS_KEY_CACHE_KEYS` keys would hold). So a list that
//! never comes back costs its digest, and neither side keeps or copies its keys; a list that
//! does costs its keys once more than registering at once would.
//!
//! The worker's LRU decides what is kept: it evicts least recently used lists once their keys
//! exceed `PS_KEY_CACHE_KEYS`, and tells the server in the next `Register`; the server follows,
//! so both hold the same lists and `Unknown` does not happen in a steady cluster. The server
//! also bounds each worker to its own `PS_KEY_CACHE_KEYS` (oldest registration dropped first).

use super::pairs::{check_sorted, view};
use super::Key;
use crate::wire::{KeyRef, NodeId};
use bytes::Bytes;
use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Lists shorter than this are sent as keys: their bytes cost less than the bookkeeping.
pub const MIN_KEYS: usize = 32;

/// The digest of a key list: xxh3 (64-bit) of its bytes.
pub fn digest(keys: &[Key]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(keys))
}

/// How one request refers to its keys.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// What goes in the request's meta (`None`: plain keys, no caching).
    pub key_ref: Option<KeyRef>,
    /// The keys, as bytes: sent when `send` is true, kept for the answer either way.
    pub keys: Bytes,
    /// Whether frame 0 carries the keys.
    pub send: bool,
}

struct Listed {
    keys: Bytes,
    used: u64,
}

/// A list's shape: its length, first and last key. Lists already held are found by their
/// shape and a byte comparison, so a repeated list costs no digest.
type Shape = (usize, Key, Key);

fn shape(keys: &[Key]) -> Shape {
    (
        keys.len(),
        keys.first().copied().unwrap_or(0),
        keys.last().copied().unwrap_or(0),
    )
}

/// A worker's record of the lists one server keeps for it: an LRU bounded in keys.
pub struct Mirror {
    capacity: usize,
    held: usize,
    tick: u64,
    lists: HashMap<u64, Listed>,
    /// Digests of the lists held, by shape.
    by_shape: HashMap<Shape, Vec<u64>>,
    /// Last use → digest.
    order: BTreeMap<u64, u64>,
    digest: fn(&[Key]) -> u64,
    /// Lists seen once and not registered: digest → (keys, when seen).
    seen: HashMap<u64, (usize, u64)>,
    /// `seen` in the order seen: (when, digest); entries whose time no longer matches are
    /// stale.
    seen_order: VecDeque<(u64, u64)>,
    /// Keys of the lists in `seen`.
    seen_keys: usize,
}

impl Mirror {
    /// A mirror of lists totalling at most `capacity` keys (0: caching off).
    pub fn new(capacity: usize) -> Mirror {
        Mirror::with_digest(capacity, digest)
    }

    /// As [`new`](Self::new) with another digest function (tests force collisions with it).
    pub fn with_digest(capacity: usize, digest: fn(&[Key]) -> u64) -> Mirror {
        Mirror {
            capacity,
            held: 0,
            tick: 0,
            lists: HashMap::new(),
            by_shape: HashMap::new(),
            order: BTreeMap::new(),
            digest,
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            seen_keys: 0,
        }
    }

    /// Whether the list of digest `d` (`n` keys) was seen once before; if not, remembers it
    /// (forgetting the oldest lists seen once beyond the capacity in keys).
    fn seen_before(&mut self, d: u64, n: usize) -> bool {
        if let Some((len, _)) = self.seen.remove(&d) {
            self.seen_keys -= len;
            return true;
        }
        self.tick += 1;
        self.seen.insert(d, (n, self.tick));
        self.seen_order.push_back((self.tick, d));
        self.seen_keys += n;
        while self.seen_keys > self.capacity {
            let Some((when, old)) = self.seen_order.pop_front() else {
                break;
            };
            if self.seen.get(&old).is_some_and(|&(_, w)| w == when) {
                if let Some((len, _)) = self.seen.remove(&old) {
                    self.seen_keys -= len;
                }
            }
        }
        if self.seen_order.len() > 2 * self.seen.len() + 64 {
            let seen = &self.seen;
            self.seen_order
                .retain(|&(when, d)| seen.get(&d).is_some_and(|&(_, w)| w == when));
        }
        false
    }

    /// Forgets list `d` (a held one) and what indexes it.
    fn remove(&mut self, d: u64) -> Option<Listed> {
        let l = self.lists.remove(&d)?;
        self.order.remove(&l.used);
        self.held -= l.keys.len() / 8;
        let sh = shape(bytemuck::cast_slice(&l.keys));
        if let Some(ds) = self.by_shape.get_mut(&sh) {
            ds.retain(|&x| x != d);
            if ds.is_empty() {
                self.by_shape.remove(&sh);
            }
        }
        Some(l)
    }

    /// Keeps `keys` under `d` as the most recently used list (replacing a list of that digest).
    fn insert(&mut self, d: u64, keys: Bytes) {
        self.remove(d);
        self.tick += 1;
        self.held += keys.len() / 8;
        self.by_shape
            .entry(shape(bytemuck::cast_slice(&keys)))
            .or_default()
            .push(d);
        self.order.insert(self.tick, d);
        self.lists.insert(
            d,
            Listed {
                keys,
                used: self.tick,
            },
        );
    }

    /// Keys of the lists held.
    pub fn held_keys(&self) -> usize {
        self.held
    }

    /// Decides how a request with `keys` refers to them, and records what the server will
    /// hold once it has the request.
    pub fn prepare(&mut self, keys: &[Key]) -> Prepared {
        let bytes: &[u8] = bytemuck::cast_slice(keys);
        if self.capacity == 0 || keys.len() < MIN_KEYS || keys.len() > self.capacity {
            return Prepared {
                key_ref: None,
                keys: Bytes::copy_from_slice(bytes),
                send: true,
            };
        }
        // A list held already: found by its shape and its bytes (no digest to compute).
        let held = self.by_shape.get(&shape(keys)).and_then(|ds| {
            ds.iter()
                .copied()
                .find(|d| self.lists.get(d).is_some_and(|l| l.keys[..] == *bytes))
        });
        if let Some(d) = held {
            self.tick += 1;
            if let Some(l) = self.lists.get_mut(&d) {
                self.order.remove(&l.used);
                self.order.insert(self.tick, d);
                l.used = self.tick;
                return Prepared {
                    key_ref: Some(KeyRef::Cached { digest: d }),
                    keys: l.keys.clone(),
                    send: false,
                };
            }
        }
        // A list not held: sent plainly the first time; registered when it comes again (the
        // server replaces whatever it keeps under that digest: a collision costs keys, never
        // a wrong list).
        let d = (self.digest)(keys);
        let keys_bytes = Bytes::copy_from_slice(bytes);
        if !self.seen_before(d, keys.len()) {
            return Prepared {
                key_ref: None,
                keys: keys_bytes,
                send: true,
            };
        }
        self.insert(d, keys_bytes.clone());
        let mut evict = Vec::new();
        while self.held > self.capacity {
            let Some((_, &old)) = self.order.iter().next() else {
                break;
            };
            if old == d {
                break; // unreachable: a list never exceeds the capacity alone
            }
            self.remove(old);
            evict.push(old);
        }
        Prepared {
            key_ref: Some(KeyRef::Register { digest: d, evict }),
            keys: keys_bytes,
            send: true,
        }
    }

    /// The server does not keep `digest` (it answered `Unknown`): forget it, so the request
    /// is sent again with its keys.
    pub fn forget(&mut self, digest: u64) {
        self.remove(digest);
    }
}

/// Scratch a request handler keeps with a cached key list (the default handler keeps where the
/// list's values lie); dropped with the list.
#[derive(Default)]
pub struct Memo(Option<Box<dyn Any + Send>>);

impl Memo {
    /// The value kept, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_ref().and_then(|b| b.downcast_ref())
    }

    /// Keeps `v` (replacing what was kept).
    pub fn set<T: Any + Send>(&mut self, v: T) {
        self.0 = Some(Box::new(v));
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Memo(kept)"
        } else {
            "Memo(empty)"
        })
    }
}

/// A list a server keeps for a worker.
#[derive(Debug)]
pub struct KeptList {
    /// The keys (the registering request's keys frame, sorted and unique).
    pub keys: Bytes,
    /// The handler's scratch for this list.
    pub memo: Memo,
    seq: u64,
}

/// The lists a server keeps for one worker customer, at most `capacity` keys in all.
pub struct Kept {
    capacity: usize,
    held: usize,
    seq: u64,
    lists: HashMap<u64, KeptList>,
    /// Registrations, oldest first: (sequence number, digest); stale ones are skipped.
    order: VecDeque<(u64, u64)>,
}

impl Kept {
    /// Room for lists of `capacity` keys in all.
    pub fn new(capacity: usize) -> Kept {
        Kept {
            capacity,
            held: 0,
            seq: 0,
            lists: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Keys of the lists held.
    pub fn held_keys(&self) -> usize {
        self.held
    }

    /// Drops the list kept under `digest`, if any.
    pub fn drop_list(&mut self, digest: u64) {
        if let Some(l) = self.lists.remove(&digest) {
            self.held -= l.keys.len() / 8;
        }
    }

    /// A `Register`: drops `evict`, then keeps `keys` (bytes of sorted, unique keys) under
    /// `digest`. Past the capacity, the oldest registrations are dropped (never this one; a
    /// list larger than the capacity is not kept).
    pub fn register(&mut self, digest: u64, evict: &[u64], keys: Bytes) {
        for &e in evict {
            self.drop_list(e);
        }
        self.drop_list(digest);
        let n = keys.len() / 8;
        if n > self.capacity {
            return;
        }
        self.seq += 1;
        self.held += n;
        self.lists.insert(
            digest,
            KeptList {
                keys,
                memo: Memo::default(),
                seq: self.seq,
            },
        );
        self.order.push_back((self.seq, digest));
        while self.held > self.capacity {
            let Some((seq, d)) = self.order.pop_front() else {
                break;
            };
            if self.lists.get(&d).is_some_and(|l| l.seq == seq) {
                self.drop_list(d);
            }
        }
        // Stale registrations (evicted or replaced) are dropped once they outnumber live ones.
        if self.order.len() > 2 * self.lists.len() + 16 {
            let lists = &self.lists;
            self.order
                .retain(|&(seq, d)| lists.get(&d).is_some_and(|l| l.seq == seq));
        }
    }

    /// The list kept under `digest`.
    pub fn get(&mut self, digest: u64) -> Option<&mut KeptList> {
        self.lists.get_mut(&digest)
    }
}

/// The lists a server keeps for all its workers: at most `capacity` keys per worker customer
/// (`PS_KEY_CACHE_KEYS`) and `budget` keys in all. Entries exist only for customers that
/// registered a list, and go when their last list does.
pub struct KeptLists {
    capacity: usize,
    budget: usize,
    held: usize,
    by_worker: HashMap<(NodeId, i32), Kept>,
}

impl KeptLists {
    /// Room for `capacity` keys per worker customer and `budget` keys in all.
    pub fn new(capacity: usize, budget: usize) -> KeptLists {
        KeptLists {
            capacity,
            budget,
            held: 0,
            by_worker: HashMap::new(),
        }
    }

    /// Keys of all lists held.
    pub fn held_keys(&self) -> usize {
        self.held
    }

    /// A `Register` from `worker`'s customer `customer`: drops `evict` and whatever is kept
    /// under `digest` — always, so that what the server keeps under a digest is never older
    /// than the worker's last registration — then keeps the keys of `frames` (the request's
    /// frames; the keys are frame 0) if they are whole, sorted and unique keys and fit the
    /// capacity and the budget. Returns whether it kept them (else the request is served with
    /// its keys, uncached).
    pub fn register(
        &mut self,
        worker: NodeId,
        customer: i32,
        digest: u64,
        evict: &[u64],
        frames: &[Bytes],
    ) -> bool {
        let keys = frames.first().map_or(&[][..], |b| &b[..]);
        let valid = view::<Key>(keys, "keys").is_ok_and(|k| check_sorted(&k).is_ok());
        // The keys frame may share one buffer with the rest of the request (the RDMA van's
        // frames do): keep it as it is only when the rest is no larger, so a kept list pins at
        // most twice its keys' bytes; else keep a copy.
        let rest: usize = frames.iter().skip(1).map(|f| f.len()).sum();
        let keep = || match frames.first() {
            Some(f) if rest <= f.len() => f.clone(),
            _ => Bytes::copy_from_slice(keys),
        };
        let slot = (worker, customer);
        if let Some(k) = self.by_worker.get_mut(&slot) {
            let before = k.held_keys();
            for &e in evict {
                k.drop_list(e);
            }
            k.drop_list(digest);
            self.held -= before - k.held_keys();
        }
        let n = keys.len() / 8;
        let kept = valid && n <= self.capacity && self.held + n <= self.budget;
        if kept {
            let cap = self.capacity;
            let k = self.by_worker.entry(slot).or_insert_with(|| Kept::new(cap));
            let before = k.held_keys();
            k.register(digest, &[], keep());
            self.held = self.held + k.held_keys() - before;
        }
        if self
            .by_worker
            .get(&slot)
            .is_some_and(|k| k.held_keys() == 0)
        {
            self.by_worker.remove(&slot);
        }
        kept
    }

    /// The list `worker`'s customer `customer` registered under `digest`.
    pub fn get(&mut self, worker: NodeId, customer: i32, digest: u64) -> Option<&mut KeptList> {
        self.by_worker.get_mut(&(worker, customer))?.get(digest)
    }
}

#[cfg(test)]
mod tests;
