//! Helpers: test hosts on this machine, each a network namespace of its own
//! (`scripts/netns.sh`): host i has 198.18.0.(i+1) and fd00:18::(i+1) on eth0, and names
//! `hI`/`hI-6` in its /etc/hosts.

use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/netns.sh");

/// Hosts `NAME-h0` … made by one test, removed when dropped (a failed test's included).
pub struct Hosts {
    name: String,
}

fn script(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        .output()
        .expect("bash runs scripts/netns.sh")
}

impl Hosts {
    /// Makes `n` hosts named after `tag` (≤ 5 lowercase letters), with `mgmt`: a second
    /// interface `mgmt0` (198.19.0.(i+1)) that reaches no peer. Where namespaces cannot be
    /// made (not root, no iproute2) it prints why and returns `None`, unless
    /// `PSLITE_REQUIRE_NETNS=1` (as `.ci/run` sets), where that fails the test.
    pub fn up(tag: &str, n: usize, mgmt: bool) -> Option<Hosts> {
        let check = script(&["check"]);
        if !check.status.success() {
            let why = String::from_utf8_lossy(&check.stdout).to_string()
                + &String::from_utf8_lossy(&check.stderr);
            let missing = format!("no network namespaces can be made here: {why}");
            super::skip(
                "PSLITE_REQUIRE_NETNS",
                &missing,
                "run as root with iproute2",
            );
            return None;
        }
        let name = format!("{tag}{}", std::process::id());
        let hosts = Hosts { name };
        let n = n.to_string();
        let mut args = vec!["up", hosts.name.as_str(), n.as_str()];
        if mgmt {
            args.push("--mgmt");
        }
        let o = script(&args);
        assert!(
            o.status.success(),
            "netns.sh up failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Some(hosts)
    }

    /// Host `i`'s namespace.
    pub fn ns(&self, i: usize) -> String {
        format!("{}-h{i}", self.name)
    }

    /// Host `i`'s IPv4 address.
    pub fn v4(i: usize) -> String {
        format!("198.18.0.{}", i + 1)
    }

    /// Host `i`'s IPv6 address.
    pub fn v6(i: usize) -> String {
        format!("fd00:18::{}", i + 1)
    }

    /// A command running `exe` on host `i` (arguments and variables to be added).
    pub fn command(&self, i: usize, exe: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(i), exe]);
        c
    }
}

impl Hosts {
    /// The processes running on host `i`.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        let o = Command::new("ip")
            .args(["netns", "pids", &self.ns(i)])
            .output()
            .expect("ip netns pids runs");
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let o = script(&["down", &self.name]);
        if !o.status.success() {
            eprintln!(
                "netns.sh down {}: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}
