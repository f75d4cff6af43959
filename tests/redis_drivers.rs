//! The runtime drivers drive the Redis frontier unchanged: the same crawl on virtual time
//! (tokio's paused clock, async-std's manual clock) sends the same requests at the same
//! instants whether the driver holds the in-process frontier or a `RedisFrontier`
//! (caller time). Several tasks share the driver; delays, concurrency, a 429 with
//! Retry-After and the end of the crawl all go through the driver.

use std::sync::OnceLock;

use polite_store_redis::testing::RedisServer;
use polite_throttle_core::{ScopeConfig, Settings};

fn server() -> Option<&'static RedisServer> {
    static SERVER: OnceLock<Option<RedisServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| RedisServer::start_or_skip("redis_drivers"))
        .as_ref()
}

fn settings() -> Settings {
    Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(2.0).concurrency(1))
        .with_scope("b.com", ScopeConfig::new().delay(0.5).concurrency(2))
}

fn crawl_name(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("drivers-{tag}-{}", N.fetch_add(1, Ordering::Relaxed))
}

macro_rules! drive_suite {
    ($adapter:ident, $run:path) => {
        mod $adapter {
            use std::time::Duration;

            use polite_frontier_core::{Frontier, Request};
            use polite_store_redis::{RedisConfig, RedisFrontier};
            use polite_throttle_core::Outcome;
            use $adapter::{Clock, DriverFor};

            /// Three tasks crawl 12 pages (each "fetch" takes 300 ms; one 429 with
            /// Retry-After); returns (ms, url) of every send, in order.
            async fn crawl<B>(driver: DriverFor<B>, clock: Clock) -> Vec<(u64, String)>
            where
                B: polite_frontier_core::Scheduling + Send + 'static,
                B::StoreError: Send + std::fmt::Debug + 'static,
            {
                let mut pages = Vec::new();
                for i in 0..6 {
                    pages.push(Request::get(format!("https://a.com/{i}")));
                    pages.push(Request::get(format!("https://b.com/{i}")));
                }
                driver.push_all(pages).await.unwrap();
                let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
                let tasks: Vec<_> = (0..3)
                    .map(|_| {
                        let (driver, log) = (driver.clone(), log.clone());
                        async move {
                            while let Some(lease) = driver.next().await {
                                let lease = lease.unwrap();
                                let url = lease.request.url.to_string();
                                let at = driver.now().as_nanos() / 1_000_000;
                                log.lock().unwrap().push((at, url.clone()));
                                clock.sleep(Duration::from_millis(300)).await;
                                let outcome = if url == "https://b.com/3" {
                                    Outcome::response(429, [("Retry-After", "4")], None)
                                } else {
                                    Outcome::status(200)
                                };
                                driver.complete(lease.id(), outcome).await.unwrap();
                            }
                        }
                    })
                    .collect();
                futures_util::future::join_all(tasks).await;
                let mut log = log.lock().unwrap().clone();
                log.sort();
                log
            }

            #[test]
            fn the_driver_runs_the_redis_frontier_like_the_in_process_one() {
                let Some(server) = crate::server() else {
                    return;
                };
                let url = server.url();
                let expected = $run(|clock| async move {
                    let f = Frontier::in_memory(crate::settings(), clock.now()).unwrap();
                    crawl(DriverFor::new(f, clock), clock).await
                });
                let got = $run(move |clock| async move {
                    let f = RedisFrontier::open(
                        &url,
                        &crate::crawl_name(stringify!($adapter)),
                        crate::settings(),
                        RedisConfig::default(),
                    )
                    .unwrap();
                    crawl(DriverFor::new(f, clock), clock).await
                });
                assert_eq!(got.len(), 12, "every page sent once: {got:?}");
                assert_eq!(got, expected, "the same sends at the same instants");
                // The 429's Retry-After held b.com for 4 s after its completion.
                let (t429, _) = got.iter().find(|(_, u)| u == "https://b.com/3").unwrap();
                let held_until = t429 + 300 + 4000;
                assert!(
                    got.iter()
                        .filter(|(t, u)| u.starts_with("https://b.com/") && *t > *t429)
                        .all(|(t, _)| *t >= held_until),
                    "b.com waited out its Retry-After: {got:?}"
                );
            }
        }
    };
}

mod virtual_time;

drive_suite!(polite_runtime_tokio, crate::virtual_time::tokio);
drive_suite!(polite_runtime_async_std, crate::virtual_time::async_std);

/// The batched driver over a `RedisFrontier` (see `polite_runtime_common::Batching`): what
/// happens to the leases taken for a task that left, and to the completions gathering when
/// the driver closes.
mod batching {
    use std::time::{Duration, Instant};

    use futures_lite::future::poll_once;
    use polite_frontier_core::Request;
    use polite_runtime_tokio::{Batching, Clock, DriverFor};
    use polite_store_redis::{RedisConfig, RedisFrontier};
    use polite_throttle_core::{Outcome, ScopeConfig, Settings};

    fn spaced() -> Settings {
        let one = ScopeConfig::new().delay(1.0).concurrency(1);
        Settings::default()
            .without_jitter()
            .with_scope("a.com", one.clone())
            .with_scope("b.com", one.clone())
            .with_scope("c.com", one)
    }

    type Next = std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Option<
                        Result<
                            polite_frontier_core::Lease,
                            polite_runtime_tokio::DriverError<polite_store_redis::RedisStoreError>,
                        >,
                    >,
                >,
        >,
    >;

    /// With `driver`'s first lease kept out (so `next` waits rather than ends): task A
    /// waits holding the turn, B waits behind it (a future not polled again), then two
    /// requests come and A's one poll takes a lease for each. Returns A's lease and B.
    async fn a_polls_for_itself_and_b(
        driver: &DriverFor<RedisFrontier>,
    ) -> (polite_frontier_core::Lease, Next) {
        let a = tokio::spawn({
            let d = driver.clone();
            async move { d.next().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut b: Next = Box::pin({
            let d = driver.clone();
            async move { d.next().await }
        });
        assert!(poll_once(b.as_mut()).await.is_none(), "B waits behind A");
        driver
            .push_all(vec![
                Request::get("https://b.com/1"),
                Request::get("https://c.com/1"),
            ])
            .await
            .unwrap();
        (a.await.unwrap().unwrap().unwrap(), b)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_lease_taken_for_a_task_that_left_goes_back_at_once_and_keeps_its_send() {
        let Some(server) = crate::server() else {
            return;
        };
        let crawl = crate::crawl_name("hand-back");
        let f =
            RedisFrontier::open(&server.url(), &crawl, spaced(), RedisConfig::default()).unwrap();
        let driver = DriverFor::new(f, Clock::wall());
        driver.push(Request::get("https://a.com/0")).await.unwrap();
        // Kept in flight: `next` waits instead of ending.
        let _first = driver.next().await.unwrap().unwrap();
        // A's one poll takes a lease for itself and one for B.
        let (got_a, b) = a_polls_for_itself_and_b(&driver).await;
        let sent_at = Instant::now();
        let mut info =
            RedisFrontier::open(&server.url(), &crawl, spaced(), RedisConfig::default()).unwrap();
        assert_eq!(
            info.info().unwrap().in_flight,
            3,
            "B's lease is out, untaken"
        );

        // B leaves without taking it: handed back on the spot (its slot freed, its
        // request queued again).
        drop(b);
        let now = info.info().unwrap();
        assert_eq!(
            now.in_flight, 2,
            "the lease taken for B was handed back: {now:?}"
        );
        assert_eq!(now.queued, 1, "its request is queued again: {now:?}");

        // It comes again, but only after its scope's delay from the send its poll
        // recorded (kept: spacing never shortens).
        let again = driver.next().await.unwrap().unwrap();
        let waited = sent_at.elapsed();
        assert_ne!(again.request.url, got_a.request.url);
        assert!(
            waited >= Duration::from_millis(800),
            "the handed-back request waited its scope's delay again: {waited:?}"
        );
        info.destroy().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_completion_waits_for_leases_taken_for_tasks_yet_to_pick_them_up() {
        let Some(server) = crate::server() else {
            return;
        };
        let crawl = crate::crawl_name("spare-wait");
        let f =
            RedisFrontier::open(&server.url(), &crawl, spaced(), RedisConfig::default()).unwrap();
        let batching = Batching::default().with_completion_delay(Duration::from_secs(60));
        let driver = DriverFor::with_batching(f, Clock::wall(), batching);
        driver.push(Request::get("https://a.com/0")).await.unwrap();
        let first = driver.next().await.unwrap().unwrap();
        let (got_a, b) = a_polls_for_itself_and_b(&driver).await;

        // A and the first lease complete: B's lease, taken but not yet picked up, is
        // still to come back, so their call waits for it.
        let mut done_first = Box::pin(driver.complete(first.id(), Outcome::status(200)));
        assert!(poll_once(done_first.as_mut()).await.is_none());
        let mut done_a = Box::pin(driver.complete(got_a.id(), Outcome::status(200)));
        assert!(
            poll_once(done_a.as_mut()).await.is_none(),
            "a lease is still to be picked up: the call waits for its completion"
        );
        let mut info =
            RedisFrontier::open(&server.url(), &crawl, spaced(), RedisConfig::default()).unwrap();
        assert_eq!(info.info().unwrap().in_flight, 3, "nothing sent yet");

        // B picks its lease up and completes it: nobody is left, one call sends all three.
        let got_b = b.await.unwrap().unwrap();
        assert!(
            driver
                .complete(got_b.id(), Outcome::status(200))
                .await
                .unwrap()
        );
        assert!(done_first.await.unwrap() && done_a.await.unwrap());
        assert_eq!(info.info().unwrap().in_flight, 0);
        driver.close().await.unwrap();
        info.destroy().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn completions_gathering_are_sent_when_the_driver_closes() {
        let Some(server) = crate::server() else {
            return;
        };
        let crawl = crate::crawl_name("close-flush");
        let f =
            RedisFrontier::open(&server.url(), &crawl, spaced(), RedisConfig::default()).unwrap();
        // A completion waits up to a minute for company: only the close sends it.
        let batching = Batching::default().with_completion_delay(Duration::from_secs(60));
        let driver = DriverFor::with_batching(f, Clock::wall(), batching);
        driver
            .push_all(vec![
                Request::get("https://a.com/1"),
                Request::get("https://b.com/1"),
            ])
            .await
            .unwrap();
        let one = driver.next().await.unwrap().unwrap();
        let _two = driver.next().await.unwrap().unwrap();

        let mut done = Box::pin(driver.complete(one.id(), Outcome::status(200)));
        assert!(
            poll_once(done.as_mut()).await.is_none(),
            "gathering: another lease is out and the delay is long"
        );
        let mut info =
            RedisFrontier::open(&server.url(), &crawl, spaced(), RedisConfig::default()).unwrap();
        assert_eq!(info.info().unwrap().in_flight, 2, "nothing sent yet");

        driver.close().await.unwrap();
        assert_eq!(
            info.info().unwrap().in_flight,
            1,
            "the close sent the completion"
        );
        assert!(done.await.unwrap(), "its caller gets its answer");
        assert!(matches!(
            driver.complete(one.id(), Outcome::status(200)).await,
            Err(polite_runtime_tokio::DriverError::Closed)
        ));
        info.destroy().unwrap();
    }
}
