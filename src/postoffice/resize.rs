//! Elastic servers on a server or worker: the servers' key layout this node slices by, the
//! layouts the scheduler broadcasts (handed to this node's key-value servers, which move their
//! rows), the reports that rows arrived, and [`Postoffice::resize`], which asks the scheduler
//! for a resize and waits until it settles. The scheduler's side is
//! `scheduler/resize.rs`; the layout itself is [`super::ranges`].

use super::ranges::layout::Layout;
use super::{CustomerEvent, Postoffice};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::wire::{ControlMsg, KeyLayout, Message, Meta, Node, NodeId, SCHEDULER};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// A resize as it settled: the layout it led to, the bytes of rows moved, and the time from
/// the scheduler's broadcast of the moves to the last new owner's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resized {
    /// The epoch of the layout it led to.
    pub epoch: u64,
    /// Bytes of rows moved (the handlers' exports).
    pub bytes: u64,
    /// From the moves' broadcast to the last new owner's report (scheduler's clock).
    pub took: Duration,
}

/// What the waits of [`Postoffice::resize`] sleep on.
#[derive(Default)]
struct Waits {
    /// The epoch the scheduler started for this node's last resize.
    mine: Option<u64>,
    /// This node's last resize as it settled, and why rows could not move (empty: all did).
    settled: Option<(Resized, Vec<String>)>,
    /// The scheduler's refusal of this node's last resize.
    refused: Option<String>,
    /// Per epoch, how many of this node's key-value servers hold their rows, the bytes, and
    /// why some could not take theirs.
    arrived: HashMap<u64, (usize, u64, Vec<String>)>,
    /// This node's last report of rows arrived (epoch, bytes, failures), sent again to a
    /// scheduler that took the job over before it settled.
    reported: Option<(u64, u64, Vec<String>)>,
}

/// This node's key layout and its resizes.
pub(super) struct Resizing {
    layout: RwLock<Arc<Layout>>,
    waits: Mutex<Waits>,
    cv: Condvar,
    /// One resize asked at a time from this node.
    asking: Mutex<()>,
    /// The last epoch this node heard settle (epoch 0 is settled from the start).
    settled: std::sync::atomic::AtomicU64,
    /// The current layout as the scheduler sent it, with the moves that led to it (`None`
    /// at epoch 0).
    wire: RwLock<Option<Arc<KeyLayout>>>,
}

impl Resizing {
    /// Epoch 0: `servers` servers with even shares (ps-lite's `GetServerKeyRanges`).
    pub(super) fn new(servers: usize) -> Resizing {
        Resizing {
            layout: RwLock::new(Arc::new(Layout::start(servers))),
            waits: Mutex::new(Waits::default()),
            cv: Condvar::new(),
            asking: Mutex::new(()),
            settled: std::sync::atomic::AtomicU64::new(0),
            wire: RwLock::new(None),
        }
    }

    /// Whether every move of the current layout is done, as this node heard (the scheduler's
    /// settled broadcast).
    pub(super) fn settled(&self) -> bool {
        self.layout().epoch() <= self.settled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The current layout.
    pub(super) fn layout(&self) -> Arc<Layout> {
        self.layout
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The layout this node holds as the scheduler sent it (with its moves; `None` at epoch 0),
/// and the last epoch it heard settle: what a key-value server that may have missed a
/// broadcast (created while it went out) catches up with.
pub(crate) fn layout_wire(po: &Postoffice) -> (Option<Arc<KeyLayout>>, u64) {
    let r = &po.node.resizing;
    let wire = r.wire.read().unwrap_or_else(|p| p.into_inner()).clone();
    (wire, r.settled.load(std::sync::atomic::Ordering::Acquire))
}

/// How many key-value servers this node runs (one per application and value type).
pub(crate) fn key_value_servers(po: &Postoffice) -> usize {
    lock(&po.routes).servers()
}

/// The layout this node holds as the scheduler sent it (with the moves that led to it,
/// settled or not), for a re-registration; `None` at epoch 0.
pub(super) fn held_wire(po: &Postoffice) -> Option<KeyLayout> {
    let r = &po.node.resizing;
    let mut wire = (*r.wire.read().unwrap_or_else(|p| p.into_inner()).clone()?).clone();
    if r.settled() && wire.settled.is_none() {
        wire.settled = Some((0, 0));
    }
    Some(wire)
}

/// After re-registering with a scheduler that took the job over: this node's last report
/// of rows arrived goes again while its layout has not settled (the silent scheduler may have
/// had it alone).
pub(super) fn report_again(po: &Postoffice) {
    let r = &po.node.resizing;
    if r.settled() {
        return;
    }
    let last = lock(&r.waits).reported.clone();
    if let Some((epoch, bytes, failed)) = last.filter(|l| l.0 == r.layout().epoch()) {
        report_arrived(po, epoch, bytes, failed);
    }
}

/// The current layout with its moves while they are not settled (as this node heard): a
/// key-value server created now starts from the layout before it and adopts this one, so that
/// it exports or awaits the rows that move (a replacement server restoring its checkpoint
/// during a move). `None` once settled.
pub(crate) fn unsettled_layout(po: &Postoffice) -> Option<Arc<KeyLayout>> {
    let r = &po.node.resizing;
    let wire = r.wire.read().unwrap_or_else(|p| p.into_inner()).clone()?;
    (!r.settled() && wire.epoch == r.layout().epoch()).then_some(wire)
}

/// A [`ControlMsg::Layout`] from the scheduler: a refusal of this node's resize (`Meta::error`),
/// a new layout (adopted, and handed to this node's key-value servers, which move their rows),
/// or the current one settled.
pub(super) fn on_layout(po: &Postoffice, meta: &Meta, wire: KeyLayout) {
    let r = &po.node.resizing;
    if let Some(why) = &meta.error {
        lock(&r.waits).refused = Some(why.clone());
        r.cv.notify_all();
        return;
    }
    let (layout, _) = match Layout::from_wire(&wire) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("dropped a key layout from the scheduler: {e}");
            return;
        }
    };
    let newer = {
        let mut held = r.layout.write().unwrap_or_else(|p| p.into_inner());
        // Epoch 0 with other parts: a node that joined the running job, whose epoch 0 was its
        // guess from DMLC_NUM_SERVER, gets the scheduler's.
        let newer = layout.epoch() > held.epoch()
            || (layout.epoch() == 0 && held.epoch() == 0 && layout.parts() != held.parts());
        if newer {
            *held = Arc::new(layout);
            *r.wire.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(wire.clone()));
        }
        newer
    };
    if wire.asked_by == po.my_id() && wire.settled.is_none() {
        lock(&r.waits).mine = Some(wire.epoch);
    }
    if newer {
        adopted(po, &wire);
    }
    if wire.settled.is_some() && wire.epoch == r.layout().epoch() {
        r.settled
            .fetch_max(wire.epoch, std::sync::atomic::Ordering::AcqRel);
        *r.wire.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(wire.clone()));
    }
    // The key-value servers adopt a new layout, and learn when it settled.
    if po.role() == crate::wire::Role::Server && (newer || wire.settled.is_some()) {
        let wire = Arc::new(wire.clone());
        lock(&po.routes).broadcast(|| CustomerEvent::Layout(wire.clone()));
    }
    on_settled(po, &wire);
}

/// This node adopted layout `wire`: logged (a membership change: on every node at the
/// default level, as losses and re-registrations are), counted; a running server without
/// key-value servers reports at once the rows it takes (none). A node that has no table yet
/// (a replacement or a joining server gets the layout first) or that replaces a lost one
/// creates its key-value servers later, and they count what they take.
fn adopted(po: &Postoffice, wire: &KeyLayout) {
    tracing::warn!("key layout {}: {}", wire.epoch, describe(wire));
    po.metrics().layout_epoch(wire.epoch);
    let takes = wire.moves.iter().any(|m| m.to == po.my_id());
    let running = lock(&po.node.state).ready && !po.is_replacement();
    if po.role() == crate::wire::Role::Server && takes && running && lock(&po.routes).servers() == 0
    {
        report_arrived(po, wire.epoch, 0, Vec::new());
    }
}

/// The scheduler's word that layout `wire` settled (nothing when it did not): logged, and the
/// resize this node asked for returns.
fn on_settled(po: &Postoffice, wire: &KeyLayout) {
    let Some((bytes, micros)) = wire.settled else {
        return;
    };
    tracing::info!(
        "key layout {} settled: {bytes} bytes of rows moved in {:.1} ms",
        wire.epoch,
        micros as f64 / 1e3
    );
    if wire.asked_by == po.my_id() {
        let r = &po.node.resizing;
        let resized = Resized {
            epoch: wire.epoch,
            bytes,
            took: Duration::from_micros(micros),
        };
        lock(&r.waits).settled = Some((resized, wire.failed.clone()));
        r.cv.notify_all();
    }
}

/// What a layout moves, for the log: "keys [a, b) server 2 → server 0; …" ("no keys move":
/// the layout as a node learning it late is sent it).
fn describe(wire: &KeyLayout) -> String {
    if wire.moves.is_empty() {
        return "no keys move".into();
    }
    wire.moves
        .iter()
        .map(|m| {
            format!(
                "keys [{}, {}) {} → {}",
                m.begin,
                m.end,
                Node::describe(m.from),
                Node::describe(m.to)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One key-value server of this node holds the rows moved to it for layout `epoch` (`bytes`
/// of them; `failed`: why it could not take them); once as many did as this node runs, and at
/// least `of` (the old owner's key-value servers, each of which hands its rows over: a
/// replacement's are still being created), the scheduler is told. (A server receives one
/// range per layout: each server of the node calls this once.)
pub(crate) fn range_arrived(
    po: &Postoffice,
    (epoch, of): (u64, u32),
    bytes: u64,
    failed: Option<String>,
) {
    let all = lock(&po.routes).servers().max(of as usize);
    let done = {
        let mut w = lock(&po.node.resizing.waits);
        let e = w.arrived.entry(epoch).or_insert((0, 0, Vec::new()));
        e.0 += 1;
        e.1 += bytes;
        e.2.extend(failed);
        if e.0 >= all {
            w.arrived.remove(&epoch).map(|(_, b, f)| (b, f))
        } else {
            None
        }
    };
    if let Some((bytes, failed)) = done {
        report_arrived(po, epoch, bytes, failed);
    }
}

fn report_arrived(po: &Postoffice, epoch: u64, bytes: u64, failed: Vec<String>) {
    lock(&po.node.resizing.waits).reported = Some((epoch, bytes, failed.clone()));
    tracing::info!("holds the rows moved here for key layout {epoch} ({bytes} bytes)");
    let arrived = ControlMsg::RangesArrived {
        epoch,
        bytes,
        failed,
    };
    let msg = Message::new(Meta {
        request: true,
        ..Meta::for_control(SCHEDULER, arrived)
    });
    if let Err(e) = po.send(msg) {
        tracing::warn!("cannot tell the scheduler that rows arrived: {e}");
    }
}

/// [`Postoffice::resize`]'s work.
pub(super) fn resize(po: &Postoffice, server: NodeId, add: bool) -> Result<Resized> {
    let r = &po.node.resizing;
    let _one = lock(&r.asking);
    {
        let mut w = lock(&r.waits);
        (w.refused, w.mine, w.settled) = (None, None, None);
    }
    let msg = Message::new(Meta {
        request: true,
        ..Meta::for_control(SCHEDULER, ControlMsg::Resize { server, add })
    });
    po.send(msg)?;
    let timeout = po.config().timing.timeout;
    let deadline = Instant::now() + timeout;
    let mut w = lock(&r.waits);
    loop {
        if let Some(why) = w.refused.take() {
            return Err(Error::InvalidArgument(why));
        }
        if let Some((s, failed)) = w.settled.as_ref().filter(|(s, _)| Some(s.epoch) == w.mine) {
            if failed.is_empty() {
                return Ok(s.clone());
            }
            return Err(Error::Remote {
                node: Node::describe(SCHEDULER),
                message: format!(
                    "key layout {} settled, but rows did not move: {}",
                    s.epoch,
                    failed.join("; ")
                ),
            });
        }
        let now = Instant::now();
        if now >= deadline || po.life.stopped.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Timeout(format!(
                "{} {} did not settle within {:.0} s (PS_TIMEOUT)",
                if add { "adding" } else { "draining" },
                Node::describe(server),
                timeout.as_secs_f64()
            )));
        }
        w = crate::sync::wait_timeout(&r.cv, w, (deadline - now).min(super::node::TICK));
    }
}
