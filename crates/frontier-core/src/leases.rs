//! The requests handed out and not yet completed or retried, by lease id.

use alloc::vec::Vec;
use polite_throttle_core::Permit;

/// What the frontier remembers of a leased request until it is completed or retried.
pub(crate) struct LeaseRecord<H> {
    pub(crate) group: u32,
    pub(crate) permit: Permit,
    pub(crate) priority: i32,
    pub(crate) start: bool,
    pub(crate) dont_track: bool,
    pub(crate) handle: H,
}

/// Lease records by lease id (the request's sequence number), in one open-addressing
/// table: the scheduler moves a taken request's store handle straight into its record,
/// and a completion finds, reads and removes it with one probe, usually the first.
///
/// Linear probing over a dense array of ids (`keys`, [`VACANT`] where no record is),
/// records beside it at the same index, at most three quarters full; a removal shifts
/// the records after it back (no tombstones), so a probe never walks past a vacant
/// slot. Cheaper than a general hash table for what this one sees: a few leases out at
/// once, each taken out soon after it went in.
pub(crate) struct Leases<H> {
    keys: Vec<u64>,
    records: Vec<Option<LeaseRecord<H>>>,
    len: usize,
}

/// The id of a vacant slot (sequence numbers stay far below it).
const VACANT: u64 = u64::MAX;

/// Slots of a table's first allocation.
const FIRST_CAPACITY: usize = 16;

/// Lease ids are sequence numbers the frontier hands out itself (nobody chooses them to
/// collide); Fibonacci hashing spreads them, consecutive or strided, over the table:
/// the product's top bits, as many as the table's size needs.
#[inline]
fn home(seq: u64, shift: u32) -> usize {
    (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

impl<H> Leases<H> {
    pub(crate) fn new() -> Self {
        Leases {
            keys: Vec::new(),
            records: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `64 - log2(capacity)`: the shift that takes a hash to a slot.
    #[inline]
    fn shift(&self) -> u32 {
        64 - self.keys.len().trailing_zeros()
    }

    #[inline]
    fn mask(&self) -> usize {
        self.keys.len().wrapping_sub(1)
    }

    /// The slot of lease `seq`, if it is out.
    #[inline]
    fn find(&self, seq: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = home(seq, self.shift());
        loop {
            match self.keys[i] {
                k if k == seq => return Some(i),
                VACANT => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Records a new lease. A lease id is leased once at a time: a request is taken out
    /// of its queue when leased, and a retry queues it under a new id.
    #[inline]
    pub(crate) fn insert(&mut self, seq: u64, record: LeaseRecord<H>) -> &mut LeaseRecord<H> {
        debug_assert!(seq != VACANT, "lease id {seq} is reserved");
        debug_assert!(self.find(seq).is_none(), "lease {seq} is already out");
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            self.grow();
        }
        let i = self.vacant_slot(seq);
        self.keys[i] = seq;
        self.len += 1;
        self.records[i].insert(record)
    }

    /// The first vacant slot on `seq`'s probe (the table is never full).
    #[inline]
    fn vacant_slot(&self, seq: u64) -> usize {
        let mask = self.mask();
        let mut i = home(seq, self.shift());
        while self.keys[i] != VACANT {
            i = (i + 1) & mask;
        }
        i
    }

    /// Doubles the table (or makes its first), placing every record again.
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.keys.len() * 2).max(FIRST_CAPACITY);
        let keys = core::mem::replace(&mut self.keys, alloc::vec![VACANT; capacity]);
        let mut records = core::mem::take(&mut self.records);
        self.records.resize_with(capacity, || None);
        for (seq, record) in keys.into_iter().zip(records.iter_mut()) {
            if seq == VACANT {
                continue;
            }
            let i = self.vacant_slot(seq);
            self.keys[i] = seq;
            self.records[i] = record.take();
        }
    }

    /// Takes the record of lease `seq` out, if it is still leased.
    #[inline]
    pub(crate) fn remove(&mut self, seq: u64) -> Option<LeaseRecord<H>> {
        let hole = self.find(seq)?;
        let record = self.records[hole].take();
        self.len -= 1;
        self.close(hole);
        record
    }

    /// Vacates slot `hole`, shifting back the records after it whose probe passed
    /// through it (so that every record stays reachable from its home slot).
    #[inline]
    fn close(&mut self, mut hole: usize) {
        let (mask, shift) = (self.mask(), self.shift());
        let mut i = (hole + 1) & mask;
        while self.keys[i] != VACANT {
            // The record at `i` may move to `hole` unless its home lies cyclically in
            // (hole, i]: then its probe never passed through the hole.
            let h = home(self.keys[i], shift);
            if (i.wrapping_sub(h) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.keys[hole] = self.keys[i];
                self.records[hole] = self.records[i].take();
                hole = i;
            }
            i = (i + 1) & mask;
        }
        self.keys[hole] = VACANT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn record(tag: i32) -> LeaseRecord<i32> {
        static PERMIT: std::sync::OnceLock<Permit> = std::sync::OnceLock::new();
        let permit = *PERMIT.get_or_init(|| {
            let now = polite_throttle_core::Timestamp::ZERO;
            let mut throttler =
                polite_throttle_core::Throttler::new(Default::default(), now).unwrap();
            throttler
                .try_acquire(&["a.example.com".into()], now)
                .unwrap()
        });
        LeaseRecord {
            group: 0,
            permit,
            priority: tag,
            start: false,
            dont_track: false,
            handle: tag,
        }
    }

    proptest! {
        /// The table keeps what a map from lease id to record would keep.
        #[test]
        fn leases_behave_like_a_map(
            ops in prop::collection::vec(
                (
                    prop::bool::weighted(0.6),
                    // Dense ids, ids anywhere, and ids on a stride of 2^34 (the same low
                    // bits: clusters for a table that took a slot from them).
                    prop_oneof![0u64..200, 0u64..(1 << 40), (0u64..64).prop_map(|k| k << 34)],
                    any::<i32>(),
                ),
                1..1500,
            ),
        ) {
            let mut leases = Leases::new();
            let mut model: BTreeMap<u64, i32> = BTreeMap::new();
            for (insert, seq, tag) in ops {
                if insert && !model.contains_key(&seq) {
                    prop_assert_eq!(leases.insert(seq, record(tag)).handle, tag);
                    model.insert(seq, tag);
                } else {
                    let got = leases.remove(seq).map(|r| r.handle);
                    prop_assert_eq!(got, model.remove(&seq));
                }
                prop_assert_eq!(leases.len(), model.len());
            }
            let left: Vec<u64> = model.keys().copied().collect();
            for seq in left {
                prop_assert!(leases.remove(seq).is_some());
            }
            prop_assert_eq!(leases.len(), 0);
        }
    }
}
