//! A customer: a thread that receives the data messages of one route (ps-lite's `Customer`).

use super::Postoffice;
use crate::error::{Error, Result};
use crate::van::RemoteWrite;
use crate::wire::{DType, Message, NodeId};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where the postoffice delivers a data message (or a remote write, by its immediate slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// Requests of application `app_id` whose values are of `dtype` (a `KVServer<V>`).
    Server {
        /// Application id.
        app_id: i32,
        /// Element type it serves.
        dtype: DType,
    },
    /// Answers to customer `customer_id` of application `app_id` (a `KVWorker<V>`).
    Worker {
        /// Application id.
        app_id: i32,
        /// Customer id.
        customer_id: i32,
    },
}

/// What the postoffice hands a customer.
// A message is most events; each is moved once through a channel, never stored in bulk, so
// boxing it would cost more than the unused bytes of the rarer events.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum CustomerEvent {
    /// A data message of its route (a request to a `KVServer`, an answer to a `KVWorker`).
    Message(Message),
    /// A peer's RDMA WRITE WITH IMMEDIATE landed, for the slot the customer holds.
    RemoteWrite(RemoteWrite),
    /// A peer is gone, and the job cannot complete: what waits on it fails with `error`
    /// ([`Error::PeerLost`], or [`Error::DeclaredLost`] when `peer` is this node).
    PeerLost {
        /// The peer (this node's own id when the scheduler declared this node lost).
        peer: NodeId,
        /// The error naming it and why.
        error: Error,
    },
    /// A lost peer's id is now held by a replacement, which this node is connected to (a
    /// `KVWorker` sends a replaced server what it has not answered).
    PeerReplaced {
        /// The id the replacement took over.
        peer: NodeId,
        /// How many times the id was replaced: what this node sent on an older generation's
        /// path (the generation a send reports) went to a replaced node.
        incarnation: u32,
    },
    /// The servers' key layout changed (elastic servers, [`crate::postoffice::ranges`]): a
    /// key-value server hands the rows of its keys that moved to their new owner, and awaits
    /// those moved to it.
    Layout(Arc<crate::wire::KeyLayout>),
}

thread_local! {
    /// Set on a customer's thread ([`on_customer_thread`]).
    static ON_CUSTOMER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is a customer's (it runs a [`Customer`]'s handler): a call made
/// there must not block on what only that customer can give back (its answers).
pub(crate) fn on_customer_thread() -> bool {
    ON_CUSTOMER.with(|on| on.get())
}

/// Runs `handle` on its own thread for every event of its route (data messages, and the remote
/// writes whose immediate names the route's slot), in arrival order. Dropping it unregisters the
/// route and joins the thread.
pub struct Customer {
    po: Arc<Postoffice>,
    route: Route,
    thread: Option<JoinHandle<()>>,
}

impl Customer {
    /// Registers `route` and starts the thread.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] if the route is already taken in this process.
    pub fn new(
        po: &Arc<Postoffice>,
        route: Route,
        mut handle: impl FnMut(CustomerEvent) + Send + 'static,
    ) -> Result<Customer> {
        let (tx, rx) = crossbeam_channel::unbounded::<CustomerEvent>();
        po.register(route, tx)?;
        let thread = std::thread::Builder::new()
            .name(format!("customer-{route:?}"))
            .spawn(move || {
                ON_CUSTOMER.with(|on| on.set(true));
                for ev in rx {
                    handle(ev);
                }
            })
            .map_err(|e| Error::Van(format!("cannot start a customer thread: {e}")))?;
        Ok(Customer {
            po: po.clone(),
            route,
            thread: Some(thread),
        })
    }

    /// The postoffice it is registered with.
    pub fn postoffice(&self) -> &Arc<Postoffice> {
        &self.po
    }
}

impl Drop for Customer {
    fn drop(&mut self) {
        self.po.unregister(self.route);
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
