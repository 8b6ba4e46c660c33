//! A customer: a thread that receives the data messages of one route (ps-lite's `Customer`).

use super::Postoffice;
use crate::error::Result;
use crate::van::VanEvent;
use crate::wire::DType;
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
        mut handle: impl FnMut(VanEvent) + Send + 'static,
    ) -> Result<Customer> {
        let (tx, rx) = crossbeam_channel::unbounded::<VanEvent>();
        po.register(route, tx)?;
        let thread = std::thread::Builder::new()
            .name(format!("customer-{route:?}"))
            .spawn(move || {
                for ev in rx {
                    handle(ev);
                }
            })
            .map_err(|e| crate::Error::Van(format!("cannot start a customer thread: {e}")))?;
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
