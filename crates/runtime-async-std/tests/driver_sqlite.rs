//! The driver over a blocking store (polite-store-sqlite) on the blocking pool: a completion
//! whose caller gave up still completes and wakes the waiters. (The resume after
//! shutdown runs for both adapters in the workspace's `tests/runtime_parity.rs`.)

use polite_frontier_core::{Frontier, FrontierConfig, Request};
use polite_runtime_async_std::{Clock, Driver, DriverError};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

#[test]
fn a_completion_whose_caller_gave_up_still_completes_and_wakes_the_waiters() {
    let (clock, time) = Clock::manual(Timestamp::ZERO);
    time.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::default()
            .without_jitter()
            .with_scope("a.com", ScopeConfig::new().concurrency(1));
        let store =
            SqliteStore::open(dir.path().join("crawl.sqlite3"), SqliteOptions::default()).unwrap();
        let frontier =
            Frontier::open(settings, FrontierConfig::default(), store, clock.now()).unwrap();
        let driver = Driver::new(frontier, clock);
        driver.push(Request::get("https://a.com/1")).await.unwrap();
        driver.push(Request::get("https://a.com/2")).await.unwrap();
        let first = driver.next().await.unwrap().unwrap();
        let waiter = async {
            let next = driver.next();
            let timeout = async {
                clock.sleep(std::time::Duration::from_secs(60)).await;
                None
            };
            futures_lite::future::or(next, timeout).await
        };
        let give_up = async {
            let mut completing = std::pin::pin!(driver.complete(first.id(), Outcome::status(200)));
            // Started on the blocking pool, then dropped (most likely before it is done).
            let _ = futures_lite::future::poll_once(completing.as_mut()).await;
        };
        let (second, ()) = futures_lite::future::zip(waiter, give_up).await;
        let second = second.expect("the waiter was woken").unwrap();
        assert_ne!(second.request.url, first.request.url);
        assert_eq!(
            driver.now(),
            Timestamp::ZERO,
            "woken by the completion, not by time"
        );
        assert_eq!(driver.inspect(|f| f.in_flight()).await.unwrap(), 1);
    });
}

#[test]
fn a_panicking_store_call_is_an_error_and_the_driver_goes_on() {
    let (clock, time) = Clock::manual(Timestamp::ZERO);
    time.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteStore::open(dir.path().join("crawl.sqlite3"), SqliteOptions::default()).unwrap();
        let frontier = Frontier::open(
            Settings::default(),
            FrontierConfig::default(),
            store,
            clock.now(),
        )
        .unwrap();
        let driver = Driver::new(frontier, clock);
        let failed = driver.inspect(|_| -> usize { panic!("boom") }).await;
        match failed {
            Err(DriverError::Blocking(msg)) => assert!(msg.contains("boom"), "{msg}"),
            other => panic!("expected a blocking-call error, got {other:?}"),
        }
        driver.push(Request::get("https://a.com/")).await.unwrap();
        let lease = driver.next().await.unwrap().unwrap();
        driver
            .complete(lease.id(), Outcome::status(200))
            .await
            .unwrap();
        assert!(driver.next().await.is_none());
    });
}
