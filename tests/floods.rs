//! Issue 14's bounds: a member's flood for an unserved application, oversized frames and a
//! flood of connections leave each attacked node under a stated memory bound, and the
//! scheduler never connects to an address a refused node named. Real processes on
//! loopback (`pslite-launch local`) running kv-app while a stock ZMQ client (or plain TCP)
//! floods them; each attacked node's peak memory (`VmHWM`) is checked against a stated bound.

mod common;

use bytes::Bytes;
use common::attack::{dealer, peak_rss_mib, port_of, push_frames};
use common::launched::Launched;
use pslite::auth::{Identity, Token};
use pslite::wire::{decode_frames, encode_meta, ControlMsg, DType, Message, Meta, Node};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const TOKEN: &str = "the flood test cluster's token, 0123";

/// kv-app S2W2 with `env`, long enough to be flooded meanwhile; every node logs at info.
fn kv_app(port: u16, env: &[(&str, &str)]) -> Launched {
    let mut env = env.to_vec();
    env.push(("PS_VERBOSE", "1"));
    Launched::kv_app_s2w2(port, 2000, &env)
}

/// A push of `len` bytes into key 1 of application `app`, as worker 0 (id 9) would send it.
fn push(app: i32, len: usize) -> Vec<Vec<u8>> {
    push_frames(9, 8, app, DType::U8, &[1], vec![1u8; len])
}

#[test]
fn a_member_cannot_make_a_node_hold_memory_without_bound() {
    // PS_MAX_INFLIGHT_BYTES 16 MiB: a server parks at most 2 × 16 MiB and takes no frame over
    // 16 MiB; the scheduler no frame over 1 MiB.
    let port = pslite::free_port().expect("port");
    let run = kv_app(
        port,
        &[
            ("PS_AUTH_TOKEN", TOKEN),
            ("PS_MAX_INFLIGHT_BYTES", "16777216"),
        ],
    );
    let server = port_of(&run.wait_line("server rank 0 (id 8) started: "), "(id 8)");
    run.wait_line("worker rank 1 (id 11) started: ");
    let token = Token::new(TOKEN).expect("token");
    let ctx = zmq::Context::new();
    // 400 pushes of 1 MiB for an application nobody serves, 1 ms apart: without the cap
    // they would all wait 5 s at server 0 (400 MiB).
    let member = dealer(&ctx, server, Some(token.credential(Identity::Node(9), 8)));
    let frames = push(77, 1 << 20);
    for _ in 0..400 {
        member.send_multipart(frames.iter(), 0).expect("send");
        std::thread::sleep(Duration::from_millis(1));
    }
    // A 200 MiB frame to server 0 and a 64 MiB one to the scheduler.
    member
        .send_multipart(push(78, 200 << 20).iter(), 0)
        .expect("send");
    let at_scheduler = dealer(
        &ctx,
        port,
        Some(token.credential(Identity::Node(9), pslite::wire::SCHEDULER)),
    );
    at_scheduler
        .send_multipart(push(79, 64 << 20).iter(), 0)
        .expect("send");
    std::thread::sleep(Duration::from_secs(2));
    let (server_peak, scheduler_peak) = (
        peak_rss_mib(run.pid("server 0")),
        peak_rss_mib(run.pid("scheduler")),
    );
    run.assert_still_running();
    drop((member, at_scheduler));
    let out = run.finish_exact(Duration::from_secs(180));
    eprintln!("peak memory: server 0 {server_peak:.0} MiB, scheduler {scheduler_peak:.0} MiB");
    // Parked at most 32 MiB, no frame over 16 MiB read (57 MiB seen; 483 MiB without the
    // bounds, 125 MiB without the frame limit when that frame was 64 MiB). The scheduler: 16
    // MiB seen, 80 MiB without its frame limit.
    assert!(server_peak < 120.0, "server 0 held {server_peak:.0} MiB");
    assert!(
        scheduler_peak < 40.0,
        "the scheduler held {scheduler_peak:.0} MiB"
    );
    assert!(
        out.contains("refused a request from worker rank 0 (id 9): ")
            && out.contains("requests for applications not served here yet already wait")
            && out.contains("more than the 33554432 bytes parked at most"),
        "{out}"
    );
}

#[test]
fn a_flood_of_connections_is_cut_at_the_cap() {
    let port = pslite::free_port().expect("port");
    let run = kv_app(port, &[("PS_MAX_CONNECTIONS", "20")]);
    run.wait_line("worker rank 1 (id 11) started: ");
    // 300 TCP connections to the scheduler that never say a word.
    let flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    let t0 = Instant::now();
    let mut closed = 0;
    for mut c in flood {
        let left = Duration::from_secs(5).saturating_sub(t0.elapsed());
        c.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        let mut b = [0u8; 64];
        // libzmq greets a connection it keeps; one cut at the cap ends (EOF or a reset).
        loop {
            match c.read(&mut b) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    closed += 1;
                    break;
                }
                Err(_) => break,
            }
        }
    }
    let peak = peak_rss_mib(run.pid("scheduler"));
    let out = run.finish_exact(Duration::from_secs(180));
    // The scheduler keeps at most 8 connections that have not authenticated from one address
    // (half of PS_MAX_UNAUTHENTICATED), the oldest closed first.
    assert!(closed >= 280, "{closed} of 300 were closed");
    assert!(
        out.contains("closed a connection from 127.0.0.1:")
            && out.contains(
                "connections from 127.0.0.1 have not authenticated, the most one address may have"
            ),
        "{out}"
    );
    assert!(peak < 40.0, "the scheduler held {peak:.0} MiB");
}

#[test]
fn the_scheduler_answers_a_refused_node_over_its_connection_and_never_connects_to_it() {
    // No token (PS_AUTH=none): anyone who reaches the port can register.
    let port = pslite::free_port().expect("port");
    let run = kv_app(port, &[("PS_AUTH", "none")]);
    run.wait_line("worker rank 1 (id 11) started: ");
    // A stranger registers as a third server, announcing an address the test listens on.
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let named = listener.local_addr().expect("addr").port();
    let ctx = zmq::Context::new();
    let stranger = dealer(&ctx, port, None);
    let mut add = Message::new(Meta {
        sender: -1,
        request: true,
        ..Meta::for_control(
            1,
            ControlMsg::AddNode {
                node: Node {
                    role: pslite::Role::Server,
                    id: -1,
                    host: "127.0.0.1".into(),
                    port: named,
                    requested_rank: None,
                },
            },
        )
    });
    let head = encode_meta(&mut add).expect("encode").to_vec();
    stranger.send(head, 0).expect("send");
    stranger.set_rcvtimeo(10_000).expect("rcvtimeo");
    let answer = stranger.recv_multipart(0).expect("the refusal came back");
    let answer = decode_frames(answer.into_iter().map(Bytes::from).collect()).expect("decodes");
    let why = answer.meta.error.unwrap_or_default();
    assert!(
        why.contains("the cluster already has its 2 servers (DMLC_NUM_SERVER)"),
        "{why}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        listener.accept().is_err(),
        "the scheduler connected to the address the refused node named"
    );
    run.finish_exact(Duration::from_secs(180));
}

/// The two tests below each flood a whole run; on two cores they take turns.
static ONE_FLOOD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Opens a TCP connection to 127.0.0.1:`port`, greets it as a ZMTP 3.0 peer naming PLAIN (RFC
/// 23/24), announces a handshake command of `announced` bytes and sends up to `send` of them,
/// a MiB at a time, until the node closes the connection. Returns the bytes the node took,
/// and the connection, left open.
fn oversized_hello(port: u16, announced: u64, send: usize) -> (usize, Option<TcpStream>) {
    use std::io::Write;
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, None);
    };
    c.set_write_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut greeting = vec![0xffu8, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
    greeting.extend(b"PLAIN");
    greeting.resize(64, 0);
    let mut head = vec![0x06u8]; // a command frame with an 8-byte length
    head.extend(announced.to_be_bytes());
    if c.write_all(&greeting)
        .and_then(|_| c.write_all(&head))
        .is_err()
    {
        return (0, None);
    }
    let mib = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent < send && c.write_all(&mib).is_ok() {
        sent += mib.len();
    }
    (sent, Some(c))
}

#[test]
fn a_strangers_handshake_makes_no_node_hold_more_than_a_piece_per_connection() {
    let _turn = ONE_FLOOD_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let port = pslite::free_port().expect("port");
    let run = kv_app(port, &[("PS_AUTH_TOKEN", TOKEN)]);
    let server = port_of(&run.wait_line("server rank 0 (id 8) started: "), "(id 8)");
    let worker = port_of(&run.wait_line("worker rank 0 (id 9) started: "), "(id 9)");
    run.wait_line("worker rank 1 (id 11) started: ");
    let (server_pid, worker_pid) = (run.pid("server 0"), run.pid("worker 0"));
    let before = (peak_rss_mib(server_pid), peak_rss_mib(worker_pid));
    // Eight connections to each node, each announcing a 200 MiB PLAIN HELLO (under a server's
    // 256 MiB frame bound) and sending up to 64 MiB of it: 512 MiB each if libzmq read it.
    let (mut taken, mut open) = (0, Vec::new());
    for _ in 0..8 {
        for node in [server, worker] {
            let (n, c) = oversized_hello(node, 200 << 20, 64 << 20);
            taken += n;
            open.extend(c);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(open);
    let grew = (
        peak_rss_mib(server_pid) - before.0,
        peak_rss_mib(worker_pid) - before.1,
    );
    run.assert_still_running();
    let out = run.finish_exact(Duration::from_secs(180));
    eprintln!(
        "peak memory grew by {:.0} MiB (server 0) and {:.0} MiB (worker 0); the sockets took {} \
         MiB",
        grew.0,
        grew.1,
        taken >> 20
    );
    // libzmq reads no ZMQ frame over a piece (4 MiB), before login as after, and keeps at most
    // 8 connections from one address that have not authenticated.
    assert!(grew.0 < 64.0, "server 0 grew by {:.0} MiB:\n{out}", grew.0);
    assert!(grew.1 < 64.0, "worker 0 grew by {:.0} MiB:\n{out}", grew.1);
}

#[test]
fn a_flood_of_silent_connections_from_another_host_stops_neither_the_start_nor_a_replacement() {
    let _turn = ONE_FLOOD_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let port = pslite::free_port().expect("port");
    // 200 stock ZMQ STREAM sockets at 127.0.0.66 (another host, as far as the scheduler can
    // tell), connected to the scheduler before it starts, saying nothing, and reopened by
    // libzmq 10 ms after each is closed, for the whole run.
    let ctx = zmq::Context::new();
    let flood: Vec<zmq::Socket> = (0..200)
        .map(|_| {
            let s = ctx.socket(zmq::STREAM).expect("socket");
            s.set_reconnect_ivl(10).expect("reconnect");
            s.set_linger(0).expect("linger");
            s.connect(&format!("tcp://127.0.0.66:0;127.0.0.1:{port}"))
                .expect("connect");
            s
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("pslite-floods-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cp = dir.to_string_lossy().to_string();
    let port_arg = port.to_string();
    let out = common::launched::kv_app_with_a_node_killed(&common::launched::KillRun {
        cp: &cp,
        extra: &["--port", &port_arg],
        kv_app: &["--repeat", "600"],
        env: &[("PS_AUTH_TOKEN", TOKEN), ("PS_VERBOSE", "1")],
        victim: "server 0",
        after: Duration::from_secs(2),
        limit: Duration::from_secs(240),
    });
    drop(flood);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.contains("closed a connection from 127.0.0.66:")
            && out.contains("connections from 127.0.0.66 have not authenticated"),
        "the flood was not met at the cap:\n{}",
        common::launched::without_info(&out)
    );
}
