//! One worker of a fleet: start it on as many machines as you like against the same
//! Redis and crawl name. They share one queue, one duplicate filter and one politeness
//! budget (two requests at once per host and 0.25 s apart for the whole fleet, not per
//! worker); a worker that dies loses nothing, its leases go to the others.
//!
//!     cargo run -p polite-frontier --features tokio,redis --example redis_worker -- redis://127.0.0.1/ http://127.0.0.1:8000/
#![allow(clippy::print_stdout)] // examples print what they do
use polite_frontier::redis::{RedisConfig, RedisFrontier, TimeSource};
use polite_frontier::tokio::{Clock, DriverFor, unix_now};
use polite_frontier::{Outcome, Request, Settings};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let redis = args.next().unwrap_or("redis://127.0.0.1/".into());
    let seed = args.next().unwrap_or("http://127.0.0.1:8000/".into());
    let settings = Settings::default()
        .download_delay(0.25)
        .concurrent_requests_per_domain(2);
    // Server time: the machines' clocks need not agree.
    let config = RedisConfig::default().time(TimeSource::Server);
    let frontier = RedisFrontier::open(&redis, "example-crawl", settings, config)?;
    let driver = DriverFor::new(frontier, Clock::wall());
    driver.push(Request::get(seed.as_str()).start()).await?; // a duplicate for all but the first

    let http = reqwest::Client::new();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (driver, http) = (driver.clone(), http.clone());
        workers.push(tokio::spawn(async move {
            while let Some(lease) = driver.next().await {
                let lease = lease?;
                let outcome = match http.get(&*lease.request.url).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        println!("{status} {}", lease.request.url);
                        Outcome::response(status, response.headers(), Some(unix_now()))
                    }
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
    Ok(())
}
