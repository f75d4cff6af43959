//! The API-client preset against real servers on loopback, through reqwest: nginx's
//! `limit_req` (only 429 + Retry-After tell the limit) and a server that announces its
//! budget in `RateLimit` headers. nginx comes from Debian's package (`.ci/run` installs
//! it); without it these tests skip, except under `CI`, where they fail.
#![cfg(feature = "reqwest")]

mod support;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_runtime_tokio::{Clock, Throttle};
use polite_throttle_core::{RampupConfig, ScopeConfig, Settings};
use polite_throttle_tower::{RetryThrottled, ScopeKey, ThrottleLayer};
use support::{Announcing, Nginx};
use tower::{Service, ServiceBuilder, ServiceExt};

/// What one run saw: when each request finally succeeded, and every 429 on the wire.
struct Run {
    ok_at: Vec<Duration>,
    throttled: u64,
    failed: u64,
    took: Duration,
}

/// The api_client example's setup: the preset, 5 calls a second to start, 4 at once,
/// rampup in 2-second windows, throttling answers retried.
fn preset() -> Settings {
    Settings::api_client()
        .backoff_window(5.0)
        .backoff_min_delay(0.1)
        .with_scope(
            "api",
            ScopeConfig::per_second(5.0)
                .concurrency(4)
                .rampup(RampupConfig::default().delay_factor(0.8).step_back(true)),
        )
}

async fn run(settings: Settings, urls: Vec<String>) -> Run {
    let throttle = Throttle::new(settings, Clock::wall()).unwrap();
    let throttled = Arc::new(AtomicU64::new(0));
    let counter = throttled.clone();
    let client = ServiceBuilder::new()
        .retry(RetryThrottled::new(30))
        .layer(ThrottleLayer::new(throttle).scope_by(ScopeKey::fixed("api")))
        .map_response(move |r: reqwest::Response| {
            if r.status() == 429 {
                counter.fetch_add(1, Relaxed);
            }
            r
        })
        .service(reqwest::Client::new());
    let start = Instant::now();
    let ok_at = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for url in urls {
        let (mut client, ok_at) = (client.clone(), ok_at.clone());
        tasks.spawn(async move {
            let req = reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap());
            let res = client.ready().await.unwrap().call(req).await.unwrap();
            if res.status() == 200 {
                ok_at.lock().unwrap().push(start.elapsed());
                true
            } else {
                false
            }
        });
    }
    let mut failed = 0;
    while let Some(done) = tasks.join_next().await {
        if !done.unwrap() {
            failed += 1;
        }
    }
    let mut ok_at = std::mem::take(&mut *ok_at.lock().unwrap());
    ok_at.sort();
    Run {
        ok_at,
        throttled: throttled.load(Relaxed),
        failed,
        took: start.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_limit_req_settles_near_the_limit_with_few_429s() {
    let Some(nginx) = Nginx::start(10, 0) else {
        return;
    };
    let n = 300;
    let urls = (0..n).map(|i| nginx.url(&format!("/item/{i}"))).collect();
    let r = run(preset(), urls).await;
    let sent = n + r.throttled;
    // The settled rate: successes per second over the last half of the run.
    let half = &r.ok_at[r.ok_at.len() / 2..];
    let rate = (half.len() - 1) as f64 / (half[half.len() - 1] - half[0]).as_secs_f64();
    eprintln!(
        "nginx 10 r/s: {n} requests in {:.1} s, {} 429s ({:.1}% of {sent} sent), settled at {rate:.2} r/s",
        r.took.as_secs_f64(),
        r.throttled,
        100.0 * r.throttled as f64 / sent as f64
    );
    assert_eq!(
        (r.failed, r.ok_at.len()),
        (0, n as usize),
        "every request succeeds"
    );
    assert!(
        rate >= 7.0,
        "settles at 70% of the limit or more: {rate:.2} r/s"
    );
    assert!(
        r.throttled as f64 <= 0.05 * sent as f64,
        "at most 5% 429s: {} of {sent}",
        r.throttled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_budget_is_never_overrun() {
    let server = Announcing::start(10).await;
    // No delay and no rampup: only the headers hold the client back.
    let settings = Settings::api_client().with_scope("api", ScopeConfig::new().concurrency(1));
    let n = 45;
    let urls = (0..n)
        .map(|i| format!("http://127.0.0.1:{}/item/{i}", server.port))
        .collect();
    let r = run(settings, urls).await;
    let answered = server.answered.lock().unwrap().clone();
    eprintln!(
        "announcing 10/s: {n} requests in {:.1} s, answers {:?}",
        r.took.as_secs_f64(),
        answered.iter().filter(|s| **s != 200).count()
    );
    assert_eq!((r.failed, r.ok_at.len()), (0, n as usize));
    // The first response already carries the headers: no 429 at all.
    assert_eq!(r.throttled, 0, "answers: {answered:?}");
    // And it did not wait much longer than the budget needs (4 resets).
    assert!(r.took < Duration::from_secs(7), "{:?}", r.took);
}

#[cfg(feature = "reqwest-middleware")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reqwest_middleware_behaves_like_the_layer() {
    use polite_throttle_tower::ThrottleMiddleware;
    let Some(nginx) = Nginx::start(10, 0) else {
        return;
    };
    let layer = ThrottleLayer::new(Throttle::new(preset(), Clock::wall()).unwrap())
        .scope_by(ScopeKey::fixed("api"));
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::new(layer).retry_throttled(30))
        .build();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..60 {
        let (client, url) = (client.clone(), nginx.url(&format!("/item/{i}")));
        tasks.spawn(async move { client.get(url).send().await.unwrap().status().as_u16() });
    }
    let mut statuses = Vec::new();
    while let Some(s) = tasks.join_next().await {
        statuses.push(s.unwrap());
    }
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // 60 requests at no more than 10 a second take at least ~5.9 s.
    assert!(
        start.elapsed() > Duration::from_millis(5900),
        "{:?}",
        start.elapsed()
    );
}
