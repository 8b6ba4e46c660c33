//! Resend (`PS_RESEND`) against message loss (`PS_DROP_MSG`), with real processes on loopback:
//! every push is applied exactly once (kv-app checks exact sums) although a tenth of the data
//! messages is dropped on arrival.

mod common;

use common::procs::{kv_app_ok_env, launch_env, text};

/// Resend on, 10 % of received data messages dropped, info logs (each node's summary of what
/// was dropped and resent).
const LOSSY: [(&str, &str); 4] = [
    ("PS_RESEND", "1"),
    ("PS_RESEND_TIMEOUT", "100"),
    ("PS_DROP_MSG", "10"),
    ("PS_VERBOSE", "1"),
];

/// Every node's end-of-run summary, summed: (sent again, duplicates dropped, dropped on
/// arrival).
fn loss_totals(out: &str) -> (u64, u64, u64) {
    let number_before = |line: &str, what: &str| -> u64 {
        line.split(what)
            .next()
            .and_then(|head| head.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    out.lines()
        .filter(|l| l.contains("messages sent again (PS_RESEND)"))
        .fold((0, 0, 0), |(r, u, d), l| {
            (
                r + number_before(l, " messages sent again"),
                u + number_before(l, " duplicates dropped"),
                d + number_before(l, " messages dropped on arrival"),
            )
        })
}

/// kv-app's exact sums on every worker, and proof that messages were dropped and resent.
fn exact_despite_loss(servers: usize, workers: usize, args: &[&str]) {
    let out = kv_app_ok_env(servers, workers, &LOSSY, args);
    let (resent, _, dropped) = loss_totals(&out);
    assert!(
        dropped > 0 && resent >= dropped,
        "dropped {dropped}, resent {resent}:\n{out}"
    );
}

#[test]
fn pushes_are_applied_exactly_once_when_a_tenth_of_the_messages_is_lost() {
    exact_despite_loss(2, 4, &[]);
}

#[test]
fn many_keys_per_request_survive_the_same_loss() {
    exact_despite_loss(2, 4, &["--keys", "100000"]);
}

#[test]
fn zero_copy_pulls_survive_the_same_loss() {
    exact_despite_loss(2, 2, &["--zero-copy", "--keys", "500"]);
}

#[test]
fn resends_that_race_their_acknowledgement_are_dropped_as_duplicates() {
    // A 1 ms resend timeout: many messages go again before their ACK is back, and arrive twice.
    let env = [
        ("PS_RESEND", "1"),
        ("PS_RESEND_TIMEOUT", "1"),
        ("PS_VERBOSE", "1"),
    ];
    // Exact sums: no duplicate was applied twice.
    let out = kv_app_ok_env(2, 2, &env, &["--keys", "20000"]);
    let (resent, duplicates, _) = loss_totals(&out);
    assert!(
        duplicates > 0,
        "resent {resent}, no duplicate arrived:\n{out}"
    );
}

#[test]
fn without_resend_a_lost_message_ends_the_job_at_its_deadline() {
    let env = [
        ("PS_RESEND", "0"),
        ("PS_DROP_MSG", "10"),
        // The deadline the lost message runs into; five processes' start-ups have it too.
        ("PS_TIMEOUT", "10"),
    ];
    let o = launch_env(2, 2, &env, &["kv-app"]);
    let out = text(&o);
    assert!(!o.status.success(), "it cannot succeed:\n{out}");
    assert!(
        out.contains("no answer within 10 s (PS_TIMEOUT) from server rank"),
        "{out}"
    );
}
