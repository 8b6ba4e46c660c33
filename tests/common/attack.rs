//! Helpers for issue 14's attack tests: a stock ZMQ client that sends what a node would not,
//! and what the attacked process holds in memory.

use pslite::wire::{encode_meta, ControlMsg, Message, Meta, SCHEDULER};
use std::time::Duration;

/// A TERMINATE for the scheduler, written as if `sender` sent it.
pub fn terminate(sender: i32) -> Vec<u8> {
    let mut msg = Message::new(Meta {
        sender,
        ..Meta::for_control(SCHEDULER, ControlMsg::Terminate)
    });
    encode_meta(&mut msg).expect("encode").to_vec()
}

/// A DEALER connected to 127.0.0.1:`port`, with a PLAIN credential when given.
pub fn dealer(ctx: &zmq::Context, port: u16, credential: Option<(String, String)>) -> zmq::Socket {
    let sock = ctx.socket(zmq::DEALER).expect("socket");
    if let Some((user, password)) = credential {
        sock.set_plain_username(Some(&user)).expect("user");
        sock.set_plain_password(Some(&password)).expect("password");
    }
    sock.set_linger(1000).expect("linger");
    sock.connect(&format!("tcp://127.0.0.1:{port}"))
        .expect("connect");
    sock
}

/// Connects a DEALER to 127.0.0.1:`port` (with a PLAIN credential when given), sends
/// `frame` `times` times, and lingers so that it leaves.
pub fn attack(port: u16, credential: Option<(String, String)>, frame: &[u8], times: usize) {
    let ctx = zmq::Context::new();
    let sock = dealer(&ctx, port, credential);
    for _ in 0..times {
        sock.send(frame, zmq::DONTWAIT).ok();
    }
    std::thread::sleep(Duration::from_millis(500));
}

/// The most memory process `pid` has held (`VmHWM` of /proc/PID/status), in MiB.
pub fn peak_rss_mib(pid: i32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib / 1024.0
}

/// The port in the line `"<who> started: HOST:PORT"` of a node's log (`PS_VERBOSE=1`).
pub fn port_of(log: &str, who: &str) -> u16 {
    let started = format!("{who} started: ");
    log.lines()
        .find_map(|l| l.split(&started).nth(1))
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {started:?} line:\n{log}"))
}

/// The frames of a push of `vals` (raw bytes of values of type `dtype`) into `keys` of
/// application `app`, as node `sender` would send it to server `recver`.
pub fn push_frames(
    sender: i32,
    recver: i32,
    app: i32,
    dtype: pslite::DType,
    keys: &[u64],
    vals: Vec<u8>,
) -> Vec<Vec<u8>> {
    let keys: Vec<u8> = keys.iter().flat_map(|k| k.to_le_bytes()).collect();
    let mut msg = Message {
        meta: Meta {
            sender,
            recver,
            tag: pslite::wire::RequestTag {
                app_id: app,
                timestamp: 1,
                ..Default::default()
            },
            request: true,
            kv: pslite::wire::KvHeader {
                push: true,
                dtype,
                ..Default::default()
            },
            ..Meta::default()
        },
        data: vec![
            bytes::Bytes::from(keys),
            bytes::Bytes::from(vals),
            bytes::Bytes::new(),
        ],
    };
    let head = encode_meta(&mut msg).expect("encode").to_vec();
    let mut frames = vec![head];
    frames.extend(msg.data.iter().map(|f| f.to_vec()));
    frames
}
