//! Time for the core crates, from tokio's clock.
//!
//! The core crates count time in [`Timestamp`]s from an epoch the caller chooses. A
//! [`Clock`] maps tokio's monotonic [`Instant`](tokio::time::Instant) onto them from an
//! anchor: by default the wall-clock time at which the clock was made, so that persisted
//! timestamps (per-request delays, backoff deadlines) stay meaningful after a restart.
//! Because it reads `tokio::time::Instant`, a runtime started with paused time
//! (`#[tokio::test(start_paused = true)]`) runs hours of crawl in milliseconds.

use std::time::Duration;

use polite_runtime_common::{Job, Runtime, panic_message, unix_now};
use polite_throttle_core::Timestamp;
use tokio::time::Instant;

/// Maps tokio's clock onto core [`Timestamp`]s.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use polite_runtime_tokio::Clock;
/// use polite_throttle_core::Timestamp;
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

impl Runtime for Clock {
    fn now(&self) -> Timestamp {
        Clock::now(self)
    }

    fn sleep_until(&self, t: Timestamp) -> impl Future<Output = ()> + Send + use<> {
        tokio::time::sleep_until(self.instant(t))
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send + use<> {
        tokio::time::sleep(d)
    }

    /// On the multi-threaded runtime the call runs on this worker thread, which hands
    /// its other tasks to another worker first ([`block_in_place`](tokio::task::block_in_place):
    /// no thread handoff per call, where `spawn_blocking` costs two); on the
    /// current-thread runtime it goes to the blocking pool.
    fn unblock(&self, job: Job) -> impl Future<Output = Result<(), String>> + Send + use<> {
        async move {
            let multi_thread = matches!(
                tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
                Ok(tokio::runtime::RuntimeFlavor::MultiThread)
            );
            if multi_thread {
                tokio::task::block_in_place(job);
                Ok(())
            } else {
                tokio::task::spawn_blocking(job).await.map_err(|e| {
                    if e.is_panic() {
                        panic_message(&*e.into_panic())
                    } else {
                        e.to_string()
                    }
                })
            }
        }
    }
}
