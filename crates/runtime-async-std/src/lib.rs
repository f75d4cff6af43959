//! # polite-runtime-async-std
//!
//! The core crates decide; this crate waits, on the async-std / smol stack. Two entry
//! points:
//!
//! - [`Driver`]: owns a [`Frontier`](polite_frontier_core::Frontier) and its store. Cloneable
//!   handles let many tasks [`push`](Driver::push), take the next ready request with
//!   [`next`](Driver::next) (or the [`leases`](Driver::leases) stream), and
//!   [`complete`](Driver::complete) or [`retry`](Driver::retry) it. `next` sleeps exactly
//!   until the next scope or delayed request allows a send, and wakes early when a
//!   completion frees a scope. Store calls run on the blocking thread pool.
//! - [`Throttle`]: the politeness engine alone, for code with its own queue:
//!   [`acquire`](Throttle::acquire) waits until every scope of a request allows it and
//!   serves the tasks waiting on a scope first come, first served; the
//!   [`ThrottlePermit`] is finished with the outcome (or released untracked if dropped).
//!
//! The API mirrors `polite-runtime-tokio` name for name, so a crawler moves between the two by
//! changing an import.
//!
//! ## async-std, smol, or any executor
//!
//! The `async-std` crate is discontinued upstream (RUSTSEC-2025-0052) and this crate does
//! not depend on it. It is built on the layer async-std itself sits on, shared with smol:
//! timers from [`async_io`], notifications from `event-listener`, store I/O on the
//! `blocking` thread pool (what async-std's `spawn_blocking` and smol's `unblock` use).
//! Nothing here spawns a task or needs a particular executor, so the same types run under
//! `async_std::task`, `smol`, `async-executor`, or a plain `block_on`; a smol adapter is
//! this crate re-exported.
//!
//! ## Time
//!
//! Time comes through a [`Clock`]: real time on `async_io` timers, or a manual, virtual
//! timeline ([`Clock::manual`]) for tests. [`ManualClock::block_on`] advances virtual time
//! to the next sleep whenever the code under test is idle, like tokio's paused clock, so
//! tests run hours of crawl in milliseconds with exact timestamps.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use polite_frontier_core::{Frontier, Request};
//! use polite_runtime_async_std::{Clock, Driver};
//! use polite_throttle_core::{Outcome, Settings};
//!
//! // Any executor: async-std's, smol's, or this one (async-executor, which smol uses).
//! let ex = async_executor::LocalExecutor::new();
//! futures_lite::future::block_on(ex.run(async {
//!     let clock = Clock::wall();
//!     let driver = Driver::new(Frontier::in_memory(Settings::default(), clock.now())?, clock);
//!     driver.push(Request::get("https://example.com/").callback("parse")).await?;
//!
//!     let mut workers = Vec::new();
//!     for _ in 0..4 {
//!         let driver = driver.clone();
//!         workers.push(ex.spawn(async move {
//!             while let Some(lease) = driver.next().await {
//!                 let lease = lease?;
//!                 // ... fetch lease.request.url, push the links found ...
//!                 driver.complete(lease.id(), Outcome::status(200)).await?;
//!             }
//!             Ok::<_, polite_runtime_async_std::DriverError<_>>(())
//!         }));
//!     }
//!     for w in workers {
//!         w.await?;
//!     }
//!     Ok(())
//! }))
//! # }
//! ```

mod clock;
mod driver;
mod throttle;
mod virtual_time;

pub use clock::{Clock, ManualClock};
pub use driver::{Driver, DriverFor, Leases, LeasesFor};
pub use polite_runtime_common::{Batching, DriverError, Runtime, unix_now};
pub use throttle::{Throttle, ThrottlePermit};

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
