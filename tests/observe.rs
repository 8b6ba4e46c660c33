//! Operability: Prometheus metrics scraped over HTTP during a bench, the "who waits
//! on whom" block of a worker whose server is stopped (on SIGUSR1 and when its wait times
//! out), `pslite-launch doctor`'s locked-memory check, and the launcher's summary across
//! workers.

mod common;

use common::roles::Cluster;
use pslite::apps::bench::{self, BenchArgs, Mode};
use std::time::{Duration, Instant};

/// The value of the sample `name{labels}` in a scrape (0 when absent).
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The sum of every sample of `name` (any labels).
fn total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn scrape(addr: std::net::SocketAddr) -> String {
    ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .expect("the metrics server answers")
        .body_mut()
        .read_to_string()
        .expect("a text body")
}

#[test]
fn metrics_listen_on_loopback_unless_asked_for_the_nodes_address() {
    // Nodes listening at 127.0.0.2 (another loopback address, so the test needs no network).
    let default: fn(&mut pslite::Config) = |c| {
        c.metrics.port = Some(0);
        c.node.host = "127.0.0.2".into();
    };
    let node: fn(&mut pslite::Config) = |c| {
        c.metrics.port = Some(0);
        c.node.host = "127.0.0.2".into();
        c.metrics.host = "node".into();
    };
    for (tweak, want) in [(default, "127.0.0.1"), (node, "127.0.0.2")] {
        let c = common::cluster_cfg(1, 1, 30.0, tweak, common::serve_default::<u8>);
        let addr = c.workers[0]
            .metrics_addr()
            .expect("the worker serves metrics");
        assert_eq!(addr.ip().to_string(), want);
        assert!(scrape(addr).contains("pslite_sent_bytes_total"));
        c.finish();
    }
}

/// Threads of this process (`Threads:` of /proc/self/status).
/// A cluster of `servers` servers summing u8 values and one worker, every node serving its
/// metrics on a free port.
fn with_metrics(servers: usize) -> common::Cluster {
    common::cluster_cfg(
        servers,
        1,
        30.0,
        |c| c.metrics.port = Some(0),
        common::serve_default::<u8>,
    )
}

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .expect("Threads:")
}

#[test]
fn idle_connections_to_the_metrics_cost_no_thread_and_do_not_stop_a_scrape() {
    let c = with_metrics(1);
    let addr = c.workers[0]
        .metrics_addr()
        .expect("the worker serves metrics");
    let before = threads();
    // 300 connections that never send a byte, then one that sends half a request.
    let mut idle: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(addr).expect("connect"))
        .collect();
    let mut half = std::net::TcpStream::connect(addr).expect("connect");
    std::io::Write::write_all(&mut half, b"GET /metrics HTTP/1.1\r\nHo").expect("write");
    idle.push(half);
    std::thread::sleep(Duration::from_millis(500));
    let during = threads();
    // A scrape still answers (it closes the oldest idle connection, if need be).
    let t0 = Instant::now();
    assert!(scrape(addr).contains("pslite_sent_bytes_total"));
    let took = t0.elapsed();
    drop(idle);
    c.finish();
    eprintln!("threads: {before} before, {during} with 301 idle connections; scrape {took:?}");
    // A thread per connection would add 301; the other tests of this binary, running beside
    // this one, start and end a few of their own meanwhile.
    assert!(
        during < before + 50,
        "{before} threads before, {during} with 301 idle metrics connections"
    );
}

#[test]
fn metrics_grow_during_a_bench_and_count_its_requests() {
    let c = with_metrics(2);
    let po = c.workers[0].clone();
    let addr = po.metrics_addr().expect("the worker serves metrics");
    let args = BenchArgs {
        mode: Mode::PushPull,
        len: 4096,
        keys_per_server: 8,
        repeat: None,
        seconds: Some(3.0),
        warmup: 0.0,
        json: None,
        zero_copy: false,
        keys_per_request: None,
    };
    let run = {
        let po = po.clone();
        std::thread::spawn(move || bench::run(&po, &args))
    };
    let sent = r#"pslite_sent_bytes_total{peer="server 1",van="zmq"}"#;
    std::thread::sleep(Duration::from_millis(1000));
    let first = scrape(addr);
    std::thread::sleep(Duration::from_millis(1000));
    let second = scrape(addr);
    let (a, b) = (sample(&first, sent), sample(&second, sent));
    assert!(
        a > 0.0 && b > a,
        "bytes to server 1 grew: {a} then {b}\n{second}"
    );
    let count = "pslite_request_seconds_count";
    assert!(total(&second, count) > total(&first, count));
    let report = run.join().expect("no panic").expect("the bench ran");
    counts_after_the_bench(&scrape(addr), &report);
    c.finish();
}

/// The metrics `end` scraped after a bench: every request the bench `report`s counted once,
/// nothing in flight, the bytes received from both servers the bench's.
fn counts_after_the_bench(end: &str, report: &pslite::apps::bench::BenchReport) {
    let requests = report
        .requests_total
        .expect("a one-key bench counts its requests");
    assert_eq!(
        total(end, "pslite_request_seconds_count") as usize,
        requests,
        "the latency histograms count every request the bench sent\n{end}"
    );
    assert_eq!(
        total(end, "pslite_requests_total") as usize,
        requests,
        "{end}"
    );
    assert!(
        requests > report.figures.requests,
        "set-up pushes come on top"
    );
    assert_eq!(sample(end, "pslite_inflight_requests"), 0.0, "{end}");
    assert_eq!(sample(end, "pslite_inflight_bytes"), 0.0, "{end}");
    let got = sample(
        end,
        r#"pslite_received_bytes_total{peer="server 0",van="zmq"}"#,
    ) + sample(
        end,
        r#"pslite_received_bytes_total{peer="server 1",van="zmq"}"#,
    );
    assert_eq!(got as u64, report.traffic.received_bytes, "{end}");
}

/// A cluster of 2 servers and 1 worker running a long bench, with `PS_TIMEOUT` seconds.
fn bench_cluster(timeout: &str) -> Cluster {
    let env = [
        ("PS_TIMEOUT", timeout),
        ("PS_HEARTBEAT_TIMEOUT", "120"),
        ("PS_VERBOSE", "1"),
    ];
    let c = Cluster::start(2, 1, &env, &["bench", "--seconds", "120", "--len", "4096"]);
    for name in ["scheduler", "server0", "server1", "worker0"] {
        c.wait_for(name, " started: ", Duration::from_secs(30));
    }
    std::thread::sleep(Duration::from_millis(500));
    c
}

/// The block in `out` that starts with `heading`.
fn block(out: &str, heading: &str) -> String {
    let Some(at) = out.find(heading) else {
        return String::new();
    };
    out[at..]
        .lines()
        .take_while(|l| !l.contains(" INFO ") || l.contains(heading))
        .take(30)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_stopped_server_is_named_by_the_waits_block_on_sigusr1_and_at_the_timeout() {
    let c = bench_cluster("10");
    c.signal("server1", libc::SIGSTOP);
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    c.signal("worker0", libc::SIGUSR1);
    c.wait_for(
        "worker0",
        "who waits on whom (SIGUSR1)",
        Duration::from_secs(10),
    );
    let out = c.output("worker0");
    let b = block(&out, "who waits on whom (SIGUSR1)");
    assert!(
        b.contains("waits for server rank 1 (id 10): ") && b.contains("request part(s)"),
        "the block names the stopped server's outstanding requests:\n{b}"
    );
    assert!(b.contains("last heard from: "), "{b}");
    // The scheduler's block: who it has heard from, and when.
    c.signal("scheduler", libc::SIGUSR1);
    c.wait_for(
        "scheduler",
        "who waits on whom (SIGUSR1)",
        Duration::from_secs(10),
    );
    let s = block(&c.output("scheduler"), "who waits on whom (SIGUSR1)");
    assert!(s.contains("scheduler: last heartbeats: "), "{s}");
    assert!(s.contains("server rank 1 (id 10) "), "{s}");
    // PS_TIMEOUT (10 s) after the requests to server 1 were sent, the wait gives up and the
    // block comes by itself, naming it.
    c.wait_for(
        "worker0",
        "who waits on whom (a wait timed out",
        Duration::from_secs(30),
    );
    assert!(stopped.elapsed() >= Duration::from_secs(9));
    let out = c.output("worker0");
    let b = block(&out, "who waits on whom (a wait timed out");
    assert!(
        b.contains("server rank 1 (id 10)"),
        "the timeout's block names the stopped server:\n{b}"
    );
    assert!(
        !b.contains("waits for server rank 0"),
        "server 0 answered everything:\n{b}"
    );
}

/// `pslite-launch doctor --role ROLE` under `ulimit -l 64` without CAP_IPC_LOCK, for a cluster
/// of one server and two workers whose scheduler (127.0.0.1:9) never runs, with `env` on top.
fn doctor_under_64_kib_memlock(role: &str, env: &[(&str, &str)]) -> std::process::Output {
    // Root has CAP_IPC_LOCK, which lifts the limit: dropped (util-linux's setpriv). Others
    // have no such capability to drop (and may not change the bounding set).
    // SAFETY: geteuid has no preconditions.
    let drop_cap = if unsafe { libc::geteuid() } == 0 {
        "setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock"
    } else {
        ""
    };
    let script = format!(
        "ulimit -l 64 && exec {drop_cap} {} doctor --role {role}",
        env!("CARGO_BIN_EXE_pslite-launch")
    );
    std::process::Command::new("bash")
        .args(["-c", &script])
        .env("DMLC_PS_ROOT_URI", "127.0.0.1")
        .env("DMLC_PS_ROOT_PORT", "9")
        .env("DMLC_NUM_SERVER", "1")
        .env("DMLC_NUM_WORKER", "2")
        .envs(env.iter().copied())
        .output()
        .expect("bash runs")
}

/// `pslite-launch doctor` for an RDMA server under `ulimit -l 64` without CAP_IPC_LOCK.
#[test]
fn doctor_fails_a_low_memlock_limit_with_the_fix() {
    let out = doctor_under_64_kib_memlock(
        "server",
        &[
            ("DMLC_PS_VAN_TYPE", "rdma"),
            ("PS_POOL_BYTES", "1048576"),
            ("PS_RDMA_RING_BYTES", "65536"),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("memlock:"))
        .unwrap_or_default();
    assert!(line.contains("FAIL"), "{text}");
    // 1 MiB pool + 2 rings x 2 workers x 64 KiB.
    assert!(line.contains("pins 1310720 bytes"), "{line}");
    assert!(line.contains("RLIMIT_MEMLOCK is 65536 bytes"), "{line}");
    assert!(
        text.contains("fix: raise the locked-memory limit: `ulimit -l unlimited`"),
        "{text}"
    );

    // Without the RDMA van the same limit is fine.
    let ok = doctor_under_64_kib_memlock("worker", &[("DMLC_PS_VAN_TYPE", "zmq")]);
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{text}");
    assert!(text.contains("ok   memlock: 65536 bytes"), "{text}");
    assert!(
        text.contains("WARN scheduler: 127.0.0.1:9 is not reachable"),
        "{text}"
    );
}

#[test]
fn the_launcher_sums_its_workers_and_prints_where_metrics_are() {
    let out = common::procs::launch(
        1,
        2,
        &[
            "bench",
            "--len",
            "4096",
            "--keys-per-server",
            "8",
            "--repeat",
            "20",
        ],
    );
    let text = common::procs::text(&out);
    assert!(out.status.success(), "{text}");
    for (node, role) in [
        ("scheduler", "scheduler"),
        ("server 0", "server"),
        ("worker 0", "worker"),
        ("worker 1", "worker"),
    ] {
        assert!(
            text.contains(&format!(
                "[{node}] pslite: {role} metrics at http://127.0.0.1:"
            )),
            "{text}"
        );
    }
    let summary = text
        .lines()
        .find(|l| l.starts_with("pslite-launch: bench across 2 workers: goodput "))
        .unwrap_or_else(|| panic!("a summary line:\n{text}"));
    // 20 rounds of 8 keys per worker.
    assert!(
        summary.contains("(all workers' 320 requests together)"),
        "{summary}"
    );
    assert!(
        summary.contains("latency p50 ") && summary.contains(" p99 "),
        "{summary}"
    );
    assert!(
        summary.contains("pulled bytes verified on every worker"),
        "{summary}"
    );
    assert!(
        !text.contains("@pslite"),
        "the workers' lines for the launcher are not shown"
    );
}

/// With its standard output on a terminal (util-linux's `script` gives it one), the launcher
/// draws one progress line for all workers.
#[test]
fn on_a_terminal_the_launcher_draws_one_progress_line_for_all_workers() {
    let cmd = format!(
        "{} local --servers 1 --workers 2 -- bench --len 4096 --keys-per-server 4 --seconds 3",
        env!("CARGO_BIN_EXE_pslite-launch")
    );
    let out = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // "bench, 2 workers: 1200/6000 ms (w0 20% w1 20%)", redrawn in place.
    assert!(text.contains("bench, 2 workers: "), "{text}");
    assert!(text.contains(" ms (w0 ") && text.contains(" w1 "), "{text}");
    assert!(
        text.contains("pslite-launch: bench across 2 workers: "),
        "{text}"
    );
}
