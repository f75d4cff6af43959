//! Calls a rate-limited API politely: `api_client URL_TEMPLATE N` fetches URL_TEMPLATE
//! with `{}` replaced by 0..N-1 through reqwest, a few calls in flight, spending one
//! budget ("api") that starts at 5 calls a second and probes upwards (rampup) until the
//! API pushes back, then obeys its 429s, Retry-After and RateLimit headers. Throttling
//! answers are retried after the wait the API asked for. Prints one JSON line.
//!
//!     cargo run -p polite-throttle-tower --features reqwest --example api_client -- 'http://127.0.0.1:8080/item/{}' 100
#![allow(clippy::print_stdout)] // examples print what they do
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use polite_runtime_tokio::{Clock, Throttle};
use polite_throttle_core::{RampupConfig, ScopeConfig, Settings};
use polite_throttle_tower::{RetryThrottled, ScopeKey, ThrottleLayer};
use tower::{Service, ServiceBuilder, ServiceExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let (Some(template), Some(n)) = (args.next(), args.next()) else {
        return Err(
            "usage: api_client URL_TEMPLATE N (e.g. 'http://127.0.0.1:8080/item/{}' 100)".into(),
        );
    };
    let n: u64 = n
        .parse()
        .map_err(|e| format!("N must be a whole number: {e}"))?;

    // The API-client preset: no jitter, backoff on 429/503 only. The budget starts at 5
    // calls a second, 4 at once, and rampup halves the delay after each quiet 2-second
    // window until the API answers 429.
    let settings = Settings::api_client()
        .backoff_window(5.0)
        .backoff_min_delay(0.1)
        .with_scope(
            "api",
            ScopeConfig::per_second(5.0)
                .concurrency(4)
                .rampup(RampupConfig::default().delay_factor(0.8).step_back(true)),
        );
    let throttle = Throttle::new(settings, Clock::wall())?;
    let throttled = Arc::new(AtomicU64::new(0));
    let counter = throttled.clone();
    let client = ServiceBuilder::new()
        .retry(RetryThrottled::new(20))
        .layer(ThrottleLayer::new(throttle).scope_by(ScopeKey::fixed("api")))
        .map_response(move |r: reqwest::Response| {
            if r.status() == 429 {
                counter.fetch_add(1, Relaxed);
            }
            r
        })
        .service(reqwest::Client::new());

    let start = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..n {
        let url = template.replace("{}", &i.to_string());
        let mut client = client.clone();
        calls.spawn(async move {
            let request = reqwest::Request::new(reqwest::Method::GET, url.parse()?);
            let response = client.ready().await?.call(request).await?;
            let ok = response.status().is_success();
            response.bytes().await?;
            Ok::<bool, Error>(ok)
        });
    }
    let (mut ok, mut errors) = (0, 0);
    while let Some(done) = calls.join_next().await {
        match done? {
            Ok(true) => ok += 1,
            _ => errors += 1,
        }
    }
    println!(
        "{{\"requests\": {n}, \"ok\": {ok}, \"throttled\": {}, \"errors\": {errors}, \"seconds\": {:.3}}}",
        throttled.load(Relaxed),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
