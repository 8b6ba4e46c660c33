//! The postoffice: one node's view of the cluster — membership, node ids, key ranges, barriers,
//! heartbeats and shutdown (ps-lite's `Postoffice` and the control half of `Van::Receiving`).
//! It never looks at payload bytes: data messages are handed to the [`Customer`] registered for
//! their [`Route`].
//!
//! Start-up (scheduler-driven, as ps-lite): every node binds its van, sends ADD_NODE to the
//! scheduler; once `DMLC_NUM_SERVER + DMLC_NUM_WORKER` nodes registered, the scheduler assigns ids
//! (server rank r → 8 + 2r, worker rank r → 9 + 2r, in order of registration; see
//! [`crate::wire::Node::server_id`]) and sends the node table to all; every node connects to its
//! peers; a barrier of all nodes ends the start. Every wait has a deadline (`PS_TIMEOUT`) except
//! the final barrier of [`Postoffice::finalize`], which waits as long as every missing node is
//! alive (heartbeats, `PS_HEARTBEAT_TIMEOUT`).
//!
//! Files: this one is the facade (start, finalize, shutdown, accessors) and `pipeline` orders
//! every message's steps; only these two hold `Postoffice`'s methods. Every other file is a
//! part — its state type, and what it does for the postoffice as functions taking
//! `po: &Postoffice` (ARCHITECTURE.md lists them). `barrier`, `clocks`, `liveness`, `ranges`,
//! `scheduler` and `resend` are sans-IO state.

#[doc(hidden)]
pub mod barrier;
#[doc(hidden)]
pub mod budget;
#[doc(hidden)]
pub mod clocks;
mod control;
mod customer;
mod failure;
mod join;
#[doc(hidden)]
pub mod liveness;
mod memory;
mod node;
mod observe;
mod pipeline;
pub mod range;
#[doc(hidden)]
pub mod ranges;
mod recovery;
#[doc(hidden)]
pub mod resend;
mod resender;
mod resize;
mod routes;
#[doc(hidden)]
pub mod scheduler;
mod staleness;

pub use crate::wire::SCHEDULER;
pub(crate) use customer::on_customer_thread;
pub use customer::{Customer, CustomerEvent, Route};
pub use pipeline::reply_meta;
pub use range::Range;
pub use resize::Resized;
pub(crate) use resize::{key_value_servers, layout_wire, range_arrived, unsettled_layout};
pub use staleness::Clocked;

use crate::config::{Config, VanType};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::sync::lock;
use crate::van::zmq::{ZmqOptions, ZmqVan};
use crate::van::Van;
use crate::wire::{Node, Role};
use crossbeam_channel::Sender;
use memory::Memory;
use routes::Routes;
use scheduler::Scheduler;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// Group of the scheduler.
pub const SCHEDULER_GROUP: i32 = 1;
/// Group of all servers.
pub const SERVER_GROUP: i32 = 2;
/// Group of all workers.
pub const WORKER_GROUP: i32 = 4;
/// Group of every node.
pub const ALL_GROUP: i32 = 7;

/// One node's view of the cluster. Create it with [`Postoffice::start`]; end it with
/// [`Postoffice::finalize`].
///
/// Each part owns its locks and says their order. Between parts, one line:
/// `node.barrier_lock` (held by a thread waiting in a barrier) → the scheduler's →
/// `node.state` → `failures` → `recovery`. The van's locks (and the resend book's) are taken
/// inside `recovery.replacing`, which every send holds; the other parts' locks are taken alone.
pub struct Postoffice {
    cfg: Config,
    van: Arc<dyn Van>,
    /// The registered pool, immediate slots and remote memory ([`memory`]). It holds the van's
    /// other reference: declared right after `van`, so the van is dropped with it, before the
    /// other parts, and (`Memory`'s own field order) before the pool it registered.
    memory: Memory,
    /// This node, the node table, barrier waits ([`node`]).
    node: node::Membership,
    /// The scheduler's state and its IO's; `None` on servers and workers.
    scheduler: Option<scheduler::SchedulerIo>,
    routes: Mutex<Routes>,
    /// This process's requests in flight (`PS_MAX_INFLIGHT_BYTES`), for its `KVWorker`s.
    budget: Arc<budget::Budget>,
    /// Stopped, and the threads to join.
    life: Lifecycle,
    /// Resend's state ([`resender`]).
    resender: resender::Resender,
    /// The peers known to be gone, and those whose replacement is awaited ([`failure`]).
    failures: failure::Failures,
    /// Recovery's state: incarnations, replaced peers and the path generations, the node
    /// table's word on replacements ([`recovery`]).
    recovery: recovery::Recovery,
    /// This node's metrics ([`crate::metrics`]).
    metrics: Arc<Metrics>,
}

/// Whether the node stopped, and what stops with it: its threads (`ps-receive`,
/// `ps-heartbeat`), joined, and the metrics' HTTP server (`PS_METRICS_PORT`). Its locks are
/// taken alone.
#[derive(Default)]
struct Lifecycle {
    stopped: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    metrics_server: Mutex<Option<crate::metrics::MetricsServer>>,
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
        let van: Arc<dyn Van> = match cfg.node.van {
            VanType::Zmq => Arc::new(ZmqVan::new(ZmqOptions::of(&cfg))?),
            VanType::Rdma => crate::van::rdma::create(ZmqOptions::of(&cfg))?,
        };
        Postoffice::start_with_van(cfg, van)
    }

    /// As [`Postoffice::start`] over a given van.
    pub fn start_with_van(cfg: Config, van: Arc<dyn Van>) -> Result<Arc<Postoffice>> {
        join::warn_if_loopback_name(&cfg.cluster.root_uri);
        join::warn_if_unauthenticated(&cfg);
        join::warn_if_timeout_short(&cfg);
        let me = join::bind(&cfg, van.as_ref())?;
        let po = Arc::new(Postoffice::new(cfg, van, me.clone()));
        if po.scheduler.is_some() {
            po.recovery.takeover().run_id = resender::drop_seed();
        }
        observe::serve_metrics(&po)?;
        crate::waits::register(Arc::downgrade(&po) as Weak<dyn crate::waits::Waits>);
        po.spawn("ps-receive", control::receive_loop)?;
        join::join_and_meet(&po, &me)?;
        tracing::info!(
            "{} started: {}",
            Node::describe(po.my_id()),
            crate::wire::place(&me.host, me.port)
        );
        Ok(po)
    }

    /// The parts of node `me` (bound), none started yet.
    fn new(cfg: Config, van: Arc<dyn Van>, me: Node) -> Postoffice {
        let parked = cfg.bounds.parked_bytes(cfg.cluster.num_workers);
        let inflight = cfg.bounds.max_inflight_bytes;
        let scheduler = (cfg.role == Role::Scheduler).then(|| {
            let recovery = recovery::window(&cfg);
            scheduler::SchedulerIo::new(Scheduler::new(
                me.clone(),
                cfg.cluster.num_servers,
                cfg.cluster.num_workers,
                recovery,
            ))
        });
        let budget = Arc::new(budget::Budget::new(inflight));
        let metrics = Arc::new(Metrics::new(van.name(), budget.gauge(), |r| {
            van.register_metrics(r)
        }));
        let memory = Memory::new(van.clone(), cfg.zero_copy.pool_bytes);
        Postoffice {
            resender: resender::Resender::new(&cfg),
            recovery: recovery::Recovery::default(),
            node: node::Membership::new(me, cfg.cluster.num_servers),
            cfg,
            van,
            scheduler,
            routes: Mutex::new(Routes::new(parked)),
            budget,
            life: Lifecycle::default(),
            memory,
            failures: failure::Failures::default(),
            metrics,
        }
    }

    fn spawn(self: &Arc<Self>, name: &str, f: fn(&Weak<Postoffice>)) -> Result<()> {
        let weak = Arc::downgrade(self);
        let t = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&weak))
            .map_err(|e| Error::Van(format!("cannot start thread {name}: {e}")))?;
        lock(&self.life.threads).push(t);
        Ok(())
    }

    /// This node's id (1 for the scheduler, 8 + 2r for server rank r, 9 + 2r for worker rank r).
    pub fn my_id(&self) -> crate::wire::NodeId {
        self.node.me.read().map(|m| m.id).unwrap_or(-1)
    }

    /// This node's rank among its role (0 for the scheduler).
    pub fn my_rank(&self) -> usize {
        Node::rank_of(self.my_id())
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.cfg.role
    }

    /// This process's requests in flight, bounded by `PS_MAX_INFLIGHT_BYTES` (its
    /// `KVWorker`s take from it; [`budget`]).
    pub fn budget(&self) -> &Arc<budget::Budget> {
        &self.budget
    }

    /// The configuration this node was started with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Number of servers: `DMLC_NUM_SERVER` until the node table arrived, then the table's
    /// (servers that joined the running job count, drained ones too).
    pub fn num_servers(&self) -> usize {
        let st = lock(&self.node.state);
        if !st.ready {
            return self.cfg.cluster.num_servers;
        }
        st.nodes.iter().filter(|n| n.role == Role::Server).count()
    }

    /// Number of workers.
    pub fn num_workers(&self) -> usize {
        self.cfg.cluster.num_workers
    }

    /// Key ranges of the servers, in rank order (see [`range`]).
    pub fn server_key_ranges(&self) -> &[Range] {
        &self.node.ranges
    }

    /// The node table (scheduler, servers, workers) as the scheduler sent it.
    pub fn nodes(&self) -> Vec<Node> {
        lock(&self.node.state).nodes.clone()
    }

    /// Payload bytes (data frames; headers not counted) this node sent and received so far:
    /// `(sent, received)`.
    pub fn payload_bytes(&self) -> (u64, u64) {
        self.metrics.payload_bytes()
    }

    pub(crate) fn register(&self, route: Route, tx: Sender<CustomerEvent>) -> Result<()> {
        lock(&self.routes).open(route, tx)
    }

    pub(crate) fn unregister(&self, route: Route) {
        lock(&self.routes).close(route);
    }

    /// Ends this node: a barrier of all nodes (waiting while they are alive, without deadline,
    /// since workers may train for hours), then stops the van and the threads.
    ///
    /// # Errors
    /// [`Error::PeerLost`] naming a node that was lost (before or while this one waits);
    /// [`Error::DeclaredLost`] if this node was; [`Error::JobFailed`] when a member's
    /// application failed ([`finalize_failed`](Self::finalize_failed)).
    pub fn finalize(&self) -> Result<()> {
        node::end(self, None)
    }

    /// Ends this node after its application failed with `error`: as [`finalize`](Self::finalize),
    /// but the last barrier carries the error, so that every node's `finalize` fails with
    /// [`Error::JobFailed`] naming this node and the error, and no process of a failed job
    /// exits 0.
    ///
    /// # Errors
    /// [`Error::JobFailed`] with the failures of every member that failed, or what
    /// `finalize` fails with.
    pub fn finalize_failed(&self, error: &Error) -> Result<()> {
        node::end(self, Some(error.to_string()))
    }

    /// Records that this node's application failed with `error` while it goes on (a server
    /// that refuses every request, say): its [`finalize`](Self::finalize) then fails the job
    /// as [`finalize_failed`](Self::finalize_failed) would, naming this node and the error;
    /// when it is already finalizing, its arrival at the last barrier is sent again with the
    /// error (the scheduler counts the failure of a member that arrived). The first error
    /// recorded is kept.
    pub fn fail_application(&self, error: &str) {
        node::fail_application(self, error)
    }

    fn shutdown(&self) {
        if !self.life.stopped.load(Ordering::Acquire) {
            // Acknowledgements still batched: without them the peers would send again.
            self.flush_acks();
        }
        if self.life.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        self.node.cv.notify_all();
        self.resender.report(self.my_id());
        // The metrics server stops with the node (not under the lock: it may wait for a
        // scrape being answered).
        let server = lock(&self.life.metrics_server).take();
        drop(server);
        let threads: Vec<_> = lock(&self.life.threads).drain(..).collect();
        let me = std::thread::current().id();
        for t in &threads {
            t.thread().unpark();
        }
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        if self.failures.any() && self.scheduler.is_none() {
            // The job failed: what is queued for peers (some gone) is not worth a linger. The
            // scheduler's NODE_LOST notices are, so it lingers.
            self.van.abort();
        } else {
            self.van.stop();
        }
    }

    /// Whether this node replaces a lost one (the scheduler said so in its node table).
    pub fn is_replacement(&self) -> bool {
        self.recovery.takeover().replacement
    }

    /// Whether this node is a server that joined the running job (registered after the start
    /// with `PSLITE_RANK` = the number of servers). It holds no keys until a resize adds it:
    /// [`resize`](Self::resize)`(my_id(), true)` once its key-value servers exist.
    pub fn joined(&self) -> bool {
        self.recovery.takeover().joined
    }

    /// How many barriers of `group` the node this one replaces (or the job this server joined)
    /// completed after the start-up barrier, 0 otherwise: an application skips the work before
    /// them, and [`barrier`](Self::barrier) passes them at once.
    pub fn inherited_barriers(&self, group: i32) -> u64 {
        let t = self.recovery.takeover();
        t.inherited.get(&group).copied().unwrap_or(0)
    }

    /// This run's id (drawn by the scheduler, sent in the node table): a replacement restores
    /// only a checkpoint written in the same run.
    pub fn run_id(&self) -> u64 {
        self.recovery.takeover().run_id
    }

    /// Whether a `KVWorker` of this node keeps every request until it is answered, to send it
    /// again to a lost server's replacement: on a worker whose cluster replaces lost servers.
    pub(crate) fn keeps_requests_for_replacements(&self) -> bool {
        self.cfg.role == Role::Worker && recovery::replaces_lost(self)
    }

    /// The servers' key layout this node slices requests by ([`ranges`]; epoch 0: ps-lite's
    /// even split by rank, one epoch more per resize).
    pub fn layout(&self) -> Arc<ranges::layout::Layout> {
        self.node.resizing.layout()
    }

    /// Whether every move of the current [`layout`](Self::layout) is done, as this node heard
    /// from the scheduler (otherwise rows may still be moving, and a resize is refused).
    pub fn layout_settled(&self) -> bool {
        self.node.resizing.settled()
    }

    /// Elastic servers: asks the scheduler to give server `server` (a node id) a share of the
    /// keys (`add`: the upper half of the widest part) or to move all its keys to its
    /// neighbours (drain), while the workers push and pull, each request applied once; waits
    /// until every new owner holds its rows (at most `PS_TIMEOUT`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: the scheduler's refusal, naming why. [`Error::Remote`]: it
    /// settled, but some rows could not move (a handler without `export_range`); the layout
    /// stands and the new owner refuses those keys naming why. [`Error::Timeout`]: not settled
    /// within `PS_TIMEOUT` (the scheduler goes on waiting, refusing other resizes).
    pub fn resize(&self, server: crate::wire::NodeId, add: bool) -> Result<Resized> {
        resize::resize(self, server, add)
    }

    /// Whether the job failed: a peer is lost for good (no replacement is awaited for it).
    pub(crate) fn has_failed(&self) -> bool {
        self.failures.any()
    }

    /// Where this node serves its metrics (`PS_METRICS_PORT`), if it does.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        lock(&self.life.metrics_server).as_ref().map(|s| s.addr())
    }

    /// This node's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Blocks until every node of `group` (sum of [`SCHEDULER_GROUP`],
    /// [`SERVER_GROUP`], [`WORKER_GROUP`]) called `barrier` with the same group.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming the nodes that did not arrive within `PS_TIMEOUT`;
    /// [`Error::PeerLost`] once any node was lost (a member or not: the job cannot complete),
    /// or if the scheduler stops answering; [`Error::DeclaredLost`] if this node was.
    ///
    /// A replacement passes at once as many barriers of each group as the node it
    /// replaces completed ([`inherited_barriers`](Self::inherited_barriers)).
    pub fn barrier(&self, group: i32) -> Result<()> {
        if recovery::pass_inherited(self, group) {
            return Ok(());
        }
        node::barrier_with(self, group, Some(self.cfg.timing.timeout), None)
    }

    /// (Worker) Bounded staleness (SSP, Ho et al. 2013): advances this worker's clock by one
    /// (call it once per training step) and returns once the slowest worker is at most
    /// `staleness` clocks behind — at once within the bound; `Some(0)` is a barrier of the
    /// workers per clock, `None` never waits. The clocks are kept by the scheduler.
    ///
    /// # Errors
    /// [`Error::Timeout`] after `PS_TIMEOUT`, naming the slowest worker and its clock;
    /// [`Error::PeerLost`] when a node is lost; [`Error::InvalidArgument`] on a server or
    /// scheduler.
    pub fn clock(&self, staleness: Option<u64>) -> Result<Clocked> {
        staleness::clock(self, staleness)
    }

    /// (Worker) This worker takes no more steps: the other workers no longer wait for its
    /// clock (call it after the last step; a server or scheduler ignores it).
    ///
    /// # Errors
    /// The send's ([`Error::Van`]).
    pub fn clocks_done(&self) -> Result<()> {
        staleness::clocks_done(self)
    }

    /// This node's registered memory pool (`PS_POOL_BYTES`), reserved — and registered with
    /// the van, which makes it a target of remote writes — on first use.
    ///
    /// # Errors
    /// [`Error::Van`] if the memory cannot be reserved or registered.
    pub fn pool(&self) -> Result<&crate::van::pool::MemoryPool> {
        self.memory.pool(self.my_id())
    }

    /// Reserves an immediate slot for `route`: remote writes whose immediate has this slot
    /// as its [`crate::wire::Imm::slot`] are delivered to `route` as
    /// [`CustomerEvent::RemoteWrite`]s. Slots 0–[`crate::wire::Imm::MAX_SLOT`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when all 255 slots are taken.
    pub fn register_imm_slot(&self, route: Route) -> Result<u8> {
        self.memory.register_imm_slot(route)
    }

    /// Frees an immediate slot.
    pub fn release_imm_slot(&self, slot: u8) {
        self.memory.release_imm_slot(slot)
    }

    /// This node's registered memory, immediate slots and the van's registrations
    /// ([`memory`]).
    pub(crate) fn memory(&self) -> &Memory {
        &self.memory
    }

    /// How many nodes held this node's id before it: 0, or the n-th replacement of a lost node
    /// (the scheduler's count). A `KVWorker` numbers its requests from `incarnation × 2^27`
    /// on, so that late answers to its predecessor's requests match none of its own.
    pub fn incarnation(&self) -> u32 {
        self.recovery.incarnation()
    }
}

impl Drop for Postoffice {
    fn drop(&mut self) {
        self.shutdown();
    }
}
