//! Caps on the connections a node's ROUTER accepts: each accepted TCP connection costs libzmq
//! buffers until it closes, and anyone who reaches the port can open one without a credential.
//!
//! - **In all** (`PS_MAX_CONNECTIONS`): connections open at a time.
//! - **Not authenticated yet** (`PS_MAX_UNAUTHENTICATED`): connections whose handshake has not
//!   succeeded, in all and, half of that, from one source address. Before it authenticates a
//!   connection can make the node hold one ZMQ frame of at most a piece
//!   ([`crate::wire::PIECE_BYTES`]), so these caps bound what strangers make a node hold to
//!   `PS_MAX_UNAUTHENTICATED` pieces.
//!
//! Over a cap, the connection closed is the *oldest one not authenticated* within the cap's
//! scope (that source's, or all): a member authenticates within a round trip of connecting, so
//! a stranger's flood, however fast it reopens, closes its own connections before a member's,
//! and a member's connection that authenticated is never closed for a stranger. A connection
//! that does not authenticate within 10 s is closed by libzmq (`ZMQ_HANDSHAKE_IVL`).
//!
//! libzmq has no such option, but its socket monitor (event version 2) reports each accepted
//! connection with its file descriptor and the peer's address, each successful handshake with
//! the peer's address, and each disconnection. A thread of the van (`ps-conns`) feeds them to
//! [`Accepted`] (no IO), and shuts down (`shutdown(2)`, not `close`: the descriptor stays
//! libzmq's) each connection it says to close; libzmq then sees it end and closes it as if the
//! peer had. The descriptor is first checked to be a TCP connection to this node's port from
//! that peer, so that a descriptor libzmq closed and the system reused meanwhile is left
//! alone. Each cut is warned about with the peer's address and the cap, rate-limited.

use crate::auth::limit::{more, RateLimited};
use crate::error::{Error, Result};
use crate::sync::StoppableThread;
use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::ManuallyDrop;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Peers whose handshake succeeded before their accept was seen, remembered at most.
const EARLY: usize = 1024;

/// Which cap closed a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// `PS_MAX_CONNECTIONS`, connections open in all.
    Connections,
    /// `PS_MAX_UNAUTHENTICATED`, connections not authenticated yet, in all.
    Unauthenticated,
    /// Half of `PS_MAX_UNAUTHENTICATED`, connections not authenticated yet from one address.
    FromOneAddress,
}

/// A connection to close: its descriptor, its peer, and the cap it was over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The connection's file descriptor.
    pub fd: i32,
    /// Its peer.
    pub peer: SocketAddr,
    /// The cap that closes it.
    pub cap: Cap,
}

#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    /// Arrival order.
    order: u64,
    proven: bool,
}

impl Conn {
    /// Whether it has not authenticated yet, and comes from `from` (any address: `None`).
    fn pending_from(&self, from: Option<IpAddr>) -> bool {
        !self.proven && from.is_none_or(|ip| self.peer.ip() == ip)
    }
}

/// The open accepted connections, by file descriptor, and the caps.
#[derive(Debug)]
pub struct Accepted {
    open: HashMap<i32, Conn>,
    max: usize,
    max_pending: usize,
    max_pending_from_one: usize,
    next: u64,
    early: VecDeque<SocketAddr>,
}

impl Accepted {
    /// None open; at most `max` at a time, of which at most `max_pending` not authenticated,
    /// and half of `max_pending` (at least one) from one address.
    pub fn new(max: usize, max_pending: usize) -> Accepted {
        Accepted {
            open: HashMap::new(),
            max,
            max_pending,
            max_pending_from_one: max_pending.div_ceil(2).max(1),
            next: 0,
            early: VecDeque::new(),
        }
    }

    /// A connection from `peer` was accepted on `fd`: the connections to close now (this one
    /// among them only when it is the oldest one not authenticated in a full cap's scope).
    /// Those returned are counted closed already.
    pub fn accepted(&mut self, fd: i32, peer: SocketAddr) -> Vec<Cut> {
        // A stale entry (its end was missed) is replaced: the descriptor is this one now.
        let proven = match self.early.iter().position(|p| *p == peer) {
            Some(i) => {
                self.early.remove(i);
                true
            }
            None => false,
        };
        self.open.insert(
            fd,
            Conn {
                peer,
                order: self.next,
                proven,
            },
        );
        self.next += 1;
        let mut cuts = Vec::new();
        let from = peer.ip();
        while self.pending(Some(from)) > self.max_pending_from_one {
            cuts.extend(self.cut_oldest(Some(from), Cap::FromOneAddress));
        }
        while self.pending(None) > self.max_pending {
            cuts.extend(self.cut_oldest(None, Cap::Unauthenticated));
        }
        while self.open.len() > self.max {
            match self.cut_oldest(None, Cap::Connections) {
                Some(c) => cuts.push(c),
                None => break, // every one authenticated: none is closed for another
            }
        }
        cuts
    }

    /// The handshake of the connection from `peer` succeeded: it is never closed for another.
    pub fn proven(&mut self, peer: SocketAddr) {
        match self.open.values_mut().find(|c| c.peer == peer) {
            Some(c) => c.proven = true,
            None => {
                if self.early.len() >= EARLY {
                    self.early.pop_front();
                }
                self.early.push_back(peer);
            }
        }
    }

    /// The connection on `fd` ended (one cut, or never seen, changes nothing).
    pub fn closed(&mut self, fd: i32) {
        self.open.remove(&fd);
    }

    /// How many are open.
    pub fn open(&self) -> usize {
        self.open.len()
    }

    /// How many are open and not authenticated, from `from` or from anywhere.
    pub fn pending(&self, from: Option<IpAddr>) -> usize {
        self.open.values().filter(|c| c.pending_from(from)).count()
    }

    fn cut_oldest(&mut self, from: Option<IpAddr>, cap: Cap) -> Option<Cut> {
        let (&fd, _) = self
            .open
            .iter()
            .filter(|(_, c)| c.pending_from(from))
            .min_by_key(|(_, c)| c.order)?;
        let c = self.open.remove(&fd)?;
        Some(Cut {
            fd,
            peer: c.peer,
            cap,
        })
    }
}

/// The `ps-conns` thread; stops when dropped.
pub(super) struct ConnectionCap {
    _thread: StoppableThread,
}

impl ConnectionCap {
    /// Watches `router` (bound at `port`, in `ctx`) and keeps its accepted connections within
    /// `max` open, `max_pending` of them not authenticated.
    ///
    /// # Errors
    /// [`Error::Van`] when the monitor or the thread cannot be set up.
    pub(super) fn start(
        ctx: &zmq::Context,
        router: &mut zmq::Socket,
        port: u16,
        max: usize,
        max_pending: usize,
    ) -> Result<ConnectionCap> {
        let events = zmq::SocketEvent::ACCEPTED as i32
            | zmq::SocketEvent::DISCONNECTED as i32
            | zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32;
        let pair = super::monitors::monitor_v2(ctx, router, events, "the connection cap")?;
        let conns = Accepted::new(max, max_pending);
        let thread =
            StoppableThread::spawn("ps-conns", move |stop| watch(&pair, port, conns, stop))
                .map_err(|e| Error::Van(format!("cannot start the connection cap: {e}")))?;
        Ok(ConnectionCap { _thread: thread })
    }
}

/// One monitor event of version 2: kind, first value (a descriptor for accepts and
/// disconnections), and the peer's address.
fn event_v2(frames: &[Vec<u8>]) -> Option<(zmq::SocketEvent, u64, SocketAddr)> {
    let word = |f: &Vec<u8>| Some(u64::from_le_bytes(f.get(..8)?.try_into().ok()?));
    let event = zmq::SocketEvent::from_raw(u16::try_from(word(frames.first()?)?).ok()?);
    let n = usize::try_from(word(frames.get(1)?)?).ok()?;
    let value = if n > 0 { word(frames.get(2)?)? } else { 0 };
    let remote = std::str::from_utf8(frames.get(3 + n)?).ok()?;
    let peer = remote.strip_prefix("tcp://")?.parse().ok()?;
    Some((event, value, peer))
}

/// Applies the monitor's events from `pair` to `conns` until `stop` or the context ends
/// (the van stops the monitor before it stops this thread: libzmq must never be left sending
/// events nobody reads).
fn watch(pair: &zmq::Socket, port: u16, mut conns: Accepted, stop: &AtomicBool) {
    let mut warned = RateLimited::default();
    while !stop.load(Ordering::Acquire) {
        match pair.poll(zmq::POLLIN, 100) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(zmq::Error::ETERM) => return,
            Err(e) => {
                if e != zmq::Error::EINTR {
                    tracing::debug!("connection cap: {e}; trying again");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                continue;
            }
        }
        // Everything queued: a handshake that succeeded by now counts before any accept.
        let mut events = Vec::new();
        while let Ok(frames) = pair.recv_multipart(zmq::DONTWAIT) {
            events.extend(event_v2(&frames));
        }
        for &(ev, _, peer) in &events {
            if ev == zmq::SocketEvent::HANDSHAKE_SUCCEEDED {
                conns.proven(peer);
            }
        }
        let mut cuts = HashSet::new();
        for &(ev, fd, peer) in &events {
            let fd = fd as i32;
            match ev {
                zmq::SocketEvent::ACCEPTED => {
                    for c in conns.accepted(fd, peer) {
                        if cuts.insert(c.fd) {
                            cut(c, port, &conns, &mut warned);
                        }
                    }
                }
                zmq::SocketEvent::DISCONNECTED => conns.closed(fd),
                _ => {}
            }
        }
    }
}

/// Shuts down the connection of `c`, if its descriptor is still a TCP connection from its
/// peer to `port`; warns (rate-limited per address) naming the peer and the cap.
fn cut(c: Cut, port: u16, conns: &Accepted, warned: &mut RateLimited) {
    // SAFETY: the stream is never dropped (ManuallyDrop), so the descriptor, which libzmq
    // owns, is not closed here; the calls below only query and shut it down, and fail
    // harmlessly on a descriptor that is no longer a socket.
    let conn = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(c.fd) });
    let ours = conn.local_addr().is_ok_and(|a| a.port() == port);
    if !ours || conn.peer_addr().ok() != Some(c.peer) {
        return;
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let why = match c.cap {
        Cap::Connections => format!(
            "this node has {} connections open, the most PS_MAX_CONNECTIONS allows, and this \
             is the oldest that has not authenticated",
            conns.open() + 1
        ),
        Cap::Unauthenticated => format!(
            "{} connections have not authenticated, the most PS_MAX_UNAUTHENTICATED allows, \
             and this is the oldest",
            conns.pending(None) + 1
        ),
        Cap::FromOneAddress => format!(
            "{} connections from {} have not authenticated, the most one address may have \
             (half of PS_MAX_UNAUTHENTICATED), and this is the oldest",
            conns.pending(Some(c.peer.ip())) + 1,
            c.peer.ip()
        ),
    };
    if let Some(n) = warned.admit(&c.peer.ip().to_string(), Instant::now()) {
        tracing::warn!("closed a connection from {}: {why}{}", c.peer, more(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn peer(host: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([198, 18, 0, host], port))
    }

    #[derive(Clone, Debug)]
    enum Ev {
        Accept(u8),
        Prove(usize),
        Close(usize),
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            (0u8..3).prop_map(Ev::Accept),
            any::<usize>().prop_map(Ev::Prove),
            any::<usize>().prop_map(Ev::Close),
        ]
    }

    proptest! {
        /// Whatever the order of accepts, handshakes and closes: the caps hold after every
        /// event (`PS_MAX_CONNECTIONS` unless every open connection authenticated), no
        /// authenticated connection is ever cut, and each cut is the oldest unauthenticated
        /// one of its cap's scope.
        #[test]
        fn the_caps_hold_and_only_the_oldest_unauthenticated_are_cut(
            max in 1usize..10, pending in 1usize..8, events in prop::collection::vec(ev(), 0..200)
        ) {
            let mut a = Accepted::new(max, pending);
            // fd → (peer, proven, order) as the model sees them.
            let mut model: Vec<(i32, SocketAddr, bool, u64)> = Vec::new();
            let mut fd = 0;
            let mut order = 0u64;
            for e in events {
                match e {
                    Ev::Accept(host) => {
                        fd += 1;
                        let p = peer(host, fd as u16);
                        model.push((fd, p, false, order));
                        order += 1;
                        for c in a.accepted(fd, p) {
                            let i = model.iter().position(|m| m.0 == c.fd).expect("an open one");
                            let (_, cp, proven, o) = model.remove(i);
                            prop_assert!(!proven, "an authenticated connection was cut");
                            prop_assert_eq!(cp, c.peer);
                            let scope = |m: &&(i32, SocketAddr, bool, u64)| {
                                !m.2 && (c.cap != Cap::FromOneAddress || m.1.ip() == cp.ip())
                            };
                            prop_assert!(model.iter().filter(scope).all(|m| m.3 > o), "not the oldest");
                        }
                    }
                    Ev::Prove(i) if !model.is_empty() => {
                        let i = i % model.len();
                        model[i].2 = true;
                        a.proven(model[i].1);
                    }
                    Ev::Close(i) if !model.is_empty() => {
                        let (f, ..) = model.remove(i % model.len());
                        a.closed(f);
                    }
                    _ => {}
                }
                let unproven = model.iter().filter(|m| !m.2).count();
                prop_assert_eq!(a.open(), model.len());
                prop_assert_eq!(a.pending(None), unproven);
                prop_assert!(unproven <= pending);
                prop_assert!(model.len() <= max || unproven == 0);
                for host in 0..3 {
                    let ip = peer(host, 0).ip();
                    prop_assert!(a.pending(Some(ip)) <= pending.div_ceil(2));
                }
            }
        }
    }

    #[test]
    fn a_flood_from_one_address_cuts_its_own_connections_not_a_members() {
        let mut a = Accepted::new(100, 8);
        // A member's connection from .1, not authenticated yet, then 50 from a stranger at .2.
        assert!(a.accepted(1, peer(1, 1000)).is_empty());
        let mut cut = Vec::new();
        for fd in 2..52 {
            cut.extend(a.accepted(fd, peer(2, fd as u16)));
        }
        assert_eq!(cut.len(), 46);
        assert!(cut
            .iter()
            .all(|c| c.peer.ip() == peer(2, 0).ip() && c.cap == Cap::FromOneAddress));
        assert_eq!(a.pending(Some(peer(1, 0).ip())), 1);
        // A handshake reported before its accept still counts.
        a.proven(peer(3, 7));
        assert!(a.accepted(60, peer(3, 7)).is_empty());
        assert_eq!(a.pending(Some(peer(3, 0).ip())), 0);
    }

    #[test]
    fn monitor_events_of_version_2_are_read() {
        let frames = vec![
            (zmq::SocketEvent::ACCEPTED as u64).to_le_bytes().to_vec(),
            1u64.to_le_bytes().to_vec(),
            17u64.to_le_bytes().to_vec(),
            b"tcp://127.0.0.1:5000".to_vec(),
            b"tcp://[::1]:41234".to_vec(),
        ];
        let (ev, fd, p) = event_v2(&frames).expect("event");
        assert_eq!((ev, fd), (zmq::SocketEvent::ACCEPTED, 17));
        assert_eq!(p, "[::1]:41234".parse::<SocketAddr>().expect("addr"));
        assert_eq!(event_v2(&frames[..4]), None);
    }
}
