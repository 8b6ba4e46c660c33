//! Bounded staleness's IO ([`super::clocks`] is the protocol): a worker's
//! [`Postoffice::clock`], the FLOORs it hears, and the scheduler's book of the workers'
//! clocks.

use super::clocks::{ClockBook, Floor, FloorTo, DONE};
use super::{Postoffice, SCHEDULER};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, Role};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often a waiting worker says its clock again.
const AGAIN: Duration = Duration::from_secs(1);

/// What one [`Postoffice::clock`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clocked {
    /// The worker's clock now (1 after the first call).
    pub clock: u64,
    /// How long it waited for slower workers (zero when it was within the bound).
    pub waited: Duration,
}

/// [`Postoffice::clock`]: advances this worker's clock, tells the scheduler, and waits while
/// the slowest worker is more than `staleness` clocks behind.
pub(super) fn clock(po: &Postoffice, staleness: Option<u64>) -> Result<Clocked> {
    if po.role() != Role::Worker {
        return Err(Error::InvalidArgument(format!(
            "Postoffice::clock on {}: only a worker has a bounded-staleness clock",
            Node::describe(po.my_id())
        )));
    }
    let (clock, waits) = {
        let mut st = lock(&po.node.state);
        let clock = st.clock.advance();
        (clock, !st.clock.may_run(staleness))
    };
    po.metrics.staleness.clock.set(clock as i64);
    tell(po, clock, waits)?;
    let start = Instant::now();
    let deadline = start + po.cfg.timing.timeout;
    let r = loop {
        let said = Instant::now();
        // `None`: time to say the clock again (sent outside the state's lock).
        let r = po.node.wait(|st, now| {
            if st.clock.may_run(staleness) {
                return Some(Some(Ok(())));
            }
            if let Some(e) = po.failures.first() {
                return Some(Some(Err(e)));
            }
            if po.life.stopped.load(Ordering::Acquire) {
                return Some(Some(Err(Error::Stopped)));
            }
            if now >= deadline {
                return Some(Some(Err(straggler(po, &st.clock, staleness))));
            }
            (now >= said + AGAIN).then_some(None)
        });
        match r {
            Some(r) => break r,
            None => {
                if let Err(e) = tell(po, clock, true) {
                    tracing::warn!("cannot tell the scheduler this worker's clock {clock}: {e}");
                }
            }
        }
    };
    let waited = if waits {
        start.elapsed()
    } else {
        Duration::ZERO
    };
    po.metrics
        .staleness
        .clock_wait_us
        .inc_by(waited.as_micros() as u64);
    if let Err(e @ Error::Timeout(_)) = &r {
        crate::waits::timed_out(e);
    }
    r.map(|()| Clocked { clock, waited })
}

/// A wait's timeout, naming the slowest worker heard of.
fn straggler(po: &Postoffice, gate: &super::clocks::Gate, staleness: Option<u64>) -> Error {
    Error::Timeout(format!(
        "{} after {:.0} s (PS_TIMEOUT)",
        gate.straggler_text(staleness.unwrap_or(u64::MAX)),
        po.cfg.timing.timeout.as_secs_f64()
    ))
}

/// CLOCK to the scheduler.
fn tell(po: &Postoffice, clock: u64, waits: bool) -> Result<()> {
    let meta = Meta {
        request: true,
        ..Meta::for_control(SCHEDULER, ControlMsg::Clock { clock, waits })
    };
    po.send(Message::new(meta)).map(|_| ())
}

/// A FLOOR from the scheduler: waiting clocks look again.
pub(super) fn on_floor(po: &Postoffice, floor: u64, slowest: NodeId) {
    lock(&po.node.state)
        .clock
        .on_floor(Floor { floor, slowest });
    po.node.cv.notify_all();
}

/// [`Postoffice::clocks_done`]: from now on this worker's clock is [`DONE`] to the scheduler
/// (a new scheduler too, from its re-registration).
pub(super) fn clocks_done(po: &Postoffice) -> Result<()> {
    if po.role() != Role::Worker {
        return Ok(());
    }
    lock(&po.node.state).clock.finish();
    tell(po, DONE, false)
}

/// This worker's clock again ([`DONE`] once it is done), to a scheduler that took the job
/// over: a CLOCK sent while it re-registered may have been dropped, and a worker not waiting
/// would not say it again.
pub(super) fn say_again(po: &Postoffice) {
    let clock = lock(&po.node.state).clock.told();
    if po.role() == Role::Worker && clock > 0 {
        if let Err(e) = tell(po, clock, false) {
            tracing::warn!("cannot tell the scheduler this worker's clock {clock}: {e}");
        }
    }
}

/// (Scheduler) Worker `from` is at `clock`: FLOOR to every worker when the floor rose, or to
/// `from` when it waits.
pub(super) fn on_clock(po: &Postoffice, from: NodeId, clock: u64, waits: bool) {
    let Some(sched) = &po.scheduler else { return };
    // The book is made from the node table at the first CLOCK (read outside the book's lock).
    let empty = lock(&sched.clocks).is_empty();
    let workers = empty.then(|| {
        po.nodes()
            .into_iter()
            .filter(|n| n.role == Role::Worker)
            .map(|n| n.id)
            .collect::<Vec<_>>()
    });
    let (floor, to) = {
        let mut book = lock(&sched.clocks);
        if let Some(workers) = workers.filter(|_| book.is_empty()) {
            *book = ClockBook::new(workers);
        }
        match book.tick(from, clock, waits) {
            None => return,
            Some((floor, FloorTo::One(w))) => (floor, vec![w]),
            Some((floor, FloorTo::Workers)) => (floor, book.workers()),
        }
    };
    for w in to {
        let meta = Meta::for_control(
            w,
            ControlMsg::Floor {
                floor: floor.floor,
                slowest: floor.slowest,
            },
        );
        if let Err(e) = po.send(Message::new(meta)) {
            tracing::warn!(
                "cannot send the clocks' floor to {}: {e}",
                Node::describe(w)
            );
        }
    }
}
