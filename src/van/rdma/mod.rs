//! The RDMA van: worker↔server messages move by RDMA WRITE WITH IMMEDIATE over RC queue pairs,
//! in the Model3 design of `shared/seeds/004_*` (section 3.1) — per QP a registered send ring and
//! a registered receive ring, all QPs of a process sharing one send CQ and one receive CQ drained
//! by one poller thread — with credit-based flow control ([`crate::van::ring`]). The scheduler's
//! control traffic and the QP bootstrap go over the ZMQ van.
//!
//! Built with the cargo feature `rdma` (libibverbs through `sideway`, loaded at run time: a
//! binary built with `rdma` starts on a host without libibverbs, and only this van reports it).

pub mod config;
#[cfg(feature = "rdma")]
mod verbs;

pub use config::RdmaConfig;
#[cfg(feature = "rdma")]
pub use verbs::RdmaVan;

use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// Creates the RDMA van, or says clearly why it cannot be had.
///
/// # Errors
/// [`Error::Config`] when this build has no RDMA van, libibverbs cannot be loaded, there is no
/// usable device, or an `RDMA_*` variable is wrong — each naming the ZMQ van as the alternative.
pub fn create(send_timeout: Duration) -> Result<Arc<dyn super::Van>> {
    let cfg = RdmaConfig::from_env()?;
    #[cfg(feature = "rdma")]
    {
        let van = RdmaVan::new(cfg, send_timeout)?;
        Ok(Arc::new(van))
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = (cfg, send_timeout);
        Err(Error::Config(
            "DMLC_PS_VAN_TYPE=rdma: this build has no RDMA van (build with `cargo build --features rdma`); \
             use the ZMQ van (DMLC_PS_VAN_TYPE=zmq or --van zmq)"
                .into(),
        ))
    }
}

/// The error for a missing RDMA stack, naming the alternative.
pub fn unavailable(why: impl std::fmt::Display) -> Error {
    Error::Config(format!(
        "DMLC_PS_VAN_TYPE=rdma: {why}; use the ZMQ van (DMLC_PS_VAN_TYPE=zmq or --van zmq)"
    ))
}
