//! The candidate order: ranks packed into one integer, and the tiered candidate queues.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::buckets::merge_sorted;

/// Orders candidates and parked groups, packed into one integer so that heap
/// comparisons are cheap. Greater is better (a heap's top). From the most significant
/// bits: priority, other requests before start requests, lower load (in 1/65535ths),
/// larger quota amount (the top 16 bits of its `f32` pattern, which order like the
/// numbers), least recently served; then the lower group number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    pub(super) key: u128,
    pub(super) group: Reverse<u32>,
}

/// A total quota amount as it ranks: the top 16 bits of its `f32` pattern, which order
/// like the numbers (0 for none).
pub(super) fn amount_key(amount: f64) -> u16 {
    if amount.is_finite() && amount > 0.0 {
        ((amount as f32).to_bits() >> 16) as u16
    } else {
        0
    }
}

/// Everything of a [`Rank`] but recency: priority, other requests
/// before start requests, lower load, larger quota amount (`amount` is
/// [`amount_key`]'s).
#[inline]
pub(super) fn tier_key(priority: i32, class: u8, load: f64, amount: u16) -> u128 {
    let priority = (i64::from(priority) - i64::from(i32::MIN)) as u128;
    let other = u128::from(class == 0);
    let load = u128::from(65_535 - (load.clamp(0.0, 1.0) * 65_535.0 + 0.5) as u32);
    (priority << 33) | (other << 32) | (load << 16) | u128::from(amount)
}

impl Rank {
    /// `tier` is [`tier_key`]'s.
    pub(super) fn new(tier: u128, last_served: u64, group: u32) -> Self {
        let recent = u128::from((u64::MAX >> 1) - last_served.min(u64::MAX >> 1));
        Rank {
            key: (tier << 63) | recent,
            group: Reverse(group),
        }
    }

    pub(super) fn group(&self) -> u32 {
        self.group.0
    }
}

/// Candidates of the throttling-aware policy: tiers (priority, class, load, amount) from
/// best to worst, each a round-robin queue ordered by when its groups were last served.
/// Serving a group moves it to the back of its tier, so a poll costs O(1) plus a lookup
/// among the few tiers (a heap over all groups would cost a cache miss per level). The
/// best tier is kept apart from the others, even while empty: a served group usually
/// goes back to it, and then no tree is searched.
#[derive(Default)]
pub(super) struct Tiers {
    pub(super) best: Option<(u128, TierQueue)>,
    rest: BTreeMap<Reverse<u128>, TierQueue>,
    /// Emptied queues kept for reuse: groups move between tiers all the time.
    spare: Vec<TierQueue>,
}

/// A tier's entry: (last served, group, epoch of the entry). Entries are served in
/// (last served, group) order; the epoch tells a live entry from a stale one.
type TierEntry = (u64, u32, u32);

/// One tier's groups in serving order.
///
/// A served group is the most recently served, so it joins at the back: those entries
/// form a run in order, a plain FIFO. A group that joins out of order (one never served,
/// or one re-ranked into this tier while others were served since) goes into an ordered
/// set beside the run, and the front is the lesser of the two fronts; once the set is
/// at least as large as the run, the next pop merges it into the run. So a join or a pop
/// costs O(1) in the steady state and O(log n) amortized at worst, where inserting into
/// the run at its place moved O(n) entries: pushes at many hosts with mixed priorities
/// (each raising a group into a higher tier) took quadratic time.
#[derive(Default)]
pub(super) struct TierQueue {
    pub(super) run: VecDeque<TierEntry>,
    /// Never empty when present; boxed, so that a queue stays as small as its run
    /// (queues move in and out of the tier map and the spares all the time).
    #[allow(
        clippy::box_collection,
        reason = "one pointer in the queue, not three words"
    )]
    pub(super) late: Option<Box<BTreeSet<TierEntry>>>,
}

/// The serving order of an entry (its epoch left out).
pub(super) fn serve_key(e: &TierEntry) -> (u64, u32) {
    (e.0, e.1)
}

impl TierQueue {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.run.is_empty() && self.late.is_none()
    }

    #[inline]
    pub(super) fn push(&mut self, entry: TierEntry) {
        match self.run.back() {
            Some(back) if serve_key(back) > serve_key(&entry) => self.push_late(entry),
            _ => self.run.push_back(entry),
        }
    }

    #[inline(never)]
    fn push_late(&mut self, entry: TierEntry) {
        self.late.get_or_insert_default().insert(entry);
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<TierEntry> {
        if self.late.is_some() {
            return self.pop_front_late();
        }
        self.run.pop_front()
    }

    /// [`pop_front`](Self::pop_front) with entries in the ordered set.
    #[inline(never)]
    fn pop_front_late(&mut self) -> Option<TierEntry> {
        let late = self.late.as_mut()?;
        if late.len() >= self.run.len() {
            self.merge();
        } else if let (Some(l), Some(r)) = (late.first(), self.run.front())
            && serve_key(l) < serve_key(r)
        {
            // (Ties go to the run.)
            let e = late.pop_first();
            if late.is_empty() {
                self.late = None;
            }
            return e;
        }
        self.run.pop_front()
    }

    /// Moves the ordered set's entries into the run, in order. It costs O(run + set)
    /// and is done only once the set is at least as large as the run, so each entry's
    /// one move pays for it, and the polls after it take the run's fast path.
    fn merge(&mut self) {
        let Some(late) = self.late.take() else {
            return;
        };
        merge_sorted(&mut self.run, (*late).into_iter(), |l, r| {
            serve_key(l) < serve_key(r)
        });
    }

    /// The entry `n` places behind the front.
    #[inline]
    pub(super) fn get(&self, n: usize) -> Option<TierEntry> {
        match &self.late {
            None => self.run.get(n).copied(),
            Some(late) => self.get_merged(late, n),
        }
    }

    /// [`get`](Self::get) with entries in the ordered set.
    #[inline(never)]
    fn get_merged(&self, late: &BTreeSet<TierEntry>, n: usize) -> Option<TierEntry> {
        let (mut run, mut late) = (self.run.iter().peekable(), late.iter().peekable());
        let mut left = n;
        loop {
            let take_late = match (late.peek(), run.peek()) {
                (Some(l), Some(r)) => serve_key(l) < serve_key(r),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            let e = if take_late { late.next() } else { run.next() };
            if left == 0 {
                return e.copied();
            }
            left -= 1;
        }
    }
}

impl Tiers {
    /// Queues `entry` in `tier`. A group usually goes back to the best tier it was
    /// taken from (a served group is the most recently served, so it lands at the back
    /// of the run): one comparison and one push, no tree searched.
    #[inline]
    pub(super) fn push(&mut self, tier: u128, entry: TierEntry) {
        match &mut self.best {
            Some((t, q)) if *t == tier => q.push(entry),
            _ => self.push_elsewhere(tier, entry),
        }
    }

    /// [`push`](Self::push) to a tier other than the best one.
    #[inline(never)]
    fn push_elsewhere(&mut self, tier: u128, entry: TierEntry) {
        let queue = match &mut self.best {
            Some((t, _)) if *t > tier => {
                let spare = &mut self.spare;
                self.rest
                    .entry(Reverse(tier))
                    .or_insert_with(|| spare.pop().unwrap_or_default())
            }
            best => {
                debug_assert!(best.as_ref().is_none_or(|(t, _)| *t < tier));
                // A new best tier: the old one goes back among the others (or, left
                // empty by a pop, among the spares).
                match best.take() {
                    Some((_, q)) if q.is_empty() => self.spare.push(q),
                    Some((t, q)) => {
                        self.rest.insert(Reverse(t), q);
                    }
                    None => {}
                }
                let queue = self.spare.pop().unwrap_or_default();
                &mut best.insert((tier, queue)).1
            }
        };
        queue.push(entry);
    }

    /// The group `n` places behind the best entry of the best tier (`n = 0`: the next
    /// one [`pop`](Self::pop) returns, if still a candidate by then).
    #[inline]
    pub(super) fn upcoming(&self, n: usize) -> Option<u32> {
        let (_, queue) = self.best.as_ref()?;
        queue.get(n).map(|(_, group, _)| group)
    }

    /// The best entry: (tier, group, epoch). The best tier stays in place when this
    /// empties it: the group just taken usually comes back to it (with few groups, to
    /// an empty queue each time), and a pop that finds it empty moves the next tier up.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<(u128, u32, u32)> {
        loop {
            let (tier, queue) = self.best.as_mut()?;
            if let Some((_, group, epoch)) = queue.pop_front() {
                return Some((*tier, group, epoch));
            }
            self.next_best();
        }
    }

    /// The best tier is empty: the next one takes its place.
    #[inline(never)]
    fn next_best(&mut self) {
        let next = self.rest.pop_first().map(|(Reverse(t), q)| (t, q));
        if let Some((_, emptied)) = core::mem::replace(&mut self.best, next) {
            self.spare.push(emptied);
        }
    }
}
