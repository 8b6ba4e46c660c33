use super::layout::{Layout, Move, Plan};
use super::migration::{Handoff, Incoming, Outgoing, PushId, RangeState, Verdict};
use crate::postoffice::range::Range;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Every key of `l` has one owner: parts contiguous from 0 to `u64::MAX`, neighbours distinct.
fn check_layout(l: &Layout) -> Result<(), TestCaseError> {
    let p = l.parts();
    prop_assert_eq!(p[0].range.begin, 0);
    prop_assert_eq!(p[p.len() - 1].range.end, u64::MAX);
    for w in p.windows(2) {
        prop_assert_eq!(w[0].range.end, w[1].range.begin);
        prop_assert!(w[0].owner != w[1].owner, "neighbours merged");
    }
    for q in p {
        prop_assert!(q.range.begin < q.range.end);
        prop_assert_eq!(l.owner_of(q.range.begin), q.owner);
        prop_assert_eq!(l.owner_of(q.range.end - 1), q.owner);
    }
    Ok(())
}

/// What `plan` changes: a moved key goes from its move's `from` to its `to`, any other key
/// keeps its owner.
fn check_plan(
    before: &Layout,
    plan: &Plan,
    after: &Layout,
    probes: &[u64],
) -> Result<(), TestCaseError> {
    for &k in probes {
        match plan.moves.iter().find(|m| {
            m.range.begin <= k && (k < m.range.end || (k == u64::MAX && m.range.end == u64::MAX))
        }) {
            Some(m) => {
                prop_assert_eq!(before.owner_of(k), m.from);
                prop_assert_eq!(after.owner_of(k), m.to);
            }
            None => prop_assert_eq!(before.owner_of(k), after.owner_of(k)),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Servers added and drained in any order: every step leaves every key one owner, moves
    /// only what its plan says, and never drains the last server.
    #[test]
    fn adds_and_drains_keep_one_owner_per_key(
        start in 1usize..5,
        changes in proptest::collection::vec((any::<bool>(), 0usize..8), 1..24),
        probes in proptest::collection::vec(any::<u64>(), 64),
    ) {
        let mut probes = probes;
        probes.extend([0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]);
        let first: Vec<i32> = (0..start as i32).map(|r| 8 + 2 * r).collect();
        let mut layout = Layout::even(&first);
        check_layout(&layout)?;
        let mut next_id = 8 + 2 * start as i32;
        for (add, pick) in changes {
            let owners = layout.owners();
            let plan = if add {
                next_id += 2;
                layout.plan_add(next_id).map_err(TestCaseError::fail)?
            } else {
                match layout.plan_drain(owners[pick % owners.len()]) {
                    Ok(p) => p,
                    Err(e) => {
                        prop_assert_eq!(owners.len(), 1, "{}", e);
                        continue;
                    }
                }
            };
            let after = layout.apply(&plan).map_err(TestCaseError::fail)?;
            prop_assert_eq!(after.epoch(), layout.epoch() + 1);
            check_layout(&after)?;
            check_plan(&layout, &plan, &after, &probes)?;
            prop_assert!(layout.apply(&plan).is_ok() && after.apply(&plan).is_err(), "a plan applies once");
            layout = after;
        }
    }
}

#[test]
fn adding_to_two_servers_splits_one_half() {
    let l = Layout::even(&[8, 10]);
    let plan = l.plan_add(12).expect("plan");
    // The last range is the widest: it owns u64::MAX too.
    let begin = u64::MAX / 2 + (u64::MAX - u64::MAX / 2) / 2;
    let range = Range {
        begin,
        end: u64::MAX,
    };
    assert_eq!(
        plan.moves,
        vec![Move {
            range,
            from: 10,
            to: 12
        }]
    );
    let after = l.apply(&plan).expect("apply");
    assert_eq!(after.owners(), vec![8, 10, 12]);
    assert_eq!(after.owner_of(u64::MAX), 12);
    assert_eq!(after.owner_of(begin - 1), 10);
    assert_eq!(l.plan_drain(12).unwrap_err(), "server 12 owns no keys");
    assert_eq!(
        Layout::even(&[8]).plan_drain(8).unwrap_err(),
        "server 8 is the only server: nobody can take its keys"
    );
    let back = after
        .apply(&after.plan_drain(12).expect("drain"))
        .expect("apply");
    assert_eq!(
        back.parts(),
        l.parts(),
        "draining the added server restores the layout"
    );
}

/// The model's rows: a sum per key and the pushes applied.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rows {
    sums: BTreeMap<u64, i64>,
    applied: BTreeSet<PushId>,
}

impl RangeState for Rows {
    fn holds(&self, id: PushId) -> bool {
        self.applied.contains(&id)
    }
}

impl Rows {
    fn apply(&mut self, id: PushId, key: u64, delta: i64) {
        *self.sums.entry(key).or_default() += delta;
        self.applied.insert(id);
    }
}

const OLD: i32 = 8;
const NEW: i32 = 12;

#[derive(Clone, Debug)]
enum Msg {
    Push {
        to: i32,
        id: PushId,
        key: u64,
        delta: i64,
    },
    Answer {
        id: PushId,
        verdict: Verdict,
    },
    Handoff(Handoff<Rows>),
    Ack,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Send(usize),
    Deliver(usize),
    Drop(usize),
    Dup(usize),
    Cut,
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..3).prop_map(Op::Send),
        6 => any::<usize>().prop_map(Op::Deliver),
        1 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Dup),
        1 => Just(Op::Cut),
        2 => Just(Op::Tick),
    ]
}

/// One move under a network that drops, duplicates and reorders: three workers, their pushes,
/// the old owner `OLD` and the new one `NEW`.
struct Sim {
    out: Outgoing<Rows>,
    old_rows: Rows,
    inc: Incoming<Rows>,
    net: Vec<Msg>,
    /// Per worker: its pushes (id, key, delta) and how many it has sent.
    pushes: Vec<Vec<(PushId, u64, i64)>>,
    sent: Vec<usize>,
    /// Pushes not answered yet, and where each worker sends them.
    open: BTreeSet<PushId>,
    owner: HashMap<PushId, i32>,
    /// How many times each push was applied, by either owner.
    applied: HashMap<PushId, u32>,
}

impl Sim {
    fn new(pushes: Vec<Vec<(PushId, u64, i64)>>) -> Sim {
        let movement = Move {
            range: Range {
                begin: 0,
                end: 1 << 20,
            },
            from: OLD,
            to: NEW,
        };
        Sim {
            out: Outgoing::new(movement, 1),
            old_rows: Rows::default(),
            inc: Incoming::new(movement),
            net: Vec::new(),
            sent: vec![0; pushes.len()],
            pushes,
            open: BTreeSet::new(),
            owner: HashMap::new(),
            applied: HashMap::new(),
        }
    }

    fn send(&mut self, w: usize) {
        let Some(&(id, key, delta)) = self.pushes[w].get(self.sent[w]) else {
            return;
        };
        self.sent[w] += 1;
        self.open.insert(id);
        self.owner.insert(id, OLD);
        self.net.push(Msg::Push {
            to: OLD,
            id,
            key,
            delta,
        });
    }

    fn lookup(&self, id: PushId) -> (u64, i64) {
        let w = self
            .pushes
            .iter()
            .flatten()
            .find(|p| p.0 == id)
            .expect("a sent push");
        (w.1, w.2)
    }

    fn deliver(&mut self, m: Msg) {
        match m {
            Msg::Push { to, id, key, delta } => {
                let verdict = if to == OLD {
                    let v = self.out.push(id, &self.old_rows);
                    if v == Verdict::Apply {
                        self.old_rows.apply(id, key, delta);
                    }
                    v
                } else {
                    let v = self.inc.push(id);
                    if v == Verdict::Apply {
                        self.inc.rows().expect("serving").apply(id, key, delta);
                    }
                    v
                };
                if verdict == Verdict::Apply {
                    *self.applied.entry(id).or_default() += 1;
                }
                self.net.push(Msg::Answer { id, verdict });
            }
            Msg::Answer { id, verdict } => match verdict {
                Verdict::Apply | Verdict::Answered => {
                    self.open.remove(&id);
                }
                Verdict::Moved { to, .. } => {
                    if self.open.contains(&id) {
                        self.owner.insert(id, to);
                        let (key, delta) = self.lookup(id);
                        self.net.push(Msg::Push { to, id, key, delta });
                    }
                }
                Verdict::NotYet => {}
            },
            Msg::Handoff(h) => {
                if self.inc.handoff(h) {
                    self.net.push(Msg::Ack);
                }
            }
            Msg::Ack => self.out.acked(),
        }
    }

    fn cut(&mut self) {
        if !self.out.is_cut() {
            let h = self.out.cut(self.old_rows.clone());
            self.net.push(Msg::Handoff(h));
        }
    }

    /// The old owner sends its handoff again; workers send their open pushes again.
    fn tick(&mut self) {
        if let Some(h) = self.out.due() {
            self.net.push(Msg::Handoff(h));
        }
        for &id in &self.open {
            let (key, delta) = self.lookup(id);
            self.net.push(Msg::Push {
                to: self.owner[&id],
                id,
                key,
                delta,
            });
        }
    }

    /// At most one owner changes the range's rows at any step.
    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert!(
            self.out.is_cut() || !self.inc.serving(),
            "both owners serve the range"
        );
        if let Some(handed) = self.out.handed_off() {
            prop_assert_eq!(
                handed,
                &self.old_rows,
                "the old owner changed its rows after the cut"
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Pushes sent before, during and after a range's move, over a network that drops,
    /// duplicates and reorders: once everything is answered, every push was applied exactly
    /// once, and the new owner's rows hold every push's sum.
    #[test]
    fn a_move_applies_every_push_exactly_once(
        deltas in proptest::collection::vec(proptest::collection::vec((0u64..6, -50i64..50), 0..12), 3),
        ops in proptest::collection::vec(op(), 0..160),
    ) {
        let pushes: Vec<Vec<(PushId, u64, i64)>> = deltas
            .iter()
            .enumerate()
            .map(|(w, ps)| ps.iter().enumerate().map(|(i, &(k, d))| (((9 + 2 * w) as i32, i as i64), k, d)).collect())
            .collect();
        let mut sim = Sim::new(pushes.clone());
        for op in ops {
            let n = sim.net.len();
            match op {
                Op::Send(w) => sim.send(w),
                Op::Deliver(i) if n > 0 => { let m = sim.net.remove(i % n); sim.deliver(m) }
                Op::Drop(i) if n > 0 => { sim.net.remove(i % n); }
                Op::Dup(i) if n > 0 => { let m = sim.net[i % n].clone(); sim.net.push(m) }
                Op::Cut => sim.cut(),
                Op::Tick => sim.tick(),
                _ => {}
            }
            sim.check()?;
        }
        // The rest without losses: every push sent, the cut made, then ticks and deliveries
        // until everything is answered and the handoff acknowledged.
        for (w, ps) in pushes.iter().enumerate() {
            while sim.sent[w] < ps.len() { sim.send(w) }
        }
        sim.cut();
        let mut rounds = 0;
        while !(sim.open.is_empty() && sim.out.done()) {
            rounds += 1;
            prop_assert!(rounds < 50, "no progress: {} open, handoff acked {}", sim.open.len(), sim.out.done());
            sim.tick();
            while !sim.net.is_empty() {
                let m = sim.net.remove(0);
                sim.deliver(m);
                sim.check()?;
            }
        }
        let all: Vec<&(PushId, u64, i64)> = pushes.iter().flatten().collect();
        for (id, _, _) in &all {
            prop_assert_eq!(sim.applied.get(id).copied(), Some(1), "push {:?}", id);
        }
        let mut want: BTreeMap<u64, i64> = BTreeMap::new();
        for (_, k, d) in &all {
            *want.entry(*k).or_default() += d;
        }
        let rows = sim.inc.rows().expect("the new owner serves the range");
        prop_assert_eq!(&rows.sums, &want);
        prop_assert_eq!(rows.applied.len(), all.len());
    }
}
