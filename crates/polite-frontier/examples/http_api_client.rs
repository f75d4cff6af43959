//! A rate-limited API client: reqwest behind the throttle's tower layer. One budget
//! named "api" for every call: at most 2 in flight and 10 a second, first come first
//! served across tasks; 429s and 503s slow it down, Retry-After and RateLimit headers
//! are obeyed, and throttling answers are sent again after the wait the API asked for.
//!
//!     cargo run -p polite-frontier --features reqwest --example http_api_client -- http://127.0.0.1:8000/
#![allow(clippy::print_stdout)] // examples print what they do
use polite_frontier::tokio::{Clock, Throttle};
use polite_frontier::tower::{RetryThrottled, ScopeKey, ThrottleLayer};
use polite_frontier::{ScopeConfig, Settings};
use tower::{Service, ServiceBuilder, ServiceExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let api = std::env::args()
        .nth(1)
        .unwrap_or("http://127.0.0.1:8000/".into());
    // The API-client preset (no jitter, backoff on 429 and 503) and the API's limit.
    let settings =
        Settings::api_client().with_scope("api", ScopeConfig::per_second(10.0).concurrency(2));
    let client = ServiceBuilder::new()
        .retry(RetryThrottled::new(5))
        .layer(
            ThrottleLayer::new(Throttle::new(settings, Clock::wall())?)
                .scope_by(ScopeKey::fixed("api")),
        )
        .service(reqwest::Client::new());

    let mut calls = tokio::task::JoinSet::new();
    for id in 0..20 {
        let (mut client, url) = (client.clone(), format!("{api}?id={id}"));
        calls.spawn(async move {
            let request = reqwest::Request::new(reqwest::Method::GET, url.parse()?);
            let response = client.ready().await?.call(request).await?;
            println!("{} {url}", response.status().as_u16());
            Ok::<(), Error>(())
        });
    }
    while let Some(call) = calls.join_next().await {
        call??;
    }
    Ok(())
}
