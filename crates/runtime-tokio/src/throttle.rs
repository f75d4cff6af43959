//! The standalone throttle: politeness for code that does not use the frontier (an API
//! client, a downloader with its own queue).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use throttle_core::{
    ConfigError, NotReady, Outcome, Permit, RequestFlags, ScopeUse, Settings, Throttler, Ticket,
    TicketPoll, Timestamp,
};
use tokio::sync::Notify;

use crate::clock::Clock;

struct State {
    throttler: Throttler,
    /// One wake-up signal per queued ticket.
    waiting: HashMap<Ticket, Arc<Notify>>,
}

impl State {
    /// Hands the throttler's wake-ups to the tasks waiting on those tickets.
    fn dispatch(&mut self) {
        while let Some(ticket) = self.throttler.poll_wakeup() {
            if let Some(n) = self.waiting.get(&ticket) {
                n.notify_one();
            }
        }
    }
}

struct Inner {
    state: Mutex<State>,
    clock: Clock,
}

impl Inner {
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
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use runtime_tokio::{Clock, Throttle};
/// use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
///
/// let clock = Clock::starting_at(Timestamp::ZERO);
/// let settings = Settings::default()
///     .without_jitter()
///     .with_scope("api.example.com", ScopeConfig::new().delay(2.0));
/// let throttle = Throttle::new(settings, clock)?;
///
/// let permit = throttle.acquire(&["api.example.com".into()]).await;
/// permit.finish(&Outcome::response(429, [("Retry-After", "30")], None));
/// let _next = throttle.acquire(&["api.example.com".into()]).await; // waits out the 30 s
/// assert_eq!(clock.now(), Timestamp::from_secs(30));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Throttle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle").finish_non_exhaustive()
    }
}

impl Throttle {
    /// A throttle for `settings` on `clock`.
    pub fn new(settings: Settings, clock: Clock) -> Result<Self, ConfigError> {
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
    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// Waits until every scope allows the request, then reserves them all at once.
    pub async fn acquire(&self, scopes: &[ScopeUse<'_>]) -> ThrottlePermit {
        self.acquire_with(scopes, RequestFlags::default()).await
    }

    /// [`acquire`](Self::acquire) with per-request flags.
    pub async fn acquire_with(
        &self,
        scopes: &[ScopeUse<'_>],
        flags: RequestFlags,
    ) -> ThrottlePermit {
        let now = self.inner.clock.now();
        let (ticket, notify, mut why) = {
            let mut st = self.inner.state();
            match st.throttler.try_acquire_or_enqueue(scopes, flags, now) {
                Ok(permit) => return self.permit(permit, flags),
                Err((ticket, why)) => {
                    let notify = Arc::new(Notify::new());
                    st.waiting.insert(ticket, notify.clone());
                    st.dispatch();
                    (ticket, notify, why)
                }
            }
        };
        // Dropping this future (a timeout, a cancelled task) gives the place up.
        let mut guard = Waiting {
            inner: &self.inner,
            ticket: Some(ticket),
        };
        loop {
            match why {
                NotReady::NotUntil(t) => {
                    let deadline = self.inner.clock.instant(t);
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = notify.notified() => {}
                    }
                }
                NotReady::Blocked => notify.notified().await,
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

    fn permit(&self, permit: Permit, flags: RequestFlags) -> ThrottlePermit {
        ThrottlePermit {
            inner: self.inner.clone(),
            permit: Some(permit),
            dont_track: flags.dont_track,
        }
    }

    /// Runs `f` on the throttler (stats, Crawl-delay, live changes); waiters are looked
    /// at again afterwards.
    pub fn with_throttler<R>(&self, f: impl FnOnce(&mut Throttler, Timestamp) -> R) -> R {
        let mut st = self.inner.state();
        let now = self.inner.clock.now();
        let out = f(&mut st.throttler, now);
        // A change may let waiters through: wake every queue head to look again.
        let heads: Vec<Arc<Notify>> = st.waiting.values().cloned().collect();
        st.dispatch();
        drop(st);
        for n in heads {
            n.notify_one();
        }
        out
    }
}

/// Gives a queued place up if the acquiring future is dropped.
struct Waiting<'a> {
    inner: &'a Inner,
    ticket: Option<Ticket>,
}

impl Drop for Waiting<'_> {
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
pub struct ThrottlePermit {
    inner: Arc<Inner>,
    permit: Option<Permit>,
    dont_track: bool,
}

impl std::fmt::Debug for ThrottlePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottlePermit")
            .field("permit", &self.permit)
            .finish()
    }
}

impl ThrottlePermit {
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

impl Drop for ThrottlePermit {
    fn drop(&mut self) {
        self.release(&Outcome::Cancelled);
    }
}
