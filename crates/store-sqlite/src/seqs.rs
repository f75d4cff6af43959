//! Sets of sequence numbers, and the JSON arrays that list them in the chunk tables.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a sequence number with one multiplication. Sequence numbers are distinct and
/// mostly dense: their products with an odd constant are distinct in the low bits (the
/// bucket) and well mixed in the high bits (the table's control byte).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SeqHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for SeqHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(K);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A set of sequence numbers, as 64-bit bitmaps of 64 consecutive numbers. Sequence
/// numbers are dense (the frontier hands them out one by one), so a million of them take
/// ~16,000 chunks: a table that stays in the CPU cache, where a hash set of the numbers
/// themselves costs a cache miss per lookup. A scattered few cost ~20 bytes each.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeqSet {
    chunks: HashMap<u64, u64, BuildHasherDefault<SeqHasher>>,
    len: usize,
}

fn split(seq: u64) -> (u64, u64) {
    (seq >> 6, 1u64 << (seq & 63))
}

impl SeqSet {
    /// Adds `seq`; `true` if it was not there.
    pub(crate) fn insert(&mut self, seq: u64) -> bool {
        let (key, bit) = split(seq);
        let chunk = self.chunks.entry(key).or_default();
        let new = *chunk & bit == 0;
        *chunk |= bit;
        self.len += usize::from(new);
        new
    }

    /// Removes `seq`; `true` if it was there.
    pub(crate) fn remove(&mut self, seq: &u64) -> bool {
        let (key, bit) = split(*seq);
        let Some(chunk) = self.chunks.get_mut(&key) else {
            return false;
        };
        if *chunk & bit == 0 {
            return false;
        }
        *chunk &= !bit;
        if *chunk == 0 {
            self.chunks.remove(&key);
        }
        self.len -= 1;
        true
    }

    pub(crate) fn contains(&self, seq: &u64) -> bool {
        let (key, bit) = split(*seq);
        self.chunks.get(&key).is_some_and(|c| c & bit != 0)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }

    /// The numbers in ascending order.
    pub(crate) fn sorted(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.chunks.keys().copied().collect();
        keys.sort_unstable();
        let mut out = Vec::with_capacity(self.len);
        for key in keys {
            let mut bits = self.chunks[&key];
            while bits != 0 {
                out.push((key << 6) | u64::from(bits.trailing_zeros()));
                bits &= bits - 1;
            }
        }
        out
    }
}

/// Writes `seqs` as a JSON array into `out` (cleared first).
pub(crate) fn to_json(seqs: impl IntoIterator<Item = u64>, out: &mut String) {
    out.clear();
    out.push('[');
    for (i, s) in seqs.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{s}");
    }
    out.push(']');
}

/// Reads a JSON array of sequence numbers.
pub(crate) fn from_json(text: &str) -> Result<Vec<u64>, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips() {
        let mut s = String::new();
        to_json([], &mut s);
        assert_eq!(s, "[]");
        assert_eq!(from_json(&s).unwrap(), Vec::<u64>::new());
        to_json([3, 1, u64::from(u32::MAX) + 7], &mut s);
        assert_eq!(s, "[3,1,4294967302]");
        assert_eq!(from_json(&s).unwrap(), [3, 1, 4_294_967_302]);
        assert!(from_json("[1,-2]").is_err());
    }

    #[test]
    fn the_set_holds_dense_and_sparse_numbers() {
        let mut set = SeqSet::default();
        for i in 0..10_000u64 {
            assert!(set.insert(i * if i % 2 == 0 { 1 } else { 1 << 20 }));
        }
        assert_eq!(set.len(), 10_000);
        assert!(set.contains(&(3 << 20)) && !set.contains(&3));
    }

    proptest::proptest! {
        /// The chunked set behaves like a hash set of the numbers.
        #[test]
        fn matches_a_hash_set(
            ops in proptest::collection::vec((0u8..4, 0u64..300), 0..400),
            base in proptest::prop_oneof![proptest::strategy::Just(0u64), proptest::strategy::Just(u64::MAX - 400)],
        ) {
            let mut set = SeqSet::default();
            let mut model = std::collections::HashSet::new();
            for (op, n) in ops {
                let seq = base + n;
                match op {
                    0 | 1 => proptest::prop_assert_eq!(set.insert(seq), model.insert(seq)),
                    2 => proptest::prop_assert_eq!(set.remove(&seq), model.remove(&seq)),
                    _ => proptest::prop_assert_eq!(set.contains(&seq), model.contains(&seq)),
                }
                proptest::prop_assert_eq!(set.len(), model.len());
                proptest::prop_assert_eq!(set.is_empty(), model.is_empty());
            }
            let mut want: Vec<u64> = model.iter().copied().collect();
            want.sort_unstable();
            proptest::prop_assert_eq!(set.sorted(), want);
            set.clear();
            proptest::prop_assert!(set.is_empty() && set.sorted().is_empty());
        }
    }
}
