//! End to end over real loopback HTTP: a local server with several hosts, each enforcing
//! its own rate limit (429 + Retry-After when exceeded) and recording every arrival; a
//! crawl of a few thousand linked pages through the tokio driver and polite-store-sqlite with
//! reqwest. Every page is fetched exactly once, no host ever sees more concurrency or
//! less spacing than configured, and the 429s stay few once backoff and rampup settle.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use polite_frontier_core::{Frontier, FrontierConfig, Request};
use polite_runtime_tokio::{Clock, Driver};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::{Outcome, RampupConfig, ScopeConfig, Settings};
use workspace_tests::{host_name, links};

/// Hosts, pages per host, and the server's rule: the smallest spacing between two
/// arrivals it accepts, or at most N requests in any second.
const HOSTS: [(&str, u32, Limit); 8] = [
    ("books.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("news.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("shop.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("blog.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("wiki.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("docs.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("mail.test", 300, Limit::Spacing(SERVER_SPACING)),
    ("api.test", 300, Limit::PerSecond(60)),
];

/// The client spaces sends to a site 50 ms apart; the server insists on 10 ms between
/// arrivals. The 40 ms difference absorbs scheduling jitter between a send decision and
/// the request reaching the server on a busy machine (seen: over 30 ms with both cores
/// compiling); a client that ignored the delay would send its 2 concurrent requests
/// together (arrivals well under 1 ms apart), which this still catches.
const CLIENT_SPACING: f64 = 0.050;
const SERVER_SPACING: Duration = Duration::from_millis(10);

#[derive(Clone, Copy)]
enum Limit {
    Spacing(Duration),
    PerSecond(usize),
}

#[derive(Default)]
struct HostLog {
    arrivals: Vec<Instant>,
    in_flight: u32,
    max_in_flight: u32,
    ok: HashMap<u32, u32>,
    limited: u32,
}

#[derive(Clone, Default)]
struct Server {
    hosts: Arc<Mutex<HashMap<String, HostLog>>>,
}

async fn page(State(server): State<Server>, headers: HeaderMap, Path(n): Path<u32>) -> Response {
    let host = host_name(headers.get(header::HOST).and_then(|h| h.to_str().ok()));
    let Some(&(_, pages, limit)) = HOSTS.iter().find(|(h, ..)| *h == host) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let now = Instant::now();
    let allowed = {
        let mut hosts = server.hosts.lock().unwrap();
        let log = hosts.entry(host.clone()).or_default();
        log.in_flight += 1;
        log.max_in_flight = log.max_in_flight.max(log.in_flight);
        let allowed = match limit {
            Limit::Spacing(min) => log.arrivals.last().is_none_or(|&last| now - last >= min),
            Limit::PerSecond(n) => {
                log.arrivals
                    .iter()
                    .rev()
                    .take_while(|&&t| now - t < Duration::from_secs(1))
                    .count()
                    < n
            }
        };
        log.arrivals.push(now);
        allowed
    };
    // Some work, then the page with links to others on the same host.
    tokio::time::sleep(Duration::from_millis(3)).await;
    let mut hosts = server.hosts.lock().unwrap();
    let log = hosts.get_mut(&host).unwrap();
    log.in_flight -= 1;
    if !allowed {
        log.limited += 1;
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "slow down",
        )
            .into_response();
    }
    *log.ok.entry(n).or_default() += 1;
    let links: String = [n * 2 + 1, n * 2 + 2, (n * 7 + 3) % pages, n + 1]
        .iter()
        .filter(|&&l| l < pages)
        .map(|l| format!("<a href=\"/page/{l}\">{l}</a> "))
        .collect();
    (
        [(header::CONTENT_TYPE, "text/html")],
        format!("<html><body>{links}</body></html>"),
    )
        .into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polite_crawl_over_loopback() {
    let server = Server::default();
    let app = axum::Router::new()
        .route("/page/{n}", axum::routing::get(page))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(10));
    for (host, ..) in HOSTS {
        client = client.resolve(host, addr);
    }
    let client = client.build().unwrap();

    // Client side: 50 ms between sends and 2 at a time for the sites; the API starts at
    // 20 requests a second and ramps up (1 s windows for the test).
    let mut settings = Settings::default().without_jitter();
    settings.concurrent_requests = 16;
    settings.backoff_window = 1.0;
    settings.backoff_min_delay = 0.05;
    for (host, ..) in &HOSTS[..7] {
        settings = settings.with_scope(
            format!("{host}:{}", addr.port()),
            ScopeConfig::new().delay(CLIENT_SPACING).concurrency(2),
        );
    }
    settings = settings.with_scope(
        format!("api.test:{}", addr.port()),
        ScopeConfig::new()
            .delay(0.05)
            .max_concurrency(2)
            .rampup(RampupConfig::default().min_delay(0.005)),
    );
    let dir = tempfile::tempdir().unwrap();
    let store =
        SqliteStore::open(dir.path().join("crawl.sqlite3"), SqliteOptions::default()).unwrap();
    let clock = Clock::wall();
    let frontier = Frontier::open(settings, FrontierConfig::default(), store, clock.now()).unwrap();
    let driver = Driver::new(frontier, clock);
    for (host, ..) in HOSTS {
        let start = format!("http://{host}:{}/page/0", addr.port());
        driver
            .push(Request::get(start).callback("parse").start())
            .await
            .unwrap();
    }

    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (driver, client) = (driver.clone(), client.clone());
        workers.push(tokio::spawn(async move {
            while let Some(lease) = driver.next().await {
                let lease = lease.unwrap();
                let url = lease.request.url.to_string();
                let response = client.get(&url).send().await;
                let response = match response {
                    Ok(r) => r,
                    Err(e) => {
                        driver
                            .retry(lease.id(), Outcome::error("connection"), -1)
                            .await
                            .unwrap();
                        eprintln!("retrying {url}: {e}");
                        continue;
                    }
                };
                let status = response.status().as_u16();
                let headers: Vec<(String, String)> = response
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect();
                let outcome = Outcome::response(
                    status,
                    headers.iter().map(|(k, v)| (k, v)),
                    Some(polite_runtime_tokio::unix_now()),
                );
                if status == 429 {
                    driver.retry(lease.id(), outcome, 0).await.unwrap();
                    continue;
                }
                let body = response.text().await.unwrap();
                let base = url.rsplit_once("/page/").unwrap().0.to_string();
                let children: Vec<Request> = links(&body)
                    .into_iter()
                    .map(|l| {
                        Request::get(format!("{base}{l}"))
                            .callback("parse")
                            .child_of(&lease.request)
                    })
                    .collect();
                driver.push_all(children).await.unwrap();
                driver.complete(lease.id(), outcome).await.unwrap();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed();

    let hosts = server.hosts.lock().unwrap();
    let mut total_ok = 0;
    let mut total_limited = 0;
    for (host, pages, limit) in HOSTS {
        let log = &hosts[host];
        // Every page reachable from page 0 was fetched exactly once.
        assert_eq!(log.ok.len() as u32, pages, "{host}: pages fetched");
        assert!(
            log.ok.values().all(|&c| c == 1),
            "{host}: a page was fetched twice"
        );
        total_ok += log.ok.len();
        total_limited += log.limited;
        if let Limit::Spacing(_) = limit {
            // Configured: 2 at a time, 50 ms apart.
            assert!(
                log.max_in_flight <= 2,
                "{host}: {} at once",
                log.max_in_flight
            );
            let closest = log.arrivals.windows(2).map(|w| w[1] - w[0]).min().unwrap();
            assert!(
                closest >= SERVER_SPACING,
                "{host}: arrivals {closest:?} apart"
            );
            assert_eq!(log.limited, 0, "{host}: never rate-limited");
        } else {
            assert!(
                log.max_in_flight <= 2,
                "{host}: {} at once",
                log.max_in_flight
            );
        }
        eprintln!(
            "{host}: {} pages, {} x 429, max {} in flight",
            log.ok.len(),
            log.limited,
            log.max_in_flight
        );
    }
    // The API's 429s: rampup probes the limit (about one per 1 s window) and backoff
    // answers; they stay a small share of the crawl.
    let api = &hosts["api.test"];
    assert!(
        f64::from(api.limited) <= 0.1 * api.ok.len() as f64,
        "api.test: {} rate-limited responses for {} pages",
        api.limited,
        api.ok.len()
    );
    eprintln!("{total_ok} pages, {total_limited} rate-limited responses in {elapsed:.1?}");
}
