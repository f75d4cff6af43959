//! The driver over a blocking store (store-sqlite): calls run on the blocking pool, virtual
//! time still works (and stands still while they run), and a shut-down driver hands the
//! store back to resume from.

use frontier_core::{Frontier, FrontierConfig, Request};
use runtime_async_std::{Clock, Driver, DriverError};
use store_sqlite::{SqliteOptions, SqliteStore};
use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

#[test]
fn a_sqlite_backed_crawl_resumes_after_shutdown() {
    let (clock, time) = Clock::manual(Timestamp::ZERO);
    time.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crawl.sqlite3");
        let settings = Settings::default()
            .without_jitter()
            .with_scope("a.com", ScopeConfig::new().delay(2.0));
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let frontier = Frontier::open(
            settings.clone(),
            FrontierConfig::default(),
            store,
            clock.now(),
        )
        .unwrap();
        let driver = Driver::new(frontier, clock);
        for i in 0..5 {
            driver
                .push(Request::get(format!("https://a.com/{i}")))
                .await
                .unwrap();
        }
        let mut times = vec![];
        for _ in 0..3 {
            let lease = driver.next().await.unwrap().unwrap();
            times.push(driver.now());
            driver
                .complete(lease.id(), Outcome::status(200))
                .await
                .unwrap();
        }
        assert_eq!(
            times,
            [
                Timestamp::ZERO,
                Timestamp::from_secs(2),
                Timestamp::from_secs(4)
            ]
        );
        // One more out when we stop: it comes back.
        let out = driver.next().await.unwrap().unwrap();
        let other = driver.clone();
        let store = driver.shutdown().await.unwrap();
        assert!(matches!(
            other.push(Request::get("https://a.com/x")).await,
            Err(DriverError::Closed)
        ));
        assert!(other.next().await.is_none());
        drop(store);

        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let frontier =
            Frontier::open(settings, FrontierConfig::default(), store, clock.now()).unwrap();
        let redelivered = frontier.stats().redelivered;
        let driver = Driver::new(frontier, clock);
        let mut urls = vec![];
        while let Some(lease) = driver.next().await {
            let lease = lease.unwrap();
            urls.push(lease.request.url.to_string());
            driver
                .complete(lease.id(), Outcome::status(200))
                .await
                .unwrap();
        }
        urls.sort();
        assert_eq!(redelivered, 1);
        assert!(
            urls.contains(&out.request.url.to_string()),
            "the lease out at shutdown came back"
        );
        assert_eq!(urls.len(), 2);
    });
}

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
