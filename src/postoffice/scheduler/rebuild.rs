//! The IO of a scheduler started in a silent one's place: what the receiving thread does
//! with a re-registration ([`ControlMsg::Rejoin`](crate::wire::ControlMsg::Rejoin)) once the sans-IO
//! [`Scheduler::rejoin`](super::Scheduler::rejoin) has counted it — the first takes the job
//! over (the node table, run id and replacement window become this node's, and the scheduler's
//! own start-up waits end), each is answered with a heartbeat, and the barriers it completes
//! are released.

use super::super::Postoffice;
use super::driver::{answer_heartbeat, on_heartbeat, release};
use super::tables::send_table_to;
use super::Rejoined;
use crate::sync::lock;
use crate::wire::{Meta, Node, Rejoin, Role};
use std::time::Instant;

/// A re-registration `r` arrived (under header `meta`).
pub(super) fn on_rejoin(po: &Postoffice, r: Rejoin, meta: &Meta) {
    let Some(s) = &po.scheduler else { return };
    let from = meta.sender;
    if r.node.id != from {
        tracing::warn!(
            "dropped a re-registration from {} that names {}",
            Node::describe(from),
            Node::describe(r.node.id)
        );
        return;
    }
    let node = r.node.clone();
    let (incarnation, clock) = (r.incarnation, r.clock);
    let layout = r.layout.clone();
    let run_id = po.run_id();
    let rejoined = s.scheduler().rejoin(r, run_id, Instant::now());
    let (adopted, released) = match rejoined {
        Rejoined::Heartbeat => return on_heartbeat(po, meta),
        Rejoined::Refused(why) => {
            tracing::warn!(
                "refused the re-registration of {} at {}: {why}",
                Node::describe(from),
                crate::wire::place(&node.host, node.port)
            );
            return;
        }
        Rejoined::Counted { adopted, released } => (adopted, released),
    };
    if let Some(w) = &layout {
        lock(&s.coordinator).learn(w, Instant::now());
    }
    match adopted {
        Some((table, run_id, started, joined)) => {
            take_over(po, &table, run_id, started);
            for n in &joined {
                send_table_to(po, n, &table);
            }
        }
        None => connect_if_moved(po, &node),
    }
    if clock > 0 {
        // The workers' clocks, as each re-registers: the floor rises once all are back.
        super::super::staleness::on_clock(po, from, clock, false);
    }
    po.metrics.membership.rejoined.inc();
    if incarnation > 0 {
        po.recovery.set_holder(from, incarnation);
    }
    answer_heartbeat(po, meta);
    for o in released {
        release(po, o);
    }
    say_if_all_back(po);
}

/// Says once, on a rebuilt scheduler, when every node of the table is back (re-registered,
/// sent the table again, or replaced).
pub(super) fn say_if_all_back(po: &Postoffice) {
    let Some(took) = po.scheduler.as_ref().and_then(|s| s.scheduler().all_back()) else {
        return;
    };
    let n = po.nodes().len().saturating_sub(1);
    tracing::warn!(
        "all {n} nodes re-registered with this scheduler, {:.2} s after the first",
        took.as_secs_f64()
    );
    // Nodes that missed the silent scheduler's last word on the layout get it.
    super::resize::rebroadcast(po);
}

/// The first re-registration: the job's node `table`, `run_id` and progress (`started`)
/// become this scheduler's; it connects to every node and its own start-up ends (passing
/// the start-up barrier only when the job has not).
fn take_over(po: &Postoffice, table: &[Node], run_id: u64, started: bool) {
    let window = super::super::recovery::window(&po.cfg).map_or(0, |w| w.as_millis() as u64);
    {
        let mut t = po.recovery.takeover();
        t.run_id = run_id;
        t.replace_within = window;
        t.replacement = true;
        t.must_meet = !started;
    }
    for n in &table[1..] {
        if let Err(e) = po.van.connect(n.id, &n.host, n.port) {
            tracing::error!("cannot connect to {}: {e}", Node::describe(n.id));
        }
    }
    let count = |role| table.iter().filter(|n| n.role == role).count();
    tracing::warn!(
        "taking over run {run_id:x} from the scheduler that went silent at this address: \
         {} servers and {} workers re-register",
        count(Role::Server),
        count(Role::Worker)
    );
    {
        let mut st = lock(&po.node.state);
        st.nodes = table.to_vec();
        st.ready = true;
    }
    po.node.cv.notify_all();
}

/// A node re-registered from an address other than the rebuilt table had for it (a
/// replacement the first re-registering node did not know of): the table and the connection
/// follow it.
fn connect_if_moved(po: &Postoffice, node: &Node) {
    let moved = {
        let mut st = lock(&po.node.state);
        match st.nodes.iter_mut().find(|n| n.id == node.id) {
            Some(n) if (n.host.as_str(), n.port) != (node.host.as_str(), node.port) => {
                *n = node.clone();
                true
            }
            _ => false,
        }
    };
    if moved {
        if let Err(e) = po.van.connect(node.id, &node.host, node.port) {
            tracing::error!("cannot connect to {}: {e}", Node::describe(node.id));
        }
    }
}
