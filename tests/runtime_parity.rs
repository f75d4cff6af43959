//! One behavioural suite, run against every runtime adapter (parity): delays, backoff
//! after a 429 with Retry-After, recovery, rampup, quotas, per-request delays, early
//! wake-ups on completion, end of stream, FIFO fairness of the standalone throttle, and
//! a crawl over polite-store-sqlite resumed after close, all on virtual time with exact
//! timestamps.
//!
//! Each adapter's suite gets a `run(|clock| async { .. })` from `virtual_time.rs`, which
//! runs the future on that adapter's virtual clock starting at zero.

macro_rules! parity_suite {
    ($adapter:ident, $run:path) => {
        mod $adapter {
            use std::cell::RefCell;
            use std::rc::Rc;
            use std::time::Duration;

            use polite_frontier_core::{Frontier, Lease, Request, VolatileStore};
            use polite_throttle_core::{
                Outcome, RampupConfig, ScopeConfig, ScopeUse, Settings, Timestamp,
            };
            use $adapter::{Driver, Throttle};

            fn secs(s: f64) -> Timestamp {
                Timestamp::from_secs_f64(s)
            }

            fn settings() -> Settings {
                Settings::default().without_jitter()
            }

            /// The next lease of `d` while `first` is completed `after` from now: when it
            /// came, and it.
            async fn next_while_completing(
                d: &Driver<VolatileStore>,
                first: Lease,
                after: Duration,
            ) -> (Timestamp, Lease) {
                let completing = async {
                    d.clock().sleep(after).await;
                    d.complete(first.id(), Outcome::status(200)).await.unwrap();
                };
                let next = async {
                    let l = d.next().await.unwrap().unwrap();
                    (d.now(), l)
                };
                futures_lite::future::zip(next, completing).await.0
            }

            /// Over a blocking store (polite-store-sqlite): calls run off the executor, virtual
            /// time still works, and a shut-down driver hands the store back to resume from.
            #[test]
            fn a_sqlite_backed_crawl_resumes_after_close() {
                $run(|clock| async move {
                    use polite_frontier_core::FrontierConfig;
                    use polite_store_sqlite::{SqliteOptions, SqliteStore};
                    use $adapter::DriverError;

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
                    let store = driver.close().await.unwrap();
                    assert!(matches!(
                        other.push(Request::get("https://a.com/x")).await,
                        Err(DriverError::Closed)
                    ));
                    assert!(other.next().await.is_none());
                    drop(store);

                    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
                    let frontier =
                        Frontier::open(settings, FrontierConfig::default(), store, clock.now())
                            .unwrap();
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
            fn delays_space_sends_exactly() {
                $run(|clock| async move {
                    let s = settings().with_scope("a.com", ScopeConfig::new().delay(5.0));
                    let d = Driver::new(Frontier::in_memory(s, clock.now()).unwrap(), clock);
                    for i in 0..3 {
                        d.push(Request::get(format!("https://a.com/{i}")))
                            .await
                            .unwrap();
                    }
                    let mut at = vec![];
                    while let Some(l) = d.next().await {
                        at.push(d.now());
                        d.complete(l.unwrap().id(), Outcome::status(200))
                            .await
                            .unwrap();
                    }
                    assert_eq!(at, [secs(0.0), secs(5.0), secs(10.0)]);
                });
            }

            #[test]
            fn a_429_with_retry_after_then_recovery() {
                $run(|clock| async move {
                    let d =
                        Driver::new(Frontier::in_memory(settings(), clock.now()).unwrap(), clock);
                    for i in 0..5 {
                        d.push(Request::get(format!("https://a.com/{i}")))
                            .await
                            .unwrap();
                    }
                    let l = d.next().await.unwrap().unwrap();
                    clock.sleep(Duration::from_millis(500)).await;
                    let limited = Outcome::response(429, [("Retry-After", "30")], None);
                    d.complete(l.id(), limited).await.unwrap();
                    // Nothing before the hard minimum; then spaced by min_delay (1 s) at level 1.
                    let l = d.next().await.unwrap().unwrap();
                    assert_eq!(d.now(), secs(30.5));
                    d.complete(l.id(), Outcome::status(200)).await.unwrap();
                    let l = d.next().await.unwrap().unwrap();
                    assert_eq!(d.now(), secs(31.5));
                    d.complete(l.id(), Outcome::status(200)).await.unwrap();
                    // A quiet window (60 s after the trigger) recovers to the base delay 0.
                    clock.sleep_until(secs(61.0)).await;
                    let level = d
                        .inspect(|f| f.throttler().snapshot("a.com").unwrap().level)
                        .await
                        .unwrap();
                    assert_eq!(level, 1, "recovery is lazy: looked at on the next decision");
                    let l = d.next().await.unwrap().unwrap();
                    d.complete(l.id(), Outcome::status(200)).await.unwrap();
                    let l = d.next().await.unwrap().unwrap();
                    assert_eq!(d.now(), secs(61.0), "back at the base: no spacing");
                    d.complete(l.id(), Outcome::status(200)).await.unwrap();
                    assert!(d.next().await.is_none());
                });
            }

            #[test]
            fn rampup_raises_concurrency_window_by_window() {
                $run(|clock| async move {
                    let s = settings().with_scope(
                        "api.com",
                        ScopeConfig::new()
                            .delay(0.0)
                            .max_concurrency(3)
                            .rampup(RampupConfig::default()),
                    );
                    let d = Driver::new(Frontier::in_memory(s, clock.now()).unwrap(), clock);
                    for i in 0..20 {
                        d.push(Request::get(format!("https://api.com/{i}")))
                            .await
                            .unwrap();
                    }
                    let mut concurrency = vec![];
                    for window in 0..4u64 {
                        clock.sleep_until(secs(window as f64 * 60.0)).await;
                        let mut held = vec![];
                        // Take what may go at once: rampup's current concurrency.
                        loop {
                            let ready = d
                                .inspect(|f| f.throttler().scope_settings("api.com").concurrency)
                                .await
                                .unwrap();
                            if held.len() as u32 >= ready {
                                break;
                            }
                            held.push(d.next().await.unwrap().unwrap());
                        }
                        assert_eq!(d.now(), secs(window as f64 * 60.0), "all sent at once");
                        concurrency.push(held.len());
                        for l in held {
                            d.complete(l.id(), Outcome::status(200)).await.unwrap();
                        }
                    }
                    assert_eq!(concurrency, [1, 2, 3, 3]);
                });
            }

            /// A long-latency scope on rampup, at its delay floor, one at a time: when the
            /// first 10 s window ends without a trigger, rampup raises its concurrency and
            /// the task already waiting gets the request at that moment, not when the first
            /// response arrives at 100 s. The standalone throttle likewise.
            #[test]
            fn a_rampup_step_wakes_a_waiting_task_at_the_window_end() {
                $run(|clock| async move {
                    let s = settings().backoff_window(10).with_scope(
                        "slow.com",
                        ScopeConfig::new()
                            .delay(0.0)
                            .max_concurrency(3)
                            .rampup(RampupConfig::default()),
                    );
                    let d =
                        Driver::new(Frontier::in_memory(s.clone(), clock.now()).unwrap(), clock);
                    for i in 0..2 {
                        d.push(Request::get(format!("https://slow.com/{i}")))
                            .await
                            .unwrap();
                    }
                    let first = d.next().await.unwrap().unwrap();
                    let (at, second) =
                        next_while_completing(&d, first, Duration::from_secs(100)).await;
                    assert_eq!(at, secs(10.0), "sent when rampup made room");
                    d.complete(second.id(), Outcome::status(200)).await.unwrap();

                    let t = Throttle::new(s, clock).unwrap();
                    let start = clock.now();
                    let p1 = t.acquire(&[ScopeUse::new("slow.com")]).await;
                    let release = async move {
                        clock.sleep(Duration::from_secs(100)).await;
                        p1.finish(&Outcome::status(200));
                    };
                    let waiter = async {
                        let p2 = t.acquire(&[ScopeUse::new("slow.com")]).await;
                        (clock.now(), p2)
                    };
                    let ((at, _p2), ()) = futures_lite::future::zip(waiter, release).await;
                    assert_eq!(at, start + Duration::from_secs(10));
                });
            }

            #[test]
            fn quotas_hold_requests_until_the_window_ends() {
                $run(|clock| async move {
                    let s = settings().with_scope(
                        "cost",
                        ScopeConfig::new().concurrency(0).quota(10.0).window(60.0),
                    );
                    let d = Driver::new(Frontier::in_memory(s, clock.now()).unwrap(), clock);
                    for i in 0..3 {
                        let r =
                            Request::get(format!("https://api.com/{i}")).scope_amount("cost", 4.0);
                        d.push(r).await.unwrap();
                    }
                    let mut at = vec![];
                    while let Some(l) = d.next().await {
                        at.push(d.now());
                        d.complete(l.unwrap().id(), Outcome::status(200))
                            .await
                            .unwrap();
                    }
                    assert_eq!(at, [secs(0.0), secs(0.0), secs(60.0)]);
                });
            }

            #[test]
            fn a_completion_wakes_a_waiting_task_at_once() {
                $run(|clock| async move {
                    let s = settings().with_scope("a.com", ScopeConfig::new().concurrency(1));
                    let d = Driver::new(Frontier::in_memory(s, clock.now()).unwrap(), clock);
                    d.push(Request::get("https://a.com/1")).await.unwrap();
                    d.push(Request::get("https://a.com/2")).await.unwrap();
                    let first = d.next().await.unwrap().unwrap();
                    let (at, l) =
                        next_while_completing(&d, first, Duration::from_millis(3250)).await;
                    assert_eq!(at, secs(3.25));
                    d.complete(l.id(), Outcome::status(200)).await.unwrap();
                });
            }

            #[test]
            fn per_request_delays_and_the_end_of_the_stream() {
                $run(|clock| async move {
                    let d =
                        Driver::new(Frontier::in_memory(settings(), clock.now()).unwrap(), clock);
                    d.push(Request::get("https://a.com/later").delay(7.0))
                        .await
                        .unwrap();
                    d.push(Request::get("https://b.com/now")).await.unwrap();
                    let now = d.next().await.unwrap().unwrap();
                    assert_eq!(
                        (&*now.request.url, d.now()),
                        ("https://b.com/now", secs(0.0))
                    );
                    let later = d.next().await.unwrap().unwrap();
                    assert_eq!(
                        (&*later.request.url, d.now()),
                        ("https://a.com/later", secs(7.0))
                    );
                    // Empty but one lease out: next waits for it (the lease may push more).
                    d.complete(now.id(), Outcome::status(200)).await.unwrap();
                    let d2 = d.clone();
                    let pusher = async move {
                        clock.sleep(Duration::from_secs(2)).await;
                        d2.push(Request::get("https://c.com/child")).await.unwrap();
                        d2.complete(later.id(), Outcome::status(200)).await.unwrap();
                    };
                    let (child, ()) = futures_lite::future::zip(d.next(), pusher).await;
                    let child = child.unwrap().unwrap();
                    assert_eq!(d.now(), secs(9.0));
                    d.complete(child.id(), Outcome::status(200)).await.unwrap();
                    assert!(d.next().await.is_none(), "empty and nothing in flight");
                });
            }

            #[test]
            fn throttle_waiters_are_served_in_arrival_order() {
                $run(|clock| async move {
                    let s =
                        settings().with_scope("api", ScopeConfig::new().concurrency(1).delay(1.0));
                    let t = Throttle::new(s, clock).unwrap();
                    let order = Rc::new(RefCell::new(Vec::new()));
                    let first = t.acquire(&[ScopeUse::new("api")]).await;
                    let mut tasks = Vec::new();
                    for i in 0..20 {
                        let (t, order) = (t.clone(), order.clone());
                        tasks.push(async move {
                            // Arrive in index order, a millisecond apart.
                            clock.sleep(Duration::from_millis(i)).await;
                            let p = t.acquire(&[ScopeUse::new("api")]).await;
                            order.borrow_mut().push((i, clock.now()));
                            clock.sleep(Duration::from_millis(100)).await;
                            p.finish(&Outcome::status(200));
                        });
                    }
                    let release = async move {
                        clock.sleep(Duration::from_millis(50)).await;
                        first.finish(&Outcome::status(200));
                    };
                    futures_lite::future::zip(futures_util::future::join_all(tasks), release).await;
                    let order = order.borrow();
                    let served: Vec<u64> = order.iter().map(|(i, _)| *i).collect();
                    assert_eq!(
                        served,
                        (0..20).collect::<Vec<_>>(),
                        "first come, first served"
                    );
                    // And spaced by the delay: one per second.
                    for (k, (_, at)) in order.iter().enumerate() {
                        assert_eq!(*at, secs(1.0 + k as f64));
                    }
                });
            }

            #[test]
            fn a_dropped_permit_releases_without_backoff_and_a_dropped_wait_leaves_the_queue() {
                $run(|clock| async move {
                    let s = settings().with_scope("api", ScopeConfig::new().concurrency(1));
                    let t = Throttle::new(s, clock).unwrap();
                    let p = t.acquire(&[ScopeUse::new("api")]).await;
                    // A waiter that gives up after a second.
                    let gave_up = futures_lite::future::or(
                        async {
                            let _never = t.acquire(&[ScopeUse::new("api")]).await;
                            false
                        },
                        async {
                            clock.sleep(Duration::from_secs(1)).await;
                            true
                        },
                    )
                    .await;
                    assert!(gave_up);
                    drop(p);
                    let p = t.acquire(&[ScopeUse::new("api")]).await;
                    assert_eq!(clock.now(), secs(1.0), "no backoff, no ghost waiter ahead");
                    p.finish(&Outcome::status(200));
                    let level =
                        t.with_throttler(|th, now| th.scope_stats("api", now).unwrap().level);
                    assert_eq!(level, 0);
                });
            }
        }
    };
}

mod virtual_time;

parity_suite!(polite_runtime_tokio, crate::virtual_time::tokio);
parity_suite!(polite_runtime_async_std, crate::virtual_time::async_std);
