//! The RDMA van over libibverbs (through `sideway`): Model3 rings with credits.
//!
//! Per worker↔server pair: one RC QP; a registered receive ring (the peer writes records into
//! it), a registered send ring (its mirror here, the source of our writes), a registered credit
//! word (the peer writes how far it consumed our records) and a credit source (what we write into
//! the peer's credit word). All QPs share one send CQ and one receive CQ, drained by one poller
//! thread. Ring offsets and credits are the sans-IO [`crate::van::ring`]; this file only moves
//! bytes.
//!
//! A message in the ring is a frame container: `u32` frame count, `u64` length of each frame,
//! then the frames (frame 0 is the bincode [`crate::wire::Meta`]); messages larger than a record
//! are fragmented ([`crate::van::ring::fragments`]), so any size works whatever the ring size.
//!
//! Immediates: a record write carries `0xFFFF_FFFF` (the record is at the receiver's head); a
//! padding header and the credit word are plain RDMA WRITEs (no immediate, no receive WR used).
//! Receive WRs carry the peer's node id as `wr_id` (the shared receive CQ does not say which QP
//! a completion came from); signaled send WRs carry the peer id and the number of WRs they
//! complete. Every receive WR consumed is posted again; records never outnumber the posted WRs
//! (minimum record size, [`crate::van::ring::min_record`]). A failed WC (RNR, retry exceeded, …)
//! fails the channel: later sends to that peer return an error with the WC status text.

use super::{unavailable, RdmaConfig};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::ring::{
    fragments, min_record, Header, HeaderBytes, Reassembler, RingReceiver, RingSender, HEADER,
};
use crate::van::{zmq::ZmqVan, Registration, RemoteWrite, Van, VanEvent, WriteSource};
use crate::wire::container::{self, ContainerError};
use crate::wire::{Command, Control, Message, Meta, Node, NodeId};
use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{BasicCompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Immediate of a ring record (the seed's control-message immediate).
const IMM_RECORD: u32 = 0xFFFF_FFFF;
/// One send WR in this many is signaled.
const SIGNAL_EVERY: u32 = 16;

/// What each side of a pair tells the other over ZMQ (VanConnect, bincode in frame 0).
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Endpoint {
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
    lid: u16,
    mtu: u32,
    ring_addr: u64,
    ring_rkey: u32,
    ring_bytes: u64,
    min_record: u64,
    credit_addr: u64,
    credit_rkey: u32,
}

/// Registered memory, 64-byte aligned.
struct Buf {
    mem: Box<[u64]>,
    mr: Arc<MemoryRegion>,
}

impl Buf {
    fn new(pd: &Arc<ProtectionDomain>, bytes: usize) -> Result<Buf> {
        let words = bytes.div_ceil(8).max(8);
        let mem = vec![0u64; words + 8].into_boxed_slice();
        let acc = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // SAFETY: the region stays registered while `mem` lives (both are dropped together, the
        // MR first: field order).
        let mr = unsafe { pd.reg_mr(mem.as_ptr() as usize, words * 8, acc) }
            .map_err(|e| Error::Van(format!("cannot register {bytes} bytes of memory: {e}")))?;
        Ok(Buf { mem, mr })
    }

    fn ptr(&self) -> *mut u8 {
        self.mem.as_ptr() as *mut u8
    }

    fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
}

/// The device, its protection domain and the two shared CQs.
struct Device {
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<BasicCompletionQueue>,
    recv_cq: Arc<BasicCompletionQueue>,
    _ctx: Arc<DeviceContext>,
    cfg: RdmaConfig,
    port: u8,
    gid_index: Option<u8>,
    gid: [u8; 16],
    lid: u16,
    mtu: u32,
    ethernet: bool,
}

fn mtu_bytes(m: Mtu) -> u32 {
    match m {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

fn mtu_of(bytes: u32) -> Mtu {
    match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

fn libibverbs_loadable() -> bool {
    let name = c"libibverbs.so.1";
    // SAFETY: dlopen/dlclose with a valid C string; the handle is closed at once.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
    }
    true
}

impl Device {
    fn open(cfg: RdmaConfig) -> Result<Device> {
        if !libibverbs_loadable() {
            return Err(unavailable("libibverbs.so.1 cannot be loaded (Debian: apt-get install libibverbs1 ibverbs-providers)"));
        }
        let list =
            DeviceList::new().map_err(|e| unavailable(format!("cannot list RDMA devices: {e}")))?;
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        if names.is_empty() {
            return Err(unavailable("no RDMA device found (ibv_devices lists none)"));
        }
        let mut chosen = None;
        for dev in list.iter() {
            if cfg.device.as_deref().is_some_and(|want| want != dev.name()) {
                continue;
            }
            let ctx = dev
                .open()
                .map_err(|e| unavailable(format!("cannot open {}: {e}", dev.name())))?;
            let port = ctx.query_port(cfg.port).map_err(|e| {
                unavailable(format!(
                    "{} port {} (RDMA_DEVICE_PORT): {e}",
                    dev.name(),
                    cfg.port
                ))
            })?;
            if port.port_state() == PortState::Active || cfg.device.is_some() {
                chosen = Some((dev.name(), ctx, port));
                break;
            }
        }
        let Some((name, ctx, port)) = chosen else {
            return Err(unavailable(match &cfg.device {
                Some(d) => format!("RDMA_DEVICE={d:?} is not among the devices {names:?}"),
                None => format!(
                    "no RDMA device has an active port {} (devices: {names:?})",
                    cfg.port
                ),
            }));
        };
        if port.port_state() != PortState::Active {
            return Err(unavailable(format!(
                "{name} port {} is not active",
                cfg.port
            )));
        }
        let ethernet = port.link_layer() == LinkLayer::Ethernet;
        let gid_index = match cfg.gid_index {
            Some(i) => Some(i),
            None if ethernet => Some(roce_v2_gid(&ctx, cfg.port, port.gid_tbl_len()).ok_or_else(
                || {
                    unavailable(format!(
                        "{name} port {} has no RoCE v2 GID; set RDMA_GID_INDEX",
                        cfg.port
                    ))
                },
            )?),
            None => None,
        };
        let gid = match gid_index {
            Some(i) => {
                ctx.query_gid(cfg.port, i)
                    .map_err(|e| {
                        unavailable(format!("{name}: GID index {i} (RDMA_GID_INDEX): {e}"))
                    })?
                    .raw
            }
            None => [0; 16],
        };
        let mtu = cfg
            .mtu
            .unwrap_or_else(|| mtu_bytes(port.active_mtu()))
            .min(mtu_bytes(port.active_mtu()));
        let depth = cfg.queue_depth;
        // Basic CQs (ibv_poll_cq): rxe's extended-CQ poll advances past the producer when
        // ibv_next_poll and ibv_end_poll are both used, replaying stale completions.
        let cq = |what: &str| {
            ctx.create_cq_builder()
                .setup_cqe(depth * 8)
                .build()
                .map_err(|e| Error::Van(format!("{name}: cannot create the {what} CQ: {e}")))
        };
        let send_cq = cq("send")?;
        let recv_cq = cq("receive")?;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| Error::Van(format!("{name}: cannot allocate a PD: {e}")))?;
        tracing::info!(
            "RDMA van on {name} port {} gid index {gid_index:?} mtu {mtu}",
            cfg.port
        );
        Ok(Device {
            pd,
            send_cq,
            recv_cq,
            _ctx: ctx,
            port: cfg.port,
            gid_index: gid_index.map(|i| i as u8),
            gid,
            lid: port.lid(),
            mtu,
            ethernet,
            cfg,
        })
    }
}

/// The first RoCE v2 GID of the port, IPv4-mapped ones first.
fn roce_v2_gid(ctx: &Arc<DeviceContext>, port: u8, len: i32) -> Option<u32> {
    let mut any = None;
    for i in 0..len.clamp(0, 256) as u32 {
        let Ok(gid) = ctx.query_gid(port, i) else {
            continue;
        };
        if gid.is_zero() || ctx.query_gid_type(port, i).ok() != Some(1) {
            continue;
        }
        if gid.raw[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] {
            return Some(i);
        }
        any.get_or_insert(i);
    }
    any
}

struct ChanState {
    sender: Option<RingSender>,
    receiver: RingReceiver,
    queued: VecDeque<Message>,
    failed: Option<String>,
    unsignaled: u32,
    outstanding: u32,
    reassembly: Reassembler,
    /// Send WRs posted / known complete, counted from the start.
    posted: u64,
    completed: u64,
    /// What keeps the sources of content writes alive and unchanged, with their WR's sequence
    /// number, until the write completed.
    held: VecDeque<(u64, Box<dyn Send>)>,
}

/// One RDMA WRITE (with immediate when `imm` is set) from registered local memory.
#[derive(Clone, Copy)]
struct Wr {
    local: u64,
    len: u32,
    lkey: u32,
    remote: u64,
    rkey: u32,
    imm: Option<u32>,
    /// Always ask for a completion (its source buffer is released on it).
    signal: bool,
}

/// One worker↔server pair.
struct Channel {
    peer: NodeId,
    qp: Mutex<ExtendedQueuePair>,
    psn: u32,
    send_ring: Buf,
    recv_ring: Buf,
    credit_in: Buf,
    credit_out: Buf,
    ring_bytes: u64,
    min_record: u64,
    remote: Mutex<Option<Endpoint>>,
    /// Held for the whole of one message's records: a sender waiting for credits mid-message
    /// releases `st`, and another message's records must not come between its fragments (the
    /// receiver reassembles them in order). Lock order: `send`, then `st`.
    send: Mutex<()>,
    st: Mutex<ChanState>,
    cv: Condvar,
}

impl Channel {
    /// Posts `wrs` if the send queue has room for them; `Ok(false)` when it has not (the caller
    /// waits for send completions, or — the poller — tries again later). Once half the queue is
    /// outstanding every WR is signaled, so a waiter is always covered by a coming completion.
    fn try_post(&self, st: &mut ChanState, depth: u32, wrs: &[Wr]) -> Result<bool> {
        if let Some(f) = &st.failed {
            return Err(Error::Van(f.clone()));
        }
        if st.outstanding + wrs.len() as u32 + 1 >= depth {
            return Ok(false);
        }
        let mut qp = lock(&self.qp);
        let mut g = qp.start_post_send();
        for wr in wrs {
            st.outstanding += 1;
            st.unsignaled += 1;
            st.posted += 1;
            let signal = wr.signal || st.unsignaled >= SIGNAL_EVERY || st.outstanding >= depth / 2;
            let wr_id = ((self.peer as u64) << 32) | st.unsignaled as u64;
            if signal {
                st.unsignaled = 0;
            }
            let flags = if signal {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            let h = g.construct_wr(wr_id, flags);
            let h = match wr.imm {
                Some(i) => h.setup_write_imm(wr.rkey, wr.remote, i.to_be()),
                None => h.setup_write(wr.rkey, wr.remote),
            };
            // SAFETY: the local range lies in a registered buffer of this channel, which outlives
            // the WR (buffers are dropped after the QP).
            unsafe { h.setup_sge(wr.lkey, wr.local, wr.len) };
        }
        g.post().map_err(|e| {
            Error::Van(format!("post to {} failed: {e}", Node::describe(self.peer)))
        })?;
        Ok(true)
    }

    fn fail(&self, why: String) {
        let mut st = lock(&self.st);
        if st.failed.is_none() {
            tracing::error!("RDMA channel to {}: {why}", Node::describe(self.peer));
            st.failed = Some(format!(
                "RDMA channel to {} failed: {why}",
                Node::describe(self.peer)
            ));
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Reads the credit word the peer writes (its consumed position of our records).
    fn credit_word(&self) -> u64 {
        // SAFETY: 8 aligned bytes of our registered buffer; the HCA writes it, so read volatile.
        u64::from_le(unsafe { std::ptr::read_volatile(self.credit_in.ptr() as *const u64) })
    }

    fn ring_write(buf: &Buf, at: u64, bytes: &[u8]) {
        // SAFETY: callers keep `at + bytes.len()` within the ring (the ring state machine's
        // placements do).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr().add(at as usize), bytes.len())
        }
    }

    fn header(buf: &Buf, at: u64) -> HeaderBytes {
        let mut h = [0u8; HEADER as usize];
        // SAFETY: the ring state machine only asks for offsets within the ring; volatile because
        // the HCA writes the ring.
        for (i, b) in h.iter_mut().enumerate() {
            *b = unsafe { std::ptr::read_volatile(buf.ptr().add(at as usize + i)) };
        }
        h
    }
}

/// State shared with the poller and bootstrap threads.
struct Inner {
    // Channels (QPs, MRs) before the device (PD, CQs): fields drop in order.
    chans: RwLock<HashMap<NodeId, Arc<Channel>>>,
    zmq: Arc<ZmqVan>,
    /// Registered memory: the node's pool and key-store chunks, each registered once (the MRs
    /// go before the device).
    mrs: Mutex<Vec<(usize, Arc<MemoryRegion>)>>,
    dev: Device,
    early: Mutex<HashMap<NodeId, Endpoint>>,
    me: AtomicI32,
    tx: Sender<Result<VanEvent>>,
    stop: AtomicBool,
    send_timeout: Duration,
}

/// The RDMA van. See the module docs.
pub struct RdmaVan {
    inner: Arc<Inner>,
    rx: Receiver<Result<VanEvent>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn wc_status_text(s: u32) -> String {
    let t = match s {
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "work request flushed error",
        7 => "bad response error",
        8 => "local access error",
        9 => "remote invalid request error",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        21 => "fatal error",
        22 => "response timeout error",
        23 => "general error",
        _ => "error",
    };
    format!("WC status {s} ({t})")
}

impl RdmaVan {
    /// Opens the device of `cfg` and starts the poller thread.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is missing (library, device, port, GID) and the ZMQ van as
    /// the alternative.
    pub fn new(cfg: RdmaConfig, send_timeout: Duration) -> Result<RdmaVan> {
        let dev = Device::open(cfg)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let inner = Arc::new(Inner {
            zmq: Arc::new(ZmqVan::new(send_timeout)?),
            mrs: Mutex::new(Vec::new()),
            dev,
            chans: RwLock::new(HashMap::new()),
            early: Mutex::new(HashMap::new()),
            me: AtomicI32::new(-1),
            tx,
            stop: AtomicBool::new(false),
            send_timeout,
        });
        let poller = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("rdma-poller".into())
                .spawn(move || inner.poll_loop())
                .map_err(|e| Error::Van(format!("cannot start the CQ poller: {e}")))?
        };
        Ok(RdmaVan {
            inner,
            rx,
            threads: Mutex::new(vec![poller]),
        })
    }
}

impl Inner {
    fn chan(&self, id: NodeId) -> Option<Arc<Channel>> {
        self.chans.read().ok().and_then(|c| c.get(&id).cloned())
    }

    fn create_channel(&self, peer: NodeId) -> Result<Arc<Channel>> {
        let d = &self.dev;
        let depth = d.cfg.queue_depth;
        let mut qp =
            d.pd.create_qp_builder()
                .setup_send_cq(GenericCompletionQueue::from(Arc::clone(&d.send_cq)))
                .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(&d.recv_cq)))
                .setup_max_send_wr(depth)
                .setup_max_recv_wr(depth)
                .build_ex()
                .map_err(|e| {
                    Error::Van(format!(
                        "cannot create a QP for {}: {e}",
                        Node::describe(peer)
                    ))
                })?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(d.cfg.pkey_index)
            .setup_port(d.port)
            .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
        qp.modify(&attr)
            .map_err(|e| Error::Van(format!("QP for {} to INIT: {e}", Node::describe(peer))))?;
        for _ in 0..depth {
            let mut g = qp.start_post_recv();
            let _ = g.construct_wr(peer as u64);
            g.post()
                .map_err(|e| Error::Van(format!("cannot post receive WRs: {e}")))?;
        }
        let ring_bytes = d.cfg.ring_bytes / 64 * 64;
        let min_rec = min_record(ring_bytes, depth as u64);
        let psn = (std::process::id().wrapping_mul(2_654_435_761) ^ peer as u32) & 0xFF_FFFF;
        Ok(Arc::new(Channel {
            peer,
            qp: Mutex::new(qp),
            psn,
            send_ring: Buf::new(&d.pd, ring_bytes as usize)?,
            recv_ring: Buf::new(&d.pd, ring_bytes as usize)?,
            credit_in: Buf::new(&d.pd, 64)?,
            credit_out: Buf::new(&d.pd, 64)?,
            ring_bytes,
            min_record: min_rec,
            remote: Mutex::new(None),
            send: Mutex::new(()),
            st: Mutex::new(ChanState {
                sender: None,
                receiver: RingReceiver::with_min_record(ring_bytes, min_rec),
                queued: VecDeque::new(),
                failed: None,
                unsignaled: 0,
                outstanding: 0,
                reassembly: Reassembler::new(),
                posted: 0,
                completed: 0,
                held: VecDeque::new(),
            }),
            cv: Condvar::new(),
        }))
    }

    fn endpoint(&self, c: &Channel) -> Endpoint {
        let qpn = lock(&c.qp).qp_number();
        Endpoint {
            qpn,
            psn: c.psn,
            gid: self.dev.gid,
            lid: self.dev.lid,
            mtu: self.dev.mtu,
            ring_addr: c.recv_ring.addr(),
            ring_rkey: c.recv_ring.mr.rkey(),
            ring_bytes: c.ring_bytes,
            min_record: c.min_record,
            credit_addr: c.credit_in.addr(),
            credit_rkey: c.credit_in.mr.rkey(),
        }
    }

    /// Moves the QP to RTR and RTS with the peer's endpoint, then sends what waited.
    fn establish(&self, c: &Arc<Channel>, remote: Endpoint) -> Result<()> {
        let d = &self.dev;
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Error::Van(format!("QP for {} to {what}: {e}", Node::describe(c.peer)))
        };
        {
            let mut qp = lock(&c.qp);
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::ReadyToReceive)
                .setup_path_mtu(mtu_of(d.mtu.min(remote.mtu)))
                .setup_dest_qp_num(remote.qpn)
                .setup_rq_psn(remote.psn)
                .setup_max_dest_read_atomic(1)
                .setup_min_rnr_timer(12);
            let mut ah = AddressHandleAttribute::new();
            ah.setup_port(d.port)
                .setup_service_level(d.cfg.sl)
                .setup_dest_lid(remote.lid);
            if let (Some(sgid), true) = (d.gid_index, d.ethernet || remote.gid != [0; 16]) {
                ah.setup_grh(&Gid { raw: remote.gid }, 0, sgid, 64, d.cfg.traffic_class);
            }
            attr.setup_address_vector(&ah);
            qp.modify(&attr).map_err(|e| fail("RTR", &e))?;
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::ReadyToSend)
                .setup_sq_psn(c.psn)
                .setup_timeout(d.cfg.timeout)
                .setup_retry_cnt(d.cfg.retry_count)
                .setup_rnr_retry(7)
                .setup_max_read_atomic(1);
            qp.modify(&attr).map_err(|e| fail("RTS", &e))?;
        }
        let _whole = lock(&c.send);
        let mut st = lock(&c.st);
        st.sender = Some(RingSender::with_min_record(
            remote.ring_bytes,
            remote.min_record,
        ));
        *lock(&c.remote) = Some(remote);
        tracing::debug!("RDMA channel to {} is up", Node::describe(c.peer));
        while let Some(msg) = st.queued.pop_front() {
            st = self.write_message(c, st, msg)?;
        }
        drop(st);
        c.cv.notify_all();
        Ok(())
    }

    fn on_bootstrap(&self, msg: &Message) {
        let peer = msg.meta.sender;
        let decoded = msg.data.first().map(|b| {
            bincode::serde::decode_from_slice::<Endpoint, _>(b, bincode::config::standard())
        });
        let Some(Ok((remote, _))) = decoded else {
            tracing::warn!(
                "dropped a malformed RDMA bootstrap from {}",
                Node::describe(peer)
            );
            return;
        };
        match self.chan(peer) {
            Some(c) => {
                if let Err(e) = self.establish(&c, remote) {
                    c.fail(e.to_string());
                }
            }
            None => {
                lock(&self.early).insert(peer, remote);
            }
        }
    }

    /// Writes `msg` into the peer's ring, record by record, waiting for credits and send-queue
    /// room with the send deadline.
    fn write_message<'a>(
        &self,
        c: &'a Channel,
        mut st: MutexGuard<'a, ChanState>,
        msg: Message,
    ) -> Result<MutexGuard<'a, ChanState>> {
        let bytes = container::encode(msg)?;
        let deadline = Instant::now() + self.send_timeout;
        let depth = self.dev.cfg.queue_depth;
        let Some(remote) = lock(&c.remote).clone() else {
            return Err(Error::Van(format!(
                "RDMA channel to {} is not connected",
                Node::describe(c.peer)
            )));
        };
        let max = st.sender.as_ref().map_or(1, |s| s.max_payload());
        for (a, b, more) in fragments(bytes.len() as u64, max) {
            let p = loop {
                if let Some(f) = &st.failed {
                    return Err(Error::Van(f.clone()));
                }
                let word = c.credit_word();
                let sender = st
                    .sender
                    .as_mut()
                    .ok_or_else(|| Error::Van("channel not connected".into()))?;
                if let Err(e) = sender.credit(word) {
                    drop(st);
                    c.fail(e.clone());
                    return Err(Error::Van(e));
                }
                if let Some(p) = sender.reserve(b - a) {
                    break p;
                }
                if Instant::now() >= deadline {
                    return Err(Error::Van(format!(
                        "{} returned no credits within {:.0} s: its receive ring stays full",
                        Node::describe(c.peer),
                        self.send_timeout.as_secs_f64()
                    )));
                }
                st =
                    c.cv.wait_timeout(st, Duration::from_micros(200))
                        .map_err(|_| Error::Stopped)?
                        .0;
            };
            tracing::trace!(
                "record to {}: offset {} pad {:?} payload {}",
                Node::describe(c.peer),
                p.offset,
                p.pad_at,
                b - a
            );
            let head = Header::record((b - a) as u32, more).encode();
            Channel::ring_write(&c.send_ring, p.offset, &head);
            Channel::ring_write(
                &c.send_ring,
                p.offset + HEADER,
                &bytes[a as usize..b as usize],
            );
            let lkey = c.send_ring.mr.lkey();
            let mut wrs = Vec::with_capacity(2);
            if let Some(pad) = p.pad_at {
                Channel::ring_write(&c.send_ring, pad, &Header::padding().encode());
                wrs.push(Wr {
                    local: c.send_ring.addr() + pad,
                    len: 8,
                    lkey,
                    remote: remote.ring_addr + pad,
                    rkey: remote.ring_rkey,
                    imm: None,
                    signal: false,
                });
            }
            wrs.push(Wr {
                local: c.send_ring.addr() + p.offset,
                len: (HEADER + (b - a)) as u32,
                lkey,
                remote: remote.ring_addr + p.offset,
                rkey: remote.ring_rkey,
                imm: Some(IMM_RECORD),
                signal: false,
            });
            while !c.try_post(&mut st, depth, &wrs)? {
                if Instant::now() >= deadline {
                    return Err(Error::Van(format!(
                        "the send queue to {} stays full",
                        Node::describe(c.peer)
                    )));
                }
                st =
                    c.cv.wait_timeout(st, Duration::from_micros(200))
                        .map_err(|_| Error::Stopped)?
                        .0;
            }
        }
        Ok(st)
    }

    fn send(&self, c: &Arc<Channel>, msg: Message) -> Result<usize> {
        let n = msg.data_bytes();
        let _whole = lock(&c.send);
        let mut st = lock(&c.st);
        if let Some(f) = &st.failed {
            return Err(Error::Van(f.clone()));
        }
        if st.sender.is_none() || !st.queued.is_empty() {
            st.queued.push_back(msg);
            return Ok(n);
        }
        drop(self.write_message(c, st, msg)?);
        Ok(n)
    }

    /// The poller: drains the shared receive CQ (records → messages, receive WRs re-posted,
    /// credits returned) and the shared send CQ (send-queue room, WC errors).
    fn poll_loop(self: Arc<Self>) {
        let mut idle = 0u32;
        let mut owed = false;
        let depth = self.dev.cfg.queue_depth;
        while !self.stop.load(Ordering::Acquire) {
            let mut recvs = Vec::new();
            if let Ok(mut p) = self.dev.recv_cq.start_poll() {
                for wc in p.by_ref() {
                    recvs.push((
                        wc.wr_id(),
                        wc.status(),
                        u32::from_be(wc.imm_data()),
                        wc.byte_len(),
                    ));
                }
            }
            let mut sends = Vec::new();
            if let Ok(mut p) = self.dev.send_cq.start_poll() {
                for wc in p.by_ref() {
                    sends.push((wc.wr_id(), wc.status()));
                }
            }
            let busy = !recvs.is_empty() || !sends.is_empty();
            for (wr_id, status, imm, byte_len) in recvs {
                let Some(c) = self.chan(wr_id as NodeId) else {
                    continue;
                };
                if status != 0 {
                    c.fail(format!("receive {}", wc_status_text(status)));
                    continue;
                }
                if imm == IMM_RECORD {
                    self.take_record(&c);
                } else {
                    // A write straight into registered memory (a rendezvous content write): the
                    // postoffice routes it by the immediate's slot.
                    let _ = self.tx.send(Ok(VanEvent::RemoteWrite(RemoteWrite {
                        from: c.peer,
                        imm,
                        len: byte_len,
                    })));
                }
                let reposted = {
                    let mut qp = lock(&c.qp);
                    let mut g = qp.start_post_recv();
                    let _ = g.construct_wr(c.peer as u64);
                    g.post()
                };
                if let Err(e) = reposted {
                    c.fail(format!("cannot re-post a receive WR: {e}"));
                }
            }
            for (wr_id, status) in sends {
                let Some(c) = self.chan((wr_id >> 32) as NodeId) else {
                    continue;
                };
                let mut st = lock(&c.st);
                let n = wr_id & 0xFFFF_FFFF;
                st.outstanding = st.outstanding.saturating_sub(n as u32);
                st.completed += n;
                // Content writes up to here have left: their pool buffers go back.
                while st.held.front().is_some_and(|(seq, _)| *seq <= st.completed) {
                    st.held.pop_front();
                }
                drop(st);
                if status != 0 {
                    c.fail(format!("send {}", wc_status_text(status)));
                }
                c.cv.notify_all();
            }
            // Return credits for everything consumed (the CQ is drained: forced). Credits only
            // fall due when records were consumed, and a credit whose post found the send queue
            // full can only go once send completions arrive: both make this round busy, so an
            // idle round has nothing to do here.
            if busy || owed {
                let all: Vec<Arc<Channel>> = self
                    .chans
                    .read()
                    .map(|m| m.values().cloned().collect())
                    .unwrap_or_default();
                owed = false;
                for c in all {
                    owed |= self.return_credits(&c, depth);
                }
            }
            if busy {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                if idle < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }

    /// Posts the credit write of `c` if one is due; true when it is still owed (the send queue
    /// was full).
    fn return_credits(&self, c: &Channel, depth: u32) -> bool {
        let Some(remote) = lock(&c.remote).clone() else {
            return false;
        };
        let mut st = lock(&c.st);
        let Some(pos) = st.receiver.credit_due(true) else {
            return false;
        };
        // SAFETY: 8 aligned bytes of our registered credit source; a write still reading an
        // older value may see this newer one, which only returns more credit.
        unsafe { std::ptr::write_volatile(c.credit_out.ptr() as *mut u64, pos.to_le()) };
        let wr = Wr {
            local: c.credit_out.addr(),
            len: 8,
            lkey: c.credit_out.mr.lkey(),
            remote: remote.credit_addr,
            rkey: remote.credit_rkey,
            imm: None,
            signal: false,
        };
        match c.try_post(&mut st, depth, &[wr]) {
            Ok(true) => {
                st.receiver.credit_sent(pos);
                false
            }
            Ok(false) => true, // the send queue is full: after the next send completions
            Err(_) => false,   // the channel failed; its senders see the error
        }
    }

    /// Copies the record at the receive ring's head out, and hands on a completed message.
    fn take_record(&self, c: &Channel) {
        let mut st = lock(&c.st);
        let rec = match st.receiver.next(|off| Channel::header(&c.recv_ring, off)) {
            Ok(r) => r,
            Err(e) => {
                drop(st);
                c.fail(format!(
                    "{} broke the ring protocol: {e}",
                    Node::describe(c.peer)
                ));
                return;
            }
        };
        tracing::trace!(
            "record from {}: payload at {} len {} more {}",
            Node::describe(c.peer),
            rec.payload_at,
            rec.len,
            rec.more
        );
        let mut payload = vec![0u8; rec.len as usize];
        // SAFETY: the record lies within the ring (checked by `next`); the peer will not write it
        // again before our credit says it was consumed.
        unsafe {
            std::ptr::copy_nonoverlapping(
                c.recv_ring.ptr().add(rec.payload_at as usize),
                payload.as_mut_ptr(),
                payload.len(),
            )
        };
        st.receiver.consume(&rec);
        let Some(whole) = st.reassembly.push(payload, rec.more) else {
            return;
        };
        drop(st);
        let event = match container::decode(Bytes::from(whole)) {
            Ok(msg) => Ok(VanEvent::Message(msg)),
            Err(ContainerError::Layout(why)) => Err(Error::Van(format!(
                "malformed message from the ring: {why}"
            ))),
            Err(ContainerError::Frames(e)) => Err(Error::Wire(e)),
        };
        let _ = self.tx.send(event);
    }

    /// Forwards ZMQ traffic (scheduler control, pre-QP messages) and handles QP bootstraps.
    fn zmq_loop(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            match self.zmq.recv(Duration::from_millis(100)) {
                Ok(Some(VanEvent::Message(msg)))
                    if msg.meta.command() == Some(Command::VanConnect) =>
                {
                    self.on_bootstrap(&msg)
                }
                Ok(Some(ev)) => {
                    let _ = self.tx.send(Ok(ev));
                }
                Ok(None) => {}
                Err(Error::Stopped) => return,
                Err(e) => {
                    let _ = self.tx.send(Err(e));
                }
            }
        }
    }
}

impl Van for RdmaVan {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn bind(&self, host: &str, port: u16) -> Result<u16> {
        let port = self.inner.zmq.bind(host, port)?;
        let inner = self.inner.clone();
        let t = std::thread::Builder::new()
            .name("rdma-bootstrap".into())
            .spawn(move || inner.zmq_loop())
            .map_err(|e| Error::Van(format!("cannot start the bootstrap thread: {e}")))?;
        lock(&self.threads).push(t);
        Ok(port)
    }

    fn set_node_id(&self, id: NodeId) {
        self.inner.me.store(id, Ordering::Release);
    }

    fn connect(&self, id: NodeId, host: &str, port: u16) -> Result<()> {
        let inner = &self.inner;
        inner.zmq.connect(id, host, port)?;
        let me = inner.me.load(Ordering::Acquire);
        if !Node::is_worker_server_pair(me, id) || inner.chan(id).is_some() {
            return Ok(());
        }
        let c = inner.create_channel(id)?;
        inner
            .chans
            .write()
            .map_err(|_| Error::Stopped)?
            .insert(id, c.clone());
        let ep = inner.endpoint(&c);
        let body = bincode::serde::encode_to_vec(&ep, bincode::config::standard())
            .map_err(|e| Error::Van(format!("cannot encode the QP endpoint: {e}")))?;
        let meta = Meta {
            sender: me,
            recver: id,
            control: Some(Control {
                cmd: Some(Command::VanConnect),
                ..Control::default()
            }),
            ..Meta::default()
        };
        inner.zmq.send(Message {
            meta,
            data: vec![Bytes::from(body)],
        })?;
        if let Some(remote) = lock(&inner.early).remove(&id) {
            inner.establish(&c, remote)?;
        }
        Ok(())
    }

    fn send(&self, msg: Message) -> Result<usize> {
        match self.inner.chan(msg.meta.recver) {
            Some(c) => self.inner.send(&c, msg),
            None => self.inner.zmq.send(msg),
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
        self.inner.stop.store(true, Ordering::Release);
        let threads: Vec<_> = lock(&self.threads).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
        self.inner.zmq.stop();
        if let Ok(mut c) = self.inner.chans.write() {
            c.clear();
        }
    }

    fn abort(&self) {
        self.inner.zmq.abort();
        self.stop();
    }

    unsafe fn register_memory(
        &self,
        addr: usize,
        len: usize,
        remote_write: bool,
    ) -> Result<Option<Registration>> {
        let acc = if remote_write {
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite
        } else {
            AccessFlags::none() // local reads only: the source of our writes
        };
        // SAFETY: the caller keeps the memory allocated while it is registered.
        let mr = unsafe { self.inner.dev.pd.reg_mr(addr, len, acc) }.map_err(|e| {
            Error::Van(format!(
                "cannot register {len} bytes of memory for RDMA (PS_POOL_BYTES, or a key store's chunk): {e}"
            ))
        })?;
        let keys = Registration {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        lock(&self.inner.mrs).push((addr, mr));
        Ok(Some(keys))
    }

    fn deregister_memory(&self, addr: usize) {
        lock(&self.inner.mrs).retain(|(a, _)| *a != addr);
    }

    fn can_write(&self, to: NodeId) -> bool {
        self.inner.chan(to).is_some()
    }

    fn write_imm(
        &self,
        to: NodeId,
        src: WriteSource,
        addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<bool> {
        let inner = &self.inner;
        let Some(c) = inner.chan(to) else {
            return Ok(false);
        };
        let Ok(len) = u32::try_from(src.len()) else {
            return Ok(false); // over one WR's reach: the message path fragments it
        };
        if len == 0 {
            return Ok(false);
        }
        let mut st = lock(&c.st);
        if st.sender.is_none() || !st.queued.is_empty() {
            return Ok(false); // not connected yet: the message path keeps the order
        }
        let wr = Wr {
            local: src.addr(),
            len,
            lkey: src.lkey(),
            remote: addr,
            rkey,
            imm: Some(imm),
            signal: true,
        };
        let deadline = Instant::now() + inner.send_timeout;
        let depth = inner.dev.cfg.queue_depth;
        while !c.try_post(&mut st, depth, &[wr])? {
            if Instant::now() >= deadline {
                return Err(Error::Van(format!(
                    "the send queue to {} stays full",
                    Node::describe(to)
                )));
            }
            st =
                c.cv.wait_timeout(st, Duration::from_micros(200))
                    .map_err(|_| Error::Stopped)?
                    .0;
        }
        let seq = st.posted;
        tracing::trace!(
            "content write of {len} bytes to {} (imm {imm:#x})",
            Node::describe(to)
        );
        st.held.push_back((seq, src.into_hold()));
        Ok(true)
    }
}
