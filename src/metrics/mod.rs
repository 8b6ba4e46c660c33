//! One node's Prometheus metrics, kept with `prometheus-client` (the Prometheus
//! project's Rust client) and served by [`serve()`] on `PS_METRICS_PORT` in the OpenMetrics text
//! format, which Prometheus scrapes.
//!
//! Every node of a process has its own [`Metrics`] (nodes run as threads of one process in
//! tests). Names, units and labels:
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `pslite_sent_bytes_total`, `pslite_received_bytes_total` | counter | `peer`, `van` | payload bytes (data frames, not headers) of messages sent to / received from a peer |
//! | `pslite_sent_messages_total`, `pslite_received_messages_total` | counter | `peer`, `van` | messages, control messages included (resends are in `pslite_resent_messages_total`) |
//! | `pslite_requests_total` | counter | `kind` (`push`, `pull`, `push-pull`) | (worker) requests opened, one per server part (zero-copy rendezvous pulls are not requests here) |
//! | `pslite_request_seconds` | histogram | `server`, `kind` | (worker) a request part's latency, sent to answered |
//! | `pslite_handler_seconds` | histogram | `kind` | (server) time in the request handler (and the log, with a checkpoint) per request |
//! | `pslite_inflight_requests` | gauge | — | (worker) request parts sent and not answered |
//! | `pslite_inflight_bytes` | gauge | — | (worker) bytes of the in-flight budget taken (`PS_MAX_INFLIGHT_BYTES`) |
//! | `pslite_resent_messages_total`, `pslite_duplicates_dropped_total` | counter | — | resend (`PS_RESEND`): messages sent again, duplicates dropped |
//! | `pslite_heartbeats_missed_total` | counter | `peer`, `van` | (scheduler) heartbeat intervals that passed, beyond one interval's slack, with nothing heard from a node |
//! | `pslite_rdma_wc_errors_total` | counter | `queue` (`send`, `receive`) | (RDMA van) work completions with an error status other than a flush, in this process |
//! | `pslite_rdma_credit_stalls_total` | counter | — | (RDMA van) sends that waited for ring credits or send-queue room, in this process |
//! | `pslite_rdma_registered_bytes` | gauge | — | (RDMA van) memory registered in this process (rings, pool, key-store chunks): what counts against `RLIMIT_MEMLOCK` |
//! | `pslite_table_rows` | gauge | `app` | (server) rows an embedding table holds |
//! | `pslite_table_bytes`, `pslite_table_budget_bytes` | gauge | `app` | (server) bytes a table holds (records, index, sketch), and its budget (0: none) |
//! | `pslite_table_admitted_rows_total` | counter | `app` | (server) rows created (keys admitted) |
//! | `pslite_table_not_admitted_total` | counter | `app` | (server) pushed rows dropped because their key was not admitted yet |
//! | `pslite_table_evicted_rows_total` | counter | `app` | (server) rows evicted (budget or TTL) |
//! | `pslite_table_initialized_on_pull_total` | counter | `app` | (server) pulled rows the table did not hold, answered with their initial row |
//!
//! `peer` and `server` name a node as `scheduler`, `server 0`, `worker 1` (role and rank).
//!
//! The endpoint has no authentication, so it listens on loopback unless `PS_METRICS_HOST` asks
//! for another address (`node`: the node's cluster address); then keep it behind the same
//! firewall as the cluster's ports.

mod labels;
mod serve;
mod staleness;
mod table;

pub use labels::{KindLabels, Peer, PeerLabels, QueueLabels, RequestLabels, TableLabels};
pub use serve::{serve, MetricsServer};
pub use table::TableMetrics;

use crate::wire::{Node, NodeId};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
pub use staleness::StalenessMetrics;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use table::TableFamilies;

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// Latency buckets: 20 µs to about 40 s, each twice the last.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(20e-6, 2.0, 22))
}

/// Peers counted one by one; more are counted together as `node -1`.
pub const MAX_PEERS: usize = 4096;

/// One peer's traffic counters, and when it was last heard of.
pub struct PeerStats {
    sent_bytes: Counter,
    sent_messages: Counter,
    received_bytes: Counter,
    received_messages: Counter,
    /// Nanoseconds after [`Metrics`]' birth when a message last came from the peer (0: never).
    last_heard: AtomicU64,
}

/// The per-peer families, labelled by [`PeerLabels`].
#[derive(Default)]
struct PeerFamilies {
    /// Payload bytes sent.
    sent_bytes: Family<PeerLabels, Counter>,
    /// Messages sent.
    sent_messages: Family<PeerLabels, Counter>,
    /// Payload bytes received.
    received_bytes: Family<PeerLabels, Counter>,
    /// Messages received.
    received_messages: Family<PeerLabels, Counter>,
    /// (Scheduler) heartbeat intervals missed.
    heartbeats_missed: Family<PeerLabels, Counter>,
}

impl PeerFamilies {
    fn register(&self, r: &mut Registry) {
        let counters = [
            (
                "pslite_sent_bytes",
                "payload bytes sent, by peer",
                &self.sent_bytes,
            ),
            (
                "pslite_sent_messages",
                "messages sent, by peer",
                &self.sent_messages,
            ),
            (
                "pslite_received_bytes",
                "payload bytes received, by peer",
                &self.received_bytes,
            ),
            (
                "pslite_received_messages",
                "messages received, by peer",
                &self.received_messages,
            ),
            (
                "pslite_heartbeats_missed",
                "(scheduler) heartbeat intervals passed with nothing heard from a node",
                &self.heartbeats_missed,
            ),
        ];
        for (name, help, family) in counters {
            r.register(name, help, family.clone());
        }
    }
}

/// A worker's requests and a server's handling of them.
pub struct RequestMetrics {
    /// (Worker) requests opened, one per server part, by kind.
    opened: Family<KindLabels, Counter>,
    /// (Worker) a request part's latency in seconds, sent to answered.
    seconds: HistogramFamily<RequestLabels>,
    /// (Server) seconds spent handling a request, by kind.
    handler_seconds: HistogramFamily<KindLabels>,
    /// (Worker) request parts in flight.
    pub inflight: Gauge,
}

impl Default for RequestMetrics {
    fn default() -> RequestMetrics {
        RequestMetrics {
            opened: Family::default(),
            seconds: Family::new_with_constructor(latency_histogram),
            handler_seconds: Family::new_with_constructor(latency_histogram),
            inflight: Gauge::default(),
        }
    }
}

impl RequestMetrics {
    /// Registers these metrics and `inflight_bytes`, the in-flight budget's gauge.
    fn register(&self, r: &mut Registry, inflight_bytes: Gauge) {
        r.register(
            "pslite_requests",
            "(worker) requests sent, one per server part, by kind",
            self.opened.clone(),
        );
        r.register(
            "pslite_request_seconds",
            "(worker) request latency, sent to answered, by server and kind",
            self.seconds.clone(),
        );
        r.register(
            "pslite_handler_seconds",
            "(server) time spent handling a request, by kind",
            self.handler_seconds.clone(),
        );
        r.register(
            "pslite_inflight_requests",
            "(worker) request parts sent and not answered",
            self.inflight.clone(),
        );
        r.register(
            "pslite_inflight_bytes",
            "(worker) bytes of requests in flight (PS_MAX_INFLIGHT_BYTES budget)",
            inflight_bytes,
        );
    }
}

/// Resend's counters (`PS_RESEND`).
#[derive(Default)]
pub struct ResendMetrics {
    /// Messages sent again.
    pub resent: Counter,
    /// Duplicates dropped.
    pub duplicates: Counter,
}

impl ResendMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "pslite_resent_messages",
            "messages sent again (PS_RESEND)",
            self.resent.clone(),
        );
        r.register(
            "pslite_duplicates_dropped",
            "duplicate messages dropped (PS_RESEND)",
            self.duplicates.clone(),
        );
    }
}

/// Re-registrations after the scheduler went silent.
#[derive(Default)]
pub struct MembershipMetrics {
    /// (Server or worker) Times it re-registered with a scheduler after the scheduler went
    /// silent.
    pub rejoins: Counter,
    /// (Scheduler) Re-registrations it counted: a scheduler that took a job over counts every
    /// node once.
    pub rejoined: Counter,
    /// The epoch of the servers' key layout this node holds (elastic servers).
    pub layout_epoch: Gauge,
    /// (Server) Key ranges this node's key-value servers handed to a new owner.
    pub ranges_moved: Counter,
    /// (Server) Bytes of rows this node's key-value servers handed to a new owner.
    pub bytes_migrated: Counter,
    /// (Worker) Request parts answered "moved" or "not yet" and sent again.
    pub parts_redirected: Counter,
}

impl MembershipMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "pslite_scheduler_rejoins",
            "times this node re-registered with a scheduler after the scheduler went silent",
            self.rejoins.clone(),
        );
        r.register(
            "pslite_nodes_rejoined",
            "re-registrations this scheduler counted (one per node when it took a job over)",
            self.rejoined.clone(),
        );
        r.register(
            "pslite_key_layout_epoch",
            "the epoch of the servers' key layout this node holds (0: the layout of the start)",
            self.layout_epoch.clone(),
        );
        r.register(
            "pslite_ranges_moved",
            "key ranges this server's key-value servers handed to a new owner",
            self.ranges_moved.clone(),
        );
        r.register(
            "pslite_bytes_migrated",
            "bytes of rows this server's key-value servers handed to a new owner",
            self.bytes_migrated.clone(),
        );
        r.register(
            "pslite_parts_redirected",
            "request parts answered moved or not yet by a server and sent again",
            self.parts_redirected.clone(),
        );
    }
}

/// One node's metrics: the registry and handles to what the layers count.
pub struct Metrics {
    registry: Registry,
    van: &'static str,
    born: Instant,
    peers: RwLock<HashMap<NodeId, Arc<PeerStats>>>,
    peer_families: PeerFamilies,
    /// Requests: opened, answered, handled, in flight.
    pub requests: RequestMetrics,
    /// Messages sent again and duplicates dropped (resend).
    pub resend: ResendMetrics,
    /// Re-registrations after the scheduler went silent.
    pub membership: MembershipMetrics,
    /// Bounded staleness: the worker's clock, its waits, its row cache.
    pub staleness: StalenessMetrics,
    tables: TableFamilies,
}

impl Metrics {
    /// Metrics of a node on `van`, with `inflight_bytes` (the in-flight budget's gauge) and
    /// whatever `more` registers (the van's own).
    pub fn new(
        van: &'static str,
        inflight_bytes: Gauge,
        more: impl FnOnce(&mut Registry),
    ) -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            van,
            born: Instant::now(),
            peers: RwLock::default(),
            peer_families: PeerFamilies::default(),
            requests: RequestMetrics::default(),
            resend: ResendMetrics::default(),
            membership: MembershipMetrics::default(),
            staleness: StalenessMetrics::default(),
            tables: TableFamilies::default(),
        };
        m.peer_families.register(&mut r);
        m.requests.register(&mut r, inflight_bytes);
        m.resend.register(&mut r);
        m.membership.register(&mut r);
        m.staleness.register(&mut r);
        m.tables.register(&mut r);
        more(&mut r);
        Metrics { registry: r, ..m }
    }

    /// The key layout this node holds is now at `epoch`.
    pub fn layout_epoch(&self, epoch: u64) {
        self.membership.layout_epoch.set(epoch as i64);
    }

    /// The metrics in the OpenMetrics text format (what a scrape returns).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The counters of `peer`, created at its first message. Past [`MAX_PEERS`] peers (ids
    /// come from the network) new ones are counted together as `node -1`.
    fn peer(&self, peer: NodeId) -> Arc<PeerStats> {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = peers.get(&peer) {
            return p.clone();
        }
        let peer = if peers.len() >= MAX_PEERS { -1 } else { peer };
        if let Some(p) = peers.get(&peer) {
            return p.clone();
        }
        drop(peers);
        let labels = PeerLabels {
            peer: Peer(peer),
            van: self.van,
        };
        let stats = Arc::new(PeerStats {
            sent_bytes: self.peer_families.sent_bytes.get_or_create_owned(&labels),
            sent_messages: self
                .peer_families
                .sent_messages
                .get_or_create_owned(&labels),
            received_bytes: self
                .peer_families
                .received_bytes
                .get_or_create_owned(&labels),
            received_messages: self
                .peer_families
                .received_messages
                .get_or_create_owned(&labels),
            last_heard: AtomicU64::new(0),
        });
        self.peers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(peer)
            .or_insert(stats)
            .clone()
    }

    /// A message of `payload` bytes went to `peer`.
    pub fn sent(&self, peer: NodeId, payload: u64) {
        let p = self.peer(peer);
        p.sent_messages.inc();
        p.sent_bytes.inc_by(payload);
    }

    /// A message of `payload` bytes came from `peer`.
    pub fn received(&self, peer: NodeId, payload: u64) {
        let p = self.peer(peer);
        p.received_messages.inc();
        p.received_bytes.inc_by(payload);
        let ns = self.born.elapsed().as_nanos().max(1) as u64;
        p.last_heard.store(ns, Ordering::Relaxed);
    }

    /// Payload bytes sent to and received from all peers so far: `(sent, received)` (the
    /// per-peer counters added up).
    pub fn payload_bytes(&self) -> (u64, u64) {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner());
        peers.values().fold((0, 0), |(s, r), p| {
            (s + p.sent_bytes.get(), r + p.received_bytes.get())
        })
    }

    /// How long ago each peer that ever sent a message was last heard of, in id order.
    pub fn last_heard(&self) -> Vec<(NodeId, Duration)> {
        let now = self.born.elapsed();
        let mut v: Vec<(NodeId, Duration)> = self
            .peers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(&id, p)| match p.last_heard.load(Ordering::Relaxed) {
                0 => None,
                ns => Some((id, now.saturating_sub(Duration::from_nanos(ns)))),
            })
            .collect();
        v.sort_unstable_by_key(|&(id, _)| id);
        v
    }

    /// (Worker) a request of `kind` went to `parts` servers.
    pub fn requested(&self, kind: &'static str, parts: usize) {
        self.requests
            .opened
            .get_or_create(&KindLabels { kind })
            .inc_by(parts as u64);
        self.requests.inflight.inc_by(parts as i64);
    }

    /// (Worker) server rank `server` answered a part of a `kind` request `took` after it was
    /// opened.
    pub fn answered(&self, server: usize, kind: &'static str, took: Duration) {
        self.requests
            .seconds
            .get_or_create(&RequestLabels {
                server: Peer(Node::server_id(server)),
                kind,
            })
            .observe(took.as_secs_f64());
        self.requests.inflight.dec();
    }

    /// (Worker) `parts` parts in flight ended without an answer (failed, timed out, given up).
    pub fn unanswered(&self, parts: usize) {
        if parts > 0 {
            self.requests.inflight.dec_by(parts as i64);
        }
    }

    /// (Server) handling a `kind` request took `took`.
    pub fn handled(&self, kind: &'static str, took: Duration) {
        self.requests
            .handler_seconds
            .get_or_create(&KindLabels { kind })
            .observe(took.as_secs_f64());
    }

    /// (Server) the metrics of the embedding table serving application `app`.
    pub fn table(&self, app: i32) -> TableMetrics {
        self.tables.of(app)
    }

    /// (Scheduler) `missed` heartbeats of `peer` went by.
    pub fn heartbeats_missed(&self, peer: NodeId, missed: u64) {
        self.peer_families
            .heartbeats_missed
            .get_or_create(&PeerLabels {
                peer: Peer(peer),
                van: self.van,
            })
            .inc_by(missed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms_with_peer_names() {
        let m = Metrics::new("zmq", Gauge::default(), |_| {});
        m.sent(8, 100);
        m.sent(8, 20);
        m.received(9, 7);
        m.requested("push", 2);
        m.answered(0, "push", Duration::from_millis(3));
        let text = m.render();
        assert!(
            text.contains(r#"pslite_sent_bytes_total{peer="server 0",van="zmq"} 120"#),
            "{text}"
        );
        assert!(text.contains(r#"pslite_sent_messages_total{peer="server 0",van="zmq"} 2"#));
        assert!(text.contains(r#"pslite_received_bytes_total{peer="worker 0",van="zmq"} 7"#));
        assert!(text.contains(r#"pslite_requests_total{kind="push"} 2"#));
        assert!(text.contains(r#"pslite_request_seconds_count{server="server 0",kind="push"} 1"#));
        assert!(text.contains("pslite_inflight_requests 1"));
        assert_eq!(m.last_heard().len(), 1);
        assert_eq!(m.last_heard()[0].0, 9);
    }
}
