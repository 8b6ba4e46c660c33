//! The RDMA van: worker↔server messages move by RDMA WRITE WITH IMMEDIATE over RC queue pairs,
//! in the Model3 design of `shared/seeds/004_*` (section 3.1) — per QP a registered send ring and
//! a registered receive ring, all QPs of a process sharing one send CQ and one receive CQ drained
//! by one poller thread — with credit-based flow control ([`crate::van::ring`]). The scheduler's
//! control traffic and the QP bootstrap go over the ZMQ van.
//!
//! Built with the cargo feature `rdma` (libibverbs through `sideway`, loaded at run time: a
//! binary built with `rdma` starts on a host without libibverbs, and only this van reports it).
//!
//! # Protocol
//!
//! Per worker↔server pair: one RC QP; a registered receive ring (the peer writes records into
//! it), a registered send ring (its mirror here, the source of our writes), a registered credit
//! word (the peer writes how far it consumed our records) and a credit source (what we write into
//! the peer's credit word). All QPs share one send CQ and one receive CQ, drained by one poller
//! thread. Ring offsets, credits, record headers and reassembly are the sans-IO
//! [`crate::van::ring`]; this van only moves bytes.
//!
//! A message in the ring is a frame container ([`crate::wire::container`]): `u32` frame count,
//! `u64` length of each frame, then the frames (frame 0 is the bincode [`crate::wire::Meta`]);
//! messages larger than a record are fragmented ([`crate::van::ring::fragments`]), so any size
//! works whatever the ring size.
//!
//! Immediates: a record write carries [`crate::wire::Imm::RECORD`] (the record is at the
//! receiver's head); a padding header and the credit word are plain RDMA WRITEs (no
//! immediate, no receive WR used). Receive WRs carry the peer's node id as `wr_id` (the shared receive CQ does not say which QP
//! a completion came from); signaled send WRs carry the peer id and the number of WRs they
//! complete (`send_queue`). Every receive WR consumed is posted again; records never outnumber
//! the posted WRs (minimum record size, [`crate::van::ring::min_record`]). A failed WC (RNR,
//! retry exceeded, …) fails the channel: later sends to that peer return an error with the WC
//! status.
//!
//! # Files
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | [`create`], [`unavailable`], these docs |
//! | `config.rs` | [`RdmaConfig`]: the `RDMA_*` variables |
//! | `device.rs` | device, port, GID and MTU choice; the PD and the two shared CQs |
//! | `buf.rs` | registered buffers and every access to their bytes |
//! | `send_queue.rs` | send-queue slots, signalling, held write sources, `wr_id` packing (sans-IO) |
//! | `connect.rs` | `Endpoint`; `PreparedChannel` → `handshake(self, Endpoint)` → `Channel` |
//! | `channel/mod.rs` | the connected `Channel` and its send side: messages, content writes, the one wait for room |
//! | `channel/receive.rs` | its receive side (the poller's): records, reassembly, receive WRs, credit returns |
//! | `channels.rs` | the table of channels by peer: connected, or pending (prepared, endpoint first, failed) |
//! | `bootstrap.rs` | `connect`, the endpoint exchange over ZMQ, the `rdma-bootstrap` thread |
//! | `poller.rs` | the `rdma-poller` thread: receive CQ, send CQ, credit returns |
//! | `van.rs` | `RdmaVan`, the [`Van`](crate::van::Van) impl, the state the threads share |
//!
//! # Threads and locks
//!
//! - **`rdma-poller`** (started by `RdmaVan::new`) is the only reader of both CQs and the
//!   only user of each channel's receive side (`rx`: ring receiver, reassembler). It re-posts
//!   receive WRs, accounts send completions, writes credits, and puts messages and remote
//!   writes on the van's event queue.
//! - **`rdma-bootstrap`** (started by `bind`) receives from the ZMQ van: endpoints go to the
//!   handshake, which it does, and the writing of the messages that waited; every other event
//!   is forwarded to the event queue.
//! - **Callers** (`send`, `write_imm`, `connect`) write records and post WRs on their own
//!   thread, waiting for room with the send deadline.
//!
//! Lock order (a lock may be taken while holding those to its left, never the reverse):
//! `channels.pending` → `channels.up` (write, only to publish a connected channel); a channel's
//! `send` → `tx` → `qp`, and `rx` → `tx` → `qp` (`send` and `rx` are never held together). `up`
//! is only held to look up or clone a channel, never while a channel lock is taken; `pending`
//! is never held while a channel lock is taken, nor while waiting for the poller (the poller
//! takes it, holding nothing, when a receive completion names a peer not yet in `up`: the
//! handshake publishes the channel under it). `mrs` is taken alone.
//!
//! What crosses threads: messages queued in a prepared channel (callers → bootstrap, under
//! `pending`); the connected `Arc<Channel>` (published in `up` by the bootstrap, or by
//! `connect` when the peer's endpoint came first); events (poller and bootstrap → `recv`, a
//! crossbeam channel); the `tx` state (callers, bootstrap and poller, with its condvar: send
//! completions, failures); credits (the peer's RDMA write into our credit word, read by the
//! sender).

#[cfg(feature = "rdma")]
mod bootstrap;
#[cfg(feature = "rdma")]
mod buf;
#[cfg(feature = "rdma")]
mod channel;
#[cfg(feature = "rdma")]
mod channels;
pub mod config;
#[cfg(feature = "rdma")]
mod connect;
#[cfg(feature = "rdma")]
mod device;
#[cfg(feature = "rdma")]
mod inspect;
#[cfg(feature = "rdma")]
mod poller;
#[cfg(any(feature = "rdma", test))]
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
mod send_queue;
#[cfg(feature = "rdma")]
mod van;

pub use config::RdmaConfig;
#[cfg(feature = "rdma")]
pub use van::RdmaVan;

use crate::error::{Error, Result};
use std::sync::Arc;

/// Creates the RDMA van (its bootstrap's ZMQ van made with `zmq`), or says clearly why it
/// cannot be had.
///
/// # Errors
/// [`Error::Config`] when this build has no RDMA van, libibverbs cannot be loaded, there is no
/// usable device, or an `RDMA_*` variable is wrong — each naming the ZMQ van as the alternative.
pub fn create(zmq: super::zmq::ZmqOptions) -> Result<Arc<dyn super::Van>> {
    let cfg = RdmaConfig::from_env()?;
    #[cfg(feature = "rdma")]
    {
        let van = RdmaVan::new(cfg, zmq)?;
        Ok(Arc::new(van))
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = (cfg, zmq);
        Err(Error::Config(
            "DMLC_PS_VAN_TYPE=rdma: this build has no RDMA van (build with `cargo build --features rdma`); \
             use the ZMQ van (DMLC_PS_VAN_TYPE=zmq or --van zmq)"
                .into(),
        ))
    }
}

/// For `pslite-launch doctor`: every RDMA device and port (state, link layer, active MTU, GID
/// table with types and addresses), then the device, port and GID index the van would use
/// with `cfg`.
///
/// # Errors
/// What [`create`] would say: no RDMA van in this build, libibverbs missing, no usable device
/// or GID.
pub fn describe(cfg: &RdmaConfig) -> Result<Vec<String>> {
    #[cfg(feature = "rdma")]
    {
        inspect::describe(cfg)
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = cfg;
        Err(Error::Config(
            "this build has no RDMA van (build with `cargo build --features rdma`)".into(),
        ))
    }
}

/// The error for a missing RDMA stack, naming the alternative.
pub fn unavailable(why: impl std::fmt::Display) -> Error {
    Error::Config(format!(
        "DMLC_PS_VAN_TYPE=rdma: {why}; use the ZMQ van (DMLC_PS_VAN_TYPE=zmq or --van zmq)"
    ))
}
