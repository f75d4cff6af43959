//! A group's queued requests: one queue per (priority, class), best first.
//!
//! The best queue (the head) lives inline, so the request a poll takes is found from
//! the group record alone, and the scheduler can prefetch the head request's slot
//! before it gets there. Each queue is one contiguous buffer, so a group's requests of
//! one priority are read in memory order. The other queues wait in a small sorted
//! vector, best last, whose next queue can be prefetched too; past [`SORTED_MAX`] queues
//! (a group with that many distinct priorities) they move to a B-tree, so pushes and
//! polls stay O(log n) however many priorities a group holds.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::cmp::Reverse;

/// Within a group: highest priority first, then class 0 (others) before class 1 (start).
pub(crate) type BucketKey = (Reverse<i32>, u8);

/// A queued request inside a group.
#[derive(Debug)]
pub(crate) struct Entry<H> {
    pub(crate) seq: u64,
    pub(crate) handle: H,
}

/// Queues beyond which the waiting queues move from a sorted vector to a B-tree.
const SORTED_MAX: usize = 64;

type Queue<H> = VecDeque<Entry<H>>;

/// The queues after the best one.
#[derive(Debug)]
enum Rest<H> {
    /// Sorted by key, worst first: the best is popped from the end.
    Sorted(Vec<(BucketKey, Queue<H>)>),
    Tree(BTreeMap<BucketKey, Queue<H>>),
}

impl<H> Rest<H> {
    /// The queue of `key`, created empty if there is none.
    fn entry(&mut self, key: BucketKey) -> &mut Queue<H> {
        if let Rest::Sorted(v) = self
            && v.len() >= SORTED_MAX
            && v.binary_search_by(|(k, _)| key.cmp(k)).is_err()
        {
            let tree: BTreeMap<BucketKey, Queue<H>> = v.drain(..).collect();
            *self = Rest::Tree(tree);
        }
        match self {
            Rest::Sorted(v) => {
                let at = match v.binary_search_by(|(k, _)| key.cmp(k)) {
                    Ok(at) => at,
                    Err(at) => {
                        v.insert(at, (key, VecDeque::new()));
                        at
                    }
                };
                &mut v[at].1
            }
            Rest::Tree(t) => t.entry(key).or_default(),
        }
    }

    /// Adds the queue of a key that has none.
    fn insert(&mut self, key: BucketKey, queue: Queue<H>) {
        *self.entry(key) = queue;
    }

    fn pop_best(&mut self) -> Option<(BucketKey, Queue<H>)> {
        match self {
            Rest::Sorted(v) => v.pop(),
            Rest::Tree(t) => t.pop_first(),
        }
    }

    fn prefetch_best(&self) {
        if let Rest::Sorted(v) = self
            && let Some(best) = v.last()
        {
            throttle_core::prefetch(best);
        }
    }
}

/// One queue per key, best key first; each queue ordered by sequence number.
#[derive(Debug)]
pub(crate) struct Buckets<H> {
    head: Option<(BucketKey, Queue<H>)>,
    rest: Rest<H>,
}

impl<H> Default for Buckets<H> {
    fn default() -> Self {
        Buckets {
            head: None,
            rest: Rest::Sorted(Vec::new()),
        }
    }
}

impl<H> Buckets<H> {
    /// The best key, if anything is queued.
    pub(crate) fn first_key(&self) -> Option<BucketKey> {
        self.head.as_ref().map(|(k, _)| *k)
    }

    /// Adds an entry under `key`, at its sequence position.
    pub(crate) fn push(&mut self, key: BucketKey, entry: Entry<H>) {
        let queue = match &mut self.head {
            Some((k, q)) if *k == key => q,
            Some((k, _)) if *k < key => self.rest.entry(key),
            head => {
                // A new best key: the old head goes back among the others.
                if let Some((k, q)) = head.take() {
                    self.rest.insert(k, q);
                }
                &mut head.insert((key, VecDeque::new())).1
            }
        };
        match queue.back() {
            Some(last) if last.seq > entry.seq => {
                let at = queue.partition_point(|e| e.seq < entry.seq);
                queue.insert(at, entry);
            }
            _ => queue.push_back(entry),
        }
    }

    /// The entry [`take`](Self::take) would return.
    pub(crate) fn peek(&self, lifo: bool) -> Option<&Entry<H>> {
        let (_, q) = self.head.as_ref()?;
        if lifo { q.back() } else { q.front() }
    }

    /// Starts loading what [`take`](Self::take) will read into the CPU cache: the entry
    /// it takes and, should that empty the head queue, the next queue.
    pub(crate) fn prefetch(&self, lifo: bool) {
        if let Some((_, q)) = &self.head {
            if let Some(e) = if lifo { q.back() } else { q.front() } {
                throttle_core::prefetch(e);
            }
            if q.len() == 1 {
                self.rest.prefetch_best();
            }
        }
    }

    /// Takes the head queue's first (or, with `lifo`, last) entry, with its key.
    pub(crate) fn take(&mut self, lifo: bool) -> Option<(BucketKey, Entry<H>)> {
        let (key, q) = self.head.as_mut()?;
        let key = *key;
        let e = if lifo { q.pop_back() } else { q.pop_front() }?;
        if q.is_empty() {
            self.head = self.rest.pop_best();
        }
        Some((key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn key(p: i32, c: u8) -> BucketKey {
        (Reverse(p), c)
    }

    #[test]
    fn a_volatile_slot_is_one_cache_line() {
        assert_eq!(core::mem::size_of::<Entry<crate::Payload>>(), 64);
    }

    proptest! {
        /// Buckets hand entries out like a list sorted by (key, seq), FIFO or LIFO within
        /// a key.
        #[test]
        fn matches_a_sorted_list(
            ops in prop::collection::vec((any::<bool>(), -3i32..3, 0u8..2, 0u64..50), 1..200),
            lifo in any::<bool>(),
        ) {
            check_against_sorted_list(ops, lifo)?;
        }

        /// The same with more distinct priorities than the sorted vector of runs holds,
        /// so that the runs move to the B-tree.
        #[test]
        fn matches_a_sorted_list_with_many_priorities(
            ops in prop::collection::vec((prop::bool::weighted(0.3), -100i32..100, 0u8..2, 0u64..2000), 1..600),
            lifo in any::<bool>(),
        ) {
            check_against_sorted_list(ops, lifo)?;
        }
    }

    fn check_against_sorted_list(
        ops: Vec<(bool, i32, u8, u64)>,
        lifo: bool,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        {
            let mut b: Buckets<()> = Buckets::default();
            let mut model: Vec<(BucketKey, u64)> = Vec::new();
            for (take, p, c, seq) in ops {
                if take {
                    let best = model.iter().map(|(k, _)| *k).min();
                    let want = best.map(|k| {
                        let seqs = model.iter().filter(|(m, _)| *m == k).map(|(_, s)| *s);
                        let s = if lifo { seqs.max() } else { seqs.min() }.unwrap();
                        (k, s)
                    });
                    prop_assert_eq!(b.peek(lifo).map(|e| e.seq), want.map(|(_, s)| s));
                    prop_assert_eq!(b.first_key(), best);
                    let got = b.take(lifo).map(|(k, e)| (k, e.seq));
                    prop_assert_eq!(got, want);
                    if let Some(w) = want {
                        let at = model.iter().position(|m| *m == w).unwrap();
                        model.remove(at);
                    }
                } else if !model.iter().any(|(_, s)| *s == seq) {
                    b.push(key(p, c), Entry { seq, handle: () });
                    model.push((key(p, c), seq));
                }
            }
        }
        Ok(())
    }
}
