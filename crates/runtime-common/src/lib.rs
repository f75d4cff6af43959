//! # polite-runtime-common
//!
//! What the async adapters share, written once over a small [`Runtime`] trait (a clock
//! that can sleep, and a way to run blocking work off the executor):
//!
//! - [`DriverFor`]: owns a [`Scheduling`](polite_frontier_core::Scheduling) frontier and its
//!   store; cloneable handles let many tasks push, take the next ready request with
//!   [`next`](DriverFor::next) (which sleeps exactly until a send is allowed and wakes
//!   early when a completion frees a scope, serving concurrent callers first come, first
//!   served), and complete or retry it;
//! - [`Throttle`]: the politeness engine alone, FIFO-fair per scope.
//!
//! `polite-runtime-tokio` and `polite-runtime-async-std` implement [`Runtime`] for their `Clock` and
//! name these types `Driver`, `DriverFor`, `Throttle`, ...; use those. Waiting uses only
//! `event-listener` and std wakers, so the same code runs under any executor. An adapter
//! for another runtime is an implementation of [`Runtime`], as here with a clock that
//! jumps straight to each deadline:
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//!
//! use polite_frontier_core::{Frontier, Request};
//! use polite_runtime_common::{DriverFor, Job, Runtime};
//! use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
//!
//! /// Virtual time for one task: a sleep moves the clock to its deadline at once.
//! #[derive(Clone, Copy)]
//! struct Jump(&'static AtomicU64);
//!
//! impl Runtime for Jump {
//!     fn now(&self) -> Timestamp {
//!         Timestamp::from_nanos(self.0.load(Ordering::SeqCst))
//!     }
//!     fn sleep_until(&self, t: Timestamp) -> impl Future<Output = ()> + Send + use<> {
//!         let time = self.0;
//!         async move {
//!             time.fetch_max(t.as_nanos(), Ordering::SeqCst);
//!         }
//!     }
//!     fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send + use<> {
//!         let time = self.0;
//!         async move {
//!             time.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
//!         }
//!     }
//!     fn unblock(&self, job: Job) -> impl Future<Output = Result<(), String>> + Send + use<> {
//!         async move { Ok(job()) }
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! static TIME: AtomicU64 = AtomicU64::new(0);
//! let clock = Jump(&TIME);
//! let settings = Settings::default()
//!     .without_jitter()
//!     .with_scope("example.com", ScopeConfig::new().delay(10.0));
//! let driver = DriverFor::new(Frontier::in_memory(settings, clock.now())?, clock);
//! futures_lite::future::block_on(async {
//!     driver.push(Request::get("https://example.com/a")).await?;
//!     driver.push(Request::get("https://example.com/b")).await?;
//!     let first = driver.next().await.unwrap()?;
//!     driver.complete(first.id(), Outcome::status(200)).await?;
//!     let _second = driver.next().await.unwrap()?; // sleeps exactly 10 s
//!     assert_eq!(driver.now(), Timestamp::from_secs(10));
//!     Ok(())
//! })
//! # }
//! ```

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use polite_throttle_core::Timestamp;

mod driver;
mod throttle;
mod turn;

pub use driver::{
    Batching, CHECKPOINT_FAILURES_IN_A_ROW, DriverError, DriverFor, LeasesFor, panic_message,
};
pub use throttle::{Throttle, ThrottlePermit};

/// What the driver and the throttle need from an async runtime: its clock, mapped onto
/// core [`Timestamp`]s, and a way to run blocking store calls off the executor.
///
/// The futures borrow nothing from the clock (it is `Copy`: move a copy in), so the
/// driver's futures stay `Send` for any caller.
pub trait Runtime: Copy + Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// Sleeps until the clock reads `t` ([`Timestamp::MAX`], the core's "never", may
    /// sleep forever).
    fn sleep_until(&self, t: Timestamp) -> impl Future<Output = ()> + Send + use<Self>;

    /// Sleeps for `d`.
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send + use<Self>;

    /// Runs blocking work (a store call) where it cannot stall the executor. The job runs
    /// to completion even if the returned future is dropped; a panic in it comes back as
    /// its message (see [`panic_message`]).
    fn unblock(&self, job: Job) -> impl Future<Output = Result<(), String>> + Send + use<Self>;
}

/// A blocking call for [`Runtime::unblock`] (boxed, so runtimes' futures name no closure
/// type: rustc cannot always prove a future `Send` when one does).
pub type Job = Box<dyn FnOnce() + Send>;

/// The wall-clock time as a [`Timestamp`] since the Unix epoch, for parsing HTTP-dates
/// in `Retry-After` headers ([`polite_throttle_core::Outcome::response`]).
pub fn unix_now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp::ZERO + since
}

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
