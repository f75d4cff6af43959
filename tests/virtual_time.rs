//! Running a test's future on each adapter's virtual clock, starting at zero (shared by
//! the test files that run one suite against both adapters: `mod virtual_time;`).

use std::future::Future;

/// Runs `f` on a current-thread tokio runtime with paused time.
pub(crate) fn tokio<F, Fut, T>(f: F) -> T
where
    F: FnOnce(polite_runtime_tokio::Clock) -> Fut,
    Fut: Future<Output = T>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = polite_runtime_tokio::Clock::starting_at(polite_throttle_core::Timestamp::ZERO);
        f(clock).await
    })
}

/// Runs `f` on async-std's manual clock, advancing virtual time whenever the test is
/// idle.
pub(crate) fn async_std<F, Fut, T>(f: F) -> T
where
    F: FnOnce(polite_runtime_async_std::Clock) -> Fut,
    Fut: Future<Output = T>,
{
    let (clock, time) =
        polite_runtime_async_std::Clock::manual(polite_throttle_core::Timestamp::ZERO);
    time.block_on(f(clock))
}
