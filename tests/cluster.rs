//! Real processes on loopback: the launcher, the binaries, kv-app, bench, and failures.

mod common;

use common::procs::{kv_app_ok, launch, text};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin(name: &str) -> PathBuf {
    let launch = PathBuf::from(env!("CARGO_BIN_EXE_pslite-launch"));
    launch.with_file_name(name)
}

#[test]
fn kv_app_one_server_one_worker() {
    kv_app_ok(1, 1, &[]);
}

#[test]
fn kv_app_two_servers_two_workers() {
    kv_app_ok(2, 2, &[]);
}

#[test]
fn kv_app_two_servers_four_workers() {
    kv_app_ok(2, 4, &[]);
}

#[test]
fn kv_app_a_million_keys_three_rounds_two_servers_two_workers() {
    // Key caching on (the default): pushes after the first, the pulls and push-pulls send
    // digests; every value is checked exactly.
    kv_app_ok(2, 2, &["--keys", "1000000", "--repeat", "3"]);
}

#[test]
fn kv_app_every_value_type() {
    for dtype in ["f64", "i32", "i64", "u8", "u32", "u64"] {
        kv_app_ok(
            2,
            2,
            &[
                "--dtype", dtype, "--keys", "2000", "--len", "3", "--repeat", "20",
            ],
        );
    }
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once("] ").map(|(_, rest)| rest.to_string()))
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

#[test]
fn bench_every_mode_moves_and_verifies_bytes() {
    for mode in ["push", "pull", "push-pull", "push-then-pull"] {
        let o = launch(
            2,
            2,
            &[
                "bench",
                "--mode",
                mode,
                "--len",
                "65536",
                "--keys-per-server",
                "8",
                "--seconds",
                "2",
                "--json",
            ],
        );
        assert!(o.status.success(), "bench {mode}:\n{}", text(&o));
        let runs = json_lines(&o);
        assert_eq!(runs.len(), 2, "one JSON line per worker:\n{}", text(&o));
        for r in runs {
            let pushed = r["bytes_pushed"].as_u64().expect("bytes_pushed");
            let pulled = r["bytes_pulled"].as_u64().expect("bytes_pulled");
            let requests = r["requests"].as_u64().expect("requests");
            assert_eq!(r["verified"], serde_json::Value::Bool(true));
            assert!(requests >= 16 && requests % 16 == 0, "{r}");
            assert!(r["goodput_gbps"].as_f64().expect("goodput") > 0.0);
            assert!(r["p99_ms"].as_f64() >= r["p50_ms"].as_f64());
            match mode {
                "push" => assert_eq!((pushed, pulled), (requests * 65536, 0)),
                "pull" => assert_eq!((pushed, pulled), (0, requests * 65536)),
                "push-pull" => assert_eq!((pushed, pulled), (requests * 65536, requests * 65536)),
                _ => assert_eq!(
                    (pushed, pulled),
                    (requests * 65536 / 2, requests * 65536 / 2)
                ),
            }
        }
    }
}

/// Checks one worker's JSON line of a bench `mode` run with 20,000 keys of 4 bytes per request
/// and `per_round` requests in each of its 3 rounds: verified, its key and request counts, its
/// keys per second (and memcpy's, faster) and the bytes it pushed and pulled.
fn check_many_keys_run(r: &serde_json::Value, mode: &str, per_round: u64) {
    assert_eq!(r["verified"], serde_json::Value::Bool(true));
    assert_eq!(r["keys_per_request"], 20000, "{r}");
    assert_eq!(r["requests"], 3 * per_round, "{r}");
    let keys_per_s = r["keys_per_s"].as_f64().expect("keys_per_s");
    let seconds = r["seconds"].as_f64().expect("seconds");
    let want = (3 * per_round * 20000) as f64 / seconds;
    assert!((keys_per_s - want).abs() <= want * 1e-6, "{r}");
    assert!(r["memcpy_keys_per_s"].as_f64().expect("memcpy") > keys_per_s);
    let pushed = r["bytes_pushed"].as_u64().expect("bytes_pushed");
    let pulled = r["bytes_pulled"].as_u64().expect("bytes_pulled");
    let (push, pull) = match mode {
        "push" => (3, 0),
        "pull" => (0, 3),
        _ => (3, 3),
    };
    assert_eq!((pushed, pulled), (push * 80000, pull * 80000), "{r}");
}

#[test]
fn bench_with_many_keys_per_request_counts_keys_and_verifies_bytes() {
    // 20,000 keys of 4 bytes in each request, over 2 servers; 3 rounds.
    for (mode, per_round) in [
        ("push", 1),
        ("pull", 1),
        ("push-pull", 1),
        ("push-then-pull", 2),
    ] {
        let o = launch(
            2,
            2,
            &[
                "bench",
                "--mode",
                mode,
                "--keys-per-request",
                "20000",
                "--len",
                "4",
                "--repeat",
                "3",
                "--json",
            ],
        );
        assert!(o.status.success(), "bench {mode}:\n{}", text(&o));
        let runs = json_lines(&o);
        assert_eq!(runs.len(), 2, "one JSON line per worker:\n{}", text(&o));
        for r in runs {
            check_many_keys_run(&r, mode, per_round);
        }
    }
    let o = launch(
        1,
        1,
        &[
            "bench",
            "--mode",
            "pull",
            "--keys-per-request",
            "10",
            "--zero-copy",
        ],
    );
    assert!(
        text(&o).contains("--zero-copy pulls one key per request"),
        "{}",
        text(&o)
    );
}

#[test]
fn missing_and_garbled_variables_are_named() {
    let run = |envs: &[(&str, &str)]| {
        let mut c = Command::new(bin("pslite-worker"));
        c.args(["kv-app"]).env_clear();
        for (k, v) in envs {
            c.env(k, v);
        }
        let o = c.output().expect("worker runs");
        assert_eq!(o.status.code(), Some(1));
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    assert_eq!(
        run(&[]).trim(),
        "pslite-worker: error: DMLC_PS_ROOT_URI is not set (nor --root-uri given): expected an IP address or host name, e.g. 127.0.0.1"
    );
    let base = [
        ("DMLC_PS_ROOT_URI", "127.0.0.1"),
        ("DMLC_PS_ROOT_PORT", "9"),
        ("DMLC_NUM_WORKER", "1"),
    ];
    let mut bad = base.to_vec();
    bad.push(("DMLC_NUM_SERVER", "two"));
    assert_eq!(
        run(&bad).trim(),
        "pslite-worker: error: DMLC_NUM_SERVER (or --num-servers) is \"two\": expected a whole number ≥ 1"
    );
    let mut bad = base.to_vec();
    bad.extend([("DMLC_NUM_SERVER", "1"), ("DMLC_PS_VAN_TYPE", "rdma")]);
    let err = run(&bad);
    if cfg!(feature = "rdma") {
        assert!(
            err.contains("DMLC_PS_VAN_TYPE=rdma: ") && err.contains("use the ZMQ van"),
            "{err}"
        );
    } else {
        assert!(err.contains("this build has no RDMA van (build with `cargo build --features rdma`); use the ZMQ van"), "{err}");
    }
}

#[test]
fn worker_without_scheduler_fails_within_the_deadline() {
    let port = pslite::free_port().expect("port").to_string();
    let t0 = Instant::now();
    let o = Command::new(bin("pslite-worker"))
        .args(["kv-app"])
        .envs(common::alone_on_loopback(&port))
        .output()
        .expect("worker runs");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!(
            "no answer from the scheduler at 127.0.0.1:{port} within 1 s"
        )),
        "{}",
        text(&o)
    );
}

#[test]
fn launcher_stops_everyone_when_a_worker_fails() {
    let port = pslite::free_port().expect("port");
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args([
            "local",
            "--servers",
            "2",
            "--workers",
            "2",
            "--port",
            &port.to_string(),
            "--",
            "kv-app",
            "--keys",
            "0",
        ])
        .output()
        .expect("launcher runs");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("--keys and --len must be at least 1"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("stopping the others"), "{}", text(&o));
    // No orphan keeps the scheduler's port.
    std::thread::sleep(Duration::from_millis(200));
    TcpListener::bind(("127.0.0.1", port)).expect("the scheduler is gone");
}

/// Spawns binary `name` as a node of `role` in a cluster of one server and one worker whose
/// scheduler is at 127.0.0.1:`port`, with `args`; its stderr is piped, its stdout dropped.
fn spawn_node(port: &str, name: &str, role: &str, args: &[&str]) -> std::process::Child {
    Command::new(bin(name))
        .args(args)
        .envs([
            ("DMLC_ROLE", role),
            ("DMLC_PS_ROOT_URI", "127.0.0.1"),
            ("DMLC_PS_ROOT_PORT", port),
            ("DMLC_NUM_SERVER", "1"),
            ("DMLC_NUM_WORKER", "1"),
            // 25 heartbeats per timeout: the killed worker's loss is what the scheduler
            // declares, not a busy server's (the bench keeps both cores busy).
            ("PS_HEARTBEAT_INTERVAL", "0.2"),
            ("PS_HEARTBEAT_TIMEOUT", "5"),
            // The scheduler's info log says when every node registered.
            ("PS_VERBOSE", "1"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn a_dead_worker_is_named_by_the_server_and_scheduler() {
    let port = pslite::free_port().expect("port").to_string();
    let spawn = |name: &str, role: &str, args: &[&str]| spawn_node(&port, name, role, args);
    let mut sched = spawn("pslite-scheduler", "scheduler", &[]);
    let server = spawn("pslite-server", "server", &[]);
    let mut worker = spawn(
        "pslite-worker",
        "worker",
        &["bench", "--len", "1024", "--seconds", "60"],
    );
    // The scheduler's stderr, read as it comes; the worker is killed once it registered.
    let log = common::procs::StderrLog::of(&mut sched);
    log.wait_for("all 2 nodes registered", Duration::from_secs(60));
    worker.kill().expect("kill worker");
    let _ = worker.wait();
    let t0 = Instant::now();
    let s = server.wait_with_output().expect("server ends");
    let c = sched.wait().expect("scheduler ends");
    let c_err = log.finish();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    let s_err = String::from_utf8_lossy(&s.stderr);
    assert_eq!(s.status.code(), Some(1), "{s_err}");
    assert_eq!(c.code(), Some(1), "{c_err}");
    assert!(
        s_err.contains(
            "peer lost: worker rank 0 (id 9) was declared lost by the scheduler: no heartbeat for"
        ),
        "the server's barrier fails as PeerLost: {s_err}"
    );
    assert!(
        c_err.contains(
            "peer lost: worker rank 0 (id 9) was declared lost by the scheduler: no heartbeat for"
        ),
        "the scheduler's too: {c_err}"
    );
}

#[test]
fn kv_app_pulls_through_the_rendezvous() {
    kv_app_ok(2, 2, &["--zero-copy", "--keys", "3000"]);
    kv_app_ok(
        1,
        2,
        &[
            "--zero-copy",
            "--dtype",
            "u8",
            "--len",
            "5",
            "--keys",
            "500",
        ],
    );
}

#[test]
fn bench_zero_copy_pulls_need_one_meta_data_round_trip_per_key_then_none() {
    for mode in ["pull", "push-then-pull"] {
        let o = launch(
            2,
            1,
            &[
                "bench",
                "--mode",
                mode,
                "--len",
                "65536",
                "--keys-per-server",
                "8",
                "--repeat",
                "5",
                "--zero-copy",
                "--json",
            ],
        );
        assert!(
            o.status.success(),
            "bench {mode} --zero-copy:\n{}",
            text(&o)
        );
        let runs = json_lines(&o);
        assert_eq!(runs.len(), 1, "{}", text(&o));
        let r = &runs[0];
        assert_eq!(r["zero_copy"], serde_json::Value::Bool(true));
        assert_eq!(r["verified"], serde_json::Value::Bool(true));
        assert_eq!(r["meta_round_trips_first"].as_f64(), Some(1.0), "{r}");
        assert_eq!(r["meta_round_trips_after"].as_f64(), Some(0.0), "{r}");
        assert_eq!(r["bytes_pulled"].as_u64(), Some(5 * 16 * 65536));
    }
    let o = launch(
        1,
        1,
        &["bench", "--mode", "push", "--zero-copy", "--repeat", "1"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("--zero-copy applies to the pull modes: pull, push-then-pull"),
        "{}",
        text(&o)
    );
}
