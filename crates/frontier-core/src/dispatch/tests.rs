//! The group record's size, and the tier queues' order against a sorted list.

use super::groups::Group;
use super::tiers::{TierQueue, serve_key};
use alloc::vec::Vec;
use proptest::prelude::*;

/// A group's record spans three cache lines: one more, at 10,000 hosts, made the
/// poll loop measurably slower (its records no longer fit the caches as well).
#[test]
fn a_group_record_is_three_cache_lines() {
    assert!(core::mem::size_of::<Group<crate::Payload>>() <= 192);
}

proptest! {
    /// A tier queue serves like a list sorted by (last served, group), whatever
    /// order its entries join in, and `get(n)` shows the entry n places behind the
    /// front.
    #[test]
    fn a_tier_queue_serves_like_a_sorted_list(
        ops in prop::collection::vec(
            prop_oneof![
                3 => (0u64..40, 0u32..20).prop_map(Some),
                2 => Just(None),
            ],
            1..300,
        ),
    ) {
        let mut queue = TierQueue::default();
        let mut model: Vec<(u64, u32)> = Vec::new();
        // The queue's entries keep their serving order apart from their epoch, so an
        // epoch per join keeps every entry distinct, as the dispatcher's are.
        for (epoch, op) in ops.into_iter().enumerate() {
            match op {
                Some((ls, g)) => {
                    queue.push((ls, g, epoch as u32));
                    let at = model.partition_point(|&e| e <= (ls, g));
                    model.insert(at, (ls, g));
                }
                None => {
                    let got = queue.pop_front().map(|e| serve_key(&e));
                    let want = (!model.is_empty()).then(|| model.remove(0));
                    prop_assert_eq!(got, want);
                }
            }
            for n in 0..4 {
                prop_assert_eq!(queue.get(n).map(|e| serve_key(&e)), model.get(n).copied());
            }
            prop_assert_eq!(queue.is_empty(), model.is_empty());
        }
    }
}

/// Groups joining a tier in descending order (each one ahead of all the others)
/// go into the ordered set, not into the run at its front.
#[test]
fn groups_joining_out_of_order_leave_the_run_alone() {
    let mut queue = TierQueue::default();
    for g in (0..1000u32).rev() {
        queue.push((0, g, 0));
    }
    assert_eq!(queue.run.len(), 1);
    assert_eq!(queue.late.as_ref().map(|l| l.len()), Some(999));
    let served: Vec<u32> = core::iter::from_fn(|| queue.pop_front())
        .map(|e| e.1)
        .collect();
    assert_eq!(served, (0..1000).collect::<Vec<_>>());
}
