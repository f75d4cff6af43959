//! The driver: a frontier shared by many tasks, with store I/O off the executor.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use event_listener::{Event, listener};
use polite_frontier_core::{
    FrontierError, Lease, Poll, PollBatch, PushOutcome, Request, RequestId, Scheduling,
};
use polite_throttle_core::{CrawlDelayDecision, Outcome, QuotaReconcile, Timestamp};

use crate::Runtime;
use crate::turn::{TakeTurn, Turn, TurnGuard};

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
    /// The batched call that carried this completion failed (its error, as text: the
    /// error itself went to the task that made the call).
    Batched(String),
}

impl<E: std::fmt::Display> std::fmt::Display for DriverError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Frontier(e) => e.fmt(f),
            DriverError::Closed => f.write_str("the frontier driver was closed"),
            DriverError::Blocking(e) => write!(f, "a store call failed to complete: {e}"),
            DriverError::Batched(e) => write!(f, "the batched call of this completion failed: {e}"),
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

/// How a driver groups its calls over a frontier whose batches cost less than the single
/// calls they stand for ([`Scheduling::BATCHES`]: `polite-store-redis`'s, where a batch is
/// one script call or one round trip instead of many). Other frontiers (the in-process
/// one) ignore it: their driver makes single calls.
///
/// - **Leases**: the task whose turn it is in [`next`](DriverFor::next) polls for itself
///   and for the tasks waiting behind it, at most [`max_leases`](Self::max_leases)
///   (default 64) in one call; the others take theirs without a call. A lease taken for a
///   task that left (its `next` future dropped) is handed back at once
///   ([`Scheduling::hand_back`]).
/// - **Completions**: [`complete`](DriverFor::complete) joins the completions gathering
///   for the next call and returns once that call is made (with its own answer). The
///   call is made when [`max_completions`](Self::max_completions) (default 64) have
///   gathered, when every lease this driver took has been given back (nobody else can
///   join; leases a batched poll took for tasks that have yet to pick them up count as
///   out), or [`completion_delay`](Self::completion_delay) (default 2 ms) after the
///   first one, whichever comes first. Each completion is applied as of its own time.
///   Closing, flushing or checkpointing the driver sends what has gathered first. A
///   process that crashes loses the completions gathering (at most `max_completions`,
///   for at most `completion_delay`): their leases expire and are delivered again (at
///   least once), as any lease of a crashed worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    max_leases: usize,
    max_completions: usize,
    completion_delay: Duration,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_leases: 64,
            max_completions: 64,
            completion_delay: Duration::from_millis(2),
        }
    }
}

impl Batching {
    /// No batching: one call per lease and per completion, as over any other frontier.
    pub const fn off() -> Self {
        Batching {
            max_leases: 1,
            max_completions: 1,
            completion_delay: Duration::ZERO,
        }
    }

    /// Most leases one poll takes for the tasks waiting in `next` (at least 1).
    #[must_use]
    pub const fn with_max_leases(mut self, n: usize) -> Self {
        self.max_leases = if n == 0 { 1 } else { n };
        self
    }

    /// Most completions sent in one call (at least 1; 1 sends each at once).
    #[must_use]
    pub const fn with_max_completions(mut self, n: usize) -> Self {
        self.max_completions = if n == 0 { 1 } else { n };
        self
    }

    /// Longest a completion waits for others to join its call.
    #[must_use]
    pub const fn with_completion_delay(mut self, d: Duration) -> Self {
        self.completion_delay = d;
        self
    }

    /// See [`with_max_leases`](Self::with_max_leases).
    pub const fn max_leases(&self) -> usize {
        self.max_leases
    }

    /// See [`with_max_completions`](Self::with_max_completions).
    pub const fn max_completions(&self) -> usize {
        self.max_completions
    }

    /// See [`with_completion_delay`](Self::with_completion_delay).
    pub const fn completion_delay(&self) -> Duration {
        self.completion_delay
    }

    const fn is_on(&self) -> bool {
        self.max_leases > 1 || self.max_completions > 1
    }
}

/// Completions gathering for one batched call.
struct CompletionBatch {
    items: Mutex<Vec<(RequestId, Outcome<'static>, Timestamp)>>,
    /// When it is sent at the latest.
    deadline: Timestamp,
    /// Its answer, once sent.
    sent: Mutex<Option<Sent>>,
    /// Notified when `sent` is set.
    done: Event,
}

enum Sent {
    Done(Vec<bool>),
    Failed(String),
    Closed,
}

impl CompletionBatch {
    fn settle(&self, sent: Sent) {
        let mut slot = lock(&self.sent);
        if slot.is_none() {
            *slot = Some(sent);
        }
        drop(slot);
        self.done.notify(usize::MAX);
    }
}

/// Settles a batch as failed if its call ends without an answer (a panic in the store).
struct Settle<'a>(&'a CompletionBatch);

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        self.0.settle(Sent::Failed(
            "the batched completion call did not finish".into(),
        ));
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
    batching: Batching,
    /// Set when the driver closes (read without the frontier's lock).
    closed: AtomicBool,
    /// Leases a batched poll took for the tasks waiting in `next`, not yet taken. Only
    /// the turn's holder takes them; when the turn is free, nobody is left to.
    spare: Mutex<VecDeque<Lease>>,
    /// Leases the batched `next` handed out and not yet given to `complete` or `retry`.
    outstanding: AtomicUsize,
    /// The completions gathering for the next batched call.
    open: Mutex<Option<Arc<CompletionBatch>>>,
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

impl<B: Scheduling, R: Runtime> Inner<B, R> {
    /// Sends a batch of completions (no longer open to others) on `f`, or settles it as
    /// closed; every member learns its answer. The error, if any, goes to the caller.
    fn send_batch(
        f: Option<&mut B>,
        batch: &CompletionBatch,
    ) -> Option<FrontierError<B::StoreError>> {
        let _settle = Settle(batch);
        let items = std::mem::take(&mut *lock(&batch.items));
        match f {
            None => {
                batch.settle(Sent::Closed);
                None
            }
            Some(f) => match f.complete_batch(&items) {
                Ok(done) => {
                    batch.settle(Sent::Done(done));
                    None
                }
                Err(e) => {
                    batch.settle(Sent::Failed(e.to_string()));
                    Some(e)
                }
            },
        }
    }

    /// Sends the completions gathering, if any (before a flush or a close).
    fn send_open(&self, f: &mut B) -> Result<(), FrontierError<B::StoreError>> {
        let open = lock(&self.open).take();
        match open.and_then(|batch| Self::send_batch(Some(f), &batch)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Hands back every spare lease: nobody is left to take them. Whether there were any.
    fn hand_back_spares(&self, f: &mut B, now: Timestamp) -> bool {
        let spares: Vec<Lease> = lock(&self.spare).drain(..).collect();
        for lease in &spares {
            if let Err(e) = f.hand_back(lease.id(), now) {
                tracing::warn!(
                    error = %e,
                    lease = lease.id().0,
                    "handing back a lease nobody took failed: it comes back when it expires"
                );
            }
        }
        !spares.is_empty()
    }

    fn notify_change(&self) {
        if self.listening.load(Ordering::SeqCst) > 0 {
            self.changed.notify(usize::MAX);
        }
    }

    /// One less lease out; how many are left.
    fn given_back(&self) -> usize {
        let prev = self
            .outstanding
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0);
        prev.saturating_sub(1)
    }
}

/// A task's place in the batched [`DriverFor::next`]: waiting for the turn, then holding
/// it. When it goes (returning, or its future dropped) and leaves the turn free, the
/// spare leases have nobody left to take them: they are handed back at once (on this
/// thread: a rare path, one store call per lease).
struct Held<'a, B: Scheduling, R: Runtime> {
    inner: &'a Inner<B, R>,
    taking: Option<TakeTurn<'a>>,
    turn: Option<TurnGuard<'a>>,
}

impl<B: Scheduling, R: Runtime> Held<'_, B, R> {
    fn poll_take(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let Some(taking) = self.taking.as_mut() else {
            return std::task::Poll::Ready(());
        };
        match std::pin::Pin::new(taking).poll(cx) {
            std::task::Poll::Ready(guard) => {
                self.taking = None;
                self.turn = Some(guard);
                std::task::Poll::Ready(())
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

impl<B: Scheduling, R: Runtime> Drop for Held<'_, B, R> {
    fn drop(&mut self) {
        // Leave the line (or pass the turn on) first: a poll still running for this task
        // sees the turn free when it is done and hands its leases back itself.
        self.taking = None;
        self.turn = None;
        if self.inner.turn.is_free() && !lock(&self.inner.spare).is_empty() {
            let mut frontier = lock(&self.inner.frontier);
            let now = self.inner.clock.now();
            match frontier.as_mut() {
                Some(f) => {
                    let handed = self.inner.hand_back_spares(f, now);
                    drop(frontier);
                    if handed {
                        self.inner.notify_change();
                    }
                }
                None => lock(&self.inner.spare).clear(),
            }
        }
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
    /// Drives `frontier` with `clock` (the clock the frontier was opened with), batching
    /// calls as [`Batching::default`] says when the frontier batches
    /// ([`Scheduling::BATCHES`]).
    pub fn new(frontier: B, clock: R) -> Self {
        Self::with_batching(frontier, clock, Batching::default())
    }

    /// [`new`](Self::new) with the given [`Batching`] ([`Batching::off`]: one call per
    /// lease and per completion).
    pub fn with_batching(frontier: B, clock: R, batching: Batching) -> Self {
        DriverFor {
            inner: Arc::new(Inner {
                frontier: Mutex::new(Some(frontier)),
                changed: Event::new(),
                listening: AtomicUsize::new(0),
                turn: Turn::default(),
                clock,
                batching,
                closed: AtomicBool::new(false),
                spare: Mutex::new(VecDeque::new()),
                outstanding: AtomicUsize::new(0),
                open: Mutex::new(None),
            }),
        }
    }

    /// Whether this driver batches (see [`Batching`]).
    fn batched(&self) -> bool {
        B::BATCHES && self.inner.batching.is_on()
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
    ///
    /// Over a frontier that batches ([`Batching`]), the task whose turn it is polls for
    /// the tasks waiting behind it too, and they take their leases without a call of
    /// their own. There nothing is lost to a dropped future: a lease taken for a task
    /// that is gone (its poll still running, or its lease not yet taken) is handed back
    /// at once ([`Scheduling::hand_back`]: its slots freed, its request queued again, the
    /// send its poll recorded kept, so the scope's spacing holds). When the last task
    /// leaves, that hand-back runs in its future's drop, on the dropping thread (one
    /// store call per lease).
    pub async fn next(&self) -> Option<Result<Lease, DriverError<B::StoreError>>> {
        if self.batched() {
            return self.next_batched().await;
        }
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

    /// [`next`](Self::next) over a frontier that batches: the turn's holder polls for
    /// the tasks waiting behind it too (see [`Batching`]).
    async fn next_batched(&self) -> Option<Result<Lease, DriverError<B::StoreError>>> {
        let mut held = Held {
            inner: &self.inner,
            taking: Some(self.inner.turn.lock()),
            turn: None,
        };
        std::future::poll_fn(|cx| held.poll_take(cx)).await;
        let out = self.next_held().await;
        if let Some(Ok(_)) = &out {
            self.inner.outstanding.fetch_add(1, Ordering::SeqCst);
        }
        drop(held);
        out
    }

    /// The batched `next` once it holds the turn.
    async fn next_held(&self) -> Option<Result<Lease, DriverError<B::StoreError>>> {
        if let Some(lease) = lock(&self.inner.spare).pop_front() {
            return Some(Ok(lease));
        }
        let _listening = Listening::new(&self.inner.listening);
        loop {
            listener!(self.inner.changed => changed);
            let look = match self.blocking(self.batch_look_op()).await {
                Ok(look) => look,
                Err(DriverError::Closed) => return None,
                Err(e) => return Some(Err(e)),
            };
            match look {
                BatchLook::Taken(Some(e)) => return Some(Err(e.into())),
                BatchLook::Taken(None) => {
                    if let Some(lease) = lock(&self.inner.spare).pop_front() {
                        return Some(Ok(lease));
                    }
                }
                BatchLook::Look(Look::Done(out)) => return out,
                BatchLook::Look(Look::Wait(Some(t))) => {
                    futures_lite::future::or(self.inner.clock.sleep_until(t), changed).await;
                }
                BatchLook::Look(Look::Wait(None)) => changed.await,
            }
        }
    }

    /// One batched poll: leases for the turn's holder and the tasks waiting behind it go
    /// to [`Inner::spare`] (even if the holder is gone meanwhile: then, with nobody left
    /// to take them, they are handed back here).
    fn batch_look_op(
        &self,
    ) -> impl FnOnce(&mut B, Timestamp) -> BatchLook<B::StoreError> + Send + 'static + use<B, R>
    {
        let inner = self.inner.clone();
        move |f, now| {
            let want = (1 + inner.turn.queued()).min(inner.batching.max_leases);
            match f.poll_batch(now, want) {
                Err(e) => BatchLook::Look(Look::Done(Some(Err(e.into())))),
                Ok(PollBatch { leases, then }) if leases.is_empty() => {
                    BatchLook::Look(match then {
                        Poll::Ready(lease) => Look::Done(Some(Ok(lease))),
                        Poll::Empty if f.in_flight() == 0 => Look::Done(None),
                        Poll::NotUntil(t) => Look::Wait(Some(t)),
                        Poll::Blocked | Poll::Empty => Look::Wait(f.poll_timeout()),
                    })
                }
                Ok(PollBatch { leases, .. }) => {
                    let mut err = None;
                    {
                        let mut spare = lock(&inner.spare);
                        for lease in leases {
                            match lease {
                                Ok(lease) => spare.push_back(lease),
                                Err(e) if err.is_none() => err = Some(e),
                                Err(e) => tracing::warn!(
                                    error = %e,
                                    "a second lease of one batch failed to decode; it stays out until it expires"
                                ),
                            }
                        }
                    }
                    // The holder left while this ran (see `Held`).
                    if inner.turn.is_free() && inner.hand_back_spares(f, now) {
                        inner.notify_change();
                    }
                    BatchLook::Taken(err)
                }
            }
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
    ///
    /// Over a frontier that batches, the completion joins others in one call (see
    /// [`Batching`]) and this returns once that call is made.
    pub async fn complete(
        &self,
        lease: RequestId,
        outcome: Outcome<'static>,
    ) -> Result<bool, DriverError<B::StoreError>> {
        if self.batched() {
            if self.inner.batching.max_completions > 1 {
                return self.complete_batched(lease, outcome).await;
            }
            self.inner.given_back();
        }
        let done = self
            .blocking_change(move |f, now| f.complete(lease, &outcome, now))
            .await??;
        Ok(done)
    }

    /// A completion through the gathering batch (see [`Batching`]).
    async fn complete_batched(
        &self,
        lease: RequestId,
        outcome: Outcome<'static>,
    ) -> Result<bool, DriverError<B::StoreError>> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(DriverError::Closed);
        }
        // Leases still to come back: held by tasks, or taken for tasks that have yet to
        // pick them up (a fast task completes before the others have theirs).
        let left = self.inner.given_back() + lock(&self.inner.spare).len();
        let now = self.inner.clock.now();
        let (batch, index, send) = {
            let mut open = lock(&self.inner.open);
            let batch = open
                .get_or_insert_with(|| {
                    Arc::new(CompletionBatch {
                        items: Mutex::new(Vec::new()),
                        deadline: now + self.inner.batching.completion_delay,
                        sent: Mutex::new(None),
                        done: Event::new(),
                    })
                })
                .clone();
            let index = {
                let mut items = lock(&batch.items);
                items.push((lease, outcome, now));
                items.len() - 1
            };
            // Full, or nobody else holds a lease of this driver to join it.
            let send = index + 1 >= self.inner.batching.max_completions || left == 0;
            if send {
                *open = None;
            }
            (batch, index, send)
        };
        if send && let Some(e) = self.send_completions(batch.clone()).await? {
            return Err(e.into());
        }
        loop {
            listener!(batch.done => done);
            if let Some(sent) = &*lock(&batch.sent) {
                return match sent {
                    Sent::Done(answers) => Ok(answers.get(index).copied().unwrap_or(false)),
                    Sent::Failed(e) => Err(DriverError::Batched(e.clone())),
                    Sent::Closed => Err(DriverError::Closed),
                };
            }
            if self.inner.clock.now() >= batch.deadline {
                // Its time is up: whoever comes first sends it.
                let mine = {
                    let mut open = lock(&self.inner.open);
                    let mine = open.as_ref().is_some_and(|b| Arc::ptr_eq(b, &batch));
                    if mine {
                        *open = None;
                    }
                    mine
                };
                if mine {
                    if let Some(e) = self.send_completions(batch.clone()).await? {
                        return Err(e.into());
                    }
                } else {
                    done.await;
                }
            } else {
                futures_lite::future::or(self.inner.clock.sleep_until(batch.deadline), done).await;
            }
        }
    }

    /// Sends a batch of completions (taken out of [`Inner::open`]) where the store's calls
    /// run; the call runs to the end even if this future is dropped.
    async fn send_completions(
        &self,
        batch: Arc<CompletionBatch>,
    ) -> Result<Option<FrontierError<B::StoreError>>, DriverError<B::StoreError>> {
        let inner = self.inner.clone();
        let job = move || {
            let mut frontier = lock(&inner.frontier);
            let err = Inner::<B, R>::send_batch(frontier.as_mut(), &batch);
            drop(frontier);
            inner.notify_change();
            err
        };
        if B::BLOCKING {
            self.unblock(job).await
        } else {
            Ok(job())
        }
    }

    /// Puts a lease back with its priority adjusted (after its outcome fed backoff).
    pub async fn retry(
        &self,
        lease: RequestId,
        outcome: Outcome<'static>,
        priority_adjust: i32,
    ) -> Result<bool, DriverError<B::StoreError>> {
        if self.batched() {
            self.inner.given_back();
        }
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
    /// to the requests in flight. Completions gathering for a batched call are sent
    /// first.
    pub async fn flush(&self) -> Result<(), DriverError<B::StoreError>> {
        let inner = self.inner.clone();
        self.blocking_change(move |f, _| inner.send_open(f).and_then(|()| f.flush()))
            .await??;
        Ok(())
    }

    /// Flushes and saves the learned scope states (see [`Scheduling::checkpoint`]).
    /// Completions gathering for a batched call are sent first.
    pub async fn checkpoint(&self) -> Result<(), DriverError<B::StoreError>> {
        let inner = self.inner.clone();
        self.blocking_change(move |f, _| inner.send_open(f).and_then(|()| f.checkpoint()))
            .await??;
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
    ///
    /// Over a frontier that batches, the completions gathering are sent first (their
    /// callers get their answers), and leases taken for tasks that did not take them
    /// yet are handed back.
    pub async fn close(&self) -> Result<B::Closed, DriverError<B::StoreError>>
    where
        B::Closed: Send + 'static,
    {
        let inner = self.inner.clone();
        let store = self
            .unblock(move || {
                let mut frontier = lock(&inner.frontier).take();
                inner.closed.store(true, Ordering::SeqCst);
                if let Some(f) = frontier.as_mut() {
                    if let Err(e) = inner.send_open(f) {
                        tracing::error!(error = %e, "sending the last completions before closing failed: their leases come back when they expire");
                    }
                    inner.hand_back_spares(f, inner.clock.now());
                }
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

/// What one batched poll in [`DriverFor::next`] found.
enum BatchLook<E> {
    /// Leases went to [`Inner::spare`]; the error of one that did not decode, if any
    /// (for the holder).
    Taken(Option<FrontierError<E>>),
    /// None: as the single poll's look.
    Look(Look<E>),
}

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
