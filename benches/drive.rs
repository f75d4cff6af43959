//! Draining a filled frontier directly or through a driver with an instant fetch: the
//! shape of the driver-overhead benchmark (`benches/driver.rs`) and of `profile-driver`.

use std::time::{Duration, Instant};

use polite_frontier_core::{Frontier, FrontierConfig, Poll, Request, Store};
use polite_runtime_common::{DriverFor, Runtime};
use polite_throttle_core::{Outcome, Settings, Timestamp};

/// Unlimited concurrency, no delay, no jitter: nothing waits, so the drain measures the
/// path a lease takes and nothing else.
pub fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s
}

/// The default frontier (exact duplicate filter) without scope states kept on close.
pub fn config() -> FrontierConfig {
    FrontierConfig::default().persist_scope_states(false)
}

/// A frontier on `store` holding `reqs`, flushed.
pub fn fill<S: Store>(store: S, reqs: &[Request]) -> Frontier<S>
where
    S::Error: std::fmt::Debug,
{
    let mut f = Frontier::open(settings(), config(), store, Timestamp::ZERO).unwrap();
    for r in reqs {
        f.push(r, Timestamp::ZERO).unwrap();
    }
    f.checkpoint().unwrap();
    f
}

/// How a filled frontier is drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// `poll` and `complete` called directly, at a fixed time.
    Direct,
    /// `polite_runtime_tokio::Driver` on a current-thread runtime.
    Tokio,
    /// `polite_runtime_tokio::Driver` on a multi-threaded runtime with 2 workers.
    TokioMulti,
    /// `polite_runtime_async_std::Driver` under `futures_lite::future::block_on`.
    AsyncStd,
}

impl Way {
    /// Every way, directly first.
    pub const ALL: [Way; 4] = [Way::Direct, Way::Tokio, Way::TokioMulti, Way::AsyncStd];

    /// Its name on `profile-driver`'s command line and in its JSON.
    pub fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Tokio => "tokio",
            Way::TokioMulti => "tokio-multi",
            Way::AsyncStd => "async-std",
        }
    }

    /// The way called `name`.
    pub fn from_name(name: &str) -> Option<Way> {
        Way::ALL.into_iter().find(|w| w.name() == name)
    }
}

/// Takes every lease of `f` and completes it at once, `way`'s way: the leases taken and
/// the time it took (runtime start-up left out, of the time and of what
/// `valgrind --toggle-collect=*drain*` counts: only the drains below are named so).
pub fn run<S>(way: Way, f: Frontier<S>) -> (usize, Duration)
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
{
    match way {
        Way::Direct => drain_direct(f),
        Way::Tokio | Way::TokioMulti => {
            let rt = if way == Way::Tokio {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
            .enable_time()
            .build()
            .unwrap();
            let clock = polite_runtime_tokio::Clock::starting_at(Timestamp::ZERO);
            // The loop runs as a spawned task, as a crawler's workers do.
            rt.block_on(async move {
                tokio::spawn(drain_driver(polite_runtime_tokio::Driver::new(f, clock)))
                    .await
                    .unwrap()
            })
        }
        Way::AsyncStd => {
            let clock = polite_runtime_async_std::Clock::starting_at(Timestamp::ZERO);
            futures_lite::future::block_on(drain_driver(polite_runtime_async_std::Driver::new(
                f, clock,
            )))
        }
    }
}

/// [`run`] calling the frontier directly. A function of its own so that
/// `valgrind --toggle-collect=*drain*` counts only this.
#[inline(never)]
pub fn drain_direct<S: Store>(mut f: Frontier<S>) -> (usize, Duration)
where
    S::Error: std::fmt::Debug,
{
    let ok = Outcome::status(200);
    let (t0, mut k) = (Instant::now(), 0);
    while let Poll::Ready(l) = f.poll(Timestamp::ZERO).unwrap() {
        f.complete(l.id(), &ok, Timestamp::ZERO).unwrap();
        k += 1;
    }
    (k, t0.elapsed())
}

/// [`run`] through a driver.
pub async fn drain_driver<S, R>(driver: DriverFor<Frontier<S>, R>) -> (usize, Duration)
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
    R: Runtime,
{
    let (t0, mut k) = (Instant::now(), 0);
    while let Some(l) = driver.next().await {
        driver
            .complete(l.unwrap().id(), Outcome::status(200))
            .await
            .unwrap();
        k += 1;
    }
    (k, t0.elapsed())
}
