//! # polite-throttle-core
//!
//! The politeness engine of a crawler or rate-limited API client, as pure logic: it decides
//! when a request to a set of *scopes* (a host, an IP, an API, a cost budget) may go out,
//! and learns from how requests end. It never reads a clock and never sleeps: every call
//! takes `now`, and every "not yet" comes back as a value saying until when.
//!
//! What it implements (docs/behaviour.md sections 2 and 3): per-scope delay with jitter and concurrency
//! limits, exponential backoff on 429/5xx and error kinds with lazy linear recovery,
//! `Retry-After` / `RateLimit-Reset` / `RateLimit` / `X-RateLimit-Reset` header delays, rampup
//! toward the fastest rate a server tolerates, quotas per time window with reconciliation,
//! robots.txt Crawl-delay, `delay_scope`, live reconfiguration, multi-scope all-or-nothing
//! admission, FIFO waiters, and a bounded scope map with LRU and idle eviction.
//!
//! ## The decision loop
//!
//! ```
//! use core::time::Duration;
//! use polite_throttle_core::{FakeClock, NotReady, Outcome, ScopeConfig, Settings, Throttler, Timestamp};
//!
//! let settings = Settings::default()
//!     .without_jitter()
//!     .with_scope("example.com", ScopeConfig::new().delay(2.0).concurrency(1));
//! let clock = FakeClock::new(Timestamp::ZERO);
//! let mut throttler = Throttler::new(settings, clock.now())?;
//!
//! // The first request goes at once.
//! let permit = throttler.try_acquire(&["example.com".into()], clock.now()).unwrap();
//! // A second one must wait for the first to finish (concurrency 1)...
//! assert_eq!(throttler.try_acquire(&["example.com".into()], clock.now()), Err(NotReady::Blocked));
//!
//! clock.advance(Duration::from_millis(300));
//! throttler.release(permit, &Outcome::status(200), clock.now());
//! // ...and then for the 2-second delay, counted from the first send.
//! assert_eq!(
//!     throttler.try_acquire(&["example.com".into()], clock.now()),
//!     Err(NotReady::NotUntil(Timestamp::from_secs(2)))
//! );
//!
//! // A 429 with Retry-After: nothing goes out for 30 s.
//! clock.set(Timestamp::from_secs(2));
//! let permit = throttler.try_acquire(&["example.com".into()], clock.now()).unwrap();
//! let limited = Outcome::response(429, [("Retry-After", "30")], None);
//! throttler.release(permit, &limited, clock.now());
//! assert_eq!(
//!     throttler.try_acquire(&["example.com".into()], clock.now()),
//!     Err(NotReady::NotUntil(Timestamp::from_secs(32)))
//! );
//! let stats = throttler.scope_stats("example.com", clock.now()).unwrap();
//! assert_eq!((stats.level, stats.delay), (1, 2.0));
//! # Ok::<(), polite_throttle_core::ConfigError>(())
//! ```
//!
//! A runtime adapter turns this into waiting: on `NotUntil(t)` it sleeps until `t`, on
//! `Blocked` it waits for a completion (or, when tickets are queued ahead of it, for its
//! turn). For many concurrent callers,
//! [`Throttler::try_acquire_or_enqueue`] hands out tickets that are admitted first come,
//! first served per scope, with [`Throttler::poll_timeout`] / [`Throttler::handle_timeout`] /
//! [`Throttler::poll_wakeup`] telling the adapter when and whom to wake.
//!
//! ## Features
//!
//! - `std` (default): nothing in the engine needs it; enables `std` in dependencies.
//! - `serde` (default): (de)serialisation of [`Settings`], [`ScopeConfig`],
//!   [`ScopeSnapshot`] and [`Timestamp`].
//! - `tracing` (default): debug events for each backoff, recovery, rampup, header-delay,
//!   Crawl-delay and eviction decision, and the held-back warning.
//!
//! Without default features the crate is `#![no_std]` + `alloc`.
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

/// Logs through `tracing` when the feature is on; compiles to nothing otherwise.
macro_rules! event {
    (debug, $($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        tracing::debug!($($arg)+);
    }};
    (warn, $($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        tracing::warn!($($arg)+);
    }};
}

mod config;
pub mod headers;
pub mod hooks;
mod lru;
mod outcome;
mod prefetch;
mod rng;
mod scope;
mod throttler;
mod time;
mod waiters;

pub use config::{
    BackoffConfig, BackoffTarget, ConfigError, Jitter, Rampup, RampupConfig, ScopeConfig, Seconds,
    Settings,
};
pub use outcome::Outcome;
pub use scope::{ScopeSnapshot, ScopeStats};
pub use throttler::{
    CrawlDelayDecision, HibernationError, MemoryHibernation, NotReady, Permit, QuotaReconcile,
    RequestFlags, ScopeHibernation, ScopeSettings, ScopeUse, Throttler, ThrottlerStats, Ticket,
    TicketPoll,
};
pub use time::{FakeClock, Timestamp};

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
