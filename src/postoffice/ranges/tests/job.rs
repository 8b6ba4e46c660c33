//! A whole job against the sans-IO parts: the scheduler's [`Coordinator`], a [`Holding`] and a
//! key store per server, and workers that slice pushes by the layout they know and slice a
//! part again when a server answers "moved" or "not yet" (as `kv::worker::tracker::redirect`
//! does). Every message is delivered once (as the vans with resend deliver), in any order:
//! across connections, and within one (a resent message arrives after later ones); resizes
//! start at any moment. Checked: no part is ever
//! refused, at most one server serves a key at any moment, and once the job is quiet every
//! part was answered and every key's owner holds exactly the pushes of it.
//!
//! With checkpoints (the second property) servers also die and are replaced at any moment,
//! as `kv::server` does it: what a server applied survives (its request log, and the snapshot
//! taken at each import), what was queued to it and what it sent to its peers is lost, the
//! replacement starts from the scheduler's current layout (from the one before, adopting it,
//! while its moves are not settled), answers parts it applied before as applied, gets its
//! unanswered parts again from the workers and the handoffs kept for it again from its peers;
//! a new owner serves a moved range only once its layout settled.

use super::super::coordinator::Coordinator;
use super::super::holding::{Holding, Verdict};
use super::super::layout::Layout;
use crate::postoffice::range::Range;
use crate::wire::{KeyLayout, NodeId};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

const SCHEDULER: NodeId = 1;
const SERVERS: [NodeId; 4] = [8, 10, 12, 14];
const WORKERS: [NodeId; 2] = [9, 11];

/// The keys pushed: 24 spread over the key space, `u64::MAX` last.
fn all_keys() -> Vec<u64> {
    let mut k: Vec<u64> = (0..23u64).map(|i| i * (u64::MAX / 23) + 3).collect();
    k.push(u64::MAX);
    k
}

#[derive(Clone, Debug)]
enum Answer {
    Applied,
    Moved,
    NotYet,
}

#[derive(Clone, Debug)]
enum Msg {
    Layout(KeyLayout),
    Part {
        id: (usize, usize),
        keys: Vec<u64>,
        epoch: u64,
    },
    Answer {
        id: (usize, usize),
        answer: Answer,
    },
    Handoff {
        epoch: u64,
        range: Range,
        rows: BTreeMap<u64, i64>,
    },
    Arrived {
        epoch: u64,
    },
}

struct Server {
    holding: Holding,
    sums: BTreeMap<u64, i64>,
    /// Rows that arrived before their layout, by (epoch, first key).
    early: BTreeMap<(u64, u64), BTreeMap<u64, i64>>,
    /// With checkpoints: the parts applied (the request log), and the handoffs sent whose
    /// layout has not settled (epoch, new owner, handoff).
    applied: BTreeSet<(usize, usize)>,
    kept: Vec<(u64, NodeId, Msg)>,
}

struct Worker {
    layout: Layout,
    /// Parts not answered: (push, part) → (server, epoch sliced by, keys).
    out: BTreeMap<(usize, usize), (NodeId, u64, Vec<u64>)>,
    /// Per push, the next part number.
    next: BTreeMap<usize, usize>,
}

/// What the test does next.
#[derive(Clone, Debug)]
enum Op {
    /// Worker `w` pushes the keys picked by `mask`.
    Push(usize, u32),
    /// The `n`-th non-empty connection delivers one message.
    Deliver(usize),
    /// A resize of server `s` (add or drain).
    Resize(bool, usize),
    /// Server `s` dies and is replaced (with checkpoints only).
    Restart(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..WORKERS.len(), 1u32..).prop_map(|(w, m)| Op::Push(w, m)),
        6 => any::<usize>().prop_map(Op::Deliver),
        1 => (any::<bool>(), 0..SERVERS.len()).prop_map(|(a, s)| Op::Resize(a, s)),
    ]
}

fn op_with_restarts() -> impl Strategy<Value = Op> {
    prop_oneof![
        9 => op(),
        1 => (0..SERVERS.len()).prop_map(Op::Restart),
    ]
}

struct Job {
    /// Servers keep checkpoints (and may be replaced).
    durable: bool,
    coord: Coordinator,
    servers: BTreeMap<NodeId, Server>,
    workers: BTreeMap<NodeId, Worker>,
    chans: BTreeMap<(NodeId, NodeId), VecDeque<Msg>>,
    /// Pushes of each key made.
    pushed: BTreeMap<u64, i64>,
    pushes: usize,
    now: Instant,
}

impl Job {
    fn new(durable: bool) -> Job {
        let l0 = Layout::even(&SERVERS);
        let holding = |s| match durable {
            true => Holding::until_settled(s, Arc::new(l0.clone())),
            false => Holding::new(s, Arc::new(l0.clone())),
        };
        Job {
            durable,
            coord: Coordinator::new(l0.clone()),
            servers: SERVERS
                .iter()
                .map(|&s| {
                    let server = Server {
                        holding: holding(s),
                        sums: BTreeMap::new(),
                        early: BTreeMap::new(),
                        applied: BTreeSet::new(),
                        kept: Vec::new(),
                    };
                    (s, server)
                })
                .collect(),
            workers: WORKERS
                .iter()
                .map(|&w| {
                    let worker = Worker {
                        layout: l0.clone(),
                        out: BTreeMap::new(),
                        next: BTreeMap::new(),
                    };
                    (w, worker)
                })
                .collect(),
            chans: BTreeMap::new(),
            pushed: BTreeMap::new(),
            pushes: 0,
            now: Instant::now(),
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, m: Msg) {
        self.chans.entry((from, to)).or_default().push_back(m);
    }

    /// Worker `w` sends `keys` of push `push` as parts sliced by its layout.
    fn send_parts(&mut self, w: NodeId, push: usize, keys: &[u64]) {
        let worker = &self.workers[&w];
        let epoch = worker.layout.epoch();
        let mut by_owner: BTreeMap<(u64, NodeId), Vec<u64>> = BTreeMap::new();
        for &k in keys {
            let owner = worker.layout.owner_of(k);
            let begin = worker.layout.part_of(owner).map_or(0, |r| r.begin);
            by_owner.entry((begin, owner)).or_default().push(k);
        }
        for ((_, owner), keys) in by_owner {
            let worker = self.workers.get_mut(&w).expect("a worker");
            let n = worker.next.entry(push).or_insert(0);
            let id = (push, *n);
            *n += 1;
            worker.out.insert(id, (owner, epoch, keys.clone()));
            self.send(w, owner, Msg::Part { id, keys, epoch });
        }
    }

    fn push(&mut self, w: usize, mask: u32) {
        let keys: Vec<u64> = all_keys()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, k)| k)
            .collect();
        if keys.is_empty() {
            return;
        }
        for &k in &keys {
            *self.pushed.entry(k).or_insert(0) += 1;
        }
        let push = self.pushes;
        self.pushes += 1;
        self.send_parts(WORKERS[w], push, &keys);
    }

    fn resize(&mut self, add: bool, s: usize) {
        if let Ok(layout) = self.coord.resize((SERVERS[s], add), WORKERS[0], self.now) {
            self.broadcast(&layout);
        }
    }

    fn broadcast(&mut self, layout: &KeyLayout) {
        for to in SERVERS.iter().chain(&WORKERS) {
            self.send(SCHEDULER, *to, Msg::Layout(layout.clone()));
        }
    }

    /// The connections with a message on its way, in order.
    fn busy(&self) -> Vec<(NodeId, NodeId)> {
        self.chans
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&c, _)| c)
            .collect()
    }

    /// Delivers a message of the `n`-th non-empty connection (modulo their number): its
    /// oldest for most `n`, another one for some (a message overtaken).
    fn deliver(&mut self, n: usize) -> Result<bool, TestCaseError> {
        let busy = self.busy();
        if busy.is_empty() {
            return Ok(false);
        }
        let (from, to) = busy[n % busy.len()];
        let len = self.chans.get(&(from, to)).map_or(1, VecDeque::len);
        let at = match (n / busy.len()) % 4 {
            0 => (n / busy.len() / 4) % len,
            _ => 0,
        };
        self.deliver_on((from, to), at)?;
        Ok(true)
    }

    /// Delivers the `at`-th message queued on connection `(from, to)`.
    fn deliver_on(&mut self, (from, to): (NodeId, NodeId), at: usize) -> Result<(), TestCaseError> {
        let q = self
            .chans
            .get_mut(&(from, to))
            .ok_or_else(|| TestCaseError::fail("a busy connection"))?;
        let m = q
            .remove(at)
            .ok_or_else(|| TestCaseError::fail("a message"))?;
        match to {
            SCHEDULER => self.at_scheduler(from, m),
            t if SERVERS.contains(&t) => self.at_server(from, t, m)?,
            t => self.at_worker(t, m),
        }
        self.check_one_server_per_key()
    }

    fn at_scheduler(&mut self, from: NodeId, m: Msg) {
        if let Msg::Arrived { epoch } = m {
            if let Some(settled) = self.coord.arrived((from, epoch), (0, Vec::new()), self.now) {
                self.broadcast(&settled);
            }
        }
    }

    /// Server `me` adopts layout `l`: hands the rows leaving it over, imports rows that came
    /// early.
    fn server_adopts(&mut self, me: NodeId, l: &KeyLayout) {
        let server = self.servers.get_mut(&me).expect("a server");
        let Some(adopted) = server.holding.adopt(l) else {
            return;
        };
        let mut sends = Vec::new();
        for mv in adopted.out {
            let rows = server
                .sums
                .iter()
                .filter(|(k, _)| mv.range.holds(**k))
                .map(|(&k, &v)| (k, v))
                .collect();
            let h = Msg::Handoff {
                epoch: l.epoch,
                range: mv.range,
                rows,
            };
            if self.durable {
                server.kept.push((l.epoch, mv.to, h.clone()));
            }
            sends.push((mv.to, h));
        }
        for (range, _) in adopted.arrived {
            let rows = server.early.remove(&(l.epoch, range.begin));
            server.sums.extend(rows.unwrap_or_default());
            sends.push((SCHEDULER, Msg::Arrived { epoch: l.epoch }));
        }
        for (to, m) in sends {
            self.send(me, to, m);
        }
    }

    fn at_server(&mut self, from: NodeId, me: NodeId, m: Msg) -> Result<(), TestCaseError> {
        match m {
            Msg::Layout(l) => {
                self.server_adopts(me, &l);
                let server = self.servers.get_mut(&me).expect("a server");
                if l.settled.is_some() && l.epoch <= server.holding.epoch() {
                    server.holding.settled(l.epoch);
                    server.kept.retain(|k| k.0 > l.epoch);
                }
            }
            Msg::Handoff { epoch, range, rows } => {
                let server = self.servers.get_mut(&me).expect("a server");
                match server
                    .holding
                    .handoff((epoch, range, from), Ok(bytes::Bytes::new()))
                {
                    Some(_) => {
                        server.sums.extend(rows);
                        self.send(me, SCHEDULER, Msg::Arrived { epoch });
                    }
                    // Before its layout: the holding keeps it, the model its rows.
                    None => {
                        server.early.insert((epoch, range.begin), rows);
                    }
                }
            }
            Msg::Part { id, keys, epoch } => {
                let durable = self.durable;
                let server = self.servers.get_mut(&me).expect("a server");
                let verdict = match server.applied.contains(&id) {
                    true => Verdict::Refuse("applied before".into()),
                    false => server.holding.verdict(&keys, Some(epoch)),
                };
                let answer = match verdict {
                    // Applied before a restart: answered as applied (the request log).
                    Verdict::Refuse(_) if server.applied.contains(&id) => Answer::Applied,
                    Verdict::Serve => {
                        for k in &keys {
                            *server.sums.entry(*k).or_insert(0) += 1;
                        }
                        if durable {
                            server.applied.insert(id);
                        }
                        Answer::Applied
                    }
                    Verdict::Moved { .. } => Answer::Moved,
                    Verdict::NotYet => Answer::NotYet,
                    Verdict::Refuse(why) => {
                        return Err(TestCaseError::fail(format!("part {id:?} refused: {why}")))
                    }
                };
                self.send(me, from, Msg::Answer { id, answer });
            }
            other => return Err(TestCaseError::fail(format!("a server got {other:?}"))),
        }
        Ok(())
    }

    fn at_worker(&mut self, me: NodeId, m: Msg) {
        let worker = self.workers.get_mut(&me).expect("a worker");
        match m {
            Msg::Layout(l) => {
                if let Ok((layout, _)) = Layout::from_wire(&l) {
                    if layout.epoch() > worker.layout.epoch() {
                        worker.layout = layout;
                    }
                }
            }
            Msg::Answer { id, answer } => {
                let Some((_, _, keys)) = worker.out.remove(&id) else {
                    return;
                };
                if !matches!(answer, Answer::Applied) {
                    self.send_parts(me, id.0, &keys);
                }
            }
            _ => {}
        }
    }

    /// Server `SERVERS[s]` dies and is replaced (see the module docs).
    fn restart(&mut self, s: usize) {
        let me = SERVERS[s];
        for (&(from, to), q) in self.chans.iter_mut() {
            if to == me || (from == me && to != SCHEDULER) {
                q.clear();
            }
        }
        let wire = self.coord.current();
        let Ok((layout, plan)) = Layout::from_wire(&wire) else {
            return;
        };
        let start = match wire.settled {
            Some(_) => layout,
            None => layout.before(&plan).unwrap_or(layout),
        };
        let server = self.servers.get_mut(&me).expect("a server");
        server.holding = Holding::until_settled(me, Arc::new(start));
        server.early.clear();
        server.kept.clear();
        self.server_adopts(me, &wire);
        if wire.settled.is_some() {
            let server = self.servers.get_mut(&me).expect("a server");
            server.holding.settled(wire.epoch);
        }
        let mut again = Vec::new();
        for (&peer, server) in &self.servers {
            for (_, to, h) in server.kept.iter().filter(|k| k.1 == me) {
                again.push((peer, *to, h.clone()));
            }
        }
        for (&w, worker) in &self.workers {
            for (&id, (to, epoch, keys)) in worker.out.iter().filter(|(_, o)| o.0 == me) {
                let part = Msg::Part {
                    id,
                    keys: keys.clone(),
                    epoch: *epoch,
                };
                again.push((w, *to, part));
            }
        }
        for (from, to, m) in again {
            self.send(from, to, m);
        }
    }

    /// At most one server serves each key (none while its rows move).
    fn check_one_server_per_key(&self) -> Result<(), TestCaseError> {
        for k in all_keys() {
            let serving = self
                .servers
                .values()
                .filter(|s| s.holding.verdict(&[k], None) == Verdict::Serve)
                .count();
            prop_assert!(serving <= 1, "{serving} servers serve key {k}");
        }
        Ok(())
    }

    /// Delivers everything, the oldest message of each busy connection in turn (fairly: a
    /// message waits at most one round), until the job is quiet.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let mut last = None;
        for step in 0.. {
            prop_assert!(step < 200_000, "the job never went quiet");
            let busy = self.busy();
            let Some(&first) = busy.first() else {
                return Ok(());
            };
            let next = busy
                .iter()
                .copied()
                .find(|&c| Some(c) > last)
                .unwrap_or(first);
            last = Some(next);
            self.deliver_on(next, 0)?;
        }
        Ok(())
    }

    fn check_exact(&self) -> Result<(), TestCaseError> {
        for w in self.workers.values() {
            prop_assert!(w.out.is_empty(), "unanswered parts {:?}", w.out);
        }
        prop_assert_eq!(self.coord.moving(), None);
        let layout = self.coord.layout();
        for (&k, &n) in &self.pushed {
            let owner = layout.owner_of(k);
            let server = &self.servers[&owner];
            prop_assert_eq!(server.holding.verdict(&[k], None), Verdict::Serve);
            prop_assert_eq!(
                server.sums.get(&k).copied(),
                Some(n),
                "key {} at {}",
                k,
                owner
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Workers push while servers are drained and added at any moment and every connection's
    /// messages interleave in any order: every push is applied exactly once, by one server.
    #[test]
    fn pushes_are_applied_exactly_once_while_servers_are_added_and_drained(
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        run(Job::new(false), ops)?;
    }

    /// The same with checkpoints, servers also dying and being replaced at any moment.
    #[test]
    fn with_checkpoints_pushes_are_applied_exactly_once_while_servers_die_during_moves(
        ops in proptest::collection::vec(op_with_restarts(), 1..300),
    ) {
        run(Job::new(true), ops)?;
    }
}

fn run(mut job: Job, ops: Vec<Op>) -> Result<(), TestCaseError> {
    for op in ops {
        match op {
            Op::Push(w, mask) => job.push(w, mask),
            Op::Deliver(n) => {
                job.deliver(n)?;
            }
            Op::Resize(add, s) => job.resize(add, s),
            Op::Restart(s) => job.restart(s),
        }
    }
    job.drain()?;
    job.check_exact()
}
