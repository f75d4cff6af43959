//! The driver: a frontier shared by many tasks, with store I/O off the executor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use event_listener::{Event, listener};
use polite_frontier_core::{
    FrontierError, Lease, Poll, PushOutcome, Request, RequestId, Scheduling,
};
use polite_throttle_core::{CrawlDelayDecision, Outcome, QuotaReconcile, Timestamp};

use crate::Runtime;
use crate::turn::Turn;

/// Why a driver operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DriverError<E> {
    /// The frontier (or its store) failed.
    Frontier(FrontierError<E>),
    /// The driver was closed.
    Closed,
    /// A blocking store call panicked or was cancelled.
    Blocking(String),
}

impl<E: std::fmt::Display> std::fmt::Display for DriverError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Frontier(e) => e.fmt(f),
            DriverError::Closed => f.write_str("the frontier driver was closed"),
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

struct Inner<B, R> {
    frontier: Mutex<Option<B>>,
    /// Notified when anything happens that may let a request go sooner: a push, a
    /// completion, a retry, a configuration change.
    changed: Event,
    /// Tasks in `next` that listen to `changed` (or are about to): a change notifies
    /// only when there are some, as `next`'s first look goes without a listener.
    listening: AtomicUsize,
    /// First come, first served among tasks waiting in `next`.
    turn: Turn,
    clock: R,
}

impl<B, R: Runtime> Inner<B, R> {
    /// Runs `op` on the frontier with the time read once it is ours: another call may
    /// hold it for a while (a store's fsync), and a poll that used the time from before
    /// that wait would record its send as earlier than it goes out, letting the scope's
    /// next request follow it without its delay. `None` once closed.
    fn step<T>(&self, op: impl FnOnce(&mut B, Timestamp) -> T, changes: bool) -> Option<T> {
        let mut frontier = lock(&self.frontier);
        let now = self.clock.now();
        let out = frontier.as_mut().map(|f| op(f, now));
        drop(frontier);
        // SeqCst with the increment in `next`: either that task counted itself before
        // this load (and is told), or it looks at the frontier after this change.
        if changes && self.listening.load(Ordering::SeqCst) > 0 {
            self.changed.notify(usize::MAX);
        }
        out
    }
}

/// Counts a task in [`Inner::listening`] while it lives.
struct Listening<'a>(&'a AtomicUsize);

impl<'a> Listening<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Listening(count)
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The driver of any [`Scheduling`] frontier `B` (the in-process
/// [`Frontier`](polite_frontier_core::Frontier), or one shared by many processes, such as
/// `polite-store-redis`'s) on runtime `R`: cloneable handles for many tasks, [`next`](Self::next)
/// that sleeps exactly until something can be sent, store I/O off the executor.
///
/// A store call runs to completion even if the future awaiting it is dropped, and a push,
/// completion or retry wakes the tasks waiting in [`next`](Self::next) as soon as it is
/// done, whether or not its caller still waits. A shared frontier's completions by other
/// processes wake nobody here: `next` also wakes at the frontier's
/// [`poll_timeout`](Scheduling::poll_timeout) to look again.
pub struct DriverFor<B, R> {
    inner: Arc<Inner<B, R>>,
}

impl<B, R> Clone for DriverFor<B, R> {
    fn clone(&self) -> Self {
        DriverFor {
            inner: self.inner.clone(),
        }
    }
}

impl<B, R> std::fmt::Debug for DriverFor<B, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl<B, R> DriverFor<B, R>
where
    B: Scheduling + Send + 'static,
    B::StoreError: Send + 'static,
    R: Runtime,
{
    /// Drives `frontier` with `clock` (the clock the frontier was opened with).
    pub fn new(frontier: B, clock: R) -> Self {
        DriverFor {
            inner: Arc::new(Inner {
                frontier: Mutex::new(Some(frontier)),
                changed: Event::new(),
                listening: AtomicUsize::new(0),
                turn: Turn::default(),
                clock,
            }),
        }
    }

    /// The current time on the driver's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The driver's clock.
    pub fn clock(&self) -> R {
        self.inner.clock
    }

    /// Runs `op` on the frontier: on the blocking thread pool for stores whose calls
    /// block on I/O (so they never stall the executor), inline for in-memory stores.
    ///
    /// This and [`blocking_change`](Self::blocking_change) hand back [`run`](Self::run)'s
    /// future instead of awaiting it in an async fn of their own: one more layer of
    /// futures per call showed in the driver's overhead (a few percent of a lease in
    /// `profile-driver`).
    fn blocking<T, Op>(
        &self,
        op: Op,
    ) -> impl Future<Output = Result<T, DriverError<B::StoreError>>> + use<'_, T, Op, B, R>
    where
        Op: FnOnce(&mut B, Timestamp) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run(op, false)
    }

    /// [`blocking`](Self::blocking) for an `op` that may let a request go sooner: tasks
    /// waiting in `next` look again. They are told as soon as `op` is done, even if the
    /// caller stopped waiting for it meanwhile (the call still runs to completion).
    fn blocking_change<T, Op>(
        &self,
        op: Op,
    ) -> impl Future<Output = Result<T, DriverError<B::StoreError>>> + use<'_, T, Op, B, R>
    where
        Op: FnOnce(&mut B, Timestamp) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run(op, true)
    }

    /// What [`blocking`](Self::blocking) and [`blocking_change`](Self::blocking_change)
    /// run: [`Inner::step`], through [`Runtime::unblock`] when the store blocks.
    async fn run<T, Op>(&self, op: Op, changes: bool) -> Result<T, DriverError<B::StoreError>>
    where
        Op: FnOnce(&mut B, Timestamp) -> T + Send + 'static,
        T: Send + 'static,
    {
        let out = if B::BLOCKING {
            let inner = self.inner.clone();
            self.unblock(move || inner.step(op, changes)).await?
        } else {
            self.inner.step(op, changes)
        };
        out.ok_or(DriverError::Closed)
    }

    /// Runs `f` through [`Runtime::unblock`] as a boxed job, so the runtime's future
    /// names no closure type (rustc cannot always prove a future `Send` when it does).
    async fn unblock<T, F>(&self, f: F) -> Result<T, DriverError<B::StoreError>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let slot = Arc::new(Mutex::new(None));
        let filled = slot.clone();
        self.inner
            .clock
            .unblock(Box::new(move || *lock(&filled) = Some(f())))
            .await
            .map_err(DriverError::Blocking)?;
        let out = lock(&slot).take();
        out.ok_or_else(|| DriverError::Blocking("the store call did not run".into()))
    }

    /// Queues a request.
    pub async fn push(&self, request: Request) -> Result<PushOutcome, DriverError<B::StoreError>> {
        let out = self
            .blocking_change(move |f, now| f.push(&request, now))
            .await??;
        Ok(out)
    }

    /// Queues many requests in one store round trip.
    pub async fn push_all(
        &self,
        requests: Vec<Request>,
    ) -> Result<Vec<PushOutcome>, DriverError<B::StoreError>> {
        let out = self
            .blocking_change(move |f, now| f.push_all(&requests, now))
            .await??;
        Ok(out)
    }

    /// The next request that may be sent now, waiting as long as needed: exactly until
    /// the next scope or delayed request allows it, or less if a completion frees a scope
    /// first. `None` when nothing is queued and nothing is in flight. Tasks that wait are
    /// served first come, first served: a task's place in line is fixed when it takes its
    /// turn, which it does on arrival, or (with a frontier in memory, when nobody else
    /// waits) just after a look that found nothing ready.
    ///
    /// Cancel safety: dropping the future while it waits loses nothing, but dropping it
    /// while a poll runs off the executor can leave the lease that poll took in flight
    /// (holding its scope slots) until the store is reopened, which delivers it again.
    /// Stop workers between leases, or only when shutting down.
    pub async fn next(&self) -> Option<Result<Lease, DriverError<B::StoreError>>> {
        // With a frontier in memory, a first look without a listener: when a request is
        // ready (the usual case in a busy crawl) it saves registering one and taking it
        // off the event's list again. When nobody holds the turn, that look goes without
        // it too (one atomic load instead of taking and passing the turn): nobody waits
        // before this task. A task whose look finds nothing takes its place in line only
        // then, so one that came meanwhile may be served before it; once a task holds the
        // turn, every newcomer queues behind it. A blocking store's look is a thread
        // handoff, so there every look has its listener.
        let without_turn = !B::BLOCKING && self.inner.turn.is_free();
        if without_turn && let Look::Done(out) = self.look_inline() {
            return out;
        }
        let _turn = self.inner.turn.lock().await;
        if !B::BLOCKING
            && !without_turn
            && let Look::Done(out) = self.look_inline()
        {
            return out;
        }
        let _listening = Listening::new(&self.inner.listening);
        loop {
            // Listen before looking, so a change made meanwhile is not missed.
            listener!(self.inner.changed => changed);
            match self.look().await {
                Look::Done(out) => return out,
                Look::Wait(Some(t)) => {
                    futures_lite::future::or(self.inner.clock.sleep_until(t), changed).await;
                }
                Look::Wait(None) => changed.await,
            }
        }
    }

    /// One poll for [`next`](Self::next): its answer, or until when to wait (at the
    /// latest) for a change.
    fn look_op(f: &mut B, now: Timestamp) -> Look<B::StoreError> {
        match f.poll(now) {
            Err(e) => Look::Done(Some(Err(e.into()))),
            Ok(Poll::Ready(lease)) => Look::Done(Some(Ok(lease))),
            Ok(Poll::Empty) if f.in_flight() == 0 => Look::Done(None),
            Ok(Poll::NotUntil(t)) => Look::Wait(Some(t)),
            // A completion here notifies; work freed elsewhere (a shared frontier)
            // is found by looking again at the frontier's next wake-up.
            Ok(Poll::Blocked | Poll::Empty) => Look::Wait(f.poll_timeout()),
        }
    }

    /// [`look`](Self::look) on this thread (for a store whose calls do not block).
    fn look_inline(&self) -> Look<B::StoreError> {
        self.inner
            .step(Self::look_op, false)
            .unwrap_or(Look::Done(None))
    }

    /// [`look_op`](Self::look_op) where the store's calls run (off the executor when
    /// they block).
    async fn look(&self) -> Look<B::StoreError> {
        match self.blocking(Self::look_op).await {
            Ok(look) => look,
            Err(DriverError::Closed) => Look::Done(None),
            Err(e) => Look::Done(Some(Err(e))),
        }
    }

    /// The leases as a stream (see [`next`](Self::next)).
    pub fn leases(&self) -> LeasesFor<B, R> {
        LeasesFor {
            driver: self.clone(),
            pending: None,
        }
    }

    /// Acknowledges a lease with how it ended (feeding backoff). `false` if it was
    /// already ended.
    pub async fn complete(
        &self,
        lease: RequestId,
        outcome: Outcome<'static>,
    ) -> Result<bool, DriverError<B::StoreError>> {
        let done = self
            .blocking_change(move |f, now| f.complete(lease, &outcome, now))
            .await??;
        Ok(done)
    }

    /// Puts a lease back with its priority adjusted (after its outcome fed backoff).
    pub async fn retry(
        &self,
        lease: RequestId,
        outcome: Outcome<'static>,
        priority_adjust: i32,
    ) -> Result<bool, DriverError<B::StoreError>> {
        let done = self
            .blocking_change(move |f, now| f.retry(lease, &outcome, priority_adjust, now))
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
            .blocking_change(move |f, now| f.handle_crawl_delay(&scope, secs, now))
            .await??;
        Ok(out)
    }

    /// Holds back a scope (a soft block seen in a page).
    pub async fn delay_scope(
        &self,
        scope: String,
        secs: f64,
    ) -> Result<(), DriverError<B::StoreError>> {
        self.blocking_change(move |f, now| f.delay_scope(&scope, secs, now))
            .await??;
        Ok(())
    }

    /// Corrects a scope's quota consumption.
    pub async fn reconcile_quota(
        &self,
        scope: String,
        how: QuotaReconcile,
    ) -> Result<(), DriverError<B::StoreError>> {
        self.blocking_change(move |f, now| f.reconcile_quota(&scope, how, now))
            .await??;
        Ok(())
    }

    /// Runs `read` on the frontier (stats, throttler state, ...), off the executor.
    pub async fn inspect<T, Op>(&self, read: Op) -> Result<T, DriverError<B::StoreError>>
    where
        Op: FnOnce(&B) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.blocking(move |f, _| read(f)).await
    }

    /// Makes every queue change so far durable, without saving scope states (see
    /// [`Scheduling::flush`]): call it after a completion to bound what a crash repeats
    /// to the requests in flight.
    pub async fn flush(&self) -> Result<(), DriverError<B::StoreError>> {
        self.blocking(|f, _| f.flush()).await??;
        Ok(())
    }

    /// Flushes and saves the learned scope states (see [`Scheduling::checkpoint`]).
    pub async fn checkpoint(&self) -> Result<(), DriverError<B::StoreError>> {
        self.blocking(|f, _| f.checkpoint()).await??;
        Ok(())
    }

    /// Checkpoints every `every` (on the driver's clock) until the driver is closed (group
    /// commit's time bound while the crawl is idle). Spawn it on your executor and look at
    /// its result: `tokio::spawn(driver.clone().checkpoint_every(..))`,
    /// `smol::spawn(driver.clone().checkpoint_every(..))`.
    ///
    /// A checkpoint that fails is logged at once (`tracing`, level error, with the error and
    /// how many checkpoints in a row have failed), and checkpointing goes on at the next tick: a
    /// store whose disk was full for a moment recovers without help. After
    /// [`CHECKPOINT_FAILURES_IN_A_ROW`] (3) failures in a row it stops and returns the last error
    /// (a store that keeps failing needs attention, not retries). `Ok` once the driver is
    /// closed.
    pub async fn checkpoint_every(self, every: Duration) -> Result<(), DriverError<B::StoreError>> {
        let mut failures = 0u32;
        loop {
            self.inner.clock.sleep(every).await;
            match self.checkpoint().await {
                Ok(()) => {
                    if failures > 0 {
                        tracing::info!(
                            after_failures = failures,
                            "periodic checkpoint of the frontier succeeded again"
                        );
                    }
                    failures = 0;
                }
                Err(DriverError::Closed) => return Ok(()),
                Err(e) => {
                    failures += 1;
                    if failures >= CHECKPOINT_FAILURES_IN_A_ROW {
                        tracing::error!(
                            error = %e,
                            failures_in_a_row = failures,
                            "periodic checkpoint of the frontier failed; giving up on periodic checkpoints"
                        );
                        return Err(e);
                    }
                    tracing::error!(
                        error = %e,
                        failures_in_a_row = failures,
                        "periodic checkpoint of the frontier failed; trying again in {every:?}"
                    );
                }
            }
        }
    }

    /// Stops the driver: checkpoints the frontier and hands back what can be reopened
    /// (see [`Scheduling::close`]; the store, for a [`Frontier`](polite_frontier_core::Frontier)). Leases still out are not acknowledged; a frontier reopened
    /// on the store delivers them again. Other handles get [`DriverError::Closed`], and
    /// their `next` ends.
    pub async fn close(&self) -> Result<B::Closed, DriverError<B::StoreError>>
    where
        B::Closed: Send + 'static,
    {
        let inner = self.inner.clone();
        let store = self
            .unblock(move || {
                let frontier = lock(&inner.frontier).take();
                // Tasks waiting in `next` see the driver closed (told before `close`
                // runs, so that a panic in it does not leave them asleep).
                inner.changed.notify(usize::MAX);
                frontier.map(Scheduling::close)
            })
            .await?
            .ok_or(DriverError::Closed)??;
        Ok(store)
    }
}

/// How many periodic checkpoints in a row may fail before
/// [`checkpoint_every`](DriverFor::checkpoint_every) gives up and returns the last error (each is
/// logged; a success in between starts the count again).
pub const CHECKPOINT_FAILURES_IN_A_ROW: u32 = 3;

/// What one look at the frontier in [`DriverFor::next`] found.
enum Look<E> {
    /// `next`'s answer.
    Done(Option<Result<Lease, DriverError<E>>>),
    /// Nothing to send yet: wait for a change, or at most until this time.
    Wait(Option<Timestamp>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a store call must not wedge every other task.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a panic said, for [`DriverError::Blocking`] (a [`Runtime::unblock`] helper).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let said = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    match said {
        Some(msg) => format!("the store call panicked: {msg}"),
        None => "the store call panicked".to_owned(),
    }
}

type NextFuture<B> = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Option<Result<Lease, DriverError<<B as Scheduling>::StoreError>>>,
            > + Send,
    >,
>;

/// The stream of [`DriverFor::leases`].
pub struct LeasesFor<B: Scheduling, R> {
    driver: DriverFor<B, R>,
    pending: Option<NextFuture<B>>,
}

impl<B: Scheduling, R> std::fmt::Debug for LeasesFor<B, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("waiting", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl<B, R> futures_core::Stream for LeasesFor<B, R>
where
    B: Scheduling + Send + 'static,
    B::StoreError: Send + 'static,
    R: Runtime,
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
