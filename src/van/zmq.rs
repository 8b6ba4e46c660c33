//! The ZMQ van: one ROUTER socket receives from every peer, one DEALER socket per peer sends
//! (as ps-lite's `ZMQVan`). Frames are a bincode [`crate::wire::Meta`] and raw payload frames; large
//! payloads move without a user-space copy in either direction (`zmq_msg_init_data` over the
//! frame's `Bytes` on send, the received `zmq_msg_t` kept as the frame's storage on receive).

use super::{Van, VanEvent};
use crate::error::{Error, Result};
use crate::wire::{decode_frames, encode_meta, Message, Node, NodeId};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

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
    senders: RwLock<HashMap<NodeId, Arc<Mutex<zmq::Socket>>>>,
    send_timeout: Duration,
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
    /// A van whose sends fail after `send_timeout` if the peer does not take the message.
    pub fn new(send_timeout: Duration) -> Result<ZmqVan> {
        let ctx = zmq::Context::new();
        Ok(ZmqVan {
            ctx,
            receiver: Mutex::new(None),
            senders: RwLock::new(HashMap::new()),
            send_timeout,
        })
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
        let guard = self.receiver.lock().map_err(|_| Error::Stopped)?;
        let sock = guard.as_ref().ok_or(Error::Stopped)?;
        let ms = timeout.as_millis().min(i64::MAX as u128) as i64;
        let ready = sock.poll(zmq::POLLIN, ms).map_err(zerr("poll".into()))?;
        if ready == 0 {
            return Ok(None);
        }
        let mut frames = Vec::with_capacity(4);
        loop {
            let mut m = zmq::Message::new();
            sock.recv(&mut m, 0).map_err(zerr("receive".into()))?;
            let more = m.get_more();
            frames.push(Bytes::from_owner(ZmqFrame(m)));
            if !more {
                break;
            }
        }
        // Frame 0 is the ROUTER's peer identity.
        frames.remove(0);
        Ok(Some(VanEvent::Message(decode_frames(frames)?)))
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
        if let Ok(mut r) = self.receiver.lock() {
            r.take();
        }
        if let Ok(mut s) = self.senders.write() {
            s.clear();
        }
    }
}
