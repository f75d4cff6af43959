//! Programmatic controls: `delay_scope`, Crawl-delay, live delay/concurrency, quota fixes.

use alloc::boxed::Box;
use alloc::format;

use crate::config::ConfigError;
use crate::time::{Timestamp, secs_to_duration};

use super::{EVICTION_BUDGET, Throttler};

/// What a reported robots.txt Crawl-delay did.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum CrawlDelayDecision {
    /// The scope now waits at least `delay` seconds between sends, one at a time (or
    /// `concurrency` at a time if its `min_concurrency` is higher).
    Applied {
        /// The new base delay in seconds.
        delay: f64,
        /// The new concurrency limit.
        concurrency: u32,
    },
    /// The scope's configuration is more aggressive and was kept; `warned` tells whether
    /// this call emitted the (one-time) warning.
    KeptConfig {
        /// Whether this call logged the warning.
        warned: bool,
    },
    /// `throttling_robotstxt_obey` is off.
    Ignored,
}

/// A correction of a scope's quota consumption after the fact.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuotaReconcile {
    /// Add this (possibly negative) amount to what was consumed.
    Consumed(f64),
    /// The server says this much is left: consumed = quota − remaining.
    Remaining(f64),
}

fn check_secs(key: &str, secs: f64) -> Result<(), ConfigError> {
    if secs.is_finite() && secs >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            &key,
            format!("must be a finite number of seconds >= 0, got {secs}"),
        ))
    }
}

impl Throttler {
    /// Holds back every request of `scope` for at least `secs` seconds, counted as a
    /// backoff trigger (level + 1). Unlike header delays it is not capped by
    /// `backoff_max_delay`. Use it for soft blocks backoff cannot see (a maintenance page
    /// served with status 200).
    pub fn delay_scope(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        check_secs("delay_scope", secs)?;
        let now = self.clock.clamp(now);
        let (i, created) = self.resolve(scope, now);
        let state = &mut self.slots[i as usize];
        state.hard_delay(
            &self.params[state.params as usize],
            secs_to_duration(secs),
            now,
        );
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Applies a robots.txt Crawl-delay reported for `scope` (docs/behaviour.md 3.6): capped at
    /// `throttling_robotstxt_max_delay`; if the scope's configured delay is lower or its
    /// configured concurrency above 1, the configuration is kept and one warning is logged
    /// (unless `ignore_robots_txt`); otherwise the base delay is raised to the value and the
    /// concurrency set to 1 (floored at `min_concurrency`). Survives eviction.
    pub fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision, ConfigError> {
        check_secs("crawl_delay", secs)?;
        if !self.settings.throttling_robotstxt_obey {
            event!(
                debug,
                scope,
                crawl_delay = secs,
                "crawl-delay ignored (throttling_robotstxt_obey is off)"
            );
            return Ok(CrawlDelayDecision::Ignored);
        }
        if secs == 0.0 {
            event!(debug, scope, "crawl-delay 0 ignored: it asks for nothing");
            return Ok(CrawlDelayDecision::Ignored);
        }
        let now = self.clock.clamp(now);
        let capped = secs.min(self.settings.throttling_robotstxt_max_delay);
        let p = &self.params[self.params_index(scope) as usize];
        let conflicts = p.explicit_delay.is_some_and(|d| d < capped)
            || p.explicit_concurrency.is_some_and(|c| c == 0 || c > 1);
        let (ignore_robots, min_concurrency) = (p.ignore_robots_txt, p.min_concurrency);
        // The base delay in force now (configured, live-set or learned by rampup).
        let current = self.scope_settings(scope).delay;
        let ov = self.overrides.entry(Box::from(scope)).or_default();
        if conflicts {
            let warned = !ignore_robots && !ov.robots_warned;
            if !warned {
                event!(
                    debug,
                    scope,
                    crawl_delay = capped,
                    "crawl-delay kept below the configured rate"
                );
            }
            if warned {
                ov.robots_warned = true;
                event!(
                    warn,
                    scope,
                    crawl_delay = capped,
                    "the scope's configured delay/concurrency is more aggressive than its \
                     robots.txt Crawl-delay; keeping the configuration \
                     (set ignore_robots_txt to silence this)"
                );
            }
            return Ok(CrawlDelayDecision::KeptConfig { warned });
        }
        let delay = current.max(capped);
        let concurrency = min_concurrency.max(1);
        ov.base_delay = Some(delay);
        ov.concurrency = Some(concurrency);
        ov.robots_delay = Some(delay);
        let (i, created) = self.resolve(scope, now);
        let state = &mut self.slots[i as usize];
        state.raise_base_delay(delay);
        state.concurrency = concurrency;
        state.robots_floor = Some(delay);
        event!(debug, scope, delay, concurrency, "crawl-delay applied");
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(CrawlDelayDecision::Applied { delay, concurrency })
    }

    /// Changes the base delay of `scope` at run time (kept across eviction). While the
    /// scope is backing off its current delay never drops below the backoff delay.
    pub fn set_scope_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        check_secs("delay", secs)?;
        let now = self.clock.clamp(now);
        self.overrides
            .entry(Box::from(scope))
            .or_default()
            .base_delay = Some(secs);
        let (i, created) = self.resolve(scope, now);
        self.slots[i as usize].set_base_delay(secs);
        self.wake_scope(i);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Changes the concurrency limit of `scope` at run time (0 = unlimited; kept across
    /// eviction). It must not be below the scope's `min_concurrency`.
    pub fn set_scope_concurrency(
        &mut self,
        scope: &str,
        concurrency: u32,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        let min = self.params[self.params_index(scope) as usize].min_concurrency;
        if concurrency != 0 && concurrency < min {
            return Err(ConfigError::new(
                &"concurrency",
                format!("must not be below the scope's min_concurrency ({concurrency} < {min})"),
            ));
        }
        let now = self.clock.clamp(now);
        self.overrides
            .entry(Box::from(scope))
            .or_default()
            .concurrency = Some(concurrency);
        let (i, created) = self.resolve(scope, now);
        self.slots[i as usize].concurrency = concurrency;
        self.wake_scope(i);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Corrects the quota consumption of `scope` after the fact, e.g. from an API's cost
    /// header. Does nothing for a scope without a quota.
    pub fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        let (key, value) = match how {
            QuotaReconcile::Consumed(v) => ("consumed", v),
            QuotaReconcile::Remaining(v) => ("remaining", v),
        };
        if !value.is_finite() {
            return Err(ConfigError::new(
                &key,
                format!("must be finite, got {value}"),
            ));
        }
        let now = self.clock.clamp(now);
        let (i, created) = self.resolve(scope, now);
        let state = &mut self.slots[i as usize];
        if let Some(quota) = self.params[state.params as usize].quota {
            state.consumed = match how {
                QuotaReconcile::Consumed(d) => (state.consumed + d).max(0.0),
                QuotaReconcile::Remaining(r) => (quota - r).max(0.0),
            };
            if state.consumed > 0.0 && state.quota_start.is_none() {
                state.quota_start = Some(now);
            }
            self.wake_scope(i);
        }
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }
}
