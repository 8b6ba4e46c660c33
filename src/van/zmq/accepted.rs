//! A cap on the connections a node's ROUTER accepts (issue 14, `PS_MAX_CONNECTIONS`): each
//! accepted TCP connection costs libzmq buffers until it closes, and a peer that only opens
//! connections (no credential needed to open one) could otherwise hold as many as the file
//! limit allows.
//!
//! libzmq has no such option, but its socket monitor reports each accepted connection and
//! each disconnection with the connection's file descriptor (ZMQ_EVENT_ACCEPTED,
//! ZMQ_EVENT_DISCONNECTED). A thread of the van (`ps-conns`) counts them ([`Accepted`], no
//! IO) and shuts down (`shutdown(2)`, not `close`: the descriptor stays libzmq's) a connection
//! accepted beyond the cap; libzmq then sees it end and closes it as if the peer had. Before
//! it does, the events queued after it are read for that connection's end, and the
//! descriptor is checked to be a TCP connection to this node's port, so that a descriptor
//! libzmq closed and the system reused meanwhile is left alone (libzmq reports a
//! disconnection before it closes the descriptor). Each refusal is warned about with the
//! peer's address, rate-limited.
//!
//! Connections that have not authenticated count as well: a flood of them keeps members'
//! *new* connections out (a replacement node's, a reconnection) until libzmq's handshake
//! interval (10 s) or the flood ends. The cap bounds memory; it does not keep a node
//! reachable under a flood.

use crate::auth::limit::{more, RateLimited};
use crate::error::{Error, Result};
use crate::sync::StoppableThread;
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The open accepted connections, by file descriptor, and the cap.
#[derive(Debug)]
pub struct Accepted {
    open: HashSet<i32>,
    max: usize,
}

impl Accepted {
    /// None open; at most `max` at a time.
    pub fn new(max: usize) -> Accepted {
        Accepted {
            open: HashSet::new(),
            max,
        }
    }

    /// A connection was accepted on `fd`: whether it may stay (false: it is over the cap and
    /// is not counted).
    pub fn accepted(&mut self, fd: i32) -> bool {
        if self.open.contains(&fd) {
            return true; // a stale entry (its end was missed): the descriptor is this one now
        }
        if self.open.len() >= self.max {
            return false;
        }
        self.open.insert(fd);
        true
    }

    /// The connection on `fd` ended (one refused, or never seen, changes nothing).
    pub fn closed(&mut self, fd: i32) {
        self.open.remove(&fd);
    }

    /// How many are open.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

/// The `ps-conns` thread; stops when dropped.
pub(super) struct ConnectionCap {
    _thread: StoppableThread,
}

impl ConnectionCap {
    /// Watches `router` (bound at `port`, in `ctx`) and keeps at most `max` of its accepted
    /// connections open.
    ///
    /// # Errors
    /// [`Error::Van`] when the monitor or the thread cannot be set up.
    pub(super) fn start(
        ctx: &zmq::Context,
        router: &zmq::Socket,
        port: u16,
        max: usize,
    ) -> Result<ConnectionCap> {
        let events = zmq::SocketEvent::ACCEPTED as i32 | zmq::SocketEvent::DISCONNECTED as i32;
        let pair = super::monitor(ctx, router, events, "the connection cap")?;
        let conns = Accepted::new(max);
        let thread =
            StoppableThread::spawn("ps-conns", move |stop| watch(&pair, port, conns, stop))
                .map_err(|e| Error::Van(format!("cannot start the connection cap: {e}")))?;
        Ok(ConnectionCap { _thread: thread })
    }
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
        // Everything queued, so that a connection's end is known before it is acted on.
        let mut events = Vec::new();
        while let Ok(frames) = pair.recv_multipart(zmq::DONTWAIT) {
            if let Some((ev, fd)) = frames.first().and_then(|h| super::monitor_event(h)) {
                events.push((ev, fd as i32));
            }
        }
        for (i, &(ev, fd)) in events.iter().enumerate() {
            match ev {
                zmq::SocketEvent::ACCEPTED if !conns.accepted(fd) => {
                    // Ended already (its descriptor may be another connection's by now).
                    let ended = events[i + 1..]
                        .iter()
                        .any(|&(e, f)| e == zmq::SocketEvent::DISCONNECTED && f == fd);
                    if !ended {
                        refuse(fd, port, conns.open(), &mut warned);
                    }
                }
                zmq::SocketEvent::DISCONNECTED => conns.closed(fd),
                _ => {}
            }
        }
    }
}

/// Shuts down the connection on `fd`, accepted beyond the cap of `open` connections, if it
/// is still a TCP connection to `port`; warns (rate-limited) naming the peer.
fn refuse(fd: i32, port: u16, open: usize, warned: &mut RateLimited) {
    // SAFETY: the stream is never dropped (ManuallyDrop), so the descriptor, which libzmq
    // owns, is not closed here; the calls below only query and shut it down, and fail
    // harmlessly on a descriptor that is no longer a socket.
    let conn = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
    let ours = conn.local_addr().is_ok_and(|a| a.port() == port);
    let Ok(peer) = conn.peer_addr() else { return };
    if !ours {
        return;
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let from = peer.ip().to_string();
    if let Some(n) = warned.admit(&from, Instant::now()) {
        tracing::warn!(
            "closed a connection from {peer}: this node already has {open} open, the most \
             PS_MAX_CONNECTIONS allows{}",
            more(n)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the order of accepts and closes, at most `max` are counted open, and a
        /// connection is refused only when `max` are.
        #[test]
        fn never_more_than_max_open(max in 1usize..8, events in prop::collection::vec((any::<bool>(), 0i32..12), 0..200)) {
            let mut a = Accepted::new(max);
            let mut model: HashSet<i32> = HashSet::new();
            for (accept, fd) in events {
                if accept {
                    if model.contains(&fd) { continue } // an open descriptor is not reused
                    let full = model.len() >= max;
                    prop_assert_eq!(a.accepted(fd), !full);
                    if !full { model.insert(fd); }
                } else {
                    a.closed(fd);
                    model.remove(&fd);
                }
                prop_assert!(a.open() <= max);
                prop_assert_eq!(a.open(), model.len());
            }
        }
    }
}
