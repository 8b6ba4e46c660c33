//! The server side of zero-copy (rendezvous) pulls: TF contrib/verbs' responder
//! ([`crate::rendezvous::Responder`]) driven on a `KVServer`'s customer thread.
//!
//! On the RDMA van a value goes to the worker as one RDMA WRITE WITH IMMEDIATE straight from
//! where the handler keeps it — TF verbs' first requirement, a write from the source tensor —
//! when the handler shows its memory ([`ServesValues::value_regions`](super::ServesValues::value_regions); the default handler's
//! key store does): each region is registered once, on the first write from it, as TF's
//! allocator visitor registers each region its allocator adds. Otherwise (another handler, a
//! value outside the regions, a registration the device refused) the value is copied into a
//! registered pool buffer and written from there; on the ZMQ van it travels as a message.
//!
//! **A push while a write is in flight.** The NIC reads a value while its write is in flight;
//! a push summed into it meanwhile could send the worker half-old, half-new values. So every
//! write from the store holds a count of in-flight writes, released on its completion, and the
//! server applies a push only once this count is zero: the push waits for the writes before it
//! (at most `PS_TIMEOUT`; then it is refused with an error naming the wait, and nothing of it is
//! applied). Writes from pool copies and messages need no wait.

use super::RequestHandler;
use crate::kv::carrier::{self, WriteTo};
use crate::kv::value::Value;
use crate::kv::Key;
use crate::postoffice::{reply_meta, Postoffice};
use crate::rendezvous::responder::Lookup;
use crate::rendezvous::{RespAction, Responder, RvMessage, TensorMeta};
use crate::sync::lock;
use crate::van::WriteSource;
use crate::wire::{Message, Meta, Node};
use bytes::Bytes;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Responses after which an unclaimed rendezvous clone is dropped.
const CLONE_MAX_AGE: u64 = 4096;

/// Writes in flight from a handler's memory.
#[derive(Default)]
pub(super) struct InFlight {
    count: Mutex<usize>,
    cv: Condvar,
}

/// One write in flight: counted while it lives (the van drops it on the write's completion).
struct Writing(Arc<InFlight>);

impl Writing {
    fn new(f: &Arc<InFlight>) -> Writing {
        *lock(&f.count) += 1;
        Writing(f.clone())
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        *lock(&self.0.count) -= 1;
        self.0.cv.notify_all();
    }
}

impl InFlight {
    /// Waits until no write is in flight; `false` if some still are after `timeout`.
    pub(super) fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut n = lock(&self.count);
        while *n > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            n = crate::sync::wait_timeout(&self.cv, n, deadline - now);
        }
        true
    }
}

/// The rendezvous state of one `KVServer`.
pub(super) struct ServerRv {
    rv: Responder,
    /// Registered regions of the handler's memory: (address, bytes, lkey).
    regions: Vec<(usize, usize, u32)>,
    /// The device refused a registration: copy into the pool from then on.
    refused: bool,
    pub(super) in_flight: Arc<InFlight>,
}

fn lookup<V: Value>(handler: &impl RequestHandler<V>, key: Key) -> Lookup<'_> {
    value(handler, key).map(|v| {
        (
            TensorMeta::of(V::DTYPE, v.len() as u64),
            bytemuck::cast_slice::<V, u8>(v),
        )
    })
}

/// The value of `key` the handler shows ([`super::ServesValues`]).
fn value<V: Value>(handler: &impl RequestHandler<V>, key: Key) -> Option<&[V]> {
    handler.values().and_then(|s| s.value(key))
}

impl ServerRv {
    pub(super) fn new(po: &Postoffice, dtype: crate::wire::DType) -> ServerRv {
        ServerRv {
            rv: Responder::new(dtype, po.config().zero_copy.data_validation),
            regions: Vec::new(),
            refused: false,
            in_flight: Arc::default(),
        }
    }

    /// Ends the registrations of the handler's regions (no write from them may be in flight).
    pub(super) fn deregister(&mut self, po: &Postoffice) {
        for (a, _, _) in self.regions.drain(..) {
            po.memory().deregister_memory(a);
        }
    }

    /// Whether rendezvous pulls wait for a key's first push (tag matching).
    pub(super) fn has_parked(&self) -> bool {
        self.rv.has_parked()
    }

    /// A rendezvous message `rvmsg` (TENSOR_REQUEST, TENSOR_RE_REQUEST) arrived under header
    /// `m`.
    pub(super) fn serve<V: Value>(
        &mut self,
        po: &Postoffice,
        handler: &impl RequestHandler<V>,
        m: &Meta,
        rvmsg: RvMessage,
    ) {
        let actions = self
            .rv
            .on_message(m.sender, rvmsg, handler.values().is_some(), |k| {
                lookup(handler, k)
            });
        // A clone unclaimed after this many later responses belongs to a requester that gave up.
        let dropped = self.rv.expire(CLONE_MAX_AGE);
        if dropped > 0 {
            tracing::debug!("dropped {dropped} rendezvous clones whose re-request never came");
        }
        self.run_actions(po, m, handler, actions);
    }

    /// A rendezvous request `rvmsg` (under header `m`) for a key this server does not serve
    /// now: answered ERROR_STATUS with `why`.
    pub(super) fn refuse<V: Value>(
        &mut self,
        po: &Postoffice,
        handler: &impl RequestHandler<V>,
        m: &Meta,
        (rvmsg, why): (RvMessage, String),
    ) {
        let actions = self.rv.refuse(m.sender, &rvmsg, why);
        self.run_actions(po, m, handler, actions);
    }

    /// `keys` got values (a push of request `m`): serve the pulls that waited for them.
    pub(super) fn pushed<V: Value>(
        &mut self,
        po: &Postoffice,
        m: &Meta,
        handler: &impl RequestHandler<V>,
        keys: Vec<Key>,
    ) {
        for key in keys {
            let actions = self.rv.on_value_ready(key, |k| lookup(handler, k));
            self.run_actions(po, m, handler, actions);
        }
    }

    /// The lkey covering `[addr, addr + len)`, registering the handler's regions on first need.
    fn lkey<V: Value>(
        &mut self,
        po: &Postoffice,
        handler: &impl RequestHandler<V>,
        addr: usize,
        len: usize,
    ) -> Option<u32> {
        let find = |regions: &[(usize, usize, u32)]| {
            regions
                .iter()
                .find(|&&(a, n, _)| addr >= a && addr + len <= a + n)
                .map(|r| r.2)
        };
        if let Some(k) = find(&self.regions) {
            return Some(k);
        }
        if self.refused {
            return None;
        }
        let regions = handler.values().map_or(Vec::new(), |s| s.value_regions());
        for (a, n) in regions {
            if self.regions.iter().any(|r| r.0 == a) {
                continue;
            }
            // SAFETY: the handler keeps its regions allocated while it lives (the trait's
            // contract), and `Served` deregisters them before it drops the handler.
            match unsafe { po.memory().register_source(a, n) } {
                Ok(Some(keys)) => {
                    tracing::debug!("registered {n} bytes of stored values for zero-copy writes");
                    self.regions.push((a, n, keys.lkey));
                }
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!("zero-copy pulls copy values into the pool from now on: {e}");
                    self.refused = true;
                    return None;
                }
            }
        }
        find(&self.regions)
    }

    /// Writes `content` (a stored value) straight from the handler's memory; else as
    /// [`carrier::write_copy`]. False: send it as a message.
    fn write_stored<V: Value>(
        &mut self,
        po: &Postoffice,
        handler: &impl RequestHandler<V>,
        content: &[u8],
        w: WriteTo,
    ) -> bool {
        if !po.memory().can_write(w.to) || content.is_empty() {
            return false;
        }
        let at = content.as_ptr() as usize;
        let Some(lkey) = self.lkey(po, handler, at, content.len()) else {
            return carrier::write_copy(po, content, w);
        };
        let hold = Box::new(Writing::new(&self.in_flight));
        // SAFETY: `content` lies in a region registered with `lkey` (found above); the handler
        // keeps it allocated, and it changes only in pushes and commands, which wait while the
        // hold (an in-flight count) lives.
        let src = unsafe { WriteSource::new(at as u64, content.len(), lkey, hold) };
        carrier::write(po, src, w)
    }

    /// Carries out the responder's actions in answer to request `req`: control messages and
    /// content through the [`carrier`] (content by RDMA write where the van can write, else
    /// as a message).
    fn run_actions<V: Value>(
        &mut self,
        po: &Postoffice,
        req: &Meta,
        handler: &impl RequestHandler<V>,
        actions: Vec<RespAction>,
    ) {
        for a in actions {
            let mut meta = reply_meta(req);
            meta.kv.pull = true;
            meta.kv.push = false;
            let Some(msg) = self.answer_or_write(po, meta, handler, a) else {
                continue;
            };
            let to = msg.meta.recver;
            if let Err(e) = po.send(msg) {
                tracing::warn!("cannot answer {}: {e}", Node::describe(to));
            }
        }
    }

    /// Carries out action `a`: `None` when its content went by RDMA write, else the message
    /// to send (with `meta`, the answer's), a control message or the content.
    fn answer_or_write<V: Value>(
        &mut self,
        po: &Postoffice,
        mut meta: Meta,
        handler: &impl RequestHandler<V>,
        a: RespAction,
    ) -> Option<Message> {
        match a {
            RespAction::Send { to, msg } => {
                meta.recver = to;
                Some(carrier::control(meta, &msg))
            }
            RespAction::WriteStored {
                to,
                key,
                addr,
                rkey,
                imm,
            } => {
                let content = value(handler, key)
                    .map(bytemuck::cast_slice::<V, u8>)
                    .unwrap_or(&[]);
                let w = WriteTo {
                    to,
                    addr,
                    rkey,
                    imm,
                };
                if self.write_stored(po, handler, content, w) {
                    return None;
                }
                meta.recver = to;
                Some(carrier::content(meta, imm, Bytes::copy_from_slice(content)))
            }
            RespAction::WriteClone {
                to,
                data,
                addr,
                rkey,
                imm,
            } => {
                let w = WriteTo {
                    to,
                    addr,
                    rkey,
                    imm,
                };
                if po.memory().can_write(to) && carrier::write_copy(po, &data, w) {
                    return None;
                }
                meta.recver = to;
                Some(carrier::content(meta, imm, data))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_waits_for_the_writes_in_flight_and_no_longer() {
        let f: Arc<InFlight> = Arc::default();
        assert!(f.wait_idle(Duration::ZERO), "nothing in flight");
        let w = Writing::new(&f);
        assert!(
            !f.wait_idle(Duration::from_millis(50)),
            "a write in flight holds the push back"
        );
        // The van drops the hold on the write's completion, from its poller thread.
        let t0 = Instant::now();
        let done = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(w);
        });
        assert!(
            f.wait_idle(Duration::from_secs(10)),
            "released on completion"
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(90),
            "it waited for the completion"
        );
        done.join().expect("no panic");
        let (a, b) = (Writing::new(&f), Writing::new(&f));
        drop(a);
        assert!(
            !f.wait_idle(Duration::from_millis(10)),
            "one write still in flight"
        );
        drop(b);
        assert!(f.wait_idle(Duration::ZERO));
    }
}
