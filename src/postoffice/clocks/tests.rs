//! The clock protocol against a network that reorders and duplicates CLOCK and FLOOR messages
//! and loses FLOORs, with workers of unequal step counts (each says DONE after its last) and a
//! scheduler that may be replaced at any moment (the CLOCKs in flight to it are lost, and each
//! worker re-registers with the clock it told): no worker ever runs more than τ clocks ahead of
//! the slowest still stepping, and every worker reaches its last clock (no deadlock).

use super::*;
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Msg {
    Clock {
        from: usize,
        clock: u64,
        again: bool,
    },
    Floor {
        to: usize,
        floor: Floor,
    },
}

struct Job {
    book: ClockBook,
    gates: Vec<Gate>,
    flight: Vec<Msg>,
    tau: Option<u64>,
    /// Each worker's last clock (its number of steps).
    last: Vec<u64>,
}

fn id(w: usize) -> NodeId {
    Node::worker_id(w)
}

impl Job {
    fn new(tau: Option<u64>, last: Vec<u64>) -> Job {
        Job {
            book: ClockBook::new((0..last.len()).map(id)),
            gates: vec![Gate::default(); last.len()],
            flight: Vec::new(),
            tau,
            last,
        }
    }

    /// Worker `w` runs a step at its clock if its gate lets it, then advances (and after its
    /// last step says DONE). Checks the bound against the real clocks of the workers still
    /// stepping.
    fn step(&mut self, w: usize) -> bool {
        let g = &self.gates[w];
        if g.clock() >= self.last[w] || !g.may_run(self.tau) {
            return false;
        }
        let slowest = self.gates.iter().map(Gate::told).min().unwrap_or(0);
        if let Some(tau) = self.tau {
            assert!(
                slowest + tau >= g.clock(),
                "worker {w} runs at clock {} with the slowest at {slowest}, τ = {tau}",
                g.clock()
            );
        }
        let clock = self.gates[w].advance();
        self.flight.push(Msg::Clock {
            from: w,
            clock,
            again: !self.gates[w].may_run(self.tau),
        });
        if clock == self.last[w] {
            self.gates[w].finish();
            self.flight.push(Msg::Clock {
                from: w,
                clock: DONE,
                again: false,
            });
        }
        true
    }

    /// A new scheduler takes the job over: the CLOCKs in flight to the old one are lost, and
    /// every worker re-registers with the clock it told (FLOORs the old one sent may still
    /// arrive).
    fn takeover(&mut self) {
        self.book = ClockBook::new((0..self.gates.len()).map(id));
        self.flight.retain(|m| matches!(m, Msg::Floor { .. }));
        for (w, g) in self.gates.iter().enumerate() {
            if g.told() > 0 {
                self.flight.push(Msg::Clock {
                    from: w,
                    clock: g.told(),
                    again: false,
                });
            }
        }
    }

    /// Message `i` of those in flight arrives (and stays in flight when `dup`; a FLOOR is lost
    /// instead when `lose`).
    fn deliver(&mut self, i: usize, dup: bool, lose: bool) {
        if self.flight.is_empty() {
            return;
        }
        let i = i % self.flight.len();
        let m = if dup {
            self.flight[i]
        } else {
            self.flight.swap_remove(i)
        };
        match m {
            Msg::Clock { from, clock, again } => match self.book.tick(id(from), clock, again) {
                Some((floor, FloorTo::Workers)) => {
                    self.flight
                        .extend((0..self.gates.len()).map(|to| Msg::Floor { to, floor }));
                }
                Some((floor, FloorTo::One(to))) => {
                    let to = (0..self.gates.len()).find(|&w| id(w) == to);
                    self.flight.push(Msg::Floor {
                        to: to.expect("a worker of the job"),
                        floor,
                    });
                }
                None => {}
            },
            Msg::Floor { .. } if lose && !dup => {}
            Msg::Floor { to, floor } => self.gates[to].on_floor(floor),
        }
    }

    /// Every worker that cannot run says its clock again.
    fn again(&mut self) {
        for (w, g) in self.gates.iter().enumerate() {
            if g.clock() < self.last[w] && !g.may_run(self.tau) {
                self.flight.push(Msg::Clock {
                    from: w,
                    clock: g.clock(),
                    again: true,
                });
            }
        }
    }

    fn done(&self) -> bool {
        self.gates
            .iter()
            .zip(&self.last)
            .all(|(g, &l)| g.clock() >= l)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Step(usize),
    Deliver { i: usize, dup: bool, lose: bool },
    Again,
    Takeover,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..8).prop_map(Op::Step),
        4 => (any::<usize>(), prop::bool::weighted(0.1), prop::bool::weighted(0.1))
            .prop_map(|(i, dup, lose)| Op::Deliver { i, dup, lose }),
        1 => Just(Op::Again),
        1 => Just(Op::Takeover),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_worker_runs_past_the_bound_and_every_worker_finishes(
        tau in prop::option::of(0u64..4),
        last in prop::collection::vec(1u64..12, 1..6),
        ops in prop::collection::vec(op(), 0..300),
    ) {
        let workers = last.len();
        let mut job = Job::new(tau, last);
        for op in ops {
            match op {
                Op::Step(w) => { job.step(w % workers); }
                Op::Deliver { i, dup, lose } => job.deliver(i, dup, lose),
                Op::Again => job.again(),
                Op::Takeover => job.takeover(),
            }
        }
        // Then a fair network: every worker steps while it may, every message arrives, and
        // waiting workers say their clock again; the job must end.
        for _ in 0..10_000 {
            if job.done() {
                break;
            }
            for w in 0..workers {
                while job.step(w) {}
            }
            while !job.flight.is_empty() {
                job.deliver(0, false, false);
            }
            job.again();
        }
        prop_assert!(job.done(), "deadlock: clocks {:?}", job.gates.iter().map(Gate::clock).collect::<Vec<_>>());
    }
}

#[test]
fn the_floor_rises_with_the_slowest_and_names_it() {
    let (a, b) = (id(0), id(1));
    let mut book = ClockBook::new([a, b]);
    assert_eq!(book.tick(a, 1, false), None, "b is still at 0");
    assert_eq!(
        book.tick(b, 1, false),
        Some((
            Floor {
                floor: 1,
                slowest: a
            },
            FloorTo::Workers
        ))
    );
    assert_eq!(book.tick(a, 3, false), None);
    assert_eq!(
        book.tick(b, 1, true),
        Some((
            Floor {
                floor: 1,
                slowest: b
            },
            FloorTo::One(b)
        )),
        "said again: answered, naming b, now the slowest"
    );
    assert_eq!(
        book.tick(b, 0, false),
        None,
        "an older clock changes nothing"
    );
    assert_eq!(book.tick(id(7), 9, true), None, "not a worker of the book");
    assert_eq!(
        book.tick(b, DONE, false),
        Some((
            Floor {
                floor: 3,
                slowest: a
            },
            FloorTo::Workers
        )),
        "b takes no more steps: a alone sets the floor"
    );
}

#[test]
fn a_gate_waits_beyond_its_bound_and_names_the_straggler() {
    let mut g = Gate::default();
    assert!(g.may_run(Some(u64::MAX)), "no overflow at a huge bound");
    assert_eq!(g.advance(), 1);
    assert!(g.may_run(Some(1)));
    assert!(!g.may_run(Some(0)));
    assert!(g.may_run(None));
    g.advance();
    assert!(!g.may_run(Some(1)));
    g.on_floor(Floor {
        floor: 1,
        slowest: id(3),
    });
    assert!(g.may_run(Some(1)));
    g.on_floor(Floor {
        floor: 0,
        slowest: id(2),
    });
    assert_eq!(g.floor(), 1, "an older floor is ignored");
    g.advance();
    assert_eq!(
        g.straggler_text(1),
        "bounded staleness: this worker, at clock 3, waits for every worker to reach clock 2 \
         (staleness 1); worker rank 3 (id 15) is at clock 1"
    );
}

#[test]
fn a_floor_naming_another_slowest_worker_replaces_the_one_heard() {
    let mut g = Gate::default();
    g.advance();
    g.on_floor(Floor {
        floor: 0,
        slowest: id(0),
    });
    g.on_floor(Floor {
        floor: 0,
        slowest: id(3),
    });
    assert_eq!(
        g.straggler_text(0),
        "bounded staleness: this worker, at clock 1, waits for every worker to reach clock 1 \
         (staleness 0); worker rank 3 (id 15) is at clock 0",
        "the scheduler's latest answer names whom it waits for"
    );
    g.finish();
    assert_eq!(g.told(), DONE);
    assert_eq!(g.clock(), 1);
}
