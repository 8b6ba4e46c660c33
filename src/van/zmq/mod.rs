//! The ZMQ van: one ROUTER socket receives from every peer, one DEALER socket per peer sends
//! (as ps-lite's `ZMQVan`). Frames are a bincode [`crate::wire::Meta`] and raw payload frames,
//! each in pieces of at most [`PIECE_BYTES`] ([`mod@crate::wire::pieces`]); payloads move without a
//! user-space copy on send (`zmq_msg_init_data` over slices of the frame's `Bytes`) and, for a
//! frame of one piece, on receive (the received `zmq_msg_t` kept as the frame's storage).

mod accepted;
mod frames;
mod joining;
mod monitors;

pub use accepted::Accepted;

use super::{Van, VanEvent};
use crate::auth::limit::{more, RateLimited};
use crate::auth::zap::ZapHandler;
use crate::auth::{Identity, Secret, ZAP_DOMAIN};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::wire::pieces::piece_count;
use crate::wire::{
    encode_meta, pieces, Assembly, Message, Node, NodeId, WireError, PIECE_BYTES, SCHEDULER,
};
use accepted::ConnectionCap;
use bytes::Bytes;
use frames::{send_frame, ZmqFrame};
use joining::Joining;
use monitors::unmonitor;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Pending messages are given this long to leave when the van stops.
const LINGER_MS: i32 = 2000;

/// How long a connection to a node may take to authenticate before libzmq closes it
/// (`ZMQ_HANDSHAKE_IVL`; libzmq's default is 30 s): a stranger's open connection does not
/// hold one of `PS_MAX_CONNECTIONS` for long.
const HANDSHAKE_MS: i32 = 10_000;

/// What a ZMQ van is made with.
#[derive(Clone, Debug)]
pub struct ZmqOptions {
    /// A send fails after this long if the peer does not take the message (`PS_TIMEOUT`).
    pub send_timeout: Duration,
    /// With a secret (the cluster's token, or this node's key), every connection to and from
    /// the van authenticates ([`crate::auth`]).
    pub secret: Option<Secret>,
    /// The longest payload frame accepted, in bytes: a message announcing a longer one is
    /// dropped, its pieces read and let go one at a time; [`crate::config::Bounds::max_frame_bytes`].
    pub max_frame_bytes: u64,
    /// Connections accepted at a time (`PS_MAX_CONNECTIONS`).
    pub max_connections: usize,
    /// Of those, connections not authenticated yet (`PS_MAX_UNAUTHENTICATED`; half of it
    /// from one address). Over a cap, the oldest unauthenticated connection is closed.
    pub max_unauthenticated: usize,
    /// The ids the scheduler may give this node (its rank's, or every one of its role's):
    /// before it has one, a node holding the token takes a credential made for any of them.
    pub to_be: Vec<NodeId>,
}

impl ZmqOptions {
    /// The options of a node configured by `cfg`.
    pub fn of(cfg: &Config) -> ZmqOptions {
        ZmqOptions {
            send_timeout: cfg.timing.timeout,
            secret: cfg.auth.clone(),
            max_frame_bytes: cfg.bounds.max_frame_bytes(cfg.role),
            max_connections: cfg.bounds.max_connections,
            max_unauthenticated: cfg.bounds.max_unauthenticated,
            to_be: match (cfg.role, cfg.node.rank_hint) {
                (crate::wire::Role::Server, Some(r)) => vec![Node::server_id(r as usize)],
                (crate::wire::Role::Worker, Some(r)) => vec![Node::worker_id(r as usize)],
                (crate::wire::Role::Server, None) => {
                    (0..cfg.cluster.num_servers).map(Node::server_id).collect()
                }
                (crate::wire::Role::Worker, None) => {
                    (0..cfg.cluster.num_workers).map(Node::worker_id).collect()
                }
                (crate::wire::Role::Scheduler, _) => Vec::new(),
            },
        }
    }
}

/// The ZMQ van.
pub struct ZmqVan {
    ctx: zmq::Context,
    receiver: Mutex<Option<zmq::Socket>>,
    /// Set first by `stop`: `recv` then returns [`Error::Stopped`] instead of polling again,
    /// so `stop` gets the receiver's lock, which a polling thread holds nearly all the time.
    stopping: AtomicBool,
    senders: RwLock<HashMap<NodeId, Arc<Mutex<zmq::Socket>>>>,
    opts: ZmqOptions,
    /// This node's id once known (-1 before): the identity its connections claim, and the one
    /// the ZAP handler checks credentials for.
    me: Arc<AtomicI32>,
    /// Connections to open again once this node has an id; registrations to answer.
    joining: Mutex<Joining>,
    /// Whether `joining` holds answers to send (checked on every receive without its lock).
    answers_queued: AtomicBool,
    /// Handshake events of the connection to the scheduler made before this node had an id:
    /// a refusal there fails the start with the reason.
    monitor: Mutex<Option<zmq::Socket>>,
    /// Closes connections beyond `PS_MAX_CONNECTIONS` (from `bind` on).
    cap: Mutex<Option<ConnectionCap>>,
    /// What connections prove and present; declared after the sockets, so its ZAP handler is
    /// dropped after them.
    auth: VanAuth,
}

/// The ZMQ van's authentication: its secret, the passwords it presents, the warnings about
/// messages it drops, and the handler answering libzmq's authentication requests.
struct VanAuth {
    /// With a secret: connections authenticate ([`crate::auth`]).
    secret: Option<Secret>,
    /// The password this node presents to each peer, from the scheduler's node table (a node
    /// holding only its key cannot compute them).
    reach: Mutex<HashMap<NodeId, String>>,
    /// Warnings about dropped messages, per address.
    refused: Mutex<RateLimited>,
    /// Answers libzmq's authentication requests.
    _zap: Option<ZapHandler>,
}

fn endpoint(ip: IpAddr, port: impl std::fmt::Display) -> String {
    format!("tcp://{}", crate::wire::place(&ip.to_string(), port))
}

/// The addresses of `host` (an IP address or a host name: libzmq resolves no names to bind).
fn addresses(host: &str) -> Result<Vec<IpAddr>> {
    crate::config::address::resolve(host)
        .map_err(|e| Error::Van(format!("{host:?} does not resolve to an address: {e}")))
}

fn zerr(what: String) -> impl FnOnce(zmq::Error) -> Error {
    move |e| Error::Van(format!("{what}: {e}"))
}

impl ZmqVan {
    /// A van with `opts`: sends fail after `opts.send_timeout` if the peer does not take the
    /// message; with `opts.secret`, every connection to and from it authenticates
    /// ([`crate::auth`]).
    ///
    /// # Errors
    /// [`Error::Van`] when the ZAP handler cannot start.
    pub fn new(opts: ZmqOptions) -> Result<ZmqVan> {
        let ctx = zmq::Context::new();
        let me = Arc::new(AtomicI32::new(-1));
        let zap = match &opts.secret {
            Some(s) => Some(
                ZapHandler::start(&ctx, s.clone(), me.clone(), opts.to_be.clone())
                    .map_err(Error::Van)?,
            ),
            None => None,
        };
        Ok(ZmqVan {
            ctx,
            receiver: Mutex::new(None),
            stopping: AtomicBool::new(false),
            senders: RwLock::new(HashMap::new()),
            me,
            auth: VanAuth {
                secret: opts.secret.clone(),
                reach: Mutex::new(HashMap::new()),
                refused: Mutex::new(RateLimited::default()),
                _zap: zap,
            },
            opts,
            joining: Mutex::new(Joining::default()),
            answers_queued: AtomicBool::new(false),
            monitor: Mutex::new(None),
            cap: Mutex::new(None),
        })
    }

    /// Whether a received message may be acted on: its connection proved `who`, and its header
    /// claims no one else. Dropped ones are warned about (rate-limited, with the address).
    fn admitted(&self, who: Option<Identity>, address: &str, msg: &Message) -> bool {
        let Err(why) = crate::auth::admit(who, &msg.meta) else {
            return true;
        };
        // Per address and claimed identity: one kind of refusal does not hide another.
        let source = format!("{address} as {}", who.map_or("?".into(), |w| w.user_name()));
        let warn = crate::sync::lock(&self.auth.refused).admit(&source, Instant::now());
        if let Some(n) = warn {
            tracing::warn!("dropped a message from {address}: {why}{}", more(n));
        }
        false
    }

    /// A ROUTER socket for `ip`'s family with this van's options (frame limit, handshake
    /// interval, PLAIN server with a token).
    fn router(&self, ip: IpAddr) -> Result<zmq::Socket> {
        let sock = self
            .ctx
            .socket(zmq::ROUTER)
            .map_err(zerr("cannot create a ROUTER socket".into()))?;
        sock.set_ipv6(ip.is_ipv6()).map_err(zerr("ipv6".into()))?;
        sock.set_linger(0).map_err(zerr("linger".into()))?;
        sock.set_rcvhwm(0).map_err(zerr("rcvhwm".into()))?;
        // A ZMQ frame over a piece (or this role's bound, if less) closes its connection before
        // it is read whole, whether the connection authenticated or not; payload frames arrive
        // in pieces ([`mod@crate::wire::pieces`]).
        let max = self.opts.max_frame_bytes.min(PIECE_BYTES as u64) as i64;
        sock.set_maxmsgsize(max)
            .and_then(|_| sock.set_handshake_ivl(HANDSHAKE_MS))
            .map_err(zerr("frame limit".into()))?;
        if self.auth.secret.is_some() {
            sock.set_plain_server(true)
                .and_then(|_| sock.set_zap_domain(ZAP_DOMAIN))
                .map_err(zerr("PLAIN server".into()))?;
        }
        Ok(sock)
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

    /// Reads the message the ROUTER `sock` has ready: `None` when its connection may not send
    /// it (warned about).
    fn read(&self, sock: &zmq::Socket) -> Result<Option<VanEvent>> {
        let next = || {
            let mut m = zmq::Message::new();
            sock.recv(&mut m, 0).map_err(zerr("receive".into()))?;
            Ok::<_, Error>(m)
        };
        // Frame 0 is the ROUTER's routing id of the connection, then the meta frame, then the
        // payload frames' pieces.
        let id = next()?;
        let mut more = id.get_more();
        let routing_id = Bytes::from_owner(ZmqFrame(id));
        if !more {
            return Err(WireError::Empty.into());
        }
        let mut head = next()?;
        more = head.get_more();
        // What the connection proved (with a token), read off its first frame after the
        // ROUTER's routing id: `User-Id` (set by the ZAP handler) and the peer's address.
        let mut origin = None;
        if self.auth.secret.is_some() {
            let who = head.gets("User-Id").and_then(Identity::parse);
            origin = Some((who, head.gets("Peer-Address").unwrap_or("?").to_string()));
        }
        let mut assembly = Assembly::new(&head, PIECE_BYTES, self.opts.max_frame_bytes);
        drop(head);
        // Every piece is read, a refused message's too: the next message starts after it.
        while more {
            let piece = next()?;
            more = piece.get_more();
            if let Ok(a) = &mut assembly {
                if let Err(e) = a.push(Bytes::from_owner(ZmqFrame(piece))) {
                    assembly = Err(e);
                }
            }
        }
        let mut msg = assembly?.finish()?;
        if let Some((who, address)) = origin {
            if !self.admitted(who, &address, &msg) {
                return Ok(None);
            }
            mark_registration(&mut msg, who);
        }
        self.note_registration(&routing_id, &msg);
        Ok(Some(VanEvent::Message(msg)))
    }
}

impl Van for ZmqVan {
    fn name(&self) -> &'static str {
        "zmq"
    }

    fn bind(&self, host: &str, port: u16) -> Result<u16> {
        // The first of the host's addresses that binds.
        let mut tried = Vec::new();
        let mut chosen = None;
        for ip in addresses(host)? {
            let sock = self.router(ip)?;
            let addr = match port {
                0 => endpoint(ip, "*"),
                p => endpoint(ip, p),
            };
            match sock.bind(&addr) {
                Ok(()) => {
                    chosen = Some((sock, addr));
                    break;
                }
                Err(e) => tried.push(format!("{addr}: {e}")),
            }
        }
        let Some((mut sock, addr)) = chosen else {
            return Err(Error::Van(format!("cannot bind {}", tried.join("; "))));
        };
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
        let cap = ConnectionCap::start(
            &self.ctx,
            &mut sock,
            bound,
            self.opts.max_connections,
            self.opts.max_unauthenticated,
        )?;
        *crate::sync::lock(&self.cap) = Some(cap);
        *self.receiver.lock().map_err(|_| Error::Stopped)? = Some(sock);
        Ok(bound)
    }

    fn connect(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        let ip = addresses(host)?[0];
        let sock = self
            .ctx
            .socket(zmq::DEALER)
            .map_err(zerr("cannot create a DEALER socket".into()))?;
        sock.set_ipv6(ip.is_ipv6()).map_err(zerr("ipv6".into()))?;
        sock.set_linger(LINGER_MS).map_err(zerr("linger".into()))?;
        sock.set_sndhwm(0).map_err(zerr("sndhwm".into()))?;
        let ms = self.opts.send_timeout.as_millis().min(i32::MAX as u128) as i32;
        sock.set_sndtimeo(ms).map_err(zerr("sndtimeo".into()))?;
        // A socket this one replaces stops reporting before its watcher may be replaced.
        let old = self.senders.read().ok().and_then(|s| s.get(&id).cloned());
        if let Some(old) = old {
            unmonitor(&mut crate::sync::lock(&old));
        }
        self.authenticate(&sock, id, host, port)?;
        let addr = endpoint(ip, port);
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
                self.opts.send_timeout.as_secs_f64()
            )),
            e => Error::Van(format!("send to {} failed: {e}", Node::describe(recver))),
        };
        if recver == SCHEDULER && self.me.load(Ordering::Acquire) < 0 {
            // Registering: a refused handshake leaves no connection to wait for.
            self.send_while_joining(&sock, &head, flag(0))
                .map_err(|e| e.unwrap_or_else(|| fail(zmq::Error::EAGAIN)))?;
        } else {
            sock.send(zmq::Message::from(head), flag(0)).map_err(fail)?;
        }
        for (i, frame) in msg.data.into_iter().enumerate() {
            let n = piece_count(frame.len() as u64, PIECE_BYTES);
            for (j, piece) in pieces(frame, PIECE_BYTES).enumerate() {
                let flags = if j as u64 + 1 < n {
                    zmq::SNDMORE
                } else {
                    flag(i + 1)
                };
                send_frame(&mut sock, piece, flags).map_err(fail)?;
            }
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
        self.send_answers(sock);
        // While joining: the scheduler's refusal first, whatever else keeps the ROUTER busy.
        if let Some(answer) = self.scheduler_answer() {
            return answer.map(Some);
        }
        match self.poll(sock, ms)? {
            Err(refusal) => Ok(Some(VanEvent::Refused(refusal))),
            Ok(false) => self.scheduler_answer().transpose(),
            Ok(true) => self.read(sock),
        }
    }

    fn set_node_id(&self, id: NodeId) {
        self.joined(id);
    }

    fn set_reach(&self, reach: Vec<(NodeId, String)>) {
        crate::sync::lock(&self.auth.reach).extend(reach);
    }

    fn answer_joiner(&self, host: &str, port: u16, msg: Message) -> Result<()> {
        self.queue_answer(host, port, msg)
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
            if let Some(mut sock) = r.take() {
                // Before the connection cap's thread (the monitor's reader) goes.
                unmonitor(&mut sock);
                // Refusals queued since the receiving thread's last turn still leave.
                let _ = sock.set_linger(LINGER_MS);
                self.send_answers(&sock);
            }
        }
        crate::sync::lock(&self.cap).take();
        if let Ok(mut s) = self.senders.write() {
            for sock in s.values() {
                unmonitor(&mut crate::sync::lock(sock));
            }
            s.clear();
        }
        crate::sync::lock(&self.monitor).take();
    }
}

impl Drop for ZmqVan {
    /// Stops monitoring before the monitors' readers go (see `unmonitor`).
    fn drop(&mut self) {
        self.stop();
    }
}

/// Marks a registration (an ADD_NODE request) with the id its connection proved: its node's
/// id is that id for a node holding its key, -1 for a joiner, whatever the node wrote. The
/// scheduler gives a marked registration that id or none.
fn mark_registration(msg: &mut Message, who: Option<Identity>) {
    let m = &mut msg.meta;
    if m.command() != Some(crate::wire::Command::AddNode) || !m.request {
        return;
    }
    let proven = match who {
        Some(Identity::Node(id)) => id,
        _ => -1,
    };
    if let Some(n) = m.control.as_mut().and_then(|c| c.registering_mut()) {
        n.id = proven;
    }
}
