//! Standalone permits and the programmatic scope controls, run by the script.

use polite_frontier_core::FrontierError;
use polite_throttle_core::hooks::secs_to_duration;
use polite_throttle_core::{
    CrawlDelayDecision, NotReady, Outcome, QuotaReconcile, ScopeUse, Timestamp,
};
use redis::Value;

use crate::error::RedisStoreError;
use crate::params::kind_digit;

use super::Result;
use super::reply::{
    as_bytes, as_f64, as_u64, check_secs, config_error, nanos, protocol, store_err,
};
use super::{RedisFrontier, RedisPermit};

// Named by the docs.
#[cfg(doc)]
use super::{RedisConfig, RedisInfo};
#[cfg(doc)]
use polite_throttle_core::Throttler;

impl RedisFrontier {
    /// Takes a slot on every scope of `scopes` at once, for a request sent without the
    /// queue (an API client), if all of them allow a send at `now`: the same admission as
    /// [`Throttler::try_acquire`] (delay and jitter, concurrency, quotas with the uses'
    /// amounts, backoff, header delays and spent budgets, the global
    /// `concurrent_requests` cap), on the crawl's own scope states. Crawl workers and API
    /// clients that open the same crawl share one politeness budget.
    ///
    /// Otherwise nothing is reserved and the answer says why: `NotUntil(t)`, with `t` on
    /// the caller's clock like [`poll`](Self::poll)'s answers, or `Blocked` when a
    /// concurrency limit is full (a release, possibly by another process, lifts it: look
    /// again after [`RedisConfig::recheck`] or so).
    ///
    /// The permit must be [released](Self::release) within [`RedisConfig::lease_timeout`]:
    /// after that it expires (its process is presumed dead) and its slots are freed with a
    /// cancelled outcome, like an expired lease. Expired leases and permits are reclaimed
    /// by this call first (at most [`RedisConfig::redeliver_batch`]). Permits do not
    /// count in [`in_flight`](Self::in_flight) (leases only); they count in the crawl's
    /// throttled in flight ([`RedisInfo::in_flight`]) and in [`RedisInfo::permits`].
    pub fn try_acquire(
        &mut self,
        scopes: &[ScopeUse<'_>],
        now: Timestamp,
    ) -> Result<std::result::Result<RedisPermit, NotReady>> {
        let mut args = Vec::with_capacity(2 + 3 * scopes.len());
        args.push(nanos(self.config.lease_timeout).to_string().into_bytes());
        args.push(self.config.redeliver_batch.to_string().into_bytes());
        for u in scopes {
            if u.scope.starts_with('\0') {
                return Err(store_err(RedisStoreError::Invalid {
                    detail: format!("scope name {:?} must not start with a NUL byte", u.scope),
                }));
            }
            // As the throttler: a negative or NaN amount counts as 0.
            let amount = if u.amount.is_nan() || u.amount < 0.0 {
                0.0
            } else {
                u.amount
            };
            let amount = if amount.is_infinite() {
                "1e999".to_string()
            } else {
                format!("{amount:?}")
            };
            args.push(u.scope.as_bytes().to_vec());
            args.push(kind_digit(u.scope).to_string().into_bytes());
            args.push(amount.into_bytes());
        }
        let v = self.call_at("permit_acquire", Some(now), &args)?;
        let Value::Array(items) = v else {
            return Err(protocol("permit_acquire", "not an array"));
        };
        if items.len() != 3 {
            return Err(protocol("permit_acquire", "not 3 fields"));
        }
        let server_now = as_f64(&items[2]).ok_or_else(|| protocol("permit_acquire", "time"))?;
        match as_bytes(&items[0]) {
            Some(b"ok") => {
                let id = as_u64(&items[1]).ok_or_else(|| protocol("permit_acquire", "id"))?;
                Ok(Ok(RedisPermit(id)))
            }
            Some(b"until") => {
                let t = as_f64(&items[1]).ok_or_else(|| protocol("permit_acquire", "until"))?;
                Ok(Err(NotReady::NotUntil(self.to_caller(t, server_now, now))))
            }
            Some(b"blocked") => Ok(Err(NotReady::Blocked)),
            _ => Err(protocol("permit_acquire", "unknown answer")),
        }
    }

    /// Hands back a permit of [`try_acquire`](Self::try_acquire) with how its request
    /// ended: its slots are freed for every process and the outcome feeds backoff on its
    /// scopes, exactly as [`complete`](Self::complete) does for a lease (backoff steps,
    /// header delays, spent budgets). Groups of the crawl parked on those scopes look
    /// again.
    ///
    /// `false` (and nothing fed) for a permit that is unknown, already released, or
    /// expired: one at or past its expiry (`lease_timeout` after it was taken, on the
    /// crawl's clock) was freed as cancelled.
    pub fn release(
        &mut self,
        permit: RedisPermit,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        let mut args = vec![permit.0.to_string().into_bytes()];
        args.extend(Self::outcome_args(outcome)?);
        args.push(self.config.redeliver_batch.to_string().into_bytes());
        let v = self.call_at("permit_release", Some(now), &args)?;
        Ok(as_u64(&v) == Some(1))
    }

    /// See [`Throttler::delay_scope`](polite_throttle_core::Throttler::delay_scope): for every
    /// worker.
    pub fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        check_secs("delay_scope", secs)?;
        let ns = nanos(secs_to_duration(secs));
        self.scope_op("delay_scope", scope, &[ns.to_string().into_bytes()], now)
            .map(|_| ())
    }

    /// See [`Throttler::set_scope_delay`](polite_throttle_core::Throttler::set_scope_delay).
    pub fn set_scope_delay(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        check_secs("delay", secs)?;
        self.scope_op("set_delay", scope, &[format!("{secs:?}").into_bytes()], now)
            .map(|_| ())
    }

    /// See [`Throttler::set_scope_concurrency`](polite_throttle_core::Throttler::set_scope_concurrency).
    pub fn set_scope_concurrency(
        &mut self,
        scope: &str,
        concurrency: u32,
        now: Timestamp,
    ) -> Result<()> {
        self.scope_op(
            "set_concurrency",
            scope,
            &[concurrency.to_string().into_bytes()],
            now,
        )
        .map(|_| ())
    }

    /// See [`Throttler::reconcile_quota`](polite_throttle_core::Throttler::reconcile_quota).
    pub fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<()> {
        let (tag, v) = match how {
            QuotaReconcile::Consumed(v) => ("c", v),
            QuotaReconcile::Remaining(v) => ("r", v),
        };
        if !v.is_finite() {
            return Err(FrontierError::Config(config_error(tag, v)));
        }
        self.scope_op(
            "reconcile",
            scope,
            &[tag.as_bytes().to_vec(), format!("{v:?}").into_bytes()],
            now,
        )
        .map(|_| ())
    }

    /// See [`Throttler::handle_crawl_delay`](polite_throttle_core::Throttler::handle_crawl_delay).
    pub fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision> {
        check_secs("crawl_delay", secs)?;
        let v = self.scope_op(
            "crawl_delay",
            scope,
            &[format!("{secs:?}").into_bytes()],
            now,
        )?;
        let Value::Array(items) = v else {
            return Err(protocol("crawl_delay", "not an array"));
        };
        match items.first().and_then(as_bytes) {
            Some(b"applied") => Ok(CrawlDelayDecision::Applied {
                delay: items
                    .get(1)
                    .and_then(as_f64)
                    .ok_or_else(|| protocol("crawl_delay", "delay"))?,
                concurrency: items
                    .get(2)
                    .and_then(as_u64)
                    .and_then(|c| u32::try_from(c).ok())
                    .ok_or_else(|| protocol("crawl_delay", "concurrency"))?,
            }),
            Some(b"kept") => Ok(CrawlDelayDecision::KeptConfig {
                warned: items.get(1).and_then(as_u64) == Some(1),
            }),
            Some(b"ignored") => Ok(CrawlDelayDecision::Ignored),
            _ => Err(protocol("crawl_delay", "unknown decision")),
        }
    }

    pub(super) fn scope_op(
        &mut self,
        op: &'static str,
        scope: &str,
        rest: &[Vec<u8>],
        now: Timestamp,
    ) -> Result<Value> {
        let mut args = vec![
            scope.as_bytes().to_vec(),
            kind_digit(scope).to_string().into_bytes(),
        ];
        args.extend_from_slice(rest);
        self.call_at(op, Some(now), &args)
    }
}
