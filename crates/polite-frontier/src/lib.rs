//! # polite-frontier
//!
//! Schedule web requests politely and fast: Scrapy's scheduler and the throttling system
//! Scrapy's maintainers designed (per-host delay and concurrency, backoff on 429 and 5xx,
//! `Retry-After` and `RateLimit` headers, rampup, quotas, robots.txt `Crawl-delay`), as
//! one crate with features. Add it with the pieces you need:
//!
//! ```sh
//! cargo add polite-frontier -F tokio,sqlite
//! ```
//!
//! A crawler on tokio whose queue survives a crash (`kill -9` loses nothing; running it
//! again resumes): any number of tasks take the next request that may be sent now,
//! fetch it, push the links they find and report how it went.
//!
//! ```no_run
//! # #[cfg(all(feature = "tokio", feature = "sqlite"))]
//! # mod crawler {
//! use polite_frontier::sqlite::{SqliteOptions, SqliteStore};
//! use polite_frontier::tokio::{Clock, Driver};
//! use polite_frontier::{Frontier, FrontierConfig, Outcome, Request, Settings};
//!
//! pub async fn crawl() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     let settings = Settings::default()
//!         .download_delay(0.5) // seconds between requests to one host (or a Duration)
//!         .concurrent_requests_per_domain(2);
//!     let store = SqliteStore::open("crawl.sqlite", SqliteOptions::default())?;
//!     let clock = Clock::wall();
//!     let frontier = Frontier::open(settings, FrontierConfig::default(), store, clock.now())?;
//!     let driver = Driver::new(frontier, clock);
//!     driver.push(Request::get("https://example.com/").start()).await?;
//!
//!     let mut workers = Vec::new();
//!     for _ in 0..8 {
//!         let driver = driver.clone();
//!         workers.push(tokio::spawn(async move {
//!             // `next` sleeps exactly until some host allows a send; `None` once
//!             // nothing is queued and nothing is in flight.
//!             while let Some(lease) = driver.next().await {
//!                 let lease = lease?;
//!                 // ... fetch lease.request.url, then push the links found:
//!                 driver.push(Request::get("https://example.com/a").child_of(&lease.request)).await?;
//!                 // A 429 or 503 here backs the host off (and honours Retry-After).
//!                 driver.complete(lease.id(), Outcome::status(200)).await?;
//!             }
//!             Ok::<_, polite_frontier::tokio::DriverError<_>>(())
//!         }));
//!     }
//!     for worker in workers {
//!         worker.await??;
//!     }
//!     driver.close().await?;
//!     Ok(())
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! The complete version, with an HTTP client, is `examples/tokio_crawler.rs`.
//!
//! ## Pick your features
//!
//! | feature | module | adds |
//! |---|---|---|
//! | (always) | [`throttle`], [`frontier`] and the items below | the `no_std` cores: the politeness engine and the crawl frontier, pure logic on a caller-supplied clock |
//! | `tokio` | `tokio` | the driver and the FIFO-fair [`Throttle`](polite_runtime_tokio::Throttle) on tokio |
//! | `async-std` | `async_std` | the same on async-io (async-std, smol, any executor), with a manual clock for tests |
//! | `sqlite` | `sqlite` | the default persistent store: one SQLite file |
//! | `fs` | `fs` | a crash-safe store in a directory of checksummed log segments, bounded memory |
//! | `redis` | `redis` | one queue, duplicate filter and politeness budget shared by many processes; a crawl sharded over several servers |
//! | `redis-cluster`, `redis-tls` | `redis` | the sharded crawl on a Redis Cluster; `rediss://` URLs |
//! | `tower`, `reqwest`, `reqwest-middleware`, `psl` | `tower` | a tower layer (and reqwest middleware) that throttles any HTTP client |
//! | `serde` | | `Settings` and scope configurations from TOML or JSON |
//! | `tracing` | | events for throttling decisions, dropped requests and redeliveries |
//! | `std` (default) | | without it, the cores only, `no_std` + `alloc` |
//!
//! An API client that needs politeness but no queue puts the `tower` module's
//! `ThrottleLayer` around its HTTP client (feature `reqwest` or `tower`; see
//! `examples/http_api_client.rs`), or uses `tokio::Throttle`, or [`Throttler`] with a
//! clock of its own.
#![cfg_attr(not(feature = "std"), no_std)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use polite_frontier_core as frontier;
#[doc(inline)]
pub use polite_throttle_core as throttle;

#[cfg(feature = "async-std")]
#[doc(inline)]
pub use polite_runtime_async_std as async_std;
#[cfg(feature = "tokio")]
#[doc(inline)]
pub use polite_runtime_tokio as tokio;

#[cfg(feature = "fs")]
#[doc(inline)]
pub use polite_store_fs as fs;
#[cfg(feature = "redis")]
#[doc(inline)]
pub use polite_store_redis as redis;
#[cfg(feature = "sqlite")]
#[doc(inline)]
pub use polite_store_sqlite as sqlite;
#[cfg(feature = "tower")]
#[doc(inline)]
pub use polite_throttle_tower as tower;

pub use polite_frontier_core::{
    DupeFilterConfig, Frontier, FrontierConfig, FrontierError, Lease, Policy, Poll, PushOutcome,
    Request, RequestId, Scheduling, Store,
};
pub use polite_throttle_core::{
    FakeClock, Jitter, Outcome, ScopeConfig, Seconds, Settings, Throttler, Timestamp,
};

// The READMEs' Rust examples compile as doctests of this crate (the workspace's front
// page with the features it uses), so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(all(doctest, feature = "tokio", feature = "sqlite", feature = "redis"))]
#[doc = include_str!("../../../README.md")]
struct WorkspaceReadmeDoctests;
