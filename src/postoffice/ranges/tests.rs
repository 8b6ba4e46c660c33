use super::layout::{Layout, Move, Plan};
use crate::postoffice::range::Range;
use proptest::prelude::*;

mod job;

/// Every key of `l` has one owner: parts contiguous from 0 to `u64::MAX`, neighbours distinct.
fn check_layout(l: &Layout) -> Result<(), TestCaseError> {
    let p = l.parts();
    prop_assert_eq!(p[0].range.begin, 0);
    prop_assert_eq!(p[p.len() - 1].range.end, u64::MAX);
    for w in p.windows(2) {
        prop_assert_eq!(w[0].range.end, w[1].range.begin);
        prop_assert!(w[0].owner != w[1].owner, "neighbours merged");
    }
    for q in p {
        prop_assert!(q.range.begin < q.range.end);
        prop_assert_eq!(l.owner_of(q.range.begin), q.owner);
        prop_assert_eq!(l.owner_of(q.range.end - 1), q.owner);
    }
    Ok(())
}

/// What `plan` changes: a moved key goes from its move's `from` to its `to`, any other key
/// keeps its owner.
fn check_plan(
    before: &Layout,
    plan: &Plan,
    after: &Layout,
    probes: &[u64],
) -> Result<(), TestCaseError> {
    for &k in probes {
        match plan.moves.iter().find(|m| {
            m.range.begin <= k && (k < m.range.end || (k == u64::MAX && m.range.end == u64::MAX))
        }) {
            Some(m) => {
                prop_assert_eq!(before.owner_of(k), m.from);
                prop_assert_eq!(after.owner_of(k), m.to);
            }
            None => prop_assert_eq!(before.owner_of(k), after.owner_of(k)),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Servers added and drained in any order: every step leaves every key one owner, moves
    /// only what its plan says, and never drains the last server.
    #[test]
    fn adds_and_drains_keep_one_owner_per_key(
        start in 1usize..5,
        changes in proptest::collection::vec((any::<bool>(), 0usize..8), 1..24),
        probes in proptest::collection::vec(any::<u64>(), 64),
    ) {
        let mut probes = probes;
        probes.extend([0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]);
        let first: Vec<i32> = (0..start as i32).map(|r| 8 + 2 * r).collect();
        let mut layout = Layout::even(&first);
        check_layout(&layout)?;
        let mut next_id = 8 + 2 * start as i32;
        for (add, pick) in changes {
            let owners = layout.owners();
            let plan = if add {
                next_id += 2;
                layout.plan_add(next_id).map_err(TestCaseError::fail)?
            } else {
                match layout.plan_drain(owners[pick % owners.len()]) {
                    Ok(p) => p,
                    Err(e) => {
                        prop_assert_eq!(owners.len(), 1, "{}", e);
                        continue;
                    }
                }
            };
            let after = layout.apply(&plan).map_err(TestCaseError::fail)?;
            prop_assert_eq!(after.epoch(), layout.epoch() + 1);
            check_layout(&after)?;
            check_plan(&layout, &plan, &after, &probes)?;
            // Each server holds one part at most, and the layout survives the wire.
            let wire = after.to_wire(&plan, None);
            let (back, back_plan) = Layout::from_wire(&wire).map_err(TestCaseError::fail)?;
            prop_assert_eq!(&back, &after);
            prop_assert_eq!(&back_plan, &plan);
            prop_assert!(layout.apply(&plan).is_ok() && after.apply(&plan).is_err(), "a plan applies once");
            // A node that learns the layout mid-move starts from the one before it.
            prop_assert_eq!(&after.before(&plan).map_err(TestCaseError::fail)?, &layout);
            layout = after;
        }
    }
}

#[test]
fn adding_to_two_servers_splits_one_half() {
    let l = Layout::even(&[8, 10]);
    let plan = l.plan_add(12).expect("plan");
    // The last range is the widest: it owns u64::MAX too.
    let begin = u64::MAX / 2 + (u64::MAX - u64::MAX / 2) / 2;
    let range = Range {
        begin,
        end: u64::MAX,
    };
    assert_eq!(
        plan.moves,
        vec![Move {
            range,
            from: 10,
            to: 12
        }]
    );
    let after = l.apply(&plan).expect("apply");
    assert_eq!(after.owners(), vec![8, 10, 12]);
    assert_eq!(after.owner_of(u64::MAX), 12);
    assert_eq!(after.owner_of(begin - 1), 10);
    assert_eq!(
        l.plan_drain(12).unwrap_err(),
        "server rank 2 (id 12) owns no keys"
    );
    assert_eq!(
        Layout::even(&[8]).plan_drain(8).unwrap_err(),
        "server rank 0 (id 8) is the only server: nobody can take its keys"
    );
    let back = after
        .apply(&after.plan_drain(12).expect("drain"))
        .expect("apply");
    assert_eq!(
        back.parts(),
        l.parts(),
        "draining the added server restores the layout"
    );
}
