//! A group's queued requests: one run per (priority, class), best first.
//!
//! All the entries of a group share one slab (a vector whose free slots are reused), and
//! each run is a doubly linked list through it in sequence order. So runs come and go as
//! priorities drain without allocating or freeing anything: a poll that empties a run
//! costs no trip to the allocator, whose bookkeeping would touch memory nobody else
//! needs. The best run's ends live inline, so the request a poll takes is found from the
//! group record and the slab alone, and the scheduler can prefetch its slot. The other
//! runs wait in a small sorted vector, best last, whose next run can be prefetched too;
//! past [`SORTED_MAX`] runs (a group with that many distinct priorities) they move to a
//! B-tree, so pushes and polls stay O(log n) however many priorities a group holds.

use alloc::collections::BTreeMap;
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

/// No slot.
const NIL: u32 = u32::MAX;

/// A place in the slab: a queued entry and its neighbours in its run, or a free place
/// (`entry` is `None`, `next` the next free one).
#[derive(Debug)]
struct Slot<H> {
    prev: u32,
    next: u32,
    entry: Option<Entry<H>>,
}

/// A run's ends: its lowest and highest sequence numbers' slots.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: u32,
    last: u32,
}

/// Runs beyond which the waiting runs move from a sorted vector to a B-tree.
const SORTED_MAX: usize = 64;

/// The runs after the best one.
#[derive(Debug)]
enum Runs {
    /// Sorted by key, worst first: the best is popped from the end.
    Sorted(Vec<(BucketKey, Run)>),
    Tree(BTreeMap<BucketKey, Run>),
}

impl Runs {
    fn get_mut(&mut self, key: &BucketKey) -> Option<&mut Run> {
        match self {
            Runs::Sorted(v) => match v.binary_search_by(|(k, _)| key.cmp(k)) {
                Ok(i) => Some(&mut v[i].1),
                Err(_) => None,
            },
            Runs::Tree(t) => t.get_mut(key),
        }
    }

    /// Adds a run for a key that has none.
    fn insert(&mut self, key: BucketKey, run: Run) {
        match self {
            Runs::Sorted(v) if v.len() < SORTED_MAX => {
                let at = v.partition_point(|(k, _)| *k > key);
                v.insert(at, (key, run));
            }
            Runs::Sorted(v) => {
                let mut tree: BTreeMap<BucketKey, Run> = v.drain(..).collect();
                tree.insert(key, run);
                *self = Runs::Tree(tree);
            }
            Runs::Tree(t) => {
                t.insert(key, run);
            }
        }
    }

    fn pop_best(&mut self) -> Option<(BucketKey, Run)> {
        match self {
            Runs::Sorted(v) => v.pop(),
            Runs::Tree(t) => t.pop_first(),
        }
    }

    fn prefetch_best(&self) {
        if let Runs::Sorted(v) = self
            && let Some(best) = v.last()
        {
            throttle_core::prefetch(best);
        }
    }
}

/// One run per key, best key first; each run ordered by sequence number.
#[derive(Debug)]
pub(crate) struct Buckets<H> {
    head: Option<(BucketKey, Run)>,
    rest: Runs,
    slots: Vec<Slot<H>>,
    free: u32,
}

impl<H> Default for Buckets<H> {
    fn default() -> Self {
        Buckets {
            head: None,
            rest: Runs::Sorted(Vec::new()),
            slots: Vec::new(),
            free: NIL,
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
        let seq = entry.seq;
        let s = self.alloc(entry);
        let run = match &mut self.head {
            Some((k, run)) if *k == key => Some(run),
            Some((k, _)) if *k < key => self.rest.get_mut(&key),
            head => {
                // A new best key: the old head goes back among the others.
                if let Some((k, run)) = head.take() {
                    self.rest.insert(k, run);
                }
                *head = Some((key, Run { first: s, last: s }));
                return;
            }
        };
        let Some(run) = run else {
            self.rest.insert(key, Run { first: s, last: s });
            return;
        };
        let mut run_copy = *run;
        link(&mut self.slots, &mut run_copy, s, seq);
        *run = run_copy;
    }

    /// The entry [`take`](Self::take) would return.
    pub(crate) fn peek(&self, lifo: bool) -> Option<&Entry<H>> {
        let (_, run) = self.head.as_ref()?;
        let s = if lifo { run.last } else { run.first };
        self.slots.get(s as usize)?.entry.as_ref()
    }

    /// Starts loading what [`take`](Self::take) will read into the CPU cache: the slot
    /// it empties and, should that end the best run, the next run.
    pub(crate) fn prefetch(&self, lifo: bool) {
        if let Some((_, run)) = &self.head {
            let s = if lifo { run.last } else { run.first };
            if let Some(slot) = self.slots.get(s as usize) {
                throttle_core::prefetch(slot);
            }
            if run.first == run.last {
                self.rest.prefetch_best();
            }
        }
    }

    /// Takes the head run's first (or, with `lifo`, last) entry, with its key.
    pub(crate) fn take(&mut self, lifo: bool) -> Option<(BucketKey, Entry<H>)> {
        let (key, run) = self.head.as_mut()?;
        let key = *key;
        let s = if lifo { run.last } else { run.first };
        let slot = &mut self.slots[s as usize];
        let (prev, next) = (slot.prev, slot.next);
        let entry = slot.entry.take()?;
        slot.next = self.free;
        self.free = s;
        if prev != NIL {
            self.slots[prev as usize].next = next;
        } else {
            run.first = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        } else {
            run.last = prev;
        }
        if run.first == NIL {
            self.head = self.rest.pop_best();
        }
        Some((key, entry))
    }

    /// A slot holding `entry`, not yet linked into any run.
    fn alloc(&mut self, entry: Entry<H>) -> u32 {
        let slot = Slot {
            prev: NIL,
            next: NIL,
            entry: Some(entry),
        };
        if self.free != NIL {
            let s = self.free;
            self.free = self.slots[s as usize].next;
            self.slots[s as usize] = slot;
            s
        } else {
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        }
    }
}

/// Links the unlinked slot `s` (sequence number `seq`) into the non-empty `run` at its
/// sequence position: after the last entry with a smaller one (usually at the end).
fn link<H>(slots: &mut [Slot<H>], run: &mut Run, s: u32, seq: u64) {
    let seq_of = |slots: &[Slot<H>], i: u32| slots[i as usize].entry.as_ref().map_or(0, |e| e.seq);
    let mut after = run.last;
    while after != NIL && seq_of(slots, after) > seq {
        after = slots[after as usize].prev;
    }
    let before = if after == NIL {
        run.first
    } else {
        slots[after as usize].next
    };
    slots[s as usize].prev = after;
    slots[s as usize].next = before;
    if after == NIL {
        run.first = s;
    } else {
        slots[after as usize].next = s;
    }
    if before == NIL {
        run.last = s;
    } else {
        slots[before as usize].prev = s;
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
    fn a_volatile_entry_is_one_cache_line_and_its_slot_adds_two_links() {
        assert_eq!(core::mem::size_of::<Entry<crate::Payload>>(), 64);
        assert_eq!(core::mem::size_of::<Slot<crate::Payload>>(), 72);
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
