//! The standalone throttle on this runtime: politeness for code that does not use the
//! frontier (an API client, a downloader with its own queue).

use crate::clock::Clock;

/// A throttle shared by many tasks: [`acquire`](Self::acquire) waits until every scope of
/// a request allows it, serving the tasks waiting on a scope first come, first served.
///
/// Strict first come, first served means no waiter ever starves, at a price for requests
/// that need several scopes: such a waiter, first in line on one scope but still queued
/// on another, holds the first scope's line until its turn comes on the second. Keep
/// multi-scope requests for scopes that really must be shared (an IP, a cost budget).
///
/// ```
/// use polite_runtime_async_std::{Clock, Throttle};
/// use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (clock, time) = Clock::manual(Timestamp::ZERO);
/// let settings = Settings::default()
///     .without_jitter()
///     .with_scope("api.example.com", ScopeConfig::new().delay(2.0));
/// let throttle = Throttle::new(settings, clock)?;
///
/// time.block_on(async {
///     let permit = throttle.acquire(&["api.example.com".into()]).await;
///     permit.finish(&Outcome::response(429, [("Retry-After", "30")], None));
///     let _next = throttle.acquire(&["api.example.com".into()]).await; // waits out the 30 s
///     assert_eq!(clock.now(), Timestamp::from_secs(30));
/// });
/// # Ok(())
/// # }
/// ```
pub type Throttle = polite_runtime_common::Throttle<Clock>;

/// Slots held on every scope of a request: see [`polite_runtime_common::ThrottlePermit`].
pub type ThrottlePermit = polite_runtime_common::ThrottlePermit<Clock>;
