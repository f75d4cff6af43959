//! Leases per second through the tokio driver with an instant fetch, as a ratio to
//! calling the frontier directly (same requests, same store).
//!
//!     cargo bench -p workspace-benches --bench driver

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use polite_frontier_core::{Durability, VolatileStore};
use workspace_benches::drive::{Way, fill, run};
use workspace_benches::peer_requests;

const N: usize = 100_000;
const HOSTS: usize = 1_000;

/// The benchmark's name for each way to drain a filled frontier.
fn bench_name(way: Way) -> &'static str {
    match way {
        Way::Direct => "frontier",
        Way::Tokio => "tokio_driver",
        Way::TokioMulti => "tokio_driver_multi_thread",
        Way::AsyncStd => "async_std_driver",
    }
}

fn bench(c: &mut Criterion) {
    let reqs = peer_requests(N, HOSTS);
    let mut group = c.benchmark_group("driver_overhead");
    group.sample_size(10);

    group.throughput(Throughput::Elements(N as u64));
    for way in Way::ALL {
        group.bench_function(BenchmarkId::new("memory", bench_name(way)), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| run(way, fill(VolatileStore::new(), &reqs)).1)
                    .sum()
            })
        });
    }

    let small = &reqs[..20_000];
    group.throughput(Throughput::Elements(small.len() as u64));
    for way in Way::ALL {
        group.bench_function(BenchmarkId::new("sqlite", bench_name(way)), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let dir = tempfile::tempdir().unwrap();
                        let options = polite_store_sqlite::SqliteOptions::default()
                            .durability(Durability::default());
                        let path = dir.path().join("bench.sqlite3");
                        let store = polite_store_sqlite::SqliteStore::open(path, options).unwrap();
                        run(way, fill(store, small)).1
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
