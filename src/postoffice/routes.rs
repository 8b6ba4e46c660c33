//! The route table: which customer thread gets the data messages of each [`Route`], and the
//! requests parked while their route does not exist yet (ps-lite's `Customer` registry and its
//! 5-second wait for a server's app). Expired requests are handed back to be refused (one
//! answer per sender's customer, application and value type), and so
//! is a request that would pass the parked bytes' cap (every worker's
//! `PS_MAX_INFLIGHT_BYTES`, [`crate::config::Bounds::parked_bytes`]).

use super::customer::Route;
use super::CustomerEvent;
use crate::auth::limit::RateLimited;
use crate::config::bounds::REQUEST_OVERHEAD_BYTES;
use crate::error::{Error, Result};
use crate::wire::{DType, Message, Node, NodeId};
use crossbeam_channel::Sender;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a request for an application not (yet) served here is kept before it is refused:
/// a server's `KVServer` may register a moment after the start-up barrier (ps-lite waits 5 s).
pub const PARK: Duration = Duration::from_secs(5);

/// Open routes and parked requests.
pub struct Routes {
    open: HashMap<Route, Sender<CustomerEvent>>,
    /// In arrival order, so the oldest are in front: expiring looks at those that expire and
    /// one more, however many wait.
    parked: VecDeque<(Instant, Route, Message)>,
    /// Parked requests [`expire`](Self::expire) looked at, since the start.
    looked_at: u64,
    /// What the parked requests count ([`parked_cost`]), and the most they may.
    parked_bytes: u64,
    cap: u64,
    /// Warnings about requests refused for the cap, per sender.
    warned: RateLimited,
    /// Warnings about answers for no route, per sender (a runaway member's refused requests
    /// come back as many answers).
    unrouted: RateLimited,
}

/// What a parked request counts against the cap: its payload and
/// [`REQUEST_OVERHEAD_BYTES`], as in a worker's in-flight bytes.
pub fn parked_cost(msg: &Message) -> u64 {
    msg.data_bytes() as u64 + REQUEST_OVERHEAD_BYTES
}

/// A request refused because the parked ones reached the cap: the text of its refusal.
pub struct OverCap {
    /// The request.
    pub msg: Message,
    /// How many requests are parked, what they count, and the cap, in words.
    pub why: String,
    /// `Some(n)` when the server should warn now (`n` refusals from the same sender since
    /// its last warning), `None` to stay quiet: rate-limited per sender.
    pub warn: Option<u64>,
}

/// The most timestamps one refusal names besides its own request: 5 bytes each at most in the
/// header, so that a refusal stays far below `MAX_META_BYTES` (a longer run is refused in
/// several answers).
pub const MAX_ALSO: usize = 65_536;

/// Parked requests that waited [`PARK`] in vain, of one sender's customer for one
/// application and value type, and the value types that application is served with here (for
/// the refusal's text): refused in one answer ([`Meta::also_refused`](crate::wire::Meta)).
pub struct Expired {
    /// The first request.
    pub msg: Message,
    /// The timestamps of the others, in arrival order.
    pub also: Vec<i32>,
    /// Value types served here for its application (`"f32"`, …), possibly none.
    pub served: Vec<String>,
}

impl Routes {
    /// No route open, nothing parked; requests are parked while they count at most `cap`
    /// bytes ([`parked_cost`]).
    pub fn new(cap: u64) -> Routes {
        Routes {
            open: HashMap::new(),
            parked: VecDeque::new(),
            looked_at: 0,
            parked_bytes: 0,
            cap,
            warned: RateLimited::default(),
            unrouted: RateLimited::default(),
        }
    }

    /// Opens `route`, handing it what was parked for it, in arrival order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the route is already open.
    pub fn open(&mut self, route: Route, tx: Sender<CustomerEvent>) -> Result<()> {
        if self.open.contains_key(&route) {
            return Err(Error::InvalidArgument(format!(
                "{route:?} is already registered in this process"
            )));
        }
        let parked = std::mem::take(&mut self.parked);
        for (at, r, msg) in parked {
            if r == route {
                self.parked_bytes -= parked_cost(&msg);
                let _ = tx.send(CustomerEvent::Message(msg));
            } else {
                self.parked.push_back((at, r, msg));
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
    pub fn get(&self, route: &Route) -> Option<Sender<CustomerEvent>> {
        self.open.get(route).cloned()
    }

    /// How many server routes are open (key-value servers of this process).
    pub fn servers(&self) -> usize {
        self.open
            .keys()
            .filter(|r| matches!(r, Route::Server { .. }))
            .count()
    }

    /// Sends an event made by `event` to every open route (a peer is gone, a key layout).
    pub fn broadcast(&self, event: impl Fn() -> CustomerEvent) {
        for tx in self.open.values() {
            let _ = tx.send(event());
        }
    }

    /// Hands a data message to its route: requests by (app, value type), answers by (app,
    /// customer). A request for a route not open yet is parked at `now`, or handed back when
    /// parking it would pass the cap; an answer for an unknown route is dropped.
    pub fn deliver(&mut self, msg: Message, now: Instant) -> Option<OverCap> {
        let m = &msg.meta;
        let route = if m.request {
            Route::Server {
                app_id: m.tag.app_id,
                dtype: m.kv.dtype,
            }
        } else {
            Route::Worker {
                app_id: m.tag.app_id,
                customer_id: m.tag.customer_id,
            }
        };
        match self.open.get(&route) {
            Some(tx) => {
                if tx.send(CustomerEvent::Message(msg)).is_err() {
                    tracing::debug!("customer of {route:?} has gone; message dropped");
                }
            }
            None if m.request => {
                let cost = parked_cost(&msg);
                if self.parked_bytes + cost > self.cap {
                    let why = format!(
                        "{} requests for applications not served here yet already wait, {} \
                         bytes with this one, more than the {} bytes parked at most \
                         (PS_MAX_INFLIGHT_BYTES × DMLC_NUM_WORKER)",
                        self.parked.len(),
                        self.parked_bytes + cost,
                        self.cap
                    );
                    let warn = self.warned.admit(&Node::describe(m.sender), now);
                    return Some(OverCap { msg, why, warn });
                }
                self.parked_bytes += cost;
                self.parked.push_back((now, route, msg));
            }
            None => {
                let from = Node::describe(m.sender);
                if let Some(n) = self.unrouted.admit(&from, now) {
                    tracing::warn!(
                        "dropped an answer from {from} for unknown {route:?}{}",
                        crate::auth::limit::more(n)
                    );
                }
            }
        }
        None
    }

    /// Whether any request is parked.
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Takes the parked requests older than `park` ([`PARK`], or longer on a replacement
    /// server still restoring) at `now`, looking at those and the next one only (requests
    /// are parked in arrival order: a server called for every message whatever is parked).
    /// (Arrival times are taken under the routes' lock, so they are in order.)
    pub fn expire(&mut self, now: Instant, park: Duration) -> Vec<Expired> {
        let mut old = Vec::new();
        while let Some((at, _, _)) = self.parked.front() {
            self.looked_at += 1;
            if now.saturating_duration_since(*at) < park {
                break;
            }
            if let Some((_, _, msg)) = self.parked.pop_front() {
                self.parked_bytes -= parked_cost(&msg);
                old.push(msg);
            }
        }
        // One refusal per sender's customer, application, value type and kind (a zero-copy
        // pull is not answered): a flood of requests costs a flood of answers no more. A
        // control message (ANSWERED) stays alone.
        let mut groups: Vec<Expired> = Vec::new();
        let mut index: HashMap<(NodeId, i32, i32, DType, bool), usize> = HashMap::new();
        for msg in old {
            let m = &msg.meta;
            let key = (
                m.sender,
                m.tag.customer_id,
                m.tag.app_id,
                m.kv.dtype,
                m.rendezvous.is_some(),
            );
            let found = match m.control {
                None => index
                    .get(&key)
                    .copied()
                    .filter(|&i| groups[i].also.len() < MAX_ALSO),
                Some(_) => None,
            };
            match found {
                Some(i) => groups[i].also.push(m.tag.timestamp),
                None => {
                    if m.control.is_none() {
                        index.insert(key, groups.len());
                    }
                    let served = self.served(m.tag.app_id);
                    groups.push(Expired {
                        msg,
                        also: Vec::new(),
                        served,
                    });
                }
            }
        }
        groups
    }

    /// The value types application `app` is served with here (`"f32"`, …).
    fn served(&self, app: i32) -> Vec<String> {
        self.open
            .keys()
            .filter_map(|k| match k {
                Route::Server { app_id, dtype } if *app_id == app => Some(dtype.to_string()),
                _ => None,
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
            tag: crate::wire::RequestTag {
                app_id,
                ..Default::default()
            },
            kv: crate::wire::KvHeader {
                dtype,
                ..Default::default()
            },
            request: true,
            ..Meta::default()
        })
    }

    #[test]
    fn parked_requests_go_to_their_route_when_it_opens_or_expire() {
        let mut r = Routes::new(u64::MAX);
        let t0 = Instant::now();
        assert!(r.deliver(request(1, DType::F32), t0).is_none());
        assert!(r.deliver(request(2, DType::F64), t0).is_none());
        let (tx, rx) = crossbeam_channel::unbounded();
        let f32s = Route::Server {
            app_id: 1,
            dtype: DType::F32,
        };
        r.open(f32s, tx.clone()).expect("opens");
        assert!(r.open(f32s, tx).is_err(), "a route opens once");
        assert!(matches!(rx.try_recv(), Ok(CustomerEvent::Message(m)) if m.meta.tag.app_id == 1));
        assert!(r.expire(t0 + PARK / 2, PARK).is_empty());
        let (tx2, _rx2) = crossbeam_channel::unbounded();
        let app2_u8 = Route::Server {
            app_id: 2,
            dtype: DType::U8,
        };
        r.open(app2_u8, tx2).expect("opens");
        let expired = r.expire(t0 + PARK, PARK);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].msg.meta.tag.app_id, 2);
        assert_eq!(expired[0].served, vec!["u8".to_string()]);
    }

    #[test]
    fn expired_requests_are_refused_once_per_sender_customer_application_and_kind_a_control_alone()
    {
        let mut r = Routes::new(u64::MAX);
        let t0 = Instant::now();
        let mut ts = 0;
        let mut parked = Vec::new();
        let mut park = |sender, customer, app, dtype, rendezvous: bool, control: bool| {
            ts += 1;
            let mut msg = request(app, dtype);
            msg.meta.sender = sender;
            msg.meta.tag.customer_id = customer;
            msg.meta.tag.timestamp = ts;
            msg.meta.rendezvous = rendezvous.then_some(crate::wire::Rendezvous::Control);
            msg.meta.control =
                control.then(|| crate::wire::ControlMsg::Answered { highest: vec![] });
            parked.push(msg);
        };
        park(9, 0, 7, DType::F32, false, false); // 1
        park(11, 0, 7, DType::F32, false, false); // 2
        park(9, 0, 7, DType::F32, false, false); // 3
        park(9, 1, 7, DType::F32, false, false); // 4
        park(9, 0, 8, DType::F32, false, false); // 5
        park(9, 0, 7, DType::U8, false, false); // 6
        park(9, 0, 7, DType::F32, true, false); // 7
        park(9, 0, 7, DType::F32, false, false); // 8
        park(9, 0, 7, DType::F32, false, true); // 9, ANSWERED
        park(9, 0, 7, DType::F32, false, false); // 10
        for msg in parked {
            assert!(r.deliver(msg, t0).is_none());
        }
        let got: Vec<(i32, i32, Vec<i32>)> = r
            .expire(t0 + PARK, PARK)
            .into_iter()
            .map(|e| (e.msg.meta.sender, e.msg.meta.tag.timestamp, e.also))
            .collect();
        assert_eq!(
            got,
            vec![
                (9, 1, vec![3, 8, 10]),
                (11, 2, vec![]),
                (9, 4, vec![]),
                (9, 5, vec![]),
                (9, 6, vec![]),
                (9, 7, vec![]),
                (9, 9, vec![]),
            ]
        );
    }

    #[test]
    fn a_long_run_of_one_customers_expired_requests_is_refused_in_answers_of_bounded_size() {
        let mut r = Routes::new(u64::MAX);
        let t0 = Instant::now();
        let n = 2 * (MAX_ALSO + 1) + 5;
        for ts in 0..n {
            let mut msg = request(7, DType::F32);
            msg.meta.tag.timestamp = ts as i32;
            assert!(r.deliver(msg, t0).is_none());
        }
        let sizes: Vec<(i32, usize)> = r
            .expire(t0 + PARK, PARK)
            .iter()
            .map(|e| (e.msg.meta.tag.timestamp, e.also.len()))
            .collect();
        let second = MAX_ALSO as i32 + 1;
        assert_eq!(
            sizes,
            vec![(0, MAX_ALSO), (second, MAX_ALSO), (2 * second, 4)]
        );
        let mut meta = Meta {
            error: Some("e".repeat(200)),
            also_refused: (i32::MAX - MAX_ALSO as i32..i32::MAX).collect(),
            ..Meta::default()
        };
        let mut msg = Message::new(std::mem::take(&mut meta));
        let head = crate::wire::encode_meta(&mut msg).expect("encodes");
        assert!(
            head.len() < crate::wire::MAX_META_BYTES / 2,
            "{}",
            head.len()
        );
    }

    #[test]
    fn expiring_looks_at_the_expired_requests_and_one_more() {
        let mut r = Routes::new(u64::MAX);
        let t0 = Instant::now();
        for i in 0..100_000u64 {
            r.deliver(request(7, DType::F32), t0 + Duration::from_micros(i));
        }
        // A message arriving every moment: each look costs one parked request, not 100k.
        for i in 0..1000u64 {
            assert!(r.expire(t0 + Duration::from_millis(i), PARK).is_empty());
        }
        assert_eq!(r.looked_at, 1000);
        let expired = r.expire(t0 + PARK + Duration::from_micros(49_999), PARK);
        assert_eq!(expired.len(), 1, "one sender's customer: one refusal");
        assert_eq!(expired[0].also.len(), 49_999);
        assert_eq!(r.looked_at, 1000 + 50_001);
        assert_eq!(r.parked.len(), 50_000);
    }

    proptest::proptest! {
        /// Whatever arrives, opens and expires, the parked requests never count more than the
        /// cap, the count kept equals theirs, and a request is refused only when it would
        /// pass the cap.
        #[test]
        fn parked_bytes_stay_under_the_cap(
            cap in 0u64..20_000,
            steps in proptest::collection::vec((0u8..3, 0i32..3, 0usize..3000), 0..80),
        ) {
            let mut r = Routes::new(cap);
            let mut open = std::collections::HashSet::new();
            let t0 = Instant::now();
            for (i, (what, app, len)) in steps.into_iter().enumerate() {
                let now = t0 + Duration::from_millis(i as u64 * 500);
                match what {
                    0 => {
                        let mut msg = request(app, DType::U8);
                        msg.data = vec![bytes::Bytes::from(vec![0u8; len])];
                        let before = r.parked_bytes;
                        let cost = parked_cost(&msg);
                        let refused = r.deliver(msg, now);
                        let parks = !open.contains(&app);
                        proptest::prop_assert_eq!(refused.is_some(), parks && before + cost > cap);
                    }
                    1 => {
                        let (tx, _rx) = crossbeam_channel::unbounded();
                        let _ = r.open(Route::Server { app_id: app, dtype: DType::U8 }, tx);
                        open.insert(app);
                    }
                    _ => {
                        r.expire(now, PARK);
                    }
                }
                let counted: u64 = r.parked.iter().map(|(_, _, m)| parked_cost(m)).sum();
                proptest::prop_assert_eq!(r.parked_bytes, counted);
                proptest::prop_assert!(r.parked_bytes <= cap);
            }
        }
    }
}
