//! What the layer costs, measured in one run against references measured beside it.
//!
//! 1. Per request at 1,000 requests a second: reqwest alone against reqwest through
//!    `ThrottleLayer` (one scope, no delay, no concurrency limit: admission, the outcome
//!    and its header scan, the span), on a local axum server that answers at once.
//!    Requests are started on a 1 ms schedule (open loop) and each one's latency is
//!    taken; rounds alternate bare and throttled (paired), and the overhead is the
//!    median of the per-round ratios of mean latencies, minus one.
//! 2. A permit alone: `Throttle::acquire` + `finish` on an uncontended scope against
//!    governor's `check` on a direct limiter, nanoseconds per call, in the same run.
//!
//!     cargo bench -p polite-throttle-tower --features reqwest --bench overhead
//!
//! `OVERHEAD_ROUNDS` (default 6) and `OVERHEAD_REQUESTS` (per round, default 2000).
#![allow(clippy::print_stdout)]

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use polite_runtime_tokio::{Clock, Throttle};
use polite_throttle_core::{Outcome, ScopeConfig, ScopeUse, Settings};
use polite_throttle_tower::{ScopeKey, ThrottleLayer};
use tower::{Service, ServiceBuilder, ServiceExt};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Mean latency of `n` requests started 1 ms apart through `client`.
async fn paced<S>(client: S, url: &str, n: usize) -> Duration
where
    S: Service<reqwest::Request, Response = reqwest::Response> + Clone + Send + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        tick.tick().await;
        let mut client = client.clone();
        let req = reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap());
        tasks.spawn(async move {
            let start = Instant::now();
            let res = client.ready().await.unwrap().call(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.bytes().await.unwrap();
            start.elapsed()
        });
    }
    let mut total = Duration::ZERO;
    while let Some(d) = tasks.join_next().await {
        total += d.unwrap();
    }
    total / n as u32
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = env("OVERHEAD_ROUNDS", 6);
    let n = env("OVERHEAD_REQUESTS", 2000);

    let app = axum::Router::new().fallback(|| async { "ok" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/item", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let bare = reqwest::Client::new();
    let settings = Settings::api_client().with_scope("api", ScopeConfig::new().concurrency(0));
    let throttle = Throttle::new(settings, Clock::wall()).unwrap();
    let throttled = ServiceBuilder::new()
        .layer(ThrottleLayer::new(throttle).scope_by(ScopeKey::fixed("api")))
        .service(reqwest::Client::new());

    // Warm both clients' connection pools.
    paced(bare.clone(), &url, 200).await;
    paced(throttled.clone(), &url, 200).await;
    let mut ratios = Vec::new();
    for round in 0..rounds {
        // Alternate which goes first, so drift favours neither.
        let (a, b) = if round % 2 == 0 {
            let a = paced(bare.clone(), &url, n).await;
            (a, paced(throttled.clone(), &url, n).await)
        } else {
            let b = paced(throttled.clone(), &url, n).await;
            (paced(bare.clone(), &url, n).await, b)
        };
        let ratio = b.as_secs_f64() / a.as_secs_f64();
        println!(
            "round {round}: bare {:.1} µs, throttled {:.1} µs, ratio {ratio:.3}",
            a.as_secs_f64() * 1e6,
            b.as_secs_f64() * 1e6
        );
        ratios.push(ratio);
    }
    let overhead = median(ratios.clone()) - 1.0;
    println!(
        "layer overhead at 1,000 requests/s: {:+.1}% of reqwest's latency (median of {rounds} paired rounds; range {:+.1}% .. {:+.1}%)",
        overhead * 100.0,
        (ratios.iter().copied().fold(f64::INFINITY, f64::min) - 1.0) * 100.0,
        (ratios.iter().copied().fold(0.0, f64::max) - 1.0) * 100.0,
    );

    // A permit alone, against governor's check, in paired rounds.
    let iters = 200_000u32;
    let limiter = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(1_000_000_000).unwrap(),
    ));
    let throttle = Throttle::new(
        Settings::api_client().with_scope("api", ScopeConfig::new().concurrency(0)),
        Clock::wall(),
    )
    .unwrap();
    let scope = [ScopeUse::new("api")];
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(limiter.check()).ok();
        }
        theirs.push(t.elapsed().as_nanos() as f64 / f64::from(iters));
        let t = Instant::now();
        for _ in 0..iters {
            let permit = throttle.acquire(&scope).await;
            permit.finish(&Outcome::status(200));
        }
        ours.push(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    let (o, g) = (median(ours), median(theirs));
    println!(
        "permit alone: acquire + finish {o:.0} ns, governor check {g:.0} ns ({:.1}x); governor only answers yes/no, with no concurrency, backoff or queue",
        o / g
    );
}
