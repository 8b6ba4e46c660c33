//! The scheduler's book of open barriers: who arrived, who is missing, when it expires.
//! Sans-IO: the postoffice feeds arrivals and clock ticks and sends what this returns.

use crate::wire::{BarrierFailure, Node, NodeId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

struct Open {
    arrived: BTreeSet<NodeId>,
    members: BTreeSet<NodeId>,
    deadline: Option<Instant>,
    /// The first arrival.
    since: Instant,
    /// Members that arrived after their application failed, with its error.
    failed: BTreeMap<NodeId, String>,
}

/// What the scheduler must do about a barrier.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The barrier's group.
    pub group: i32,
    /// Nodes to answer.
    pub release: Vec<NodeId>,
    /// `None`: the barrier completed; else why it failed.
    pub failure: Option<Failure>,
}

/// A failed barrier: the kind (sent typed) and a text naming the nodes at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Why it failed.
    pub kind: BarrierFailure,
    /// What to tell the members, naming the missing, lost, stray or failed nodes.
    pub text: String,
}

/// A barrier's failure naming the members whose application `failed` (`None` when none did).
fn failed_members(failed: &BTreeMap<NodeId, String>) -> Option<Failure> {
    (!failed.is_empty()).then(|| Failure {
        kind: BarrierFailure::Failed,
        text: failed
            .iter()
            .map(|(&id, why)| format!("{} failed: {why}", Node::describe(id)))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// Open barriers by group.
#[derive(Default)]
pub struct BarrierBook {
    open: BTreeMap<i32, Open>,
}

fn names(ids: impl IntoIterator<Item = NodeId>) -> String {
    ids.into_iter()
        .map(Node::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

impl BarrierBook {
    /// Each open barrier's group, its members that have not arrived, and when it opened.
    pub fn missing(&self) -> Vec<(i32, Vec<NodeId>, Instant)> {
        self.open
            .iter()
            .map(|(&g, o)| {
                (
                    g,
                    o.members.difference(&o.arrived).copied().collect(),
                    o.since,
                )
            })
            .collect()
    }

    /// Records that `node` reached the barrier of `group` whose members are `members`.
    /// `timeout` (`None`: wait while members are alive) counts from the first arrival.
    /// Returns the outcome when the barrier completes (or the node is not a member).
    pub fn arrive(
        &mut self,
        group: i32,
        node: NodeId,
        members: &[NodeId],
        timeout: Option<Duration>,
        now: Instant,
    ) -> Option<Outcome> {
        self.arrive_after(group, node, members, timeout, now, None)
    }

    /// As [`arrive`](Self::arrive), `failed` holding the error of `node`'s application when it
    /// failed: the barrier then completes as a failure ([`BarrierFailure::Failed`]) naming
    /// every member that failed and why, so that no node of the job ends as if it succeeded.
    pub fn arrive_after(
        &mut self,
        group: i32,
        node: NodeId,
        members: &[NodeId],
        timeout: Option<Duration>,
        now: Instant,
        failed: Option<String>,
    ) -> Option<Outcome> {
        if !members.contains(&node) {
            return Some(Outcome {
                group,
                release: vec![node],
                failure: Some(Failure {
                    kind: BarrierFailure::NotMember,
                    text: format!(
                        "{} asked for a barrier of group {group}, which does not include it",
                        Node::describe(node)
                    ),
                }),
            });
        }
        let open = self.open.entry(group).or_insert_with(|| Open {
            arrived: BTreeSet::new(),
            members: members.iter().copied().collect(),
            deadline: timeout.map(|t| now + t),
            since: now,
            failed: BTreeMap::new(),
        });
        open.arrived.insert(node);
        if let Some(why) = failed {
            open.failed.insert(node, why);
        }
        if open.arrived.is_superset(&open.members) {
            let open = self.open.remove(&group)?;
            let failure = failed_members(&open.failed);
            return Some(Outcome {
                group,
                release: open.members.into_iter().collect(),
                failure,
            });
        }
        None
    }

    /// The open barrier of `group`, if any, completed elsewhere (a rebuilt scheduler learnt
    /// its members passed it): its arrivals are released, as a failure naming the members
    /// whose application failed, if any.
    pub fn complete(&mut self, group: i32) -> Option<Outcome> {
        let open = self.open.remove(&group)?;
        Some(Outcome {
            group,
            release: open.arrived.into_iter().collect(),
            failure: failed_members(&open.failed),
        })
    }

    /// `node` joined the running job with role group `role` ([`crate::wire::Role::group`]): a
    /// member of every open barrier of a group including it from now on (it arrives there
    /// when its application calls that barrier).
    pub fn join(&mut self, node: NodeId, role: i32) {
        for (_, open) in self.open.iter_mut().filter(|(g, _)| *g & role != 0) {
            open.members.insert(node);
        }
    }

    /// `node` is gone and will be replaced: its arrivals no longer count; its
    /// replacement arrives again.
    pub fn leave(&mut self, node: NodeId) {
        for open in self.open.values_mut() {
            open.arrived.remove(&node);
            open.failed.remove(&node);
        }
    }

    /// Fails every open barrier that is past its deadline or waits for a node in `lost`.
    pub fn check(&mut self, now: Instant, lost: &BTreeSet<NodeId>) -> Vec<Outcome> {
        let mut out = Vec::new();
        let groups: Vec<i32> = self.open.keys().copied().collect();
        for group in groups {
            let Some(open) = self.open.get(&group) else {
                continue;
            };
            let missing: Vec<NodeId> = open.members.difference(&open.arrived).copied().collect();
            let dead: Vec<NodeId> = missing
                .iter()
                .copied()
                .filter(|m| lost.contains(m))
                .collect();
            let failure = if !dead.is_empty() {
                Some(Failure {
                    kind: BarrierFailure::Lost,
                    text: format!(
                        "barrier of group {group} cannot complete: lost {}",
                        names(dead)
                    ),
                })
            } else if open.deadline.is_some_and(|d| now >= d) {
                Some(Failure {
                    kind: BarrierFailure::Timeout,
                    text: format!(
                        "barrier of group {group}: no answer from {}",
                        names(missing)
                    ),
                })
            } else {
                None
            };
            if let Some(mut failure) = failure {
                if let Some(open) = self.open.remove(&group) {
                    for (&id, why) in &open.failed {
                        failure
                            .text
                            .push_str(&format!("; {} failed: {why}", Node::describe(id)));
                    }
                    out.push(Outcome {
                        group,
                        release: open.arrived.into_iter().collect(),
                        failure: Some(failure),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_that_failed_fails_the_barrier_for_all_once_it_completes() {
        let mut b = BarrierBook::default();
        let now = Instant::now();
        let members = [1, 8, 9, 11];
        assert_eq!(
            b.arrive_after(0, 9, &members, None, now, Some("no such file".into())),
            None,
            "the others are still to come"
        );
        assert_eq!(b.arrive(0, 8, &members, None, now), None);
        assert_eq!(b.arrive(0, 11, &members, None, now), None);
        let done = b.arrive(0, 1, &members, None, now).expect("complete");
        assert_eq!(done.release, vec![1, 8, 9, 11]);
        let f = done.failure.expect("failed");
        assert_eq!(f.kind, BarrierFailure::Failed);
        assert_eq!(f.text, "worker rank 0 (id 9) failed: no such file");
    }

    #[test]
    fn a_failed_member_replaced_no_longer_fails_the_barrier() {
        let mut b = BarrierBook::default();
        let now = Instant::now();
        let members = [1, 8, 9];
        b.arrive_after(0, 9, &members, None, now, Some("disk full".into()));
        b.leave(9);
        assert_eq!(b.arrive(0, 8, &members, None, now), None);
        assert_eq!(b.arrive(0, 1, &members, None, now), None);
        let done = b.arrive(0, 9, &members, None, now).expect("complete");
        assert_eq!(done.failure, None, "the replacement did not fail");
    }

    #[test]
    fn completes_when_all_members_arrive() {
        let mut b = BarrierBook::default();
        let now = Instant::now();
        let members = [1, 8, 9];
        assert_eq!(b.arrive(7, 9, &members, None, now), None);
        assert_eq!(b.arrive(7, 8, &members, None, now), None);
        assert_eq!(
            b.arrive(7, 9, &members, None, now),
            None,
            "a repeat counts once"
        );
        let done = b.arrive(7, 1, &members, None, now).expect("complete");
        assert_eq!(done.release, vec![1, 8, 9]);
        assert_eq!(done.failure, None);
    }

    #[test]
    fn deadline_names_missing_nodes() {
        let mut b = BarrierBook::default();
        let t0 = Instant::now();
        let members = [9, 11, 13];
        b.arrive(4, 9, &members, Some(Duration::from_secs(5)), t0);
        assert!(b
            .check(t0 + Duration::from_secs(4), &BTreeSet::new())
            .is_empty());
        let out = b.check(t0 + Duration::from_secs(5), &BTreeSet::new());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].release, vec![9]);
        let f = out[0].failure.as_ref().expect("failed");
        assert_eq!(f.kind, BarrierFailure::Timeout);
        assert_eq!(
            f.text,
            "barrier of group 4: no answer from worker rank 1 (id 11), worker rank 2 (id 13)"
        );
    }

    #[test]
    fn lost_member_fails_a_barrier_without_deadline() {
        let mut b = BarrierBook::default();
        let t0 = Instant::now();
        b.arrive(6, 8, &[8, 9], None, t0);
        let lost: BTreeSet<NodeId> = [9].into_iter().collect();
        let out = b.check(t0 + Duration::from_secs(3600), &lost);
        let f = out[0].failure.as_ref().expect("failed");
        assert_eq!(f.kind, BarrierFailure::Lost);
        assert_eq!(
            f.text,
            "barrier of group 6 cannot complete: lost worker rank 0 (id 9)"
        );
    }

    #[test]
    fn a_member_that_left_must_arrive_again() {
        let mut b = BarrierBook::default();
        let t0 = Instant::now();
        b.arrive(7, 8, &[1, 8, 9], None, t0);
        b.arrive(7, 9, &[1, 8, 9], None, t0);
        b.leave(8);
        assert_eq!(b.arrive(7, 1, &[1, 8, 9], None, t0), None, "8 left");
        let done = b.arrive(7, 8, &[1, 8, 9], None, t0).expect("complete");
        assert_eq!(done.release, vec![1, 8, 9]);
    }

    #[test]
    fn non_member_is_refused() {
        let mut b = BarrierBook::default();
        let out = b
            .arrive(2, 9, &[8, 10], None, Instant::now())
            .expect("refused");
        let f = out.failure.expect("refused");
        assert_eq!(f.kind, BarrierFailure::NotMember);
        assert!(f.text.contains("does not include it"), "{}", f.text);
    }
}
