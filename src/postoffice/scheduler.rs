//! The scheduler's state: admission of registering nodes, rank and id assignment, the node
//! table, barriers and liveness (ps-lite's scheduler half of `Van::ProcessAddNodeCommand`,
//! `ProcessBarrierCommand` and `Postoffice::GetDeadNodes`). Sans-IO: the postoffice feeds it
//! registrations, barrier requests, heartbeats and clock ticks (time passed in), and sends what
//! it returns (node tables, refusals, barrier releases).

use super::barrier::{BarrierBook, Outcome};
use super::liveness::Liveness;
use crate::wire::{Node, NodeId, Role};
use std::time::{Duration, Instant};

/// What to do about one registration (ADD_NODE).
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Counted; not every node has registered yet.
    Waiting,
    /// A repeat of a registration already counted (same host and port): nothing to do.
    Repeat,
    /// Not admitted: tell the node why.
    Refused {
        /// The node, as it registered.
        node: Node,
        /// Why, naming the variable to check.
        why: String,
    },
    /// Every node registered: the node table, the scheduler first, then servers and workers
    /// with their ids. Send it to every node but the scheduler.
    Complete(Vec<Node>),
    /// A server or worker registered after the start to replace a lost one of its role
    /// (issue 13): it takes the lost node's id (so its rank, and a server's key range). Send it
    /// the table, tell every other node its address, and tell `displaced` (the old holder) that
    /// it was replaced.
    Replaced {
        /// The replacement, with its id.
        node: Node,
        /// The node it replaces (told it was replaced: alive or paused, it then stops).
        displaced: Node,
        /// The node table with the replacement in it.
        table: Vec<Node>,
        /// Whether the start-up barrier (the first of all nodes) has completed; if not, the
        /// replacement must pass it.
        started: bool,
        /// What the replacement takes over from the node it replaces.
        inherited: Inherited,
    },
}

/// What a replacement takes over besides the id: where its predecessor was in the job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inherited {
    /// Per barrier group, the barriers of that group completed since the start-up barrier
    /// (the predecessor passed them; the replacement's `Postoffice::barrier` passes them at
    /// once, and applications skip the work before them).
    pub barriers: Vec<(i32, u64)>,
    /// How many nodes held this id before the replacement (1 for the first replacement): a
    /// replacement worker numbers its requests from `incarnation × 2^27` on, so that answers
    /// to its predecessor's requests match none of its own.
    pub incarnation: u32,
}

/// How many times one worker id may be replaced: a replacement numbers its requests from
/// `incarnation × 2^27` on, in 16 ranges of an `i32`.
pub const MAX_WORKER_REPLACEMENTS: u32 = 15;

/// Why the scheduler declared a node lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// No heartbeat for this long (`PS_HEARTBEAT_TIMEOUT`).
    Silent(Duration),
    /// A lost node was not replaced within this long (`PS_RECOVERY_TIMEOUT`).
    NotReplaced(Duration),
}

/// A node the scheduler declared lost at a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The node.
    pub id: NodeId,
    /// Why.
    pub why: Why,
    /// `Some(window)`: a server whose replacement is awaited for `window`
    /// (`PS_RECOVERY_TIMEOUT`); the job goes on meanwhile. `None`: the job fails.
    pub awaiting: Option<Duration>,
}

/// The scheduler's state; see the module docs.
pub struct Scheduler {
    servers: usize,
    workers: usize,
    me: Node,
    joining: Vec<Node>,
    table: Vec<Node>,
    ready: bool,
    book: BarrierBook,
    liveness: Liveness,
    /// `PS_RECOVERY_TIMEOUT` when lost servers and workers may be replaced
    /// (`PS_CHECKPOINT_DIR`); `None`: any loss fails the job.
    recovery: Option<Duration>,
    /// Lost nodes awaiting a replacement, with the deadline for it.
    awaiting: std::collections::BTreeMap<NodeId, Instant>,
    /// Barriers completed per group, the start-up barrier not counted.
    barriers: std::collections::BTreeMap<i32, u64>,
    /// Replacements so far per id.
    replaced: std::collections::BTreeMap<NodeId, u32>,
    /// A barrier of all nodes has completed (the start-up barrier is behind everyone).
    started: bool,
    /// When the clock last ticked (a much longer gap than the receiving thread's tick: this
    /// process was paused).
    last_tick: Option<Instant>,
}

/// A gap between two looks at the clock that means this process was paused (the scheduler
/// ticks every 10 ms or so, a node waiting in a barrier looks every 100 ms): on the scheduler
/// the nodes get a whole `PS_HEARTBEAT_TIMEOUT` again rather than all being declared lost
/// before their queued heartbeats are read; on a node, the scheduler does.
pub const PAUSED: Duration = Duration::from_secs(2);

impl Scheduler {
    /// A scheduler (node `me`) waiting for `servers` servers and `workers` workers; with
    /// `recovery`, a lost server or worker waits that long for a replacement before the job
    /// fails.
    pub fn new(me: Node, servers: usize, workers: usize, recovery: Option<Duration>) -> Scheduler {
        Scheduler {
            recovery,
            awaiting: std::collections::BTreeMap::new(),
            barriers: std::collections::BTreeMap::new(),
            replaced: std::collections::BTreeMap::new(),
            started: false,
            servers,
            workers,
            me,
            joining: Vec::new(),
            table: Vec::new(),
            ready: false,
            book: BarrierBook::default(),
            liveness: Liveness::default(),
            last_tick: None,
        }
    }

    fn wanted(&self, role: Role) -> usize {
        match role {
            Role::Server => self.servers,
            Role::Worker => self.workers,
            Role::Scheduler => 0,
        }
    }

    /// `node` registered at `now`. Once the last expected node registered, ranks are assigned
    /// ([`assign_ranks`]), ids follow from them, and every node counts as heard of at `now`.
    pub fn add_node(&mut self, node: Node, now: Instant) -> Admission {
        let lost = self.liveness.lost();
        if self
            .joining
            .iter()
            .chain(self.table.iter().filter(|n| !lost.contains(&n.id)))
            .any(|n| n.host == node.host && n.port == node.port)
        {
            return Admission::Repeat;
        }
        if self.ready && node.role != Role::Scheduler && self.recovery.is_some() {
            if let Some(a) = self.replace(&node, now) {
                return a;
            }
        }
        let want = self.wanted(node.role);
        let have = self.joining.iter().filter(|n| n.role == node.role).count();
        if self.ready || have >= want {
            let why = match node.role {
                Role::Scheduler => "a second scheduler cannot join".to_string(),
                r => format!(
                    "the cluster already has its {want} {r}s (DMLC_NUM_{})",
                    r.name().to_uppercase()
                ),
            };
            return Admission::Refused { node, why };
        }
        self.joining.push(node);
        if self.joining.len() < self.servers + self.workers {
            return Admission::Waiting;
        }
        let mut table = vec![self.me.clone()];
        let joined = std::mem::take(&mut self.joining);
        for role in [Role::Server, Role::Worker] {
            let of_role: Vec<&Node> = joined.iter().filter(|n| n.role == role).collect();
            let ranks = assign_ranks(&of_role);
            for (n, rank) in of_role.into_iter().zip(ranks) {
                let id = match role {
                    Role::Server => Node::server_id(rank),
                    _ => Node::worker_id(rank),
                };
                table.push(Node { id, ..n.clone() });
            }
        }
        for n in &table[1..] {
            self.liveness.seen(n.id, now);
        }
        self.table = table.clone();
        self.ready = true;
        Admission::Complete(table)
    }

    /// A server or worker registering after the start replaces the node of its role and
    /// requested rank, or else the first lost node of its role; `None` when there is none to
    /// replace (it is refused).
    fn replace(&mut self, node: &Node, now: Instant) -> Option<Admission> {
        let role = node.role;
        let id_of = |rank: usize| match role {
            Role::Server => Node::server_id(rank),
            _ => Node::worker_id(rank),
        };
        let asked = node
            .requested_rank
            .map(|r| r as usize)
            .filter(|&r| r < self.wanted(role))
            .map(id_of);
        let first_awaited = || {
            self.awaiting
                .keys()
                .copied()
                .find(|&id| Node::role_of(id) == Some(role))
        };
        let id = asked.or_else(first_awaited)?;
        let holders = self.replaced.get(&id).copied().unwrap_or(0);
        if role == Role::Worker && holders >= MAX_WORKER_REPLACEMENTS {
            return Some(Admission::Refused {
                node: node.clone(),
                why: format!(
                    "{} was replaced {holders} times already, the most a worker's request \
                     numbering allows",
                    Node::describe(id)
                ),
            });
        }
        if self.liveness.lost().contains(&id) && !self.awaiting.contains_key(&id) {
            // Declared lost for good: the job is failing already.
            return None;
        }
        let slot = self.table.iter_mut().find(|n| n.id == id)?;
        let old = std::mem::replace(slot, Node { id, ..node.clone() });
        let displaced = old;
        self.awaiting.remove(&id);
        self.liveness.revive(id, now);
        self.book.leave(id);
        let incarnation = self.replaced.entry(id).or_default();
        *incarnation += 1;
        let inherited = Inherited {
            barriers: self.barriers.iter().map(|(&g, &n)| (g, n)).collect(),
            incarnation: *incarnation,
        };
        Some(Admission::Replaced {
            node: Node { id, ..node.clone() },
            displaced,
            table: self.table.clone(),
            started: self.started,
            inherited,
        })
    }

    /// Start-up failed (`PS_TIMEOUT` after `timeout`): the nodes that registered, to be told
    /// why, and the text naming how many of each role came. `None` when every node registered
    /// meanwhile (the start-up did not fail after all).
    pub fn give_up(&mut self, timeout: Duration) -> Option<(Vec<Node>, String)> {
        if self.ready {
            return None;
        }
        let servers = self
            .joining
            .iter()
            .filter(|n| n.role == Role::Server)
            .count();
        let workers = self.joining.len() - servers;
        let why = format!(
            "start-up: within {:.0} s (PS_TIMEOUT) only {servers} of {} servers \
             (DMLC_NUM_SERVER) and {workers} of {} workers (DMLC_NUM_WORKER) registered",
            timeout.as_secs_f64(),
            self.servers,
            self.workers
        );
        Some((std::mem::take(&mut self.joining), why))
    }

    /// Node `from` asked for a barrier of `group` (`timeout`: `None` waits while the members
    /// are alive). Returns the outcome once it completes, or at once for a stray node.
    pub fn barrier(
        &mut self,
        from: NodeId,
        group: i32,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Option<Outcome> {
        let members: Vec<NodeId> = self
            .table
            .iter()
            .filter(|n| n.role.group() & group != 0)
            .map(|n| n.id)
            .collect();
        let outcome = self.book.arrive(group, from, &members, timeout, now);
        if outcome.as_ref().is_some_and(|o| o.failure.is_none()) {
            if group == crate::postoffice::ALL_GROUP && !self.started {
                self.started = true;
            } else {
                *self.barriers.entry(group).or_default() += 1;
            }
        }
        outcome
    }

    /// Node `from` sent a heartbeat at `now`.
    pub fn heartbeat(&mut self, from: NodeId, now: Instant) {
        self.liveness.seen(from, now);
    }

    /// The clock ticked: the nodes newly declared lost (silent for longer than
    /// `heartbeat_timeout`, or servers not replaced in time), and the barriers that failed
    /// (past their deadline, or waiting for a node lost for good). A lost server or worker, when
    /// nodes may be replaced, is awaited instead: its barrier arrivals no longer count, and it fails
    /// the job only at its deadline. Nothing before every node registered; after a pause of
    /// this process ([`PAUSED`]) every node gets a new timeout first.
    pub fn tick(
        &mut self,
        now: Instant,
        heartbeat_timeout: Duration,
    ) -> (Vec<Declared>, Vec<Outcome>) {
        if !self.ready {
            return (Vec::new(), Vec::new());
        }
        if self
            .last_tick
            .replace(now)
            .is_some_and(|t| now.duration_since(t) > PAUSED)
        {
            self.liveness.excuse_pause(now);
        }
        let mut declared = Vec::new();
        for (id, silent) in self.liveness.check(now, heartbeat_timeout) {
            let awaiting = self
                .recovery
                .filter(|_| Node::role_of(id) != Some(Role::Scheduler));
            if let Some(window) = awaiting {
                self.awaiting.insert(id, now + window);
                self.book.leave(id);
            }
            declared.push(Declared {
                id,
                why: Why::Silent(silent),
                awaiting,
            });
        }
        let late: Vec<NodeId> = self
            .awaiting
            .iter()
            .filter(|&(_, &deadline)| now >= deadline)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            self.awaiting.remove(&id);
            declared.push(Declared {
                id,
                why: Why::NotReplaced(self.recovery.unwrap_or_default()),
                awaiting: None,
            });
        }
        let for_good: std::collections::BTreeSet<NodeId> = self
            .liveness
            .lost()
            .iter()
            .filter(|id| !self.awaiting.contains_key(id))
            .copied()
            .collect();
        let failed = self.book.check(now, &for_good);
        (declared, failed)
    }
}

/// Ranks for the nodes of one role, in registration order: the requested ranks when they are a
/// permutation of `0..n`, else `0, 1, 2, …`.
pub fn assign_ranks(nodes: &[&Node]) -> Vec<usize> {
    let n = nodes.len();
    let asked: Vec<usize> = nodes
        .iter()
        .filter_map(|x| x.requested_rank)
        .map(|r| r as usize)
        .collect();
    let mut seen = vec![false; n];
    let valid = asked.len() == n
        && asked
            .iter()
            .all(|&r| r < n && !std::mem::replace(&mut seen[r], true));
    if valid {
        asked
    } else {
        if !asked.is_empty() {
            tracing::warn!("requested ranks {asked:?} are not a permutation of 0..{n}; using registration order");
        }
        (0..n).collect()
    }
}

#[cfg(test)]
mod tests {
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
        let (none, _) = s.tick(t0 + 15 * sec / 10, 10 * sec);
        assert!(none.is_empty());
        for t in (2..=10).map(|t| t0 + t * sec) {
            assert!(
                s.tick(t - sec / 100, 10 * sec).0.is_empty(),
                "ticking along"
            );
        }
        let (lost, failed) = s.tick(t0 + 11 * sec, 10 * sec);
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
        assert!(s.tick(t0 + sec, 10 * sec).0.is_empty());
        // Stopped for 30 s: the heartbeats of both nodes wait unread.
        assert!(s.tick(t0 + 31 * sec, 10 * sec).0.is_empty(), "excused");
        s.heartbeat(8, t0 + 32 * sec);
        for t in 32..42 {
            assert!(s.tick(t0 + t * sec, 10 * sec).0.is_empty());
        }
        assert_eq!(
            s.tick(t0 + 42 * sec, 10 * sec).0,
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
        let (lost, failed) = s.tick(t0 + 11 * sec, 10 * sec);
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

    #[test]
    fn a_lost_worker_is_replaced_with_its_rank_and_the_barriers_it_passed() {
        let sec = Duration::from_secs(1);
        let t0 = Instant::now();
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
        let (lost, failed) = s.tick(t0 + 11 * sec, 10 * sec);
        assert_eq!(lost, vec![silent(9, 11 * sec, Some(30 * sec))]);
        assert!(failed.is_empty(), "awaited");
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
        let (lost, _) = s.tick(t0 + 11 * sec, 10 * sec);
        assert_eq!(lost, vec![silent(8, 11 * sec, Some(5 * sec))]);
        let (late, failed) = s.tick(t0 + 16 * sec, 10 * sec);
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
}
