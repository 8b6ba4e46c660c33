//! The postoffice: membership, node ids, key ranges, barriers, heartbeats and shutdown
//! (ps-lite's `Postoffice` and the control half of `Van::Receiving`). It never looks at payload
//! bytes: data messages are handed to the [`Customer`] registered for their [`Route`].
//!
//! Start-up (scheduler-driven, as ps-lite): every node binds its van, sends ADD_NODE to the
//! scheduler; once `DMLC_NUM_SERVER + DMLC_NUM_WORKER` nodes registered, the scheduler assigns ids
//! (server rank r → 8 + 2r, worker rank r → 9 + 2r, in order of registration) and sends the node
//! table to all; every node connects to its peers; a barrier of all nodes ends the start.
//! Every wait has a deadline (`PS_TIMEOUT`) except the final barrier of [`Postoffice::finalize`],
//! which waits as long as every missing node is alive (heartbeats, `PS_HEARTBEAT_TIMEOUT`).

pub mod barrier;
mod customer;
pub mod range;

pub use customer::{Customer, Route};
pub use range::Range;

use crate::config::{Config, VanType};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::pool::MemoryPool;
use crate::van::{zmq::ZmqVan, RemoteWrite, Van, VanEvent};
use crate::wire::{Command, Control, Message, Meta, Node, NodeId, Role};
use barrier::{BarrierBook, Outcome};
use crossbeam_channel::Sender;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The scheduler's node id.
pub const SCHEDULER: NodeId = 1;
/// Group of the scheduler.
pub const SCHEDULER_GROUP: i32 = 1;
/// Group of all servers.
pub const SERVER_GROUP: i32 = 2;
/// Group of all workers.
pub const WORKER_GROUP: i32 = 4;
/// Group of every node.
pub const ALL_GROUP: i32 = 7;

/// How often the receiving thread wakes to check deadlines.
const TICK: Duration = Duration::from_millis(100);
/// How long the receiving thread waits for a message before it looks whether the node stops:
/// `finalize` waits for it, so this bounds how long ending a node takes after its last barrier.
const RECV_TICK: Duration = Duration::from_millis(10);

/// How long a request for an application not (yet) served here is kept before it is refused:
/// a server's `KVServer` may register a moment after the start-up barrier (ps-lite waits 5 s).
const PARK: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Routes {
    open: HashMap<Route, Sender<VanEvent>>,
    parked: Vec<(Instant, Route, Message)>,
}

#[derive(Default)]
struct State {
    nodes: Vec<Node>,
    ready: bool,
    fatal: Option<Error>,
    barrier_result: Option<Result<()>>,
    /// The group of the barrier this node waits in.
    barrier_group: Option<i32>,
    last_from_scheduler: Option<Instant>,
    // Scheduler only.
    joining: Vec<Node>,
    book: BarrierBook,
    last_seen: HashMap<NodeId, Instant>,
    lost: BTreeSet<NodeId>,
}

/// One node's view of the cluster. Create it with [`Postoffice::start`]; end it with
/// [`Postoffice::finalize`].
pub struct Postoffice {
    cfg: Config,
    van: Arc<dyn Van>,
    me: RwLock<Node>,
    state: Mutex<State>,
    cv: Condvar,
    routes: Mutex<Routes>,
    stopped: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    ranges: Vec<Range>,
    barrier_lock: Mutex<()>,
    pool: std::sync::OnceLock<MemoryPool>,
    pool_init: Mutex<()>,
    imm_slots: Mutex<HashMap<u8, Route>>,
    /// Payload bytes (data frames, not headers) sent and received through the van.
    sent_bytes: std::sync::atomic::AtomicU64,
    received_bytes: std::sync::atomic::AtomicU64,
}

fn members_of(nodes: &[Node], group: i32) -> Vec<NodeId> {
    nodes
        .iter()
        .filter(|n| n.role.group() & group != 0)
        .map(|n| n.id)
        .collect()
}

/// The answer to a request: sender and receiver swapped, `request` cleared, ids echoed.
pub fn reply_meta(req: &Meta) -> Meta {
    Meta {
        head: req.head,
        app_id: req.app_id,
        customer_id: req.customer_id,
        timestamp: req.timestamp,
        sender: req.recver,
        recver: req.sender,
        request: false,
        push: req.push,
        pull: req.pull,
        dtype: req.dtype,
        ..Meta::default()
    }
}

impl Postoffice {
    /// Starts this node: binds the van, registers with the scheduler (or, on the scheduler,
    /// waits for every node), connects to the peers and passes the start-up barrier.
    ///
    /// # Errors
    /// [`Error::Config`] for a van this build lacks; [`Error::Van`] if the address cannot be
    /// bound; [`Error::Timeout`] if the scheduler does not answer (or, on the scheduler, the
    /// nodes do not all register) within `PS_TIMEOUT`, naming who is missing.
    pub fn start(cfg: Config) -> Result<Arc<Postoffice>> {
        let van: Arc<dyn Van> = match cfg.van {
            VanType::Zmq => Arc::new(ZmqVan::new(cfg.timeout)?),
            VanType::Rdma => crate::van::rdma::create(cfg.timeout)?,
        };
        Postoffice::start_with_van(cfg, van)
    }

    /// As [`Postoffice::start`] over a given van.
    pub fn start_with_van(cfg: Config, van: Arc<dyn Van>) -> Result<Arc<Postoffice>> {
        let is_scheduler = cfg.role == Role::Scheduler;
        let (host, port) = if is_scheduler {
            (cfg.root_uri.clone(), cfg.root_port)
        } else {
            (cfg.node_host.clone(), 0)
        };
        let port = van.bind(&host, port)?;
        if is_scheduler {
            van.set_node_id(SCHEDULER);
        }
        let me = Node {
            role: cfg.role,
            id: if is_scheduler { SCHEDULER } else { -1 },
            host,
            port,
            requested_rank: if is_scheduler { None } else { cfg.rank_hint },
        };
        let po = Arc::new(Postoffice {
            ranges: range::server_key_ranges(cfg.num_servers),
            cfg,
            van,
            me: RwLock::new(me.clone()),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            routes: Mutex::new(Routes::default()),
            stopped: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            barrier_lock: Mutex::new(()),
            pool: std::sync::OnceLock::new(),
            pool_init: Mutex::new(()),
            imm_slots: Mutex::new(HashMap::new()),
            sent_bytes: 0.into(),
            received_bytes: 0.into(),
        });
        po.spawn("ps-receive", Postoffice::receive_loop)?;
        if let Err(e) = po.join_cluster(&me) {
            if !is_scheduler {
                // Nothing queued is worth waiting for; the scheduler's refusals are.
                po.van.abort();
            }
            po.shutdown();
            return Err(e);
        }
        if !is_scheduler {
            po.spawn("ps-heartbeat", Postoffice::heartbeat_loop)?;
        }
        if let Err(e) = po.barrier_with(ALL_GROUP, Some(po.cfg.timeout)) {
            po.van.abort();
            po.shutdown();
            return Err(e);
        }
        tracing::info!(
            "{} started: {}:{}",
            Node::describe(po.my_id()),
            me.host,
            me.port
        );
        Ok(po)
    }

    fn spawn(self: &Arc<Self>, name: &str, f: fn(&Weak<Postoffice>)) -> Result<()> {
        let weak = Arc::downgrade(self);
        let t = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&weak))
            .map_err(|e| Error::Van(format!("cannot start thread {name}: {e}")))?;
        lock(&self.threads).push(t);
        Ok(())
    }

    fn join_cluster(&self, me: &Node) -> Result<()> {
        let deadline = Instant::now() + self.cfg.timeout;
        if me.role != Role::Scheduler {
            self.van
                .connect(SCHEDULER, &self.cfg.root_uri, self.cfg.root_port)?;
            let mut meta = Meta {
                recver: SCHEDULER,
                request: true,
                control: Some(Control {
                    cmd: Some(Command::AddNode),
                    nodes: vec![me.clone()],
                    ..Control::default()
                }),
                ..Meta::default()
            };
            meta.sender = -1;
            self.van.send(Message::new(meta))?;
        }
        let mut st = lock(&self.state);
        loop {
            if let Some(e) = st.fatal.clone() {
                return Err(e);
            }
            if st.ready {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                let secs = self.cfg.timeout.as_secs_f64();
                return Err(if me.role == Role::Scheduler {
                    let servers = st.joining.iter().filter(|n| n.role == Role::Server).count();
                    let workers = st.joining.len() - servers;
                    let msg = format!(
                        "start-up: within {secs:.0} s (PS_TIMEOUT) only {servers} of {} servers \
                         (DMLC_NUM_SERVER) and {workers} of {} workers (DMLC_NUM_WORKER) registered",
                        self.cfg.num_servers, self.cfg.num_workers
                    );
                    let joined = std::mem::take(&mut st.joining);
                    drop(st);
                    self.refuse_all(&joined, &msg);
                    Error::Timeout(msg)
                } else {
                    Error::Timeout(format!(
                        "start-up: no answer from the scheduler at {}:{} within {secs:.0} s \
                         (PS_TIMEOUT); is it running, and are DMLC_PS_ROOT_URI and \
                         DMLC_PS_ROOT_PORT right?",
                        self.cfg.root_uri, self.cfg.root_port
                    ))
                });
            }
            st = self
                .cv
                .wait_timeout(st, (deadline - now).min(TICK))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// This node's id (1 for the scheduler, 8 + 2r for server rank r, 9 + 2r for worker rank r).
    pub fn my_id(&self) -> NodeId {
        self.me.read().map(|m| m.id).unwrap_or(-1)
    }

    /// This node's rank among its role (0 for the scheduler).
    pub fn my_rank(&self) -> usize {
        Node::rank_of(self.my_id())
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.cfg.role
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Number of servers.
    pub fn num_servers(&self) -> usize {
        self.cfg.num_servers
    }

    /// Number of workers.
    pub fn num_workers(&self) -> usize {
        self.cfg.num_workers
    }

    /// Key ranges of the servers, in rank order (see [`range`]).
    pub fn server_key_ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// This node's registered memory pool (`PS_POOL_BYTES`), reserved — and registered with
    /// the van, which makes it a target of remote writes — on first use.
    ///
    /// # Errors
    /// [`Error::Van`] if the memory cannot be reserved or registered.
    pub fn pool(&self) -> Result<&MemoryPool> {
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let _one = lock(&self.pool_init);
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let p = MemoryPool::new(
            self.cfg.pool_bytes,
            0x5053_0000 | (self.my_id() as u32 & 0xffff),
        )?;
        // SAFETY: the pool lives as long as this postoffice, which drops the van first.
        if let Some(keys) = unsafe { self.van.register_memory(p.base(), p.size(), true) }? {
            p.set_keys(keys);
        }
        Ok(self.pool.get_or_init(|| p))
    }

    /// Reserves an immediate slot for `route`: remote writes whose immediate has this slot in
    /// its top 8 bits are delivered to `route` as [`VanEvent::RemoteWrite`]s. Slots 0–254.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when all 255 slots are taken.
    pub fn register_imm_slot(&self, route: Route) -> Result<u8> {
        let mut slots = lock(&self.imm_slots);
        let slot = (0..=254u8)
            .find(|s| !slots.contains_key(s))
            .ok_or_else(|| {
                Error::InvalidArgument("all 255 immediate slots of this process are taken".into())
            })?;
        slots.insert(slot, route);
        Ok(slot)
    }

    /// Frees an immediate slot.
    pub fn release_imm_slot(&self, slot: u8) {
        lock(&self.imm_slots).remove(&slot);
    }

    /// Whether the van can write into `to`'s registered memory (see [`Van::can_write`]).
    pub(crate) fn can_write(&self, to: NodeId) -> bool {
        self.van.can_write(to)
    }

    /// RDMA WRITE WITH IMMEDIATE through the van (see [`Van::write_imm`]); `Ok(false)` when the
    /// van cannot write to `to`.
    ///
    /// # Errors
    /// As [`Van::write_imm`].
    pub(crate) fn write_imm(
        &self,
        to: NodeId,
        src: crate::van::WriteSource,
        addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<bool> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        self.van.write_imm(to, src, addr, rkey, imm)
    }

    /// Registers `[addr, addr + len)` with the van as an RDMA write source (local reads only;
    /// see [`Van::register_memory`]): its keys, or `None` when the van registers nothing (ZMQ).
    ///
    /// # Safety
    /// As [`Van::register_memory`]: the memory stays allocated until
    /// [`deregister_memory`](Self::deregister_memory) or the postoffice is dropped.
    ///
    /// # Errors
    /// As [`Van::register_memory`].
    pub(crate) unsafe fn register_source(
        &self,
        addr: usize,
        len: usize,
    ) -> Result<Option<crate::van::Registration>> {
        // SAFETY: the caller's promise.
        unsafe { self.van.register_memory(addr, len, false) }
    }

    /// Ends the van's registrations starting at `addr` (see [`Van::deregister_memory`]).
    pub(crate) fn deregister_memory(&self, addr: usize) {
        self.van.deregister_memory(addr)
    }

    /// The node table (scheduler, servers, workers) as the scheduler sent it.
    pub fn nodes(&self) -> Vec<Node> {
        lock(&self.state).nodes.clone()
    }

    /// Sends `msg` with this node as sender.
    ///
    /// # Errors
    /// As [`Van::send`]; [`Error::Stopped`] after shutdown.
    pub fn send(&self, mut msg: Message) -> Result<usize> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        msg.meta.sender = self.my_id();
        let payload = msg.data_bytes() as u64;
        let n = self.van.send(msg)?;
        self.sent_bytes.fetch_add(payload, Ordering::Relaxed);
        Ok(n)
    }

    /// Payload bytes (data frames; headers not counted) this node sent and received so far:
    /// `(sent, received)`.
    pub fn payload_bytes(&self) -> (u64, u64) {
        (
            self.sent_bytes.load(Ordering::Relaxed),
            self.received_bytes.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn register(&self, route: Route, tx: Sender<VanEvent>) -> Result<()> {
        let mut routes = lock(&self.routes);
        if routes.open.contains_key(&route) {
            return Err(Error::InvalidArgument(format!(
                "{route:?} is already registered in this process"
            )));
        }
        // Hand over what arrived before the route existed, in arrival order.
        let parked = std::mem::take(&mut routes.parked);
        for (at, r, msg) in parked {
            if r == route {
                let _ = tx.send(VanEvent::Message(msg));
            } else {
                routes.parked.push((at, r, msg));
            }
        }
        routes.open.insert(route, tx);
        Ok(())
    }

    pub(crate) fn unregister(&self, route: Route) {
        lock(&self.routes).open.remove(&route);
    }

    /// Blocks until every node of `group` (sum of [`SCHEDULER_GROUP`], [`SERVER_GROUP`],
    /// [`WORKER_GROUP`]) called `barrier` with the same group.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming the nodes that did not arrive within `PS_TIMEOUT`;
    /// [`Error::PeerLost`] if the scheduler stops answering.
    pub fn barrier(&self, group: i32) -> Result<()> {
        self.barrier_with(group, Some(self.cfg.timeout))
    }

    fn barrier_with(&self, group: i32, timeout: Option<Duration>) -> Result<()> {
        let _one = lock(&self.barrier_lock);
        {
            let mut st = lock(&self.state);
            st.barrier_result = None;
            st.barrier_group = Some(group);
        }
        let me = self.my_id();
        if me == SCHEDULER {
            self.scheduler_barrier(SCHEDULER, group, timeout);
        } else {
            let meta = Meta {
                recver: SCHEDULER,
                request: true,
                control: Some(Control {
                    cmd: Some(Command::Barrier),
                    barrier_group: group,
                    barrier_timeout_ms: timeout.map_or(0, |t| t.as_millis() as u64),
                    ..Control::default()
                }),
                ..Meta::default()
            };
            self.send(Message::new(meta))?;
        }
        // The scheduler answers a timed barrier itself; this grace covers a scheduler that died.
        let deadline = timeout.map(|t| Instant::now() + t + Duration::from_secs(5));
        let mut st = lock(&self.state);
        loop {
            if let Some(r) = st.barrier_result.take() {
                return r;
            }
            if self.stopped.load(Ordering::Acquire) {
                return Err(Error::Stopped);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout(format!(
                    "barrier of group {group}: no answer from the scheduler (id 1)"
                )));
            }
            if me != SCHEDULER {
                if let Some(last) = st.last_from_scheduler {
                    if now.duration_since(last) > self.cfg.heartbeat_timeout {
                        return Err(Error::PeerLost(format!(
                            "scheduler (id 1): no answer to heartbeats for {:.0} s \
                             (PS_HEARTBEAT_TIMEOUT) while waiting in a barrier of group {group}",
                            self.cfg.heartbeat_timeout.as_secs_f64()
                        )));
                    }
                }
            }
            st = self
                .cv
                .wait_timeout(st, TICK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Ends this node: a barrier of all nodes (waiting while they are alive, without deadline,
    /// since workers may train for hours), then stops the van and the threads.
    ///
    /// # Errors
    /// [`Error::PeerLost`] naming a node that died before reaching the barrier.
    pub fn finalize(&self) -> Result<()> {
        let r = self.barrier_with(ALL_GROUP, None);
        self.shutdown();
        r
    }

    fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        self.cv.notify_all();
        let threads: Vec<_> = lock(&self.threads).drain(..).collect();
        let me = std::thread::current().id();
        for t in &threads {
            t.thread().unpark();
        }
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        self.van.stop();
    }

    // ---- receiving ----

    fn receive_loop(weak: &Weak<Postoffice>) {
        loop {
            let Some(po) = weak.upgrade() else { return };
            if po.stopped.load(Ordering::Acquire) {
                return;
            }
            match po.van.recv(RECV_TICK) {
                Ok(Some(VanEvent::Message(msg))) => {
                    po.received_bytes
                        .fetch_add(msg.data_bytes() as u64, Ordering::Relaxed);
                    po.process(msg)
                }
                Ok(Some(VanEvent::RemoteWrite(w))) => po.deliver_write(w),
                Ok(None) => {}
                Err(Error::Wire(e)) => tracing::warn!("dropped a message: {e}"),
                Err(Error::Stopped) => return,
                Err(e) => {
                    tracing::warn!("receive failed: {e}");
                    std::thread::sleep(TICK);
                }
            }
            if po.cfg.role == Role::Scheduler {
                po.scheduler_tick();
            }
            po.expire_parked();
        }
    }

    fn heartbeat_loop(weak: &Weak<Postoffice>) {
        let mut next = Instant::now();
        loop {
            let Some(po) = weak.upgrade() else { return };
            if po.stopped.load(Ordering::Acquire) {
                return;
            }
            if Instant::now() >= next {
                next = Instant::now() + po.cfg.heartbeat_interval;
                let meta = Meta {
                    recver: SCHEDULER,
                    request: true,
                    control: Some(Control {
                        cmd: Some(Command::Heartbeat),
                        ..Control::default()
                    }),
                    ..Meta::default()
                };
                if let Err(e) = po.send(Message::new(meta)) {
                    tracing::debug!("heartbeat not sent: {e}");
                }
            }
            drop(po);
            // Woken early by `shutdown`.
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }

    fn process(&self, msg: Message) {
        if msg.meta.sender == SCHEDULER {
            lock(&self.state).last_from_scheduler = Some(Instant::now());
        }
        let Some(cmd) = msg.meta.command() else {
            self.deliver(msg);
            return;
        };
        let scheduler = self.cfg.role == Role::Scheduler;
        let control = msg.meta.control.clone().unwrap_or_default();
        match (cmd, scheduler, msg.meta.request) {
            (Command::AddNode, true, true) => self.scheduler_add_node(&control.nodes),
            (Command::AddNode, false, false) => self.update_table(&msg.meta, control.nodes),
            (Command::Barrier, true, true) => {
                let timeout = (control.barrier_timeout_ms > 0)
                    .then(|| Duration::from_millis(control.barrier_timeout_ms));
                self.scheduler_barrier(msg.meta.sender, control.barrier_group, timeout);
            }
            (Command::Barrier, _, false) => {
                self.barrier_done(control.barrier_group, msg.meta.error)
            }
            (Command::Heartbeat, true, true) => {
                let from = msg.meta.sender;
                lock(&self.state).last_seen.insert(from, Instant::now());
                let mut meta = reply_meta(&msg.meta);
                meta.control = msg.meta.control.clone();
                let _ = self.send(Message::new(meta));
            }
            (Command::Heartbeat, false, false) => {}
            (Command::Terminate, _, _) => {
                self.stopped.store(true, Ordering::Release);
                self.cv.notify_all();
            }
            (cmd, _, request) => tracing::warn!(
                "dropped an unexpected {cmd:?} {} from {}",
                if request { "request" } else { "answer" },
                Node::describe(msg.meta.sender)
            ),
        }
    }

    /// Hands a remote write to the customer whose slot its immediate names (top 8 bits).
    fn deliver_write(&self, w: RemoteWrite) {
        let slot = (w.imm >> 24) as u8;
        let route = lock(&self.imm_slots).get(&slot).copied();
        match route.and_then(|r| lock(&self.routes).open.get(&r).cloned()) {
            Some(tx) => {
                let _ = tx.send(VanEvent::RemoteWrite(w));
            }
            None => tracing::warn!(
                "dropped a remote write with immediate {:#x} from {}: no customer",
                w.imm,
                Node::describe(w.from)
            ),
        }
    }

    fn deliver(&self, msg: Message) {
        let m = &msg.meta;
        let route = if m.request {
            Route::Server {
                app_id: m.app_id,
                dtype: m.dtype,
            }
        } else {
            Route::Worker {
                app_id: m.app_id,
                customer_id: m.customer_id,
            }
        };
        let mut routes = lock(&self.routes);
        match routes.open.get(&route) {
            Some(tx) => {
                if tx.send(VanEvent::Message(msg)).is_err() {
                    tracing::debug!("customer of {route:?} has gone; message dropped");
                }
            }
            None if m.request => routes.parked.push((Instant::now(), route, msg)),
            None => tracing::warn!(
                "dropped an answer from {} for unknown {route:?}",
                Node::describe(m.sender)
            ),
        }
    }

    /// Refuses the parked requests whose application did not appear within [`PARK`].
    fn expire_parked(&self) {
        let now = Instant::now();
        let (expired, serving) = {
            let mut routes = lock(&self.routes);
            if routes.parked.is_empty() {
                return;
            }
            let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut routes.parked)
                .into_iter()
                .partition(|(at, _, _)| now.duration_since(*at) >= PARK);
            routes.parked = keep;
            let serving: Vec<(i32, String)> = routes
                .open
                .keys()
                .filter_map(|k| match k {
                    Route::Server { app_id, dtype } => Some((*app_id, dtype.to_string())),
                    _ => None,
                })
                .collect();
            (old, serving)
        };
        for (_, _, msg) in expired {
            let m = &msg.meta;
            let here: Vec<&str> = serving
                .iter()
                .filter(|(a, _)| *a == m.app_id)
                .map(|(_, d)| d.as_str())
                .collect();
            let mut meta = reply_meta(m);
            meta.error = Some(format!(
                "no KVServer for app {} with values of type {} on {} (it serves: {})",
                m.app_id,
                m.dtype,
                Node::describe(self.my_id()),
                if here.is_empty() {
                    "nothing".to_string()
                } else {
                    here.join(", ")
                }
            ));
            if let Err(e) = self.send(Message::new(meta)) {
                tracing::warn!("could not answer {}: {e}", Node::describe(m.sender));
            }
        }
    }

    fn update_table(&self, meta: &Meta, nodes: Vec<Node>) {
        let mut st = lock(&self.state);
        if let Some(e) = &meta.error {
            st.fatal = Some(Error::Remote {
                node: "scheduler (id 1)".into(),
                message: e.clone(),
            });
            self.cv.notify_all();
            return;
        }
        if st.ready {
            return;
        }
        let me = self.me.read().map(|m| m.clone()).unwrap_or_default();
        let Some(mine) = nodes
            .iter()
            .find(|n| n.host == me.host && n.port == me.port && n.role == me.role)
        else {
            st.fatal = Some(Error::Van(format!(
                "the scheduler's node table does not list this node ({}:{})",
                me.host, me.port
            )));
            self.cv.notify_all();
            return;
        };
        if let Ok(mut m) = self.me.write() {
            m.id = mine.id;
        }
        self.van.set_node_id(mine.id);
        let peer_role = if me.role == Role::Worker {
            Role::Server
        } else {
            Role::Worker
        };
        for n in nodes.iter().filter(|n| n.role == peer_role) {
            if let Err(e) = self.van.connect(n.id, &n.host, n.port) {
                st.fatal = Some(e);
                self.cv.notify_all();
                return;
            }
        }
        st.nodes = nodes;
        st.ready = true;
        self.cv.notify_all();
    }

    // ---- scheduler ----

    fn scheduler_add_node(&self, nodes: &[Node]) {
        let Some(node) = nodes.first().cloned() else {
            tracing::warn!("dropped an ADD_NODE without a node");
            return;
        };
        let mut st = lock(&self.state);
        if st
            .joining
            .iter()
            .any(|n| n.host == node.host && n.port == node.port)
        {
            return;
        }
        let want = |r: Role| match r {
            Role::Server => self.cfg.num_servers,
            Role::Worker => self.cfg.num_workers,
            Role::Scheduler => 0,
        };
        let have = st.joining.iter().filter(|n| n.role == node.role).count();
        if st.ready || have >= want(node.role) {
            drop(st);
            let why = match node.role {
                Role::Scheduler => "a second scheduler cannot join".to_string(),
                r => format!(
                    "the cluster already has its {} {r}s (DMLC_NUM_{})",
                    want(r),
                    r.name().to_uppercase()
                ),
            };
            self.refuse_all(&[node], &why);
            return;
        }
        st.joining.push(node);
        if st.joining.len() < self.cfg.num_servers + self.cfg.num_workers {
            return;
        }
        // Everyone is here: assign ids.
        let me = self.me.read().map(|m| m.clone()).unwrap_or_default();
        let mut table = vec![me];
        let joined = std::mem::take(&mut st.joining);
        for role in [Role::Server, Role::Worker] {
            let of_role: Vec<&Node> = joined.iter().filter(|n| n.role == role).collect();
            let ranks = assign_ranks(&of_role);
            for (n, rank) in of_role.into_iter().zip(ranks) {
                let id = if role == Role::Server {
                    Node::server_id(rank)
                } else {
                    Node::worker_id(rank)
                };
                table.push(Node { id, ..n.clone() });
            }
        }
        let now = Instant::now();
        for n in &table[1..] {
            st.last_seen.insert(n.id, now);
        }
        st.nodes = table.clone();
        st.ready = true;
        drop(st);
        self.cv.notify_all();
        for n in &table[1..] {
            let sent = self.van.connect(n.id, &n.host, n.port).and_then(|_| {
                let meta = Meta {
                    recver: n.id,
                    control: Some(Control {
                        cmd: Some(Command::AddNode),
                        nodes: table.clone(),
                        ..Control::default()
                    }),
                    ..Meta::default()
                };
                self.send(Message::new(meta))
            });
            if let Err(e) = sent {
                tracing::error!(
                    "cannot send the node table to {}: {e}",
                    Node::describe(n.id)
                );
            }
        }
        tracing::info!("all {} nodes registered", table.len() - 1);
    }

    /// Tells nodes that are not (or no longer) admitted why, through a temporary connection.
    fn refuse_all(&self, nodes: &[Node], why: &str) {
        for (i, n) in nodes.iter().enumerate() {
            let tmp = -1000 - i as NodeId;
            let meta = Meta {
                recver: tmp,
                error: Some(why.to_string()),
                control: Some(Control {
                    cmd: Some(Command::AddNode),
                    ..Control::default()
                }),
                ..Meta::default()
            };
            if let Err(e) = self
                .van
                .connect(tmp, &n.host, n.port)
                .and_then(|_| self.send(Message::new(meta)))
            {
                tracing::warn!("cannot tell {}:{} it was refused: {e}", n.host, n.port);
            }
        }
    }

    fn scheduler_barrier(&self, from: NodeId, group: i32, timeout: Option<Duration>) {
        let outcome = {
            let mut st = lock(&self.state);
            let members = members_of(&st.nodes, group);
            st.book
                .arrive(group, from, &members, timeout, Instant::now())
        };
        if let Some(o) = outcome {
            self.release(o);
        }
    }

    /// The barrier of `group` ended (with the scheduler's error text, if it failed). Only the
    /// barrier this node waits in is released; a late answer to an older one is dropped.
    fn barrier_done(&self, group: i32, error: Option<String>) {
        let r = match error {
            None => Ok(()),
            Some(e) if e.contains("cannot complete: lost") => Err(Error::PeerLost(e)),
            Some(e) => Err(Error::Timeout(e)),
        };
        let mut st = lock(&self.state);
        if st.barrier_group == Some(group) {
            st.barrier_result = Some(r);
            st.barrier_group = None;
            self.cv.notify_all();
        }
    }

    fn release(&self, o: Outcome) {
        if let Some(e) = &o.error {
            tracing::warn!("{e}");
        }
        // Peers first: once the scheduler itself is released it may shut down.
        let mut ids = o.release;
        ids.sort_by_key(|&id| id == SCHEDULER);
        for id in ids {
            if id == SCHEDULER {
                self.barrier_done(o.group, o.error.clone());
                continue;
            }
            let meta = Meta {
                recver: id,
                error: o.error.clone(),
                control: Some(Control {
                    cmd: Some(Command::Barrier),
                    barrier_group: o.group,
                    ..Control::default()
                }),
                ..Meta::default()
            };
            if let Err(e) = self.send(Message::new(meta)) {
                tracing::warn!("cannot release {} from a barrier: {e}", Node::describe(id));
            }
        }
    }

    fn scheduler_tick(&self) {
        let now = Instant::now();
        let outcomes = {
            let mut st = lock(&self.state);
            if !st.ready {
                return;
            }
            let timeout = self.cfg.heartbeat_timeout;
            let newly: Vec<NodeId> = st
                .last_seen
                .iter()
                .filter(|(_, &t)| now.duration_since(t) > timeout)
                .map(|(&id, _)| id)
                .filter(|id| !st.lost.contains(id))
                .collect();
            for id in newly {
                tracing::warn!(
                    "{} lost: no heartbeat for {:.0} s (PS_HEARTBEAT_TIMEOUT)",
                    Node::describe(id),
                    timeout.as_secs_f64()
                );
                st.lost.insert(id);
            }
            let lost = st.lost.clone();
            st.book.check(now, &lost)
        };
        for o in outcomes {
            self.release(o);
        }
    }
}

/// Ranks for the nodes of one role, in registration order: the requested ranks when they are a
/// permutation of `0..n`, else `0, 1, 2, …`.
fn assign_ranks(nodes: &[&Node]) -> Vec<usize> {
    let n = nodes.len();
    let asked: Vec<usize> = nodes
        .iter()
        .filter_map(|x| x.requested_rank)
        .map(|r| r as usize)
        .collect();
    let mut seen = vec![false; n];
    let valid = asked.len() == n
        && asked
            .iter()
            .all(|&r| r < n && !std::mem::replace(&mut seen[r], true));
    if valid {
        asked
    } else {
        if !asked.is_empty() {
            tracing::warn!("requested ranks {asked:?} are not a permutation of 0..{n}; using registration order");
        }
        (0..n).collect()
    }
}

impl Drop for Postoffice {
    fn drop(&mut self) {
        self.shutdown();
    }
}
