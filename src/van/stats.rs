//! The RDMA van's metrics ([`crate::metrics`]), counted per process (one RDMA device context
//! per process in practice; the locked-memory limit is per process too): work completions
//! with an error status, sends that waited for room, and registered bytes
//! ([`super::memlock::REGISTERED`]). Kept outside the `rdma` feature so that a build without
//! it registers nothing and pays nothing.

use crate::metrics::QueueLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::sync::LazyLock;

/// Work completions with an error status other than a flush, by queue (`send`, `receive`).
pub static WC_ERRORS: LazyLock<Family<QueueLabels, Counter>> = LazyLock::new(Family::default);

/// Sends (records, content writes) that found no ring credits or send-queue room and waited.
pub static CREDIT_STALLS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Registers the RDMA van's metrics in `registry`.
pub fn register(registry: &mut Registry) {
    registry.register(
        "pslite_rdma_wc_errors",
        "RDMA work completions with an error status, in this process",
        WC_ERRORS.clone(),
    );
    registry.register(
        "pslite_rdma_credit_stalls",
        "RDMA sends that waited for ring credits or send-queue room, in this process",
        CREDIT_STALLS.clone(),
    );
    registry.register(
        "pslite_rdma_registered_bytes",
        "bytes registered with the RDMA device in this process (counted against RLIMIT_MEMLOCK)",
        super::memlock::REGISTERED.clone(),
    );
}

/// `IBV_WC_WR_FLUSH_ERR`: a WR flushed because its QP went to the error state (every posted
/// receive, when a peer is lost or replaced): a consequence, not counted as an error.
pub const WC_WR_FLUSH_ERR: u32 = 5;

/// A work completion on `queue` ended with `status` (not 0): counted unless it was flushed.
pub fn wc_error(queue: &'static str, status: u32) {
    if status != WC_WR_FLUSH_ERR {
        WC_ERRORS.get_or_create(&QueueLabels { queue }).inc();
    }
}
