//! Rank and id assignment when every node has registered: a proven id keeps its rank, the
//! requested ranks are honoured when they are a permutation of those left, else registration
//! order.

use crate::wire::{Node, NodeId, Role};

/// The id of the server or worker of `rank`.
pub(super) fn id_of(role: Role, rank: usize) -> NodeId {
    match role {
        Role::Server => Node::server_id(rank),
        _ => Node::worker_id(rank),
    }
}

/// Ranks for the nodes of one role, in registration order. A node proven as an id (`id >= 0`,
/// distinct ranks below `n`: [`Scheduler::add_node`](super::Scheduler::add_node) refuses the rest) keeps that id's rank;
/// the others get the requested ranks when these are a permutation of the ranks left, else
/// the ranks left in order.
pub fn assign_ranks(nodes: &[&Node]) -> Vec<usize> {
    let n = nodes.len();
    let fixed: Vec<Option<usize>> = nodes
        .iter()
        .map(|x| (x.id >= 0).then(|| Node::rank_of(x.id)).filter(|&r| r < n))
        .collect();
    let mut free = vec![true; n];
    for &r in fixed.iter().flatten() {
        free[r] = false;
    }
    let left: Vec<usize> = (0..n).filter(|&r| free[r]).collect();
    let rest = nodes.iter().zip(&fixed).filter(|(_, f)| f.is_none());
    let asked: Vec<usize> = rest
        .clone()
        .filter_map(|(x, _)| x.requested_rank)
        .map(|r| r as usize)
        .collect();
    let mut sorted = asked.clone();
    sorted.sort_unstable();
    let order = if asked.len() == rest.count() && sorted == left {
        asked
    } else {
        if !asked.is_empty() {
            tracing::warn!(
                "requested ranks {asked:?} are not a permutation of the ranks left {left:?}; \
                 using registration order"
            );
        }
        left
    };
    let mut order = order.into_iter();
    fixed
        .iter()
        .map(|f| f.or_else(|| order.next()).unwrap_or(0))
        .collect()
}
