//! The ZAP handler of a node's ZMQ context (ZeroMQ RFC 27): libzmq asks it about every new
//! connection to the node's ROUTER socket, during the PLAIN handshake (RFC 24), before any
//! message of that connection reaches the node. It answers 200 with the proven identity as
//! `User-Id` (libzmq then stamps every message of the connection with it) or 400 (libzmq
//! closes the connection; the peer sees an authentication failure).

use super::limit::{more, RateLimited};
use super::proof::{Secret, ZAP_DOMAIN};
use crate::sync::StoppableThread;
use crate::wire::NodeId;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Where libzmq looks for the ZAP handler of a context.
const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";

/// How often the handler looks whether it should stop, in milliseconds.
const TICK_MS: i64 = 100;

/// The running handler; stops (and closes its socket) when dropped.
pub struct ZapHandler {
    _thread: StoppableThread,
}

impl ZapHandler {
    /// Binds the ZAP endpoint in `ctx` (before this returns, so no connection can arrive
    /// before it) and answers requests with `secret` on a thread of its own, as the node whose
    /// id `me` holds (-1 before it has one: then as any of `to_be`, [`Secret::check`]).
    ///
    /// # Errors
    /// A sentence naming what failed (the endpoint is taken: a second handler in the context).
    pub fn start(
        ctx: &zmq::Context,
        secret: Secret,
        me: Arc<AtomicI32>,
        to_be: Vec<NodeId>,
    ) -> Result<ZapHandler, String> {
        let sock = ctx
            .socket(zmq::REP)
            .map_err(|e| format!("cannot create the ZAP socket: {e}"))?;
        sock.bind(ZAP_ENDPOINT)
            .map_err(|e| format!("cannot bind the ZAP handler at {ZAP_ENDPOINT}: {e}"))?;
        let thread = StoppableThread::spawn("ps-zap", move |stop| {
            serve(&sock, (&secret, &to_be), &me, stop)
        })
        .map_err(|e| format!("cannot start the ZAP handler: {e}"))?;
        Ok(ZapHandler { _thread: thread })
    }
}

/// Answers requests until `stop` or the context ends. Any other error (a signal's EINTR
/// included) is waited out: while this thread is gone, libzmq refuses every new connection.
fn serve(sock: &zmq::Socket, secret: (&Secret, &[NodeId]), me: &AtomicI32, stop: &AtomicBool) {
    let mut warned = RateLimited::default();
    // Whether the last call's error ends the thread (the context is terminating).
    let fatal = |e: zmq::Error| {
        if e != zmq::Error::EINTR && e != zmq::Error::ETERM {
            tracing::error!("the ZAP handler: {e}; trying again");
            std::thread::sleep(std::time::Duration::from_millis(TICK_MS as u64));
        }
        e == zmq::Error::ETERM
    };
    while !stop.load(Ordering::Acquire) {
        match sock.poll(zmq::POLLIN, TICK_MS) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) if fatal(e) => return,
            Err(_) => continue,
        }
        let request = match sock.recv_multipart(0) {
            Ok(r) => r,
            Err(e) if fatal(e) => return,
            Err(_) => continue,
        };
        let reply = answer(&request, secret, me.load(Ordering::Acquire), &mut warned);
        // A REP socket must send before it receives again.
        loop {
            match sock.send_multipart(reply.clone(), 0) {
                Ok(()) => break,
                Err(e) if fatal(e) => return,
                Err(_) if stop.load(Ordering::Acquire) => return,
                Err(_) => {}
            }
        }
    }
}

/// The reply frames to one ZAP request: version, request id, status code, status text,
/// user id, metadata.
fn answer(
    request: &[Vec<u8>],
    (secret, to_be): (&Secret, &[NodeId]),
    me: NodeId,
    warned: &mut RateLimited,
) -> Vec<Vec<u8>> {
    let frame = |i: usize| request.get(i).map(Vec::as_slice).unwrap_or_default();
    let reply = |code: &str, text: &str, user: &str| {
        vec![
            b"1.0".to_vec(),
            frame(1).to_vec(),
            code.as_bytes().to_vec(),
            text.as_bytes().to_vec(),
            user.as_bytes().to_vec(),
            Vec::new(),
        ]
    };
    // Frames: version, request id, domain, address, routing id, mechanism, credentials.
    if frame(0) != b"1.0" || request.len() < 6 {
        return reply("500", "malformed ZAP request", "");
    }
    let address = String::from_utf8_lossy(frame(3)).into_owned();
    let refuse = |why: String, warned: &mut RateLimited| {
        if let Some(n) = warned.admit(&address, Instant::now()) {
            tracing::warn!("refused a connection from {address}: {why}{}", more(n));
        }
        reply("400", "authentication failed", "")
    };
    if frame(2) != ZAP_DOMAIN.as_bytes() {
        let domain = String::from_utf8_lossy(frame(2)).into_owned();
        return refuse(format!("unexpected ZAP domain {domain:?}"), warned);
    }
    if frame(5) != b"PLAIN" || request.len() != 8 {
        let mechanism = String::from_utf8_lossy(frame(5)).into_owned();
        return refuse(
            format!(
                "it authenticates with {mechanism:?}, not with a proof of this cluster's secret"
            ),
            warned,
        );
    }
    match secret.check(me, to_be, frame(6), frame(7)) {
        Ok(who) => reply("200", "OK", &who.user_name()),
        Err(why) => refuse(why.to_string(), warned),
    }
}

#[cfg(test)]
mod tests {
    use super::super::proof::{Identity, Token};
    use super::*;
    use crate::wire::SCHEDULER;

    fn request(domain: &str, mechanism: &str, user: &str, password: &str) -> Vec<Vec<u8>> {
        [
            "1.0",
            "7",
            domain,
            "192.0.2.1",
            "",
            mechanism,
            user,
            password,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect()
    }

    #[test]
    fn answers_name_the_proven_identity_or_refuse() {
        let t = Token::new("0123456789abcdef0123").expect("token");
        let other = Token::new("another token of the cluster").expect("token");
        let s = Secret::Token(t.clone());
        let mut w = RateLimited::default();
        let (user, password) = t.credential(Identity::Node(8), SCHEDULER);
        let ok = answer(
            &request("pslite", "PLAIN", &user, &password),
            (&s, &[]),
            SCHEDULER,
            &mut w,
        );
        assert_eq!(ok[1], b"7");
        assert_eq!(ok[2], b"200");
        assert_eq!(ok[4], b"node:8");
        let (user, password) = other.credential(Identity::Node(8), SCHEDULER);
        let no = answer(
            &request("pslite", "PLAIN", &user, &password),
            (&s, &[]),
            SCHEDULER,
            &mut w,
        );
        assert_eq!(no[2], b"400");
        assert_eq!(no[4], b"");
        let wrong_domain = answer(
            &request("x", "PLAIN", &user, &password),
            (&s, &[]),
            SCHEDULER,
            &mut w,
        );
        assert_eq!(wrong_domain[2], b"400");
        let mut curve = request("pslite", "CURVE", "", "");
        curve.truncate(7);
        assert_eq!(answer(&curve, (&s, &[]), SCHEDULER, &mut w)[2], b"400");
        assert_eq!(
            answer(&[b"2.0".to_vec()], (&s, &[]), SCHEDULER, &mut w)[2],
            b"500"
        );
        // A server holding only its key takes worker 0's credential for it, not for another.
        let server = Secret::Key(t.node_key(8));
        let (user, password) = t.credential(Identity::Node(9), 8);
        let ok = answer(
            &request("pslite", "PLAIN", &user, &password),
            (&server, &[]),
            8,
            &mut w,
        );
        assert_eq!(
            (ok[2].as_slice(), ok[4].as_slice()),
            (&b"200"[..], &b"node:9"[..])
        );
        let (user, password) = t.credential(Identity::Node(9), 10);
        let no = answer(
            &request("pslite", "PLAIN", &user, &password),
            (&server, &[]),
            8,
            &mut w,
        );
        assert_eq!(no[2], b"400");
    }
}
