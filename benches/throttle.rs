//! `try_acquire` + `release` over 100,000 live scopes, next to governor's keyed rate
//! limiter checking the same keys, in the same run.
//!
//!     cargo bench -p workspace-benches --bench throttle
//!     scripts/bench-vs-peers        # the same among the others, with the ratio in docs/performance.md
//!
//! Both sides get the same 100,000 host names (the peers' URL shapes), visited
//! round-robin so every call goes to a different key than the one before, and every key is
//! created before measuring. governor answers one question (does this key have a cell in
//! its GCRA budget?); the throttler reserves a scope, checks delay, concurrency, hard
//! backoff and quota, records the send, hands out a permit and takes it back with an
//! outcome that is checked against the backoff codes.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use polite_throttle_core::{Outcome, ScopeUse, Settings, Throttler, Timestamp};
use workspace_benches::host_names;

const SCOPES: usize = 100_000;

fn decisions(c: &mut Criterion) {
    let hosts = host_names(SCOPES);
    let mut group = c.benchmark_group("decision_100k_scopes");
    group.throughput(Throughput::Elements(1));

    // polite-throttle-core: default settings (8 per host, no delay), one scope per request.
    let mut throttler = Throttler::new(Settings::default(), Timestamp::ZERO).unwrap();
    let mut now = Timestamp::ZERO;
    for h in &hosts {
        let p = throttler.try_acquire(&[ScopeUse::new(h)], now).unwrap();
        throttler.release(p, &Outcome::status(200), now);
    }
    assert_eq!(throttler.stats().live_scopes, SCOPES);
    let ok = Outcome::status(200);
    let mut i = 0usize;
    group.bench_function(
        BenchmarkId::new("polite-throttle-core", "try_acquire+release"),
        |b| {
            b.iter(|| {
                i = (i + 1) % SCOPES;
                now += Duration::from_nanos(100);
                let permit = throttler
                    .try_acquire(&[ScopeUse::new(&hosts[i])], now)
                    .expect("a scope with nothing in flight admits");
                black_box(throttler.release(permit, &ok, now))
            })
        },
    );
    assert_eq!(
        throttler.stats().live_scopes,
        SCOPES,
        "no eviction while measuring"
    );

    // governor: keyed GCRA limiter (DashMap state store, its default clock).
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).unwrap());
    let limiter = RateLimiter::keyed(quota);
    for h in &hosts {
        limiter.check_key(h).unwrap();
    }
    assert_eq!(limiter.len(), SCOPES);
    let mut j = 0usize;
    group.bench_function(BenchmarkId::new("governor", "check_key"), |b| {
        b.iter(|| {
            j = (j + 1) % SCOPES;
            black_box(limiter.check_key(&hosts[j]).is_ok())
        })
    });

    // What the extra work costs: two scopes per request (host + a shared budget with a
    // quota), and 1 response in 100 a 429 that backs its host off.
    let settings = Settings::default().with_scope(
        "budget",
        polite_throttle_core::ScopeConfig::new()
            .concurrency(0)
            .quota(1e12)
            .window(60.0),
    );
    let mut throttler = Throttler::new(settings, Timestamp::ZERO).unwrap();
    let mut now = Timestamp::ZERO;
    let limited = Outcome::status(429);
    let mut k = 0usize;
    group.bench_function(
        BenchmarkId::new("polite-throttle-core", "two_scopes_quota_1pct_429"),
        |b| {
            b.iter(|| {
                k = (k + 1) % SCOPES;
                now += Duration::from_nanos(100);
                let uses = [
                    ScopeUse::new(&hosts[k]),
                    ScopeUse::with_amount("budget", 1.5),
                ];
                match throttler.try_acquire(&uses, now) {
                    Ok(permit) => {
                        let outcome = if k.is_multiple_of(100) { &limited } else { &ok };
                        black_box(throttler.release(permit, outcome, now));
                    }
                    Err(why) => {
                        black_box(why);
                    }
                }
            })
        },
    );
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(5));
    targets = decisions
}
criterion_main!(benches);
