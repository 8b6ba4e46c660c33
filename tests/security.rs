//! Only members talk to the cluster, and a member speaks only as itself. Real processes on
//! loopback (`pslite-launch local`, which draws a token per run, or is given one, and gives
//! each server and worker only its own key), attacked with a stock ZMQ client.

mod common;

use common::attack::{attack, dealer, port_of, terminate};
use common::launched::{without_info, Launched};
use pslite::auth::{Identity, NodeKey, Secret, Token};
use pslite::wire::SCHEDULER;
use std::collections::HashMap;
use std::process::Command as Process;
use std::time::Duration;

const TOKEN: &str = "the test cluster's token, 0123456789";

#[test]
fn strangers_cannot_stop_the_cluster_and_are_named_in_a_warning() {
    let port = pslite::free_port().expect("port");
    // Three attacks of about 0.6 s each after a 0.3 s pause: 5000 rounds (about 7 s in a debug
    // build) outlast them on a loaded machine, where 2000 (about 3 s) did not always.
    let run = Launched::kv_app_s2w2(port, 5000, &[("PS_VERBOSE", "0")]);
    run.wait_line("started worker 1");
    std::thread::sleep(Duration::from_millis(300));
    // A stock client without authentication, many times; then one that guesses a password
    // for the scheduler's own identity, and one with another cluster's token.
    attack(port, None, &terminate(SCHEDULER), 100);
    let guess = ("node:1".to_string(), "00".repeat(32));
    attack(port, Some(guess), &terminate(SCHEDULER), 10);
    let other = Token::new("another cluster's token, 0123456789").expect("token");
    attack(
        port,
        Some(other.credential(Identity::Node(1), SCHEDULER)),
        &terminate(1),
        10,
    );
    run.assert_still_running();
    let out = run.finish_exact(Duration::from_secs(120));
    let refused: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("refused a connection from 127.0.0.1"))
        .collect();
    assert!(
        refused
            .iter()
            .any(|l| l.contains("its proof as node:1 does not match")),
        "{out}"
    );
    // Rate-limited: libzmq retries a refused connection, the warnings do not follow it.
    assert!(refused.len() <= 4, "{}", refused.join("\n"));
    assert!(!out.contains(TOKEN), "{out}");
}

#[test]
fn strangers_cannot_push_release_a_barrier_or_register() {
    // Every node logs at info: the servers' ports are read from their "started" lines.
    let port = pslite::free_port().expect("port");
    let run = Launched::kv_app_s2w2(port, 2000, &[("PS_AUTH_TOKEN", TOKEN), ("PS_VERBOSE", "1")]);
    let other = Token::new("another cluster's token, 0123456789").expect("token");
    // Registrations as a server while the real ones start: none may take a server's place.
    run.wait_line("started scheduler");
    let add = common::attack::add_server(-1, None);
    attack(port, None, &add, 20);
    attack(
        port,
        Some(other.credential(Identity::Joiner, SCHEDULER)),
        &add,
        20,
    );
    let server = |who: &str| port_of(&run.wait_line(&format!("{who} started: ")), who);
    let (s0, s1) = (server("(id 8)"), server("(id 10)"));
    run.wait_line("worker rank 1 (id 11) started: ");
    common::attack::forge_a_push_and_a_release(&other, s0, s1);
    std::thread::sleep(Duration::from_millis(500));
    run.assert_still_running();
    // Had the push been applied, both workers would count 10 errors; had the release been
    // obeyed, server 1 would have left mid-run and the workers failed.
    let out = run.finish_exact(Duration::from_secs(120));
    let shown = without_info(&out);
    for who in ["server rank 0 (id 8)", "server rank 1 (id 10)"] {
        assert!(out.contains(&format!("{who} started: ")), "{shown}");
    }
    assert!(
        shown.contains("its proof as join does not match")
            && shown.contains("its proof as node:9 does not match"),
        "{shown}"
    );
}

#[test]
fn a_member_cannot_speak_for_another_node() {
    let port = pslite::free_port().expect("port");
    let run = Launched::kv_app_s2w2(port, 2000, &[("PS_AUTH_TOKEN", TOKEN)]);
    run.wait_line("started worker 1");
    std::thread::sleep(Duration::from_millis(300));
    // Knows the token, proves to be node 11 (a worker), and claims to be the scheduler; then
    // a joiner (no id yet) that sends a TERMINATE.
    let token = Token::new(TOKEN).expect("token");
    attack(
        port,
        Some(token.credential(Identity::Node(11), SCHEDULER)),
        &terminate(SCHEDULER),
        3,
    );
    attack(
        port,
        Some(token.credential(Identity::Joiner, SCHEDULER)),
        &terminate(-1),
        3,
    );
    run.assert_still_running();
    let out = run.finish_exact(Duration::from_secs(120));
    assert!(
        out.contains(
            "dropped a message from 127.0.0.1"
        ) && out.contains("a Terminate answer from worker rank 1 (id 11) that claims to come from scheduler (id 1)"),
        "{out}"
    );
    assert!(
        out.contains(
            "a Terminate answer from a node that has not joined (only ADD_NODE is accepted before)"
        ),
        "{out}"
    );
}

#[test]
fn a_member_cannot_move_a_server_with_a_forged_node_replaced() {
    // The token's holder proves to be the scheduler (a member holding only its key cannot:
    // `a_member_holding_worker_0s_key_speaks_as_no_one_else`) and tells worker 0 that
    // server 0 now listens at a port of its own. Without checkpoints no node is ever replaced:
    // worker 0 keeps its server and kv-app ends exact.
    let port = pslite::free_port().expect("port");
    let sink = pslite::free_port().expect("port");
    let run = Launched::kv_app_s2w2(port, 2000, &[("PS_AUTH_TOKEN", TOKEN), ("PS_VERBOSE", "1")]);
    let worker = port_of(
        &run.wait_line("worker rank 0 (id 9) started: "),
        "worker rank 0 (id 9)",
    );
    run.wait_line("started worker 1");
    let token = Token::new(TOKEN).expect("token");
    attack(
        worker,
        Some(token.credential(Identity::Node(SCHEDULER), 9)),
        &common::attack::node_replaced(SCHEDULER, 9, sink),
        3,
    );
    run.assert_still_running();
    let out = run.finish_exact(Duration::from_secs(120));
    assert!(
        out.contains(
            "dropped a NODE_REPLACED from scheduler (id 1): it names server rank 0 (id 8), but \
             this cluster replaces no node (no PS_CHECKPOINT_DIR)"
        ),
        "{out}"
    );
}

#[test]
fn a_node_with_another_token_is_refused_with_the_reason() {
    let port = pslite::free_port().expect("port").to_string();
    let node = |exe: &str, token: &str| {
        Process::new(exe)
            .envs([
                ("DMLC_PS_ROOT_URI", "127.0.0.1"),
                ("DMLC_PS_ROOT_PORT", port.as_str()),
                ("DMLC_NUM_SERVER", "1"),
                ("DMLC_NUM_WORKER", "1"),
                ("PS_TIMEOUT", "20"),
                ("PS_AUTH_TOKEN", token),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let mut scheduler = node(env!("CARGO_BIN_EXE_pslite-scheduler"), TOKEN);
    std::thread::sleep(Duration::from_millis(300));
    let wrong = "not the cluster's token, 0123456789";
    let server = node(env!("CARGO_BIN_EXE_pslite-server"), wrong);
    let t0 = std::time::Instant::now();
    let o = server.wait_with_output().expect("server");
    let _ = scheduler.kill();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(15), "{out}");
    assert!(
        out.contains("refused this node's proof (ZAP status 400)")
            && out.contains("this node's PS_AUTH_TOKEN differs from the scheduler's"),
        "{out}"
    );
    assert!(!out.contains(wrong) && !out.contains(TOKEN), "{out}");
    let _ = scheduler.wait();
}

#[test]
fn a_node_without_a_token_refuses_a_scheduler_off_loopback() {
    // 198.18.0.1 is never reached: the configuration is refused first.
    let o = Process::new(env!("CARGO_BIN_EXE_pslite-server"))
        .envs([
            ("DMLC_PS_ROOT_URI", "198.18.0.1"),
            ("DMLC_PS_ROOT_PORT", "9"),
            ("DMLC_NUM_SERVER", "1"),
            ("DMLC_NUM_WORKER", "1"),
        ])
        .env_remove("PS_AUTH_TOKEN")
        .env_remove("PS_AUTH_TOKEN_FILE")
        .env_remove("PS_AUTH")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("no PS_AUTH_TOKEN: the scheduler (198.18.0.1:9) is not on loopback")
            && err.contains("PS_AUTH=none"),
        "{err}"
    );
}

#[test]
fn a_node_without_authentication_says_so_once_at_start() {
    // A scheduler alone, on loopback, whose start-up gives up after a second: what it says
    // at start is all this test reads.
    let run = |auth: &[(&str, &str)]| {
        let err = common::scheduler_alone(auth);
        assert!(err.contains("PS_TIMEOUT"), "{err}");
        err.matches("no authentication (PS_AUTH=none, or no PS_AUTH_TOKEN")
            .count()
    };
    assert_eq!(run(&[]), 1, "no token, on loopback");
    assert_eq!(run(&[("PS_AUTH", "none")]), 1, "PS_AUTH=none");
    assert_eq!(run(&[("PS_AUTH_TOKEN", TOKEN)]), 0, "with a token");
}

#[test]
fn an_in_process_cluster_with_a_token_pushes_and_pulls_exact_sums() {
    let c = common::cluster_cfg(
        2,
        2,
        20.0,
        |c| {
            c.auth = Some(
                Token::new("the in-process test token, 0123")
                    .expect("token")
                    .into(),
            )
        },
        common::serve_default::<f32>,
    );
    let keys = [5, u64::MAX / 2 + 3];
    for po in &c.workers {
        let kv = pslite::KVWorker::<f32>::new(po, 0, 0).expect("worker");
        kv.wait(kv.push(&keys, &[1.0, 2.0], None).expect("push"))
            .expect("wait");
    }
    po_barrier(&c);
    let kv = pslite::KVWorker::<f32>::new(&c.workers[0], 0, 0).expect("worker");
    let ts = kv.pull(&keys).expect("pull");
    assert_eq!(kv.take_pulled(ts).expect("pulled").vals, vec![2.0, 4.0]);
    drop(kv);
    c.finish();
}

/// Every worker passes a barrier of the workers (their pushes were all answered before).
fn po_barrier(c: &common::Cluster) {
    let waits: Vec<_> = c
        .workers
        .iter()
        .cloned()
        .map(|po| std::thread::spawn(move || po.barrier(pslite::postoffice::WORKER_GROUP)))
        .collect();
    for w in waits {
        w.join().expect("no panic").expect("barrier");
    }
}

/// Starts `exe` with `args` as the node of rank `rank` in a cluster of one server and two
/// workers whose scheduler is at 127.0.0.1:`port`, with a 5 s heartbeat timeout and 25
/// heartbeats in it. Only the scheduler's log is kept (at info, for its registration line).
fn start_node(port: &str, exe: &str, args: &[&str], rank: &str) -> std::process::Child {
    let scheduler = exe.ends_with("pslite-scheduler");
    let err = || match scheduler {
        true => std::process::Stdio::piped(),
        false => std::process::Stdio::null(),
    };
    Process::new(exe)
        .args(args)
        .envs([
            ("DMLC_PS_ROOT_URI", "127.0.0.1"),
            ("DMLC_PS_ROOT_PORT", port),
            ("DMLC_NUM_SERVER", "1"),
            ("DMLC_NUM_WORKER", "2"),
            ("PS_TIMEOUT", "30"),
            ("PS_HEARTBEAT_TIMEOUT", "5"),
            ("PS_HEARTBEAT_INTERVAL", "0.2"),
            ("PS_VERBOSE", if scheduler { "1" } else { "0" }),
            ("PS_AUTH_TOKEN", TOKEN),
            ("PSLITE_RANK", rank),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(err())
        .spawn()
        .expect("spawn")
}

/// Connections to the scheduler at 127.0.0.1:`port` that forge heartbeats: a stranger's,
/// another cluster's node 11's, and a member's that proves to be worker 0.
fn heartbeat_forgers(ctx: &zmq::Context, port: u16) -> [zmq::Socket; 3] {
    let other = Token::new("another cluster's token, 0123456789").expect("token");
    let member = Token::new(TOKEN).expect("token");
    [
        dealer(ctx, port, None),
        dealer(
            ctx,
            port,
            Some(other.credential(Identity::Node(11), SCHEDULER)),
        ),
        dealer(
            ctx,
            port,
            Some(member.credential(Identity::Node(9), SCHEDULER)),
        ),
    ]
}

#[test]
fn forged_heartbeats_do_not_keep_a_killed_worker_alive() {
    // Started by hand (the launcher would stop every node once a worker died): a scheduler,
    // a server and two workers running kv-app, with a 5 s heartbeat timeout and 25 heartbeats
    // in it, so that the killed worker is the one the scheduler loses, not a busy node.
    let port = pslite::free_port().expect("port").to_string();
    let start = |exe: &str, args: &[&str], rank: &str| start_node(&port, exe, args, rank);
    let mut scheduler = start(env!("CARGO_BIN_EXE_pslite-scheduler"), &[], "0");
    let mut others = vec![start(env!("CARGO_BIN_EXE_pslite-server"), &[], "0")];
    let kv_app = ["kv-app", "--repeat", "100000"];
    for rank in ["0", "1"] {
        others.push(start(env!("CARGO_BIN_EXE_pslite-worker"), &kv_app, rank));
    }
    // The scheduler's log, read as it comes; worker 1 is killed once everyone registered.
    let log = common::procs::StderrLog::of(&mut scheduler);
    log.wait_for("all 3 nodes registered", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    others[2].kill().expect("kill worker rank 1");
    let t0 = std::time::Instant::now();
    // Worker 1's heartbeats, every 100 ms until the scheduler gives up on it (at most 20 s),
    // from each forger. Had one been taken, the scheduler would wait as long as they come.
    let ctx = zmq::Context::new();
    let forgers = heartbeat_forgers(&ctx, port.parse().expect("port"));
    while t0.elapsed() < Duration::from_secs(20) {
        if scheduler.try_wait().expect("try_wait").is_some() {
            break;
        }
        for f in &forgers {
            f.send(common::attack::heartbeat(11), zmq::DONTWAIT).ok();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t0.elapsed();
    let _ = scheduler.kill();
    let status = scheduler.wait().expect("the scheduler ends");
    let err = log.finish();
    for mut o in others {
        let _ = o.kill();
        let _ = o.wait();
    }
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("worker rank 1 (id 11)") && err.contains("no heartbeat for"),
        "{err}"
    );
    assert!(
        err.contains("a Heartbeat request from worker rank 0 (id 9) that claims to come from worker rank 1 (id 11)"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(15),
        "the scheduler still waited for worker 1 after {took:?}: {err}"
    );
}

#[test]
fn pslite_launch_gives_servers_and_workers_their_key_and_not_the_token() {
    let out = Process::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args(["local", "--servers", "1", "--workers", "1", "--worker-cmd"])
        .arg("echo key=${PS_AUTH_NODE_KEY:+set} token=${PS_AUTH_TOKEN:-none}${PS_AUTH_TOKEN_FILE:-}; exit 3")
        .env("PS_AUTH_TOKEN", TOKEN)
        .env("PS_TIMEOUT", "5")
        .output()
        .expect("run");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the worker exits 3:\n{text}");
    assert!(text.contains("[worker 0] key=set token=none"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
}

/// What a hostile worker 0 holds: its key (PS_AUTH_NODE_KEY), that key as its secret, and the
/// credentials the scheduler's table gave it for the servers; checked to give no credential
/// as the scheduler or as worker 1.
fn worker_0s_holdings() -> (NodeKey, Secret, HashMap<i32, String>) {
    let token = Token::new(TOKEN).expect("token");
    let key = NodeKey::from_hex(9, &token.node_key(9).to_hex()).expect("key");
    let member = Secret::Key(key.clone());
    let reach: HashMap<i32, String> = [8, 10]
        .map(|s| (s, token.credential(Identity::Node(9), s).1))
        .into();
    for (who, to) in [(SCHEDULER, 8), (11, 8)] {
        let e = member
            .credential(Identity::Node(who), to, &reach)
            .expect_err("not its own identity");
        assert!(e.contains("holds the key of node:9 only"), "{e}");
    }
    (key, member, reach)
}

#[test]
fn a_member_holding_worker_0s_key_speaks_as_no_one_else() {
    let port = pslite::free_port().expect("free port");
    let run = Launched::kv_app_s2w2(port, 2000, &[("PS_AUTH_TOKEN", TOKEN), ("PS_VERBOSE", "1")]);
    let s0 = port_of(&run.wait_line("server rank 0 (id 8) started: "), "(id 8)");
    let s1 = port_of(&run.wait_line("server rank 1 (id 10) started: "), "(id 10)");
    run.wait_line("worker rank 1 (id 11) started: ");
    let (key, member, reach) = worker_0s_holdings();
    let ctx = zmq::Context::new();
    let as_itself = |port, to| {
        let c = member
            .credential(Identity::Node(9), to, &reach)
            .expect("its own");
        dealer(&ctx, port, Some(c))
    };
    let forged = common::attack::offer_worker_0s_key_as_others(&ctx, &key, s0, s1);
    // As itself: a NODE_REPLACED and a TERMINATE to server 0, a push as worker 1 there; a
    // TERMINATE to the scheduler.
    let to_s0 = as_itself(s0, 8);
    to_s0
        .send(common::attack::node_replaced(9, 8, 9), 0)
        .expect("send");
    to_s0.send(terminate(9), 0).expect("send");
    let push = common::attack::push_frames(11, 8, 0, pslite::DType::F32, &[0], vec![0; 4]);
    to_s0.send_multipart(push.iter(), 0).expect("send");
    let to_scheduler = as_itself(port, SCHEDULER);
    to_scheduler.send(terminate(9), 0).expect("send");
    // A registration as server rank 0 that names itself as the sender (a registration over
    // its connection without one is refused too: auth::admit's unit test; the warnings are
    // one per address and identity every 10 s).
    let add = common::attack::add_server(9, Some(0));
    to_scheduler.send(add, 0).expect("send");
    std::thread::sleep(Duration::from_millis(500));
    run.assert_still_running();
    drop((forged, to_s0, to_scheduler));
    let out = without_info(&run.finish_exact(Duration::from_secs(180)));
    for refused in [
        "refused a connection from 127.0.0.1: its proof as node:1 does not match",
        "refused a connection from 127.0.0.1: its proof as node:11 does not match",
        "dropped a NodeReplaced answer from worker rank 0 (id 9): only the scheduler gives it",
        "dropped a Terminate answer from worker rank 0 (id 9): only the scheduler gives it",
        "a data message from worker rank 0 (id 9) that claims to come from worker rank 1 (id 11)",
        "a registration that names a sender (worker rank 0 (id 9)) over a connection that \
         proved worker rank 0 (id 9)",
    ] {
        assert!(out.contains(refused), "no {refused:?}:\n{out}");
    }
}
