//! The frontier over the filesystem store at a million requests over 10,000 hosts, with
//! the peers' URL shapes and priorities (as `benches/frontier.rs` does in memory).
//!
//!     cargo bench -p polite-store-fs --bench fs_store
//!
//! - `push_1m`: `Frontier::push` of 1,000,000 requests into an empty store with group
//!   commit (the default `Durability::Batched`: an fdatasync every 1,000 operations or
//!   100 ms), duplicate filter on, then `checkpoint`. Building the `Request` values is
//!   excluded, as in the peer script.
//! - `poll_complete_1m`: polling and completing all 1,000,000 (a load, a lease record and
//!   an ack record per request, group commit, compaction as it comes), then `checkpoint`.
//! - `*_commit_10k`: the same with a larger group commit (10,000 operations or 100 ms).
//!
//! - `polite-frontier-core/...`: the same two runs on the in-memory `VolatileStore`, measured in
//!   the same process, so the store's own cost reads as a ratio on a noisy machine.
//!
//! After the first push it prints the bytes on disk per request and the store's
//! in-memory index per queued request.
#![allow(missing_docs)]

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use polite_frontier_core::{
    Durability, Frontier, FrontierConfig, Poll, Request, Store, VolatileStore,
};
use polite_store_fs::{FsConfig, FsStore};
use polite_throttle_core::{Outcome, Settings, Timestamp};

const N: usize = 1_000_000;
const HOSTS: usize = 10_000;

/// The peers' URL for request `i` over `d` hosts (~75 bytes at a million requests).
fn peer_url(i: usize, d: usize) -> String {
    let h = i % d;
    format!(
        "https://host{h}.example{}.com/path/cat-{}/item-{i}?q={i}&page={}",
        h % 100,
        i % 50,
        i % 10
    )
}

/// Uniform in [-5, 5], fixed per index (as `benches/lib.rs`).
fn peer_priority(i: usize) -> i32 {
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % 11) as i32 - 5
}

fn peer_requests(n: usize, d: usize) -> Vec<Request> {
    (0..n)
        .map(|i| {
            Request::get(peer_url(i, d))
                .callback("parse")
                .priority(peer_priority(i))
        })
        .collect()
}

/// Throttling out of the way, as in the peers' queue benchmarks.
fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s.throttling_scope_concurrency = 0;
    s
}

fn open_on<S: Store>(store: S) -> Frontier<S> {
    let config = FrontierConfig::default().persist_scope_states(false);
    Frontier::open(settings(), config, store, Timestamp::ZERO)
        .unwrap_or_else(|e| panic!("open: {e}"))
}

fn open(dir: &Path, durability: Durability) -> Frontier<FsStore> {
    open_on(FsStore::open(dir, FsConfig::with_durability(durability)).unwrap())
}

fn push_all<S: Store>(f: &mut Frontier<S>, reqs: &[Request]) {
    for r in reqs {
        f.push(r, Timestamp::ZERO)
            .unwrap_or_else(|e| panic!("push: {e}"));
    }
    f.checkpoint().unwrap_or_else(|e| panic!("checkpoint: {e}"));
}

fn drain<S: Store>(f: &mut Frontier<S>) {
    let ok = Outcome::status(200);
    let now = Timestamp::ZERO;
    loop {
        match f.poll(now) {
            Ok(Poll::Ready(lease)) => {
                f.complete(lease.id(), &ok, now)
                    .unwrap_or_else(|e| panic!("complete: {e}"));
            }
            Ok(_) => break,
            Err(e) => panic!("poll: {e}"),
        }
    }
    f.checkpoint().unwrap_or_else(|e| panic!("checkpoint: {e}"));
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

fn fs_store(c: &mut Criterion) {
    let reqs = peer_requests(N, HOSTS);
    let mut group = c.benchmark_group("store_fs_1m_10k_hosts");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N as u64));
    let mut reported = false;

    let commit_10k = Durability::Batched {
        max_ops: 10_000,
        max_delay: Duration::from_millis(100),
    };
    for (suffix, durability) in [("", Durability::default()), ("_commit_10k", commit_10k)] {
        group.bench_function(BenchmarkId::new("polite-store-fs", format!("push_1m{suffix}")), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let rss0 = rss_bytes();
                    let mut f = open(dir.path(), durability);
                    let t0 = Instant::now();
                    push_all(&mut f, &reqs);
                    total += t0.elapsed();
                    assert_eq!(f.len(), N);
                    if !reported {
                        reported = true;
                        let stats = f.store().stats();
                        let disk = dir_bytes(dir.path());
                        eprintln!(
                            "\nstore-fs after push_1m: {:.1} bytes on disk per request ({disk} bytes, {} segments); \
                             store index {:.2} bytes per queued request; process RSS growth {:.1} bytes per queued request (frontier included)",
                            disk as f64 / N as f64,
                            stats.segments,
                            stats.index_bytes as f64 / N as f64,
                            rss_bytes().saturating_sub(rss0) as f64 / N as f64,
                        );
                    }
                }
                total
            })
        });

        group.bench_function(
            BenchmarkId::new("polite-store-fs", format!("poll_complete_1m{suffix}")),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let dir = tempfile::tempdir().unwrap();
                        let mut f = open(dir.path(), durability);
                        push_all(&mut f, &reqs);
                        let t0 = Instant::now();
                        drain(&mut f);
                        total += t0.elapsed();
                        assert_eq!(f.stats().acked as usize, N);
                    }
                    total
                })
            },
        );
    }

    group.bench_function(BenchmarkId::new("polite-frontier-core", "push_1m"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut f = open_on(VolatileStore::new());
                let t0 = Instant::now();
                push_all(&mut f, &reqs);
                total += t0.elapsed();
                assert_eq!(f.len(), N);
            }
            total
        })
    });

    group.bench_function(
        BenchmarkId::new("polite-frontier-core", "poll_complete_1m"),
        |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut f = open_on(VolatileStore::new());
                    push_all(&mut f, &reqs);
                    let t0 = Instant::now();
                    drain(&mut f);
                    total += t0.elapsed();
                    assert_eq!(f.stats().acked as usize, N);
                }
                total
            })
        },
    );
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(30));
    targets = fs_store
}
criterion_main!(benches);
