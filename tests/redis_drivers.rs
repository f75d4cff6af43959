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
