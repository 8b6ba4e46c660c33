//! The scheduler's state: admission of registering nodes, rank and id assignment, the node
//! table, barriers and liveness (ps-lite's scheduler half of `Van::ProcessAddNodeCommand`,
//! `ProcessBarrierCommand` and `Postoffice::GetDeadNodes`). Sans-IO: the postoffice feeds it
//! registrations, barrier requests, heartbeats and clock ticks (time passed in), and sends what
//! it returns (node tables, refusals, barrier releases).

use super::barrier::{BarrierBook, Outcome};
use super::liveness::Liveness;
use crate::wire::{Node, NodeId, Role};
use std::time::{Duration, Instant};

use starting::Starting;

pub use admission::{Admission, Declared, Inherited, Tick, Why, MAX_WORKER_REPLACEMENTS};

/// The scheduler's state; see the module docs.
pub struct Scheduler {
    servers: usize,
    workers: usize,
    me: Node,
    /// The registrations until the start completes.
    starting: Starting,
    table: Vec<Node>,
    ready: bool,
    book: BarrierBook,
    liveness: Liveness,
    /// Lost nodes awaiting a replacement, and the replacements so far.
    replacements: Replacements,
    /// The barriers completed.
    progress: Progress,
    /// A scheduler started in a silent one's place: who re-registered with it so far.
    rebuilt: Option<Rebuilt>,
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
            replacements: Replacements::new(recovery),
            progress: Progress::default(),
            rebuilt: None,
            servers,
            workers,
            me,
            starting: Starting::default(),
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
            .starting
            .nodes
            .iter()
            .chain(self.table.iter().filter(|n| !lost.contains(&n.id)))
            .any(|n| n.host == node.host && n.port == node.port)
        {
            return self.register_again(&node, now).unwrap_or(Admission::Repeat);
        }
        if self.joins(&node) {
            return self.join(node, now);
        }
        if !self.ready && self.starting.early_joiner(&node, self.servers) {
            return Admission::Waiting;
        }
        if let Some(why) = self.proven_conflict(&node) {
            return Admission::Refused { node, why };
        }
        if self.ready && node.role != Role::Scheduler && self.replacements.on() {
            if let Some(a) = self.replace(&node, now) {
                return a;
            }
        }
        let want = self.wanted(node.role);
        let have = self.starting.count(node.role);
        if self.ready || have >= want {
            let why = match node.role {
                Role::Scheduler => "a second scheduler cannot join".to_string(),
                Role::Server if self.ready => format!(
                    "the cluster already has its {want} servers (DMLC_NUM_SERVER); a server \
                     joins the running job with PSLITE_RANK={want}"
                ),
                r => format!(
                    "the cluster already has its {want} {r}s (DMLC_NUM_{})",
                    r.name().to_uppercase()
                ),
            };
            return Admission::Refused { node, why };
        }
        self.starting.nodes.push(node);
        if self.starting.nodes.len() < self.servers + self.workers {
            return Admission::Waiting;
        }
        self.complete(now)
    }

    /// Every expected node registered: ranks are assigned, ids follow, and the start is
    /// complete.
    fn complete(&mut self, now: Instant) -> Admission {
        let mut table = vec![self.me.clone()];
        let joined = std::mem::take(&mut self.starting.nodes);
        for role in [Role::Server, Role::Worker] {
            let of_role: Vec<&Node> = joined.iter().filter(|n| n.role == role).collect();
            let ranks = assign_ranks(&of_role);
            for (n, rank) in of_role.into_iter().zip(ranks) {
                let id = id_of(role, rank);
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

    /// Whether `node` asks to join the running job as a new server: a server registering
    /// after the start with the rank after the last server's (`PSLITE_RANK`), proven as that
    /// rank's id or unproven.
    fn joins(&self, node: &Node) -> bool {
        let next = self.servers;
        self.ready
            && node.role == Role::Server
            && node.requested_rank == Some(next as u32)
            && (node.id < 0 || node.id == id_of(Role::Server, next))
    }

    /// `node` joins as server rank [`Self::servers`] (see [`Admission::Joined`]); refused while
    /// lost nodes are replaced (`PS_CHECKPOINT_DIR`: neither a replacement of a joined server
    /// nor a scheduler taking the job over knows of servers beyond `DMLC_NUM_SERVER`).
    fn join(&mut self, node: Node, now: Instant) -> Admission {
        if self.replacements.on() {
            let why = "a server joins a running job only without PS_CHECKPOINT_DIR (lost \
                       nodes are replaced, and neither a replacement of a joined server nor a \
                       scheduler taking the job over knows of servers beyond DMLC_NUM_SERVER)";
            return Admission::Refused {
                node,
                why: why.to_string(),
            };
        }
        let id = id_of(Role::Server, self.servers);
        self.servers += 1;
        let node = Node { id, ..node };
        let at = self
            .table
            .iter()
            .position(|n| n.role == Role::Worker)
            .unwrap_or(self.table.len());
        self.table.insert(at, node.clone());
        self.liveness.seen(id, now);
        self.book.join(id, Role::Server.group());
        Admission::Joined {
            node,
            table: self.table.clone(),
            started: self.progress.started,
            inherited: self.inherited(0),
        }
    }

    /// What a node taking a place in the job now inherits: the barriers completed so far,
    /// and `incarnation`.
    fn inherited(&self, incarnation: u32) -> Inherited {
        Inherited {
            barriers: self
                .progress
                .barriers
                .iter()
                .map(|(&g, &n)| (g, n))
                .collect(),
            incarnation,
        }
    }

    /// Why a registration proven as an id (`node.id >= 0`: its node holds that id's key; the
    /// van marks it) cannot be given that id: another role's id, a rank beyond the cluster's,
    /// or a rank another registration waiting to join asked for. `None` otherwise, and for an
    /// unproven registration (`node.id` -1). A proven registration is given its id or none.
    fn proven_conflict(&self, node: &Node) -> Option<String> {
        let id = node.id;
        if id < 0 {
            return None;
        }
        if Node::role_of(id) != Some(node.role) {
            return Some(format!(
                "it registers as a {} but proved {}",
                node.role,
                Node::describe(id)
            ));
        }
        let (rank, want) = (Node::rank_of(id), self.wanted(node.role));
        if rank >= want {
            return Some(format!(
                "it proved {}, but the cluster has {want} {}s (DMLC_NUM_{})",
                Node::describe(id),
                node.role,
                node.role.name().to_uppercase()
            ));
        }
        let taken =
            self.starting.nodes.iter().find(|n| {
                n.role == node.role && (n.id == id || n.requested_rank == Some(rank as u32))
            });
        taken.map(|n| {
            format!(
                "{} is asked for already, by the registration from {}",
                Node::describe(id),
                crate::wire::place(&n.host, n.port)
            )
        })
    }

    /// A server or worker registering after the start replaces the node of its role and
    /// requested rank, or else the first lost node of its role; `None` when there is none to
    /// replace (it is refused).
    fn replace(&mut self, node: &Node, now: Instant) -> Option<Admission> {
        let role = node.role;
        let asked = node
            .requested_rank
            .map(|r| r as usize)
            .filter(|&r| r < self.wanted(role))
            .map(|rank| id_of(role, rank));
        let id = asked.or_else(|| self.replacements.first_awaited(role))?;
        if self.rebuilding(id) {
            // What it inherits is known once the others re-registered; it registers again.
            return Some(Admission::Waiting);
        }
        let holders = self.replacements.holders(id);
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
        if self.liveness.lost().contains(&id) && !self.replacements.awaits(id) {
            // Declared lost for good: the job is failing already.
            return None;
        }
        let slot = self.table.iter_mut().find(|n| n.id == id)?;
        let old = std::mem::replace(slot, Node { id, ..node.clone() });
        let displaced = old;
        let incarnation = self.replacements.take_over(id);
        self.liveness.revive(id, now);
        if let Some(b) = &mut self.rebuilt {
            b.rejoined.insert(id);
        }
        self.book.leave(id);
        let inherited = self.inherited(incarnation);
        Some(Admission::Replaced {
            node: Node { id, ..node.clone() },
            displaced,
            table: self.table.clone(),
            started: self.progress.started,
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
        let why = self.starting.timed_out(timeout, self.servers, self.workers);
        Some((std::mem::take(&mut self.starting.nodes), why))
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
        self.barrier_after(from, group, timeout, now, None)
    }

    /// As [`barrier`](Self::barrier), `failed` holding the error of `from`'s application when
    /// it failed ([`BarrierBook::arrive_after`]).
    pub fn barrier_after(
        &mut self,
        from: NodeId,
        group: i32,
        timeout: Option<Duration>,
        now: Instant,
        failed: Option<String>,
    ) -> Option<Outcome> {
        let members: Vec<NodeId> = self
            .table
            .iter()
            .filter(|n| n.role.group() & group != 0)
            .map(|n| n.id)
            .collect();
        let outcome = self
            .book
            .arrive_after(group, from, &members, timeout, now, failed);
        if outcome.as_ref().is_some_and(|o| o.failure.is_none()) {
            self.progress.completed(group);
        }
        outcome
    }

    /// Heartbeats newly missed per node ([`Liveness::missed`]), for the metrics.
    pub fn missed_heartbeats(&mut self, now: Instant, interval: Duration) -> Vec<(NodeId, u64)> {
        if !self.ready {
            return Vec::new();
        }
        self.liveness.missed(now, interval)
    }

    /// What the scheduler waits for at `now`, for "who waits on whom": each open barrier's
    /// group and missing members, and how long ago each node was last heard of.
    pub fn waits(&self, now: Instant) -> Vec<String> {
        let mut lines: Vec<String> = self
            .book
            .missing()
            .into_iter()
            .map(|(group, missing, since)| {
                format!(
                    "scheduler: the barrier of group {group} (open {}) still misses {}",
                    crate::waits::age(now.saturating_duration_since(since)),
                    missing
                        .iter()
                        .map(|&id| Node::describe(id))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        let ages: Vec<String> = self
            .liveness
            .ages(now)
            .into_iter()
            .map(|(id, age, lost)| {
                let lost = if lost { " (lost)" } else { "" };
                format!(
                    "{} {} ago{lost}",
                    Node::describe(id),
                    crate::waits::age(age)
                )
            })
            .collect();
        if !ages.is_empty() {
            lines.push(format!("scheduler: last heartbeats: {}", ages.join(", ")));
        }
        if !self.ready {
            lines.push(format!(
                "scheduler: {} of {} nodes registered",
                self.starting.nodes.len(),
                self.servers + self.workers
            ));
        }
        lines
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
    pub fn tick(&mut self, now: Instant, heartbeat_timeout: Duration) -> Tick {
        if !self.ready {
            return Tick::default();
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
            let awaiting = self.replacements.await_replacement(id, now);
            if awaiting.is_some() {
                self.book.leave(id);
            }
            declared.push(Declared {
                id,
                why: Why::Silent(silent),
                awaiting,
            });
        }
        for id in self.replacements.late(now) {
            declared.push(Declared {
                id,
                why: Why::NotReplaced(self.replacements.window()),
                awaiting: None,
            });
        }
        let for_good: std::collections::BTreeSet<NodeId> = self
            .liveness
            .lost()
            .iter()
            .filter(|&&id| !self.replacements.awaits(id))
            .copied()
            .collect();
        let failed = self.book.check(now, &for_good);
        Tick {
            lost: declared,
            failed,
        }
    }
}

mod admission;
pub(super) mod driver;
mod joined;
mod ranks;
mod rebuild;
mod rejoin;
mod replacements;
mod resize;
mod starting;
mod tables;
pub(super) use driver::SchedulerIo;
pub use ranks::assign_ranks;
use ranks::id_of;
pub use rejoin::Rejoined;
use rejoin::{Progress, Rebuilt};
use replacements::Replacements;
pub(super) use tables::refuse_all;

#[cfg(test)]
mod tests;
