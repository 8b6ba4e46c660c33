//! The scheduler's IO for elastic servers: a node asks for a resize, the scheduler broadcasts
//! the layout and its moves to every server and worker, and once every new owner reported its
//! rows, the settled layout with the bytes moved and the time it took. One resize at a time;
//! the sans-IO [`Coordinator`] decides.

use super::super::ranges::coordinator::Coordinator;
use super::super::ranges::layout::Layout;
use super::super::{Postoffice, SCHEDULER};
use crate::sync::lock;
use crate::wire::{ControlMsg, KeyLayout, Message, Meta, Node, NodeId, Role};
use std::sync::Mutex;
use std::time::Instant;

/// The coordinator of a scheduler with `servers` servers.
pub(super) fn coordinator(servers: usize) -> Mutex<Coordinator> {
    Mutex::new(Coordinator::new(Layout::start(servers)))
}

/// The current layout as a node learning it now is sent it (a server joining the running
/// job, a replacement): [`Coordinator::current`].
pub(super) fn current(po: &Postoffice) -> KeyLayout {
    match &po.scheduler {
        Some(sched) => lock(&sched.coordinator).current(),
        None => KeyLayout::default(),
    }
}

/// Node `from` asks to give server `server` keys (`add`) or drain it.
pub(super) fn on_resize(po: &Postoffice, from: NodeId, server: NodeId, add: bool) {
    let Some(sched) = &po.scheduler else { return };
    let refusal = if sched.scheduler().taking_over() {
        Some(
            "the scheduler is taking the job over (not every node has re-registered with it); \
             ask again once they have"
                .to_string(),
        )
    } else if Node::role_of(server) != Some(Role::Server)
        || Node::rank_of(server) >= po.num_servers()
    {
        Some(format!(
            "{} is not a server of this cluster (its {} servers have ids {} to {})",
            Node::describe(server),
            po.num_servers(),
            Node::server_id(0),
            Node::server_id(po.num_servers().saturating_sub(1))
        ))
    } else {
        None
    };
    let started = match refusal {
        Some(why) => Err(why),
        None => lock(&sched.coordinator).resize((server, add), from, Instant::now()),
    };
    match started {
        Ok(layout) => {
            tracing::warn!(
                "{} {} asked by {}: key layout {}",
                if add { "adding" } else { "draining" },
                Node::describe(server),
                Node::describe(from),
                layout.epoch
            );
            broadcast(po, &layout);
        }
        Err(why) => {
            tracing::warn!(
                "refused to {} {} for {}: {why}",
                if add { "add" } else { "drain" },
                Node::describe(server),
                Node::describe(from)
            );
            let meta = Meta {
                error: Some(why),
                ..Meta::for_control(from, ControlMsg::Layout(KeyLayout::default()))
            };
            if let Err(e) = po.send(Message::new(meta)) {
                tracing::warn!(
                    "cannot tell {} its resize was refused: {e}",
                    Node::describe(from)
                );
            }
        }
    }
}

/// Server `from` holds the rows moved to it for layout `epoch` (`failed`: why some did not
/// move).
pub(super) fn on_arrived(
    po: &Postoffice,
    (from, epoch): (NodeId, u64),
    (bytes, failed): (u64, Vec<String>),
) {
    let Some(sched) = &po.scheduler else { return };
    let settled = lock(&sched.coordinator).arrived((from, epoch), (bytes, failed), Instant::now());
    if let Some(layout) = settled {
        if let Some((bytes, micros)) = layout.settled {
            tracing::warn!(
                "key layout {} settled: {bytes} bytes of rows moved in {:.1} ms",
                layout.epoch,
                micros as f64 / 1e3
            );
        }
        for why in &layout.failed {
            tracing::error!("key layout {}: {why}", layout.epoch);
        }
        broadcast(po, &layout);
    }
}

/// Sends the current layout ([`Coordinator::current`]) to every server and worker.
pub(super) fn rebroadcast(po: &Postoffice) {
    let layout = current(po);
    if layout.epoch > 0 {
        broadcast(po, &layout);
    }
}

/// Sends `layout` to every server and worker.
fn broadcast(po: &Postoffice, layout: &KeyLayout) {
    for node in po.nodes() {
        if node.id == SCHEDULER {
            continue;
        }
        let msg = Message::new(Meta::for_control(
            node.id,
            ControlMsg::Layout(layout.clone()),
        ));
        if let Err(e) = po.send(msg) {
            tracing::warn!(
                "cannot send key layout {} to {}: {e}",
                layout.epoch,
                Node::describe(node.id)
            );
        }
    }
}
