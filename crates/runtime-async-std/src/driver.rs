//! The driver on this runtime: [`polite_runtime_common::DriverFor`] with this crate's [`Clock`].

use polite_frontier_core::Frontier;

use crate::clock::Clock;

/// A frontier driven on async-io: cloneable handles for many tasks, `next` that sleeps
/// exactly until something can be sent, store I/O on the blocking thread pool.
///
/// `Driver<S>` drives the in-process [`Frontier`] over store `S`; it is
/// [`DriverFor<Frontier<S>>`](DriverFor), the driver of any [`Scheduling`](polite_frontier_core::Scheduling) frontier (a
/// shared one from `polite-store-redis` too).
///
/// A store call runs to completion even if the future awaiting it is dropped (as with
/// tokio's `spawn_blocking`), and a push, completion or retry wakes the tasks waiting in
/// [`next`](Self::next) as soon as it is done, whether or not its caller still waits.
///
/// ```
/// use polite_frontier_core::{Frontier, Request};
/// use polite_runtime_async_std::{Clock, Driver};
/// use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (clock, time) = Clock::manual(Timestamp::ZERO);
/// time.block_on(async {
///     let settings = Settings::default()
///         .without_jitter()
///         .with_scope("example.com", ScopeConfig::new().delay(10.0));
///     let driver = Driver::new(Frontier::in_memory(settings, clock.now())?, clock);
///     driver.push(Request::get("https://example.com/a")).await?;
///     driver.push(Request::get("https://example.com/b")).await?;
///
///     let first = driver.next().await.unwrap()?;
///     driver.complete(first.id(), Outcome::status(200)).await?;
///     let second = driver.next().await.unwrap()?;          // sleeps exactly 10 s
///     assert_eq!(driver.now(), Timestamp::from_secs(10));
///     driver.complete(second.id(), Outcome::status(200)).await?;
///     assert!(driver.next().await.is_none());               // empty, nothing in flight
///     Ok(())
/// })
/// # }
/// ```
pub type Driver<S> = DriverFor<Frontier<S>>;

/// The driver of any [`Scheduling`](polite_frontier_core::Scheduling) frontier `B` on this
/// runtime: see [`polite_runtime_common::DriverFor`] for its methods.
pub type DriverFor<B> = polite_runtime_common::DriverFor<B, Clock>;

/// The stream of [`Driver::leases`] for the in-process frontier over store `S`.
pub type Leases<S> = LeasesFor<Frontier<S>>;

/// The stream of [`DriverFor::leases`].
pub type LeasesFor<B> = polite_runtime_common::LeasesFor<B, Clock>;
