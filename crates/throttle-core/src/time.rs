//! Points in time and the conversions between configuration seconds and spans.
//!
//! The core never reads a clock: every call that depends on time takes a [`Timestamp`]
//! from the caller. A timestamp is a count of nanoseconds from an epoch the caller chooses
//! (tests usually start at zero; the async adapters use the Unix epoch so that persisted
//! times stay meaningful after a restart).

use core::cell::Cell;
use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A point in time: nanoseconds since an epoch chosen by the caller.
///
/// Arithmetic saturates instead of overflowing or wrapping, so `Timestamp::MAX` works as
/// "never" and subtracting a later time from an earlier one gives zero.
///
/// ```
/// use core::time::Duration;
/// use polite_throttle_core::Timestamp;
///
/// let t = Timestamp::from_secs(10);
/// assert_eq!(t + Duration::from_millis(500), Timestamp::from_millis(10_500));
/// assert_eq!(Timestamp::ZERO.saturating_duration_since(t), Duration::ZERO);
/// assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct Timestamp(u64);

impl Timestamp {
    /// The epoch itself. A valid time like any other.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The last representable instant; used as "never".
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// A timestamp `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// A timestamp `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    /// A timestamp `secs` whole seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(NANOS_PER_SEC))
    }

    /// A timestamp `secs` seconds after the epoch. Negative and NaN give the epoch,
    /// values too large give [`Timestamp::MAX`].
    pub fn from_secs_f64(secs: f64) -> Self {
        Timestamp::ZERO + secs_to_duration(secs)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the epoch as a float (loses precision past ~104 days of nanoseconds).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SEC as f64
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(nanos))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Self {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(nanos))
    }

    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The span from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn checked_duration_since(self, earlier: Timestamp) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, rhs: Duration) -> Timestamp {
        self.saturating_sub(rhs)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Timestamp::MAX {
            f.write_str("Timestamp(MAX)")
        } else {
            write!(f, "Timestamp({}s)", self.as_secs_f64())
        }
    }
}

/// Seconds with millisecond precision, e.g. `12.500s`; honours width and alignment.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&alloc::format!("{:.3}s", self.as_secs_f64()))
    }
}

/// Converts configuration seconds to a span: negative or NaN → zero, too large or
/// infinite → [`Duration::MAX`].
pub fn secs_to_duration(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// A monotonic guard: remembers the latest time seen and never lets a caller's `now`
/// run backwards inside the core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Monotonic(Timestamp);

impl Monotonic {
    pub(crate) fn new(start: Timestamp) -> Self {
        Monotonic(start)
    }

    /// `max(now, latest seen)`, remembering the result.
    pub(crate) fn clamp(&mut self, now: Timestamp) -> Timestamp {
        if now > self.0 {
            self.0 = now;
        }
        self.0
    }

    pub(crate) fn latest(&self) -> Timestamp {
        self.0
    }
}

/// A manual clock for tests and simulations: it only moves when told to.
///
/// It hands out [`Timestamp`]s like a real clock would, and never goes backwards.
///
/// ```
/// use core::time::Duration;
/// use polite_throttle_core::{FakeClock, Timestamp};
///
/// let clock = FakeClock::new(Timestamp::ZERO);
/// clock.advance(Duration::from_secs(3));
/// clock.advance_secs(0.5);
/// assert_eq!(clock.now(), Timestamp::from_millis(3_500));
/// clock.set(Timestamp::from_secs(1)); // earlier: ignored
/// assert_eq!(clock.now(), Timestamp::from_millis(3_500));
/// ```
#[derive(Debug, Default, Clone)]
pub struct FakeClock {
    now: Cell<Timestamp>,
}

impl FakeClock {
    /// A clock that reads `start` until it is advanced.
    pub fn new(start: Timestamp) -> Self {
        FakeClock {
            now: Cell::new(start),
        }
    }

    /// The current fake time.
    pub fn now(&self) -> Timestamp {
        self.now.get()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.set(self.now.get() + d);
    }

    /// Moves the clock forward by `secs` seconds (negative values are ignored).
    pub fn advance_secs(&self, secs: f64) {
        self.advance(secs_to_duration(secs));
    }

    /// Moves the clock to `t` if `t` is later than the current time.
    pub fn set(&self, t: Timestamp) {
        if t > self.now.get() {
            self.now.set(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturating_arithmetic() {
        assert_eq!(Timestamp::MAX + Duration::MAX, Timestamp::MAX);
        assert_eq!(Timestamp::ZERO - Duration::from_secs(1), Timestamp::ZERO);
        assert_eq!(
            Timestamp::from_secs(5).checked_duration_since(Timestamp::from_secs(6)),
            None
        );
        assert_eq!(
            Timestamp::from_secs(6).saturating_duration_since(Timestamp::from_secs(5)),
            Duration::from_secs(1)
        );
        assert_eq!(Timestamp::from_secs(u64::MAX), Timestamp::MAX);
    }

    #[test]
    fn seconds_conversion_is_total() {
        assert_eq!(secs_to_duration(-1.0), Duration::ZERO);
        assert_eq!(secs_to_duration(f64::NAN), Duration::ZERO);
        assert_eq!(secs_to_duration(f64::INFINITY), Duration::MAX);
        assert_eq!(secs_to_duration(1e300), Duration::MAX);
        assert_eq!(secs_to_duration(1.5), Duration::from_millis(1500));
        assert_eq!(Timestamp::from_secs_f64(2.25), Timestamp::from_millis(2250));
        assert_eq!(Timestamp::from_secs_f64(1e300), Timestamp::MAX);
    }

    #[test]
    fn monotonic_never_runs_backwards() {
        let mut m = Monotonic::new(Timestamp::from_secs(10));
        assert_eq!(m.clamp(Timestamp::from_secs(5)), Timestamp::from_secs(10));
        assert_eq!(m.clamp(Timestamp::from_secs(12)), Timestamp::from_secs(12));
        assert_eq!(m.latest(), Timestamp::from_secs(12));
    }
}
