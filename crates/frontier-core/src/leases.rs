//! The requests handed out and not yet completed or retried, by lease id.

use hashbrown::HashTable;
use throttle_core::Permit;

/// What the frontier remembers of a leased request until it is completed or retried.
pub(crate) struct LeaseRecord<H> {
    pub(crate) group: u32,
    pub(crate) permit: Permit,
    pub(crate) priority: i32,
    pub(crate) start: bool,
    pub(crate) dont_track: bool,
    pub(crate) handle: H,
}

/// Lease records by lease id (the request's sequence number), in one hash table: the
/// scheduler moves a taken request's store handle straight into its record, and a
/// completion finds, reads and removes it with one lookup.
pub(crate) struct Leases<H> {
    table: HashTable<(u64, LeaseRecord<H>)>,
}

/// Lease ids are sequence numbers the frontier hands out itself (nobody chooses them to
/// collide), so a multiplicative hash is enough: the product's high bits, which the
/// table uses as tags, mix every bit of the id, and its low bits, which pick a bucket,
/// differ for consecutive ids.
#[inline]
fn hash(seq: u64) -> u64 {
    let h = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 32)
}

impl<H> Leases<H> {
    pub(crate) fn new() -> Self {
        Leases {
            table: HashTable::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Records a new lease. A lease id is leased once at a time: a request is taken out
    /// of its queue when leased, and a retry queues it under a new id.
    #[inline]
    pub(crate) fn insert(&mut self, seq: u64, record: LeaseRecord<H>) -> &mut LeaseRecord<H> {
        debug_assert!(
            self.table.find(hash(seq), |(s, _)| *s == seq).is_none(),
            "lease {seq} is already out"
        );
        let entry = self
            .table
            .insert_unique(hash(seq), (seq, record), |(s, _)| hash(*s));
        &mut entry.into_mut().1
    }

    /// Takes the record of lease `seq` out, if it is still leased.
    #[inline]
    pub(crate) fn remove(&mut self, seq: u64) -> Option<LeaseRecord<H>> {
        let entry = self.table.find_entry(hash(seq), |(s, _)| *s == seq).ok()?;
        Some(entry.remove().0.1)
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
            let now = throttle_core::Timestamp::ZERO;
            let mut throttler = throttle_core::Throttler::new(Default::default(), now).unwrap();
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
            ops in prop::collection::vec((prop::bool::weighted(0.6), 0u64..200, any::<i32>()), 1..600),
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
