//! Leases per second through the tokio driver with an instant fetch, as a ratio to
//! calling the frontier directly (same requests, same store).
//!
//!     cargo bench -p workspace-benches --bench driver

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use frontier_core::{Durability, Frontier, FrontierConfig, Poll, Request, Store, VolatileStore};
use runtime_tokio::{Clock, Driver};
use throttle_core::{Outcome, Settings, Timestamp};
use workspace_benches::peer_requests;

const N: usize = 100_000;
const HOSTS: usize = 1_000;

fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s
}

fn config() -> FrontierConfig {
    FrontierConfig {
        persist_scope_states: false,
        ..FrontierConfig::default()
    }
}

fn fill<S: Store>(store: S, reqs: &[Request]) -> Frontier<S>
where
    S::Error: std::fmt::Debug,
{
    let mut f = Frontier::open(settings(), config(), store, Timestamp::ZERO).unwrap();
    for r in reqs {
        f.push(r, Timestamp::ZERO).unwrap();
    }
    f.flush().unwrap();
    f
}

fn direct<S: Store>(mut f: Frontier<S>) -> Duration
where
    S::Error: std::fmt::Debug,
{
    let ok = Outcome::status(200);
    let t0 = Instant::now();
    while let Poll::Ready(l) = f.poll(Timestamp::ZERO).unwrap() {
        f.complete(l.id(), &ok, Timestamp::ZERO).unwrap();
    }
    t0.elapsed()
}

fn driven<S>(f: Frontier<S>) -> Duration
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    drive(&rt, f)
}

fn driven_multi<S>(f: Frontier<S>) -> Duration
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    drive(&rt, f)
}

fn drive<S>(rt: &tokio::runtime::Runtime, f: Frontier<S>) -> Duration
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
{
    // The loop runs as a spawned task, as a crawler's workers do.
    rt.block_on(async move {
        tokio::spawn(drain(Driver::new(f, Clock::starting_at(Timestamp::ZERO))))
            .await
            .unwrap()
    })
}

fn driven_async_std<S>(f: Frontier<S>) -> Duration
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
{
    let clock = runtime_async_std::Clock::starting_at(Timestamp::ZERO);
    futures_lite::future::block_on(drain(runtime_async_std::Driver::new(f, clock)))
}

/// Takes every lease and completes it at once (an instant fetch); the time it took.
async fn drain<S, R>(driver: runtime_common::DriverFor<Frontier<S>, R>) -> Duration
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
    R: runtime_common::Runtime,
{
    let t0 = Instant::now();
    while let Some(l) = driver.next().await {
        driver
            .complete(l.unwrap().id(), Outcome::status(200))
            .await
            .unwrap();
    }
    t0.elapsed()
}

/// Drains a filled frontier, returning the time it took.
type Run<S> = fn(Frontier<S>) -> Duration;

/// The ways to drain a filled frontier, by benchmark name: directly, then through each
/// driver.
fn runs<S>() -> [(&'static str, Run<S>); 4]
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: Send + std::fmt::Debug + 'static,
{
    [
        ("frontier", direct),
        ("tokio_driver", driven),
        ("tokio_driver_multi_thread", driven_multi),
        ("async_std_driver", driven_async_std),
    ]
}

fn bench(c: &mut Criterion) {
    let reqs = peer_requests(N, HOSTS);
    let mut group = c.benchmark_group("driver_overhead");
    group.sample_size(10);

    group.throughput(Throughput::Elements(N as u64));
    for (name, run) in runs::<VolatileStore>() {
        group.bench_function(BenchmarkId::new("memory", name), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run(fill(VolatileStore, &reqs))).sum())
        });
    }

    let small = &reqs[..20_000];
    group.throughput(Throughput::Elements(small.len() as u64));
    for (name, run) in runs::<store_sqlite::SqliteStore>() {
        group.bench_function(BenchmarkId::new("sqlite", name), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let dir = tempfile::tempdir().unwrap();
                        let options = store_sqlite::SqliteOptions {
                            durability: Durability::default(),
                            ..Default::default()
                        };
                        let path = dir.path().join("bench.sqlite3");
                        let store = store_sqlite::SqliteStore::open(path, options).unwrap();
                        run(fill(store, small))
                    })
                    .sum()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
