//! The driver over a blocking store (store-sqlite): calls run on the blocking pool, paused
//! time still works, and a shut-down driver hands the store back to resume from.

use frontier_core::{Frontier, FrontierConfig, Request};
use runtime_tokio::{Clock, Driver, DriverError};
use store_sqlite::{SqliteOptions, SqliteStore};
use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

#[tokio::test(start_paused = true)]
async fn a_sqlite_backed_crawl_resumes_after_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crawl.sqlite3");
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(2.0));
    let clock = Clock::starting_at(Timestamp::ZERO);
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
    let frontier = Frontier::open(settings, FrontierConfig::default(), store, clock.now()).unwrap();
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
}
