//! The node table going out from the scheduler: to every node once all registered, to one
//! node again (one that never got the table of a scheduler this one replaced), to a node
//! taking a place in the running job (a replacement, or a server joining) after the key
//! layout, and the refusals (an empty table with the reason).

use super::super::Postoffice;
use super::Inherited;
use crate::sync::lock;
use crate::wire::{ControlMsg, Message, Meta, Node, NodeId, NodeTable, Takeover};

/// Every node registered: the scheduler is ready, and every node gets the table.
pub(super) fn send_table(po: &Postoffice, table: Vec<Node>) {
    let window = super::super::recovery::window(&po.cfg).map_or(0, |w| w.as_millis() as u64);
    po.recovery.takeover().replace_within = window;
    {
        let mut st = lock(&po.node.state);
        st.nodes = table.clone();
        st.ready = true;
    }
    po.node.cv.notify_all();
    for n in &table[1..] {
        send_table_to(po, n, &table);
    }
    let at: Vec<String> = table[1..]
        .iter()
        .map(|n| {
            format!(
                "{} at {}",
                Node::describe(n.id),
                crate::wire::place(&n.host, n.port)
            )
        })
        .collect();
    tracing::info!(
        "all {} nodes registered: {}",
        table.len() - 1,
        at.join(", ")
    );
}

/// Connects to node `n` and sends it the node `table` (not marked as a replacement's).
pub(super) fn send_table_to(po: &Postoffice, n: &Node, table: &[Node]) {
    let (window, run_id) = {
        let t = po.recovery.takeover();
        (t.replace_within, t.run_id)
    };
    let sent = po.van.connect(n.id, &n.host, n.port).and_then(|_| {
        let control = ControlMsg::NodeTable(NodeTable {
            nodes: table.to_vec(),
            replace_within_ms: window,
            run_id,
            reach: super::super::join::reach_for(po, n.id, table),
            replacement: None,
        });
        po.send(Message::new(Meta::for_control(n.id, control)))
    });
    if let Err(e) = sent {
        tracing::error!(
            "cannot send the node table to {}: {e}",
            Node::describe(n.id)
        );
    }
}

/// Tells nodes that are not (or no longer) admitted why, over the connection each one
/// registered on: the scheduler never connects to an address a refused node named (issue
/// 14).
pub(in crate::postoffice) fn refuse_all(po: &Postoffice, nodes: &[Node], why: &str) {
    for n in nodes {
        let control = ControlMsg::NodeTable(NodeTable::default());
        let mut meta = Meta {
            error: Some(why.to_string()),
            ..Meta::for_control(-1, control)
        };
        meta.sender = po.my_id();
        if let Err(e) = po.van.answer_joiner(&n.host, n.port, Message::new(meta)) {
            tracing::warn!("cannot tell {}:{} it was refused: {e}", n.host, n.port);
        }
    }
}

/// The node table for node `id` taking a place in the running job: `table`, the scheduler's
/// replacement window and run id, the passwords it presents to its peers, and what it
/// inherits (`started`: the start-up barrier completed; `joined`: a new server, not a
/// replacement).
pub(super) fn entering_table(
    po: &Postoffice,
    id: NodeId,
    table: &[Node],
    (started, inherited): (bool, Inherited),
    joined: bool,
) -> NodeTable {
    let (window, run_id) = {
        let t = po.recovery.takeover();
        (t.replace_within, t.run_id)
    };
    NodeTable {
        nodes: table.to_vec(),
        replace_within_ms: window,
        run_id,
        reach: super::super::join::reach_for(po, id, table),
        replacement: Some(Takeover {
            start_open: !started,
            barriers_done: inherited.barriers,
            incarnation: inherited.incarnation,
            joined,
        }),
    }
}

/// Connects to `node`, which takes a place in the running job (`who`: what it is, for the
/// error), and sends it the current key layout (with its moves while they are not settled: a
/// replacement server exports or awaits their rows), then its node `table`: its key-value
/// servers, created once the table came, start from the layout.
pub(super) fn send_entering_table(po: &Postoffice, node: &Node, table: NodeTable, who: &str) {
    let control = ControlMsg::NodeTable(table);
    let layout = ControlMsg::Layout(super::resize::current(po));
    let to_new = po
        .van
        .connect(node.id, &node.host, node.port)
        .and_then(|_| po.send(Message::new(Meta::for_control(node.id, layout))))
        .and_then(|_| po.send(Message::new(Meta::for_control(node.id, control))));
    if let Err(e) = to_new {
        tracing::error!(
            "cannot send the node table to {who} at {}: {e}",
            crate::wire::place(&node.host, node.port)
        );
    }
}
