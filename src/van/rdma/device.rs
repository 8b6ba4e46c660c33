//! The RDMA device this node uses, chosen once when the van starts: which device and port
//! (`RDMA_DEVICE`, `RDMA_DEVICE_PORT`), which source GID (`RDMA_GID_INDEX`, else the port's
//! RoCE v2 GID on Ethernet, none on InfiniBand), which path MTU (`RDMA_QP_MTU`, at most the
//! port's active MTU), and the protection domain and the two completion queues that every
//! channel of the node shares.

use super::{unavailable, RdmaConfig};
use crate::error::{Error, Result};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu, PortAttr, PortState};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use std::sync::Arc;

/// The opened device, its protection domain and the two shared CQs, and what the port says
/// about addressing (GID, LID, MTU). Field order is drop order: the PD and the CQs go before
/// the device context.
pub(super) struct Device {
    /// Every QP and memory region of the van is made in this PD.
    pub pd: Arc<ProtectionDomain>,
    /// The send CQ of every QP (the poller drains it).
    pub send_cq: Arc<BasicCompletionQueue>,
    /// The receive CQ of every QP (the poller drains it).
    pub recv_cq: Arc<BasicCompletionQueue>,
    _ctx: Arc<DeviceContext>,
    /// The settings the device was chosen with (queue depth, ring size, QP attributes).
    pub cfg: RdmaConfig,
    /// The port number, from 1.
    pub port: u8,
    /// The source GID index; `None` on InfiniBand without `RDMA_GID_INDEX` (LID addressing).
    pub gid_index: Option<u8>,
    /// The source GID (all zero without a GID index).
    pub gid: [u8; 16],
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The path MTU offered to peers, in bytes (256 … 4096).
    pub mtu: u32,
    /// Whether the port's link layer is Ethernet (RoCE): a GRH is then always needed.
    pub ethernet: bool,
}

/// The device and port chosen, with the port's attributes.
pub(super) struct Port {
    pub name: String,
    pub ctx: Arc<DeviceContext>,
    pub attr: PortAttr,
}

impl Device {
    /// Opens the device of `cfg` (or the first with an active port), and makes the PD and the
    /// two CQs (each of `8 × queue_depth` entries).
    ///
    /// # Errors
    /// [`Error::Config`] (through [`unavailable`], naming the ZMQ van) when libibverbs cannot
    /// be loaded, there is no device, the named device or port is missing or inactive, or no
    /// usable GID is found; [`Error::Van`] when the CQs or the PD cannot be made.
    pub fn open(cfg: RdmaConfig) -> Result<Device> {
        if !libibverbs_loadable() {
            return Err(unavailable("libibverbs.so.1 cannot be loaded (Debian: apt-get install libibverbs1 ibverbs-providers)"));
        }
        let Port { name, ctx, attr } = choose_port(&cfg)?;
        let ethernet = attr.link_layer() == LinkLayer::Ethernet;
        let gid_index = choose_gid_index(&cfg, &name, &ctx, &attr, ethernet)?;
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
        let port_mtu = mtu_bytes(attr.active_mtu());
        let mtu = cfg.mtu.unwrap_or(port_mtu).min(port_mtu);
        let (send_cq, recv_cq, pd) = shared_queues(&name, &ctx, cfg.queue_depth)?;
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
            lid: attr.lid(),
            mtu,
            ethernet,
            cfg,
        })
    }
}

/// The device named by `RDMA_DEVICE`, else the first whose port `RDMA_DEVICE_PORT` is active.
pub(super) fn choose_port(cfg: &RdmaConfig) -> Result<Port> {
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
        let attr = ctx.query_port(cfg.port).map_err(|e| {
            unavailable(format!(
                "{} port {} (RDMA_DEVICE_PORT): {e}",
                dev.name(),
                cfg.port
            ))
        })?;
        if attr.port_state() == PortState::Active || cfg.device.is_some() {
            chosen = Some(Port {
                name: dev.name(),
                ctx,
                attr,
            });
            break;
        }
    }
    let Some(port) = chosen else {
        return Err(unavailable(match &cfg.device {
            Some(d) => format!("RDMA_DEVICE={d:?} is not among the devices {names:?}"),
            None => format!(
                "no RDMA device has an active port {} (devices: {names:?})",
                cfg.port
            ),
        }));
    };
    if port.attr.port_state() != PortState::Active {
        return Err(unavailable(format!(
            "{} port {} is not active",
            port.name, cfg.port
        )));
    }
    Ok(port)
}

/// `RDMA_GID_INDEX`, else on Ethernet the port's first RoCE v2 GID, else none (InfiniBand).
pub(super) fn choose_gid_index(
    cfg: &RdmaConfig,
    name: &str,
    ctx: &Arc<DeviceContext>,
    attr: &PortAttr,
    ethernet: bool,
) -> Result<Option<u32>> {
    match cfg.gid_index {
        Some(i) => Ok(Some(i)),
        None if ethernet => roce_v2_gid(ctx, cfg.port, attr.gid_tbl_len())
            .map(Some)
            .ok_or_else(|| {
                unavailable(format!(
                    "{name} port {} has no RoCE v2 GID; set RDMA_GID_INDEX",
                    cfg.port
                ))
            }),
        None => Ok(None),
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

type SharedQueues = (
    Arc<BasicCompletionQueue>,
    Arc<BasicCompletionQueue>,
    Arc<ProtectionDomain>,
);

/// The send CQ, the receive CQ (each of `8 × depth` entries) and the PD.
fn shared_queues(name: &str, ctx: &Arc<DeviceContext>, depth: u32) -> Result<SharedQueues> {
    // Basic CQs (ibv_poll_cq): rxe's extended-CQ poll advances past the producer when
    // ibv_next_poll and ibv_end_poll are both used, replaying stale completions.
    let cq = |what: &str| {
        ctx.create_cq_builder()
            .setup_cqe(depth * 8)
            .build()
            .map_err(|e| {
                Error::Van(format!(
                    "{name}: cannot create the {what} CQ: {e}; {}",
                    crate::van::memlock::diagnose(0)
                ))
            })
    };
    let send_cq = cq("send")?;
    let recv_cq = cq("receive")?;
    let pd = ctx
        .alloc_pd()
        .map_err(|e| Error::Van(format!("{name}: cannot allocate a PD: {e}")))?;
    Ok((send_cq, recv_cq, pd))
}

/// Bytes of a path MTU. (sideway's [`Mtu`] converts from the verbs enum value only, not to
/// or from bytes.)
pub(super) fn mtu_bytes(m: Mtu) -> u32 {
    match m {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

/// The path MTU of `bytes` (256, 512, 1024, 2048; anything else is 4096).
pub(super) fn mtu_of(bytes: u32) -> Mtu {
    match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

pub(super) fn libibverbs_loadable() -> bool {
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
