//! The ZMQ van: one ROUTER socket receives from every peer, one DEALER socket per peer sends
//! (as ps-lite's `ZMQVan`). Frames are a bincode [`crate::wire::Meta`] and raw payload frames; large
//! payloads move without a user-space copy in either direction (`zmq_msg_init_data` over the
//! frame's `Bytes` on send, the received `zmq_msg_t` kept as the frame's storage on receive).

use super::{Van, VanEvent};
use crate::auth::limit::{more, RateLimited};
use crate::auth::zap::ZapHandler;
use crate::auth::{Identity, Token, ZAP_DOMAIN};
use crate::error::{Error, Result};
use crate::wire::{decode_frames, encode_meta, Message, Node, NodeId, SCHEDULER};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Pending messages are given this long to leave when the van stops.
const LINGER_MS: i32 = 2000;

/// A received ZMQ frame, kept as the storage of a [`Bytes`] (no copy).
struct ZmqFrame(zmq::Message);

impl AsRef<[u8]> for ZmqFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Called by libzmq's IO thread when it is done with a frame: drops the `Bytes` that kept it.
unsafe extern "C" fn free_bytes(_data: *mut std::ffi::c_void, hint: *mut std::ffi::c_void) {
    // SAFETY: `hint` is the `Box<Bytes>` leaked by `send_frame`, handed back exactly once.
    drop(unsafe { Box::from_raw(hint as *mut Bytes) });
}

/// Sends one frame without copying it: libzmq reads the `Bytes`' memory and releases it through
/// `free_bytes` when the frame has left.
fn send_frame(
    sock: &mut zmq::Socket,
    frame: Bytes,
    flags: i32,
) -> std::result::Result<(), zmq::Error> {
    let mut msg = std::mem::MaybeUninit::<zmq_sys::zmq_msg_t>::uninit();
    let len = frame.len();
    let data = frame.as_ptr() as *mut std::ffi::c_void;
    let hint = Box::into_raw(Box::new(frame));
    // SAFETY: `msg` is initialised by zmq_msg_init_data before use and closed on failure; the
    // data pointer stays valid while `hint` (which owns it) is alive; the socket pointer comes
    // from a live socket we hold exclusively.
    unsafe {
        if zmq_sys::zmq_msg_init_data(
            msg.as_mut_ptr(),
            data,
            len,
            Some(free_bytes),
            hint as *mut _,
        ) != 0
        {
            drop(Box::from_raw(hint));
            return Err(zmq::Error::from_raw(zmq_sys::zmq_errno()));
        }
        if zmq_sys::zmq_msg_send(msg.as_mut_ptr(), sock.as_mut_ptr(), flags) == -1 {
            let e = zmq::Error::from_raw(zmq_sys::zmq_errno());
            zmq_sys::zmq_msg_close(msg.as_mut_ptr());
            return Err(e);
        }
    }
    Ok(())
}

/// The ZMQ van.
pub struct ZmqVan {
    ctx: zmq::Context,
    receiver: Mutex<Option<zmq::Socket>>,
    /// Set first by `stop`: `recv` then returns [`Error::Stopped`] instead of polling again,
    /// so `stop` gets the receiver's lock, which a polling thread holds nearly all the time.
    stopping: std::sync::atomic::AtomicBool,
    senders: RwLock<HashMap<NodeId, Arc<Mutex<zmq::Socket>>>>,
    send_timeout: Duration,
    /// This node's id once known (-1 before): the identity its connections claim.
    me: AtomicI32,
    /// With a token: connections authenticate ([`crate::auth`]).
    token: Option<Token>,
    /// Connections opened before this node had an id (as `join`), to open again as
    /// `node:ID` once it has one: peer and address.
    as_joiner: Mutex<Vec<(NodeId, String, u16)>>,
    /// Handshake events of the connection to the scheduler made before this node had an id:
    /// a refusal there fails the start with the reason.
    monitor: Mutex<Option<zmq::Socket>>,
    /// Warnings about dropped messages, per address.
    refused: Mutex<RateLimited>,
    /// Answers libzmq's authentication requests; declared after the sockets, so dropped after
    /// them.
    _zap: Option<ZapHandler>,
}

fn endpoint(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("tcp://[{host}]:{port}")
    } else {
        format!("tcp://{host}:{port}")
    }
}

fn zerr(what: String) -> impl FnOnce(zmq::Error) -> Error {
    move |e| Error::Van(format!("{what}: {e}"))
}

impl ZmqVan {
    /// A van whose sends fail after `send_timeout` if the peer does not take the message. With
    /// `token`, every connection to and from it authenticates ([`crate::auth`]).
    ///
    /// # Errors
    /// [`Error::Van`] when the ZAP handler cannot start.
    pub fn new(send_timeout: Duration, token: Option<Token>) -> Result<ZmqVan> {
        let ctx = zmq::Context::new();
        let zap = match &token {
            Some(t) => Some(ZapHandler::start(&ctx, t.clone()).map_err(Error::Van)?),
            None => None,
        };
        Ok(ZmqVan {
            ctx,
            receiver: Mutex::new(None),
            stopping: std::sync::atomic::AtomicBool::new(false),
            senders: RwLock::new(HashMap::new()),
            send_timeout,
            me: AtomicI32::new(-1),
            token,
            as_joiner: Mutex::new(Vec::new()),
            monitor: Mutex::new(None),
            refused: Mutex::new(RateLimited::default()),
            _zap: zap,
        })
    }

    /// Has the connection `sock` to `peer` authenticate as this node (or as a joiner, before
    /// it has an id; the connection to the scheduler is then watched for a refusal).
    fn authenticate(&self, sock: &zmq::Socket, peer: NodeId, host: &str, port: u16) -> Result<()> {
        let me = self.me.load(Ordering::Acquire);
        let who = if me >= 0 {
            Identity::Node(me)
        } else {
            Identity::Joiner
        };
        if let Some(t) = &self.token {
            let (user, password) = t.credential(who);
            sock.set_plain_username(Some(&user))
                .and_then(|_| sock.set_plain_password(Some(&password)))
                .map_err(zerr("PLAIN credentials".into()))?;
            if who == Identity::Joiner {
                crate::sync::lock(&self.as_joiner).push((peer, host.to_string(), port));
            }
        }
        if who == Identity::Joiner && peer == SCHEDULER {
            self.watch(sock)?;
        }
        Ok(())
    }

    /// Watches the handshakes of `sock` (the connection to the scheduler before this node has
    /// an id) for a refusal, reported by [`recv`](Van::recv).
    fn watch(&self, sock: &zmq::Socket) -> Result<()> {
        // A name of its own for each watched socket (a socket's address can be reused).
        static WATCHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WATCHED.fetch_add(1, Ordering::Relaxed);
        let endpoint = format!("inproc://ps-monitor-{n}");
        // Not HANDSHAKE_FAILED_NO_DETAIL: a connection reset or a handshake timeout, which
        // libzmq retries; PS_TIMEOUT ends the start if it never succeeds.
        let events = zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32
            | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32;
        sock.monitor(&endpoint, events)
            .map_err(zerr("monitor".into()))?;
        let watcher = self
            .ctx
            .socket(zmq::PAIR)
            .map_err(zerr("monitor socket".into()))?;
        watcher
            .connect(&endpoint)
            .map_err(zerr(format!("cannot watch {endpoint}")))?;
        *crate::sync::lock(&self.monitor) = Some(watcher);
        Ok(())
    }

    /// Puts the monitor `w` that [`recv`](Van::recv) polled back in its slot, unless this node
    /// has its id by now (then nothing is watched any more) or a newer one took the slot.
    fn rewatch(&self, w: zmq::Socket) {
        let mut slot = crate::sync::lock(&self.monitor);
        // `set_node_id` stores the id before it empties the slot, under the same lock.
        if slot.is_none() && self.me.load(Ordering::Acquire) < 0 {
            *slot = Some(w);
        }
    }

    /// A handshake event of the watched connection: the refusal it means.
    fn refusal_event(watcher: &zmq::Socket) -> Option<Error> {
        let frames = watcher.recv_multipart(zmq::DONTWAIT).ok()?;
        let head = frames.first().filter(|f| f.len() >= 6)?;
        let event = u16::from_le_bytes([head[0], head[1]]);
        let value = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
        let at = frames
            .get(1)
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .unwrap_or_default();
        let why = match zmq::SocketEvent::from_raw(event) {
            zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => format!(
                "the scheduler at {at} refused this node's proof of PS_AUTH_TOKEN (ZAP status \
                 {value}): this node's token differs from the scheduler's"
            ),
            _ => format!(
                "the scheduler at {at} did not complete the handshake (ZMTP error {value:#x}): \
                 one of the two authenticates with PS_AUTH_TOKEN and the other does not; give \
                 every node the same PS_AUTH_TOKEN (or PS_AUTH=none to every node)"
            ),
        };
        Some(Error::Config(why))
    }

    /// Whether a received message may be acted on: its connection proved `who`, and its header
    /// claims no one else. Dropped ones are warned about (rate-limited, with the address).
    fn admitted(&self, who: Option<Identity>, address: &str, msg: &Message) -> bool {
        let Err(why) = crate::auth::admit(who, &msg.meta) else {
            return true;
        };
        // Per address and claimed identity: one kind of refusal does not hide another.
        let source = format!("{address} as {}", who.map_or("?".into(), |w| w.user_name()));
        let warn = crate::sync::lock(&self.refused).admit(&source, Instant::now());
        if let Some(n) = warn {
            tracing::warn!("dropped a message from {address}: {why}{}", more(n));
        }
        false
    }

    fn sender(&self, id: NodeId) -> Result<Arc<Mutex<zmq::Socket>>> {
        let senders = self.senders.read().map_err(|_| Error::Stopped)?;
        senders.get(&id).cloned().ok_or_else(|| {
            Error::Van(format!(
                "no connection to {}: it is not in the node table",
                Node::describe(id)
            ))
        })
    }
}

impl Van for ZmqVan {
    fn name(&self) -> &'static str {
        "zmq"
    }

    fn bind(&self, host: &str, port: u16) -> Result<u16> {
        let sock = self
            .ctx
            .socket(zmq::ROUTER)
            .map_err(zerr("cannot create a ROUTER socket".into()))?;
        sock.set_ipv6(host.contains(':'))
            .map_err(zerr("ipv6".into()))?;
        sock.set_linger(0).map_err(zerr("linger".into()))?;
        sock.set_rcvhwm(0).map_err(zerr("rcvhwm".into()))?;
        if self.token.is_some() {
            sock.set_plain_server(true)
                .and_then(|_| sock.set_zap_domain(ZAP_DOMAIN))
                .map_err(zerr("PLAIN server".into()))?;
        }
        let addr = endpoint(
            host,
            &if port == 0 {
                "*".to_string()
            } else {
                port.to_string()
            },
        );
        sock.bind(&addr)
            .map_err(zerr(format!("cannot bind {addr}")))?;
        let last = sock
            .get_last_endpoint()
            .map_err(zerr("last endpoint".into()))?
            .unwrap_or_default();
        let bound = last
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| {
                Error::Van(format!("cannot read the port bound at {addr} ({last:?})"))
            })?;
        *self.receiver.lock().map_err(|_| Error::Stopped)? = Some(sock);
        Ok(bound)
    }

    fn connect(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        let sock = self
            .ctx
            .socket(zmq::DEALER)
            .map_err(zerr("cannot create a DEALER socket".into()))?;
        sock.set_ipv6(host.contains(':'))
            .map_err(zerr("ipv6".into()))?;
        sock.set_linger(LINGER_MS).map_err(zerr("linger".into()))?;
        sock.set_sndhwm(0).map_err(zerr("sndhwm".into()))?;
        let ms = self.send_timeout.as_millis().min(i32::MAX as u128) as i32;
        sock.set_sndtimeo(ms).map_err(zerr("sndtimeo".into()))?;
        self.authenticate(&sock, id, host, port)?;
        let addr = endpoint(host, &port.to_string());
        sock.connect(&addr).map_err(zerr(format!(
            "cannot connect to {} at {addr}",
            Node::describe(id)
        )))?;
        self.senders
            .write()
            .map_err(|_| Error::Stopped)?
            .insert(id, Arc::new(Mutex::new(sock)));
        Ok(())
    }

    fn send(&self, mut msg: Message) -> Result<usize> {
        let recver = msg.meta.recver;
        let head = encode_meta(&mut msg)?;
        let sock = self.sender(recver)?;
        let mut sock = sock.lock().map_err(|_| Error::Stopped)?;
        let total = head.len() + msg.data_bytes();
        let last = msg.data.len();
        let flag = |i: usize| if i < last { zmq::SNDMORE } else { 0 };
        let fail = |e: zmq::Error| match e {
            zmq::Error::EAGAIN => Error::Van(format!(
                "{} did not take a message within {:.0} s (PS_TIMEOUT)",
                Node::describe(recver),
                self.send_timeout.as_secs_f64()
            )),
            e => Error::Van(format!("send to {} failed: {e}", Node::describe(recver))),
        };
        sock.send(zmq::Message::from(head), flag(0)).map_err(fail)?;
        for (i, frame) in msg.data.into_iter().enumerate() {
            send_frame(&mut sock, frame, flag(i + 1)).map_err(fail)?;
        }
        Ok(total)
    }

    fn recv(&self, timeout: Duration) -> Result<Option<VanEvent>> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        let guard = self.receiver.lock().map_err(|_| Error::Stopped)?;
        let sock = guard.as_ref().ok_or(Error::Stopped)?;
        let ms = timeout.as_millis().min(i64::MAX as u128) as i64;
        // The watched joining connection's monitor is taken out of its slot for the poll, not
        // polled under the slot's lock: a thread that waits for that lock (`watch`,
        // `set_node_id`) would otherwise starve while the RDMA van's bootstrap thread polls in a
        // loop (std's Mutex is not fair; a Soft-RoCE guest's start hung there).
        let watcher = crate::sync::lock(&self.monitor).take();
        if let Some(w) = watcher {
            let mut items = [sock.as_poll_item(zmq::POLLIN), w.as_poll_item(zmq::POLLIN)];
            zmq::poll(&mut items, ms).map_err(zerr("poll".into()))?;
            let (refusal, readable) = (items[1].is_readable(), items[0].is_readable());
            let refused = if refusal {
                ZmqVan::refusal_event(&w)
            } else {
                None
            };
            self.rewatch(w);
            if let Some(e) = refused {
                return Ok(Some(VanEvent::Refused(e)));
            }
            if !readable {
                return Ok(None);
            }
        } else if sock.poll(zmq::POLLIN, ms).map_err(zerr("poll".into()))? == 0 {
            return Ok(None);
        }
        let mut frames = Vec::with_capacity(4);
        // What the connection proved (with a token), read off its first frame after the
        // ROUTER's routing id: `User-Id` (set by the ZAP handler) and the peer's address.
        let mut origin = None;
        loop {
            let mut m = zmq::Message::new();
            sock.recv(&mut m, 0).map_err(zerr("receive".into()))?;
            let more = m.get_more();
            if self.token.is_some() && frames.len() == 1 {
                let who = m.gets("User-Id").and_then(Identity::parse);
                let address = m.gets("Peer-Address").unwrap_or("?").to_string();
                origin = Some((who, address));
            }
            frames.push(Bytes::from_owner(ZmqFrame(m)));
            if !more {
                break;
            }
        }
        // Frame 0 is the ROUTER's peer identity.
        frames.remove(0);
        let msg = decode_frames(frames)?;
        if let Some((who, address)) = origin {
            if !self.admitted(who, &address, &msg) {
                return Ok(None);
            }
        }
        Ok(Some(VanEvent::Message(msg)))
    }

    fn set_node_id(&self, id: NodeId) {
        self.me.store(id, Ordering::Release);
        // Connections opened as a joiner are opened again as this node; the scheduler
        // accepts no more than ADD_NODE from a joiner.
        let again = std::mem::take(&mut *crate::sync::lock(&self.as_joiner));
        for (peer, host, port) in again {
            if let Err(e) = self.connect(peer, &host, port) {
                tracing::warn!("cannot connect to {} again: {e}", Node::describe(peer));
            }
        }
        crate::sync::lock(&self.monitor).take();
    }

    fn abort(&self) {
        if let Ok(s) = self.senders.read() {
            for sock in s.values() {
                if let Ok(sock) = sock.lock() {
                    let _ = sock.set_linger(0);
                }
            }
        }
        self.stop();
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        if let Ok(mut r) = self.receiver.lock() {
            r.take();
        }
        if let Ok(mut s) = self.senders.write() {
            s.clear();
        }
    }
}
