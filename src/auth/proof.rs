//! The cluster secret and the proof of it each connection carries (issue 14). No IO here.
//!
//! A connection's credential is a ZMQ PLAIN user name and password (RFC 24): the user name is
//! the identity the connection claims (`join`, or `node:ID`), the password
//! `hex(HMAC-SHA256(token, CONTEXT ‖ user name))`. The token itself never goes on the wire;
//! the password proves knowledge of it for that identity only.

use crate::wire::NodeId;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

/// The ZAP domain of every ROUTER socket (RFC 27): ZAP requests carry it.
pub const ZAP_DOMAIN: &str = "pslite";

/// What the HMAC covers before the user name: a version, so that a later scheme's proofs are
/// not this one's.
const CONTEXT: &[u8] = b"pslite-rs zmq-plain proof v1\0";

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

    fn mac(&self, user: &str) -> Hmac<Sha256> {
        // An HMAC takes keys of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        m.update(CONTEXT);
        m.update(user.as_bytes());
        m
    }

    /// The PLAIN credential (user name, password) of `who`.
    pub fn credential(&self, who: Identity) -> (String, String) {
        let user = who.user_name();
        let proof = hex(&self.mac(&user).finalize().into_bytes());
        (user, proof)
    }

    /// Checks a credential received in a ZAP request: the identity it proves.
    ///
    /// # Errors
    /// [`Refusal`]: the user name is none of ours, or the password is not the proof of this
    /// token for it (compared in constant time).
    pub fn check(&self, user: &[u8], password: &[u8]) -> Result<Identity, Refusal> {
        let who = std::str::from_utf8(user)
            .ok()
            .and_then(Identity::parse)
            .ok_or_else(|| Refusal::UnknownUser(String::from_utf8_lossy(user).into_owned()))?;
        let proof = unhex(password).ok_or(Refusal::WrongProof(who))?;
        self.mac(&who.user_name())
            .verify_slice(&proof)
            .map_err(|_| Refusal::WrongProof(who))?;
        Ok(who)
    }
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
    /// The password is not the proof of this node's token for the identity: the peer has
    /// another token (or none).
    WrongProof(Identity),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::UnknownUser(u) => write!(f, "unknown user name {u:?}"),
            Refusal::WrongProof(who) => write!(
                f,
                "its proof of PS_AUTH_TOKEN as {} does not match this node's token (the tokens \
                 differ)",
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
    fn the_password_is_not_the_token() {
        let t = token("a very secret cluster token");
        let (user, password) = t.credential(Identity::Node(9));
        assert_eq!(user, "node:9");
        assert_eq!(password.len(), 64);
        assert!(!password.contains("secret"));
    }

    #[test]
    fn unknown_user_names_are_refused() {
        let t = token("0123456789abcdef");
        for user in [
            "", "node:", "node:-3", "node:07", "node:9x", "admin", "join ",
        ] {
            assert_eq!(
                t.check(user.as_bytes(), b"00"),
                Err(Refusal::UnknownUser(user.to_string())),
                "{user:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn a_credential_proves_its_identity_under_its_token_only(
            id in -1i32..100_000, a in "[!-~][ -~]{14,38}[!-~]", b in "[!-~][ -~]{14,38}[!-~]", flip in 0usize..64,
        ) {
            let who = if id < 0 { Identity::Joiner } else { Identity::Node(id) };
            let (ta, tb) = (token(&a), token(&b));
            let (user, password) = ta.credential(who);
            prop_assert_eq!(Identity::parse(&user), Some(who));
            prop_assert_eq!(ta.check(user.as_bytes(), password.as_bytes()), Ok(who));
            if ta != tb {
                prop_assert_eq!(
                    tb.check(user.as_bytes(), password.as_bytes()),
                    Err(Refusal::WrongProof(who))
                );
            }
            // Another identity's proof does not pass for this one.
            let other = Identity::Node(id.max(0) + 1);
            let (other_user, _) = ta.credential(other);
            prop_assert_eq!(
                ta.check(other_user.as_bytes(), password.as_bytes()),
                Err(Refusal::WrongProof(other))
            );
            // Nor does a changed proof.
            let mut bad = password.into_bytes();
            bad[flip] = if bad[flip] == b'0' { b'1' } else { b'0' };
            prop_assert_eq!(ta.check(user.as_bytes(), &bad), Err(Refusal::WrongProof(who)));
        }
    }
}
