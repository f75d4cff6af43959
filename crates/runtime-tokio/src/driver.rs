//! The driver: a frontier shared by many tasks, with store I/O off the executor.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use frontier_core::{
    Frontier, FrontierError, Lease, LeaseId, Poll, PushOutcome, Request, Scheduling,
};
use throttle_core::{CrawlDelayDecision, Outcome, QuotaReconcile, Timestamp};
use tokio::sync::Notify;

use crate::clock::Clock;

/// Why a driver operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DriverError<E> {
    /// The frontier (or its store) failed.
    Frontier(FrontierError<E>),
    /// The driver was shut down.
    Closed,
    /// A blocking store call panicked or was cancelled.
    Blocking(String),
}

impl<E: std::fmt::Display> std::fmt::Display for DriverError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Frontier(e) => e.fmt(f),
            DriverError::Closed => f.write_str("the frontier driver was shut down"),
            DriverError::Blocking(e) => write!(f, "a store call failed to complete: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for DriverError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DriverError::Frontier(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> From<FrontierError<E>> for DriverError<E> {
    fn from(e: FrontierError<E>) -> Self {
        DriverError::Frontier(e)
    }
}

struct Inner<B> {
    frontier: Mutex<Option<B>>,
    /// Woken when anything happens that may let a request go sooner: a push, a
    /// completion, a retry, a configuration change.
    changed: Notify,
    /// First come, first served among tasks waiting in `next`.
    turn: tokio::sync::Mutex<()>,
    clock: Clock,
}

/// A frontier driven on tokio: cloneable handles for many tasks, `next` that sleeps
/// exactly until something can be sent, store I/O off the executor.
///
/// `Driver<S>` drives the in-process [`Frontier`] over store `S`; it is
/// [`DriverFor<Frontier<S>>`](DriverFor), the driver of any
/// [`Scheduling`] frontier (a shared one from `store-redis` too).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use frontier_core::{Frontier, Request};
/// use runtime_tokio::{Clock, Driver};
/// use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
///
/// let clock = Clock::starting_at(Timestamp::ZERO);
/// let settings = Settings::default()
///     .without_jitter()
///     .with_scope("example.com", ScopeConfig::new().delay(10.0));
/// let driver = Driver::new(Frontier::in_memory(settings, clock.now())?, clock);
/// driver.push(Request::get("https://example.com/a")).await?;
/// driver.push(Request::get("https://example.com/b")).await?;
///
/// let first = driver.next().await.unwrap()?;
/// driver.complete(first.id(), Outcome::status(200)).await?;
/// let second = driver.next().await.unwrap()?;          // sleeps exactly 10 s
/// assert_eq!(driver.now(), Timestamp::from_secs(10));
/// driver.complete(second.id(), Outcome::status(200)).await?;
/// assert!(driver.next().await.is_none());               // empty, nothing in flight
/// # Ok(())
/// # }
/// ```
pub type Driver<S> = DriverFor<Frontier<S>>;

/// The driver of any [`Scheduling`] frontier `B`: the in-process [`Frontier`] (see
/// [`Driver`]) or one shared by many processes, such as `store-redis`'s. A shared
/// frontier's completions by other processes wake nobody here: `next` also wakes at the
/// frontier's [`poll_timeout`](Scheduling::poll_timeout) to look again.
pub struct DriverFor<B> {
    inner: Arc<Inner<B>>,
}

impl<B> Clone for DriverFor<B> {
    fn clone(&self) -> Self {
        DriverFor {
            inner: self.inner.clone(),
        }
    }
}

impl<B> std::fmt::Debug for DriverFor<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl<B> DriverFor<B>
where
    B: Scheduling + Send + 'static,
    B::StoreError: Send + 'static,
{
    /// Drives `frontier` with `clock` (the clock the frontier was opened with).
    pub fn new(frontier: B, clock: Clock) -> Self {
        DriverFor {
            inner: Arc::new(Inner {
                frontier: Mutex::new(Some(frontier)),
                changed: Notify::new(),
                turn: tokio::sync::Mutex::new(()),
                clock,
            }),
        }
    }

    /// The current time on the driver's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The driver's clock.
    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// Runs `op` on the frontier: off the executor (in place on the multi-threaded
    /// runtime, on the blocking pool on the current-thread one) for stores whose calls block
    /// on I/O (so they never stall the executor), inline for in-memory stores.
    async fn blocking<R, Op>(&self, op: Op) -> Result<R, DriverError<B::StoreError>>
    where
        Op: FnOnce(&mut B, Timestamp) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.call(false, op).await
    }

    /// Runs a mutating `op` (see [`blocking`](Self::blocking)) and wakes the tasks waiting
    /// in [`next`](Self::next) from inside the call, so they are woken even if the
    /// caller's future is dropped while the store works.
    async fn mutate<R, Op>(&self, op: Op) -> Result<R, DriverError<B::StoreError>>
    where
        Op: FnOnce(&mut B, Timestamp) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.call(true, op).await
    }

    async fn call<R, Op>(&self, notify: bool, op: Op) -> Result<R, DriverError<B::StoreError>>
    where
        Op: FnOnce(&mut B, Timestamp) -> R + Send + 'static,
        R: Send + 'static,
    {
        let inner = self.inner.clone();
        let run = move || {
            let now = inner.clock.now();
            let mut guard = lock(&inner.frontier);
            let out = guard.as_mut().map(|f| op(f, now));
            drop(guard);
            if notify {
                inner.changed.notify_waiters();
            }
            out
        };
        let multi_thread = matches!(
            tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(tokio::runtime::RuntimeFlavor::MultiThread)
        );
        let out = if !B::BLOCKING {
            run()
        } else if multi_thread {
            // On the multi-threaded runtime the store call runs on this worker thread,
            // which hands its other tasks to another worker first: no thread handoff
            // per call (spawn_blocking costs two).
            tokio::task::block_in_place(run)
        } else {
            tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| DriverError::Blocking(e.to_string()))?
        };
        out.ok_or(DriverError::Closed)
    }

    /// Queues a request.
    pub async fn push(&self, request: Request) -> Result<PushOutcome, DriverError<B::StoreError>> {
        let out = self.mutate(move |f, now| f.push(&request, now)).await??;
        Ok(out)
    }

    /// Queues many requests in one store round trip.
    pub async fn push_all(
        &self,
        requests: Vec<Request>,
    ) -> Result<Vec<PushOutcome>, DriverError<B::StoreError>> {
        let out = self
            .mutate(move |f, now| f.push_all(&requests, now))
            .await??;
        Ok(out)
    }

    /// The next request that may be sent now, waiting as long as needed: exactly until
    /// the next scope or delayed request allows it, or less if a completion frees a scope
    /// first. `None` when nothing is queued and nothing is in flight. Tasks calling it
    /// concurrently are served first come, first served.
    ///
    /// Cancel safety: dropping the future while it waits loses nothing, but dropping it
    /// while a poll runs on the blocking pool (current-thread runtime) can leave the
    /// lease that poll took in
    /// flight (holding its scope slots) until the store is reopened, which delivers it
    /// again. Stop workers between leases, or only when shutting down.
    pub async fn next(&self) -> Option<Result<Lease, DriverError<B::StoreError>>> {
        let _turn = self.inner.turn.lock().await;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let polled = self
                .blocking(|f, now| (f.poll(now), f.in_flight(), f.poll_timeout()))
                .await;
            let (poll, in_flight, timeout) = match polled {
                Ok(p) => p,
                Err(DriverError::Closed) => return None,
                Err(e) => return Some(Err(e)),
            };
            match poll {
                Err(e) => return Some(Err(e.into())),
                Ok(Poll::Ready(lease)) => return Some(Ok(lease)),
                Ok(Poll::Empty) if in_flight == 0 => return None,
                Ok(Poll::NotUntil(t)) => {
                    let deadline = self.inner.clock.instant(t);
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = &mut notified => {}
                    }
                }
                // A completion here notifies; work freed elsewhere (a shared frontier)
                // is found by looking again at the frontier's next wake-up.
                Ok(Poll::Blocked | Poll::Empty) => match timeout {
                    Some(t) => {
                        let deadline = self.inner.clock.instant(t);
                        tokio::select! {
                            () = tokio::time::sleep_until(deadline) => {}
                            () = &mut notified => {}
                        }
                    }
                    None => notified.await,
                },
            }
        }
    }

    /// The leases as a stream (see [`next`](Self::next)).
    pub fn leases(&self) -> LeasesFor<B> {
        LeasesFor {
            driver: self.clone(),
            pending: None,
        }
    }

    /// Acknowledges a lease with how it ended (feeding backoff). `false` if it was
    /// already ended.
    pub async fn complete(
        &self,
        lease: LeaseId,
        outcome: Outcome<'static>,
    ) -> Result<bool, DriverError<B::StoreError>> {
        let done = self
            .mutate(move |f, now| f.complete(lease, &outcome, now))
            .await??;
        Ok(done)
    }

    /// Puts a lease back with its priority adjusted (after its outcome fed backoff).
    pub async fn retry(
        &self,
        lease: LeaseId,
        outcome: Outcome<'static>,
        priority_adjust: i32,
    ) -> Result<bool, DriverError<B::StoreError>> {
        let done = self
            .mutate(move |f, now| f.retry(lease, &outcome, priority_adjust, now))
            .await??;
        Ok(done)
    }

    /// Reports a robots.txt Crawl-delay for a scope.
    pub async fn handle_crawl_delay(
        &self,
        scope: String,
        secs: f64,
    ) -> Result<CrawlDelayDecision, DriverError<B::StoreError>> {
        let out = self
            .mutate(move |f, now| f.handle_crawl_delay(&scope, secs, now))
            .await??;
        Ok(out)
    }

    /// Holds back a scope (a soft block seen in a page).
    pub async fn delay_scope(
        &self,
        scope: String,
        secs: f64,
    ) -> Result<(), DriverError<B::StoreError>> {
        self.mutate(move |f, now| f.delay_scope(&scope, secs, now))
            .await??;
        Ok(())
    }

    /// Corrects a scope's quota consumption.
    pub async fn reconcile_quota(
        &self,
        scope: String,
        how: QuotaReconcile,
    ) -> Result<(), DriverError<B::StoreError>> {
        self.mutate(move |f, now| f.reconcile_quota(&scope, how, now))
            .await??;
        Ok(())
    }

    /// Runs `read` on the frontier (stats, throttler state, ...), off the executor.
    pub async fn inspect<R, Op>(&self, read: Op) -> Result<R, DriverError<B::StoreError>>
    where
        Op: FnOnce(&B) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.blocking(move |f, _| read(f)).await
    }

    /// Makes everything durable now.
    pub async fn flush(&self) -> Result<(), DriverError<B::StoreError>> {
        self.blocking(|f, _| f.flush()).await??;
        Ok(())
    }

    /// Makes every queue change so far durable, without saving scope states (see
    /// [`Frontier::commit`] and [`Scheduling::commit`]): call it after a completion to bound what a crash repeats
    /// to the requests in flight.
    pub async fn commit(&self) -> Result<(), DriverError<B::StoreError>> {
        self.blocking(|f, _| f.commit()).await??;
        Ok(())
    }

    /// Flushes every `every` until the driver is shut down (group commit's time bound
    /// while the crawl is idle). Spawn it: `tokio::spawn(driver.clone().flush_every(..))`.
    pub async fn flush_every(self, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            if self.flush().await.is_err() {
                return;
            }
        }
    }

    /// Stops the driver: flushes the store and hands it back (see
    /// [`Scheduling::close`]). Leases still out are not acknowledged; a frontier reopened
    /// on the store delivers them again. Other handles get [`DriverError::Closed`], and
    /// their `next` ends.
    pub async fn shutdown(&self) -> Result<B::Closed, DriverError<B::StoreError>>
    where
        B::Closed: Send + 'static,
    {
        let inner = self.inner.clone();
        let store = tokio::task::spawn_blocking(move || {
            let frontier = lock(&inner.frontier).take();
            frontier.map(Scheduling::close)
        })
        .await
        .map_err(|e| DriverError::Blocking(e.to_string()))?
        .ok_or(DriverError::Closed)??;
        self.inner.changed.notify_waiters();
        Ok(store)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a store call must not wedge every other task.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

type NextFuture<B> = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Option<Result<Lease, DriverError<<B as Scheduling>::StoreError>>>,
            > + Send,
    >,
>;

/// The stream of [`Driver::leases`] for the in-process frontier over store `S`.
pub type Leases<S> = LeasesFor<Frontier<S>>;

/// The stream of [`DriverFor::leases`].
pub struct LeasesFor<B: Scheduling> {
    driver: DriverFor<B>,
    pending: Option<NextFuture<B>>,
}

impl<B> futures_core::Stream for LeasesFor<B>
where
    B: Scheduling + Send + 'static,
    B::StoreError: Send + 'static,
{
    type Item = Result<Lease, DriverError<B::StoreError>>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = &mut *self;
        let fut = this.pending.get_or_insert_with(|| {
            let driver = this.driver.clone();
            Box::pin(async move { driver.next().await })
        });
        match fut.as_mut().poll(cx) {
            std::task::Poll::Ready(item) => {
                this.pending = None;
                std::task::Poll::Ready(item)
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}
