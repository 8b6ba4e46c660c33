//! The RDMA van's configuration: the variables of TF contrib/verbs (`shared/seeds/003_*`) with
//! its defaults, each range-checked with an error naming the variable, the value and the range
//! (read by `crate::config::vars`, as the cluster's variables are).

use crate::config::vars::Vars;
use crate::error::Result;

/// RDMA settings of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct RdmaConfig {
    /// `RDMA_DEVICE`: device name, e.g. `mlx5_0` or `rxe0` (default: the first device with an
    /// active port).
    pub device: Option<String>,
    /// `RDMA_DEVICE_PORT`: port number, from 1 (default 1).
    pub port: u8,
    /// `RDMA_GID_INDEX`: source GID index (default: a RoCE v2 GID of the port, IPv4-mapped
    /// first; none on InfiniBand, which addresses by LID).
    pub gid_index: Option<u32>,
    /// `RDMA_QP_PKEY_INDEX`: P_Key index (default 0).
    pub pkey_index: u16,
    /// `RDMA_QP_QUEUE_DEPTH`: send and receive queue depth, 2–65536 (default 1024).
    pub queue_depth: u32,
    /// `RDMA_QP_TIMEOUT`: local ACK timeout exponent, 0–31 (default 18: 4.096 µs × 2^18 ≈ 1.07 s,
    /// NCCL's `NCCL_IB_TIMEOUT` default in `net_ib.cc`; at 14, 67 ms, a worker's QP to a
    /// server answering 512 KB pulls over an emulated 0.4 Gbit/s link between two guests failed
    /// with retry exceeded, its ACKs queued behind the answers).
    pub timeout: u8,
    /// `RDMA_QP_RETRY_COUNT`: transport retries, 0–7 (default 6: Soft-RoCE retries forever at 7,
    /// so a dead peer's QP would never fail a WC; `tests/rdma.rs` shows 6 failing in seconds).
    pub retry_count: u8,
    /// `RDMA_QP_SL`: service level, 0–7 (default 0).
    pub sl: u8,
    /// `RDMA_QP_MTU`: path MTU in bytes, 256/512/1024/2048/4096 (default: the port's active MTU).
    pub mtu: Option<u32>,
    /// `RDMA_TRAFFIC_CLASS`: GRH traffic class, 0–255 (default 0).
    pub traffic_class: u8,
    /// `PS_RDMA_RING_BYTES`: each QP's receive ring (and send ring), 64 KiB–1 GiB (default 4 MiB).
    pub ring_bytes: u64,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            device: None,
            port: 1,
            gid_index: None,
            pkey_index: 0,
            queue_depth: 1024,
            timeout: 18,
            retry_count: 6,
            sl: 0,
            mtu: None,
            traffic_class: 0,
            ring_bytes: 4 << 20,
        }
    }
}

impl RdmaConfig {
    /// Reads the variables from the process environment.
    ///
    /// # Errors
    /// [`crate::Error::Config`] naming the variable that is out of range or malformed.
    pub fn from_env() -> Result<RdmaConfig> {
        RdmaConfig::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `lookup`.
    ///
    /// # Errors
    /// As [`RdmaConfig::from_env`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<RdmaConfig> {
        let d = RdmaConfig::default();
        let vars = Vars::new(lookup);
        let device = vars
            .raw("RDMA_DEVICE")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        // The two optional values first, then the rest: the first error is the one reported.
        Ok(RdmaConfig {
            device,
            gid_index: vars.ranged("RDMA_GID_INDEX", 0u32, 1023)?,
            mtu: vars.parsed("RDMA_QP_MTU", "256, 512, 1024, 2048 or 4096", |m: &u32| {
                matches!(m, 256 | 512 | 1024 | 2048 | 4096)
            })?,
            port: vars.ranged("RDMA_DEVICE_PORT", 1u8, 255)?.unwrap_or(d.port),
            pkey_index: vars
                .ranged("RDMA_QP_PKEY_INDEX", 0u16, u16::MAX)?
                .unwrap_or(d.pkey_index),
            queue_depth: vars
                .ranged("RDMA_QP_QUEUE_DEPTH", 2u32, 65536)?
                .unwrap_or(d.queue_depth),
            timeout: vars
                .ranged("RDMA_QP_TIMEOUT", 0u8, 31)?
                .unwrap_or(d.timeout),
            retry_count: vars
                .ranged("RDMA_QP_RETRY_COUNT", 0u8, 7)?
                .unwrap_or(d.retry_count),
            sl: vars.ranged("RDMA_QP_SL", 0u8, 7)?.unwrap_or(d.sl),
            traffic_class: vars
                .ranged("RDMA_TRAFFIC_CLASS", 0u8, 255)?
                .unwrap_or(d.traffic_class),
            ring_bytes: vars
                .ranged("PS_RDMA_RING_BYTES", 64u64 << 10, 1 << 30)?
                .unwrap_or(d.ring_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(pairs: &[(&str, &str)]) -> Result<RdmaConfig> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RdmaConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_are_the_seeds() {
        assert_eq!(load(&[]).expect("valid"), RdmaConfig::default());
        let c = load(&[
            ("RDMA_DEVICE", "rxe0"),
            ("RDMA_GID_INDEX", "1"),
            ("RDMA_QP_MTU", "1024"),
            ("RDMA_QP_SL", "7"),
        ])
        .expect("valid");
        assert_eq!(
            (c.device.as_deref(), c.gid_index, c.mtu, c.sl),
            (Some("rxe0"), Some(1), Some(1024), 7)
        );
    }

    #[test]
    fn out_of_range_values_name_the_variable() {
        let cases = [
            (
                "RDMA_QP_SL",
                "8",
                "RDMA_QP_SL is \"8\": expected a whole number from 0 to 7",
            ),
            (
                "RDMA_QP_TIMEOUT",
                "32",
                "RDMA_QP_TIMEOUT is \"32\": expected a whole number from 0 to 31",
            ),
            (
                "RDMA_QP_RETRY_COUNT",
                "-1",
                "RDMA_QP_RETRY_COUNT is \"-1\": expected a whole number from 0 to 7",
            ),
            (
                "RDMA_QP_QUEUE_DEPTH",
                "0",
                "RDMA_QP_QUEUE_DEPTH is \"0\": expected a whole number from 2 to 65536",
            ),
            (
                "RDMA_QP_MTU",
                "1500",
                "RDMA_QP_MTU is \"1500\": expected 256, 512, 1024, 2048 or 4096",
            ),
            (
                "RDMA_TRAFFIC_CLASS",
                "256",
                "RDMA_TRAFFIC_CLASS is \"256\": expected a whole number from 0 to 255",
            ),
            (
                "RDMA_DEVICE_PORT",
                "0",
                "RDMA_DEVICE_PORT is \"0\": expected a whole number from 1 to 255",
            ),
            (
                "RDMA_GID_INDEX",
                "x",
                "RDMA_GID_INDEX is \"x\": expected a whole number from 0 to 1023",
            ),
            (
                "RDMA_QP_PKEY_INDEX",
                "70000",
                "RDMA_QP_PKEY_INDEX is \"70000\": expected a whole number from 0 to 65535",
            ),
        ];
        for (var, val, want) in cases {
            assert_eq!(load(&[(var, val)]).expect_err(var).to_string(), want);
        }
    }
}
