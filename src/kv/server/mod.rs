//! `KVServer`: answers the requests of one application for one value type, through a
//! [`RequestHandler`] (ps-lite's `KVServer<Val>`, `kv_app.h`).
//!
//! - this file: [`KVServer`], the [`RequestHandler`] trait and [`ReqMeta`], and what its
//!   customer thread does with each event;
//! - `serve`: `serve_request`, which turns one key-value request into a handler call and its
//!   answer (key caching: the key list a request names, see [`crate::kv::keycache`]);
//! - [`default`]: [`DefaultHandler`], sum pushes and answer pulls;
//! - `zserve`: the responder's driver of zero-copy (rendezvous) pulls.
//!
//! **Threads.** Everything of one `KVServer` runs on its customer thread (`customer-<route>`,
//! [`crate::postoffice::Customer`]): requests and rendezvous messages are handled one at a
//! time, in arrival order, and the handler, the kept key lists and the rendezvous responder
//! are owned by that thread, without locks. The only state shared with another thread is the
//! count of zero-copy writes in flight from the handler's memory: the RDMA van's poller
//! releases a write's hold on its completion (`zserve::InFlight`, one mutex and condvar).

pub mod default;
pub(crate) mod durable;
mod moving;
mod serve;
mod zserve;

pub use default::{serve_sums, serve_sums_of, DefaultHandler};

use super::carrier::{self, Arrival};
use super::keycache::KeptLists;
use super::pairs::{KVPairs, KVRequest};
use super::value::Value;
use super::Key;
use crate::error::Result;
use crate::postoffice::CustomerEvent;
use crate::postoffice::{Customer, Postoffice, Range, Route};
use crate::wire::{Message, Node, NodeId};
use moving::is_handoff;
use serve::{serve_request, Handling, Incoming};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;
use zserve::ServerRv;

/// What a handler learns about a request besides its pairs.
#[derive(Clone, Debug)]
pub struct ReqMeta {
    /// Application command ([`RequestOptions::cmd`](crate::kv::RequestOptions::cmd) of
    /// `KVWorker::request`; 0 for plain push/pull).
    pub cmd: i32,
    /// A push (values are in the request).
    pub push: bool,
    /// A pull (the answer must carry values).
    pub pull: bool,
    /// The requesting worker.
    pub sender: NodeId,
    /// The worker's timestamp.
    pub timestamp: i32,
}

/// Server-side logic: gets each request, returns the pairs to answer with (ignored unless the
/// request pulls) or an error text, which the worker's `wait` returns as
/// [`crate::Error::Remote`]. Requests of one `KVServer` are handled one at a time, in order.
pub trait RequestHandler<V: Value>: Send + 'static {
    /// Handles one request. `req.keys` are sorted and unique (checked before).
    ///
    /// # Errors
    /// A text naming what was wrong; the server goes on serving.
    fn handle(&mut self, meta: &ReqMeta, req: KVRequest<'_, V>) -> Result<KVPairs<V>, String>;

    /// The handler's stored values, when it serves zero-copy (rendezvous) pulls from them
    /// ([`ServesValues`]; a handler that does returns `Some(self)`). Default: `None` (such
    /// pulls get ERROR_STATUS).
    fn values(&self) -> Option<&dyn ServesValues<V>> {
        None
    }

    /// The handler's state as bytes, for a checkpoint snapshot (durable servers;
    /// [`crate::kv::durable`] frames and checksums them). Default: `None`, a handler whose
    /// state cannot be saved.
    fn save(&self) -> Option<Vec<u8>> {
        None
    }

    /// [`save`](Self::save) into `out`, replacing what it held; `false` when the state cannot
    /// be saved. The server passes the same buffer at every snapshot, so a handler that writes
    /// into it (rather than into a new `Vec`) saves the page faults of a fresh allocation of
    /// the state's size. Default: [`save`](Self::save), moved into `out`.
    fn save_into(&self, out: &mut Vec<u8>) -> bool {
        match self.save() {
            Some(state) => {
                *out = state;
                true
            }
            None => false,
        }
    }

    /// Replaces the handler's state with bytes [`save`](Self::save) returned.
    ///
    /// # Errors
    /// A text naming what is wrong with `state`; the default refuses (nothing to restore
    /// into).
    fn restore(&mut self, _state: &[u8]) -> Result<(), String> {
        Err("this handler cannot restore saved state (RequestHandler::restore)".into())
    }

    /// Elastic servers: the rows of the keys in `range` as bytes, for their new owner's
    /// [`import_range`](Self::import_range), as the range leaves this server (it is not asked
    /// for them again unless the range comes back, with an import).
    ///
    /// # Errors
    /// A text naming why the rows cannot move; the new owner then answers every request for
    /// the range with it. The default refuses.
    fn export_range(&mut self, _range: Range) -> Result<Vec<u8>, String> {
        Err(
            "this handler cannot move its rows to another server (RequestHandler::export_range)"
                .into(),
        )
    }

    /// Elastic servers: stores rows of `range` that [`export_range`](Self::export_range)
    /// wrote on their old owner, replacing what it holds of those keys.
    ///
    /// # Errors
    /// A text naming what is wrong with `rows`; the server then answers every request for the
    /// range with it. The default refuses.
    fn import_range(&mut self, _range: Range, _rows: &[u8]) -> Result<(), String> {
        Err(
            "this handler cannot take rows from another server (RequestHandler::import_range)"
                .into(),
        )
    }
}

/// A [`RequestHandler`] whose stored values zero-copy (rendezvous) pulls are served from
/// (TensorFlow verbs' rendezvous; opt in with [`RequestHandler::values`]).
pub trait ServesValues<V: Value> {
    /// The current value of `key`, `None` if it has none yet (a rendezvous pull then waits for
    /// the first push of the key: tag matching).
    fn value(&self, key: Key) -> Option<&[V]>;

    /// The memory regions, `(address, bytes)`, that hold the values [`value`](Self::value)
    /// shows, so that a zero-copy pull is one RDMA WRITE from the value itself (the server
    /// registers each region once, for local reads only, on the first zero-copy pull, and
    /// deregisters it when the `KVServer` is dropped). The regions must stay allocated and in
    /// place while the handler lives, and the values in them may change only in
    /// [`RequestHandler::handle`] for pushes and application commands (`cmd` ≠ 0): the server
    /// holds those back while a write from the regions is in flight; a plain pull must not
    /// change them. Default: none (values are copied into a registered buffer first).
    fn value_regions(&self) -> Vec<(usize, usize)> {
        Vec::new()
    }
}

/// The server side of application `app_id` for values of type `V`. Requests are handled on
/// its own thread; dropping it stops serving.
pub struct KVServer<V: Value> {
    _customer: Customer,
    _v: PhantomData<V>,
}

impl<V: Value> KVServer<V> {
    /// Serves application `app_id`'s requests carrying `V` values with `handler`, and
    /// rendezvous (zero-copy) pulls of the values the handler shows.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] if this process already serves (`app_id`, `V`).
    pub fn new(
        po: &Arc<Postoffice>,
        app_id: i32,
        handler: impl RequestHandler<V>,
    ) -> Result<KVServer<V>> {
        let mut handler = handler;
        let durable = durable::Durable::open::<V>(po, app_id, &mut handler)?;
        let cache = po.config().kv.key_cache_keys;
        let (holding, pending) = moving::start_holding(po, durable.is_some());
        let mut served = Served {
            durable,
            handler: ManuallyDrop::new(handler),
            rv: ServerRv::new(po, V::DTYPE),
            lists: KeptLists::new(cache, cache.saturating_mul(po.num_workers().max(1))),
            timeout: po.config().timing.timeout,
            holding,
            pieces: moving::Pieces::default(),
            kept: Vec::new(),
            opened: false,
            app_id,
            po: po.clone(),
        };
        // Created while rows move: export or await them as if it had adopted the layout.
        if let Some(wire) = pending {
            served.on_layout::<V>(&wire);
        }
        served.opened = true;
        let customer = Customer::new(
            po,
            Route::Server {
                app_id,
                dtype: V::DTYPE,
            },
            move |ev: CustomerEvent| served.on_event(ev),
        )?;
        Ok(KVServer {
            _customer: customer,
            _v: PhantomData,
        })
    }
}

/// What a `KVServer`'s customer thread owns: the handler, the rendezvous state that may still
/// be writing from the handler's memory, and the key lists kept for the workers. Dropping it
/// waits for those writes (at most `PS_TIMEOUT`); if some never complete, the handler is leaked
/// rather than freeing memory a NIC may still read.
struct Served<H> {
    handler: ManuallyDrop<H>,
    /// The checkpoint (`PS_CHECKPOINT_DIR`), `None` when off.
    durable: Option<durable::Durable>,
    rv: ServerRv,
    lists: KeptLists,
    timeout: Duration,
    /// Which keys it serves as the key layout changes (elastic servers).
    holding: crate::postoffice::ranges::holding::Holding,
    /// Rows handed over in pieces, until whole.
    pieces: moving::Pieces,
    /// Handoffs sent whose layout has not settled (with a checkpoint).
    kept: Vec<moving::Kept>,
    /// Its customer's route is open (false while `KVServer::new` creates it).
    opened: bool,
    app_id: i32,
    po: Arc<Postoffice>,
}

impl<H> Served<H> {
    /// One event for this server: a rendezvous control message goes to the responder, a
    /// key-value request to the handler.
    fn on_event<V: Value>(&mut self, ev: CustomerEvent)
    where
        H: RequestHandler<V>,
    {
        self.catch_up::<V>();
        if let Some(msg) = self.key_value(ev) {
            self.on_request(msg);
        }
    }

    /// The key-value request `ev` brings; `None` when it brings something else, which this
    /// hands where it goes (a rendezvous control message to the responder, what a worker saw
    /// answered to the checkpoint) or drops.
    fn key_value<V: Value>(&mut self, ev: CustomerEvent) -> Option<Message>
    where
        H: RequestHandler<V>,
    {
        match carrier::arrival(ev)? {
            Arrival::KeyValue(msg) if is_handoff(&msg) => self.on_handoff(msg),
            Arrival::KeyValue(msg) => return Some(msg),
            Arrival::Layout(layout) => self.on_layout(&layout),
            Arrival::Control { meta, msg } => match moving::not_served(&self.holding, &msg) {
                Some(why) => self.rv.refuse(&self.po, &*self.handler, &meta, (msg, why)),
                None => self.rv.serve(&self.po, &*self.handler, &meta, msg),
            },
            Arrival::Written(_) => {
                tracing::warn!("a key-value server got a remote write; dropped");
            }
            // The postoffice refuses what would go to the peer; nothing waits here.
            Arrival::PeerLost { .. } => {}
            // A replaced worker's requests come from its replacement; a replaced server gets
            // again the rows handed to it during a move.
            Arrival::PeerReplaced { peer, .. } => self.on_peer_replaced(peer),
            Arrival::Content { from, .. } => {
                tracing::warn!(
                    "a key-value server got rendezvous content from {}; dropped",
                    Node::describe(from)
                );
            }
            Arrival::Answered { from, answered } => {
                if let Some(d) = &mut self.durable {
                    d.check_answered(&self.po, from, &answered);
                }
            }
        }
        None
    }

    /// Whether key-value request `msg` may be applied: `Err` with the text to refuse it with
    /// when the checkpoint refuses to serve, or when it may change values (a push, an
    /// application command) and the zero-copy writes of stored values still in flight did not
    /// complete within `PS_TIMEOUT`.
    fn gate(&self, msg: &Message) -> Result<(), String> {
        let may_change = msg.meta.may_change_state();
        let refusal = self.durable.as_ref().and_then(|d| d.refusal());
        if let Some(why) = refusal {
            Err(why.to_string())
        } else if may_change && !self.rv.in_flight.wait_idle(self.timeout) {
            Err(format!(
                "zero-copy pulls of this server's values were still being written after {:.0} s (PS_TIMEOUT); the request was not applied",
                self.timeout.as_secs_f64()
            ))
        } else {
            Ok(())
        }
    }

    /// Serves key-value request `msg` (unless [`gate`](Self::gate) refuses it), then wakes the
    /// rendezvous pulls that waited for the keys it pushed, and snapshots the checkpoint when
    /// one is due.
    fn on_request<V: Value>(&mut self, msg: Message)
    where
        H: RequestHandler<V>,
    {
        // A push, or an application command (which may change values), waits for the
        // zero-copy writes of stored values still in flight.
        let req = Incoming {
            gate: self.gate(&msg),
            msg,
            parked: self.rv.has_parked(),
        };
        let server = Handling {
            handler: &mut *self.handler,
            lists: &mut self.lists,
            durable: self.durable.as_mut(),
            holding: &self.holding,
        };
        if let Some((m, keys)) = serve_request(&self.po, server, req) {
            // Rendezvous pulls that waited for these keys (tag matching).
            self.rv.pushed(&self.po, &m, &*self.handler, keys);
        }
        if let Some(d) = &mut self.durable {
            d.maybe_snapshot(&*self.handler);
        }
    }
}

impl<H> Drop for Served<H> {
    fn drop(&mut self) {
        if self.rv.in_flight.wait_idle(self.timeout) {
            self.rv.deregister(&self.po);
            // SAFETY: dropped once, here; nothing reads it afterwards.
            unsafe { ManuallyDrop::drop(&mut self.handler) }
        } else {
            tracing::warn!(
                "zero-copy writes from a key-value server's values did not complete within {:.0} s: its memory is kept",
                self.timeout.as_secs_f64()
            );
        }
    }
}
