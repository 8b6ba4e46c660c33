//! A scheduler started in a silent one's place (same `DMLC_PS_ROOT_URI` and port): it rebuilds
//! what the old one held from what the servers and workers tell it when they re-register
//! ([`Rejoin`]). Data never passes through the scheduler, so the nodes train on meanwhile;
//! what must be rebuilt is the node table, the run id, the incarnations of replaced ids, the
//! barriers each group completed, the barriers nodes wait in, and liveness. Not in ps-lite
//! (whose scheduler is a single point of failure) nor in the OSDI'14 Parameter Server's code
//! (its paper replicates the server manager with Paxos; here the nodes hold the state and a
//! new scheduler reads it back, the way a Chubby master's successor rebuilds sessions from
//! its clients' KeepAlives).
//!
//! The first re-registration gives the table (the scheduler's own entry replaced by itself);
//! each later one confirms its node's entry (its address and incarnation). Barriers are
//! numbered per group ([`BarrierWait::number`]): a barrier some member reports completed was
//! released by the old scheduler, so members still waiting in it are released at once, and an
//! open barrier whose number a member reports completed releases the members that arrived. Every node of the
//! table counts as heard of at the rebuild: one that never re-registers is declared lost after
//! `PS_HEARTBEAT_TIMEOUT` and replaced as any lost node. Until a node re-registered, its
//! heartbeats and barrier requests (queued for the old scheduler and delivered to the new one)
//! are ignored: its re-registration says where it is. Sans-IO: time passed in.

use super::super::barrier::Outcome;
use super::{Admission, Scheduler};
use crate::postoffice::ALL_GROUP;
use crate::wire::{BarrierWait, Node, NodeId, Rejoin, Role, SCHEDULER};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The barriers completed.
#[derive(Default)]
pub(super) struct Progress {
    /// A barrier of all nodes has completed (the start-up barrier is behind everyone).
    pub started: bool,
    /// Barriers completed per group, the start-up barrier not counted.
    pub barriers: BTreeMap<i32, u64>,
}

impl Progress {
    /// A barrier of `group` completed here.
    pub(super) fn completed(&mut self, group: i32) {
        if group == ALL_GROUP && !self.started {
            self.started = true;
        } else {
            *self.barriers.entry(group).or_default() += 1;
        }
    }

    /// Whether barrier `w` (its group and number) was completed already.
    fn passed(&self, w: &BarrierWait) -> bool {
        match w.number {
            0 => self.started,
            n => n <= self.barriers.get(&w.group).copied().unwrap_or(0),
        }
    }
}

/// A scheduler that rebuilt the job from re-registrations.
pub(super) struct Rebuilt {
    /// The nodes that re-registered, or replaced a lost one.
    pub rejoined: BTreeSet<NodeId>,
    /// The nodes sent the table again (they registered without one before the job started);
    /// their messages count, and a re-registration of theirs is still read in full.
    resent: BTreeSet<NodeId>,
    /// When the first re-registration came.
    since: Instant,
    /// Every node of the table was back, and this was said.
    all_back: bool,
}

impl Rebuilt {
    fn back(&self, id: NodeId) -> bool {
        self.rejoined.contains(&id) || self.resent.contains(&id)
    }
}

/// What a re-registration changed ([`Scheduler::rejoin`]).
#[derive(Debug, PartialEq)]
pub enum Rejoined {
    /// From a node this scheduler counts already: a heartbeat (taken as one: counted in
    /// liveness, answered, or told the node was declared lost).
    Heartbeat,
    /// Not taken, and why (the node is not told: it fails when no scheduler answers it).
    Refused(String),
    /// Counted.
    Counted {
        /// The first re-registration: the rebuilt node table (connect to every node), the
        /// run id, whether the start-up barrier is behind the job, and the nodes that had
        /// registered here without a table (send them the table).
        adopted: Option<(Vec<Node>, u64, bool, Vec<Node>)>,
        /// Barriers to release (completed before, or now).
        released: Vec<Outcome>,
    },
}

impl Scheduler {
    /// Node `r.node` re-registers at `now`; `run_id` is this scheduler's (when it has one).
    /// A scheduler without every node registered takes the job over from it when nodes are
    /// replaced (`PS_CHECKPOINT_DIR`); one with a table counts it ([`Rejoined`]).
    pub fn rejoin(&mut self, r: Rejoin, run_id: u64, now: Instant) -> Rejoined {
        let id = r.node.id;
        if self.ready && self.rebuilt.is_none() {
            // The scheduler that never went away: it was only slow.
            if r.run_id != run_id {
                return Rejoined::Refused(format!("it belongs to run {:x}", r.run_id));
            }
            return Rejoined::Heartbeat;
        }
        let mut adopted = None;
        if !self.ready {
            match self.adopt(&r, now) {
                Ok(a) => adopted = Some(a),
                Err(why) => return Rejoined::Refused(why),
            }
        } else if r.run_id != run_id {
            return Rejoined::Refused(format!("it belongs to run {:x}", r.run_id));
        }
        if self
            .rebuilt
            .as_ref()
            .is_some_and(|b| b.rejoined.contains(&id))
        {
            return Rejoined::Heartbeat;
        }
        let Some(slot) = self.table.iter_mut().find(|n| n.id == id) else {
            return Rejoined::Refused(format!(
                "{} is not in this scheduler's node table",
                Node::describe(id)
            ));
        };
        *slot = r.node.clone();
        if let Some(b) = &mut self.rebuilt {
            b.rejoined.insert(id);
        }
        self.liveness.seen(id, now);
        self.replacements.at_least(id, r.incarnation);
        for &(peer, incarnation) in &r.holders {
            self.replacements.at_least(peer, incarnation);
        }
        let mut released = self.learn(r.started, &r.barriers_done);
        if let Some(w) = r.waiting {
            released.extend(self.rejoin_wait(id, w, now));
        }
        Rejoined::Counted { adopted, released }
    }

    /// Whether messages of node `id` count here: it is in the table, and re-registered when
    /// this scheduler rebuilt the job.
    pub fn counts(&self, id: NodeId) -> bool {
        self.ready && self.rebuilt.as_ref().is_none_or(|b| b.back(id))
    }

    /// Whether a rebuilt scheduler still waits for nodes of its table other than `except`
    /// (and the scheduler) to re-register: a replacement is admitted only once every other
    /// node re-registered or was declared lost, so that what it inherits (barriers,
    /// incarnation) is what they know.
    pub(super) fn rebuilding(&self, except: NodeId) -> bool {
        let Some(b) = &self.rebuilt else {
            return false;
        };
        let lost = self.liveness.lost();
        self.table[1..]
            .iter()
            .any(|n| n.id != except && !b.back(n.id) && !lost.contains(&n.id))
    }

    /// Whether this scheduler does not hold the job yet: the start-up has not completed, or it
    /// took the job over from a silent one and some node has not re-registered (what the
    /// nodes know, the key layout among it, is still coming in).
    pub fn taking_over(&self) -> bool {
        !self.ready || self.rebuilding(SCHEDULER)
    }

    /// Once after every node of a rebuilt table is back (re-registered, sent the table
    /// again, or replaced): how long after the first re-registration.
    pub fn all_back(&mut self) -> Option<Duration> {
        if self.rebuilding(SCHEDULER) {
            return None;
        }
        let b = self.rebuilt.as_mut()?;
        if std::mem::replace(&mut b.all_back, true) {
            return None;
        }
        Some(b.since.elapsed())
    }

    /// A registration (ADD_NODE) from `node`'s address, listed in the rebuilt table but not
    /// back, before the job passed its start-up barrier: it never got the old scheduler's
    /// table; it is sent the table now (`None` otherwise: after the start-up a node without a
    /// table at a listed address is a replacement whose table the old scheduler held, and it
    /// is not taken).
    pub(super) fn register_again(&mut self, node: &Node, now: Instant) -> Option<Admission> {
        if self.progress.started {
            return None;
        }
        let listed = self
            .table
            .iter()
            .find(|n| n.host == node.host && n.port == node.port && n.role == node.role)?
            .clone();
        let rebuilt = self.rebuilt.as_mut()?;
        if rebuilt.back(listed.id) {
            return None;
        }
        rebuilt.resent.insert(listed.id);
        self.liveness.seen(listed.id, now);
        Some(Admission::Resend(listed))
    }

    /// Takes the job over from the first re-registration `r`.
    fn adopt(
        &mut self,
        r: &Rejoin,
        now: Instant,
    ) -> Result<(Vec<Node>, u64, bool, Vec<Node>), String> {
        if !self.replacements.on() {
            return Err("this scheduler has no PS_CHECKPOINT_DIR: it takes over no job".into());
        }
        let count = |role| r.nodes.iter().filter(|n| n.role == role).count();
        let (servers, workers) = (count(Role::Server), count(Role::Worker));
        if (servers, workers) != (self.servers, self.workers) {
            return Err(format!(
                "its job has {servers} servers and {workers} workers, this scheduler \
                 {} and {} (DMLC_NUM_SERVER, DMLC_NUM_WORKER)",
                self.servers, self.workers
            ));
        }
        let mut table = vec![self.me.clone()];
        table.extend(r.nodes.iter().filter(|n| n.id != SCHEDULER).cloned());
        for n in &table[1..] {
            self.liveness.seen(n.id, now);
        }
        self.table = table;
        self.ready = true;
        self.progress.started |= r.started;
        self.rebuilt = Some(Rebuilt {
            rejoined: BTreeSet::new(),
            resent: BTreeSet::new(),
            since: now,
            all_back: false,
        });
        // Registrations that came before (nodes that never got the old table); one from an
        // address not in the table (a replacement) is dropped: it registers again within 2 s
        // and is admitted as a replacement then.
        let joined: Vec<Node> = std::mem::take(&mut self.starting.nodes)
            .iter()
            .filter_map(|n| self.register_again(n, now))
            .filter_map(|a| match a {
                Admission::Resend(n) => Some(n),
                _ => None,
            })
            .collect();
        Ok((self.table.clone(), r.run_id, r.started, joined))
    }

    /// What a re-registering member reports completed: barriers it passed that this
    /// scheduler had not counted were released by the old one; an open barrier among them is
    /// released now.
    fn learn(&mut self, started: bool, done: &[(i32, u64)]) -> Vec<Outcome> {
        let mut released = Vec::new();
        if started && !self.progress.started {
            self.progress.started = true;
            released.extend(self.book.complete(ALL_GROUP));
        }
        for &(group, n) in done {
            let have = self.progress.barriers.entry(group).or_default();
            if n > *have {
                *have = n;
                released.extend(self.book.complete(group));
            }
        }
        released
    }

    /// Node `id` re-registers waiting in barrier `w`: released at once when that barrier was
    /// completed, else counted as arrived.
    fn rejoin_wait(&mut self, id: NodeId, w: BarrierWait, now: Instant) -> Option<Outcome> {
        if self.progress.passed(&w) {
            return Some(Outcome {
                group: w.group,
                release: vec![id],
                failure: None,
            });
        }
        let timeout = (w.timeout_ms > 0).then(|| Duration::from_millis(w.timeout_ms));
        self.barrier_after(id, w.group, timeout, now, w.failed)
    }

    /// The scheduler's own arrival at barrier `w` (numbered as this scheduler's node counts
    /// its barriers): released at once when the job completed that barrier already (a
    /// rebuilt scheduler, whose application starts again from its beginning, passes the
    /// barriers the old one passed — its start-up barrier, or the last barrier when the old
    /// scheduler died releasing it); otherwise it arrives as any member.
    pub fn arrive_own(
        &mut self,
        w: &BarrierWait,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Option<Outcome> {
        if self.progress.passed(w) {
            return Some(Outcome {
                group: w.group,
                release: vec![SCHEDULER],
                failure: None,
            });
        }
        self.barrier_after(SCHEDULER, w.group, timeout, now, w.failed.clone())
    }
}

#[cfg(test)]
mod tests {
    //! A job's barriers with its scheduler killed at any step: the messages in flight to and
    //! from the dead scheduler are lost, the nodes re-register in any order (some entering
    //! barriers before they do, whose requests the new scheduler ignores), and the job must
    //! finish every barrier, no node ever released from a barrier some member had not reached.

    use super::*;
    use crate::postoffice::WORKER_GROUP;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// One member's side of barriers (as `postoffice::node::Barriers` numbers them).
    #[derive(Clone, Default)]
    struct Member {
        id: NodeId,
        /// The groups of its barriers after the start-up barrier, in order.
        script: Vec<i32>,
        next: usize,
        started: bool,
        done: BTreeMap<i32, u64>,
        waiting: Option<BarrierWait>,
        /// Re-registered with the new scheduler (or never needed to).
        rejoined: bool,
    }

    impl Member {
        /// Begins its next barrier, if any is left and it waits in none.
        fn begin(&mut self) -> Option<BarrierWait> {
            if self.waiting.is_some() {
                return None;
            }
            let (group, number) = if !self.started {
                (ALL_GROUP, 0)
            } else {
                let group = *self.script.get(self.next)?;
                (group, self.done.get(&group).copied().unwrap_or(0) + 1)
            };
            let w = BarrierWait {
                group,
                number,
                ..BarrierWait::default()
            };
            self.waiting = Some(w.clone());
            Some(w)
        }

        /// A release of `group` arrived: taken when it waits in that group.
        fn released(&mut self, group: i32) -> Option<BarrierWait> {
            let w = self.waiting.take_if(|w| w.group == group)?;
            if w.number == 0 {
                self.started = true;
            } else {
                self.done.insert(w.group, w.number);
                self.next += 1;
            }
            Some(w)
        }

        fn finished(&self) -> bool {
            self.started && self.next == self.script.len() && self.waiting.is_none()
        }

        fn rejoin(&self, node: &Node, nodes: &[Node]) -> Rejoin {
            Rejoin {
                node: node.clone(),
                run_id: 7,
                nodes: nodes.to_vec(),
                incarnation: 0,
                holders: Vec::new(),
                started: self.started,
                barriers_done: self.done.iter().map(|(&g, &n)| (g, n)).collect(),
                waiting: self.waiting.clone(),
                layout: None,
                clock: 0,
            }
        }
    }

    struct Sim {
        s: Scheduler,
        /// The scheduler first, then servers 8, 10 and workers 9, 11.
        members: Vec<Member>,
        nodes: Vec<Node>,
        /// Releases on their way: (member index, group).
        releases: VecDeque<(usize, i32)>,
        /// Every (member, group, number) that arrived anywhere.
        arrived: BTreeSet<(NodeId, i32, u64)>,
        now: Instant,
    }

    impl Sim {
        fn new() -> Sim {
            let now = Instant::now();
            let me = Node {
                id: SCHEDULER,
                role: Role::Scheduler,
                host: "h".into(),
                port: 1,
                requested_rank: None,
            };
            let mut s = Scheduler::new(me, 2, 2, Some(Duration::from_secs(60)));
            let mut table = Vec::new();
            for (role, port) in [
                (Role::Server, 2),
                (Role::Server, 3),
                (Role::Worker, 4),
                (Role::Worker, 5),
            ] {
                let n = Node {
                    role,
                    port,
                    id: -1,
                    ..s.me.clone()
                };
                if let Admission::Complete(t) = s.add_node(n, now) {
                    table = t;
                }
            }
            // Barriers of all nodes are the start-up barrier and the last (the scheduler's
            // application calls no other); the workers have theirs between.
            let script = |id| match Node::role_of(id) {
                Some(Role::Worker) => vec![WORKER_GROUP, WORKER_GROUP, ALL_GROUP],
                _ => vec![ALL_GROUP],
            };
            let members = table
                .iter()
                .map(|n| Member {
                    id: n.id,
                    script: script(n.id),
                    rejoined: true,
                    ..Member::default()
                })
                .collect();
            Sim {
                s,
                members,
                nodes: table,
                releases: VecDeque::new(),
                arrived: BTreeSet::new(),
                now,
            }
        }

        fn outcome(&mut self, o: Option<Outcome>) {
            let Some(o) = o else { return };
            assert!(o.failure.is_none(), "a barrier failed: {o:?}");
            for id in o.release {
                let i = self
                    .members
                    .iter()
                    .position(|m| m.id == id)
                    .expect("member");
                self.releases.push_back((i, o.group));
            }
        }

        /// Member `i` begins its next barrier; its request reaches the scheduler when it
        /// counts there (a dead scheduler's requests are not sent: `alive` false).
        fn arrive(&mut self, i: usize, alive: bool) {
            if i == 0 && !self.s.ready {
                // The scheduler's own barriers wait for its table.
                return;
            }
            let Some(w) = self.members[i].begin() else {
                return;
            };
            let id = self.members[i].id;
            self.arrived.insert((id, w.group, w.number));
            if id == SCHEDULER {
                let o = self.s.arrive_own(&w, None, self.now);
                self.outcome(o);
                return;
            }
            if alive && self.s.counts(id) {
                let o = self.s.barrier(id, w.group, None, self.now);
                self.outcome(o);
            }
        }

        /// The next release on its way is delivered.
        fn deliver(&mut self) {
            let Some((i, group)) = self.releases.pop_front() else {
                return;
            };
            let m = &mut self.members[i];
            if let Some(w) = m.released(group) {
                for other in &self.nodes {
                    if other.role.group() & w.group != 0 {
                        assert!(
                            self.arrived.contains(&(other.id, w.group, w.number)),
                            "{} released from barrier {} of group {} before {} reached it",
                            Node::describe(m.id),
                            w.number,
                            w.group,
                            Node::describe(other.id)
                        );
                    }
                }
            }
        }

        /// The scheduler dies: what was on its way to or from it is lost; a new one starts.
        fn kill(&mut self) {
            self.releases.clear();
            let me = self.s.me.clone();
            self.s = Scheduler::new(me, 2, 2, Some(Duration::from_secs(60)));
            self.members[0] = Member {
                id: SCHEDULER,
                script: self.members[0].script.clone(),
                rejoined: true,
                ..Member::default()
            };
            for m in &mut self.members[1..] {
                m.rejoined = false;
            }
        }

        /// Member `i` re-registers.
        fn rejoin(&mut self, i: usize) {
            let r = self.members[i].rejoin(&self.nodes[i], &self.nodes);
            self.members[i].rejoined = true;
            match self.s.rejoin(r, 7, self.now) {
                Rejoined::Counted { adopted, released } => {
                    if let Some((_, _, started, _)) = adopted {
                        // The new scheduler's own start-up barrier is skipped once passed.
                        self.members[0].started = started;
                    }
                    for o in released {
                        self.outcome(Some(o));
                    }
                }
                other => panic!("re-registration not counted: {other:?}"),
            }
        }
    }

    #[test]
    fn a_re_registration_of_another_job_or_to_a_scheduler_without_checkpoints_is_refused_naming_why(
    ) {
        let sim = Sim::new();
        let r = sim.members[1].rejoin(&sim.nodes[1], &sim.nodes);
        let me = sim.s.me.clone();
        let now = sim.now;
        let refused = |mut s: Scheduler, r: Rejoin| match s.rejoin(r, 7, now) {
            Rejoined::Refused(why) => why,
            other => panic!("not refused: {other:?}"),
        };
        let without = Scheduler::new(me.clone(), 2, 2, None);
        assert_eq!(
            refused(without, r.clone()),
            "this scheduler has no PS_CHECKPOINT_DIR: it takes over no job"
        );
        let smaller = Scheduler::new(me.clone(), 1, 2, Some(Duration::from_secs(9)));
        assert_eq!(
            refused(smaller, r.clone()),
            "its job has 2 servers and 2 workers, this scheduler 1 and 2 (DMLC_NUM_SERVER, \
             DMLC_NUM_WORKER)"
        );
        let other_run = Rejoin {
            run_id: 8,
            ..r.clone()
        };
        assert_eq!(refused(sim.s, other_run), "it belongs to run 8");
        // The scheduler that never went away takes it as a heartbeat.
        let mut sim = Sim::new();
        assert_eq!(sim.s.rejoin(r, 7, now), Rejoined::Heartbeat);
        assert!(sim.s.counts(sim.nodes[1].id));
    }

    #[test]
    fn a_replacement_waits_until_the_others_re_registered_then_inherits_what_they_report() {
        let mut sim = Sim::new();
        for _ in 0..2 {
            // Start-up, then both workers' first WORKER_GROUP barrier.
            for i in 0..sim.members.len() {
                sim.arrive(i, true);
            }
            while !sim.releases.is_empty() {
                sim.deliver();
            }
        }
        // Members: the scheduler, servers 8 and 10, workers 9 and 11.
        assert_eq!(
            sim.members[3].done.get(&WORKER_GROUP),
            Some(&1),
            "worker 0 passed one"
        );
        sim.kill();
        // Worker rank 1 (id 11) died with the scheduler; the servers and worker 0 re-register,
        // worker 0 last. A replacement registering before that waits.
        sim.rejoin(1);
        let replacement = Node {
            role: Role::Worker,
            port: 99,
            id: -1,
            requested_rank: Some(1),
            ..sim.s.me.clone()
        };
        assert_eq!(
            sim.s.add_node(replacement.clone(), sim.now),
            Admission::Waiting
        );
        sim.rejoin(2);
        assert_eq!(
            sim.s.add_node(replacement.clone(), sim.now),
            Admission::Waiting
        );
        assert_eq!(sim.s.all_back(), None, "worker 11 is not back");
        sim.rejoin(3);
        let Admission::Replaced {
            node,
            inherited,
            started,
            ..
        } = sim.s.add_node(replacement, sim.now)
        else {
            panic!("not admitted");
        };
        assert_eq!(node.id, 11);
        assert!(started);
        assert_eq!(inherited.barriers, vec![(WORKER_GROUP, 1)]);
        assert_eq!(sim.s.all_back().map(|_| ()), Some(()), "every node back");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The scheduler killed at any step of a job's barriers, the nodes re-registering in
        /// any order among their other steps: every barrier of every member completes, and
        /// no member is released from a barrier before every member reached it.
        #[test]
        fn a_rebuilt_scheduler_finishes_every_barrier_and_releases_none_early(
            before in proptest::collection::vec((0u8..3, 0usize..5), 0..80),
            after in proptest::collection::vec((0u8..3, 0usize..5), 0..60),
        ) {
            let mut sim = Sim::new();
            for (what, i) in before {
                if what == 0 { sim.deliver() } else { sim.arrive(i, true) }
            }
            sim.kill();
            for (what, i) in after {
                match what {
                    0 => sim.deliver(),
                    1 if !sim.members[i].rejoined => sim.rejoin(i),
                    _ => {
                        let counted = sim.members[i].rejoined;
                        sim.arrive(i, counted || sim.s.ready);
                    }
                }
            }
            // Whoever has not re-registered does now; then the job runs to its end.
            for i in 1..sim.members.len() {
                if !sim.members[i].rejoined {
                    sim.rejoin(i);
                }
            }
            for _ in 0..200 {
                for i in 0..sim.members.len() {
                    sim.arrive(i, true);
                }
                while !sim.releases.is_empty() {
                    sim.deliver();
                }
            }
            for m in &sim.members {
                prop_assert!(m.finished(), "{} stopped at barrier {} of {:?}", Node::describe(m.id), m.next, m.script);
            }
        }
    }
}
