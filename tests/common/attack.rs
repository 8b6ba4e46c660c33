//! Helpers for the attack tests: a stock ZMQ client that sends what a node would not,
//! and what the attacked process holds in memory.

use pslite::auth::{Identity, NodeKey, Token};
use pslite::wire::{encode_meta, ControlMsg, Message, Meta, Node, Role, SCHEDULER};
use std::time::Duration;

/// A TERMINATE for the scheduler, written as if `sender` sent it.
pub fn terminate(sender: i32) -> Vec<u8> {
    let mut msg = Message::new(Meta {
        sender,
        ..Meta::for_control(SCHEDULER, ControlMsg::Terminate)
    });
    encode_meta(&mut msg).expect("encode").to_vec()
}

/// A registration request to the scheduler as a server at 127.0.0.1:9 asking for
/// `requested_rank`, written as if `sender` sent it (-1: a node that has no id yet).
pub fn add_server(sender: i32, requested_rank: Option<u32>) -> Vec<u8> {
    let node = Node {
        role: Role::Server,
        id: -1,
        host: "127.0.0.1".into(),
        port: 9,
        requested_rank,
    };
    let mut msg = Message::new(Meta {
        sender,
        request: true,
        ..Meta::for_control(SCHEDULER, ControlMsg::AddNode { node })
    });
    encode_meta(&mut msg).expect("encode").to_vec()
}

/// The scheduler's release of a barrier of all nodes, sent to node `to`.
pub fn release_all(to: i32) -> Vec<u8> {
    let mut msg = Message::new(Meta::for_control(
        to,
        ControlMsg::Released {
            group: pslite::postoffice::ALL_GROUP,
            failure: None,
        },
    ));
    msg.meta.sender = SCHEDULER;
    encode_meta(&mut msg).expect("encode").to_vec()
}

/// A heartbeat request to the scheduler, written as if `sender` sent it.
pub fn heartbeat(sender: i32) -> Vec<u8> {
    let mut msg = Message::new(Meta {
        sender,
        request: true,
        ..Meta::for_control(SCHEDULER, ControlMsg::Heartbeat)
    });
    encode_meta(&mut msg).expect("encode").to_vec()
}

/// NODE_REPLACED telling `to` that server rank 0 (id 8) now listens at 127.0.0.1:`port`,
/// written as if `sender` sent it.
pub fn node_replaced(sender: i32, to: i32, port: u16) -> Vec<u8> {
    let mut msg = Message::new(Meta {
        sender,
        ..Meta::for_control(
            to,
            ControlMsg::NodeReplaced {
                node: Node {
                    role: Role::Server,
                    id: 8,
                    host: "127.0.0.1".into(),
                    port,
                    requested_rank: None,
                },
                incarnation: 0,
            },
        )
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

/// Pushes +1e6 into 10 of kv-app's keys on server 0 (listening at `s0`), as worker 0, and
/// releases a barrier of all nodes on server 1 (at `s1`), as the scheduler: five times each
/// without a credential, then five times with `other`'s (another cluster's token).
pub fn forge_a_push_and_a_release(other: &Token, s0: u16, s1: u16) {
    let step = u64::MAX / 10000;
    let keys: Vec<u64> = (0..10).map(|i| i * step).collect();
    let vals: Vec<u8> = (0..10).flat_map(|_| 1e6f32.to_le_bytes()).collect();
    let push = push_frames(9, 8, 0, pslite::DType::F32, &keys, vals);
    let release = release_all(10);
    let ctx = zmq::Context::new();
    for credential in [None, Some(other.credential(Identity::Node(9), 8))] {
        let to_s0 = dealer(&ctx, s0, credential.clone());
        for _ in 0..5 {
            to_s0.send_multipart(push.iter(), zmq::DONTWAIT).ok();
        }
        let to_s1 = dealer(
            &ctx,
            s1,
            credential.map(|_| other.credential(Identity::Node(SCHEDULER), 10)),
        );
        for _ in 0..5 {
            to_s1.send(release.as_slice(), zmq::DONTWAIT).ok();
        }
    }
}

/// What a member holding worker 0's key can compute for other identities, offered as the
/// scheduler to server 0 (at `s0`) and as worker 1 to server 1 (at `s1`), each with a
/// TERMINATE; the connections are returned open.
pub fn offer_worker_0s_key_as_others(
    ctx: &zmq::Context,
    key: &NodeKey,
    s0: u16,
    s1: u16,
) -> [zmq::Socket; 2] {
    let forged = [
        dealer(
            ctx,
            s0,
            Some(("node:1".into(), key.password_to_scheduler())),
        ),
        dealer(ctx, s1, Some(("node:11".into(), key.password_from(11)))),
    ];
    for f in &forged {
        f.send(terminate(SCHEDULER), zmq::DONTWAIT).ok();
    }
    forged
}
