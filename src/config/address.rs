//! Where a node listens, and so the address it announces to its peers: `DMLC_NODE_HOST`, else
//! an address of `DMLC_INTERFACE`, else the one this host's routing table would use to reach
//! the scheduler (IPv4 or IPv6, the scheduler's family).
//!
//! ps-lite binds every interface and announces `DMLC_NODE_HOST` or the first IPv4 address it
//! finds; on a host with several interfaces that is often the wrong one, so here a
//! node listens only on the address it announces, and that address is checked to be its own.

use super::vars::Vars;
use crate::error::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs, UdpSocket};

/// The addresses `host` (an IP literal, with or without `[]`, or a host name) resolves to, in
/// the resolver's order, without repeats.
///
/// # Errors
/// The resolver's error when the name does not resolve.
pub fn resolve(host: &str) -> std::io::Result<Vec<IpAddr>> {
    let h = host.trim().trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let mut ips: Vec<IpAddr> = Vec::new();
    for a in (h, 0).to_socket_addrs()? {
        if !ips.contains(&a.ip()) {
            ips.push(a.ip());
        }
    }
    if ips.is_empty() {
        return Err(std::io::Error::other("no address"));
    }
    Ok(ips)
}

/// This host's interfaces and their usable addresses (IPv6 link-local ones left out: they
/// need a scope to be reached).
fn interfaces() -> Result<Vec<(String, IpAddr)>> {
    let all = if_addrs::get_if_addrs()
        .map_err(|e| Error::Config(format!("cannot list this host's interfaces: {e}")))?;
    Ok(all
        .into_iter()
        .map(|a| (a.name.clone(), a.ip()))
        .filter(|(_, ip)| !is_link_local(ip))
        .collect())
}

fn is_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
}

/// `name (addr, addr), …` for an error message.
fn listing(ifs: &[(String, IpAddr)]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (n, _) in ifs {
        if !names.contains(&n.as_str()) {
            names.push(n);
        }
    }
    let one = |n: &str| {
        let ips: Vec<String> = ifs
            .iter()
            .filter(|(m, _)| m == n)
            .map(|(_, ip)| ip.to_string())
            .collect();
        format!("{n} ({})", ips.join(", "))
    };
    names.into_iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The scheduler's address family: IPv6 when `DMLC_PS_ROOT_URI` is (or resolves first to) an
/// IPv6 address, else IPv4.
///
/// # Errors
/// [`Error::Config`] naming `DMLC_PS_ROOT_URI` when it does not resolve.
pub(super) fn root_ip(root_uri: &str) -> Result<IpAddr> {
    match resolve(root_uri) {
        Ok(ips) => Ok(ips[0]),
        Err(e) => Err(Error::Config(format!(
            "DMLC_PS_ROOT_URI={root_uri:?} does not resolve to an address ({e}): expected an \
             IP address or a host name this host can resolve"
        ))),
    }
}

/// The address to listen on and announce (module docs).
///
/// # Errors
/// [`Error::Config`] naming the variable: `DMLC_NODE_HOST` not resolving or not an address of
/// this host; `DMLC_INTERFACE` missing or without an address of the scheduler's family;
/// `DMLC_PS_ROOT_URI` not resolving (when the choice depends on it).
pub(super) fn node_host<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    root_uri: &str,
) -> Result<String> {
    if let Some(h) = vars.raw("DMLC_NODE_HOST").filter(|h| !h.trim().is_empty()) {
        return own_host(h.trim());
    }
    let root = root_ip(root_uri)?;
    if let Some(name) = vars.raw("DMLC_INTERFACE").filter(|n| !n.trim().is_empty()) {
        return interface_address(name.trim(), root_uri, root);
    }
    if root.is_loopback() {
        return Ok(root.to_string());
    }
    if let Some(ip) = route_to(root) {
        return Ok(ip.to_string());
    }
    // No route: the first address of the family (the start then reports the scheduler
    // unreachable within PS_TIMEOUT).
    let first = interfaces()?
        .into_iter()
        .map(|(_, ip)| ip)
        .find(|ip| !ip.is_loopback() && ip.is_ipv6() == root.is_ipv6());
    Ok(first.unwrap_or(loopback(root)).to_string())
}

fn loopback(like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

/// The source address this host's routing table picks to reach `dest` (a UDP socket's
/// `connect` sends nothing; it only looks the route up).
pub fn route_to(dest: IpAddr) -> Option<IpAddr> {
    let any = match dest {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let sock = UdpSocket::bind((any, 0)).ok()?;
    sock.connect((dest, 9)).ok()?;
    let ip = sock.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// The address of this host `DMLC_NODE_HOST` names (a host name's first one that is this
/// host's): announced as an IP address, so that every peer dials the address listened on
/// whatever its own resolver says.
fn own_host(host: &str) -> Result<String> {
    let ips = resolve(host).map_err(|e| {
        Error::Config(format!(
            "DMLC_NODE_HOST={host:?} does not resolve to an address ({e}): expected an IP \
             address of this host or a host name resolving to one"
        ))
    })?;
    let ifs = interfaces()?;
    if let Some(ip) = ips
        .iter()
        .find(|ip| ifs.iter().any(|(_, mine)| mine == *ip))
    {
        return Ok(ip.to_string());
    }
    let shown: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
    Err(Error::Config(format!(
        "DMLC_NODE_HOST={host:?} ({}) is not an address of this host, so this node cannot \
         listen there; this host has: {}",
        shown.join(", "),
        listing(&ifs)
    )))
}

/// `name`'s first address of `root`'s family.
fn interface_address(name: &str, root_uri: &str, root: IpAddr) -> Result<String> {
    let ifs = interfaces()?;
    let mine: Vec<IpAddr> = ifs
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, ip)| *ip)
        .collect();
    if mine.is_empty() {
        return Err(Error::Config(format!(
            "DMLC_INTERFACE={name:?}: this host has no such interface with an address; it has: {}",
            listing(&ifs)
        )));
    }
    let family = if root.is_ipv6() { "IPv6" } else { "IPv4" };
    mine.iter()
        .find(|ip| ip.is_ipv6() == root.is_ipv6())
        .map(|ip| ip.to_string())
        .ok_or_else(|| {
            let have: Vec<String> = mine.iter().map(|ip| ip.to_string()).collect();
            Error::Config(format!(
                "DMLC_INTERFACE={name:?} has no {family} address, and the scheduler \
                 (DMLC_PS_ROOT_URI={root_uri:?}) is {family}; {name} has: {}",
                have.join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(pairs: &[(&str, &str)], root: &str) -> String {
        let lookup = |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        match node_host(&Vars::new(lookup), root) {
            Ok(h) => h,
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn loopback_schedulers_give_loopback_of_their_family() {
        assert_eq!(host(&[], "127.0.0.1"), "127.0.0.1");
        assert_eq!(host(&[], "::1"), "::1");
        assert_eq!(host(&[], "[::1]"), "::1");
        assert_eq!(
            host(&[], "localhost")
                .parse::<IpAddr>()
                .map(|ip| ip.is_loopback()),
            Ok(true)
        );
    }

    #[test]
    fn a_node_host_must_be_this_hosts() {
        assert_eq!(
            host(&[("DMLC_NODE_HOST", "127.0.0.1")], "127.0.0.1"),
            "127.0.0.1"
        );
        assert_eq!(host(&[("DMLC_NODE_HOST", "[::1]")], "::1"), "::1");
        let e = host(&[("DMLC_NODE_HOST", "198.18.255.254")], "127.0.0.1");
        assert!(
            e.starts_with(
                "DMLC_NODE_HOST=\"198.18.255.254\" (198.18.255.254) is \
                 not an address of this host, so this node cannot listen there; this host has: "
            ) && e.contains("lo (127.0.0.1"),
            "{e}"
        );
        let e = host(&[("DMLC_NODE_HOST", "no-such-host.invalid")], "127.0.0.1");
        assert!(
            e.contains("DMLC_NODE_HOST=\"no-such-host.invalid\" does not resolve"),
            "{e}"
        );
    }

    #[test]
    fn an_interface_gives_its_address_of_the_schedulers_family() {
        assert_eq!(host(&[("DMLC_INTERFACE", "lo")], "127.0.0.1"), "127.0.0.1");
        let e = host(&[("DMLC_INTERFACE", "nosuchif0")], "127.0.0.1");
        assert!(
            e.contains("DMLC_INTERFACE=\"nosuchif0\": this host has no such interface")
                && e.contains("lo (127.0.0.1"),
            "{e}"
        );
    }

    #[test]
    fn a_root_that_does_not_resolve_is_named() {
        let e = host(&[], "no-such-host.invalid");
        assert!(
            e.starts_with("DMLC_PS_ROOT_URI=\"no-such-host.invalid\" does not resolve"),
            "{e}"
        );
    }

    #[test]
    fn link_local_addresses_are_not_used() {
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(!is_link_local(&"fd00::1".parse().unwrap()));
        assert!(!is_link_local(&"198.18.0.1".parse().unwrap()));
    }
}
