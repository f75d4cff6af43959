//! The drivers and the throttle on real executors and the wall clock, not the virtual
//! time of the parity suite: polite-runtime-async-std's `Driver` and `Throttle` under
//! smol's executor (`async-executor`, two threads) and under async-std's, and
//! polite-runtime-tokio's `Driver` on tokio's multi-threaded runtime over a blocking store
//! (SQLite). Each checks the spacing a scope's delay asks for and that every request is
//! handed out once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_frontier_core::{Frontier, FrontierConfig, Request, VolatileStore};
use polite_throttle_core::{Outcome, ScopeUse, Settings};

const DELAY: f64 = 0.05;

fn settings() -> Settings {
    Settings::default().without_jitter().download_delay(DELAY)
}

fn requests() -> Vec<Request> {
    (0..24)
        .map(|i| Request::get(format!("https://h{}.test/{i}", i % 3)))
        .collect()
}

/// Every URL once, and per host sends at least DELAY apart (10 ms of slack: a send is
/// stamped when its task runs again, which a busy machine can delay for one task and not
/// the next).
fn check(sends: &[(String, Instant)]) {
    assert_eq!(sends.len(), 24);
    let mut by_host: HashMap<String, Vec<Instant>> = HashMap::new();
    let mut urls: Vec<&String> = sends.iter().map(|s| &s.0).collect();
    urls.sort();
    urls.dedup();
    assert_eq!(urls.len(), 24, "a request handed out twice");
    for (url, t) in sends {
        let host = url.split('/').nth(2).unwrap().to_string();
        by_host.entry(host).or_default().push(*t);
    }
    for (host, mut times) in by_host {
        times.sort();
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap >= Duration::from_secs_f64(DELAY) - Duration::from_millis(10),
                "{host}: {gap:?}"
            );
        }
    }
}

/// Four workers on the async-io driver, spawned with `spawn`, driven to the end.
async fn async_io_crawl(
    spawn: impl Fn(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
) -> Vec<(String, Instant)> {
    use polite_runtime_async_std::{Clock, Driver};
    let clock = Clock::wall();
    let frontier = Frontier::open(
        settings(),
        FrontierConfig::default(),
        VolatileStore::new(),
        clock.now(),
    )
    .unwrap();
    let driver = Driver::new(frontier, clock);
    driver.push_all(requests()).await.unwrap();
    let sends = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = async_channel::bounded::<()>(4);
    for _ in 0..4 {
        let (driver, sends, tx) = (driver.clone(), sends.clone(), tx.clone());
        spawn(Box::pin(async move {
            while let Some(lease) = driver.next().await {
                let lease = lease.unwrap();
                sends
                    .lock()
                    .unwrap()
                    .push((lease.request.url.to_string(), Instant::now()));
                async_io::Timer::after(Duration::from_millis(5)).await;
                driver
                    .complete(lease.id(), Outcome::status(200))
                    .await
                    .unwrap();
            }
            tx.send(()).await.unwrap();
        }));
    }
    for _ in 0..4 {
        rx.recv().await.unwrap();
    }
    // The standalone throttle on the same executor: FIFO, spaced.
    let throttle = polite_runtime_async_std::Throttle::new(settings(), Clock::wall()).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let (done_tx, done_rx) = async_channel::bounded::<()>(6);
    for i in 0..6 {
        let (throttle, order, done_tx) = (throttle.clone(), order.clone(), done_tx.clone());
        spawn(Box::pin(async move {
            let permit = throttle.acquire(&[ScopeUse::new("api.test")]).await;
            order.lock().unwrap().push((i, Instant::now()));
            permit.finish(&Outcome::status(200));
            done_tx.send(()).await.unwrap();
        }));
        // Let task i ask before task i + 1.
        async_io::Timer::after(Duration::from_millis(20)).await;
    }
    for _ in 0..6 {
        done_rx.recv().await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|o| o.0).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    for w in order.windows(2) {
        assert!(w[1].1 - w[0].1 >= Duration::from_secs_f64(DELAY) - Duration::from_millis(10));
    }
    sends.lock().unwrap().clone()
}

#[test]
fn async_io_driver_on_smols_executor_with_two_threads() {
    let ex = Arc::new(async_executor::Executor::new());
    let (stop, shutdown) = async_channel::unbounded::<()>();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (ex, shutdown) = (ex.clone(), shutdown.clone());
            std::thread::spawn(move || {
                futures_lite::future::block_on(ex.run(shutdown.recv())).ok();
            })
        })
        .collect();
    let spawner = ex.clone();
    let sends = futures_lite::future::block_on(ex.run(async_io_crawl(move |f| {
        spawner.spawn(f).detach();
    })));
    drop(stop);
    for t in threads {
        t.join().unwrap();
    }
    check(&sends);
}

#[test]
fn async_io_driver_on_async_stds_executor() {
    let sends = async_std::task::block_on(async_io_crawl(|f| {
        async_std::task::spawn(f);
    }));
    check(&sends);
}

#[test]
fn tokio_driver_on_a_multi_threaded_runtime_over_sqlite() {
    use polite_runtime_tokio::{Clock, Driver};
    use polite_store_sqlite::{SqliteOptions, SqliteStore};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sends = rt.block_on(async {
        let clock = Clock::wall();
        let store =
            SqliteStore::open(dir.path().join("q.sqlite"), SqliteOptions::default()).unwrap();
        let frontier =
            Frontier::open(settings(), FrontierConfig::default(), store, clock.now()).unwrap();
        let driver = Driver::new(frontier, clock);
        driver.push_all(requests()).await.unwrap();
        driver.flush().await.unwrap();
        let sends = Arc::new(Mutex::new(Vec::new()));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let (driver, sends) = (driver.clone(), sends.clone());
            workers.spawn(async move {
                while let Some(lease) = driver.next().await {
                    let lease = lease.unwrap();
                    sends
                        .lock()
                        .unwrap()
                        .push((lease.request.url.to_string(), Instant::now()));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    driver
                        .complete(lease.id(), Outcome::status(200))
                        .await
                        .unwrap();
                    driver.flush().await.unwrap();
                }
            });
        }
        while let Some(w) = workers.join_next().await {
            w.unwrap();
        }
        driver.close().await.unwrap();
        sends.lock().unwrap().clone()
    });
    check(&sends);
}
