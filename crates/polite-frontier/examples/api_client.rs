//! A rate-limited API client that uses the throttler alone (no queue): at most 2 calls
//! in flight and 10 a second to the API, first come first served across tasks, slowing
//! down when the API answers 429 or 503 (and waiting as long as its Retry-After or
//! RateLimit headers ask).
//!
//!     cargo run -p polite-frontier --features tokio --example api_client -- http://127.0.0.1:8000/
#![allow(clippy::print_stdout)] // examples print what they do
use polite_frontier::throttle::ScopeUse;
use polite_frontier::tokio::{Clock, Throttle, unix_now};
use polite_frontier::{Jitter, Outcome, ScopeConfig, Settings};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let api = std::env::args()
        .nth(1)
        .unwrap_or("http://127.0.0.1:8000/".into());
    // One budget named "api", whatever host a call goes to: 0.1 s apart, 2 at once,
    // no random jitter (an API's limit is exact).
    let settings = Settings::default().with_scope(
        "api",
        ScopeConfig::new()
            .delay(0.1)
            .concurrency(2)
            .jitter(Jitter::NONE),
    );
    let throttle = Throttle::new(settings, Clock::wall())?;
    let http = reqwest::Client::new();

    let mut calls = Vec::new();
    for id in 0..20 {
        let (throttle, http, url) = (throttle.clone(), http.clone(), format!("{api}?id={id}"));
        calls.push(tokio::spawn(async move {
            let permit = throttle.acquire(&[ScopeUse::new("api")]).await;
            match http.get(&url).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    permit.finish(&Outcome::response(
                        status,
                        response.headers(),
                        Some(unix_now()),
                    ));
                    println!("{status} {url}");
                }
                Err(_) => permit.finish(&Outcome::error("connection")),
            }
        }));
    }
    for call in calls {
        call.await?;
    }
    Ok(())
}
