//! Cluster membership: only nodes that know the cluster's secret may talk to it (issue 14).
//!
//! With a token (`PS_AUTH_TOKEN` or `PS_AUTH_TOKEN_FILE`; `pslite-launch` draws a fresh one per
//! run), every ZMQ connection between nodes authenticates with ZMQ's PLAIN mechanism (RFC 24)
//! before libzmq hands the node a single message from it:
//! - the connecting side (a DEALER) sends a user name naming the identity it claims — `join`
//!   before the scheduler gave it an id, `node:ID` after — and as password an HMAC-SHA256 of
//!   that user name under the token ([`proof`]): the token itself is never on the wire;
//! - the listening side's ZAP handler ([`zap`], ZeroMQ RFC 27) checks the proof and answers
//!   with the identity as the connection's `User-Id`, which libzmq attaches to every message
//!   of that connection; a wrong proof (another token) closes the connection and is logged,
//!   rate-limited ([`limit`]), with the peer's address (a client with no credential at all
//!   fails the mechanism's handshake before the ZAP handler is asked, and is not logged);
//! - the ZMQ van then takes a message's sender from its connection, never from its header: a
//!   message whose header names another sender than its connection proved is dropped, and a
//!   `join` connection may only register (ADD_NODE). A node that got its id connects to the
//!   scheduler again as `node:ID`.
//!
//! The RDMA van bootstraps its QPs over these connections, so only members learn QPNs, GIDs
//! and rkeys; a message from an RDMA ring is accepted only with its QP's peer as sender.
//!
//! What this protects, and what not: *membership* (a stranger cannot join, send commands or
//! data, or learn the cluster's addresses and keys) against anyone who can reach the ports
//! but not read or alter the traffic between members. It does not encrypt or sign the
//! traffic after the handshake, so an attacker on the path between two members can read it
//! and inject into a connection, and can replay a sniffed credential (it is bound to the
//! identity, not to the connection). For that, run the cluster on a network only it uses, or
//! under IPsec/WireGuard; CURVE would need a libzmq built with libsodium, which the `zmq-sys`
//! crate's bundled build is not. Every member holds the same token, so a hostile member can
//! prove any identity, the scheduler's included: the checks above keep members from speaking
//! for each other by mistake, not by malice.

pub mod limit;
pub mod proof;
pub mod zap;

pub use proof::{Identity, Refusal, Token, MIN_TOKEN_BYTES, ZAP_DOMAIN};

use crate::wire::{Command, Meta};

/// Whether a message with header `meta`, received over a connection that proved `who`, may
/// be acted on; otherwise why not. A node's messages must name it as their sender; a joiner
/// (no id yet) may only register (an ADD_NODE request, sender -1). `who` is `None` when the connection
/// proved nothing.
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
        Some(Identity::Node(id)) if meta.sender == id => Ok(()),
        Some(Identity::Node(id)) => Err(format!(
            "{} from {} that claims to come from {}",
            what(),
            crate::wire::Node::describe(id),
            crate::wire::Node::describe(meta.sender)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Control;

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
                Control {
                    cmd: Some(Command::AddNode),
                    ..Control::default()
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
        let terminate = Meta::for_control(
            1,
            Control {
                cmd: Some(Command::Terminate),
                ..Control::default()
            },
        );
        let e = admit(Some(Identity::Joiner), &terminate).expect_err("joiner");
        assert!(
            e.contains("a Terminate answer from a node that has not joined"),
            "{e}"
        );
        let e = admit(None, &data).expect_err("unauthenticated");
        assert!(e.contains("did not authenticate"), "{e}");
    }
}
