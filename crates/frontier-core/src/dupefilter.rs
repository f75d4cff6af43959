//! The duplicate filter: which request fingerprints were already seen.
//!
//! Two memory layouts:
//! - exact: the first 64 bits of every fingerprint in an open-addressing table that
//!   grows by half when 80% full, so a URL costs 10 to 15 bytes (never more than 16);
//!   two different requests collide only with probability ~n/2⁶⁴;
//! - Bloom: a bit array sized for an expected number of URLs and a false-positive rate
//!   (about 1.2 bytes per URL at 1%); it may drop a never-seen request with that
//!   probability, never keeps a duplicate.
//!
//! Both look only at a fingerprint's first 64 bits ([`Fingerprint::prefix64`]), so stores
//! persist just those.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::fingerprint::Fingerprint;

/// How seen fingerprints are remembered.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum DupeFilterConfig {
    /// Exact set of 64-bit fingerprint prefixes (≤ 16 bytes per URL).
    #[default]
    Exact,
    /// Bloom filter sized for `capacity` URLs at `false_positive_rate`.
    Bloom {
        /// Expected number of distinct URLs.
        capacity: u64,
        /// Target probability of dropping an unseen URL, in (0, 1).
        false_positive_rate: f64,
    },
    /// No duplicate filtering at all.
    Disabled,
}

/// An invalid duplicate-filter configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct DupeFilterConfigError(&'static str);

impl fmt::Display for DupeFilterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid duplicate filter setting: {}", self.0)
    }
}

impl core::error::Error for DupeFilterConfigError {}

/// The duplicate filter itself.
#[derive(Clone, Debug)]
pub enum DupeFilter {
    /// See [`DupeFilterConfig::Exact`].
    Exact(PrefixSet),
    /// See [`DupeFilterConfig::Bloom`].
    Bloom(BloomFilter),
    /// Nothing is ever a duplicate.
    Disabled,
}

impl DupeFilter {
    /// A filter for `config`.
    pub fn new(config: DupeFilterConfig) -> Result<Self, DupeFilterConfigError> {
        Ok(match config {
            DupeFilterConfig::Exact => DupeFilter::Exact(PrefixSet::new()),
            DupeFilterConfig::Bloom {
                capacity,
                false_positive_rate,
            } => DupeFilter::Bloom(BloomFilter::new(capacity, false_positive_rate)?),
            DupeFilterConfig::Disabled => DupeFilter::Disabled,
        })
    }

    /// Records `fp`; returns `false` if it was (or, for Bloom, may have been) seen before.
    pub fn insert(&mut self, fp: &Fingerprint) -> bool {
        match self {
            DupeFilter::Exact(s) => s.insert(fp.prefix64()),
            DupeFilter::Bloom(b) => b.insert(fp),
            DupeFilter::Disabled => true,
        }
    }

    /// Whether `fp` was (or may have been) seen.
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        match self {
            DupeFilter::Exact(s) => s.contains(fp.prefix64()),
            DupeFilter::Bloom(b) => b.contains(fp),
            DupeFilter::Disabled => false,
        }
    }

    /// Fingerprints recorded (for Bloom: insertions that set at least one new bit).
    pub fn len(&self) -> u64 {
        match self {
            DupeFilter::Exact(s) => s.len() as u64,
            DupeFilter::Bloom(b) => b.len(),
            DupeFilter::Disabled => 0,
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of memory held by the filter's tables.
    pub fn memory_bytes(&self) -> usize {
        match self {
            DupeFilter::Exact(s) => s.memory_bytes(),
            DupeFilter::Bloom(b) => b.memory_bytes(),
            DupeFilter::Disabled => 0,
        }
    }
}

/// A set of 64-bit values (fingerprint prefixes, already uniformly distributed):
/// linear probing, no stored hashes, 0 marks an empty cell.
#[derive(Clone, Debug, Default)]
pub struct PrefixSet {
    cells: Vec<u64>,
    len: usize,
    has_zero: bool,
}

impl PrefixSet {
    const MIN_CAPACITY: usize = 64;

    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory held by the table.
    pub fn memory_bytes(&self) -> usize {
        self.cells.capacity() * 8
    }

    /// Maps a value onto a cell uniformly (multiply-shift, any table size).
    fn home(&self, v: u64) -> usize {
        ((u128::from(v) * self.cells.len() as u128) >> 64) as usize
    }

    /// Where `v` is, or the empty cell where it would go.
    fn probe(&self, v: u64) -> (usize, bool) {
        let n = self.cells.len();
        let mut i = self.home(v);
        loop {
            let c = self.cells[i];
            if c == v {
                return (i, true);
            }
            if c == 0 {
                return (i, false);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    /// Whether `v` is in the set.
    pub fn contains(&self, v: u64) -> bool {
        if v == 0 {
            return self.has_zero;
        }
        !self.cells.is_empty() && self.probe(v).1
    }

    /// Adds `v`; returns `false` if it was already there.
    pub fn insert(&mut self, v: u64) -> bool {
        if v == 0 {
            let new = !self.has_zero;
            self.has_zero = true;
            self.len += usize::from(new);
            return new;
        }
        // Keep the table at most 80% full; grow by half.
        if (self.len + 1) * 5 > self.cells.len() * 4 {
            let grown = (self.cells.len() + self.cells.len() / 2).max(Self::MIN_CAPACITY);
            self.rehash(grown);
        }
        let (i, found) = self.probe(v);
        if found {
            return false;
        }
        self.cells[i] = v;
        self.len += 1;
        true
    }

    fn rehash(&mut self, capacity: usize) {
        let old = core::mem::replace(&mut self.cells, vec![0; capacity]);
        for v in old.into_iter().filter(|&v| v != 0) {
            let (i, _) = self.probe(v);
            self.cells[i] = v;
        }
    }
}

/// A Bloom filter over request fingerprints (enhanced double hashing of two 64-bit
/// words of the SHA1 digest).
#[derive(Clone, Debug)]
pub struct BloomFilter {
    bits: Vec<u64>,
    m: u64,
    k: u32,
    inserted: u64,
}

impl BloomFilter {
    /// The most hash functions a filter uses (a sparse filter would otherwise get more).
    pub const MAX_HASHES: u32 = 30;

    /// A filter with the optimal size and number of hashes for `capacity` items at a
    /// false-positive rate `p`.
    pub fn new(capacity: u64, p: f64) -> Result<Self, DupeFilterConfigError> {
        let (m, k) = Self::shape(capacity, p)?;
        Ok(BloomFilter {
            bits: vec![0; m.div_ceil(64) as usize],
            m,
            k,
            inserted: 0,
        })
    }

    /// The size in bits and the number of hashes [`new`](Self::new) gives a filter for
    /// `capacity` items at a false-positive rate `p`, without allocating it (for a filter
    /// kept elsewhere that must match this one bit for bit, as polite-store-redis's).
    pub fn shape(capacity: u64, p: f64) -> Result<(u64, u32), DupeFilterConfigError> {
        if capacity == 0 {
            return Err(DupeFilterConfigError("bloom capacity must be at least 1"));
        }
        if !(p > 0.0 && p < 1.0) {
            return Err(DupeFilterConfigError(
                "bloom false_positive_rate must be between 0 and 1 (exclusive)",
            ));
        }
        let ln2 = core::f64::consts::LN_2;
        // (No `ceil`/`round` without std: add and truncate.)
        let m = (-(capacity as f64) * ln(p) / (ln2 * ln2) + 0.999_999).max(64.0);
        if m > (1u64 << 40) as f64 {
            return Err(DupeFilterConfigError(
                "bloom filter would need more than 128 GiB",
            ));
        }
        let m = m as u64;
        let k = ((m as f64 / capacity as f64) * ln2 + 0.5).clamp(1.0, f64::from(Self::MAX_HASHES))
            as u32;
        Ok((m, k))
    }

    /// Number of bits.
    pub fn bits(&self) -> u64 {
        self.m
    }

    /// Number of hash functions.
    pub fn hashes(&self) -> u32 {
        self.k
    }

    /// Insertions that set at least one new bit.
    pub fn len(&self) -> u64 {
        self.inserted
    }

    /// Whether nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.inserted == 0
    }

    /// Bytes of memory held by the bit array.
    pub fn memory_bytes(&self) -> usize {
        self.bits.capacity() * 8
    }

    /// Bit positions for a fingerprint: enhanced double hashing from its first 64 bits
    /// (the second hash is a mix of the first), so stores need to keep only 8 bytes.
    fn positions(&self, fp: &Fingerprint) -> impl Iterator<Item = u64> + '_ {
        let mut h1 = fp.prefix64();
        let mut h2 = {
            let mut z = h1 ^ 0x9E37_79B9_7F4A_7C15;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) | 1
        };
        let m = self.m;
        (0..u64::from(self.k)).map(move |i| {
            let pos = ((u128::from(h1) * u128::from(m)) >> 64) as u64;
            h1 = h1.wrapping_add(h2);
            h2 = h2.wrapping_add(i);
            pos
        })
    }

    /// Whether `fp` may have been inserted.
    pub fn contains(&self, fp: &Fingerprint) -> bool {
        self.positions(fp)
            .all(|p| self.bits[(p / 64) as usize] & (1 << (p % 64)) != 0)
    }

    /// Inserts `fp`; returns `false` if every bit was already set (a duplicate, or a
    /// false positive).
    pub fn insert(&mut self, fp: &Fingerprint) -> bool {
        let mut new = false;
        let positions: [u64; 30] = {
            let mut buf = [0u64; 30];
            for (slot, p) in buf.iter_mut().zip(self.positions(fp)) {
                *slot = p;
            }
            buf
        };
        for &p in &positions[..self.k as usize] {
            let word = &mut self.bits[(p / 64) as usize];
            let bit = 1 << (p % 64);
            new |= *word & bit == 0;
            *word |= bit;
        }
        self.inserted += u64::from(new);
        new
    }
}

/// Natural logarithm without `std` (only used to size Bloom filters).
fn ln(x: f64) -> f64 {
    // x = m · 2^e with m in [1, 2); ln x = e·ln 2 + ln m, ln m by atanh series.
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let y = (m - 1.0) / (m + 1.0);
    let y2 = y * y;
    let mut term = y;
    let mut sum = 0.0;
    let mut n = 1.0;
    while term.abs() > 1e-17 {
        sum += term / n;
        term *= y2;
        n += 2.0;
    }
    e as f64 * core::f64::consts::LN_2 + 2.0 * sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::fingerprint;
    use alloc::collections::BTreeSet;
    use alloc::format;
    use proptest::prelude::*;

    #[test]
    fn ln_matches_std() {
        for x in [1e-9, 0.01, 0.5, 1.0, 2.0, 10.0, 12345.678] {
            assert!((ln(x) - std::primitive::f64::ln(x)).abs() < 1e-12, "{x}");
        }
    }

    #[test]
    fn prefix_set_basics_and_memory() {
        let mut s = PrefixSet::new();
        assert!(!s.contains(0));
        assert!(s.insert(0));
        assert!(!s.insert(0));
        assert!(s.contains(0));
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..1_000_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s.insert(x);
        }
        assert_eq!(s.len(), 1_000_001);
        let per = s.memory_bytes() as f64 / s.len() as f64;
        assert!(per <= 16.0, "{per} bytes per value");
    }

    proptest! {
        #[test]
        fn prefix_set_matches_a_btree_set(ops in proptest::collection::vec((any::<bool>(), 0u64..500), 0..2000)) {
            let mut s = PrefixSet::new();
            let mut model = BTreeSet::new();
            for (insert, v) in ops {
                // Spread small values over the whole range, keep some zeros.
                let v = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                if insert {
                    prop_assert_eq!(s.insert(v), model.insert(v));
                } else {
                    prop_assert_eq!(s.contains(v), model.contains(&v));
                }
                prop_assert_eq!(s.len(), model.len());
            }
        }

        #[test]
        fn exact_filter_never_forgets(urls in proptest::collection::vec("[a-z]{1,6}", 1..200)) {
            let mut f = DupeFilter::new(DupeFilterConfig::Exact).unwrap();
            let mut model = BTreeSet::new();
            for u in &urls {
                let fp = fingerprint("GET", &format!("https://{u}.example.com/{u}"), b"").unwrap();
                prop_assert_eq!(f.insert(&fp), model.insert(u.clone()));
                prop_assert!(f.contains(&fp));
            }
        }
    }

    #[test]
    fn bloom_sizing_and_errors() {
        let b = BloomFilter::new(1_000_000, 0.01).unwrap();
        assert_eq!(b.hashes(), 7);
        let per_url = b.memory_bytes() as f64 / 1e6;
        assert!((1.1..1.3).contains(&per_url), "{per_url}");
        assert!(BloomFilter::new(0, 0.01).is_err());
        assert!(BloomFilter::new(10, 0.0).is_err());
        assert!(BloomFilter::new(10, 1.0).is_err());
        assert!(BloomFilter::new(10, f64::NAN).is_err());
        assert!(BloomFilter::new(u64::MAX, 1e-9).is_err());
    }

    /// 1M URLs in, 1M others tested: the false-positive rate is within 20% of 1%.
    #[test]
    fn bloom_false_positive_rate_on_a_million_urls() {
        let n = 1_000_000u64;
        let mut b = BloomFilter::new(n, 0.01).unwrap();
        for i in 0..n {
            let fp = fingerprint(
                "GET",
                &format!(
                    "https://host{}.example{}.com/path/{i}?q={i}",
                    i % 10_000,
                    i % 7
                ),
                b"",
            )
            .unwrap();
            assert!(b.insert(&fp) || b.contains(&fp));
        }
        let mut false_positives = 0u64;
        for i in n..2 * n {
            let fp = fingerprint(
                "GET",
                &format!(
                    "https://host{}.example{}.com/path/{i}?q={i}",
                    i % 10_000,
                    i % 7
                ),
                b"",
            )
            .unwrap();
            false_positives += u64::from(b.contains(&fp));
        }
        let rate = false_positives as f64 / n as f64;
        assert!(
            (0.008..=0.012).contains(&rate),
            "false-positive rate {rate}"
        );
    }
}
