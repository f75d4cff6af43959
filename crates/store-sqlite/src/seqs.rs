//! Sets of sequence numbers, and the JSON arrays that list them in the chunk tables.

use std::collections::HashSet;
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

/// A set of sequence numbers.
pub(crate) type SeqSet = HashSet<u64, BuildHasherDefault<SeqHasher>>;

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
}
