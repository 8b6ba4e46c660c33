//! The sections of a node's [`Config`](super::Config), each a group of variables read
//! together.

use super::VanType;
use std::time::Duration;

/// The cluster a node joins: the scheduler's address and how many servers and workers it has.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// Scheduler address (`DMLC_PS_ROOT_URI`).
    pub root_uri: String,
    /// Scheduler port (`DMLC_PS_ROOT_PORT`).
    pub root_port: u16,
    /// Number of servers (`DMLC_NUM_SERVER`).
    pub num_servers: usize,
    /// Number of workers (`DMLC_NUM_WORKER`).
    pub num_workers: usize,
}

/// This node: where it listens, its van, the rank it asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct ThisNode {
    /// Address this node's van listens on (`DMLC_NODE_HOST`, `DMLC_INTERFACE`; the scheduler
    /// listens on `root_uri`).
    pub host: String,
    /// The van (`DMLC_PS_VAN_TYPE`).
    pub van: VanType,
    /// The rank asked for (`PSLITE_RANK`), see [`crate::wire::Node::requested_rank`].
    pub rank_hint: Option<u32>,
}

/// Deadlines and the heartbeats' period.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Deadline of every wait (`PS_TIMEOUT`).
    pub timeout: Duration,
    /// Heartbeat period (`PS_HEARTBEAT_INTERVAL`).
    pub heartbeat_interval: Duration,
    /// Silence after which a node counts as lost (`PS_HEARTBEAT_TIMEOUT`).
    pub heartbeat_timeout: Duration,
}

/// Zero-copy pulls: the registered memory pool, and whether pulled content is checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroCopy {
    /// Rendezvous pulls carry and check a crc32c of the content (`PS_DATA_VALIDATION=1`).
    pub data_validation: bool,
    /// Bytes of the registered memory pool (`PS_POOL_BYTES`).
    pub pool_bytes: usize,
}

/// The key-value layer's knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct KvConfig {
    /// Key caching (`PS_KEY_CACHE`): keys of the lists cached per worker and server
    /// (`PS_KEY_CACHE_KEYS`), 0 when it is off.
    pub key_cache_keys: usize,
    /// Threads an embedding table splits a request of at least 16384 keys among
    /// (`PS_TABLE_THREADS`; by default this host's cores, at most 4).
    pub table_threads: usize,
}

/// Resend (`PS_RESEND`, ps-lite's resender).
#[derive(Clone, Debug, PartialEq)]
pub struct Resend {
    /// How long a data message waits for its acknowledgement before it is sent again
    /// (`PS_RESEND_TIMEOUT`, ms); `None` when resend is off (`PS_RESEND=0`).
    pub timeout: Option<Duration>,
    /// Percent of received data messages dropped, for tests (`PS_DROP_MSG`); 0 normally.
    pub drop_msg_percent: u32,
}

/// Where the metrics server listens.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsEndpoint {
    /// Port (`PS_METRICS_PORT`; 0: any free one); `None`: no metrics server.
    pub port: Option<u16>,
    /// Address (`PS_METRICS_HOST`; `node`: the listening address; empty: loopback).
    pub host: String,
}
