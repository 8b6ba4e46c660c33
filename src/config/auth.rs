//! `PS_AUTH_TOKEN`, `PS_AUTH_TOKEN_FILE`, `PS_AUTH_NODE_KEY` and `PS_AUTH` (rows of the table
//! in [`super`]): the cluster secret of [`crate::auth`] or one node's key, and the rule that
//! makes authentication the default.

use super::vars::Vars;
use crate::auth::{NodeKey, Secret, Token};
use crate::error::{Error, Result};
use crate::wire::{Node, Role};
use std::net::ToSocketAddrs;

/// The token of this node: `Some` from `PS_AUTH_TOKEN` or `PS_AUTH_TOKEN_FILE`; `None` with
/// `PS_AUTH=none`, or with neither when the scheduler's address is on loopback.
///
/// # Errors
/// [`Error::Config`] naming the variable: both token variables set; a token (or token file)
/// empty, too short or unreadable (the token is never in the text); `PS_AUTH` other than
/// `none`; `PS_AUTH=none` with a token; and no token with a scheduler that is not on loopback
/// (saying how to set one).
pub(super) fn auth<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    (root_uri, root_port): (&str, u16),
    node_host: &str,
) -> Result<Option<Token>> {
    let off = match vars.raw("PS_AUTH").as_deref().map(str::trim) {
        None | Some("") => false,
        Some("none") => true,
        // The value is not repeated: it may be a token set in the wrong variable.
        Some(_) => {
            return Err(Error::Config(
                "PS_AUTH: expected unset, or none (no authentication); the value given is not \
                 shown, as it may be a secret"
                    .into(),
            ))
        }
    };
    let given = vars.raw("PS_AUTH_TOKEN").filter(|t| !t.is_empty());
    let file = vars
        .raw("PS_AUTH_TOKEN_FILE")
        .filter(|f| !f.trim().is_empty());
    let token = match (given, file) {
        (Some(_), Some(_)) => {
            return Err(Error::Config(
                "both PS_AUTH_TOKEN and PS_AUTH_TOKEN_FILE are set: set one".into(),
            ))
        }
        (Some(t), None) => Some(
            Token::new(&t).map_err(|why| Error::Config(format!("PS_AUTH_TOKEN refused: {why}")))?,
        ),
        (None, Some(f)) => Some(Token::from_file(&f).map_err(Error::Config)?),
        (None, None) => None,
    };
    match (token, off) {
        (Some(_), true) => Err(Error::Config(
            "PS_AUTH=none but a token is set (PS_AUTH_TOKEN or PS_AUTH_TOKEN_FILE): unset one"
                .into(),
        )),
        (Some(t), false) => Ok(Some(t)),
        // Said when the node starts, once logging is set up (`Postoffice::start`).
        (None, true) => Ok(None),
        (None, false) if on_loopback(root_uri, root_port) && on_loopback(node_host, 0) => Ok(None),
        (None, false) if on_loopback(root_uri, root_port) => Err(Error::Config(format!(
            "no PS_AUTH_TOKEN: this node would listen at {node_host} (DMLC_NODE_HOST or \
             DMLC_INTERFACE), which is not loopback, so anyone who can reach it could send it \
             requests and commands. Give every node the same secret of at least {} bytes: \
             PS_AUTH_TOKEN=$(head -c 32 /dev/urandom | base64), or PS_AUTH_TOKEN_FILE=PATH; or \
             set PS_AUTH=none to run without authentication",
            crate::auth::MIN_TOKEN_BYTES
        ))),
        (None, false) => Err(Error::Config(format!(
            "no PS_AUTH_TOKEN: the scheduler ({root_uri}:{root_port}) is not on loopback, so \
             anyone who can reach it could join this cluster. Give every node the same secret \
             of at least {} bytes: PS_AUTH_TOKEN=$(head -c 32 /dev/urandom | base64), or \
             PS_AUTH_TOKEN_FILE=PATH (a file only you can read); or set PS_AUTH=none to run \
             without authentication",
            crate::auth::MIN_TOKEN_BYTES
        ))),
    }
}

/// What this node proves itself with: its key (`PS_AUTH_NODE_KEY`, a server's or worker's
/// with `PSLITE_RANK`: the key is of the id that rank gives), or the token ([`auth`]).
///
/// # Errors
/// As [`auth`]; and, with `PS_AUTH_NODE_KEY`: a token or `PS_AUTH=none` set too, the
/// scheduler's role, no `PSLITE_RANK`, or a key that is not 64 hex digits (never shown).
pub(super) fn secret<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    root: (&str, u16),
    node_host: &str,
    (role, rank): (Role, Option<u32>),
) -> Result<Option<Secret>> {
    let Some(text) = vars
        .raw("PS_AUTH_NODE_KEY")
        .filter(|k| !k.trim().is_empty())
    else {
        return Ok(auth(vars, root, node_host)?.map(Secret::Token));
    };
    let set = |v: &str| vars.raw(v).is_some_and(|x| !x.trim().is_empty());
    if set("PS_AUTH_TOKEN") || set("PS_AUTH_TOKEN_FILE") || set("PS_AUTH") {
        return Err(Error::Config(
            "PS_AUTH_NODE_KEY is set with PS_AUTH_TOKEN, PS_AUTH_TOKEN_FILE or PS_AUTH: a node \
             holds its key or the token, not both (pslite-launch gives servers and workers \
             their keys, the scheduler the token)"
                .into(),
        ));
    }
    let id = match (role, rank) {
        (Role::Server, Some(r)) => Node::server_id(r as usize),
        (Role::Worker, Some(r)) => Node::worker_id(r as usize),
        (Role::Scheduler, _) => {
            return Err(Error::Config(
                "PS_AUTH_NODE_KEY is set on the scheduler, which needs the cluster's token \
                 (PS_AUTH_TOKEN) to check every node's key"
                    .into(),
            ))
        }
        (_, None) => {
            return Err(Error::Config(
                "PS_AUTH_NODE_KEY needs PSLITE_RANK: a node key is the key of one rank's id".into(),
            ))
        }
    };
    let key = NodeKey::from_hex(id, &text)
        .map_err(|why| Error::Config(format!("PS_AUTH_NODE_KEY refused: {why}")))?;
    Ok(Some(Secret::Key(key)))
}

/// Whether every address `host` resolves to is a loopback address (a host name that does not
/// resolve is not).
fn on_loopback(host: &str, port: u16) -> bool {
    match (host, port).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(pairs: &[(&str, &str)], root: &str) -> Result<Option<Token>> {
        let e: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let host = if root.starts_with("198.") {
            "198.18.0.2"
        } else {
            "127.0.0.1"
        };
        auth(&Vars::new(|k| e.get(k).cloned()), (root, 9000), host)
    }

    fn text(r: Result<Option<Token>>) -> String {
        match r {
            Ok(t) => format!("{t:?}"),
            Err(e) => e.to_string(),
        }
    }

    const TOKEN: &str = "0123456789abcdef-cluster";

    #[test]
    fn a_token_from_the_variable_or_a_file() {
        let want = Token::new(TOKEN).ok();
        assert_eq!(
            load(&[("PS_AUTH_TOKEN", TOKEN)], "10.1.2.3").ok(),
            Some(want.clone())
        );
        let path = std::env::temp_dir().join(format!("pslite-token-{}", std::process::id()));
        std::fs::write(&path, format!("{TOKEN}\n")).expect("write");
        let p = path.to_string_lossy().to_string();
        assert_eq!(
            load(&[("PS_AUTH_TOKEN_FILE", &p)], "10.1.2.3").ok(),
            Some(want)
        );
        std::fs::remove_file(&path).expect("remove");
        let e = text(load(&[("PS_AUTH_TOKEN_FILE", &p)], "10.1.2.3"));
        assert!(
            e.contains("PS_AUTH_TOKEN_FILE=") && e.contains("cannot read it"),
            "{e}"
        );
    }

    #[test]
    fn a_node_key_is_a_servers_or_workers_with_its_rank_and_alone() {
        let t = Token::new(TOKEN).expect("token");
        let hex = t.node_key(11).to_hex();
        let load = |pairs: &[(&str, &str)], role| {
            let e: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let rank = e.get("PSLITE_RANK").and_then(|r| r.parse().ok());
            secret(
                &Vars::new(|k| e.get(k).cloned()),
                ("10.1.2.3", 9000),
                "10.1.2.4",
                (role, rank),
            )
        };
        let k = load(
            &[("PS_AUTH_NODE_KEY", &hex), ("PSLITE_RANK", "1")],
            Role::Worker,
        )
        .expect("a worker's key");
        assert_eq!(k, Some(Secret::Key(t.node_key(11))));
        type Case<'a> = (&'a [(&'a str, &'a str)], Role, &'a str);
        let cases: [Case<'_>; 4] = [
            (
                &[("PS_AUTH_NODE_KEY", &hex)],
                Role::Worker,
                "needs PSLITE_RANK",
            ),
            (
                &[("PS_AUTH_NODE_KEY", &hex), ("PSLITE_RANK", "0")],
                Role::Scheduler,
                "set on the scheduler",
            ),
            (
                &[
                    ("PS_AUTH_NODE_KEY", &hex),
                    ("PSLITE_RANK", "0"),
                    ("PS_AUTH_TOKEN", TOKEN),
                ],
                Role::Server,
                "holds its key or the token, not both",
            ),
            (
                &[("PS_AUTH_NODE_KEY", "12ab"), ("PSLITE_RANK", "0")],
                Role::Server,
                "PS_AUTH_NODE_KEY refused: expected 64 hex digits",
            ),
        ];
        for (pairs, role, want) in cases {
            let e = load(pairs, role).expect_err(want).to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains(&hex), "the key is never shown: {e}");
        }
    }

    #[test]
    fn without_a_token_only_loopback_runs_unless_opted_out() {
        assert_eq!(text(load(&[], "127.0.0.1")), "None");
        assert_eq!(text(load(&[], "::1")), "None");
        assert_eq!(text(load(&[], "localhost")), "None");
        let e = text(load(&[], "198.18.0.1"));
        assert!(e.contains("no PS_AUTH_TOKEN: the scheduler (198.18.0.1:9000) is not on loopback"));
        assert!(
            e.contains("PS_AUTH_TOKEN_FILE=PATH") && e.contains("PS_AUTH=none"),
            "{e}"
        );
        assert_eq!(text(load(&[("PS_AUTH", "none")], "198.18.0.1")), "None");
        // A scheduler on loopback, but this node listening elsewhere.
        let e: HashMap<String, String> = HashMap::new();
        let r = auth(
            &Vars::new(|k| e.get(k).cloned()),
            ("127.0.0.1", 9000),
            "0.0.0.0",
        );
        let e = text(r);
        assert!(e.contains("this node would listen at 0.0.0.0"), "{e}");
    }

    #[test]
    fn contradictions_and_short_tokens_are_named_without_the_token() {
        let e = text(load(
            &[("PS_AUTH", "a-token-in-the-wrong-place")],
            "127.0.0.1",
        ));
        assert!(e.contains("PS_AUTH: expected unset, or none"), "{e}");
        assert!(!e.contains("wrong-place"), "{e}");
        let e = text(load(
            &[("PS_AUTH", "none"), ("PS_AUTH_TOKEN", TOKEN)],
            "127.0.0.1",
        ));
        assert!(e.contains("PS_AUTH=none but a token is set"), "{e}");
        assert!(!e.contains(TOKEN), "{e}");
        let e = text(load(
            &[("PS_AUTH_TOKEN", TOKEN), ("PS_AUTH_TOKEN_FILE", "/x")],
            "::1",
        ));
        assert!(
            e.contains("both PS_AUTH_TOKEN and PS_AUTH_TOKEN_FILE"),
            "{e}"
        );
        let e = text(load(&[("PS_AUTH_TOKEN", "short-secret")], "::1"));
        assert!(e.contains("PS_AUTH_TOKEN refused: it has 12 bytes"), "{e}");
        assert!(!e.contains("short-secret"), "{e}");
    }
}
