//! # polite-runtime-tokio
//!
//! The core crates decide; this crate waits, on tokio. Two entry points:
//!
//! - [`Driver`]: owns a [`Frontier`](polite_frontier_core::Frontier) and its store. Cloneable
//!   handles let many tasks [`push`](Driver::push), take the next ready request with
//!   [`next`](Driver::next) (or the [`leases`](Driver::leases) stream), and
//!   [`complete`](Driver::complete) or [`retry`](Driver::retry) it. `next` sleeps exactly
//!   until the next scope or delayed request allows a send, and wakes early when a
//!   completion frees a scope. Calls into a persistent store never stall other tasks:
//!   on the multi-threaded runtime they run in place after the worker hands its other
//!   tasks over ([`block_in_place`](tokio::task::block_in_place), no thread handoff per
//!   call); on the current-thread runtime they go to the blocking pool.
//! - [`Throttle`]: the politeness engine alone, for code with its own queue:
//!   [`acquire`](Throttle::acquire) waits until every scope of a request allows it and
//!   serves the tasks waiting on a scope first come, first served; the
//!   [`ThrottlePermit`] is finished with the outcome (or released untracked if dropped).
//!
//! Time comes from `tokio::time` through a [`Clock`], so tests with paused time
//! (`#[tokio::test(start_paused = true)]`) run hours of crawl in milliseconds.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use polite_frontier_core::{Frontier, Request};
//! use polite_runtime_tokio::{Clock, Driver};
//! use polite_throttle_core::{Outcome, Settings};
//!
//! let clock = Clock::wall();
//! let driver = Driver::new(Frontier::in_memory(Settings::default(), clock.now())?, clock);
//! driver.push(Request::get("https://example.com/").callback("parse")).await?;
//!
//! let mut workers = Vec::new();
//! for _ in 0..4 {
//!     let driver = driver.clone();
//!     workers.push(tokio::spawn(async move {
//!         while let Some(lease) = driver.next().await {
//!             let lease = lease?;
//!             // ... fetch lease.request.url, push the links found ...
//!             driver.complete(lease.id(), Outcome::status(200)).await?;
//!         }
//!         Ok::<_, polite_runtime_tokio::DriverError<_>>(())
//!     }));
//! }
//! for w in workers {
//!     w.await??;
//! }
//! # Ok(())
//! # }
//! ```

mod clock;
mod driver;
mod throttle;

pub use clock::Clock;
pub use driver::{Driver, DriverFor, Leases, LeasesFor};
pub use polite_runtime_common::{Batching, DriverError, Runtime, unix_now};
pub use throttle::{Throttle, ThrottlePermit};

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
