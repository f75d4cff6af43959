//! The seedable random source behind delay jitter.
//!
//! Jitter only needs to spread requests out, not to resist prediction, so a small,
//! fast generator with a fixed algorithm is the right tool: the same `seed` setting gives
//! the same sequence on every platform, which makes simulations reproducible.

/// A SplitMix64 generator: 64 bits of state, passes BigCrush, one multiply-xorshift
/// round per number.
///
/// ```
/// use polite_throttle_core::hooks::JitterRng;
///
/// let mut a = JitterRng::new(7);
/// let mut b = JitterRng::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let x = a.uniform(-0.5, 0.5);
/// assert!((-0.5..0.5).contains(&x));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct JitterRng {
    state: u64,
}

impl JitterRng {
    /// A generator whose whole sequence is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        JitterRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniformly distributed in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // 53 random mantissa bits.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A float uniformly distributed in `[lo, hi)` (`lo` when the range is empty).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        if hi <= lo {
            return lo;
        }
        lo + (hi - lo) * self.next_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = JitterRng::new(42);
        let mut b = JitterRng::new(42);
        for _ in 0..1000 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
        }
        assert_eq!(JitterRng::new(1).uniform(3.0, 3.0), 3.0);
    }

    #[test]
    fn roughly_uniform() {
        let mut r = JitterRng::new(0);
        let n = 100_000;
        let mean: f64 = (0..n).map(|_| r.uniform(-1.0, 1.0)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
    }
}
