//! The standalone throttle: politeness for code that does not use the frontier (an API
//! client, a downloader with its own queue).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use polite_throttle_core::{
    ConfigError, NotReady, Outcome, Permit, RequestFlags, ScopeUse, Settings, Throttler, Ticket,
    TicketPoll, Timestamp,
};

use crate::Runtime;

/// The wake-up signal of one queued ticket: at most one stored notification, like
/// tokio's `Notify::notify_one`, so a wake-up given before the task waits is not lost.
#[derive(Default)]
struct Slot {
    notified: bool,
    waker: Option<Waker>,
}

impl Slot {
    fn notify(&mut self) {
        self.notified = true;
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

struct State {
    throttler: Throttler,
    /// One wake-up signal per queued ticket.
    waiting: HashMap<Ticket, Slot>,
}

impl State {
    /// Hands the throttler's wake-ups to the tasks waiting on those tickets.
    fn dispatch(&mut self) {
        while let Some(ticket) = self.throttler.poll_wakeup() {
            if let Some(slot) = self.waiting.get_mut(&ticket) {
                slot.notify();
            }
        }
    }
}

struct Inner<R> {
    state: Mutex<State>,
    clock: R,
}

impl<R> Inner<R> {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A throttle shared by many tasks: [`acquire`](Self::acquire) waits until every scope of
/// a request allows it, serving the tasks waiting on a scope first come, first served.
///
/// Strict first come, first served means no waiter ever starves, at a price for requests
/// that need several scopes: such a waiter, first in line on one scope but still queued
/// on another, holds the first scope's line until its turn comes on the second. Keep
/// multi-scope requests for scopes that really must be shared (an IP, a cost budget).
///
/// The runtime adapters name it `Throttle` with their clock and show it at work.
pub struct Throttle<R> {
    inner: Arc<Inner<R>>,
}

impl<R> Clone for Throttle<R> {
    fn clone(&self) -> Self {
        Throttle {
            inner: self.inner.clone(),
        }
    }
}

impl<R> std::fmt::Debug for Throttle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle").finish_non_exhaustive()
    }
}

impl<R: Runtime> Throttle<R> {
    /// A throttle for `settings` on `clock`.
    pub fn new(settings: Settings, clock: R) -> Result<Self, ConfigError> {
        Ok(Throttle {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    throttler: Throttler::new(settings, clock.now())?,
                    waiting: HashMap::new(),
                }),
                clock,
            }),
        })
    }

    /// The throttle's clock.
    pub fn clock(&self) -> R {
        self.inner.clock
    }

    /// Waits until every scope allows the request, then reserves them all at once.
    pub async fn acquire(&self, scopes: &[ScopeUse<'_>]) -> ThrottlePermit<R> {
        self.acquire_with(scopes, RequestFlags::default()).await
    }

    /// [`acquire`](Self::acquire) with per-request flags.
    pub async fn acquire_with(
        &self,
        scopes: &[ScopeUse<'_>],
        flags: RequestFlags,
    ) -> ThrottlePermit<R> {
        let (ticket, mut why) = {
            let mut st = self.inner.state();
            // Read once the throttler is ours, as everywhere: a send is recorded at the
            // time it is allowed, not before a wait for the lock.
            let now = self.inner.clock.now();
            match st.throttler.try_acquire_or_enqueue(scopes, flags, now) {
                Ok(permit) => return self.permit(permit, flags),
                Err((ticket, why)) => {
                    st.waiting.insert(ticket, Slot::default());
                    st.dispatch();
                    (ticket, why)
                }
            }
        };
        // Dropping this future (a timeout, a cancelled task) gives the place up.
        let mut guard = Waiting {
            inner: &self.inner,
            ticket: Some(ticket),
        };
        loop {
            let notified = Notified {
                inner: &self.inner,
                ticket,
            };
            match why {
                NotReady::NotUntil(t) => {
                    futures_lite::future::or(self.inner.clock.sleep_until(t), notified).await;
                }
                NotReady::Blocked => notified.await,
            }
            let mut st = self.inner.state();
            let polled = st.throttler.poll_ticket(ticket, self.inner.clock.now());
            st.dispatch();
            match polled {
                TicketPoll::Ready(permit) => {
                    st.waiting.remove(&ticket);
                    guard.ticket = None;
                    drop(st);
                    return self.permit(permit, flags);
                }
                TicketPoll::Waiting(w) => why = w,
                TicketPoll::Unknown => {
                    // Cannot happen while this future holds the ticket; wait again rather
                    // than spin.
                    why = NotReady::Blocked;
                }
            }
        }
    }

    fn permit(&self, permit: Permit, flags: RequestFlags) -> ThrottlePermit<R> {
        ThrottlePermit {
            inner: self.inner.clone(),
            permit: Some(permit),
            dont_track: flags.dont_track,
        }
    }

    /// Runs `f` on the throttler (stats, Crawl-delay, live changes); waiters are looked
    /// at again afterwards.
    pub fn with_throttler<T>(&self, f: impl FnOnce(&mut Throttler, Timestamp) -> T) -> T {
        let mut st = self.inner.state();
        let now = self.inner.clock.now();
        let out = f(&mut st.throttler, now);
        // A change may let waiters through: wake every queue head to look again.
        st.dispatch();
        for slot in st.waiting.values_mut() {
            slot.notify();
        }
        out
    }
}

/// Waits for a wake-up of one queued ticket (consuming it).
struct Notified<'a, R> {
    inner: &'a Inner<R>,
    ticket: Ticket,
}

impl<R> Future for Notified<'_, R> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.inner.state();
        let Some(slot) = st.waiting.get_mut(&self.ticket) else {
            return Poll::Ready(());
        };
        if std::mem::take(&mut slot.notified) {
            return Poll::Ready(());
        }
        match &mut slot.waker {
            Some(w) => w.clone_from(cx.waker()),
            None => slot.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// Gives a queued place up if the acquiring future is dropped.
struct Waiting<'a, R> {
    inner: &'a Inner<R>,
    ticket: Option<Ticket>,
}

impl<R> Drop for Waiting<'_, R> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let mut st = self.inner.state();
            st.waiting.remove(&ticket);
            st.throttler.cancel(ticket);
            st.dispatch();
        }
    }
}

/// Slots held on every scope of a request. [`finish`](Self::finish) it with how the
/// request ended; dropping it releases the slots without an outcome (never a backoff).
#[must_use = "a permit holds throttling slots until it is finished or dropped"]
pub struct ThrottlePermit<R: Runtime> {
    inner: Arc<Inner<R>>,
    permit: Option<Permit>,
    dont_track: bool,
}

impl<R: Runtime> std::fmt::Debug for ThrottlePermit<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottlePermit")
            .field("permit", &self.permit)
            .finish()
    }
}

impl<R: Runtime> ThrottlePermit<R> {
    /// Releases the slots and feeds the outcome to backoff (unless the request was
    /// `dont_track`).
    pub fn finish(mut self, outcome: &Outcome<'_>) {
        self.release(outcome);
    }

    fn release(&mut self, outcome: &Outcome<'_>) {
        if let Some(permit) = self.permit.take() {
            let outcome = if self.dont_track {
                &Outcome::Cancelled
            } else {
                outcome
            };
            let mut st = self.inner.state();
            let now = self.inner.clock.now();
            st.throttler.release(permit, outcome, now);
            st.dispatch();
        }
    }
}

impl<R: Runtime> Drop for ThrottlePermit<R> {
    fn drop(&mut self) {
        self.release(&Outcome::Cancelled);
    }
}
