//! The frontier-core [`Scheduling`] trait over the shared frontier, one crawl or sharded.

use polite_frontier_core::{Poll, PollBatch, PushOutcome, Request, RequestId, Scheduling};
use polite_throttle_core::{CrawlDelayDecision, Outcome, QuotaReconcile, Timestamp};

use crate::error::RedisStoreError;

use super::Result;
use super::{RedisFrontier, ShardedRedisFrontier};

/// The trait's methods are the inherent ones of the same names, on one crawl and on a
/// sharded one alike.
macro_rules! redis_scheduling {
    ($t:ty) => {
        impl Scheduling for $t {
            type StoreError = RedisStoreError;
            type Closed = ();
            /// A batch of leases is one script call (per partition), a batch of completions
            /// one round trip (per partition).
            const BATCHES: bool = true;

            fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome> {
                <$t>::push(self, request, now)
            }

            fn push_all(
                &mut self,
                requests: &[Request],
                now: Timestamp,
            ) -> Result<Vec<PushOutcome>> {
                <$t>::push_all(self, requests, now)
            }

            fn poll(&mut self, now: Timestamp) -> Result<Poll> {
                <$t>::poll(self, now)
            }

            fn poll_batch(
                &mut self,
                now: Timestamp,
                max: usize,
            ) -> Result<PollBatch<RedisStoreError>> {
                let (leases, why) = self.poll_inner(now, max.max(1))?;
                // The script says "more" (here `Blocked`) when it stopped at `max`.
                Ok(PollBatch { leases, then: why })
            }

            fn complete_batch(
                &mut self,
                done: &[(RequestId, Outcome<'_>, Timestamp)],
            ) -> Result<Vec<bool>> {
                <$t>::complete_batch(self, done)
            }

            fn hand_back(&mut self, lease: RequestId, now: Timestamp) -> Result<bool> {
                <$t>::hand_back(self, lease, now)
            }

            fn complete(
                &mut self,
                lease: RequestId,
                outcome: &Outcome<'_>,
                now: Timestamp,
            ) -> Result<bool> {
                <$t>::complete(self, lease, outcome, now)
            }

            fn retry(
                &mut self,
                lease: RequestId,
                outcome: &Outcome<'_>,
                priority_adjust: i32,
                now: Timestamp,
            ) -> Result<bool> {
                <$t>::retry(self, lease, outcome, priority_adjust, now)
            }

            fn poll_timeout(&self) -> Option<Timestamp> {
                <$t>::poll_timeout(self)
            }

            fn in_flight(&self) -> usize {
                <$t>::in_flight(self)
            }

            fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
                <$t>::delay_scope(self, scope, secs, now)
            }

            fn handle_crawl_delay(
                &mut self,
                scope: &str,
                secs: f64,
                now: Timestamp,
            ) -> Result<CrawlDelayDecision> {
                <$t>::handle_crawl_delay(self, scope, secs, now)
            }

            fn reconcile_quota(
                &mut self,
                scope: &str,
                how: QuotaReconcile,
                now: Timestamp,
            ) -> Result<()> {
                <$t>::reconcile_quota(self, scope, how, now)
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
    };
}

redis_scheduling!(RedisFrontier);
redis_scheduling!(ShardedRedisFrontier);
