//! [`RdmaVan`]: the [`Van`] over the channels, and the state its caller threads, the poller and
//! the bootstrap thread share ([`VanState`]).
//!
//! A message goes by its receiver's connected channel; while that channel is prepared it waits
//! in it; to a node without a channel (the scheduler, another worker) it goes over the ZMQ van.

use super::channels::Channels;
use super::device::Device;
use super::poller::Poller;
use super::RdmaConfig;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::zmq::{ZmqOptions, ZmqVan};
use crate::van::{Registration, RemoteMemory, Van, VanEvent, WriteSource};
use crate::wire::{Message, NodeId};
use crossbeam_channel::{Receiver, Sender};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::AccessFlags;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the van's caller threads, the poller and the bootstrap thread share. Field order is
/// drop order: channels (QPs, memory regions) and registrations before the device (PD, CQs).
pub(super) struct VanState {
    /// Channels by peer.
    pub channels: Channels,
    /// Scheduler traffic, messages to nodes without a channel, and the bootstrap.
    pub zmq: Arc<ZmqVan>,
    /// Registered memory: the node's pool and key-store chunks, each registered once, by
    /// start address, with the bytes it pins (whole pages).
    pub mrs: Mutex<Vec<(usize, usize, Arc<MemoryRegion>)>>,
    /// The device, PD and shared CQs.
    pub dev: Device,
    /// This node's id (-1 until the scheduler assigned it).
    pub me: AtomicI32,
    /// Where the poller and the bootstrap thread put events for [`Van::recv`].
    pub events: Sender<Result<VanEvent>>,
    /// Set by [`Van::stop`]: the threads end.
    pub stop: AtomicBool,
    /// How long one send may wait for credits or send-queue room (`PS_TIMEOUT`).
    pub send_timeout: Duration,
}

impl Drop for VanState {
    /// The registrations still held end with the state: they no longer count as registered.
    fn drop(&mut self) {
        let mrs = self.mrs.get_mut().unwrap_or_else(|p| p.into_inner());
        let held: usize = mrs.iter().map(|&(_, len, _)| len).sum();
        crate::van::memlock::REGISTERED.dec_by(held as i64);
    }
}

/// The RDMA van. See the [module docs](super).
pub struct RdmaVan {
    state: Arc<VanState>,
    rx: Receiver<Result<VanEvent>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl RdmaVan {
    /// Opens the device of `cfg` and starts the poller thread. Each send waits at most
    /// `zmq.send_timeout` for credits and send-queue room. The bootstrap's ZMQ van is made
    /// with `zmq` (its token: [`crate::auth`]).
    ///
    /// # Errors
    /// [`Error::Config`] naming what is missing (library, device, port, GID) and the ZMQ van as
    /// the alternative; [`Error::Van`] when the CQs, the PD, the ZMQ van or the thread cannot
    /// be made.
    pub fn new(cfg: RdmaConfig, zmq: ZmqOptions) -> Result<RdmaVan> {
        let send_timeout = zmq.send_timeout;
        let dev = Device::open(cfg)?;
        let (events, rx) = crossbeam_channel::unbounded();
        let state = Arc::new(VanState {
            channels: Channels::default(),
            zmq: Arc::new(ZmqVan::new(zmq)?),
            mrs: Mutex::new(Vec::new()),
            dev,
            me: AtomicI32::new(-1),
            events,
            stop: AtomicBool::new(false),
            send_timeout,
        });
        let poller = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("rdma-poller".into())
                .spawn(move || Poller::run(state))
                .map_err(|e| Error::Van(format!("cannot start the CQ poller: {e}")))?
        };
        Ok(RdmaVan {
            state,
            rx,
            threads: Mutex::new(vec![poller]),
        })
    }
}

impl Van for RdmaVan {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        crate::van::stats::register(registry);
    }

    fn bind(&self, host: &str, port: u16) -> Result<u16> {
        let port = self.state.zmq.bind(host, port)?;
        let state = self.state.clone();
        let t = std::thread::Builder::new()
            .name("rdma-bootstrap".into())
            .spawn(move || state.bootstrap_loop())
            .map_err(|e| Error::Van(format!("cannot start the bootstrap thread: {e}")))?;
        lock(&self.threads).push(t);
        Ok(port)
    }

    fn set_node_id(&self, id: NodeId) {
        self.state.me.store(id, Ordering::Release);
        self.state.zmq.set_node_id(id);
    }

    fn set_reach(&self, reach: Vec<(NodeId, String)>) {
        self.state.zmq.set_reach(reach);
    }

    fn connect(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        self.state.connect(id, host, port)
    }

    fn answer_joiner(&self, host: &str, port: u16, msg: Message) -> Result<()> {
        self.state.zmq.answer_joiner(host, port, msg)
    }

    fn replace_peer(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        self.state.replace(id, host, port)
    }

    fn send(&self, msg: Message) -> Result<usize> {
        let s = &self.state;
        if let Some(c) = s.channels.connected(msg.meta.recver) {
            return c.send(msg, s.send_timeout);
        }
        let n = msg.data_bytes();
        let Some(msg) = s.channels.queue_if_prepared(msg)? else {
            return Ok(n);
        };
        match s.channels.connected(msg.meta.recver) {
            Some(c) => c.send(msg, s.send_timeout),
            None => s.zmq.send(msg),
        }
    }

    fn recv(&self, timeout: Duration) -> Result<Option<VanEvent>> {
        match self.rx.recv_timeout(timeout) {
            Ok(Ok(m)) => Ok(Some(m)),
            Ok(Err(e)) => Err(e),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Ok(None),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Error::Stopped),
        }
    }

    fn stop(&self) {
        self.state.stop.store(true, Ordering::Release);
        let threads: Vec<_> = lock(&self.threads).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
        self.state.zmq.stop();
        self.state.channels.clear();
    }

    fn abort(&self) {
        self.state.zmq.abort();
        self.stop();
    }

    fn peer_lost(&self, peer: Option<NodeId>, why: &str) {
        let channels = match peer {
            Some(p) => self.state.channels.connected(p).into_iter().collect(),
            None => self.state.channels.all_connected(),
        };
        for c in channels {
            // A sender waiting for this peer's credits wakes and returns the error.
            let _ = c.fail(why.to_string());
        }
    }

    fn remote_memory(&self) -> Option<&dyn RemoteMemory> {
        Some(self)
    }
}

impl RemoteMemory for RdmaVan {
    unsafe fn register_memory(
        &self,
        addr: usize,
        len: usize,
        remote_write: bool,
    ) -> Result<Registration> {
        let acc = if remote_write {
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite
        } else {
            AccessFlags::none() // local reads only: the source of our writes
        };
        // SAFETY: the caller keeps the memory allocated while it is registered.
        let mr = unsafe { self.state.dev.pd.reg_mr(addr, len, acc) }.map_err(|e| {
            Error::Van(format!(
                "cannot register {len} bytes of memory for RDMA (PS_POOL_BYTES, or a key \
                 store's chunk): {e}; {}",
                crate::van::memlock::diagnose(len as u64)
            ))
        })?;
        let pinned = crate::van::memlock::pinned(addr, len);
        crate::van::memlock::REGISTERED.inc_by(pinned as i64);
        let keys = Registration {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        lock(&self.state.mrs).push((addr, pinned as usize, mr));
        Ok(keys)
    }

    fn deregister_memory(&self, addr: usize) {
        lock(&self.state.mrs).retain(|&(a, pinned, _)| {
            if a == addr {
                crate::van::memlock::REGISTERED.dec_by(pinned as i64);
            }
            a != addr
        });
    }

    /// True once the channel to `to` is connected (before, a write could only be declined).
    fn can_write(&self, to: NodeId) -> bool {
        self.state.channels.connected(to).is_some()
    }

    fn write_imm(
        &self,
        to: NodeId,
        src: WriteSource,
        addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<bool> {
        match self.state.channels.connected(to) {
            Some(c) => c.write_imm(src, addr, rkey, imm, self.state.send_timeout),
            None => Ok(false), // no channel, or not connected yet: the message path
        }
    }
}
