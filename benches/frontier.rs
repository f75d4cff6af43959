//! The frontier at a million requests over 10,000 hosts, with the peers' URL shapes.
//!
//!     cargo bench -p workspace-benches --bench frontier
//!
//! - `push_1m`: `Frontier::push` of 1,000,000 requests into an empty frontier: group
//!   (host) extraction, Scrapy-compatible fingerprint and duplicate check, encoding and
//!   queueing. Building the `Request` values is excluded, as in the peer script.
//! - `push_1m_no_dupefilter`: the same without the duplicate filter (what Scrapy's
//!   priority queues alone do).
//! - `push_all_1m_no_dupefilter`: the same through `Frontier::push_all` in batches of
//!   100 (a page's links), which loads what the pushes ahead will read while it queues.
//! - `poll_1m`: polling all 1,000,000 back: throttling-aware scheduling, a throttler
//!   permit per request, decoding into a `Request`, a lease (what Scrapy's `pop` does is
//!   only the first part). The frontier keeps every lease open; the caller reads each
//!   request's URL and drops it, as the peer script reads and drops what it pops.
//! - `poll_1m_slot_aware`: the same with the slot-aware policy (Scrapy's default order).
//! - `poll_complete_1m`: polling and completing each lease (the throttler gets the
//!   outcome; the store forgets the request).
//! - `poll_complete_1m_one_group`: the same with every request in one explicit scope
//!   (`.scope("all")`): one group, no rotation among hosts, but each record carries its
//!   scope list (the general decoder).
//! - `poll_complete_1m_one_host`: the same with every request on one host (the peers'
//!   URLs with one host name): one plain group, the shape of a plain priority queue.
//! - `fingerprint`: Scrapy-compatible request fingerprints per second.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use polite_frontier_core::{
    DupeFilterConfig, Frontier, FrontierConfig, Policy, Poll, Request, VolatileStore, fingerprint,
};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use workspace_benches::{peer_requests, peer_url, push_requests};

const N: usize = 1_000_000;
const HOSTS: usize = 10_000;

/// Throttling out of the way, as in the peers' queue benchmarks.
fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s.throttling_scope_concurrency = 0;
    s
}

fn open(policy: Policy, dupefilter: DupeFilterConfig) -> Frontier<VolatileStore> {
    let config = FrontierConfig::default()
        .policy(policy)
        .dupefilter(dupefilter)
        .persist_scope_states(false);
    Frontier::open(settings(), config, VolatileStore::new(), Timestamp::ZERO).unwrap()
}

fn frontier(c: &mut Criterion) {
    let reqs = peer_requests(N, HOSTS);
    let one_group: Vec<Request> = reqs.iter().map(|r| r.clone().scope("all")).collect();
    let one_host = peer_requests(N, 1);
    let mut group = c.benchmark_group("frontier_1m_10k_hosts");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N as u64));

    for (name, dupefilter, batch) in [
        ("push_1m", DupeFilterConfig::Exact, None),
        ("push_1m_no_dupefilter", DupeFilterConfig::Disabled, None),
        (
            "push_all_1m_no_dupefilter",
            DupeFilterConfig::Disabled,
            Some(100),
        ),
    ] {
        group.bench_function(BenchmarkId::new("polite-frontier-core", name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut f = open(Policy::ThrottlingAware, dupefilter);
                    let t0 = Instant::now();
                    push_requests(&mut f, &reqs, batch);
                    total += t0.elapsed();
                    assert_eq!(f.len(), N);
                }
                total
            })
        });
    }

    for (name, policy, complete, reqs) in [
        ("poll_1m", Policy::ThrottlingAware, false, &reqs),
        ("poll_1m_slot_aware", Policy::SlotAware, false, &reqs),
        ("poll_complete_1m", Policy::ThrottlingAware, true, &reqs),
        (
            "poll_complete_1m_one_group",
            Policy::ThrottlingAware,
            true,
            &one_group,
        ),
        (
            "poll_complete_1m_one_host",
            Policy::ThrottlingAware,
            true,
            &one_host,
        ),
    ] {
        group.bench_function(BenchmarkId::new("polite-frontier-core", name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut f = open(policy, DupeFilterConfig::Disabled);
                    push_requests(&mut f, reqs, None);
                    let ok = Outcome::status(200);
                    let now = Timestamp::ZERO;
                    let mut url_bytes = 0;
                    let t0 = Instant::now();
                    while let Poll::Ready(lease) = f.poll(now).unwrap() {
                        url_bytes += lease.request.url.len();
                        if complete {
                            f.complete(lease.id(), &ok, now).unwrap();
                        }
                    }
                    total += t0.elapsed();
                    assert_eq!(f.in_flight() + f.stats().acked as usize, N);
                    black_box(url_bytes);
                }
                total
            })
        });
    }
    group.finish();

    let urls: Vec<String> = (0..N).map(|i| peer_url(i, HOSTS)).collect();
    let mut group = c.benchmark_group("fingerprint");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function(
        BenchmarkId::new("polite-frontier-core", "fingerprint"),
        |b| {
            b.iter(|| {
                i = (i + 1) % N;
                black_box(fingerprint("GET", &urls[i], b"").unwrap())
            })
        },
    );
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(10));
    targets = frontier
}
criterion_main!(benches);
