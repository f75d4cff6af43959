//! A worker of the Redis fleet test: opens the shared crawl in Redis and crawls the local
//! sites with a few tasks through the tokio driver, until the crawl is done everywhere.
//!
//!     redis-worker REDIS_URL CRAWL HTTP_PORT TASKS
//!
//! Output lines (flushed): `L url` when a lease is taken, before the request is sent;
//! `D url` after its completion was acknowledged by Redis.
#![allow(clippy::print_stdout)]

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use polite_frontier_core::Request;
use polite_runtime_tokio::{Clock, DriverFor};
use polite_store_redis::{RedisConfig, RedisFrontier, TimeSource};
use polite_throttle_core::Outcome;
use workspace_tests::{FLEET_SITES, fleet_settings, links};

fn say(tag: &str, url: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{tag} {url}");
    let _ = out.flush();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, redis_url, crawl, port, tasks] = &args[..] else {
        return Err("usage: redis-worker REDIS_URL CRAWL HTTP_PORT TASKS".into());
    };
    let port: u16 = port.parse()?;
    let tasks: usize = tasks.parse()?;
    let config = RedisConfig::default()
        .time(TimeSource::Server)
        .lease_timeout(Duration::from_secs(3))
        .recheck(Duration::from_millis(50));
    let frontier = RedisFrontier::open(redis_url, crawl, fleet_settings(port), config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let driver = DriverFor::new(frontier, Clock::wall());
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut client = reqwest::Client::builder().timeout(Duration::from_secs(10));
        for (host, _) in FLEET_SITES {
            client = client.resolve(host, addr);
        }
        let client = client.build()?;
        let mut workers = Vec::new();
        for _ in 0..tasks {
            let (driver, client) = (driver.clone(), client.clone());
            workers.push(tokio::spawn(async move {
                while let Some(lease) = driver.next().await {
                    let lease = lease?;
                    let url = lease.request.url.to_string();
                    say("L", &url);
                    let response = match client.get(&url).send().await {
                        Ok(r) => r,
                        Err(_) => {
                            driver
                                .retry(lease.id(), Outcome::error("connection"), 0)
                                .await?;
                            continue;
                        }
                    };
                    let status = response.status().as_u16();
                    let outcome = Outcome::status(status);
                    if status != 200 {
                        driver.retry(lease.id(), outcome, 0).await?;
                        continue;
                    }
                    let body = response.text().await.unwrap_or_default();
                    let base = url.rsplit_once("/page/").map(|(b, _)| b.to_string());
                    let children: Vec<Request> = base
                        .map(|base| {
                            links(&body)
                                .into_iter()
                                .map(|l| {
                                    Request::get(format!("{base}/page/{l}"))
                                        .child_of(&lease.request)
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    // Children first: the crawl is never seen empty while this page's
                    // links are still on their way.
                    driver.push_all(children).await?;
                    if driver.complete(lease.id(), outcome).await? {
                        say("D", &url);
                    }
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }));
        }
        for w in workers {
            w.await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
