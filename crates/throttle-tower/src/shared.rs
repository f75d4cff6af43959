//! One budget for every process: permits taken from a crawl's politeness state in Redis
//! (polite-store-redis), so API clients on many machines, and crawlers of the same crawl,
//! space their requests to a scope together.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use polite_runtime_common::Runtime;
use polite_store_redis::{RedisFrontier, RedisPermit};
use polite_throttle_core::{NotReady, Outcome, ScopeUse, Timestamp};

use crate::{BoxError, Error, ThrottleLayer};

/// What one `try_acquire` on Redis said (its error as text).
type Answer = Result<Result<RedisPermit, NotReady>, String>;

struct Inner<R> {
    frontier: Mutex<RedisFrontier>,
    clock: R,
    /// Completions go to a thread of their own, so that finishing a permit never blocks
    /// the task (or the drop) that finishes it.
    releases: Mutex<mpsc::Sender<(RedisPermit, Outcome<'static>)>>,
    released: event_listener::Event,
    recheck: Duration,
}

impl<R> Inner<R> {
    fn frontier(&self) -> MutexGuard<'_, RedisFrontier> {
        self.frontier.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A budget shared through Redis: the scopes' states of the crawl a [`RedisFrontier`] was
/// opened on. Give it to [`ThrottleLayer::shared`].
///
/// Each request takes a standalone permit ([`RedisFrontier::try_acquire`]); one that
/// must wait sleeps until the time Redis names, or, when a concurrency limit is full,
/// until a permit of this process is released or `recheck` passes (another process's
/// release is seen then). Waiters of one process are not served strictly in arrival
/// order, unlike a local [`Throttle`](polite_runtime_common::Throttle). A process that
/// dies holding permits gets them back after the frontier's `lease_timeout`.
pub struct SharedBudget<R: Runtime> {
    inner: Arc<Inner<R>>,
}

impl<R: Runtime> Clone for SharedBudget<R> {
    fn clone(&self) -> Self {
        SharedBudget {
            inner: self.inner.clone(),
        }
    }
}

impl<R: Runtime> std::fmt::Debug for SharedBudget<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBudget")
            .field("recheck", &self.inner.recheck)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> SharedBudget<R> {
    /// A budget over `frontier`'s crawl, on `clock` (its times are the `now` given to
    /// Redis: use the same clock as the other processes, or `TimeSource::Server`).
    pub fn new(frontier: RedisFrontier, clock: R) -> Self {
        let (tx, rx) = mpsc::channel::<(RedisPermit, Outcome<'static>)>();
        let inner = Arc::new(Inner {
            frontier: Mutex::new(frontier),
            clock,
            releases: Mutex::new(tx),
            released: event_listener::Event::new(),
            recheck: Duration::from_millis(25),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("polite-shared-budget".into())
            .spawn(move || {
                while let Ok((permit, outcome)) = rx.recv() {
                    let Some(inner) = weak.upgrade() else { break };
                    let now = inner.clock.now();
                    if let Err(e) = inner.frontier().release(permit, &outcome, now) {
                        tracing::warn!(error = %e, "shared budget: a permit could not be released (it expires after lease_timeout)");
                    }
                    inner.released.notify(usize::MAX);
                }
            })
            .expect("spawn the shared budget's release thread");
        SharedBudget { inner }
    }

    /// Looks again at least this often while a concurrency limit is full (default
    /// 25 ms): releases by other processes are seen then.
    pub fn recheck(self, every: Duration) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|_| {
            panic!("SharedBudget::recheck must be called before the budget is cloned")
        });
        SharedBudget {
            inner: Arc::new(Inner {
                recheck: every,
                ..inner
            }),
        }
    }

    /// Waits for a permit on `scope`.
    pub(crate) async fn acquire(&self, scope: &str) -> Result<SharedPermit<R>, BoxError> {
        loop {
            let listener = self.inner.released.listen();
            let answer: Arc<Mutex<Option<Answer>>> = Arc::default();
            let (inner, out, name) = (self.inner.clone(), answer.clone(), scope.to_string());
            self.inner
                .clock
                .unblock(Box::new(move || {
                    let now = inner.clock.now();
                    let r = inner
                        .frontier()
                        .try_acquire(&[ScopeUse::new(&name)], now)
                        .map_err(|e| e.to_string());
                    *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }))
                .await
                .map_err(Error::Budget)?;
            let answer = answer.lock().unwrap_or_else(|p| p.into_inner()).take();
            let wait_until = match answer {
                Some(Ok(Ok(permit))) => {
                    return Ok(SharedPermit {
                        budget: self.clone(),
                        permit: Some(permit),
                    });
                }
                Some(Ok(Err(NotReady::NotUntil(t)))) => t,
                Some(Ok(Err(NotReady::Blocked))) => self.inner.clock.now() + self.inner.recheck,
                Some(Err(e)) => return Err(Error::Budget(e).into()),
                None => return Err(Error::Budget("the Redis call did not run".into()).into()),
            };
            let wait_until: Timestamp =
                wait_until.min(self.inner.clock.now() + self.inner.recheck * 40);
            futures_lite::future::or(self.inner.clock.sleep_until(wait_until), listener).await;
        }
    }
}

/// A permit of a [`SharedBudget`]: released with the request's outcome, or in the
/// background without one when dropped.
pub struct SharedPermit<R: Runtime> {
    budget: SharedBudget<R>,
    permit: Option<RedisPermit>,
}

impl<R: Runtime> std::fmt::Debug for SharedPermit<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPermit")
            .field("permit", &self.permit)
            .finish()
    }
}

impl<R: Runtime> SharedPermit<R> {
    /// Releases the permit with how the request ended, and waits until Redis has it.
    pub(crate) async fn finish(mut self, outcome: Outcome<'static>) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let inner = self.budget.inner.clone();
        let job_inner = inner.clone();
        let done = inner
            .clock
            .unblock(Box::new(move || {
                let now = job_inner.clock.now();
                if let Err(e) = job_inner.frontier().release(permit, &outcome, now) {
                    tracing::warn!(error = %e, "shared budget: a permit could not be released (it expires after lease_timeout)");
                }
                job_inner.released.notify(usize::MAX);
            }))
            .await;
        if let Err(e) = done {
            tracing::warn!(error = %e, "shared budget: the release did not run");
        }
    }

    fn release(&mut self, outcome: Outcome<'static>) {
        if let Some(permit) = self.permit.take() {
            let tx = self
                .budget
                .inner
                .releases
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let _ = tx.send((permit, outcome));
        }
    }
}

impl<R: Runtime> Drop for SharedPermit<R> {
    fn drop(&mut self) {
        self.release(Outcome::Cancelled);
    }
}

impl<R: Runtime> ThrottleLayer<R> {
    /// A layer spending a budget shared through Redis by every process that opens the
    /// same crawl (see [`SharedBudget`]).
    pub fn shared(budget: SharedBudget<R>) -> Self {
        Self::with_budget(crate::budget::Budget::Shared(budget))
    }
}
