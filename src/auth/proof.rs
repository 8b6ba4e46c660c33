//! The cluster secret, the node keys derived from it, and the proof each connection carries.
//! No IO here.
//!
//! **Keys.** The cluster token `T` (`PS_AUTH_TOKEN`) derives one key per node id:
//! `K_N = HMAC-SHA256(T, KEY_CONTEXT ‖ "node:N")` ([`NodeKey`]). The scheduler always holds `T`.
//! A server or worker holds either `T` too (one shared secret, as ps-lite's users set up by
//! hand: every member can then prove every identity), or only its own `K_N`
//! (`PS_AUTH_NODE_KEY`; what `pslite-launch local` and `ssh` give each node they start).
//!
//! **Credentials.** A connection's credential is a ZMQ PLAIN user name and password (RFC 24):
//! the user name is the identity it claims (`join`, or `node:A`), the password one HMAC, hex:
//! - `node:A` to the scheduler: `HMAC(K_A, CONTEXT ‖ "to:scheduler")` — A computes it from its
//!   own key, the scheduler from `T`;
//! - `node:A` to node B (the scheduler included as A): `HMAC(K_B, CONTEXT ‖ "from:node:A")` —
//!   B checks it with its own key; A gets it from `T`, or, holding only `K_A`, from the
//!   scheduler's node table (`NodeTable::reach`, which carries A's credentials for its peers);
//! - `join` (a node that has no id yet, only with `T`): `HMAC(T, CONTEXT ‖ "join")`.
//!
//! So a node holding only `K_A` can prove `node:A` and nothing else: not the scheduler (whose
//! credentials need `K_B` of the node it connects to), not another member. A password sent to
//! B proves A only to B, which could compute it anyway. Neither `T` nor a key is on the wire.

use crate::wire::{NodeId, SCHEDULER};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

/// The ZAP domain of every ROUTER socket (RFC 27): ZAP requests carry it.
pub const ZAP_DOMAIN: &str = "pslite";

/// What a credential's HMAC covers first: a version, so that a later scheme's proofs are not
/// this one's.
const CONTEXT: &[u8] = b"pslite-rs zmq-plain proof v2\0";

/// What a node key's HMAC covers before `node:N`.
const KEY_CONTEXT: &[u8] = b"pslite-rs node key v1\0";

/// A token shorter than this many bytes is refused: it could be guessed.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The cluster secret (`PS_AUTH_TOKEN`, `PS_AUTH_TOKEN_FILE`, or drawn by `pslite-launch`).
/// Its bytes are never printed (`Debug` shows `Token(…)`) nor sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// The token of `text` (trimmed of surrounding white space, as read from a variable or a
    /// file).
    ///
    /// # Errors
    /// A sentence saying why it is refused (empty, or shorter than [`MIN_TOKEN_BYTES`]); never
    /// the token.
    pub fn new(text: &str) -> Result<Token, String> {
        let t = text.trim();
        if t.len() < MIN_TOKEN_BYTES {
            return Err(format!(
                "it has {} bytes; at least {MIN_TOKEN_BYTES} are needed (e.g. the output of \
                 `head -c 32 /dev/urandom | base64`)",
                t.len()
            ));
        }
        Ok(Token(t.as_bytes().into()))
    }

    /// The token in the file at `path` (`PS_AUTH_TOKEN_FILE`'s value, named in the error).
    ///
    /// # Errors
    /// The file cannot be read, or its token is refused ([`Token::new`]); never the token.
    pub fn from_file(path: &str) -> Result<Token, String> {
        let path = path.trim();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("PS_AUTH_TOKEN_FILE={path:?}: cannot read it: {e}"))?;
        Token::new(&text)
            .map_err(|why| format!("PS_AUTH_TOKEN_FILE={path:?}: the token is refused: {why}"))
    }

    /// A fresh random token: 32 bytes from the operating system, hex-encoded (64 characters).
    ///
    /// # Errors
    /// The operating system's random source failed.
    pub fn generate() -> Result<Token, String> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes: {e}"))?;
        Token::new(&hex(&bytes))
    }

    /// The token's text, to hand to a child process (`pslite-launch`).
    pub fn expose(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The key of node `id` ([`NodeKey`]).
    pub fn node_key(&self, id: NodeId) -> NodeKey {
        let k = mac(&self.0, &[KEY_CONTEXT, format!("node:{id}").as_bytes()]);
        NodeKey {
            id,
            key: k.finalize().into_bytes().into(),
        }
    }

    /// The PLAIN credential (user name, password) that `me` presents when it connects to node
    /// `to`: the token proves every identity.
    pub fn credential(&self, me: Identity, to: NodeId) -> (String, String) {
        let password = match me {
            Identity::Joiner => hex(&self.join_mac().finalize().into_bytes()),
            Identity::Node(a) if to == SCHEDULER => self.node_key(a).password_to_scheduler(),
            Identity::Node(a) => self.node_key(to).password_from(a),
        };
        (me.user_name(), password)
    }

    fn join_mac(&self) -> Hmac<Sha256> {
        mac(&self.0, &[CONTEXT, b"join"])
    }
}

/// The key of one node: `HMAC-SHA256(T, KEY_CONTEXT ‖ "node:N")`, from which every credential
/// to or from that node derives (see the module). Its bytes are never printed (`Debug` shows
/// the id only) nor sent, but to the node itself by its launcher.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeKey {
    id: NodeId,
    key: [u8; 32],
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeKey(node:{}, …)", self.id)
    }
}

impl NodeKey {
    /// The key of node `id` given as 64 hex digits (`PS_AUTH_NODE_KEY`).
    ///
    /// # Errors
    /// A sentence saying why it is refused (not 64 hex digits); never the text.
    pub fn from_hex(id: NodeId, text: &str) -> Result<NodeKey, String> {
        let bytes = unhex(text.trim().as_bytes()).filter(|b| b.len() == 32);
        let key = bytes
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or("expected 64 hex digits (pslite-launch writes it)")?;
        Ok(NodeKey { id, key })
    }

    /// The key as 64 hex digits, to hand to its node (`pslite-launch`).
    pub fn to_hex(&self) -> String {
        hex(&self.key)
    }

    /// The node this key is of.
    pub fn id(&self) -> NodeId {
        self.id
    }

    fn mac(&self, what: &[u8]) -> Hmac<Sha256> {
        mac(&self.key, &[CONTEXT, what])
    }

    /// The password node `from` presents when it connects to this key's node.
    pub fn password_from(&self, from: NodeId) -> String {
        hex(&self
            .mac(format!("from:node:{from}").as_bytes())
            .finalize()
            .into_bytes())
    }

    /// The password this key's node presents when it connects to the scheduler.
    pub fn password_to_scheduler(&self) -> String {
        hex(&self.mac(b"to:scheduler").finalize().into_bytes())
    }
}

/// What a node proves itself with: the cluster token, or only its own key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Secret {
    /// `PS_AUTH_TOKEN`: every identity (the scheduler's is one).
    Token(Token),
    /// `PS_AUTH_NODE_KEY`: this node's identity only.
    Key(NodeKey),
}

impl From<Token> for Secret {
    fn from(t: Token) -> Secret {
        Secret::Token(t)
    }
}

impl Secret {
    /// The id this secret is bound to, before the scheduler gives one: a node key's.
    pub fn bound_id(&self) -> Option<NodeId> {
        match self {
            Secret::Token(_) => None,
            Secret::Key(k) => Some(k.id),
        }
    }

    /// The PLAIN credential `me` presents connecting to `to`; `reach`: the scheduler's table of
    /// this node's credentials for its peers (what a node holding only its key needs).
    ///
    /// # Errors
    /// With only a key: `me` is not its node, or `reach` holds nothing for `to`.
    pub fn credential(
        &self,
        me: Identity,
        to: NodeId,
        reach: &std::collections::HashMap<NodeId, String>,
    ) -> Result<(String, String), String> {
        match (self, me) {
            (Secret::Token(t), _) => Ok(t.credential(me, to)),
            (Secret::Key(k), Identity::Node(a)) if a == k.id && to == SCHEDULER => {
                Ok((me.user_name(), k.password_to_scheduler()))
            }
            (Secret::Key(k), Identity::Node(a)) if a == k.id => match reach.get(&to) {
                Some(p) => Ok((me.user_name(), p.clone())),
                None => Err(format!(
                    "no credential for {}: this node holds only its own key (PS_AUTH_NODE_KEY) \
                     and the scheduler's node table carried none for that node",
                    crate::wire::Node::describe(to)
                )),
            },
            (Secret::Key(k), _) => Err(format!(
                "this node holds the key of node:{} only (PS_AUTH_NODE_KEY); it cannot prove \
                 {}",
                k.id,
                me.user_name()
            )),
        }
    }

    /// Checks a credential a ZAP request carries, received by node `me` (the scheduler, a
    /// member, or -1 before it has an id; a node holding the token then takes a proof for any
    /// of the ids in `to_be`, those the scheduler may give it): the identity it proves.
    ///
    /// # Errors
    /// [`Refusal`]: the user name is none of ours, or the password is not the proof for it
    /// (compared in constant time), or this node cannot check it (a joiner at a member).
    pub fn check(
        &self,
        me: NodeId,
        to_be: &[NodeId],
        user: &[u8],
        password: &[u8],
    ) -> Result<Identity, Refusal> {
        let who = std::str::from_utf8(user)
            .ok()
            .and_then(Identity::parse)
            .ok_or_else(|| Refusal::UnknownUser(String::from_utf8_lossy(user).into_owned()))?;
        let proof = unhex(password).ok_or(Refusal::WrongProof(who))?;
        let expected = match (self, who) {
            (Secret::Token(t), Identity::Joiner) if me == SCHEDULER => t.join_mac(),
            (Secret::Token(t), Identity::Node(a)) if me == SCHEDULER => {
                t.node_key(a).mac(b"to:scheduler")
            }
            (Secret::Token(t), Identity::Node(a)) if me >= 0 => {
                t.node_key(me).mac(format!("from:node:{a}").as_bytes())
            }
            // Before the node table (which comes over such a connection): any id it may get.
            // The key of such an id makes a proof of any identity for it: a cluster gives its
            // servers and workers all keys or all the token.
            (Secret::Token(t), Identity::Node(a)) if me < 0 => {
                let what = format!("from:node:{a}");
                let proven = to_be.iter().any(|&id| {
                    t.node_key(id)
                        .mac(what.as_bytes())
                        .verify_slice(&proof)
                        .is_ok()
                });
                return proven.then_some(who).ok_or(Refusal::WrongProof(who));
            }
            (Secret::Key(k), Identity::Node(a)) => k.mac(format!("from:node:{a}").as_bytes()),
            _ => return Err(Refusal::NotHere(who)),
        };
        expected
            .verify_slice(&proof)
            .map_err(|_| Refusal::WrongProof(who))?;
        Ok(who)
    }
}

/// An HMAC-SHA256 under `key` over `parts`, in order.
fn mac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // An HMAC takes keys of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for p in parts {
        m.update(p);
    }
    m
}

/// The identity a connection proved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// A server or worker that has no id yet: it may only register (ADD_NODE).
    Joiner,
    /// The node with this id (the scheduler is [`crate::wire::SCHEDULER`]).
    Node(NodeId),
}

impl Identity {
    /// The PLAIN user name (and ZAP `User-Id`) of this identity: `join` or `node:ID`.
    pub fn user_name(&self) -> String {
        match self {
            Identity::Joiner => "join".to_string(),
            Identity::Node(id) => format!("node:{id}"),
        }
    }

    /// The identity of a user name, `None` for any other text.
    pub fn parse(user: &str) -> Option<Identity> {
        match user {
            "join" => Some(Identity::Joiner),
            _ => {
                // Canonical decimal only: digits, no sign, no leading zero.
                let digits = user.strip_prefix("node:")?;
                let canonical = !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits == "0" || !digits.starts_with('0'));
                let id: NodeId = digits.parse().ok().filter(|_| canonical)?;
                Some(Identity::Node(id))
            }
        }
    }
}

/// Why a connection's credential was refused (for the warning; never contains the token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The user name is not `join` nor `node:ID`.
    UnknownUser(String),
    /// The password is not the proof of the identity: the peer has another token, or holds
    /// another node's key.
    WrongProof(Identity),
    /// This node cannot check that identity: a joiner anywhere but at the scheduler.
    NotHere(Identity),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::UnknownUser(u) => write!(f, "unknown user name {u:?}"),
            Refusal::WrongProof(who) => write!(
                f,
                "its proof as {} does not match (another PS_AUTH_TOKEN, or the key of another \
                 node)",
                who.user_name()
            ),
            Refusal::NotHere(who) => write!(
                f,
                "{} is not accepted here (a node without an id connects to the scheduler only)",
                who.user_name()
            ),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token(s: &str) -> Token {
        Token::new(s).expect("token")
    }

    #[test]
    fn short_tokens_are_refused_without_being_echoed() {
        let e = Token::new("  secret \n").expect_err("short");
        assert!(e.contains("6 bytes; at least 16"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        assert_eq!(format!("{:?}", token("0123456789abcdef")), "Token(…)");
    }

    #[test]
    fn generated_tokens_differ_and_are_64_hex_characters() {
        let (a, b) = (Token::generate().expect("a"), Token::generate().expect("b"));
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn the_password_is_not_the_token_nor_the_key() {
        let t = token("a very secret cluster token");
        let (user, password) = t.credential(Identity::Node(9), 8);
        assert_eq!(user, "node:9");
        assert_eq!(password.len(), 64);
        assert!(!password.contains("secret"));
        let k = t.node_key(9);
        assert_ne!(password, k.to_hex());
        assert_eq!(format!("{k:?}"), "NodeKey(node:9, …)");
        assert_eq!(NodeKey::from_hex(9, &k.to_hex()), Ok(k.clone()));
        let e = NodeKey::from_hex(9, "abc").expect_err("short");
        assert!(e.contains("64 hex digits"), "{e}");
    }

    #[test]
    fn unknown_user_names_are_refused() {
        let t = Secret::Token(token("0123456789abcdef"));
        for user in [
            "", "node:", "node:-3", "node:07", "node:9x", "admin", "join ",
        ] {
            assert_eq!(
                t.check(SCHEDULER, &[], user.as_bytes(), b"00"),
                Err(Refusal::UnknownUser(user.to_string())),
                "{user:?}"
            );
        }
    }

    /// Worker 0, worker 1 and server 0 of a cluster where worker 0 and server 0 hold their
    /// keys and the scheduler the token.
    const W0: NodeId = 9;
    const W1: NodeId = 11;
    const S0: NodeId = 8;

    /// The secrets of that cluster, and what the scheduler's table gives worker 0.
    struct KeyHolders {
        token: Token,
        scheduler: Secret,
        server: Secret,
        member: Secret,
        /// Worker 0's credentials for its peers.
        reach: std::collections::HashMap<NodeId, String>,
    }

    fn key_holders() -> KeyHolders {
        let t = token("the cluster's token, 0123456789");
        KeyHolders {
            scheduler: Secret::Token(t.clone()),
            server: Secret::Key(t.node_key(S0)),
            member: Secret::Key(t.node_key(W0)),
            reach: [(S0, t.node_key(S0).password_from(W0))].into(),
            token: t,
        }
    }

    #[test]
    fn a_node_holding_its_key_proves_itself_and_no_one_else() {
        let KeyHolders {
            scheduler,
            server,
            member,
            reach,
            ..
        } = key_holders();
        let none = std::collections::HashMap::new();
        // Worker 0 proves itself to the scheduler and to server 0.
        let (u, p) = member
            .credential(Identity::Node(W0), SCHEDULER, &none)
            .expect("to the scheduler");
        assert_eq!(
            scheduler.check(SCHEDULER, &[], u.as_bytes(), p.as_bytes()),
            Ok(Identity::Node(W0))
        );
        let (u, p) = member
            .credential(Identity::Node(W0), S0, &reach)
            .expect("to server 0");
        assert_eq!(
            server.check(S0, &[], u.as_bytes(), p.as_bytes()),
            Ok(Identity::Node(W0))
        );
        // It cannot build a credential as anyone else, nor for a peer the table did not name.
        for (who, to) in [
            (Identity::Node(SCHEDULER), S0),
            (Identity::Node(W1), S0),
            (Identity::Joiner, SCHEDULER),
        ] {
            let e = member.credential(who, to, &reach).expect_err("not its own");
            assert!(e.contains("holds the key of node:9 only"), "{e}");
        }
        let e = member
            .credential(Identity::Node(W0), 10, &reach)
            .expect_err("no entry");
        assert!(e.contains("carried none for that node"), "{e}");
    }

    #[test]
    fn what_a_node_computes_with_its_key_proves_nothing_to_anyone_else() {
        let KeyHolders {
            token: t,
            scheduler,
            server,
            member,
            reach,
        } = key_holders();
        let (_, p) = member
            .credential(Identity::Node(W0), S0, &reach)
            .expect("to server 0");
        // What it can compute with its key (its own passwords, and what others present to
        // it) proves nothing to anyone else: not the scheduler's identity at server 0, not
        // worker 1's.
        let k = t.node_key(W0);
        for forged in [
            k.password_from(SCHEDULER),
            k.password_from(W1),
            k.password_to_scheduler(),
            p,
        ] {
            for who in [SCHEDULER, W1] {
                let user = Identity::Node(who).user_name();
                assert_eq!(
                    server.check(S0, &[], user.as_bytes(), forged.as_bytes()),
                    Err(Refusal::WrongProof(Identity::Node(who)))
                );
            }
            assert_eq!(
                scheduler.check(SCHEDULER, &[], b"node:11", forged.as_bytes()),
                Err(Refusal::WrongProof(Identity::Node(W1)))
            );
        }
    }

    #[test]
    fn the_scheduler_proves_itself_to_a_key_holder_and_a_joiner_only_at_the_scheduler() {
        let KeyHolders {
            token: t,
            scheduler,
            server,
            ..
        } = key_holders();
        // The scheduler's own credential for server 0 passes there; a joiner is accepted only
        // at the scheduler.
        let (u, p) = t.credential(Identity::Node(SCHEDULER), S0);
        assert_eq!(
            server.check(S0, &[], u.as_bytes(), p.as_bytes()),
            Ok(Identity::Node(SCHEDULER))
        );
        let (u, p) = t.credential(Identity::Joiner, SCHEDULER);
        assert_eq!(
            scheduler.check(SCHEDULER, &[], u.as_bytes(), p.as_bytes()),
            Ok(Identity::Joiner)
        );
        assert_eq!(
            server.check(S0, &[], u.as_bytes(), p.as_bytes()),
            Err(Refusal::NotHere(Identity::Joiner))
        );
    }

    #[test]
    fn a_node_holding_the_token_takes_a_proof_for_any_id_it_may_get() {
        let t = key_holders().token;
        // A node holding the token, before it has its id, takes a proof for any id it may get.
        let waiting = Secret::Token(t.clone());
        let (u, p) = t.credential(Identity::Node(SCHEDULER), 10);
        assert_eq!(
            waiting.check(-1, &[8, 10], u.as_bytes(), p.as_bytes()),
            Ok(Identity::Node(SCHEDULER))
        );
        assert_eq!(
            waiting.check(-1, &[8], u.as_bytes(), p.as_bytes()),
            Err(Refusal::WrongProof(Identity::Node(SCHEDULER)))
        );
    }

    proptest! {
        #[test]
        fn a_credential_proves_its_identity_under_its_token_only(
            id in -1i32..100_000, to in 1i32..100_000, a in "[!-~][ -~]{14,38}[!-~]", b in "[!-~][ -~]{14,38}[!-~]", flip in 0usize..64,
        ) {
            let who = if id < 0 { Identity::Joiner } else { Identity::Node(id) };
            let to = if who == Identity::Joiner { SCHEDULER } else { to };
            let (ta, tb) = (token(&a), token(&b));
            let (sa, sb) = (Secret::Token(ta.clone()), Secret::Token(tb.clone()));
            let (user, password) = ta.credential(who, to);
            prop_assert_eq!(Identity::parse(&user), Some(who));
            prop_assert_eq!(sa.check(to, &[], user.as_bytes(), password.as_bytes()), Ok(who));
            if ta != tb {
                prop_assert_eq!(
                    sb.check(to, &[], user.as_bytes(), password.as_bytes()),
                    Err(Refusal::WrongProof(who))
                );
            }
            // Another identity's proof does not pass for this one.
            let other = Identity::Node(id.max(0) + 1);
            let other_user = other.user_name();
            prop_assert_eq!(
                sa.check(to, &[], other_user.as_bytes(), password.as_bytes()),
                Err(Refusal::WrongProof(other))
            );
            // Nor at another node.
            if to != SCHEDULER && who != Identity::Joiner {
                prop_assert_eq!(
                    sa.check(to + 1, &[], user.as_bytes(), password.as_bytes()),
                    Err(Refusal::WrongProof(who))
                );
            }
            // Nor does a changed proof.
            let mut bad = password.into_bytes();
            bad[flip] = if bad[flip] == b'0' { b'1' } else { b'0' };
            prop_assert_eq!(sa.check(to, &[], user.as_bytes(), &bad), Err(Refusal::WrongProof(who)));
        }
    }
}
