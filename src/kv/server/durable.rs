//! A `KVServer`'s durable side (`PS_CHECKPOINT_DIR`): at start it creates a fresh
//! checkpoint, or, on a server that replaces a lost one, restores the handler from the
//! snapshot and the log; while serving it logs every state-changing request before the answer
//! goes out, answers a request applied before the restart without applying it again, and
//! takes a snapshot when the log has grown ([`crate::kv::durable::checkpoint`]).

use super::{ReqMeta, RequestHandler};
use crate::error::{Error, Result};
use crate::kv::durable::checkpoint::{corrupt, Checkpoint, Restored, SNAPSHOT};
use crate::kv::durable::log::Prepared;
use crate::kv::durable::record::{Entry, Request, WHOLE};
use crate::kv::durable::Fsync;
use crate::kv::pairs::decode_checked;
use crate::kv::value::Value;
use crate::postoffice::Postoffice;
use crate::wire::{Meta, Node, NodeId};
use bytes::Bytes;

/// The checkpoint of one `KVServer`.
pub(super) struct Durable {
    cp: Checkpoint,
    /// "server rank 0 (id 8), app 0, f32": for logs.
    name: String,
    /// The handler's saved state, kept from one snapshot to the next so that its memory is
    /// reused ([`RequestHandler::save_into`]).
    state: Vec<u8>,
    /// Where the state came from, in words ("restored from DIR/snapshot and 12 logged entries
    /// of DIR/log.1", or a new checkpoint), for [`check_answered`](Self::check_answered).
    origin: String,
    /// Set when a worker saw answered a request this checkpoint lacks: every request is
    /// refused with this text.
    refusal: Option<String>,
}

impl Durable {
    /// The durable side of application `app_id`'s server of `V` values on `po`, `None` when
    /// `PS_CHECKPOINT_DIR` is unset; restores `handler` when this node replaces a lost server.
    ///
    /// # Errors
    /// [`Error::Config`] for a handler that cannot save its state, or a checkpoint directory
    /// that cannot be written or read; [`Error::Corrupt`] naming the file and offset of a
    /// damaged snapshot or log.
    pub(super) fn open<V: Value>(
        po: &Postoffice,
        app_id: i32,
        handler: &mut impl RequestHandler<V>,
    ) -> Result<Option<Durable>> {
        let Some(c) = &po.config().checkpoint else {
            return Ok(None);
        };
        let dir = c
            .dir
            .join(format!("server-{}", po.my_rank()))
            .join(format!("app{app_id}-{}", V::DTYPE.name()));
        let sync = if c.sync { Fsync::Yes } else { Fsync::No };
        let name = format!(
            "{}, app {app_id}, {}",
            Node::describe(po.my_id()),
            V::DTYPE.name()
        );
        let cp = match po.is_replacement() {
            true => restore(&dir, (sync, c.log_bytes), handler, (&name, po.run_id()))?,
            false => None,
        };
        let (cp, origin) = match cp {
            Some(restored) => restored,
            None => {
                let state = handler.save().ok_or_else(|| {
                    Error::Config(format!(
                        "PS_CHECKPOINT_DIR is set but the handler of {name} cannot save its \
                         state (RequestHandler::save returns None)"
                    ))
                })?;
                let cp = Checkpoint::create(&dir, (sync, c.log_bytes), po.run_id(), &state)?;
                let origin = match po.is_replacement() {
                    true => "started empty: no checkpoint of this run to restore",
                    false => "a new checkpoint",
                };
                (cp, format!("{origin} in {}", dir.display()))
            }
        };
        Ok(Some(Durable {
            cp,
            name,
            state: Vec::new(),
            origin,
            refusal: None,
        }))
    }

    /// The recovery cross-check: worker `from` saw the server this one replaces answer, per
    /// customer, the state-changing requests up to a timestamp (`answered`: customer id,
    /// timestamp; `ControlMsg::Answered`). Each answered request was logged before its answer
    /// went out, so each must be among those this checkpoint holds as applied (or older than
    /// the [`KEEP`](crate::kv::durable::applied::KEEP) it remembers of that customer). One
    /// that is not (the log lost a record it had acknowledged: a file cut or replaced, or an
    /// old server that answered after it was replaced) makes this server refuse every
    /// key-value request from now on, naming the worker, the missing requests and the files,
    /// and fail the job ([`Postoffice::fail_application`]). Zero-copy pulls are still served
    /// from its values. On a server that replaced none this does nothing.
    pub(super) fn check_answered(
        &mut self,
        po: &Postoffice,
        from: NodeId,
        answered: &[(i32, i32)],
    ) {
        // Only a replacement restored anything to check; one refusal is enough.
        if self.refusal.is_some() || !po.is_replacement() {
            return;
        }
        let applied = &self.cp.applied;
        let lost: Vec<(i32, i32)> = answered
            .iter()
            .copied()
            .filter(|&(c, ts)| !applied.has_request(from, c, ts) && !applied.forgotten(from, c, ts))
            .collect();
        if lost.is_empty() {
            return;
        }
        let more = match lost.len() {
            n if n > 4 => format!(" and {} more customers", n - 4),
            _ => String::new(),
        };
        let missing: Vec<String> = lost
            .iter()
            .take(4)
            .map(|&(customer, ts)| {
                let held = match self.cp.applied.latest(from, customer) {
                    Some(last) => format!("the last it holds is timestamp {last}"),
                    None => "it holds none of that customer".to_string(),
                };
                format!("customer {customer} up to timestamp {ts} ({held})")
            })
            .collect();
        let text = format!(
            "{} refuses to serve: {} saw the server it replaces answer requests that its \
             checkpoint does not hold, so acknowledged updates were lost: {}{more}; its state: {}",
            self.name,
            Node::describe(from),
            missing.join(", "),
            self.origin
        );
        tracing::error!("{text}");
        po.fail_application(&text);
        self.refusal = Some(text);
    }

    /// Why every request is refused, `None` while this server serves
    /// ([`check_answered`](Self::check_answered)).
    pub(super) fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// Whether request `m` was applied before this server restarted (it is then answered
    /// without being applied again).
    pub(super) fn applied_before(&self, m: &Meta) -> bool {
        self.cp
            .applied
            .contains(m.sender, m.tag.customer_id, (m.tag.timestamp, part_of(m)))
    }

    /// Before request `m` (with `frames`: keys, values, lengths) is applied: writes its log
    /// record without making it part of the log yet ([`Checkpoint::prepare`]), so that the
    /// payload is read once for the log and then found in the cache by the handler. A request
    /// whose keys are the kept list `list` (key caching) logs the list once per log generation
    /// and then names it by digest.
    ///
    /// # Errors
    /// The log could not be written: the request must be refused, not applied.
    pub(super) fn prepare(
        &mut self,
        m: &Meta,
        frames: &[Bytes],
        list: Option<u64>,
    ) -> std::result::Result<Prepared, String> {
        let (sender, customer) = (m.sender, m.tag.customer_id);
        let result = (|| {
            if let (Some(digest), Some(keys)) = (list, frames.first()) {
                // A registration may replace a list under a colliding digest: logged again.
                let registers = matches!(m.kv.keys, Some(crate::wire::KeyRef::Register { .. }));
                if registers || !self.cp.has_list(sender, customer, digest) {
                    self.cp.append(&Entry::KeyList {
                        sender,
                        customer,
                        digest,
                        keys,
                    })?;
                }
            }
            self.cp.prepare(&applied(m, frames, list))
        })();
        result.map_err(|e| {
            tracing::error!("{}: {e}", self.name);
            format!("the server could not log the request, which was not applied: {e}")
        })
    }

    /// After request `m` was applied: makes its record `p`, [`prepare`](Self::prepare)d with
    /// the same `frames` and `list`, part of the log, before the request is answered.
    ///
    /// # Errors
    /// The log could not be written: the request must not be acknowledged as durable.
    pub(super) fn commit(
        &mut self,
        p: Prepared,
        m: &Meta,
        frames: &[Bytes],
        list: Option<u64>,
    ) -> std::result::Result<(), String> {
        self.cp.commit(p, &applied(m, frames, list)).map_err(|e| {
            tracing::error!("{}: {e}", self.name);
            format!("the server could not log the request, which is applied in memory only: {e}")
        })
    }

    /// Takes a snapshot when one is due (the log outgrew its limit).
    pub(super) fn maybe_snapshot<V: Value>(&mut self, handler: &impl RequestHandler<V>) {
        if self.cp.due() {
            if let Err(e) = self.snapshot_now(handler) {
                tracing::error!("{}: {e}, the log keeps growing", self.name);
            }
        }
    }

    /// Takes a snapshot now (rows moved here are in no log: a replacement restores them from
    /// it).
    ///
    /// # Errors
    /// The handler cannot save its state, or the snapshot could not be written: the state is
    /// in memory only.
    pub(super) fn snapshot_now<V: Value>(
        &mut self,
        handler: &impl RequestHandler<V>,
    ) -> std::result::Result<(), String> {
        let t0 = std::time::Instant::now();
        let state = &mut self.state;
        if !handler.save_into(state) {
            return Err("snapshot failed: the handler cannot save its state".into());
        }
        self.cp
            .snapshot(state)
            .map_err(|e| format!("snapshot failed: {e}"))?;
        tracing::info!(
            "{}: snapshot of {:.1} MB in {:.1} ms, log generation {}",
            self.name,
            state.len() as f64 / 1e6,
            t0.elapsed().as_secs_f64() * 1e3,
            self.cp.generation()
        );
        Ok(())
    }
}

/// Which part of its request `m` is ([`crate::wire::Placement::part`]; [`WHOLE`] without one).
fn part_of(m: &Meta) -> u32 {
    m.kv.placement.and_then(|p| p.part()).unwrap_or(WHOLE)
}

/// The log entry of request `m` with `frames`; the keys frame left out when they are the kept
/// list `list` (named by its digest, logged before).
fn applied<'a>(m: &Meta, frames: &'a [Bytes], list: Option<u64>) -> Entry<'a> {
    let mut parts: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    if let (Some(_), Some(keys)) = (list, parts.first_mut()) {
        *keys = &[];
    }
    Entry::Applied(Request {
        sender: m.sender,
        customer: m.tag.customer_id,
        timestamp: m.tag.timestamp,
        part: part_of(m),
        cmd: m.head,
        push: m.kv.push,
        pull: m.kv.pull,
        keys_by_digest: list,
        frames: parts,
    })
}

/// Restores `handler` from the checkpoint in `dir`: the snapshot's state, then every logged
/// request applied again in order. `None` when there is nothing of this run to restore (no
/// snapshot, or one of another run: the lost server died before it served this application,
/// so no request of it was applied): the caller starts a new checkpoint.
///
/// # Errors
/// As [`Checkpoint::open`] and [`rebuild`].
fn restore<V: Value>(
    dir: &std::path::Path,
    (sync, limit): (Fsync, u64),
    handler: &mut impl RequestHandler<V>,
    (name, run): (&str, u64),
) -> Result<Option<(Checkpoint, String)>> {
    if !dir.join(SNAPSHOT).exists() {
        tracing::warn!(
            "{name}: no checkpoint in {} to restore: starting empty",
            dir.display()
        );
        return Ok(None);
    }
    let (mut cp, restored) = Checkpoint::open(dir, sync, limit)?;
    if restored.run != run {
        tracing::warn!(
            "{name}: the checkpoint in {} is of another run ({:#x}, this is {run:#x}): starting \
             empty",
            dir.display(),
            restored.run
        );
        return Ok(None);
    }
    let entries = restored.entries()?;
    rebuild(dir, handler, &restored, &entries)?;
    for (_, e) in &entries {
        cp.note(e);
    }
    let n = entries.len();
    let torn = restored.torn_at.map_or(String::new(), |at| {
        format!(" (its last record, cut short at byte {at}, was taken for a torn tail)")
    });
    let origin = format!(
        "restored from {} and {n} logged entries of {}{torn}",
        dir.join(SNAPSHOT).display(),
        restored.log_name
    );
    tracing::warn!("{name}: {origin}");
    Ok(Some((cp, origin)))
}

/// Puts `handler` in the state checkpoint `restored` (read from `dir`) holds: the snapshot's
/// state, then the logged requests (`entries`, [`Restored::entries`]) applied again in order.
///
/// # Errors
/// [`Error::Corrupt`] naming the file and offset: a state the handler refuses, a damaged log,
/// a logged request the handler refuses.
pub(crate) fn rebuild<V: Value>(
    dir: &std::path::Path,
    handler: &mut impl RequestHandler<V>,
    restored: &Restored,
    entries: &[(u64, Entry<'_>)],
) -> Result<()> {
    let snap = dir.join(SNAPSHOT).display().to_string();
    handler.restore(&restored.state).map_err(|e| {
        corrupt(
            &snap,
            restored.state_at,
            &format!("the handler's state: {e}"),
        )
    })?;
    let mut lists = std::collections::HashMap::new();
    for (at, entry) in entries {
        let at = *at;
        match entry {
            Entry::KeyList {
                sender,
                customer,
                digest,
                keys,
            } => {
                lists.insert((*sender, *customer, *digest), *keys);
            }
            Entry::Applied(r) => {
                let keys = match r.keys_by_digest {
                    None => None,
                    Some(d) => Some(*lists.get(&(r.sender, r.customer, d)).ok_or_else(|| {
                        corrupt(
                            &restored.log_name,
                            at,
                            &format!("the request names key list {d:#x}, not logged before it"),
                        )
                    })?),
                };
                replay(handler, r, keys).map_err(|e| {
                    corrupt(
                        &restored.log_name,
                        at,
                        &format!("the logged request cannot be applied again: {e}"),
                    )
                })?;
            }
            Entry::Forget(_) => {}
        }
    }
    Ok(())
}

/// Applies logged request `r` to `handler` again; `keys` are its key list's when it names one.
fn replay<V: Value>(
    handler: &mut impl RequestHandler<V>,
    r: &Request<'_>,
    keys: Option<&[u8]>,
) -> std::result::Result<(), String> {
    let mut frames: Vec<Bytes> = r.frames.iter().map(|f| Bytes::copy_from_slice(f)).collect();
    if let (Some(k), Some(first)) = (keys, frames.first_mut()) {
        *first = Bytes::copy_from_slice(k);
    }
    let req = decode_checked::<V>(&frames, false)?;
    let meta = ReqMeta {
        cmd: r.cmd,
        push: r.push,
        pull: false,
        sender: r.sender,
        timestamp: r.timestamp,
    };
    handler.handle(&meta, req).map(|_| ())
}
