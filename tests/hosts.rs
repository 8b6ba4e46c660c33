//! The cluster across hosts: every process in a network namespace of its own
//! (`scripts/netns.sh`), so none can reach another over loopback and each address must be
//! chosen and announced right: IPv4, IPv6, `DMLC_INTERFACE` on a host with two interfaces,
//! `DMLC_NODE_HOST` as a host name, and the errors of a misconfigured node.

mod common;

use common::netns::Hosts;
use common::roles::{all_output, Cluster, Ended};
use std::time::{Duration, Instant};

const TOKEN: &str = "hosts-test-token-0123456789";
const PORT: &str = "9100";

/// Variables one node gets on top of the cluster's: `(role, rank, host) -> [(name, value)]`.
type PerNode = dyn Fn(&str, usize, usize) -> Vec<(String, String)>;

/// Where each role runs: the scheduler on host 0, server r on host 1 + r, worker r on host
/// 1 + S + r.
fn host_of(role: &str, rank: usize, servers: usize) -> usize {
    match role {
        "scheduler" => 0,
        "server" => 1 + rank,
        _ => 1 + servers + rank,
    }
}

/// Runs kv-app on S servers and W workers, each node on its own host, with the scheduler at
/// `root`; `per_node(role, rank, host)` adds variables to one node. Asserts every node ended
/// with 0 and every worker's sums were exact; returns how they ended.
fn kv_app(
    hosts: &Hosts,
    (servers, workers): (usize, usize),
    root: &str,
    per_node: &PerNode,
) -> Vec<Ended> {
    let (s, w) = (servers.to_string(), workers.to_string());
    let mut c = Cluster::empty(&[
        ("DMLC_PS_ROOT_URI", root),
        ("DMLC_PS_ROOT_PORT", PORT),
        ("DMLC_NUM_SERVER", &s),
        ("DMLC_NUM_WORKER", &w),
        ("PS_AUTH_TOKEN", TOKEN),
        ("PS_TIMEOUT", "60"),
        ("PS_VERBOSE", "1"),
    ]);
    let mut roles = vec![("scheduler", 0, env!("CARGO_BIN_EXE_pslite-scheduler"))];
    roles.extend((0..servers).map(|r| ("server", r, env!("CARGO_BIN_EXE_pslite-server"))));
    roles.extend((0..workers).map(|r| ("worker", r, env!("CARGO_BIN_EXE_pslite-worker"))));
    for (role, rank, exe) in roles {
        let host = host_of(role, rank, servers);
        let ns = hosts.ns(host);
        let extra = per_node(role, rank, host);
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (name, rank, args): (String, Option<usize>, &[&str]) = match role {
            "scheduler" => ("scheduler".into(), None, &[]),
            "server" => (format!("server{rank}"), Some(rank), &[]),
            _ => (
                format!("worker{rank}"),
                Some(rank),
                &["kv-app", "--keys", "1000", "--repeat", "10"],
            ),
        };
        c.add_in(
            &["ip", "netns", "exec", &ns],
            &name,
            exe,
            rank,
            args,
            &extra,
        );
    }
    let ended = c.wait_all(Instant::now(), Duration::from_secs(120));
    let all = all_output(&ended);
    for e in &ended {
        assert_eq!(e.code, Some(0), "{} failed:\n{all}", e.name);
    }
    for r in 0..workers {
        let mine = &ended[1 + servers + r].output;
        assert!(
            mine.contains(&format!("worker {r}: error: 0, 0")),
            "worker {r}:\n{all}"
        );
    }
    ended
}

fn none(_: &str, _: usize, _: usize) -> Vec<(String, String)> {
    Vec::new()
}

/// The scheduler's line listing where every node registered.
fn table(ended: &[Ended]) -> String {
    let out = &ended[0].output;
    out.lines()
        .find(|l| l.contains("nodes registered: "))
        .unwrap_or_else(|| panic!("no node table in the scheduler's log:\n{out}"))
        .to_string()
}

#[test]
fn kv_app_s2w4_with_each_node_on_its_own_host_over_ipv4() {
    let Some(hosts) = Hosts::up("four", 7, false) else {
        return;
    };
    let ended = kv_app(&hosts, (2, 4), &Hosts::v4(0), &none);
    let t = table(&ended);
    for (who, host) in [("server rank 1 (id 10)", 2), ("worker rank 3 (id 15)", 6)] {
        assert!(t.contains(&format!("{who} at {}:", Hosts::v4(host))), "{t}");
    }
}

#[test]
fn kv_app_s2w4_with_each_node_on_its_own_host_over_ipv6() {
    let Some(hosts) = Hosts::up("six", 7, false) else {
        return;
    };
    // The servers choose by the route to the scheduler, the workers by DMLC_INTERFACE (eth0
    // has an IPv4 address too: the scheduler's family decides).
    let by_interface = |role: &str, _: usize, _: usize| match role {
        "worker" => vec![("DMLC_INTERFACE".into(), "eth0".into())],
        _ => Vec::new(),
    };
    let ended = kv_app(&hosts, (2, 4), &Hosts::v6(0), &by_interface);
    let t = table(&ended);
    for (who, host) in [("server rank 0 (id 8)", 1), ("worker rank 2 (id 13)", 5)] {
        assert!(
            t.contains(&format!("{who} at [{}]:", Hosts::v6(host))),
            "{t}"
        );
    }
    assert!(!t.contains("198.18."), "{t}");
}

#[test]
fn node_hosts_given_as_names_resolve_through_each_hosts_etc_hosts() {
    let Some(hosts) = Hosts::up("names", 4, false) else {
        return;
    };
    let named =
        |_: &str, _: usize, host: usize| vec![("DMLC_NODE_HOST".into(), format!("h{host}"))];
    let ended = kv_app(&hosts, (1, 2), "h0", &named);
    let t = table(&ended);
    // Announced as the address the name resolved to, so every peer dials what is listened on.
    assert!(t.contains("server rank 0 (id 8) at 198.18.0.2:"), "{t}");
    assert!(t.contains("worker rank 1 (id 11) at 198.18.0.4:"), "{t}");
}

/// Hosts with two interfaces: mgmt0 (listed first, reaching no peer) and eth0 (the data
/// network). The automatic choice and DMLC_INTERFACE=eth0 work; DMLC_INTERFACE=mgmt0 on one
/// worker makes it unreachable, and it says so within PS_TIMEOUT.
#[test]
fn dmlc_interface_picks_the_data_interface_and_a_wrong_pick_fails() {
    let Some(hosts) = Hosts::up("mgmt", 3, true) else {
        return;
    };
    let ended = kv_app(&hosts, (1, 1), &Hosts::v4(0), &none);
    assert!(table(&ended).contains(&format!("worker rank 0 (id 9) at {}:", Hosts::v4(2))));
    assert!(!table(&ended).contains("198.19."));
    let eth0 = |_: &str, _: usize, _: usize| vec![("DMLC_INTERFACE".into(), "eth0".into())];
    kv_app(&hosts, (1, 1), &Hosts::v4(0), &eth0);

    let mut c = Cluster::empty(&[
        ("DMLC_PS_ROOT_URI", &Hosts::v4(0)),
        ("DMLC_PS_ROOT_PORT", PORT),
        ("DMLC_NUM_SERVER", "1"),
        ("DMLC_NUM_WORKER", "1"),
        ("PS_AUTH_TOKEN", TOKEN),
        ("PS_TIMEOUT", "4"),
    ]);
    let (h0, h1, h2) = (hosts.ns(0), hosts.ns(1), hosts.ns(2));
    c.add_in(
        &["ip", "netns", "exec", &h0],
        "scheduler",
        env!("CARGO_BIN_EXE_pslite-scheduler"),
        None,
        &[],
        &[],
    );
    c.add_in(
        &["ip", "netns", "exec", &h1],
        "server0",
        env!("CARGO_BIN_EXE_pslite-server"),
        Some(0),
        &[],
        &[],
    );
    let wrong = [("DMLC_INTERFACE", "mgmt0")];
    c.add_in(
        &["ip", "netns", "exec", &h2],
        "worker0",
        env!("CARGO_BIN_EXE_pslite-worker"),
        Some(0),
        &["kv-app"],
        &wrong,
    );
    let t0 = Instant::now();
    let ended = c.wait_all(t0, Duration::from_secs(30));
    let worker = ended.iter().find(|e| e.name == "worker0").expect("worker0");
    let want = format!("can it reach this node at {}:", "198.19.0.3");
    assert_eq!(worker.code, Some(1), "{}", all_output(&ended));
    assert!(
        worker
            .output
            .contains("start-up: no answer from the scheduler at 198.18.0.1:9100 within 4 s")
            && worker.output.contains(&want),
        "{}",
        all_output(&ended)
    );
    assert!(worker.after < Duration::from_secs(12), "{:?}", worker.after);
}

/// Runs kv-app's worker alone on host 0 with `vars` on top of a cluster's variables
/// (`PS_TIMEOUT=2`); asserts it failed with 1 within 10 s and returns its stderr, trimmed.
fn misconfigured_worker(hosts: &Hosts, vars: &[(&str, &str)]) -> String {
    let t0 = Instant::now();
    let o = hosts
        .command(0, env!("CARGO_BIN_EXE_pslite-worker"))
        .arg("kv-app")
        .env("DMLC_PS_ROOT_PORT", PORT)
        .env("DMLC_NUM_SERVER", "1")
        .env("DMLC_NUM_WORKER", "1")
        .env("PS_AUTH_TOKEN", TOKEN)
        .env("PS_TIMEOUT", "2")
        .envs(vars.iter().copied())
        .output()
        .expect("the worker runs");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(1));
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// A misconfigured node says which variable is wrong and what it found.
#[test]
fn misconfigured_addresses_are_errors_naming_the_variable() {
    let Some(hosts) = Hosts::up("bad", 1, false) else {
        return;
    };
    let run = |vars: &[(&str, &str)]| misconfigured_worker(&hosts, vars);
    let mine = "lo (127.0.0.1, ::1), eth0 (198.18.0.1, fd00:18::1)";
    assert_eq!(
        run(&[
            ("DMLC_PS_ROOT_URI", "198.18.0.1"),
            ("DMLC_NODE_HOST", "198.18.0.2")
        ]),
        format!(
            "pslite-worker: error: DMLC_NODE_HOST=\"198.18.0.2\" (198.18.0.2) is not an address \
             of this host, so this node cannot listen there; this host has: {mine}"
        )
    );
    assert_eq!(
        run(&[
            ("DMLC_PS_ROOT_URI", "198.18.0.1"),
            ("DMLC_INTERFACE", "eth1")
        ]),
        format!(
            "pslite-worker: error: DMLC_INTERFACE=\"eth1\": this host has no such interface \
             with an address; it has: {mine}"
        )
    );
    let e = run(&[("DMLC_PS_ROOT_URI", "h9")]);
    assert!(
        e.starts_with(
            "pslite-worker: error: DMLC_PS_ROOT_URI=\"h9\" does not resolve to an address"
        ),
        "{e}"
    );
    let out = run(&[("DMLC_PS_ROOT_URI", "198.18.0.99")]);
    // The error is the last line; before it, the waits block says what was waited for.
    assert!(
        out.contains("who waits on whom (a wait timed out: ")
            && out.contains(
                "this node (no id yet) waits for the scheduler's node table (start-up) at \
                 198.18.0.99:9100"
            ),
        "{out}"
    );
    let e = out.lines().last().unwrap_or_default();
    assert!(
        e.starts_with(
            "pslite-worker: error: timed out: start-up: no answer from the scheduler at \
             198.18.0.99:9100 within 2 s (PS_TIMEOUT)"
        ) && e.contains("can it reach this node at 198.18.0.1:"),
        "{e}"
    );
}
