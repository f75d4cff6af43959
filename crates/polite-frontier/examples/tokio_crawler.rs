//! A polite crawler on tokio whose queue lives in SQLite: stop it (even with `kill -9`)
//! and run it again, and it resumes where it was.
//!
//!     cargo run -p polite-frontier --features tokio,sqlite --example tokio_crawler -- http://127.0.0.1:8000/
#![allow(clippy::print_stdout)] // examples print what they do
use polite_frontier::sqlite::{SqliteOptions, SqliteStore};
use polite_frontier::tokio::{Clock, Driver, unix_now};
use polite_frontier::{Frontier, FrontierConfig, Outcome, Request, Settings};
use reqwest::Url;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let seed = std::env::args()
        .nth(1)
        .unwrap_or("http://127.0.0.1:8000/".into());
    let settings = Settings::default()
        .download_delay(0.1) // seconds between two requests to one host (or a Duration)
        .concurrent_requests_per_domain(2);
    let store = SqliteStore::open("crawl.sqlite", SqliteOptions::default())?;
    let clock = Clock::wall();
    let frontier = Frontier::open(settings, FrontierConfig::default(), store, clock.now())?;
    let driver = Driver::new(frontier, clock);
    driver.push(Request::get(seed.as_str()).start()).await?;

    let http = reqwest::Client::new();
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (driver, http, seed) = (driver.clone(), http.clone(), seed.clone());
        workers.push(tokio::spawn(async move {
            // Sleeps until a host allows a send; None when nothing is left to do.
            while let Some(lease) = driver.next().await {
                let lease = lease?;
                let outcome = match http.get(&*lease.request.url).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        // Retry-After and RateLimit headers of a 429/503 set the backoff.
                        let outcome =
                            Outcome::response(status, response.headers(), Some(unix_now()));
                        let base = response.url().clone();
                        let body = response.text().await.unwrap_or_default();
                        for link in links(&base, &body, &seed) {
                            driver
                                .push(Request::get(link).child_of(&lease.request))
                                .await?;
                        }
                        println!("{status} {}", lease.request.url);
                        outcome
                    }
                    Err(e) if e.is_timeout() => Outcome::error("timeout"),
                    Err(_) => Outcome::error("connection"),
                };
                driver.complete(lease.id(), outcome).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    driver.close().await?;
    Ok(())
}

/// The `href`s of a page that stay under the seed URL.
fn links(base: &Url, html: &str, seed: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| base.join(rest.split('"').next()?).ok())
        .map(|mut url| {
            url.set_fragment(None);
            url.to_string()
        })
        .filter(|url| url.starts_with(seed))
        .collect()
}
