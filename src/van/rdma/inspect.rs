//! What `pslite-launch doctor` shows of the RDMA stack: every device and port —
//! state, link layer, active MTU, GID table with each entry's type (IB/RoCE v1, RoCE v2) and
//! address — and which device, port and GID index the RDMA van would take with these
//! `RDMA_*` variables ([`super::device`]'s choice, so the two never disagree).

use super::device::{choose_gid_index, choose_port, libibverbs_loadable, mtu_bytes};
use super::RdmaConfig;
use crate::error::Result;
use sideway::ibverbs::device::{Device, DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, PortAttr, PortState};

/// Lines describing the devices, then the van's choice. `Err`: the van could not start here
/// (the same error it would give, naming the fix).
pub fn describe(cfg: &RdmaConfig) -> Result<Vec<String>> {
    if !libibverbs_loadable() {
        return Err(super::unavailable(
            "libibverbs.so.1 cannot be loaded (Debian: apt-get install libibverbs1 ibverbs-providers)",
        ));
    }
    let mut lines = Vec::new();
    if let Ok(list) = DeviceList::new() {
        for dev in list.iter() {
            describe_device(&dev, cfg.port, &mut lines);
        }
    }
    let port = choose_port(cfg)?;
    let ethernet = port.attr.link_layer() == LinkLayer::Ethernet;
    let gid = choose_gid_index(cfg, &port.name, &port.ctx, &port.attr, ethernet)?;
    lines.push(format!(
        "the RDMA van would use {} port {} GID index {} (RDMA_DEVICE, RDMA_DEVICE_PORT, \
         RDMA_GID_INDEX)",
        port.name,
        cfg.port,
        gid.map_or("none (InfiniBand: LID)".to_string(), |i| i.to_string())
    ));
    Ok(lines)
}

/// Lines describing `dev`'s port `port` (state, link layer, active MTU) and its GID table,
/// or why it has none.
fn describe_device(dev: &Device<'_>, port: u8, lines: &mut Vec<String>) {
    let Ok(ctx) = dev.open() else {
        lines.push(format!("{}: cannot be opened", dev.name()));
        return;
    };
    let Ok(attr) = ctx.query_port(port) else {
        lines.push(format!("{}: no port {}", dev.name(), port));
        return;
    };
    let link = if attr.link_layer() == LinkLayer::Ethernet {
        "Ethernet (RoCE)"
    } else {
        "InfiniBand"
    };
    let state = if attr.port_state() == PortState::Active {
        "ACTIVE".to_string()
    } else {
        format!("{:?}", attr.port_state())
    };
    lines.push(format!(
        "{} port {}: {state}, {link}, active MTU {}",
        dev.name(),
        port,
        mtu_bytes(attr.active_mtu())
    ));
    describe_gids(&ctx, port, &attr, lines);
}

/// A line per entry of `port`'s GID table that is not zero: its index, type (IB, RoCE v1,
/// RoCE v2) and address (an IPv4 address where it maps one).
fn describe_gids(ctx: &DeviceContext, port: u8, attr: &PortAttr, lines: &mut Vec<String>) {
    for i in 0..attr.gid_tbl_len().clamp(0, 256) as u32 {
        let Ok(gid) = ctx.query_gid(port, i) else {
            continue;
        };
        if gid.is_zero() {
            continue;
        }
        let kind = match ctx.query_gid_type(port, i).ok() {
            Some(1) => "RoCE v2",
            Some(0) if attr.link_layer() == LinkLayer::Ethernet => "RoCE v1",
            Some(0) => "IB",
            _ => "unknown type",
        };
        let ip = std::net::Ipv6Addr::from(gid.raw);
        let shown = ip
            .to_ipv4_mapped()
            .map_or(ip.to_string(), |v4| v4.to_string());
        lines.push(format!("  GID index {i}: {kind}, {shown}"));
    }
}
