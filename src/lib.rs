//! # pslite — a parameter server in the style of ps-lite
//!
//! A **scheduler**, **servers** and **workers**. Workers [`KVWorker::push`] and
//! [`KVWorker::pull`] key-value pairs (keys `u64`, values dense arrays of a plain numeric type);
//! keys are range-partitioned over the servers, whose [`RequestHandler`] (by default
//! [`DefaultHandler`]: sum pushes, answer pulls) owns the values. Messages move through a
//! [`van::Van`]; the ZMQ van carries everything over TCP.
//!
//! Layers, bottom up (see `ARCHITECTURE.md`: layers, threads, lock order): [`wire`] (header codec, no IO) → [`van`] (transports) →
//! [`postoffice`] (membership, barriers, key ranges) → [`kv`] (workers, servers, handlers).
//!
//! ## Example
//! A whole cluster — scheduler, one server, one worker — as threads of one process on loopback:
//!
//! ```
//! use pslite::{Config, DefaultHandler, KVServer, KVWorker, Postoffice, Role};
//! use std::thread;
//!
//! # fn main() -> pslite::Result<()> {
//! let port = pslite::free_port()?;
//! let cfg = move |role| Config::local(role, port, 1, 1);
//! let sched = thread::spawn(move || -> pslite::Result<()> {
//!     Postoffice::start(cfg(Role::Scheduler))?.finalize()
//! });
//! let server = thread::spawn(move || -> pslite::Result<()> {
//!     let po = Postoffice::start(cfg(Role::Server))?;
//!     let _server = KVServer::<f32>::new(&po, 0, DefaultHandler::new())?;
//!     po.finalize()
//! });
//! let po = Postoffice::start(cfg(Role::Worker))?;
//! let kv = KVWorker::<f32>::new(&po, 0, 0)?;
//! let keys = [1, 7];
//! for _ in 0..3 {
//!     let ts = kv.push(&keys, &[1.0, 2.0, 10.0, 20.0], None)?; // 2 values per key
//!     kv.wait(ts)?;
//! }
//! let mut out = [0.0f32; 4];
//! kv.pull_into(&keys, &mut out)?;
//! assert_eq!(out, [3.0, 6.0, 30.0, 60.0]);
//! po.finalize()?;
//! sched.join().unwrap()?;
//! server.join().unwrap()?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

#[doc(hidden)]
pub mod apps;
#[doc(hidden)]
pub mod auth;
pub mod config;
#[cfg(doctest)]
mod doc_examples;
pub mod error;
pub mod kv;
pub mod metrics;
pub mod postoffice;
#[doc(hidden)]
pub mod rendezvous;
mod sync;
pub mod van;
#[doc(hidden)]
pub mod waits;
pub mod wire;

pub use config::{Config, VanType};
pub use error::{Error, Result};
pub use kv::{
    DefaultHandler, KVPairs, KVServer, KVWorker, Key, Op, RequestHandler, RequestOptions,
    ServesValues, Timestamp, Value,
};
pub use postoffice::Postoffice;
pub use wire::{DType, Role};

/// A TCP port on 127.0.0.1 that was free a moment ago (for local clusters and tests).
///
/// It is drawn at random from 20000–32767, below Linux's default ephemeral range
/// (32768–60999), and checked free by binding it: the kernel never hands such a port to
/// another socket bound to port 0 or connecting out, so it stays free until the caller binds
/// it (a port from the ephemeral range could be taken in between, which made in-process tests
/// that start many nodes at once fail now and then). Where 64 draws find none free, a port
/// the kernel picks.
///
/// # Errors
/// [`Error::Van`] if no port can be bound.
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    let seed = std::collections::hash_map::RandomState::new();
    for draw in 0..64u64 {
        let mut h = seed.build_hasher();
        h.write_u64(draw);
        let port = 20000 + (h.finish() % 12768) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Van(format!("cannot find a free port on 127.0.0.1: {e}")))
}
