//! Time for the core crates, from a real or a manual (virtual) monotonic clock.
//!
//! The core crates count time in [`Timestamp`]s from an epoch the caller chooses. A
//! [`Clock`] maps a monotonic [`Instant`] onto them from an anchor: by default the
//! wall-clock time at which the clock was made, so that persisted timestamps (per-request
//! delays, backoff deadlines) stay meaningful after a restart.
//!
//! A clock reads one of two timelines:
//!
//! - the real one ([`Clock::wall`], [`Clock::starting_at`]): `std::time::Instant`, with
//!   sleeps on [`async_io::Timer`], so it runs on async-std, smol or any executor;
//! - a manual one ([`Clock::manual`]): virtual time that moves only when its
//!   [`ManualClock`] handle says so, either step by step
//!   ([`advance`](ManualClock::advance)) or automatically whenever the code under test is
//!   idle ([`block_on`](ManualClock::block_on)), like tokio's paused clock. Hours of crawl
//!   run in milliseconds, with exact timestamps.
//!
//! The manual timeline and the executor that advances it when idle live in
//! [`virtual_time`](crate::virtual_time).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;
use polite_runtime_common::{Job, Runtime, panic_message, unix_now};
use polite_throttle_core::Timestamp;

pub use crate::virtual_time::ManualClock;
use crate::virtual_time::{BlockingCall, Manual, ManualSleep};

/// Maps a monotonic clock, real or manual, onto core [`Timestamp`]s.
///
/// A `Clock` is a small `Copy` value: hand copies to every task, the driver and the
/// throttle. Copies made from one [`Clock::manual`] call share its virtual timeline.
///
/// ```
/// use std::time::Duration;
///
/// use polite_runtime_async_std::Clock;
/// use polite_throttle_core::Timestamp;
///
/// let (clock, time) = Clock::manual(Timestamp::ZERO);
/// time.block_on(async {
///     clock.sleep(Duration::from_secs(90)).await; // returns at once in real time
///     assert_eq!(clock.now(), Timestamp::from_secs(90));
/// });
/// ```
#[derive(Clone, Copy)]
pub struct Clock {
    pub(crate) instant: Instant,
    pub(crate) timestamp: Timestamp,
    pub(crate) timeline: Timeline,
}

/// Which monotonic clock a [`Clock`] reads.
#[derive(Clone, Copy)]
pub(crate) enum Timeline {
    Real,
    Manual(&'static Manual),
}

impl Timeline {
    fn now(self) -> Instant {
        match self {
            Timeline::Real => Instant::now(),
            Timeline::Manual(m) => m.now(),
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clock")
            .field("instant", &self.instant)
            .field("timestamp", &self.timestamp)
            .field("manual", &matches!(self.timeline, Timeline::Manual(_)))
            .finish()
    }
}

impl Clock {
    /// A clock on real time whose timestamps are nanoseconds since the Unix epoch.
    pub fn wall() -> Self {
        Clock::starting_at(unix_now())
    }

    /// A clock on real time that reads `start` now (tests often start at
    /// [`Timestamp::ZERO`]).
    pub fn starting_at(start: Timestamp) -> Self {
        Clock {
            instant: Instant::now(),
            timestamp: start,
            timeline: Timeline::Real,
        }
    }

    /// A clock on a new virtual timeline that reads `start` now, and the handle that moves
    /// its time: see [`ManualClock`]. The usual test runs its future with
    /// [`ManualClock::block_on`], which advances time whenever nothing else can happen.
    ///
    /// The timeline is shared by every copy of the clock and lives until the process
    /// exits (a few words, plus the wakers of sleeps in progress): make one per test or
    /// simulation, not one per request.
    pub fn manual(start: Timestamp) -> (Clock, ManualClock) {
        let manual: &'static Manual = Box::leak(Box::new(Manual::new()));
        let time = ManualClock { manual };
        (time.starting_at(start), time)
    }

    /// The handle of this clock's virtual timeline, `None` for a clock on real time.
    pub fn manual_clock(&self) -> Option<ManualClock> {
        match self.timeline {
            Timeline::Real => None,
            Timeline::Manual(manual) => Some(ManualClock { manual }),
        }
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        let elapsed = self.timeline.now().saturating_duration_since(self.instant);
        self.timestamp + elapsed
    }

    /// Sleeps until this clock reads `t`; forever for [`Timestamp::MAX`], the core's
    /// "never" (a manual clock does not jump to it either).
    pub async fn sleep_until(&self, t: Timestamp) {
        let ahead = t.saturating_duration_since(self.timestamp);
        // Times past what an Instant holds never come either.
        let deadline = (t != Timestamp::MAX)
            .then(|| self.instant.checked_add(ahead))
            .flatten();
        Sleep::new(self.timeline, deadline).await;
    }

    /// Sleeps for `d` on this clock.
    pub async fn sleep(&self, d: Duration) {
        let deadline = self.timeline.now().checked_add(d);
        Sleep::new(self.timeline, deadline).await;
    }

    /// The instant at which this clock reads `t` (now, for times in the past). For a
    /// manual clock it is an instant of the virtual timeline (see [`ManualClock::now`]),
    /// not of `std::time::Instant::now()`.
    pub fn instant(&self, t: Timestamp) -> Instant {
        let ahead = t.saturating_duration_since(self.timestamp);
        // Far-future times (Timestamp::MAX) would overflow an Instant.
        self.instant
            .checked_add(ahead)
            .unwrap_or_else(|| self.timeline.now() + Duration::from_secs(86_400 * 365))
    }

    /// Runs blocking work (store I/O, parsing) on the blocking thread pool, the one
    /// async-std's `spawn_blocking` and smol's `unblock` use, so it never stalls the
    /// executor. A panic in `f` resumes in the awaiting task. Like a spawned blocking task,
    /// `f` runs to completion even if the returned future is dropped.
    ///
    /// On a manual clock, time does not advance while `f` runs (tokio's paused clock
    /// behaves the same around `spawn_blocking`): a test sees the work take no time.
    pub async fn unblock<T, F>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.unblock_catching(f)
            .await
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// [`unblock`](Self::unblock), handing a panic back as a value.
    pub(crate) async fn unblock_catching<T, F>(&self, f: F) -> std::thread::Result<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // Counted from here until both the pool thread is done and this future has the
        // result (or is gone), whichever comes last: see `BlockingCall`.
        let awaiting = match self.timeline {
            Timeline::Real => None,
            Timeline::Manual(m) => Some(BlockingCall::start(m)),
        };
        let running = awaiting.clone();
        let (tx, rx) = async_channel::bounded(1);
        blocking::unblock(move || {
            let out = catch_unwind(AssertUnwindSafe(f));
            // Before the result goes out, so the count cannot be left up after the
            // awaiting task has moved on.
            drop(running);
            // The receiver may be gone (the caller gave up): the work is done anyway.
            let _ = tx.try_send(out);
        })
        .detach();
        let out = rx.recv().await.expect("the blocking pool dropped a call");
        drop(awaiting);
        out
    }
}

/// A sleep on either timeline.
enum Sleep {
    Real(Timer),
    Manual(ManualSleep),
}

impl Sleep {
    fn new(timeline: Timeline, deadline: Option<Instant>) -> Self {
        match timeline {
            Timeline::Real => Sleep::Real(deadline.map_or_else(Timer::never, Timer::at)),
            Timeline::Manual(manual) => Sleep::Manual(ManualSleep {
                manual,
                deadline,
                key: None,
            }),
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Sleep::Real(timer) => Pin::new(timer).poll(cx).map(drop),
            Sleep::Manual(sleep) => sleep.poll(cx),
        }
    }
}

impl Runtime for Clock {
    fn now(&self) -> Timestamp {
        Clock::now(self)
    }

    fn sleep_until(&self, t: Timestamp) -> impl Future<Output = ()> + Send + use<> {
        let clock = *self;
        async move { clock.sleep_until(t).await }
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send + use<> {
        let clock = *self;
        async move { clock.sleep(d).await }
    }

    fn unblock(&self, job: Job) -> impl Future<Output = Result<(), String>> + Send + use<> {
        let clock = *self;
        async move {
            clock
                .unblock_catching(job)
                .await
                .map_err(|panic| panic_message(&*panic))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use futures_lite::future;

    use super::*;

    fn secs(s: f64) -> Timestamp {
        Timestamp::from_secs_f64(s)
    }

    #[test]
    fn block_on_advances_to_each_sleep_when_idle_across_spawned_tasks() {
        let (clock, time) = Clock::manual(Timestamp::ZERO);
        let woke = RefCell::new(Vec::new());
        let ex = async_executor::LocalExecutor::new();
        time.block_on(ex.run(async {
            let tasks: Vec<_> = [3.0, 1.0, 2.5, 1.0]
                .into_iter()
                .map(|s| {
                    let woke = &woke;
                    ex.spawn(async move {
                        clock.sleep(Duration::from_secs_f64(s)).await;
                        woke.borrow_mut().push(clock.now());
                    })
                })
                .collect();
            for t in tasks {
                t.await;
            }
        }));
        assert_eq!(*woke.borrow(), [secs(1.0), secs(1.0), secs(2.5), secs(3.0)]);
        assert_eq!(time.next_deadline(), None);
    }

    #[test]
    fn time_stands_still_while_a_blocking_call_runs() {
        let (clock, time) = Clock::manual(secs(100.0));
        let first = time.block_on(future::or(
            async {
                clock
                    .unblock(|| std::thread::sleep(Duration::from_millis(50)))
                    .await;
                "blocking call"
            },
            async {
                clock.sleep(Duration::from_secs(1)).await;
                "sleep"
            },
        ));
        assert_eq!(first, "blocking call");
        assert_eq!(clock.now(), secs(100.0));
    }

    #[test]
    fn a_panic_in_a_blocking_call_reaches_the_caller_and_time_moves_again() {
        let (clock, time) = Clock::manual(Timestamp::ZERO);
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
            time.block_on(clock.unblock(|| panic!("boom")))
        }));
        assert!(caught.is_err());
        time.block_on(clock.sleep(Duration::from_secs(5)));
        assert_eq!(clock.now(), secs(5.0));
    }

    #[test]
    fn advancing_by_hand_wakes_what_is_due_and_dropped_sleeps_leave() {
        let (clock, time) = Clock::manual(Timestamp::ZERO);
        let mut early = Box::pin(clock.sleep_until(secs(2.0)));
        let mut late = Box::pin(clock.sleep_until(secs(10.0)));
        let mut never = Box::pin(clock.sleep_until(Timestamp::MAX));
        assert!(future::block_on(future::poll_once(early.as_mut())).is_none());
        assert!(future::block_on(future::poll_once(late.as_mut())).is_none());
        assert!(future::block_on(future::poll_once(never.as_mut())).is_none());
        assert_eq!(time.next_deadline(), Some(clock.instant(secs(2.0))));
        time.advance(Duration::from_secs(3));
        assert_eq!(clock.now(), secs(3.0));
        assert!(future::block_on(future::poll_once(early.as_mut())).is_some());
        assert!(future::block_on(future::poll_once(late.as_mut())).is_none());
        drop(late);
        assert_eq!(time.next_deadline(), None, "a dropped sleep is forgotten");
        time.advance_to(clock.instant(secs(1.0)));
        assert_eq!(clock.now(), secs(3.0), "time never goes back");
        // Another clock on the same timeline moves with it.
        let other = time.starting_at(secs(50.0));
        time.advance(Duration::from_millis(250));
        assert_eq!((clock.now(), other.now()), (secs(3.25), secs(50.25)));
        assert!(clock.manual_clock().is_some() && Clock::wall().manual_clock().is_none());
    }

    #[test]
    fn a_real_clock_sleeps_in_real_time() {
        let clock = Clock::starting_at(secs(10.0));
        let started = Instant::now();
        future::block_on(clock.sleep(Duration::from_millis(30)));
        future::block_on(clock.sleep_until(clock.now() + Duration::from_millis(20)));
        future::block_on(clock.sleep_until(Timestamp::ZERO)); // in the past: at once
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(clock.now() >= secs(10.05));
        let wall = Clock::wall().now();
        assert!(wall.saturating_duration_since(unix_now()) < Duration::from_secs(1));
    }
}
