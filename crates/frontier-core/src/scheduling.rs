//! The interface the runtime drivers drive: a frontier in this process
//! ([`Frontier`] over any [`Store`]) or one shared by many
//! processes (`polite-store-redis`).
//!
//! It is the frontier's own run loop, nothing more: push requests, poll the next one that
//! may go out at `now`, complete or retry it, and ask when to poll again. Every call takes
//! `now`; an implementation that keeps its own clock (a shared frontier reading its
//! server's time) maps the instants it returns onto the caller's `now`, so a driver can
//! sleep on them.
//!
//! ```
//! use polite_frontier_core::{Frontier, Poll, Request, Scheduling};
//! use polite_throttle_core::{Outcome, Settings, Timestamp};
//!
//! /// Sends everything that is ready at `now`; works with any frontier.
//! fn drain<F: Scheduling>(f: &mut F, now: Timestamp) -> Vec<String> {
//!     let mut sent = Vec::new();
//!     while let Ok(Poll::Ready(lease)) = f.poll(now) {
//!         sent.push(lease.request.url.to_string());
//!         f.complete(lease.id(), &Outcome::status(200), now).unwrap();
//!     }
//!     sent
//! }
//!
//! let mut f = Frontier::in_memory(Settings::default(), Timestamp::ZERO).unwrap();
//! Scheduling::push(&mut f, &Request::get("https://example.com/"), Timestamp::ZERO).unwrap();
//! assert_eq!(drain(&mut f, Timestamp::ZERO), ["https://example.com/"]);
//! assert_eq!(Scheduling::in_flight(&f), 0);
//! ```

use alloc::vec::Vec;

use polite_throttle_core::{CrawlDelayDecision, Outcome, QuotaReconcile, Timestamp};

use crate::frontier::{Frontier, FrontierError, Lease, Poll, PushOutcome, RequestId};
use crate::request::Request;
use crate::store::Store;

/// A crawl frontier a runtime can drive: push, `poll(now)`, complete, retry,
/// `poll_timeout`.
///
/// Implemented by [`Frontier`] (one process) and by the Redis-backed frontier of
/// `polite-store-redis` (many processes sharing one queue and one politeness budget). Errors are
/// [`FrontierError`]s whose `Store` variant carries the implementation's own
/// [`StoreError`](Scheduling::StoreError).
pub trait Scheduling {
    /// The error of the storage underneath (a file, a database, a Redis connection).
    type StoreError: core::error::Error + 'static;
    /// What [`close`](Scheduling::close) hands back (the store, to reopen it later).
    type Closed;
    /// Whether calls may block on I/O: runtimes then run them off the executor.
    const BLOCKING: bool = true;
    /// Whether [`poll_batch`](Scheduling::poll_batch) and
    /// [`complete_batch`](Scheduling::complete_batch) cost less than the single calls
    /// they stand for (one round trip to a shared store instead of many): the runtime
    /// drivers then hand one batch of leases to several waiting tasks and send
    /// completions in groups. `false` by default (the batch methods loop over the single
    /// calls, and the drivers call those directly).
    const BATCHES: bool = false;

    /// Queues a request unless it is a duplicate or too deep.
    fn push(
        &mut self,
        request: &Request,
        now: Timestamp,
    ) -> Result<PushOutcome, FrontierError<Self::StoreError>>;

    /// Queues many requests; implementations may batch them into one round trip.
    fn push_all(
        &mut self,
        requests: &[Request],
        now: Timestamp,
    ) -> Result<Vec<PushOutcome>, FrontierError<Self::StoreError>> {
        requests.iter().map(|r| self.push(r, now)).collect()
    }

    /// The next request that may be sent at `now`, leased; or why not and until when.
    fn poll(&mut self, now: Timestamp) -> Result<Poll, FrontierError<Self::StoreError>>;

    /// Up to `max` leases (at least one is asked for): what `max` [`poll`](Scheduling::poll)s
    /// at `now`, one after the other, would hand out, and the answer of the poll that
    /// ended the batch. The default loops over `poll`; a shared frontier takes them in
    /// one round trip.
    fn poll_batch(
        &mut self,
        now: Timestamp,
        max: usize,
    ) -> Result<PollBatch<Self::StoreError>, FrontierError<Self::StoreError>> {
        let mut leases = Vec::new();
        while leases.len() < max.max(1) {
            match self.poll(now) {
                Ok(Poll::Ready(lease)) => leases.push(Ok(lease)),
                Ok(then) => return Ok(PollBatch { leases, then }),
                Err(e) if leases.is_empty() => return Err(e),
                // The leases taken so far are out: hand them over with the error.
                Err(e) => {
                    leases.push(Err(e));
                    break;
                }
            }
        }
        Ok(PollBatch {
            leases,
            then: Poll::Blocked,
        })
    }

    /// Acknowledges a lease with how it ended (feeding backoff). `false` if the lease is
    /// unknown or already ended.
    fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool, FrontierError<Self::StoreError>>;

    /// [`complete`](Scheduling::complete)s many leases, each at its own time (when its
    /// completion was made: a `Retry-After` counts from there); one `bool` per lease, in
    /// order. The default loops over `complete` (an error stops it: the completions before
    /// it are applied); a shared frontier sends them in one round trip.
    fn complete_batch(
        &mut self,
        done: &[(RequestId, Outcome<'_>, Timestamp)],
    ) -> Result<Vec<bool>, FrontierError<Self::StoreError>> {
        done.iter()
            .map(|(lease, outcome, now)| self.complete(*lease, outcome, *now))
            .collect()
    }

    /// Hands back a lease that was never used (the task it was taken for went away): its
    /// scope slots are freed and its request is queued again. The send its poll recorded
    /// is kept (the scope's next request still waits its delay after it: spacing is
    /// never shortened). `false` if the lease is unknown or already ended. The default
    /// [`retry`](Scheduling::retry)s it as cancelled (no backoff) with its priority
    /// unchanged.
    fn hand_back(
        &mut self,
        lease: RequestId,
        now: Timestamp,
    ) -> Result<bool, FrontierError<Self::StoreError>> {
        self.retry(lease, &Outcome::Cancelled, 0, now)
    }

    /// Puts a lease back in the queue, its priority raised by `priority_adjust`, after its
    /// outcome fed backoff. `false` if the lease is unknown or already ended.
    fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool, FrontierError<Self::StoreError>>;

    /// The latest time to poll again if nothing completes in this process. A shared
    /// frontier also names the next time it should look for work freed elsewhere.
    #[must_use]
    fn poll_timeout(&self) -> Option<Timestamp>;

    /// Leases not yet completed or retried (for a shared frontier: by every worker, as of
    /// the last call). A driver stops when the queue is empty and this is 0.
    fn in_flight(&self) -> usize;

    /// Holds back every request of `scope` for `secs` seconds (see
    /// [`Throttler::delay_scope`](polite_throttle_core::Throttler::delay_scope)).
    fn delay_scope(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), FrontierError<Self::StoreError>>;

    /// Applies a robots.txt Crawl-delay (see
    /// [`Throttler::handle_crawl_delay`](polite_throttle_core::Throttler::handle_crawl_delay)).
    fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision, FrontierError<Self::StoreError>>;

    /// Corrects a scope's quota consumption (see
    /// [`Throttler::reconcile_quota`](polite_throttle_core::Throttler::reconcile_quota)).
    fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<(), FrontierError<Self::StoreError>>;

    /// Makes every queue change so far durable (as far as the storage allows), without
    /// saving learned scope states: cheap enough to call after each completion.
    fn flush(&mut self) -> Result<(), FrontierError<Self::StoreError>>;

    /// [`flush`](Scheduling::flush)es and saves the learned throttle scope states where
    /// they are kept.
    fn checkpoint(&mut self) -> Result<(), FrontierError<Self::StoreError>>;

    /// [`checkpoint`](Scheduling::checkpoint)s and hands back what can be reopened later.
    /// Leases still out are not acknowledged: they are delivered again.
    fn close(self) -> Result<Self::Closed, FrontierError<Self::StoreError>>
    where
        Self: Sized;
}

/// What [`Scheduling::poll_batch`] hands out.
#[derive(Debug)]
pub struct PollBatch<E> {
    /// The leases, in the order single polls would have handed them out. A lease whose
    /// request does not decode is its [`FrontierError::Corrupt`] in its place (the lease
    /// stays out); an error after some leases ends the batch, in its place.
    pub leases: Vec<Result<Lease, FrontierError<E>>>,
    /// The answer of the poll after the last lease when fewer than `max` came
    /// ([`Poll::NotUntil`], [`Poll::Blocked`] or [`Poll::Empty`]); [`Poll::Blocked`]
    /// (look again) when `max` came.
    pub then: Poll,
}

impl<S: Store> Scheduling for Frontier<S> {
    type StoreError = S::Error;
    type Closed = S;
    const BLOCKING: bool = S::BLOCKING;

    fn push(
        &mut self,
        request: &Request,
        now: Timestamp,
    ) -> Result<PushOutcome, FrontierError<S::Error>> {
        Frontier::push(self, request, now)
    }

    fn push_all(
        &mut self,
        requests: &[Request],
        now: Timestamp,
    ) -> Result<Vec<PushOutcome>, FrontierError<S::Error>> {
        Frontier::push_all(self, requests, now)
    }

    fn poll(&mut self, now: Timestamp) -> Result<Poll, FrontierError<S::Error>> {
        Frontier::poll(self, now)
    }

    fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool, FrontierError<S::Error>> {
        Frontier::complete(self, lease, outcome, now)
    }

    fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool, FrontierError<S::Error>> {
        Frontier::retry(self, lease, outcome, priority_adjust, now)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        Frontier::poll_timeout(self)
    }

    fn in_flight(&self) -> usize {
        Frontier::in_flight(self)
    }

    fn delay_scope(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        Frontier::delay_scope(self, scope, secs, now)
    }

    fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision, FrontierError<S::Error>> {
        Frontier::handle_crawl_delay(self, scope, secs, now)
    }

    fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        Frontier::reconcile_quota(self, scope, how, now)
    }

    fn flush(&mut self) -> Result<(), FrontierError<S::Error>> {
        Frontier::flush(self)
    }

    fn checkpoint(&mut self) -> Result<(), FrontierError<S::Error>> {
        Frontier::checkpoint(self)
    }

    fn close(self) -> Result<S, FrontierError<S::Error>> {
        Frontier::close(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReferenceStore, VolatileStore};
    use alloc::string::{String, ToString};
    use polite_throttle_core::{ScopeConfig, Settings};

    /// A generic run loop, written only against the trait.
    fn run<F: Scheduling>(f: &mut F, mut now: Timestamp) -> Vec<(u64, String)> {
        let mut log = Vec::new();
        loop {
            match f.poll(now).ok().unwrap() {
                Poll::Ready(lease) => {
                    log.push((
                        now.as_nanos() / 1_000_000_000,
                        lease.request.url.to_string(),
                    ));
                    assert!(
                        f.complete(lease.id(), &Outcome::status(200), now)
                            .ok()
                            .unwrap()
                    );
                    assert!(
                        !f.complete(lease.id(), &Outcome::status(200), now)
                            .ok()
                            .unwrap()
                    );
                }
                Poll::NotUntil(t) => {
                    assert!(t > now);
                    assert!(f.poll_timeout().is_some_and(|p| p <= t));
                    now = t;
                }
                Poll::Blocked => panic!("nothing is in flight"),
                Poll::Empty => return log,
            }
        }
    }

    fn settings() -> Settings {
        Settings::default()
            .without_jitter()
            .with_scope("a.com", ScopeConfig::new().delay(2.0))
    }

    #[test]
    fn frontier_through_the_trait_spaces_a_scope() {
        let mut f = Frontier::in_memory(settings(), Timestamp::ZERO).unwrap();
        let reqs = [
            Request::get("https://a.com/1"),
            Request::get("https://a.com/2"),
            Request::get("https://b.com/1"),
        ];
        let out = Scheduling::push_all(&mut f, &reqs, Timestamp::ZERO).unwrap();
        assert!(out.iter().all(|o| matches!(o, PushOutcome::Queued(_))));
        assert_eq!(
            Scheduling::push(&mut f, &reqs[0], Timestamp::ZERO).unwrap(),
            PushOutcome::Duplicate
        );
        let log = run(&mut f, Timestamp::ZERO);
        assert_eq!(
            log,
            [
                (0, "https://a.com/2".to_string()),
                (0, "https://b.com/1".to_string()),
                (2, "https://a.com/1".to_string()),
            ]
        );
    }

    #[test]
    fn retry_and_close_through_the_trait() {
        let store = ReferenceStore::new();
        let mut f = Frontier::open(settings(), Default::default(), store, Timestamp::ZERO).unwrap();
        Scheduling::push(&mut f, &Request::get("https://b.com/x"), Timestamp::ZERO).unwrap();
        let Poll::Ready(lease) = Scheduling::poll(&mut f, Timestamp::ZERO).unwrap() else {
            panic!("ready")
        };
        assert_eq!(Scheduling::in_flight(&f), 1);
        let failed = Outcome::error("timeout");
        assert!(Scheduling::retry(&mut f, lease.id(), &failed, -1, Timestamp::ZERO).unwrap());
        assert_eq!(Scheduling::in_flight(&f), 0);
        // The retry fed backoff: the host waits its first backoff step (1 s).
        assert_eq!(
            Scheduling::poll(&mut f, Timestamp::ZERO).unwrap(),
            Poll::NotUntil(Timestamp::from_secs(1))
        );
        Scheduling::flush(&mut f).unwrap();
        let store = Scheduling::close(f).unwrap();
        let mut f = Frontier::open(settings(), Default::default(), store, Timestamp::ZERO).unwrap();
        assert_eq!(f.len(), 1, "the retried request survives a close");
        assert!(matches!(
            f.poll(Timestamp::from_secs(1)),
            Ok(Poll::Ready(_))
        ));
    }

    #[test]
    fn batch_defaults_loop_over_the_single_calls() {
        let mut f = Frontier::in_memory(settings(), Timestamp::ZERO).unwrap();
        let reqs = [
            Request::get("https://a.com/1"),
            Request::get("https://a.com/2"),
            Request::get("https://b.com/1"),
        ];
        Scheduling::push_all(&mut f, &reqs, Timestamp::ZERO).unwrap();
        const { assert!(!<Frontier<VolatileStore> as Scheduling>::BATCHES) };
        // What single polls would give: a.com's second waits its delay.
        let batch = Scheduling::poll_batch(&mut f, Timestamp::ZERO, 8).unwrap();
        assert_eq!(batch.leases.len(), 2);
        assert_eq!(batch.then, Poll::NotUntil(Timestamp::from_secs(2)));
        let leases: Vec<Lease> = batch.leases.into_iter().map(|l| l.ok().unwrap()).collect();
        // Handing one back queues it again; its send stays recorded (a.com waits 2 s).
        assert!(Scheduling::hand_back(&mut f, leases[0].id(), Timestamp::ZERO).unwrap());
        assert_eq!(Scheduling::in_flight(&f), 1);
        assert_eq!(f.len(), 2);
        let done = Scheduling::complete_batch(
            &mut f,
            &[
                (leases[1].id(), Outcome::status(200), Timestamp::ZERO),
                (leases[0].id(), Outcome::status(200), Timestamp::ZERO),
            ],
        )
        .unwrap();
        assert_eq!(
            done,
            [true, false],
            "the handed-back lease is no longer out"
        );
        assert_eq!(
            Scheduling::poll(&mut f, Timestamp::ZERO).unwrap(),
            Poll::NotUntil(Timestamp::from_secs(2))
        );
        // At most `max`: the answer after is "look again".
        let batch = Scheduling::poll_batch(&mut f, Timestamp::from_secs(2), 1).unwrap();
        assert_eq!((batch.leases.len(), batch.then), (1, Poll::Blocked));
    }

    #[test]
    fn controls_through_the_trait() {
        let mut f: Frontier<VolatileStore> =
            Frontier::in_memory(settings(), Timestamp::ZERO).unwrap();
        Scheduling::push(&mut f, &Request::get("https://c.com/"), Timestamp::ZERO).unwrap();
        Scheduling::delay_scope(&mut f, "c.com", 5.0, Timestamp::ZERO).unwrap();
        assert_eq!(
            Scheduling::poll(&mut f, Timestamp::ZERO).unwrap(),
            Poll::NotUntil(Timestamp::from_secs(5))
        );
        let d = Scheduling::handle_crawl_delay(&mut f, "c.com", 3.0, Timestamp::ZERO).unwrap();
        assert!(matches!(d, CrawlDelayDecision::Applied { .. }));
        assert!(
            Scheduling::reconcile_quota(
                &mut f,
                "c.com",
                QuotaReconcile::Consumed(1.0),
                Timestamp::ZERO
            )
            .is_ok()
        );
        Scheduling::checkpoint(&mut f).unwrap();
    }
}
