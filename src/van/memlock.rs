//! The locked-memory limit (`RLIMIT_MEMLOCK`) and what RDMA pins against it.
//!
//! Registering memory for RDMA pins its pages, and the kernel counts them against the
//! process's `RLIMIT_MEMLOCK` (64 KiB or 8 MiB on many distributions, and in containers). The
//! most reported RDMA failure of BytePS is `ibv_reg_mr … Cannot allocate memory` (byteps#216,
//! #282, #295, #313, #365, #369, #372): this module turns it into a diagnosis with the fix,
//! for the RDMA van's registrations and for `pslite-launch doctor`.

use prometheus_client::metrics::gauge::Gauge;
use std::sync::LazyLock;

/// Bytes this process has registered for RDMA now (rings, credit words, the pool, key-store
/// chunks), all vans together: what counts against `RLIMIT_MEMLOCK`. Also the
/// `pslite_rdma_registered_bytes` metric.
pub static REGISTERED: LazyLock<Gauge> = LazyLock::new(Gauge::default);

/// This process's locked-memory limit in bytes (the soft limit); `None`: unlimited.
pub fn limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return None;
    }
    (r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// `CAP_IPC_LOCK`'s bit in the capability sets (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// Whether this process may lock memory past the limit: it has `CAP_IPC_LOCK` in its
/// effective set (root usually has), read from `/proc/self/status`.
pub fn exempt() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The bytes the kernel pins for a registration of `[addr, addr + len)`: whole pages (what
/// counts against the limit).
pub fn pinned(addr: usize, len: usize) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    };
    if len == 0 {
        return 0;
    }
    let first = addr / page;
    let last = (addr + len - 1) / page;
    ((last - first + 1) * page) as u64
}

/// Bytes a node pins on the RDMA van: the pool (`PS_POOL_BYTES`), registered whole, plus a
/// send ring and a receive ring (`PS_RDMA_RING_BYTES` each) per peer with a QP (a worker's
/// servers, a server's workers). Key-store chunks registered as write sources come on top, as
/// values are stored.
pub fn needed(pool_bytes: u64, ring_bytes: u64, peers: u64) -> u64 {
    pool_bytes.saturating_add(2u64.saturating_mul(peers).saturating_mul(ring_bytes))
}

/// How to raise the limit, for every place a node may run.
pub const FIX: &str = "raise the locked-memory limit: `ulimit -l unlimited` in the shell that \
starts the node (needs the hard limit: `* - memlock unlimited` in /etc/security/limits.conf), \
`LimitMEMLOCK=infinity` for a systemd unit, `--ulimit memlock=-1` for docker run, \
`ulimits: memlock: -1` in docker compose, `--propagate=MEMLOCK` or `PropagateResourceLimits` \
under Slurm; or pin less: a smaller PS_POOL_BYTES or PS_RDMA_RING_BYTES";

/// Text for a refused registration of `len` more bytes in this process: when the limit
/// explains it, says so with the numbers and [`FIX`]; otherwise what the limit is, in case.
pub fn diagnose(len: u64) -> String {
    diagnosis(len, REGISTERED.get().max(0) as u64, limit(), exempt())
}

/// [`diagnose`]'s text for `len` more bytes with `have` registered, the limit `limit` (`None`:
/// unlimited) and `exempt` (`CAP_IPC_LOCK`).
pub fn diagnosis(len: u64, have: u64, limit: Option<u64>, exempt: bool) -> String {
    if exempt {
        return "this process has CAP_IPC_LOCK, so the locked-memory limit does not apply: the \
                device or the kernel refused for another reason (memory exhausted?)"
            .to_string();
    }
    match limit {
        Some(lim) if have.saturating_add(len) > lim => format!(
            "the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is {} and this process already \
             has {} registered, so {} more cannot be pinned: {FIX}",
            bytes(lim),
            bytes(have),
            bytes(len)
        ),
        Some(lim) => format!(
            "the locked-memory limit (RLIMIT_MEMLOCK) is {}, with {} registered; if the device \
             says 'Cannot allocate memory', {FIX}",
            bytes(lim),
            bytes(have)
        ),
        None => "the locked-memory limit is unlimited, so the device or the kernel refused for \
                 another reason"
            .to_string(),
    }
}

/// `n` bytes for people: "67108864 bytes (64.0 MiB)".
pub fn bytes(n: u64) -> String {
    format!("{n} bytes ({:.1} MiB)", n as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_pins_whole_pages() {
        assert_eq!(pinned(4096, 4096), 4096);
        assert_eq!(pinned(4095, 2), 8192);
        assert_eq!(pinned(100, 64), 4096);
        assert_eq!(pinned(0, 0), 0);
    }

    #[test]
    fn needed_counts_the_pool_and_two_rings_per_peer() {
        assert_eq!(needed(256 << 20, 4 << 20, 3), (256 << 20) + 24 * (1 << 20));
        assert_eq!(needed(u64::MAX, 1, 1), u64::MAX);
    }

    #[test]
    fn a_diagnosis_names_the_limit_and_the_fix_when_it_explains_the_refusal() {
        let d = diagnosis(4 << 20, 1 << 20, Some(64 << 10), false);
        assert!(
            d.starts_with("the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is 65536 bytes"),
            "{d}"
        );
        assert!(
            d.contains("already has 1048576 bytes (1.0 MiB) registered"),
            "{d}"
        );
        assert!(
            d.contains("so 4194304 bytes (4.0 MiB) more cannot be pinned"),
            "{d}"
        );
        assert!(d.contains("`ulimit -l unlimited`"), "{d}");
        let within = diagnosis(4096, 0, Some(1 << 30), false);
        assert!(
            within.contains("if the device says 'Cannot allocate memory'"),
            "{within}"
        );
        assert!(diagnosis(1 << 40, 0, None, false).contains("unlimited"));
        assert!(diagnosis(1 << 40, 0, Some(1), true).contains("CAP_IPC_LOCK"));
    }
}
