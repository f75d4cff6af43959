//! Workloads shared by the benchmarks, shaped like the peer scripts' in
//! `shared/peers/bench_scrapy_queues.py` so the figures compare.

use polite_frontier_core::{Frontier, Request, Store};
use polite_throttle_core::Timestamp;

pub mod drive;

/// `n` distinct host names shaped like the peers' URLs (`host{i}.example{i % 100}.com`).
pub fn host_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("host{}.example{}.com", i, i % 100))
        .collect()
}

/// The peers' URL for request `i` over `d` hosts (~70 bytes at a million requests).
pub fn peer_url(i: usize, d: usize) -> String {
    let h = i % d;
    format!(
        "https://host{h}.example{}.com/path/cat-{}/item-{i}?q={i}&page={}",
        h % 100,
        i % 50,
        i % 10
    )
}

/// The priority of request `i`: uniform in [-5, 5], fixed per index (the peers draw the
/// same range from a seeded generator).
pub fn peer_priority(i: usize) -> i32 {
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % 11) as i32 - 5
}

/// Requests `start..end` of the peers' workload: URL, the `parse` callback, a priority.
pub fn peer_requests_range(start: usize, end: usize, d: usize) -> Vec<Request> {
    (start..end)
        .map(|i| {
            Request::get(peer_url(i, d))
                .callback("parse")
                .priority(peer_priority(i))
        })
        .collect()
}

/// The first `n` requests of the peers' workload.
pub fn peer_requests(n: usize, d: usize) -> Vec<Request> {
    peer_requests_range(0, n, d)
}

/// A Redis frontier's configuration with `dupefilter` and every other setting at its
/// default (the Redis benchmarks' crawls differ only in their duplicate filter).
pub fn redis_config(
    dupefilter: polite_frontier_core::DupeFilterConfig,
) -> polite_store_redis::RedisConfig {
    polite_store_redis::RedisConfig::default()
        .frontier(polite_frontier_core::FrontierConfig::default().dupefilter(dupefilter))
}

/// The Redis benchmarks' throttling: on for every poll, but nothing waits (unlimited
/// concurrency, no delay).
pub fn redis_settings() -> polite_throttle_core::Settings {
    polite_throttle_core::Settings::default()
        .concurrent_requests(u32::MAX)
        .concurrent_requests_per_domain(0)
}

/// Pushes every request at time zero: one `push` each, or through `push_all` in batches
/// of `batch` (a page's links at a time).
pub fn push_requests<S: Store>(f: &mut Frontier<S>, reqs: &[Request], batch: Option<usize>)
where
    S::Error: std::fmt::Debug,
{
    match batch {
        Some(n) => {
            for chunk in reqs.chunks(n.max(1)) {
                f.push_all(chunk, Timestamp::ZERO).unwrap();
            }
        }
        None => {
            for r in reqs {
                f.push(r, Timestamp::ZERO).unwrap();
            }
        }
    }
}

/// `workers` tasks, spread over `drivers`, looping `next` / `complete(200)` until the
/// crawl is done, on a two-thread tokio runtime; the drivers are closed after. Returns
/// the seconds it took and how many leases were completed.
pub fn drive_to_the_end<B>(
    drivers: Vec<polite_runtime_tokio::DriverFor<B>>,
    workers: usize,
) -> (f64, usize)
where
    B: polite_frontier_core::Scheduling + Send + 'static,
    B::StoreError: std::fmt::Debug + Send + 'static,
    B::Closed: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let t0 = std::time::Instant::now();
        let tasks: Vec<_> = (0..workers)
            .map(|i| {
                let d = drivers[i % drivers.len()].clone();
                tokio::spawn(async move {
                    let mut done = 0usize;
                    while let Some(lease) = d.next().await {
                        let lease = lease.unwrap();
                        let outcome = polite_throttle_core::Outcome::status(200);
                        assert!(d.complete(lease.id(), outcome).await.unwrap());
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let mut done = 0;
        for t in tasks {
            done += t.await.unwrap();
        }
        let elapsed = t0.elapsed().as_secs_f64();
        for d in drivers {
            d.close().await.unwrap();
        }
        (elapsed, done)
    })
}
