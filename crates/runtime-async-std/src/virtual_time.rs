//! Virtual time: the manual timeline and the executor that advances it when idle.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use polite_throttle_core::Timestamp;

use crate::clock::{Clock, Timeline};

/// The handle that moves a manual clock's virtual time (see [`Clock::manual`]).
///
/// Virtual time starts at an arbitrary instant and moves only forward, only when told:
///
/// - [`block_on`](Self::block_on) runs a future on the current thread and, whenever
///   nothing can make progress (no task woken, no [`Clock::unblock`] call or blocking
///   store call running), jumps to the earliest pending sleep: the "auto-advance when
///   idle" of tokio's paused clock. To run spawned tasks too, block on an executor:
///   `time.block_on(local_executor.run(future))`.
/// - [`advance`](Self::advance) and [`advance_to`](Self::advance_to) move it by hand, for
///   tests that step through time themselves (from any thread).
///
/// ```
/// use std::time::Duration;
///
/// use polite_runtime_async_std::{Clock, Throttle};
/// use polite_throttle_core::{Outcome, ScopeConfig, ScopeUse, Settings, Timestamp};
///
/// let (clock, time) = Clock::manual(Timestamp::ZERO);
/// let settings = Settings::default()
///     .without_jitter()
///     .with_scope("api", ScopeConfig::new().delay(60.0));
/// let throttle = Throttle::new(settings, clock).unwrap();
/// let at = time.block_on(async {
///     throttle.acquire(&[ScopeUse::new("api")]).await.finish(&Outcome::status(200));
///     let _second = throttle.acquire(&[ScopeUse::new("api")]).await; // a virtual minute
///     clock.now()
/// });
/// assert_eq!(at, Timestamp::from_secs(60));
///
/// // By hand: nothing moves until told.
/// time.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), Timestamp::from_secs_f64(61.5));
/// ```
#[derive(Clone, Copy)]
pub struct ManualClock {
    pub(crate) manual: &'static Manual,
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.manual.state();
        f.debug_struct("ManualClock")
            .field("elapsed", &st.elapsed)
            .field("sleeping", &st.sleepers.len())
            .field("blocking", &self.manual.blocking.load(Ordering::Relaxed))
            .finish()
    }
}

impl ManualClock {
    /// Another [`Clock`] on this timeline, reading `start` now.
    pub fn starting_at(&self, start: Timestamp) -> Clock {
        Clock {
            instant: self.now(),
            timestamp: start,
            timeline: Timeline::Manual(self.manual),
        }
    }

    /// The current virtual instant. It is only comparable with other instants of this
    /// timeline ([`Clock::instant`] of its clocks, [`next_deadline`](Self::next_deadline)).
    pub fn now(&self) -> Instant {
        self.manual.now()
    }

    /// Moves time forward by `by`, waking every sleep that ends on the way.
    pub fn advance(&self, by: Duration) {
        let to = self
            .now()
            .checked_add(by)
            .expect("virtual time overflowed an Instant");
        self.advance_to(to);
    }

    /// Moves time forward to `to` (nothing happens for instants in the past), waking every
    /// sleep that ends on the way.
    pub fn advance_to(&self, to: Instant) {
        self.manual.advance_to(to);
    }

    /// When the earliest pending sleep ends, `None` if nothing sleeps.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.manual
            .state()
            .sleepers
            .keys()
            .next()
            .map(|&(at, _)| at)
    }

    /// Runs `future` to completion on the current thread, advancing virtual time to the
    /// next pending sleep whenever the future is idle: it was not woken since it last
    /// returned `Pending`, and no blocking call on this timeline
    /// ([`Clock::unblock`], a driver's store call) is running. While one is, or while
    /// nothing sleeps, the thread parks until a wake-up (from another thread, I/O, or the
    /// blocking call finishing).
    ///
    /// Executors are futures too: `time.block_on(executor.run(main))` runs spawned tasks
    /// under the same rule (the executor is idle when none of its tasks is woken).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let (parker, unparker) = parking::pair();
        let signal = Arc::new(Signal {
            woken: AtomicBool::new(true),
            unparker,
        });
        let waker = Waker::from(signal.clone());
        let mut cx = Context::from_waker(&waker);
        let _runner = Runner::enter(self.manual, &signal);
        let mut future = pin!(future);
        loop {
            if signal.woken.swap(false, Ordering::AcqRel) {
                if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                    return out;
                }
                continue;
            }
            // Idle. A blocking call still running will wake us when done; otherwise jump
            // to the earliest sleep, whose waker wakes us (or someone on another thread).
            if self.manual.blocking.load(Ordering::Acquire) > 0 {
                parker.park();
            } else if let Some(at) = self.next_deadline() {
                self.advance_to(at);
            } else {
                parker.park();
            }
        }
    }
}

/// Wakes [`ManualClock::block_on`]'s thread and records that it was woken.
struct Signal {
    woken: AtomicBool,
    unparker: parking::Unparker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.unparker.unpark();
    }
}

/// Registers a thread in [`ManualClock::block_on`] with its timeline while it runs.
struct Runner {
    manual: &'static Manual,
    signal: Arc<Signal>,
}

impl Runner {
    fn enter(manual: &'static Manual, signal: &Arc<Signal>) -> Self {
        manual.runners().push(signal.clone());
        Runner {
            manual,
            signal: signal.clone(),
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.manual
            .runners()
            .retain(|s| !Arc::ptr_eq(s, &self.signal));
    }
}

/// A virtual timeline.
pub(crate) struct Manual {
    origin: Instant,
    state: Mutex<ManualState>,
    /// Blocking calls in progress: time stands still while there are any.
    blocking: AtomicUsize,
    /// The threads in [`ManualClock::block_on`], unparked when the count above drops to
    /// zero.
    runners: Mutex<Vec<Arc<Signal>>>,
}

struct ManualState {
    elapsed: Duration,
    /// Pending sleeps by deadline, then registration order.
    sleepers: BTreeMap<(Instant, u64), Waker>,
    next_key: u64,
}

impl Manual {
    pub(crate) fn new() -> Self {
        Manual {
            origin: Instant::now(),
            state: Mutex::new(ManualState {
                elapsed: Duration::ZERO,
                sleepers: BTreeMap::new(),
                next_key: 0,
            }),
            blocking: AtomicUsize::new(0),
            runners: Mutex::new(Vec::new()),
        }
    }

    fn runners(&self) -> MutexGuard<'_, Vec<Arc<Signal>>> {
        self.runners.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn state(&self) -> MutexGuard<'_, ManualState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn now(&self) -> Instant {
        self.origin + self.state().elapsed
    }

    fn advance_to(&self, to: Instant) {
        let due = {
            let mut st = self.state();
            let elapsed = to.saturating_duration_since(self.origin);
            if elapsed <= st.elapsed {
                return;
            }
            st.elapsed = elapsed;
            let later = st.sleepers.split_off(&(to, u64::MAX));
            std::mem::replace(&mut st.sleepers, later)
        };
        for waker in due.into_values() {
            waker.wake();
        }
    }
}

/// A sleep on a virtual timeline: registered with its waker until time reaches it.
pub(crate) struct ManualSleep {
    pub(crate) manual: &'static Manual,
    /// `None`: never.
    pub(crate) deadline: Option<Instant>,
    /// Where this sleep is registered, once it has been polled.
    pub(crate) key: Option<(Instant, u64)>,
}

impl ManualSleep {
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.manual.state();
        let now = self.manual.origin + st.elapsed;
        match self.deadline {
            Some(at) if at <= now => {
                if let Some(key) = self.key.take() {
                    st.sleepers.remove(&key);
                }
                Poll::Ready(())
            }
            // Never: nothing to register, nothing will wake it.
            None => Poll::Pending,
            Some(at) => {
                let key = *self.key.get_or_insert_with(|| {
                    st.next_key += 1;
                    (at, st.next_key)
                });
                match st.sleepers.get_mut(&key) {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    Some(w) => w.clone_from(cx.waker()),
                    None => {
                        st.sleepers.insert(key, cx.waker().clone());
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.manual.state().sleepers.remove(&key);
        }
    }
}

/// Counts a blocking call on a virtual timeline, so virtual time does not advance under
/// it. Shared (in an `Arc`) by the pool thread running the call and the task awaiting it:
/// the count comes down when both are done with it. The task's share keeps it up until
/// the task has actually taken the result, so a runner cannot see zero between the call
/// finishing and the task's wake-up; the thread's share keeps it up while a call whose
/// task gave up still runs.
pub(crate) struct BlockingCall {
    manual: &'static Manual,
}

impl BlockingCall {
    pub(crate) fn start(manual: &'static Manual) -> Arc<Self> {
        manual.blocking.fetch_add(1, Ordering::AcqRel);
        Arc::new(BlockingCall { manual })
    }
}

impl Drop for BlockingCall {
    fn drop(&mut self) {
        if self.manual.blocking.fetch_sub(1, Ordering::AcqRel) == 1 {
            // A runner parked on the count (not on a wake-up) looks again.
            for runner in self.manual.runners().iter() {
                runner.unparker.unpark();
            }
        }
    }
}
