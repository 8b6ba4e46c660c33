//! What a [`KVWorker`](super::KVWorker) request asks of the servers: the operation ([`Op`]) and
//! the options of the general form ([`RequestOptions`]: application command and completion
//! callback). These replace ps-lite's `push`/`pull` flags and the trailing `cmd`/`callback`
//! arguments of `ZPush`/`ZPull`/`ZPushPull` (`kv_app.h`).

use super::pairs::KVPairs;
use crate::error::Result;

/// Called once when a request completes, with the pulled pairs (empty for a push) or the error.
/// It runs on the worker's customer thread, except for a request that involves no server (no
/// keys): that one completes at once, on the calling thread, with empty pairs.
pub type Callback<V> = Box<dyn FnOnce(Result<KVPairs<V>>) + Send>;

/// What a request does at each server it goes to (ps-lite's `Meta.push` / `Meta.pull`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Send values; the server applies them (the default handler sums). Answers carry nothing.
    Push,
    /// Ask for the values of the keys; the request carries none.
    Pull,
    /// Push, then answer with the values after the update, in one round trip (ps-lite's
    /// `ZPushPull`).
    PushPull,
}

impl Op {
    /// Whether the request carries values (`Meta.push`).
    pub fn pushes(self) -> bool {
        matches!(self, Op::Push | Op::PushPull)
    }

    /// Whether the answers carry values (`Meta.pull`).
    pub fn pulls(self) -> bool {
        matches!(self, Op::Pull | Op::PushPull)
    }

    /// `"push"`, `"pull"` or `"push-pull"`, as error and log texts name the request.
    pub fn name(self) -> &'static str {
        match self {
            Op::Push => "push",
            Op::Pull => "pull",
            Op::PushPull => "push-pull",
        }
    }
}

/// The options of [`KVWorker::request`](super::KVWorker::request) beyond its pairs.
///
/// `RequestOptions::default()`: command 0 (plain push/pull, what the default handler serves) and
/// no callback (wait on the returned timestamp).
pub struct RequestOptions<V> {
    /// Application command, ps-lite's `cmd`/`head`, handed to the server's handler as
    /// [`ReqMeta::cmd`](super::ReqMeta::cmd). 0 for plain push/pull. A command other than 0
    /// may change stored values: the server holds it back while zero-copy writes of its values
    /// are in flight, as it does pushes.
    pub cmd: i32,
    /// Called once when the request completes (see [`Callback`]). A request with a callback
    /// cannot be waited on: its timestamp is forgotten when it completes.
    pub callback: Option<Callback<V>>,
}

impl<V> Default for RequestOptions<V> {
    fn default() -> Self {
        RequestOptions {
            cmd: 0,
            callback: None,
        }
    }
}

impl<V> RequestOptions<V> {
    /// Application command `cmd`, no callback.
    pub fn cmd(cmd: i32) -> Self {
        RequestOptions {
            cmd,
            callback: None,
        }
    }

    /// Command 0, completing into `callback` (see [`Callback`]).
    pub fn callback(callback: impl FnOnce(Result<KVPairs<V>>) + Send + 'static) -> Self {
        RequestOptions {
            cmd: 0,
            callback: Some(Box::new(callback)),
        }
    }
}

impl<V> std::fmt::Debug for RequestOptions<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestOptions")
            .field("cmd", &self.cmd)
            .field("callback", &self.callback.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_pushes_and_pulls_as_ps_lite_flags_say() {
        let flags = |op: Op| (op.pushes(), op.pulls(), op.name());
        assert_eq!(flags(Op::Push), (true, false, "push"));
        assert_eq!(flags(Op::Pull), (false, true, "pull"));
        assert_eq!(flags(Op::PushPull), (true, true, "push-pull"));
    }
}
