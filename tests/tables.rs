//! Embedding tables on a cluster: a worker pulls rows of keys never pushed (their initial rows),
//! pushes gradients and gets the optimizer's rows back, across two servers; bad requests and bad
//! specs are refused with their text; the server's metrics count what the table did.

mod common;

use common::cluster_with;
use pslite::kv::table::{serve_tables, Table, TableSpec};
use pslite::{Error, KVWorker};
use std::process::Command;

fn spec(line: &str) -> TableSpec {
    line.parse().unwrap_or_else(|e| panic!("{e}"))
}

/// The rows a table of `s` gives `keys` after `pushes` (gradients per push), computed in
/// this process: the reference the servers must match bit for bit.
fn reference(s: &TableSpec, keys: &[u64], pushes: &[Vec<f32>]) -> Vec<f32> {
    let mut t = Table::new(s).expect("table");
    for g in pushes {
        t.push(keys, g, None).expect("push");
    }
    let mut out = vec![0.0; keys.len() * s.dim];
    t.pull(keys, &mut out).expect("pull");
    out
}

#[test]
fn a_worker_trains_rows_on_two_servers_with_the_table_s_optimizer() {
    let line = "app=3,dim=4,init=normal:0:0.01,seed=5,opt=adagrad:lr=0.05";
    let c = cluster_with(2, 1, 20.0, move |po| {
        Ok(Box::new(serve_tables(po, &[spec(line)])?))
    });
    let kv = KVWorker::<f32>::new(&c.workers[0], 3, 0).expect("worker");
    // Keys on both servers' ranges.
    let keys = [7u64, 1 << 40, u64::MAX / 2 + 11, u64::MAX - 3];
    // A pull of keys never pushed: their initial rows, not an error.
    let mut rows = vec![0.0f32; 16];
    kv.pull_into(&keys, &mut rows).expect("pull of new keys");
    assert_eq!(rows, reference(&spec(line), &keys, &[]));
    assert!(rows.iter().any(|&x| x != 0.0), "normal initial rows");
    // Three pushes of gradients, the last a push-pull answering the rows after its step.
    let pushes: Vec<Vec<f32>> = (0..3)
        .map(|p| (0..16).map(|i| ((i * 5 + p) % 7) as f32 - 3.0).collect())
        .collect();
    for g in &pushes[..2] {
        kv.wait(kv.push(&keys, g, None).expect("push"))
            .expect("pushed");
    }
    kv.push_pull_into(&keys, &pushes[2], None, &mut rows)
        .expect("push-pull");
    let want = reference(&spec(line), &keys, &pushes);
    assert_eq!(
        rows.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        "the servers' rows are the in-process table's, bit for bit"
    );
    // A push of the wrong width is refused by name, and the table goes on.
    let e = kv
        .wait(kv.push(&keys[..1], &[1.0; 3], None).expect("sent"))
        .expect_err("wrong width");
    match e {
        Error::Remote { message, .. } => assert!(
            message.contains(
                "table app 3: a push of 3 values for 1 keys; the table's rows have dim 4"
            ),
            "{message}"
        ),
        other => panic!("{other}"),
    }
    kv.pull_into(&keys, &mut rows)
        .expect("pull after the refusal");
    assert_eq!(rows, want);
    drop(kv);
    c.finish();
}

#[test]
fn table_rows_follow_their_keys_as_a_server_is_drained_and_added_back() {
    let line = "app=3,dim=3,init=uniform:-1:1,seed=9,opt=adagrad:lr=0.05:init_acc=0.1";
    let c = cluster_with(3, 1, 20.0, move |po| {
        Ok(Box::new(serve_tables(po, &[spec(line)])?))
    });
    let po = c.workers[0].clone();
    let kv = KVWorker::<f32>::new(&po, 3, 0).expect("worker");
    // Keys of every server's third of the key space.
    let keys: Vec<u64> = (0..30u64).map(|i| i * (u64::MAX / 30) + 1).collect();
    let pushes: Vec<Vec<f32>> = (0..4)
        .map(|p| (0..90).map(|i| ((i * 3 + p) % 5) as f32 - 2.0).collect())
        .collect();
    let push = |g: &Vec<f32>| {
        kv.wait(kv.push(&keys, g, None).expect("push"))
            .expect("pushed")
    };
    let rows_now = || {
        let mut rows = vec![0.0f32; 90];
        kv.pull_into(&keys, &mut rows).expect("pull");
        rows.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    };
    let want = |n: usize| {
        let rows = reference(&spec(line), &keys, &pushes[..n]);
        rows.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    };
    push(&pushes[0]);
    push(&pushes[1]);
    let server2 = pslite::wire::Node::server_id(2);
    let drained = po.resize(server2, false).expect("drains server 2");
    assert_eq!(drained.epoch, 1);
    assert!(
        drained.bytes > 10 * 9 * 4,
        "ten rows of 9 floats moved: {drained:?}"
    );
    assert_eq!(po.layout().part_of(server2), None);
    assert_eq!(
        rows_now(),
        want(2),
        "the rows moved with their optimizer slots"
    );
    push(&pushes[2]);
    let added = po.resize(server2, true).expect("adds server 2 back");
    assert_eq!(added.epoch, 2);
    assert!(po.layout().part_of(server2).is_some());
    push(&pushes[3]);
    assert_eq!(rows_now(), want(4), "bit for bit the in-process table's");
    let stranger = po
        .resize(pslite::wire::Node::server_id(7), false)
        .expect_err("not a server");
    assert!(
        stranger
            .to_string()
            .contains("server rank 7 (id 22) is not a server of this cluster"),
        "{stranger}"
    );
    drop(kv);
    c.finish();
}

#[test]
fn a_server_refuses_a_bad_table_spec_before_it_joins() {
    let out = Command::new(env!("CARGO_BIN_EXE_pslite-server"))
        .args(["--table", "app=0,dim=16,opt=adagrad:rate=0.1"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad table spec 'app=0,dim=16,opt=adagrad:rate=0.1': opt: adagrad has no 'rate'; it takes lr, eps, init_acc, wd"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args(["local", "--table", "app=0,dim=0", "--", "kv-app"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dim: '0': allowed: 1 to 1048576"), "{err}");
    // Through PS_TABLES, and a budget too small.
    let out = Command::new(env!("CARGO_BIN_EXE_pslite-server"))
        .env("PS_TABLES", "app=1,dim=4;app=2,dim=64,budget=1KiB")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("budget: 1KiB holds no row"), "{err}");
    // Two tables of one application.
    let out = Command::new(env!("CARGO_BIN_EXE_pslite-server"))
        .args(["--table", "app=3,dim=4", "--table", "app=3,dim=8"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("two tables for application 3: one table per application id"),
        "{err}"
    );
}

#[test]
fn the_launcher_serves_tables_and_kv_app_still_sums_on_app_0() {
    // A table on app 5 beside the summing handler: kv-app's exact sums are untouched.
    let out = Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args([
            "local",
            "--servers",
            "2",
            "--workers",
            "2",
            "--no-metrics",
            "--table",
            "app=5,dim=8,opt=adam,budget=64MiB",
            "--",
            "kv-app",
        ])
        .output()
        .expect("runs");
    let text = common::procs::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("error: 0, 0"), "{text}");
    assert!(
        text.contains("pslite: table app 5: app=5,dim=8,init=zeros,seed=5,opt=adam:lr=0.001:b1=0.9:b2=0.999:eps=0.00000001,admit=all,budget=64MiB,evict=lru; budget 64MiB (67108864 bytes) for up to"),
        "{text}"
    );
    assert!(text.contains("% of this host's"), "{text}");
}

/// `table`'s digest line from a launcher's output.
fn digest(out: &str) -> String {
    out.lines()
        .find_map(|l| l.split("table digest: ").nth(1))
        .unwrap_or_else(|| panic!("no digest:\n{out}"))
        .trim()
        .to_string()
}

/// The launcher's arguments for `table` on one server and one worker, 600 rounds of 2000 keys
/// of 30000 with Adam, admission and eviction under a 1 MiB budget, printing its digest; with
/// `extra` launcher options before the command.
fn table_job<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    // Admission, eviction under a budget and Adam's per-row steps: every piece of state must
    // come back from the checkpoint (snapshot and log) for the digests to agree.
    let table =
        "app=0,dim=8,init=normal:0:0.01,opt=adam:lr=0.01,admit=count:2:width=4096,budget=1MiB";
    let mut args = vec![
        "--servers",
        "1",
        "--workers",
        "1",
        "--no-metrics",
        "--table",
        table,
    ];
    args.extend_from_slice(extra);
    args.extend([
        "--",
        "table",
        "--dim",
        "8",
        "--rounds",
        "600",
        "--keys",
        "2000",
        "--universe",
        "30000",
        "--digest",
        "--progress",
        "50",
    ]);
    args
}

#[test]
fn a_table_server_killed_and_replaced_ends_with_the_undisturbed_table_bit_for_bit() {
    use common::launched::Launched;
    let (code, out) =
        Launched::start(&table_job(&[]), &[]).finish(std::time::Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}");
    let undisturbed = digest(&out);
    assert!(out.contains("600 rounds"), "{out}");

    let dir = std::env::temp_dir().join(format!("pslite-table-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cp = dir.display().to_string();
    let killed = table_job(&["--restart", "1", "--checkpoint-dir", &cp]);
    let l = Launched::start(&killed, &[]);
    l.wait_line("worker 0: round 200");
    l.kill("server 0");
    let (code, out) = l.finish(std::time::Duration::from_secs(180));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("server 0 exited with signal: 9 (SIGKILL); restarting it"),
        "{out}"
    );
    assert_eq!(
        digest(&out),
        undisturbed,
        "the replaced server's table differs from the undisturbed run's:\n{out}"
    );
}

#[test]
fn a_stream_of_new_keys_keeps_a_server_within_its_table_budget() {
    // 1M distinct keys, each pushed once, into a table whose budget holds about 220k rows.
    let out = Command::new(env!("CARGO_BIN_EXE_pslite-launch"))
        .args([
            "local",
            "--no-metrics",
            "--table",
            "app=0,dim=16,opt=adagrad:lr=0.05,budget=32MiB",
            "--",
            "table",
            "--dim",
            "16",
            "--universe",
            "0",
            "--keys",
            "20000",
            "--rounds",
            "50",
        ])
        .output()
        .expect("runs");
    let text = common::procs::text(&out);
    assert!(out.status.success(), "{text}");
    // "table app 0: ROWS rows, BYTES bytes (budget B); A rows admitted, … E evicted, …"
    let summary = text
        .lines()
        .find_map(|l| {
            l.split("pslite: table app 0: ")
                .nth(1)
                .filter(|r| r.contains(" rows admitted, "))
        })
        .unwrap_or_else(|| panic!("no table summary:\n{text}"));
    let numbers: Vec<u64> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let (rows, bytes, budget, admitted, _not_admitted, evicted) = (
        numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], numbers[5],
    );
    assert_eq!(budget, 32 << 20, "{summary}");
    assert!(bytes <= budget, "{summary}");
    assert_eq!(admitted, 1_000_000, "{summary}");
    assert_eq!(rows + evicted, admitted, "{summary}");
    assert!(rows > 200_000, "{summary}");
    let peak: f64 = text
        .lines()
        .find_map(|l| l.split("peak RSS ").nth(1))
        .and_then(|l| l.trim_end_matches(" MiB").parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS:\n{text}"));
    assert!(
        peak < 32.0 + 64.0,
        "the server's peak RSS was {peak} MiB with a 32 MiB table budget:\n{text}"
    );
}
