//! A group's queued requests: one queue per (priority, class), best first.
//!
//! The best queue (the head) lives inline, so the request a poll takes is found from
//! the group record alone, and the scheduler can prefetch the head request's slot
//! before it gets there. Each queue is a chain of blocks of the scheduler's shared
//! [`Blocks`], so a group's requests of one priority are read seven at a time in memory
//! order, and a queue that grows or empties moves nothing and calls no allocator. The
//! other queues wait in a small sorted vector, best last, whose next queue can be
//! prefetched too; past [`SORTED_MAX`] queues (a group with that many distinct
//! priorities) they move to a B-tree, so pushes and polls stay O(log n) however many
//! priorities a group holds.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::cmp::Reverse;

use crate::blocks::{Blocks, POOLS, Run};

/// Within a group: highest priority first, then class 0 (others) before class 1 (start).
pub(crate) type BucketKey = (Reverse<i32>, u8);

/// A queued request inside a group.
#[derive(Debug)]
pub(crate) struct Entry<H> {
    pub(crate) seq: u64,
    pub(crate) handle: H,
}

/// The blocks every group's queues are made of.
pub(crate) type EntryBlocks<H> = Blocks<Entry<H>>;

/// Queues beyond which the waiting queues move from a sorted vector to a B-tree.
const SORTED_MAX: usize = 64;

/// One key's entries in sequence order.
///
/// Entries nearly always come in sequence order (a push takes the next number), so they
/// go to the back of a run. One that comes late (a delayed request whose time has come
/// after newer ones were queued, a lease redelivered on reopen) goes into an ordered map
/// beside the run, and a take takes the better of the two ends; once the map is as large
/// as the run, a take merges it in. So a push or a take costs O(1) in the steady state
/// and O(log n) amortized at worst, where inserting a late entry into the run at its
/// place moved O(n) entries (a host with a large queue and some delayed requests took
/// quadratic time).
///
/// Its run's blocks belong to the scheduler's [`Blocks`]: a queue is emptied through
/// [`take`](Self::take) (which gives them back), never dropped holding entries.
#[derive(Debug)]
struct Queue<H> {
    run: Run,
    /// The pool of blocks its run takes from (see [`pool_of`]).
    pool: u8,
    /// Never empty when present (a pointer when absent: queues are many).
    #[allow(
        clippy::box_collection,
        reason = "one pointer in the queue, not three words"
    )]
    late: Option<Box<BTreeMap<u64, Entry<H>>>>,
}

impl<H> Queue<H> {
    fn new(key: BucketKey) -> Self {
        Queue {
            run: Run::default(),
            pool: pool_of(key),
            late: None,
        }
    }
}

/// The pool of blocks of a key's queues: one per priority and class (modulo the
/// pools), so that the queues a round of polls serves one after the other, the same
/// priority at other hosts, were carved from the same pages in the order they grew.
fn pool_of((Reverse(priority), class): BucketKey) -> u8 {
    ((priority as u32)
        .wrapping_mul(2)
        .wrapping_add(u32::from(class))
        % POOLS as u32) as u8
}

impl<H> Queue<H> {
    #[inline]
    fn is_empty(&self) -> bool {
        self.run.is_empty() && self.late.is_none()
    }

    #[inline]
    fn len(&self) -> usize {
        self.run.len() + self.late.as_ref().map_or(0, |l| l.len())
    }

    #[inline]
    fn push(&mut self, blocks: &mut EntryBlocks<H>, entry: Entry<H>) {
        match self.run.back(blocks) {
            Some(last) if last.seq > entry.seq => self.push_late(blocks, entry),
            _ => self.run.push_back(blocks, self.pool.into(), entry),
        }
    }

    #[inline(never)]
    fn push_late(&mut self, blocks: &mut EntryBlocks<H>, entry: Entry<H>) {
        let late = self.late.get_or_insert_default();
        if let Some(twin) = late.insert(entry.seq, entry) {
            // Sequence numbers are unique; should one come twice, both stay: the run
            // is rebuilt with the twin at its place.
            let mut run: VecDeque<Entry<H>> = self.run.take_all(blocks).into();
            let at = run.partition_point(|e| e.seq < twin.seq);
            run.insert(at, twin);
            for e in run {
                self.run.push_back(blocks, self.pool.into(), e);
            }
        }
    }

    /// Whether the next entry (the first, or with `lifo` the last) is the map's.
    #[inline]
    fn next_is_late(&self, blocks: &EntryBlocks<H>, lifo: bool) -> bool {
        let Some(late) = &self.late else {
            return false;
        };
        let run = if lifo {
            self.run.back(blocks)
        } else {
            self.run.front(blocks)
        };
        let late = if lifo {
            late.last_key_value()
        } else {
            late.first_key_value()
        };
        match (run, late) {
            (Some(r), Some((&l, _))) => (l > r.seq) == lifo,
            (None, _) => true,
            (Some(_), None) => false,
        }
    }

    #[inline]
    fn peek<'b>(&'b self, blocks: &'b EntryBlocks<H>, lifo: bool) -> Option<&'b Entry<H>> {
        if self.next_is_late(blocks, lifo) {
            let late = self.late.as_ref()?;
            if lifo {
                late.values().next_back()
            } else {
                late.values().next()
            }
        } else if lifo {
            self.run.back(blocks)
        } else {
            self.run.front(blocks)
        }
    }

    #[inline]
    fn take(&mut self, blocks: &mut EntryBlocks<H>, lifo: bool) -> Option<Entry<H>> {
        if self.late.is_some() {
            return self.take_late(blocks, lifo);
        }
        if lifo {
            self.run.pop_back(blocks)
        } else {
            self.run.pop_front(blocks)
        }
    }

    /// [`take`](Self::take) with entries in the map.
    #[inline(never)]
    fn take_late(&mut self, blocks: &mut EntryBlocks<H>, lifo: bool) -> Option<Entry<H>> {
        if let Some(late) = &self.late
            && late.len() >= self.run.len()
        {
            self.merge(blocks);
        }
        if self.next_is_late(blocks, lifo) {
            let late = self.late.as_mut()?;
            let e = if lifo {
                late.pop_last()
            } else {
                late.pop_first()
            };
            if late.is_empty() {
                self.late = None;
            }
            e.map(|(_, e)| e)
        } else if lifo {
            self.run.pop_back(blocks)
        } else {
            self.run.pop_front(blocks)
        }
    }

    /// Moves the map's entries into the run, in order: O(run + map), done only once the
    /// map is at least as large as the run, so each entry's one move pays for it.
    fn merge(&mut self, blocks: &mut EntryBlocks<H>) {
        let Some(late) = self.late.take() else {
            return;
        };
        let old = self.run.take_all(blocks);
        let pool = self.pool.into();
        merge_in_order(
            old.into_iter(),
            late.into_values(),
            |l, r| l.seq < r.seq,
            |e| {
                self.run.push_back(blocks, pool, e);
            },
        );
    }

    #[inline]
    fn prefetch(&self, blocks: &EntryBlocks<H>, lifo: bool) {
        if self.late.is_none() {
            self.run.prefetch(blocks, lifo);
        } else if let Some(e) = self.peek(blocks, lifo) {
            polite_throttle_core::hooks::prefetch(e);
        }
    }
}

/// Hands `old` and `late`, both in order, to `out` in one order: an entry of `late` goes
/// before an entry of `old` when `before(late, old)` (ties keep `old`'s first).
/// O(old + late).
pub(crate) fn merge_in_order<T>(
    old: impl Iterator<Item = T>,
    late: impl Iterator<Item = T>,
    before: impl Fn(&T, &T) -> bool,
    mut out: impl FnMut(T),
) {
    let mut old = old.peekable();
    let mut late = late.peekable();
    while let (Some(r), Some(l)) = (old.peek(), late.peek()) {
        let e = if before(l, r) {
            late.next()
        } else {
            old.next()
        };
        if let Some(e) = e {
            out(e);
        }
    }
    old.for_each(&mut out);
    late.for_each(out);
}

/// Merges `late`, in order, into `run`, in order (see [`merge_in_order`]).
pub(crate) fn merge_sorted<T>(
    run: &mut VecDeque<T>,
    late: impl ExactSizeIterator<Item = T>,
    before: impl Fn(&T, &T) -> bool,
) {
    if run.is_empty() {
        run.extend(late);
        return;
    }
    let mut merged = VecDeque::with_capacity(run.len() + late.len());
    let old = core::mem::take(run);
    merge_in_order(old.into_iter(), late, before, |e| merged.push_back(e));
    *run = merged;
}

/// The queues after the best one.
#[derive(Debug)]
enum Rest<H> {
    /// Sorted by key, worst first: the best is popped from the end.
    Sorted(Vec<(BucketKey, Queue<H>)>),
    Tree(BTreeMap<BucketKey, Queue<H>>),
}

/// Where `key` is (or would go) in a list sorted worst key first.
fn search<H>(v: &[(BucketKey, Queue<H>)], key: BucketKey) -> Result<usize, usize> {
    v.binary_search_by(|(k, _)| key.cmp(k))
}

impl<H> Rest<H> {
    /// The queue of `key`, created empty if there is none.
    fn entry(&mut self, key: BucketKey) -> &mut Queue<H> {
        if let Rest::Sorted(v) = self
            && v.len() >= SORTED_MAX
            && search(v, key).is_err()
        {
            let tree: BTreeMap<BucketKey, Queue<H>> = v.drain(..).collect();
            *self = Rest::Tree(tree);
        }
        match self {
            Rest::Sorted(v) => {
                let at = match search(v, key) {
                    Ok(at) => at,
                    Err(at) => {
                        v.insert(at, (key, Queue::new(key)));
                        at
                    }
                };
                &mut v[at].1
            }
            Rest::Tree(t) => t.entry(key).or_insert_with(|| Queue::new(key)),
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

    /// The queue of `key`, if it has one.
    fn get(&self, key: BucketKey) -> Option<&Queue<H>> {
        match self {
            Rest::Sorted(v) => search(v, key).ok().map(|at| &v[at].1),
            Rest::Tree(t) => t.get(&key),
        }
    }

    /// Starts loading the sorted vector's first lines (a push searches it).
    fn prefetch_sorted(&self) {
        if let Rest::Sorted(v) = self {
            // Its first 256 bytes, about a line apart (a binary search of a longer list
            // reads a few lines past them).
            let size = core::mem::size_of::<(BucketKey, Queue<H>)>().max(1);
            for e in v.iter().take(256 / size).step_by((64 / size).max(1)) {
                polite_throttle_core::hooks::prefetch(e);
            }
        }
    }

    fn prefetch_best(&self) {
        if let Rest::Sorted(v) = self
            && let Some(best) = v.last()
        {
            polite_throttle_core::hooks::prefetch(best);
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
    pub(crate) fn push(&mut self, blocks: &mut EntryBlocks<H>, key: BucketKey, entry: Entry<H>) {
        let queue = match &mut self.head {
            Some((k, q)) if *k == key => q,
            Some((k, _)) if *k < key => self.rest.entry(key),
            head => {
                // A new best key: the old head goes back among the others.
                if let Some((k, q)) = head.take() {
                    self.rest.insert(k, q);
                }
                &mut head.insert((key, Queue::new(key))).1
            }
        };
        queue.push(blocks, entry);
    }

    /// The entry [`take`](Self::take) would return.
    #[inline]
    pub(crate) fn peek<'b>(
        &'b self,
        blocks: &'b EntryBlocks<H>,
        lifo: bool,
    ) -> Option<&'b Entry<H>> {
        let (_, q) = self.head.as_ref()?;
        q.peek(blocks, lifo)
    }

    /// Starts loading what [`take`](Self::take) will read into the CPU cache: the entry
    /// it takes and, should that empty the head queue, the next queue.
    #[inline]
    pub(crate) fn prefetch(&self, blocks: &EntryBlocks<H>, lifo: bool) {
        if let Some((_, q)) = &self.head {
            q.prefetch(blocks, lifo);
            if q.len() == 1 {
                self.rest.prefetch_best();
            }
        }
    }

    /// Starts loading what [`push`](Self::push) under `key` will read, in two steps a few
    /// pushes apart: the first loads the last entry of the head queue when `key` is its
    /// key (a push compares with it and writes beside it) and otherwise the start of the
    /// other queues' list; the second, once that list has arrived, the last entry of
    /// `key`'s queue among them.
    #[inline]
    pub(crate) fn prefetch_push(&self, blocks: &EntryBlocks<H>, key: BucketKey, second: bool) {
        let Some((head_key, head)) = &self.head else {
            return;
        };
        match (*head_key == key, second) {
            (true, false) => head.run.prefetch(blocks, true),
            (true, true) => {}
            (false, false) => self.rest.prefetch_sorted(),
            (false, true) => {
                if let Some(q) = self.rest.get(key) {
                    q.run.prefetch(blocks, true);
                }
            }
        }
    }

    /// Starts loading the head queue's entry `n` places behind the one
    /// [`take`](Self::take) takes next (entries in the ordered map of late ones aside).
    #[inline]
    pub(crate) fn prefetch_nth(&self, blocks: &EntryBlocks<H>, lifo: bool, n: usize) {
        if let Some((_, q)) = &self.head {
            q.run.prefetch_nth(blocks, lifo, n);
        }
    }

    /// Takes the head queue's first (or, with `lifo`, last) entry, with its key.
    #[inline]
    pub(crate) fn take(
        &mut self,
        blocks: &mut EntryBlocks<H>,
        lifo: bool,
    ) -> Option<(BucketKey, Entry<H>)> {
        let (key, q) = self.head.as_mut()?;
        let key = *key;
        let e = q.take(blocks, lifo)?;
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

    proptest! {
        /// One key's queue serves like a sorted list of sequence numbers (lowest first,
        /// or with `lifo` highest first) when most come in order and some late (the
        /// run, the map and their merges all in play), and `peek` shows what `take`
        /// returns.
        #[test]
        fn a_queue_serves_like_a_sorted_list(
            lifo in any::<bool>(),
            ops in prop::collection::vec(prop::option::weighted(0.6, 0u64..1000), 1..400),
        ) {
            let mut b: Buckets<()> = Buckets::default();
            let mut blocks = Blocks::default();
            let mut model: Vec<u64> = Vec::new();
            let mut next = 0u64;
            for op in ops {
                match op {
                    // Mostly the next number (a fresh push), sometimes an old one (a
                    // delayed request or a redelivered lease coming back).
                    Some(old) if old % 3 == 0 && next > 0 => {
                        let seq = old % (next * 1000);
                        b.push(&mut blocks, key(0, 0), Entry { seq, handle: () });
                        model.push(seq);
                    }
                    Some(_) => {
                        next += 1;
                        b.push(&mut blocks, key(0, 0), Entry { seq: next * 1000, handle: () });
                        model.push(next * 1000);
                    }
                    None => {
                        model.sort_unstable();
                        let want = if lifo { model.pop() } else {
                            (!model.is_empty()).then(|| model.remove(0))
                        };
                        let peeked = b.peek(&blocks, lifo).map(|e| e.seq);
                        let got = b.take(&mut blocks, lifo).map(|(_, e)| e.seq);
                        prop_assert_eq!(peeked, got);
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(b.head.as_ref().map_or(0, |(_, q)| q.len()), model.len());
                if model.is_empty() {
                    prop_assert_eq!(blocks.used(), 0);
                }
            }
        }
    }

    /// Late entries (older than the run's last) go into the map, not into the run at
    /// their place, and come out in order either way.
    #[test]
    fn late_entries_leave_the_run_alone() {
        for lifo in [false, true] {
            let mut b: Buckets<()> = Buckets::default();
            let mut blocks = Blocks::default();
            for seq in (0..1000u64).rev() {
                b.push(&mut blocks, key(0, 0), Entry { seq, handle: () });
            }
            let (_, q) = b.head.as_ref().unwrap();
            assert_eq!((q.run.len(), q.len()), (1, 1000));
            let taken: Vec<u64> = core::iter::from_fn(|| b.take(&mut blocks, lifo))
                .map(|(_, e)| e.seq)
                .collect();
            let mut want: Vec<u64> = (0..1000).collect();
            if lifo {
                want.reverse();
            }
            assert_eq!(taken, want);
        }
    }

    /// A sequence number that comes twice (it should not) loses neither entry.
    #[test]
    fn a_repeated_sequence_number_keeps_both_entries() {
        let mut b: Buckets<u8> = Buckets::default();
        let mut blocks = Blocks::default();
        for (seq, handle) in [(5, 0), (3, 1), (3, 2), (4, 3)] {
            b.push(&mut blocks, key(0, 0), Entry { seq, handle });
        }
        let mut taken: Vec<(u64, u8)> = core::iter::from_fn(|| b.take(&mut blocks, false))
            .map(|(_, e)| (e.seq, e.handle))
            .collect();
        assert_eq!(taken.iter().map(|e| e.0).collect::<Vec<_>>(), [3, 3, 4, 5]);
        taken.sort();
        assert_eq!(taken, [(3, 1), (3, 2), (4, 3), (5, 0)]);
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
            let mut blocks = Blocks::default();
            let mut model: Vec<(BucketKey, u64)> = Vec::new();
            for (take, p, c, seq) in ops {
                if take {
                    let best = model.iter().map(|(k, _)| *k).min();
                    let want = best.map(|k| {
                        let seqs = model.iter().filter(|(m, _)| *m == k).map(|(_, s)| *s);
                        let s = if lifo { seqs.max() } else { seqs.min() }.unwrap();
                        (k, s)
                    });
                    prop_assert_eq!(b.peek(&blocks, lifo).map(|e| e.seq), want.map(|(_, s)| s));
                    prop_assert_eq!(b.first_key(), best);
                    let got = b.take(&mut blocks, lifo).map(|(k, e)| (k, e.seq));
                    prop_assert_eq!(got, want);
                    if let Some(w) = want {
                        let at = model.iter().position(|m| *m == w).unwrap();
                        model.remove(at);
                    }
                } else if !model.iter().any(|(_, s)| *s == seq) {
                    b.push(&mut blocks, key(p, c), Entry { seq, handle: () });
                    model.push((key(p, c), seq));
                }
            }
        }
        Ok(())
    }
}
