//! Cluster membership and node identities: only nodes that hold the cluster's secret may talk
//! to it, and a node holding only its own key can speak as no other.
//!
//! With a token (`PS_AUTH_TOKEN` or `PS_AUTH_TOKEN_FILE`; `pslite-launch` draws a fresh one per
//! run and gives the scheduler the token, every other node only its own key,
//! `PS_AUTH_NODE_KEY`), every ZMQ connection between nodes authenticates with ZMQ's PLAIN
//! mechanism (RFC 24) before libzmq hands the node a single message from it:
//! - the connecting side (a DEALER) sends a user name naming the identity it claims — `join`
//!   before the scheduler gave it an id (with the token only), `node:ID` after, or from the
//!   start with a key — and as password an HMAC bound to that identity and to the node it
//!   connects to ([`proof`]): neither the token nor a key is ever on the wire;
//! - the listening side's ZAP handler ([`zap`], ZeroMQ RFC 27) checks the proof and answers
//!   with the identity as the connection's `User-Id`, which libzmq attaches to every message
//!   of that connection; a wrong proof (another token, another node's key) closes the
//!   connection and is logged, rate-limited ([`limit`]), with the peer's address (a client
//!   with no credential at all fails the mechanism's handshake before the ZAP handler is
//!   asked, and is not logged);
//! - the ZMQ van then takes a message's sender from its connection, never from its header: a
//!   message whose header names another sender than its connection proved is dropped; a
//!   `join` connection may only register (ADD_NODE), and a `node:ID` connection may register
//!   only as the server or worker whose rank gives that id; the van marks such a registration
//!   with the id, and the scheduler gives it that id or refuses it. A node that got its id as a joiner
//!   connects to the scheduler again as `node:ID`. Commands only the scheduler gives are
//!   obeyed only from the scheduler (`postoffice/control.rs`).
//!
//! The RDMA van bootstraps its QPs over these connections, so only members learn QPNs, GIDs
//! and rkeys; a message from an RDMA ring is accepted only with its QP's peer as sender.
//!
//! What this protects, and what not: *membership* (a stranger cannot join, send commands or
//! data, or learn the cluster's addresses and keys) against anyone who can reach the ports
//! but not read or alter the traffic between members; and, where members hold node keys,
//! *identity*: a hostile member cannot speak as the scheduler or as another member (take a
//! server's place, send TERMINATE or NODE_REPLACED, push as another worker) — as long as it
//! cannot read the scheduler's memory or environment (another host, or another user). A member that
//! holds the token (nodes started by hand, or by `pslite-launch task`, share it) can prove any
//! identity. It does not encrypt or sign the traffic after the handshake, so an attacker on the
//! path between two members can read it, inject into a connection, and replay a sniffed
//! credential (it is bound to the two nodes, not to the connection). For that, run the cluster
//! on a network only it uses, or under IPsec/WireGuard; CURVE would need a libzmq built with
//! libsodium, which the `zmq-sys` crate's bundled build is not.

pub mod limit;
pub mod proof;
pub mod zap;

pub use proof::{Identity, NodeKey, Refusal, Secret, Token, MIN_TOKEN_BYTES, ZAP_DOMAIN};

use crate::wire::{Command, Meta, Node, NodeId, Role};

/// Whether a message with header `meta`, received over a connection that proved `who`, may
/// be acted on; otherwise why not. A node's messages must name it as their sender; a joiner
/// (no id yet) may only register (an ADD_NODE request, sender -1); a node that proved its id
/// with its key may register (sender -1, never its id) only as the server or worker whose rank
/// gives that id.
/// `who` is `None` when the connection proved nothing.
///
/// # Errors
/// The reason, for the warning that drops the message.
pub fn admit(who: Option<Identity>, meta: &Meta) -> Result<(), String> {
    let what = || match meta.command() {
        Some(c) => format!(
            "a {c:?} {}",
            if meta.request { "request" } else { "answer" }
        ),
        None => "a data message".to_string(),
    };
    match who {
        None => Err(format!(
            "{} over a connection that did not authenticate",
            what()
        )),
        Some(Identity::Joiner)
            if meta.command() == Some(Command::AddNode) && meta.request && meta.sender == -1 =>
        {
            Ok(())
        }
        Some(Identity::Joiner) => Err(format!(
            "{} from a node that has not joined (only ADD_NODE is accepted before)",
            what()
        )),
        Some(Identity::Node(id))
            if meta.command() == Some(Command::AddNode) && meta.request && meta.sender != -1 =>
        {
            Err(format!(
                "a registration that names a sender ({}) over a connection that proved {} (a \
                 registration names none)",
                Node::describe(meta.sender),
                Node::describe(id)
            ))
        }
        Some(Identity::Node(id)) if meta.command() == Some(Command::AddNode) && meta.request => {
            let node = meta.control.as_ref().and_then(|c| c.registering());
            match node.and_then(registered_id) {
                Some(asked) if asked == id => Ok(()),
                Some(asked) => Err(format!(
                    "a registration as {} over a connection that proved {}",
                    Node::describe(asked),
                    Node::describe(id)
                )),
                None => Err(format!(
                    "a registration without a rank over a connection that proved {} (a node \
                     holding a key registers with the rank its key is of, PSLITE_RANK)",
                    Node::describe(id)
                )),
            }
        }
        Some(Identity::Node(id)) if meta.sender == id => Ok(()),
        Some(Identity::Node(id)) => Err(format!(
            "{} from {} that claims to come from {}",
            what(),
            crate::wire::Node::describe(id),
            crate::wire::Node::describe(meta.sender)
        )),
    }
}

/// The id a registration asks for: its role's id of its requested rank; `None` without a
/// rank, or for the scheduler's role.
pub fn registered_id(n: &Node) -> Option<NodeId> {
    let rank = n.requested_rank? as usize;
    match n.role {
        Role::Server => Some(Node::server_id(rank)),
        Role::Worker => Some(Node::worker_id(rank)),
        Role::Scheduler => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ControlMsg;

    #[test]
    fn a_message_is_admitted_only_from_the_node_its_connection_proved() {
        let data = Meta {
            sender: 9,
            ..Meta::default()
        };
        assert_eq!(admit(Some(Identity::Node(9)), &data), Ok(()));
        let e = admit(Some(Identity::Node(11)), &data).expect_err("spoofed");
        assert!(
            e.contains("a data message from") && e.contains("claims to come from"),
            "{e}"
        );
        let add = Meta {
            request: true,
            ..Meta::for_control(
                1,
                ControlMsg::AddNode {
                    node: Default::default(),
                },
            )
        };
        let add = Meta { sender: -1, ..add };
        assert_eq!(admit(Some(Identity::Joiner), &add), Ok(()));
        let posing = Meta {
            sender: 1,
            ..add.clone()
        };
        assert!(admit(Some(Identity::Joiner), &posing).is_err());
        let terminate = Meta::for_control(1, ControlMsg::Terminate);
        let e = admit(Some(Identity::Joiner), &terminate).expect_err("joiner");
        assert!(
            e.contains("a Terminate answer from a node that has not joined"),
            "{e}"
        );
        let e = admit(None, &data).expect_err("unauthenticated");
        assert!(e.contains("did not authenticate"), "{e}");
    }

    #[test]
    fn a_node_proven_by_its_key_registers_only_as_the_rank_its_id_is_of() {
        let registration = |role, rank| Meta {
            sender: -1,
            request: true,
            ..Meta::for_control(
                1,
                ControlMsg::AddNode {
                    node: Node {
                        role,
                        id: -1,
                        host: "127.0.0.1".into(),
                        port: 7,
                        requested_rank: rank,
                    },
                },
            )
        };
        let w0 = Some(Identity::Node(9));
        assert_eq!(admit(w0, &registration(Role::Worker, Some(0))), Ok(()));
        let e = admit(w0, &registration(Role::Worker, Some(1))).expect_err("worker 1");
        assert!(
            e.contains(
                "a registration as worker rank 1 (id 11) over a connection that proved worker \
                 rank 0 (id 9)"
            ),
            "{e}"
        );
        let e = admit(w0, &registration(Role::Server, Some(0))).expect_err("server 0");
        assert!(e.contains("as server rank 0 (id 8)"), "{e}");
        let e = admit(w0, &registration(Role::Worker, None)).expect_err("no rank");
        assert!(e.contains("a registration without a rank"), "{e}");
        // Naming itself as the sender does not skip the check.
        let named = Meta {
            sender: 9,
            ..registration(Role::Server, Some(0))
        };
        let e = admit(w0, &named).expect_err("a sender");
        assert!(
            e.contains("a registration that names a sender (worker rank 0 (id 9))"),
            "{e}"
        );
    }
}
