//! The scheduler's IO for a server joining the running job ([`Admission::Joined`](super::Admission::Joined)):
//! every other node learns its address (NODE_JOINED, with the password to reach it), then the
//! new server gets the current key layout and its node table.

use super::super::{Postoffice, SCHEDULER};
use super::Inherited;
use crate::sync::lock;
use crate::wire::{ControlMsg, Message, Meta, Node};

/// On the scheduler: server `node` joined; `table` is the node table with it, `started`
/// whether the start-up barrier completed, `inherited` the barriers completed so far.
pub(super) fn admit_joined(
    po: &Postoffice,
    node: Node,
    table: Vec<Node>,
    (started, inherited): (bool, Inherited),
) {
    lock(&po.node.state).nodes = table.clone();
    let place = crate::wire::place(&node.host, node.port);
    tracing::warn!(
        "{} joined the running job at {place}; it holds no keys until a resize adds it",
        Node::describe(node.id)
    );
    tell_joined(po, &node, &table);
    let control = super::tables::entering_table(po, node.id, &table, (started, inherited), true);
    super::tables::send_entering_table(po, &node, control, "the server joining");
}

/// NODE_JOINED with server `node`'s address to every node of `table` but the scheduler and it,
/// each with the password it presents to `node`.
fn tell_joined(po: &Postoffice, node: &Node, table: &[Node]) {
    for n in table
        .iter()
        .filter(|n| n.id != SCHEDULER && n.id != node.id)
    {
        let reach = super::super::join::reach_for(po, n.id, std::slice::from_ref(node));
        let control = ControlMsg::NodeJoined {
            node: node.clone(),
            reach,
        };
        if let Err(e) = po.send(Message::new(Meta::for_control(n.id, control))) {
            tracing::warn!(
                "cannot tell {} that {} joined: {e}",
                Node::describe(n.id),
                Node::describe(node.id)
            );
        }
    }
}
