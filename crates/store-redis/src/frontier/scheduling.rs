//! The frontier-core [`Scheduling`] trait over the shared frontier.

use polite_frontier_core::{Poll, PollBatch, PushOutcome, Request, RequestId, Scheduling};
use polite_throttle_core::{CrawlDelayDecision, Outcome, QuotaReconcile, Timestamp};

use crate::error::RedisStoreError;

use super::RedisFrontier;
use super::Result;

impl Scheduling for RedisFrontier {
    type StoreError = RedisStoreError;
    type Closed = ();
    /// A batch of leases is one script call, a batch of completions one round trip.
    const BATCHES: bool = true;

    fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome> {
        RedisFrontier::push(self, request, now)
    }

    fn push_all(&mut self, requests: &[Request], now: Timestamp) -> Result<Vec<PushOutcome>> {
        RedisFrontier::push_all(self, requests, now)
    }

    fn poll(&mut self, now: Timestamp) -> Result<Poll> {
        RedisFrontier::poll(self, now)
    }

    fn poll_batch(&mut self, now: Timestamp, max: usize) -> Result<PollBatch<RedisStoreError>> {
        let (leases, why) = self.poll_inner(now, max.max(1))?;
        // The script says "more" (here `Blocked`) when it stopped at `max`.
        Ok(PollBatch { leases, then: why })
    }

    fn complete_batch(
        &mut self,
        done: &[(RequestId, Outcome<'_>, Timestamp)],
    ) -> Result<Vec<bool>> {
        RedisFrontier::complete_batch(self, done)
    }

    fn hand_back(&mut self, lease: RequestId, now: Timestamp) -> Result<bool> {
        RedisFrontier::hand_back(self, lease, now)
    }

    fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        RedisFrontier::complete(self, lease, outcome, now)
    }

    fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool> {
        RedisFrontier::retry(self, lease, outcome, priority_adjust, now)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        RedisFrontier::poll_timeout(self)
    }

    fn in_flight(&self) -> usize {
        RedisFrontier::in_flight(self)
    }

    fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        RedisFrontier::delay_scope(self, scope, secs, now)
    }

    fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision> {
        RedisFrontier::handle_crawl_delay(self, scope, secs, now)
    }

    fn reconcile_quota(&mut self, scope: &str, how: QuotaReconcile, now: Timestamp) -> Result<()> {
        RedisFrontier::reconcile_quota(self, scope, how, now)
    }

    /// Every operation is applied by the server when it returns; its durability is the
    /// server's (AOF / replication), not this client's.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn checkpoint(&mut self) -> Result<()> {
        Ok(())
    }

    fn close(self) -> Result<()> {
        Ok(())
    }
}
