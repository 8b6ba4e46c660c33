//! Tests of the sans-IO scheduler: admission, ranks, barriers, liveness and replacement.

use super::*;
use crate::wire::{BarrierFailure, SCHEDULER};

fn node(role: Role, port: u16, rank: Option<u32>) -> Node {
    Node {
        role,
        id: -1,
        host: "127.0.0.1".into(),
        port,
        requested_rank: rank,
    }
}

fn scheduler(servers: usize, workers: usize) -> Scheduler {
    with_recovery(servers, workers, None)
}

fn with_recovery(servers: usize, workers: usize, recovery: Option<Duration>) -> Scheduler {
    let me = Node {
        id: SCHEDULER,
        ..node(Role::Scheduler, 9000, None)
    };
    Scheduler::new(me, servers, workers, recovery)
}

/// Two servers (ports 1, 2) and a worker (port 3) registered at `t0`; lost servers wait
/// `recovery` for a replacement.
fn two_servers_one_worker(recovery: Duration, t0: Instant) -> Scheduler {
    let mut s = with_recovery(2, 1, Some(recovery));
    for (role, port) in [(Role::Server, 1), (Role::Server, 2), (Role::Worker, 3)] {
        s.add_node(node(role, port, None), t0);
    }
    s
}

#[test]
fn admits_the_expected_nodes_then_assigns_ids_by_requested_rank() {
    let mut s = scheduler(1, 2);
    let now = Instant::now();
    assert_eq!(
        s.add_node(node(Role::Worker, 1, Some(1)), now),
        Admission::Waiting
    );
    assert_eq!(
        s.add_node(node(Role::Worker, 1, Some(1)), now),
        Admission::Repeat
    );
    assert!(matches!(
        s.add_node(node(Role::Scheduler, 5, None), now),
        Admission::Refused { why, .. } if why == "a second scheduler cannot join"
    ));
    assert_eq!(
        s.add_node(node(Role::Server, 2, None), now),
        Admission::Waiting
    );
    let Admission::Complete(table) = s.add_node(node(Role::Worker, 3, Some(0)), now) else {
        panic!("complete");
    };
    let ids: Vec<(u16, NodeId)> = table.iter().map(|n| (n.port, n.id)).collect();
    assert_eq!(ids, vec![(9000, 1), (2, 8), (1, 11), (3, 9)]);
    assert!(matches!(
        s.add_node(node(Role::Worker, 4, None), now),
        Admission::Refused { why, .. } if why == "the cluster already has its 2 workers (DMLC_NUM_WORKER)"
    ));
}

#[test]
fn a_registration_proven_as_an_id_gets_that_id_or_is_refused() {
    let now = Instant::now();
    let proven = |role, port, id| Node {
        id,
        ..node(role, port, Some(Node::rank_of(id) as u32))
    };
    let mut s = scheduler(1, 2);
    // Worker rank 0's key: a second registration with it, and one as worker rank 5, are
    // refused; an unproven one that asks for its rank is not, but does not take it.
    assert!(matches!(
        s.add_node(proven(Role::Worker, 1, 9), now),
        Admission::Waiting
    ));
    let refused = |a: Admission| match a {
        Admission::Refused { why, .. } => why,
        _ => panic!("not refused"),
    };
    let why = refused(s.add_node(proven(Role::Worker, 2, 9), now));
    assert_eq!(
        why,
        "worker rank 0 (id 9) is asked for already, by the registration from 127.0.0.1:1"
    );
    let why = refused(s.add_node(proven(Role::Worker, 3, 19), now));
    assert!(
        why.contains("but the cluster has 2 workers (DMLC_NUM_WORKER)"),
        "{why}"
    );
    let why = refused(s.add_node(proven(Role::Server, 4, 9), now));
    assert!(
        why.contains("registers as a server but proved worker rank 0 (id 9)"),
        "{why}"
    );
    assert!(matches!(
        s.add_node(node(Role::Worker, 5, Some(0)), now),
        Admission::Waiting
    ));
    let Admission::Complete(table) = s.add_node(node(Role::Server, 6, None), now) else {
        panic!("complete");
    };
    let ids: Vec<(u16, NodeId)> = table.iter().map(|n| (n.port, n.id)).collect();
    assert_eq!(ids, vec![(9000, 1), (6, 8), (1, 9), (5, 11)]);
}

#[test]
fn proven_ranks_are_kept_and_the_others_fill_the_ranks_left() {
    let p = Node {
        id: 11,
        ..node(Role::Worker, 1, Some(1))
    };
    let (a, b) = (node(Role::Worker, 2, Some(1)), node(Role::Worker, 3, None));
    assert_eq!(assign_ranks(&[&a, &p, &b]), vec![0, 1, 2]);
    let c = node(Role::Worker, 4, Some(2));
    let d = node(Role::Worker, 5, Some(0));
    assert_eq!(assign_ranks(&[&c, &p, &d]), vec![2, 1, 0]);
}

#[test]
fn invalid_requested_ranks_fall_back_to_registration_order() {
    let (a, b) = (
        node(Role::Worker, 1, Some(1)),
        node(Role::Worker, 2, Some(1)),
    );
    assert_eq!(assign_ranks(&[&a, &b]), vec![0, 1]);
    let c = node(Role::Worker, 3, Some(0));
    assert_eq!(assign_ranks(&[&a, &c]), vec![1, 0]);
}

#[test]
fn giving_up_names_what_registered_and_hands_back_the_nodes() {
    let mut s = scheduler(2, 2);
    s.add_node(node(Role::Server, 1, None), Instant::now());
    let (joined, why) = s.give_up(Duration::from_secs(3)).expect("not ready");
    assert_eq!(joined.len(), 1);
    assert_eq!(
        why,
        "start-up: within 3 s (PS_TIMEOUT) only 1 of 2 servers (DMLC_NUM_SERVER) and 0 of 2 \
         workers (DMLC_NUM_WORKER) registered"
    );
}

#[test]
fn a_silent_node_is_lost_and_fails_the_barrier_waiting_for_it() {
    let mut s = scheduler(1, 1);
    let t0 = Instant::now();
    s.add_node(node(Role::Server, 1, None), t0);
    s.add_node(node(Role::Worker, 2, None), t0);
    assert_eq!(
        s.give_up(Duration::from_secs(3)),
        None,
        "ready: nothing to give up"
    );
    let sec = Duration::from_secs(1);
    assert_eq!(s.barrier(8, 6, None, t0), None);
    assert_eq!(
        s.barrier(SCHEDULER, 6, None, t0).map(|o| o.release),
        Some(vec![1])
    );
    s.heartbeat(8, t0 + 8 * sec);
    let none = s.tick(t0 + 15 * sec / 10, 10 * sec).lost;
    assert!(none.is_empty());
    for t in (2..=10).map(|t| t0 + t * sec) {
        assert!(
            s.tick(t - sec / 100, 10 * sec).lost.is_empty(),
            "ticking along"
        );
    }
    let Tick { lost, failed } = s.tick(t0 + 11 * sec, 10 * sec);
    assert_eq!(lost, vec![silent(9, 11 * sec, None)]);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].release, vec![8]);
    let f = failed[0].failure.as_ref().expect("failed");
    assert_eq!(f.kind, BarrierFailure::Lost);
    assert_eq!(
        f.text,
        "barrier of group 6 cannot complete: lost worker rank 0 (id 9)"
    );
}

#[test]
fn a_paused_scheduler_gives_every_node_a_new_timeout() {
    let mut s = scheduler(1, 1);
    let t0 = Instant::now();
    let sec = Duration::from_secs(1);
    s.add_node(node(Role::Server, 1, None), t0);
    s.add_node(node(Role::Worker, 2, None), t0);
    assert!(s.tick(t0 + sec, 10 * sec).lost.is_empty());
    // Stopped for 30 s: the heartbeats of both nodes wait unread.
    assert!(s.tick(t0 + 31 * sec, 10 * sec).lost.is_empty(), "excused");
    s.heartbeat(8, t0 + 32 * sec);
    for t in 32..42 {
        assert!(s.tick(t0 + t * sec, 10 * sec).lost.is_empty());
    }
    assert_eq!(
        s.tick(t0 + 42 * sec, 10 * sec).lost,
        vec![silent(9, 11 * sec, None)]
    );
}

fn silent(id: NodeId, d: Duration, awaiting: Option<Duration>) -> Declared {
    Declared {
        id,
        why: Why::Silent(d),
        awaiting,
    }
}

#[test]
fn a_lost_server_is_awaited_and_a_replacement_takes_its_id_and_barrier_place() {
    let sec = Duration::from_secs(1);
    let t0 = Instant::now();
    let mut s = two_servers_one_worker(30 * sec, t0);
    assert_eq!(s.barrier(8, 7, None, t0), None, "server 8 arrives");
    for id in [9, 10] {
        s.heartbeat(id, t0 + 10 * sec);
    }
    let Tick { lost, failed } = s.tick(t0 + 11 * sec, 10 * sec);
    assert_eq!(lost, vec![silent(8, 11 * sec, Some(30 * sec))]);
    assert!(failed.is_empty(), "awaited: the final barrier waits");
    let Admission::Replaced {
        node: n,
        displaced,
        table,
        started,
        ..
    } = s.add_node(node(Role::Server, 7, None), t0 + 12 * sec)
    else {
        panic!("a replacement");
    };
    assert_eq!((n.id, n.port, displaced.port), (8, 7, 1));
    assert!(!started, "no barrier of all nodes completed yet");
    assert_eq!(table[1].port, 7, "the table has its address");
    for id in [SCHEDULER, 9, 10] {
        assert_eq!(
            s.barrier(id, 7, None, t0 + 12 * sec),
            None,
            "8 must arrive again"
        );
    }
    let done = s.barrier(8, 7, None, t0 + 12 * sec).expect("complete");
    assert_eq!(done.failure, None);
    let Admission::Replaced { started, .. } =
        s.add_node(node(Role::Server, 6, Some(0)), t0 + 13 * sec)
    else {
        panic!("rank 0 asked for");
    };
    assert!(
        started,
        "a barrier of all nodes completed: the replacement skips it"
    );
    assert!(
        matches!(
            s.add_node(node(Role::Worker, 8, None), t0),
            Admission::Refused { .. }
        ),
        "no worker is lost, and none asked for a rank"
    );
}

/// The scheduler of [`two_servers_one_worker`] (30 s to replace a lost node) where worker 9
/// passed the start-up barrier and two worker barriers, waits at a barrier with the servers,
/// and is lost at `t0` + 11 s, when the servers last beat at `t0` + 10 s.
fn a_worker_lost_at_a_barrier(t0: Instant) -> Scheduler {
    let sec = Duration::from_secs(1);
    let mut s = two_servers_one_worker(30 * sec, t0);
    for id in [SCHEDULER, 8, 10, 9] {
        s.barrier(id, 7, None, t0);
    }
    for round in 0..2 {
        let done = s.barrier(9, 4, None, t0).map(|o| (o.release, o.failure));
        assert_eq!(done, Some((vec![9], None)), "round {round}");
    }
    assert_eq!(
        s.barrier(9, 6, None, t0),
        None,
        "worker 9 waits for the servers"
    );
    for id in [8, 10] {
        s.heartbeat(id, t0 + 10 * sec);
    }
    let Tick { lost, failed } = s.tick(t0 + 11 * sec, 10 * sec);
    assert_eq!(lost, vec![silent(9, 11 * sec, Some(30 * sec))]);
    assert!(failed.is_empty(), "awaited");
    s
}

#[test]
fn a_lost_worker_is_replaced_with_its_rank_and_the_barriers_it_passed() {
    let sec = Duration::from_secs(1);
    let t0 = Instant::now();
    let mut s = a_worker_lost_at_a_barrier(t0);
    let Admission::Replaced {
        node: n, inherited, ..
    } = s.add_node(node(Role::Worker, 7, None), t0 + 12 * sec)
    else {
        panic!("a replacement of the lost worker");
    };
    assert_eq!(n.id, 9);
    assert_eq!(
        inherited,
        Inherited {
            barriers: vec![(4, 2)],
            incarnation: 1
        },
        "two worker barriers; the start-up barrier is not counted"
    );
    for id in [8, 10] {
        assert_eq!(
            s.barrier(id, 6, None, t0 + 12 * sec),
            None,
            "9 arrives again"
        );
    }
    assert!(s.barrier(9, 6, None, t0 + 12 * sec).is_some());
    let Admission::Replaced { inherited, .. } =
        s.add_node(node(Role::Worker, 6, Some(0)), t0 + 13 * sec)
    else {
        panic!("rank 0 asked for");
    };
    assert_eq!(inherited.barriers, vec![(4, 2), (6, 1)]);
    assert_eq!(inherited.incarnation, 2, "the second node to replace id 9");
    for port in 10..23 {
        let a = s.add_node(node(Role::Worker, port, Some(0)), t0 + 14 * sec);
        assert!(matches!(a, Admission::Replaced { .. }), "port {port}");
    }
    assert!(
        matches!(
            s.add_node(node(Role::Worker, 23, Some(0)), t0 + 14 * sec),
            Admission::Refused { why, .. } if why.contains("replaced 15 times already")
        ),
        "a 16th holder would reuse the first one's request numbers"
    );
}

#[test]
fn a_server_not_replaced_in_time_fails_the_job_and_a_live_one_can_be_displaced() {
    let sec = Duration::from_secs(1);
    let t0 = Instant::now();
    let mut s = two_servers_one_worker(5 * sec, t0);
    let Admission::Replaced { displaced, .. } =
        s.add_node(node(Role::Server, 4, Some(1)), t0 + sec)
    else {
        panic!("rank 1 asked for");
    };
    assert_eq!((displaced.id, displaced.port), (10, 2));
    assert_eq!(s.barrier(9, 7, None, t0), None);
    s.heartbeat(9, t0 + 10 * sec);
    s.heartbeat(10, t0 + 10 * sec);
    let lost = s.tick(t0 + 11 * sec, 10 * sec).lost;
    assert_eq!(lost, vec![silent(8, 11 * sec, Some(5 * sec))]);
    let Tick { lost: late, failed } = s.tick(t0 + 16 * sec, 10 * sec);
    assert_eq!(
        late,
        vec![Declared {
            id: 8,
            why: Why::NotReplaced(5 * sec),
            awaiting: None
        }]
    );
    assert_eq!(failed.len(), 1, "the barrier fails with it");
    assert!(
        matches!(
            s.add_node(node(Role::Server, 5, Some(0)), t0 + 17 * sec),
            Admission::Refused { .. }
        ),
        "too late"
    );
}

#[test]
fn a_server_asking_for_the_next_rank_after_the_start_joins_with_a_new_id() {
    let now = Instant::now();
    let mut s = scheduler(2, 1);
    for (role, port) in [(Role::Server, 1), (Role::Server, 2), (Role::Worker, 3)] {
        s.add_node(node(role, port, None), now);
    }
    for id in [SCHEDULER, 8, 10, 9] {
        s.barrier(id, 7, None, now);
    }
    let done = s.barrier(9, 4, None, now).expect("a worker barrier");
    assert_eq!(done.failure, None);
    // The scheduler waits in the last barrier of all nodes already (it finalizes at once).
    assert_eq!(s.barrier(SCHEDULER, 7, None, now), None);
    // Rank 3 is not next; an unranked server has nobody to replace.
    for rank in [Some(3), None] {
        assert!(
            matches!(
                s.add_node(node(Role::Server, 5, rank), now),
                Admission::Refused { .. }
            ),
            "rank {rank:?}"
        );
    }
    let Admission::Joined {
        node: n,
        table,
        started,
        inherited,
    } = s.add_node(node(Role::Server, 5, Some(2)), now)
    else {
        panic!("a join");
    };
    assert_eq!((n.id, n.port), (12, 5));
    assert!(started, "it skips the start-up barrier the others passed");
    assert_eq!(inherited.barriers, vec![(4, 1)]);
    assert_eq!(inherited.incarnation, 0);
    let ids: Vec<NodeId> = table.iter().map(|n| n.id).collect();
    assert_eq!(
        ids,
        vec![SCHEDULER, 8, 10, 12, 9],
        "after the other servers"
    );
    // It is a member of the servers' barriers now, and is watched for heartbeats.
    for id in [8, 10] {
        assert_eq!(s.barrier(id, 2, None, now), None, "server 12 must arrive");
    }
    assert!(s.barrier(12, 2, None, now).is_some());
    for id in [8, 10, 9] {
        assert_eq!(s.barrier(id, 7, None, now), None, "server 12 must arrive");
    }
    let last = s.barrier(12, 7, None, now).expect("complete");
    assert_eq!(last.release.len(), 5, "{last:?}");
}

#[test]
fn a_joining_server_registering_before_the_start_completed_waits_and_joins_after() {
    let now = Instant::now();
    let mut s = scheduler(2, 1);
    assert_eq!(
        s.add_node(node(Role::Server, 1, None), now),
        Admission::Waiting
    );
    for _ in 0..2 {
        assert_eq!(
            s.add_node(node(Role::Server, 5, Some(2)), now),
            Admission::Waiting,
            "not counted as one of the 2 servers, however often it registers"
        );
    }
    let mut t = scheduler(2, 1);
    t.add_node(node(Role::Server, 1, None), now);
    t.add_node(node(Role::Server, 5, Some(2)), now);
    let (_, why) = t.give_up(Duration::from_secs(120)).expect("not started");
    assert!(
        why.ends_with(
            "only 1 of 2 servers (DMLC_NUM_SERVER) and 0 of 1 workers (DMLC_NUM_WORKER) \
             registered; not counted: the server(s) at 127.0.0.1:5 asked for a rank \
             (PSLITE_RANK) beyond DMLC_NUM_SERVER, which joins the job once it started"
        ),
        "{why}"
    );
    assert_eq!(
        s.add_node(node(Role::Server, 2, None), now),
        Admission::Waiting
    );
    let Admission::Complete(table) = s.add_node(node(Role::Worker, 3, None), now) else {
        panic!("the start completes with the two servers and the worker");
    };
    let ports: Vec<u16> = table.iter().map(|n| n.port).collect();
    assert_eq!(ports, vec![9000, 1, 2, 3]);
    assert!(matches!(
        s.add_node(node(Role::Server, 5, Some(2)), now),
        Admission::Joined { node, .. } if node.id == 12
    ));
}

#[test]
fn a_second_server_joins_with_the_next_rank_and_all_are_watched() {
    let now = Instant::now();
    let mut s = scheduler(2, 1);
    for (role, port) in [(Role::Server, 1), (Role::Server, 2), (Role::Worker, 3)] {
        s.add_node(node(role, port, None), now);
    }
    assert!(matches!(
        s.add_node(node(Role::Server, 5, Some(2)), now),
        Admission::Joined { .. }
    ));
    // The next join takes rank 3; a registration again from the same address is a repeat.
    assert_eq!(
        s.add_node(node(Role::Server, 5, Some(2)), now),
        Admission::Repeat
    );
    let refused = s.add_node(node(Role::Server, 7, Some(2)), now);
    assert!(
        matches!(&refused, Admission::Refused { why, .. } if why == "the cluster already has \
            its 3 servers (DMLC_NUM_SERVER); a server joins the running job with PSLITE_RANK=3"),
        "{refused:?}"
    );
    assert!(matches!(
        s.add_node(node(Role::Server, 6, Some(3)), now),
        Admission::Joined { node, .. } if node.id == 14
    ));
    let Tick { lost, .. } = s.tick(now + Duration::from_secs(11), Duration::from_secs(10));
    let lost: Vec<NodeId> = lost.iter().map(|d| d.id).collect();
    assert_eq!(
        lost,
        vec![8, 9, 10, 12, 14],
        "all silent, the new servers too"
    );
}

#[test]
fn a_server_cannot_join_while_lost_nodes_are_replaced() {
    let t0 = Instant::now();
    let mut s = two_servers_one_worker(Duration::from_secs(30), t0);
    let refused = s.add_node(node(Role::Server, 5, Some(2)), t0);
    assert!(
        matches!(&refused, Admission::Refused { why, .. }
            if why.starts_with("a server joins a running job only without PS_CHECKPOINT_DIR")),
        "{refused:?}"
    );
}
