//! Which server owns which keys, epoch by epoch, as servers are added and drained.
//!
//! Range splitting, not consistent hashing: a server's keys stay one contiguous range, so a
//! worker still slices a sorted key list with one binary search per server
//! (`kv::slicer::slice` over [`Layout::parts`]), a server's key caches, tables and checkpoint
//! keep their order, and a move is one cut of a sorted store. Adding a server splits the widest
//! range at its middle and moves the upper half (half of the widest range: 1/(2n) of the key
//! space from n even shares); draining one gives its range to the owner of the range before it
//! (after it, for the first). Consistent hashing (the OSDI'14 Parameter Server) balances better after many
//! changes but scatters every server's keys over many arcs; a later rebalance can move ranges
//! one by one with the same [`Move`].

use crate::postoffice::range::{server_key_ranges, Range};
use crate::wire::{KeyLayout, KeyMove, KeyPart, Node, NodeId};

/// One range and its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The keys (`end` = `u64::MAX` for the last part, which owns `u64::MAX` too).
    pub range: Range,
    /// The server holding them.
    pub owner: NodeId,
}

/// One range changing owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The keys.
    pub range: Range,
    /// Its owner before the move.
    pub from: NodeId,
    /// Its owner after.
    pub to: NodeId,
}

/// The moves that lead from one epoch's layout to the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The epoch the moves lead to.
    pub epoch: u64,
    /// The moves, in key order.
    pub moves: Vec<Move>,
}

/// The owners of the whole key space at one epoch: parts in key order, contiguous, from 0 to
/// `u64::MAX`, neighbours with different owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    epoch: u64,
    parts: Vec<Part>,
}

impl Layout {
    /// Epoch 0: `servers` in rank order, each owning its even share
    /// ([`server_key_ranges`], ps-lite's `GetServerKeyRanges`).
    ///
    /// # Panics
    /// When `servers` is empty.
    pub fn even(servers: &[NodeId]) -> Layout {
        assert!(!servers.is_empty(), "a layout needs a server");
        let parts = server_key_ranges(servers.len())
            .into_iter()
            .zip(servers)
            .map(|(range, &owner)| Part { range, owner })
            .collect();
        Layout { epoch: 0, parts }
    }

    /// Epoch 0 of a cluster of `servers` servers (at least one): [`even`](Self::even) over
    /// their ids in rank order, what every node holds at the start.
    pub fn start(servers: usize) -> Layout {
        let ids: Vec<NodeId> = (0..servers.max(1)).map(Node::server_id).collect();
        Layout::even(&ids)
    }

    /// This layout's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The parts, in key order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The owner of `key`.
    pub fn owner_of(&self, key: u64) -> NodeId {
        let i = self.parts.partition_point(|p| p.range.begin <= key);
        self.parts[i.saturating_sub(1)].owner
    }

    /// The keys `owner` holds, `None` when it holds none. A server holds at most one part:
    /// [`plan_add`](Self::plan_add) splits a part and [`plan_drain`](Self::plan_drain) joins a
    /// drained part to its neighbour's, and [`from_wire`](Self::from_wire) refuses a layout
    /// that gives a server two.
    pub fn part_of(&self, owner: NodeId) -> Option<Range> {
        self.parts
            .iter()
            .find(|p| p.owner == owner)
            .map(|p| p.range)
    }

    /// As sent in a [`KeyLayout`], with the moves of `plan` (which led to it) and `settled`.
    pub fn to_wire(&self, plan: &Plan, settled: Option<(u64, u64)>) -> KeyLayout {
        KeyLayout {
            epoch: self.epoch,
            parts: self
                .parts
                .iter()
                .map(|p| KeyPart {
                    begin: p.range.begin,
                    end: p.range.end,
                    owner: p.owner,
                })
                .collect(),
            moves: plan
                .moves
                .iter()
                .map(|m| KeyMove {
                    begin: m.range.begin,
                    end: m.range.end,
                    from: m.from,
                    to: m.to,
                })
                .collect(),
            settled,
            failed: Vec::new(),
            asked_by: 0,
        }
    }

    /// A layout received in a [`KeyLayout`], and the plan that led to it.
    ///
    /// # Errors
    /// A text naming what is wrong: no parts, parts that do not cover the key space in order
    /// from 0 to `u64::MAX`, an empty part, or a server holding two parts.
    pub fn from_wire(w: &KeyLayout) -> Result<(Layout, Plan), String> {
        let parts: Vec<Part> = w
            .parts
            .iter()
            .map(|p| Part {
                range: Range {
                    begin: p.begin,
                    end: p.end,
                },
                owner: p.owner,
            })
            .collect();
        check_parts(w.epoch, &parts)?;
        let moves = w
            .moves
            .iter()
            .map(|m| Move {
                range: Range {
                    begin: m.begin,
                    end: m.end,
                },
                from: m.from,
                to: m.to,
            })
            .collect();
        Ok((
            Layout {
                epoch: w.epoch,
                parts,
            },
            Plan {
                epoch: w.epoch,
                moves,
            },
        ))
    }

    /// The servers owning keys, each once, in order of their first part.
    pub fn owners(&self) -> Vec<NodeId> {
        let mut seen = Vec::new();
        for p in &self.parts {
            if !seen.contains(&p.owner) {
                seen.push(p.owner);
            }
        }
        seen
    }

    /// Adding server `new`: the upper half of the widest part moves to it.
    ///
    /// # Errors
    /// When `new` already owns keys, or no part is wide enough to split (2 keys).
    pub fn plan_add(&self, new: NodeId) -> Result<Plan, String> {
        if self.owners().contains(&new) {
            return Err(format!("{} already owns keys", Node::describe(new)));
        }
        let widest = self
            .parts
            .iter()
            .max_by_key(|p| {
                (
                    p.range.end - p.range.begin,
                    std::cmp::Reverse(p.range.begin),
                )
            })
            .copied()
            .ok_or("the layout is empty")?;
        let Range { begin, end } = widest.range;
        if end - begin < 2 {
            return Err("no range is wide enough to split".into());
        }
        let mid = begin + (end - begin) / 2;
        Ok(Plan {
            epoch: self.epoch + 1,
            moves: vec![Move {
                range: Range { begin: mid, end },
                from: widest.owner,
                to: new,
            }],
        })
    }

    /// Draining server `gone`: each of its parts moves to the owner of the part before it (after
    /// it, for the first part).
    ///
    /// # Errors
    /// When `gone` owns no keys, or is the only server.
    pub fn plan_drain(&self, gone: NodeId) -> Result<Plan, String> {
        if !self.owners().contains(&gone) {
            return Err(format!("{} owns no keys", Node::describe(gone)));
        }
        if self.owners().len() == 1 {
            return Err(format!(
                "{} is the only server: nobody can take its keys",
                Node::describe(gone)
            ));
        }
        let moves = (0..self.parts.len())
            .filter(|&i| self.parts[i].owner == gone)
            .map(|i| {
                // Neighbours have different owners, so either one is another server.
                let heir = match i {
                    0 => self.parts[1].owner,
                    _ => self.parts[i - 1].owner,
                };
                Move {
                    range: self.parts[i].range,
                    from: gone,
                    to: heir,
                }
            })
            .collect();
        Ok(Plan {
            epoch: self.epoch + 1,
            moves,
        })
    }

    /// The layout after `plan`.
    ///
    /// # Errors
    /// When `plan` does not lead from this epoch, or a move's range is not owned by its `from`.
    pub fn apply(&self, plan: &Plan) -> Result<Layout, String> {
        if plan.epoch != self.epoch + 1 {
            return Err(format!(
                "the plan leads to epoch {}, this layout is at {}",
                plan.epoch, self.epoch
            ));
        }
        let mut parts = self.parts.clone();
        for m in &plan.moves {
            parts = reassign(&parts, *m)?;
        }
        Ok(Layout {
            epoch: plan.epoch,
            parts: merged(parts),
        })
    }

    /// The layout `plan` (which led to this one) started from: its moves undone.
    ///
    /// # Errors
    /// When `plan` did not lead to this epoch (or to epoch 0), or a move's range is not owned
    /// by its `to`.
    pub fn before(&self, plan: &Plan) -> Result<Layout, String> {
        if plan.epoch != self.epoch || self.epoch == 0 {
            return Err(format!(
                "the plan led to epoch {}, this layout is at {}",
                plan.epoch, self.epoch
            ));
        }
        let mut parts = self.parts.clone();
        for m in plan.moves.iter().rev() {
            let back = Move {
                range: m.range,
                from: m.to,
                to: m.from,
            };
            parts = reassign(&parts, back)?;
        }
        Ok(Layout {
            epoch: self.epoch - 1,
            parts: merged(parts),
        })
    }
}

/// Checks that `parts` (of layout `epoch`) cover the key space in order from 0 to
/// `u64::MAX`, none empty, no server holding two.
fn check_parts(epoch: u64, parts: &[Part]) -> Result<(), String> {
    let (first, last) = match (parts.first(), parts.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return Err(format!("key layout {} has no parts", epoch)),
    };
    if first.range.begin != 0 || last.range.end != u64::MAX {
        return Err(format!(
            "key layout {} does not cover the keys from 0 to u64::MAX",
            epoch
        ));
    }
    if let Some(p) = parts.iter().find(|p| p.range.begin >= p.range.end) {
        return Err(format!(
            "key layout {} has an empty part {:?}",
            epoch, p.range
        ));
    }
    if parts.windows(2).any(|x| x[0].range.end != x[1].range.begin) {
        return Err(format!("key layout {}'s parts are not contiguous", epoch));
    }
    for (i, p) in parts.iter().enumerate() {
        if parts[..i].iter().any(|q| q.owner == p.owner) {
            return Err(format!(
                "key layout {} gives server {} two parts",
                epoch, p.owner
            ));
        }
    }
    Ok(())
}

/// `parts` with `m.range` cut out of the part of `m.from` holding it and given to `m.to`.
fn reassign(parts: &[Part], m: Move) -> Result<Vec<Part>, String> {
    let holder = parts
        .iter()
        .position(|p| p.range.begin <= m.range.begin && m.range.end <= p.range.end)
        .filter(|&i| parts[i].owner == m.from)
        .ok_or_else(|| format!("{:?} is not one part of server {}", m.range, m.from))?;
    let p = parts[holder];
    let pieces = [
        Part {
            range: Range {
                begin: p.range.begin,
                end: m.range.begin,
            },
            owner: p.owner,
        },
        Part {
            range: m.range,
            owner: m.to,
        },
        Part {
            range: Range {
                begin: m.range.end,
                end: p.range.end,
            },
            owner: p.owner,
        },
    ];
    let mut out = parts[..holder].to_vec();
    out.extend(pieces.into_iter().filter(|q| q.range.begin < q.range.end));
    out.extend_from_slice(&parts[holder + 1..]);
    Ok(out)
}

/// `parts` with neighbours of one owner joined.
fn merged(parts: Vec<Part>) -> Vec<Part> {
    let mut out: Vec<Part> = Vec::with_capacity(parts.len());
    for p in parts {
        match out.last_mut() {
            Some(last) if last.owner == p.owner => last.range.end = p.range.end,
            _ => out.push(p),
        }
    }
    out
}
