//! Time for the core crates, from tokio's clock.
//!
//! The core crates count time in [`Timestamp`]s from an epoch the caller chooses. A
//! [`Clock`] maps tokio's monotonic [`Instant`](tokio::time::Instant) onto them from an
//! anchor: by default the wall-clock time at which the clock was made, so that persisted
//! timestamps (per-request delays, backoff deadlines) stay meaningful after a restart.
//! Because it reads `tokio::time::Instant`, a runtime started with paused time
//! (`#[tokio::test(start_paused = true)]`) runs hours of crawl in milliseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use throttle_core::Timestamp;
use tokio::time::Instant;

/// Maps tokio's clock onto core [`Timestamp`]s.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use runtime_tokio::Clock;
/// use throttle_core::Timestamp;
///
/// let clock = Clock::starting_at(Timestamp::ZERO);
/// tokio::time::sleep(std::time::Duration::from_secs(90)).await;
/// assert_eq!(clock.now(), Timestamp::from_secs(90));
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    instant: Instant,
    timestamp: Timestamp,
}

impl Clock {
    /// A clock whose timestamps are nanoseconds since the Unix epoch.
    pub fn wall() -> Self {
        Clock::starting_at(unix_now())
    }

    /// A clock that reads `start` now (tests often start at [`Timestamp::ZERO`]).
    pub fn starting_at(start: Timestamp) -> Self {
        Clock {
            instant: Instant::now(),
            timestamp: start,
        }
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        self.timestamp + self.instant.elapsed()
    }

    /// Sleeps until this clock reads `t`.
    pub async fn sleep_until(&self, t: Timestamp) {
        tokio::time::sleep_until(self.instant(t)).await;
    }

    /// Sleeps for `d` on this clock.
    pub async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// The tokio instant at which this clock reads `t` (now, for times in the past).
    pub fn instant(&self, t: Timestamp) -> Instant {
        let ahead = t.saturating_duration_since(self.timestamp);
        // Far-future times (Timestamp::MAX) would overflow an Instant.
        self.instant
            .checked_add(ahead)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
    }
}

/// The wall-clock time as a [`Timestamp`] since the Unix epoch, for parsing HTTP-dates
/// in `Retry-After` headers ([`throttle_core::Outcome::response`]).
pub fn unix_now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp::ZERO + since
}
