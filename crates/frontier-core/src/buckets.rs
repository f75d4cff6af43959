//! A group's queued requests: one queue per (priority, class), best first.
//!
//! The best queue (the head) lives inline, so the request a poll takes is found from
//! the group record alone: no tree node is read on the hot path, and the scheduler can
//! prefetch the head request's slot before it gets there. The other queues wait in a
//! B-tree and the best of them becomes the head when the head runs dry, so pushes and
//! polls stay O(log n) however many priorities a group holds.

use alloc::collections::{BTreeMap, VecDeque};
use core::cmp::Reverse;

/// Within a group: highest priority first, then class 0 (others) before class 1 (start).
pub(crate) type BucketKey = (Reverse<i32>, u8);

/// A queued request inside a group.
#[derive(Debug)]
pub(crate) struct Entry<H> {
    pub(crate) seq: u64,
    pub(crate) handle: H,
}

/// One queue per key, best key first; each queue ordered by sequence number.
#[derive(Debug)]
pub(crate) struct Buckets<H> {
    head: Option<(BucketKey, VecDeque<Entry<H>>)>,
    rest: BTreeMap<BucketKey, VecDeque<Entry<H>>>,
}

impl<H> Default for Buckets<H> {
    fn default() -> Self {
        Buckets {
            head: None,
            rest: BTreeMap::new(),
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
            Some((k, _)) if *k < key => self.rest.entry(key).or_default(),
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

    /// Takes the head queue's first (or, with `lifo`, last) entry, with its key.
    pub(crate) fn take(&mut self, lifo: bool) -> Option<(BucketKey, Entry<H>)> {
        let (key, q) = self.head.as_mut()?;
        let key = *key;
        let e = if lifo { q.pop_back() } else { q.pop_front() }?;
        if q.is_empty() {
            self.head = self.rest.pop_first();
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
    }
}
