//! A runaway member, for `scripts/bench-runaway.sh`: it holds the cluster's token and sends
//! server 0 tiny requests (one key, one byte) for an application no server serves, as fast as
//! ZMQ takes them, speaking as worker rank 0 (id 9). Each is parked at the server for 5 s,
//! then refused.
//!
//! Usage: `PS_AUTH_TOKEN=… runaway_client PORT COUNT` (PORT: server 0's; COUNT: requests).
//! Prints how many it sent and how long that took.

use pslite::auth::{Identity, Token};
use pslite::wire::{encode_meta, DType, Message, Meta};
use std::error::Error;
use std::time::Instant;

/// The application nobody serves.
const APP: i32 = 77;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(port), Some(count)) = (args.get(1), args.get(2)) else {
        return Err("usage: PS_AUTH_TOKEN=… runaway_client PORT COUNT".into());
    };
    let port: u16 = port.parse().map_err(|e| format!("PORT {port:?}: {e}"))?;
    let count: u64 = count.parse().map_err(|e| format!("COUNT {count:?}: {e}"))?;
    let token = Token::new(&std::env::var("PS_AUTH_TOKEN").map_err(|_| "no PS_AUTH_TOKEN")?)?;
    let ctx = zmq::Context::new();
    let sock = ctx.socket(zmq::DEALER)?;
    let (user, password) = token.credential(Identity::Node(9), 8);
    sock.set_plain_username(Some(&user))?;
    sock.set_plain_password(Some(&password))?;
    sock.set_sndhwm(0)?;
    sock.set_linger(30_000)?;
    sock.connect(&format!("tcp://127.0.0.1:{port}"))?;
    let t0 = Instant::now();
    for i in 0..count {
        let mut msg = Message {
            meta: Meta {
                sender: 9,
                recver: 8,
                tag: pslite::wire::RequestTag {
                    app_id: APP,
                    timestamp: i as i32,
                    ..Default::default()
                },
                request: true,
                kv: pslite::wire::KvHeader {
                    push: true,
                    dtype: DType::U8,
                    ..Default::default()
                },
                ..Meta::default()
            },
            data: vec![
                bytes::Bytes::from(1u64.to_le_bytes().to_vec()),
                bytes::Bytes::from_static(&[1]),
                bytes::Bytes::new(),
            ],
        };
        let head = encode_meta(&mut msg)?;
        let frames: Vec<Vec<u8>> = std::iter::once(head)
            .chain(msg.data.iter().map(|f| f.to_vec()))
            .collect();
        sock.send_multipart(frames, 0)?;
    }
    drop(sock); // lingers until every request has left (at most 30 s)
    drop(ctx);
    println!(
        "sent {count} requests for application {APP} to 127.0.0.1:{port} in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
