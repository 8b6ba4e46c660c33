//! Node ids and their arithmetic, in one place (ps-lite `postoffice.h`: `WorkerRankToID`,
//! `ServerRankToID`, `IDtoRank`): the scheduler is 1; server rank r is 8 + 2r; worker rank r is
//! 9 + 2r. Groups use the ids 1 (scheduler), 2 (servers), 4 (workers) and their sums.

use super::meta::{Node, Role};

/// A node id (see the module docs); -1 before the scheduler assigned one.
pub type NodeId = i32;

/// The scheduler's node id.
pub const SCHEDULER: NodeId = 1;

impl Node {
    /// The rank of a server or worker id (`(id - 8) / 2` or `(id - 9) / 2`); 0 for the scheduler.
    pub fn rank_of(id: NodeId) -> usize {
        if id >= 8 {
            ((id - 8) / 2) as usize
        } else {
            0
        }
    }

    /// The temporary id under which a connection to the node `id` is opened beside its usual
    /// one (the scheduler telling a displaced node it was replaced): negative, below -2000.
    pub fn temporary_id(id: NodeId) -> NodeId {
        -2000 - id
    }

    /// The node a temporary id ([`Node::temporary_id`]) stands for; `None` for any other id.
    pub fn of_temporary(tmp: NodeId) -> Option<NodeId> {
        (tmp <= -2000).then(|| -2000 - tmp)
    }

    /// The id of server rank `r`.
    pub fn server_id(rank: usize) -> NodeId {
        8 + 2 * rank as NodeId
    }

    /// The id of worker rank `r`.
    pub fn worker_id(rank: usize) -> NodeId {
        9 + 2 * rank as NodeId
    }

    /// The role an id belongs to; `None` for an id no node has (0, 2–7, negative: groups and
    /// temporary ids).
    pub fn role_of(id: NodeId) -> Option<Role> {
        match id {
            SCHEDULER => Some(Role::Scheduler),
            id if id >= 8 && id % 2 == 0 => Some(Role::Server),
            id if id >= 9 => Some(Role::Worker),
            _ => None,
        }
    }

    /// Whether `a` and `b` are a worker and a server (either way round): the only pairs that
    /// exchange key-value traffic, and so the only pairs the RDMA van gives QPs.
    pub fn is_worker_server_pair(a: NodeId, b: NodeId) -> bool {
        matches!(
            (Node::role_of(a), Node::role_of(b)),
            (Some(Role::Server), Some(Role::Worker)) | (Some(Role::Worker), Some(Role::Server))
        )
    }

    /// Whether `a` and `b` connect to each other: a worker and a server (key-value traffic),
    /// or two servers (the rows of keys moving between them as servers are added and drained,
    /// [`crate::postoffice::ranges`]). Every node also connects to the scheduler.
    pub fn are_peers(a: NodeId, b: NodeId) -> bool {
        Node::is_worker_server_pair(a, b)
            || (a != b
                && Node::role_of(a) == Some(Role::Server)
                && Node::role_of(b) == Some(Role::Server))
    }

    /// A readable name for a node id: "scheduler (id 1)", "server rank 1 (id 10)", "worker rank
    /// 0 (id 9)", "node -1".
    pub fn describe(id: NodeId) -> String {
        match Node::role_of(id) {
            Some(Role::Scheduler) => "scheduler (id 1)".to_string(),
            Some(r) => format!("{r} rank {} (id {id})", Node::rank_of(id)),
            None => format!("node {id}"),
        }
    }
}

/// `host:port` as written in messages, logs and endpoints: an IPv6 address in brackets
/// (`[fd00::1]:9000`; one already in brackets is not bracketed again). `port` may be a number or
/// libzmq's `*`.
pub fn place(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_id_stands_for_its_node_and_no_other_id_does() {
        for id in [SCHEDULER, 8, 9, 10_001] {
            let tmp = Node::temporary_id(id);
            assert!(tmp <= -2000 && Node::role_of(tmp).is_none());
            assert_eq!(Node::of_temporary(tmp), Some(id));
            assert_eq!(Node::of_temporary(id), None);
        }
        assert_eq!(Node::of_temporary(-1), None);
    }

    #[test]
    fn ids_ranks_and_roles_agree() {
        for r in 0..100 {
            let (s, w) = (Node::server_id(r), Node::worker_id(r));
            assert_eq!((Node::rank_of(s), Node::rank_of(w)), (r, r));
            assert_eq!(Node::role_of(s), Some(Role::Server));
            assert_eq!(Node::role_of(w), Some(Role::Worker));
            assert!(Node::is_worker_server_pair(s, w) && Node::is_worker_server_pair(w, s));
            assert!(!Node::is_worker_server_pair(s, Node::server_id(r + 1)));
            assert!(!Node::is_worker_server_pair(w, Node::worker_id(r + 1)));
            assert!(!Node::is_worker_server_pair(SCHEDULER, w));
        }
        assert_eq!(Node::role_of(SCHEDULER), Some(Role::Scheduler));
        for id in [-1000, -1, 0, 2, 4, 7] {
            assert_eq!(Node::role_of(id), None, "id {id}");
        }
        assert_eq!(Node::describe(1), "scheduler (id 1)");
        assert_eq!(Node::describe(10), "server rank 1 (id 10)");
        assert_eq!(Node::describe(9), "worker rank 0 (id 9)");
        assert_eq!(Node::describe(-1), "node -1");
    }
}
