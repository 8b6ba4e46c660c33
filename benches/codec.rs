//! Codec micro-benchmark: header encode/decode and key-value frame encode/decode rates.
//! `cargo bench --bench codec` prints figures; it asserts nothing about speed.

use bytes::Bytes;
use pslite::kv::pairs::{decode, encode};
use pslite::wire::{decode_frames, encode_meta, DType, Message, Meta};
use std::time::Instant;

fn rate(label: &str, iters: u32, bytes_per_iter: usize, f: impl FnMut()) {
    let mut f = f;
    let t0 = Instant::now();
    for _ in 0..iters {
        f();
    }
    let dt = t0.elapsed();
    let per = dt / iters;
    let gbps = bytes_per_iter as f64 * iters as f64 * 8.0 / dt.as_secs_f64() / 1e9;
    println!("{label:<44} {per:>10.2?} per call  {gbps:>8.2} Gbit/s");
}

fn main() {
    let meta = Meta {
        tag: pslite::wire::RequestTag {
            app_id: 0,
            timestamp: 12345,
            ..Default::default()
        },
        sender: 9,
        recver: 8,
        request: true,
        kv: pslite::wire::KvHeader {
            push: true,
            dtype: DType::F32,
            ..Default::default()
        },
        ..Meta::default()
    };
    for &n in &[1usize, 1000, 256_000] {
        let keys: Vec<u64> = (0..n as u64).collect();
        let vals: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let bytes = n * 12;
        rate(&format!("encode keys+vals, {n} keys"), 200, bytes, || {
            let mut msg = Message {
                meta: meta.clone(),
                data: encode(&keys, &vals, &[]),
            };
            std::hint::black_box(encode_meta(&mut msg).expect("encodes"));
        });
        let mut msg = Message {
            meta: meta.clone(),
            data: encode(&keys, &vals, &[]),
        };
        let head = Bytes::from(encode_meta(&mut msg).expect("encodes"));
        let frames: Vec<Bytes> = std::iter::once(head)
            .chain(msg.data.iter().cloned())
            .collect();
        rate(&format!("decode + validate, {n} keys"), 200, bytes, || {
            let m = decode_frames(frames.clone()).expect("decodes");
            std::hint::black_box(decode::<f32>(&m.data).expect("valid").vals.len());
        });
    }
}
