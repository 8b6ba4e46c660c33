//! The route table: which customer thread gets the data messages of each [`Route`], and the
//! requests parked while their route does not exist yet (ps-lite's `Customer` registry and its
//! 5-second wait for a server's app). Expired requests are handed back to be refused.

use super::customer::Route;
use crate::error::{Error, Result};
use crate::van::VanEvent;
use crate::wire::{Message, Node};
use crossbeam_channel::Sender;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a request for an application not (yet) served here is kept before it is refused:
/// a server's `KVServer` may register a moment after the start-up barrier (ps-lite waits 5 s).
pub const PARK: Duration = Duration::from_secs(5);

/// Open routes and parked requests.
#[derive(Default)]
pub struct Routes {
    open: HashMap<Route, Sender<VanEvent>>,
    parked: Vec<(Instant, Route, Message)>,
}

/// A parked request that waited [`PARK`] in vain, and the value types its application is served
/// with here (for the refusal's text).
pub struct Expired {
    /// The request.
    pub msg: Message,
    /// Value types served here for its application (`"f32"`, …), possibly none.
    pub served: Vec<String>,
}

impl Routes {
    /// Opens `route`, handing it what was parked for it, in arrival order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the route is already open.
    pub fn open(&mut self, route: Route, tx: Sender<VanEvent>) -> Result<()> {
        if self.open.contains_key(&route) {
            return Err(Error::InvalidArgument(format!(
                "{route:?} is already registered in this process"
            )));
        }
        let parked = std::mem::take(&mut self.parked);
        for (at, r, msg) in parked {
            if r == route {
                let _ = tx.send(VanEvent::Message(msg));
            } else {
                self.parked.push((at, r, msg));
            }
        }
        self.open.insert(route, tx);
        Ok(())
    }

    /// Closes `route`.
    pub fn close(&mut self, route: Route) {
        self.open.remove(&route);
    }

    /// The sender of an open route.
    pub fn get(&self, route: &Route) -> Option<Sender<VanEvent>> {
        self.open.get(route).cloned()
    }

    /// Sends an event made by `event` to every open route (a peer is gone).
    pub fn broadcast(&self, event: impl Fn() -> VanEvent) {
        for tx in self.open.values() {
            let _ = tx.send(event());
        }
    }

    /// Hands a data message to its route: requests by (app, value type), answers by (app,
    /// customer). A request for a route not open yet is parked at `now`; an answer for an
    /// unknown route is dropped.
    pub fn deliver(&mut self, msg: Message, now: Instant) {
        let m = &msg.meta;
        let route = if m.request {
            Route::Server {
                app_id: m.app_id,
                dtype: m.dtype,
            }
        } else {
            Route::Worker {
                app_id: m.app_id,
                customer_id: m.customer_id,
            }
        };
        match self.open.get(&route) {
            Some(tx) => {
                if tx.send(VanEvent::Message(msg)).is_err() {
                    tracing::debug!("customer of {route:?} has gone; message dropped");
                }
            }
            None if m.request => self.parked.push((now, route, msg)),
            None => tracing::warn!(
                "dropped an answer from {} for unknown {route:?}",
                Node::describe(m.sender)
            ),
        }
    }

    /// Whether any request is parked.
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Takes the parked requests older than `park` ([`PARK`], or longer on a replacement
    /// server still restoring) at `now`.
    pub fn expire(&mut self, now: Instant, park: Duration) -> Vec<Expired> {
        if self.parked.is_empty() {
            return Vec::new();
        }
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|(at, _, _)| now.duration_since(*at) >= park);
        self.parked = keep;
        old.into_iter()
            .map(|(_, _, msg)| {
                let served = self
                    .open
                    .keys()
                    .filter_map(|k| match k {
                        Route::Server { app_id, dtype } if *app_id == msg.meta.app_id => {
                            Some(dtype.to_string())
                        }
                        _ => None,
                    })
                    .collect();
                Expired { msg, served }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DType, Meta};

    fn request(app_id: i32, dtype: DType) -> Message {
        Message::new(Meta {
            app_id,
            dtype,
            request: true,
            ..Meta::default()
        })
    }

    #[test]
    fn parked_requests_go_to_their_route_when_it_opens_or_expire() {
        let mut r = Routes::default();
        let t0 = Instant::now();
        r.deliver(request(1, DType::F32), t0);
        r.deliver(request(2, DType::F64), t0);
        let (tx, rx) = crossbeam_channel::unbounded();
        let f32s = Route::Server {
            app_id: 1,
            dtype: DType::F32,
        };
        r.open(f32s, tx.clone()).expect("opens");
        assert!(r.open(f32s, tx).is_err(), "a route opens once");
        assert!(matches!(rx.try_recv(), Ok(VanEvent::Message(m)) if m.meta.app_id == 1));
        assert!(r.expire(t0 + PARK / 2, PARK).is_empty());
        let (tx2, _rx2) = crossbeam_channel::unbounded();
        let app2_u8 = Route::Server {
            app_id: 2,
            dtype: DType::U8,
        };
        r.open(app2_u8, tx2).expect("opens");
        let expired = r.expire(t0 + PARK, PARK);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].msg.meta.app_id, 2);
        assert_eq!(expired[0].served, vec!["u8".to_string()]);
    }
}
