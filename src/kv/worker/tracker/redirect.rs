//! A part answered "moved" or "not yet" while servers are added or drained (elastic servers,
//! [`crate::postoffice::ranges`]): nothing of it was applied. Its slot counts as answered and
//! gives its bytes of the budget back; its keys are sliced again by the current key layout
//! (after waiting, at most [`LAYOUT_WAIT`], for the layout the server named, or after
//! [`NOT_YET_PAUSE`]), and each new slice is sent as a new part of the same request, with a
//! new part number, in the same step under `pending` so the request never looks complete in
//! between. A pull's parts are merged in key order whichever server answered them.

use super::pending::Outcome;
use super::Tracker;
use crate::error::Error;
use crate::kv::pairs::view;
use crate::kv::slicer::{slice, Slice};
use crate::kv::value::Value;
use crate::kv::{Key, Timestamp};
use crate::postoffice::Postoffice;
use crate::sync::lock;
use crate::wire::{Message, Node, Placement};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// How long a part answered "not yet" waits before it is sent again.
pub(super) const NOT_YET_PAUSE: Duration = Duration::from_millis(1);

/// How long a part answered "moved" waits for this node to learn the layout the server named.
pub(super) const LAYOUT_WAIT: Duration = Duration::from_secs(1);

/// Request `ts`'s part at server rank `server` was answered `p` ([`Placement::Moved`] or
/// [`Placement::NotYet`]): slice its keys again and send them (customer thread).
pub(super) fn redirect<V: Value>(
    t: &Tracker<V>,
    po: &Postoffice,
    (ts, server): (Timestamp, usize),
    p: Placement,
) {
    let part = p.part();
    let taken = lock(&t.pending).get_mut(&ts).and_then(|pd| {
        let slot = pd.slot_of(server, part)?;
        if pd.answered[slot] {
            return None;
        }
        let req = pd.asked[slot].resend.clone()?;
        Some((slot, pd.asked[slot].keys.clone(), req))
    });
    let Some((slot, keys, req)) = taken else {
        return; // ended meanwhile, or answered already
    };
    t.metrics.membership.parts_redirected.inc();
    match p {
        Placement::Moved { epoch, .. } => {
            let until = Instant::now() + LAYOUT_WAIT;
            while po.layout().epoch() < epoch && Instant::now() < until {
                std::thread::sleep(NOT_YET_PAUSE);
            }
        }
        _ => std::thread::sleep(NOT_YET_PAUSE),
    }
    if let Err(e) = send_again(t, po, (ts, slot), &keys, req) {
        t.settle(ts, (server, part), Outcome::Failed(e));
    }
}

/// Sends part `slot` of request `ts` (its `keys` and its message `req`) again, sliced by the
/// current layout: to the same server as the same part when the layout still places all its
/// keys there; else each slice a new part, the old one answered with them (a new part that
/// cannot be sent fails with the others not sent).
///
/// # Errors
/// A malformed kept part; as [`Tracker::send_part`] for the same part sent again.
fn send_again<V: Value>(
    t: &Tracker<V>,
    po: &Postoffice,
    (ts, slot): (Timestamp, usize),
    keys: &Bytes,
    req: Message,
) -> crate::Result<()> {
    let layout = po.layout();
    let key_list = view::<Key>(keys, "keys").map_err(Error::InvalidArgument)?;
    let nvals = req.data.get(1).map_or(0, Bytes::len) / width::<V>();
    let lens_frame = req.data.get(2).cloned().unwrap_or_default();
    let lens = view::<u32>(&lens_frame, "lens").map_err(Error::InvalidArgument)?;
    let slices = slice(&layout, &key_list, nvals, &lens);
    // The old part answered and the new ones opened in one step.
    let slots: Vec<usize> = {
        let mut map = lock(&t.pending);
        let Some(pd) = map.get_mut(&ts).filter(|pd| !pd.answered[slot]) else {
            return Ok(()); // ended meanwhile
        };
        if let [only] = &slices[..] {
            if pd.servers[slot] == only.server {
                drop(map);
                let again = part_of(&req, only, (layout.epoch(), slot), width::<V>());
                return t.send_part(po, only.server, &key_list, again, None);
            }
        }
        pd.answered[slot] = true;
        pd.asked[slot].resend = None;
        t.budget.give(std::mem::take(&mut pd.asked[slot].cost));
        slices.iter().map(|s| pd.add_part(s.server)).collect()
    };
    let mut failed: Option<Error> = None;
    for (s, new) in slices.iter().zip(slots) {
        if let Some(e) = &failed {
            t.settle(ts, (s.server, Some(new as u32)), Outcome::Failed(e.clone()));
            continue;
        }
        let msg = part_of(&req, s, (layout.epoch(), new), width::<V>());
        if let Err(e) = t.send_part(po, s.server, &key_list[s.keys.clone()], msg, None) {
            t.settle(ts, (s.server, Some(new as u32)), Outcome::Failed(e.clone()));
            failed = Some(e);
        }
    }
    Ok(())
}

/// Bytes per value.
fn width<V: Value>() -> usize {
    std::mem::size_of::<V>()
}

/// Slice `s` of kept part `req` as part number `part` sliced by layout `epoch` (its keys frame
/// empty: [`Tracker::send_part`] fills it in; values `width` bytes each).
fn part_of(req: &Message, s: &Slice, (epoch, part): (u64, usize), width: usize) -> Message {
    let frame = |i: usize| req.data.get(i).cloned().unwrap_or_default();
    let (vals, lens) = (frame(1), frame(2));
    let mut meta = req.meta.clone();
    meta.recver = Node::server_id(s.server);
    meta.kv.keys = None;
    meta.kv.placement = Some(Placement::Part {
        epoch,
        part: part as u32,
    });
    let part_vals = if vals.is_empty() {
        Bytes::new()
    } else {
        vals.slice(s.vals.start * width..s.vals.end * width)
    };
    let part_lens = if lens.is_empty() {
        Bytes::new()
    } else {
        lens.slice(s.keys.start * 4..s.keys.end * 4)
    };
    Message {
        meta,
        data: vec![Bytes::new(), part_vals, part_lens],
    }
}
