//! Looking in: a scope's throttling state, the crawl's counters, this handle's leases.

use polite_frontier_core::FrontierStats;
use polite_throttle_core::Timestamp;
use redis::Value;

use super::Result;
use super::reply::{as_bytes, as_f64, as_u64, protocol};
use super::{RedisFrontier, RedisInfo, RedisScopeStats};

// Named by the docs.
#[cfg(doc)]
use super::RedisConfig;

impl RedisFrontier {
    /// A scope's state as of `now` (lazy recovery, rampup and quota updates applied), if
    /// it has one.
    pub fn scope_stats(&mut self, scope: &str, now: Timestamp) -> Result<Option<RedisScopeStats>> {
        let v = self.scope_op("scope", scope, &[], now)?;
        Self::parse_scope(v)
    }

    /// A scope's state as of the last operation on it, changing nothing (what
    /// [`Throttler::scopes`](polite_throttle_core::Throttler::scopes) shows in-process).
    pub fn scope_stats_raw(&mut self, scope: &str) -> Result<Option<RedisScopeStats>> {
        let v = self.scope_op("scope", scope, &[b"raw".to_vec()], Timestamp::ZERO)?;
        Self::parse_scope(v)
    }

    fn parse_scope(v: Value) -> Result<Option<RedisScopeStats>> {
        let items = match v {
            Value::Nil => return Ok(None),
            Value::Array(items) if items.len() == 11 => items,
            _ => return Err(protocol("scope", "not 11 fields")),
        };
        let u = |i: usize| as_u64(&items[i]).ok_or_else(|| protocol("scope", "integer field"));
        let f = |i: usize| as_f64(&items[i]).ok_or_else(|| protocol("scope", "number field"));
        let t = |i: usize| f(i).map(|x| Timestamp::from_nanos(x.max(0.0) as u64));
        Ok(Some(RedisScopeStats {
            sent: u(0)?,
            done: u(1)?,
            triggers: u(2)?,
            active: u(3)? as u32,
            base_delay: f(4)?,
            delay: f(5)?,
            concurrency: u(6)? as u32,
            level: u(7)? as u32,
            next_allowed: t(8)?,
            hard_until: t(9)?,
            consumed: f(10)?,
        }))
    }

    /// Counters of the whole crawl.
    pub fn info(&mut self) -> Result<RedisInfo> {
        let v = self.call("info", true, &[])?;
        let Value::Array(items) = v else {
            return Err(protocol("info", "not an array"));
        };
        if items.len() < 13 {
            return Err(protocol("info", "short reply"));
        }
        let u = |i: usize| as_u64(&items[i]).ok_or_else(|| protocol("info", "integer field"));
        let mut stats = FrontierStats::default();
        stats.store = "redis";
        stats.enqueued = u(5)?;
        stats.dequeued = u(6)?;
        stats.leased = u(7)?;
        stats.acked = u(8)?;
        stats.retried = u(9)?;
        stats.redelivered = u(10)?;
        stats.depth_max = u(11)? as u32;
        for pair in items[13..].chunks(2) {
            if let [k, v] = pair {
                let n = as_u64(v).ok_or_else(|| protocol("info", "stat value"))?;
                match as_bytes(k) {
                    Some(b"filtered") => stats.filtered = n,
                    Some(b"depth_ignored") => stats.depth_ignored = n,
                    _ => {}
                }
            }
        }
        Ok(RedisInfo {
            queued: u(0)?,
            delayed: u(1)?,
            leased: u(2)?,
            in_flight: u(3)?,
            groups: u(4)?,
            permits: u(12)?,
            stats,
        })
    }

    /// Leases out, by every worker, as of the last call.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When to poll again at the latest: the next scope timer or delayed request, the
    /// next lease expiry, or (after `Blocked`, or `Empty` with leases out elsewhere)
    /// [`RedisConfig::recheck`] later, as of the last poll.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timeout
    }
}
