//! A whole crawl through the frontier on a simulated clock: four sites of linked pages,
//! one rate-limited (429 + Retry-After), one with a robots.txt Crawl-delay, one slow,
//! one API behind a cost budget. Pages link to each other, so the frontier sees
//! duplicates, depth and priorities like a real crawl.
//!
//!     cargo run --release -p polite-frontier-core --example simulated_crawl [-- --trace]
//!
//! The loop is the one a runtime adapter runs: poll; send what is ready; when nothing
//! is, jump to the next instant something can happen (a response or the frontier's
//! `poll_timeout`). Hours of crawl run in a moment of CPU.
#![allow(clippy::print_stdout)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use polite_frontier_core::{Frontier, FrontierConfig, Poll, Request, RequestId, VolatileStore};
use polite_throttle_core::{
    BackoffConfig, Outcome, RampupConfig, ScopeConfig, Settings, Timestamp,
};

/// A simulated site: pages `0..pages`, each linking to a few others.
struct Site {
    host: &'static str,
    pages: u64,
    latency: Duration,
    /// At most this many requests per second; more get 429 + Retry-After.
    limit: Option<(usize, &'static str)>,
    crawl_delay: Option<f64>,
    arrivals: VecDeque<Timestamp>,
}

impl Site {
    fn url(&self, page: u64) -> String {
        format!("https://{}/page/{page}", self.host)
    }

    /// Pages linked from `page`: a few neighbours and a far one (so links repeat).
    fn links(&self, page: u64) -> Vec<u64> {
        let n = self.pages;
        [page + 1, page * 2 + 1, page * 7 + 3, (page * 31 + 17) % n]
            .into_iter()
            .map(|p| p % n)
            .collect()
    }

    fn answer(&mut self, now: Timestamp) -> (u16, Option<&'static str>) {
        let Some((per_second, retry_after)) = self.limit else {
            return (200, None);
        };
        while self
            .arrivals
            .front()
            .is_some_and(|&t| t + Duration::from_secs(1) <= now)
        {
            self.arrivals.pop_front();
        }
        self.arrivals.push_back(now);
        if self.arrivals.len() > per_second {
            (429, Some(retry_after))
        } else {
            (200, None)
        }
    }
}

fn site_of(url: &str) -> usize {
    [
        "books.example",
        "news.example",
        "slow.example",
        "api.example",
    ]
    .iter()
    .position(|h| url.contains(h))
    .expect("a known site")
}

fn page_of(url: &str) -> u64 {
    url.rsplit('/')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

struct Flight {
    lease: RequestId,
    request: Request,
    status: u16,
    retry_after: Option<&'static str>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trace = std::env::args().any(|a| a == "--trace");
    let mut settings = Settings::default()
        .seed(1)
        .with_scope(
            "books.example",
            ScopeConfig::new().concurrency(4).delay(0.25),
        )
        .with_scope(
            "news.example",
            ScopeConfig::new()
                .delay(2.0)
                .max_concurrency(4)
                .rampup(RampupConfig::default()),
        )
        .with_scope("api.example", ScopeConfig::new().concurrency(2).delay(0.1))
        .with_scope(
            "cost",
            ScopeConfig::new()
                .concurrency(0)
                .quota(60.0)
                .window(60.0)
                .backoff(BackoffConfig::default().http_codes(vec![])),
        );
    settings.concurrent_requests = 12;

    let mut sites = vec![
        Site {
            host: "books.example",
            pages: 400,
            latency: Duration::from_millis(120),
            limit: None,
            crawl_delay: None,
            arrivals: VecDeque::new(),
        },
        Site {
            host: "news.example",
            pages: 300,
            latency: Duration::from_millis(80),
            limit: Some((2, "5")),
            crawl_delay: None,
            arrivals: VecDeque::new(),
        },
        Site {
            host: "slow.example",
            pages: 60,
            latency: Duration::from_millis(2500),
            limit: None,
            crawl_delay: Some(3.0),
            arrivals: VecDeque::new(),
        },
        Site {
            host: "api.example",
            pages: 200,
            latency: Duration::from_millis(50),
            limit: None,
            crawl_delay: None,
            arrivals: VecDeque::new(),
        },
    ];

    let mut now = Timestamp::ZERO;
    let config = FrontierConfig::default().depth_limit(6);
    let mut frontier = Frontier::open(settings, config, VolatileStore::new(), now)?;
    for site in &sites {
        if let Some(d) = site.crawl_delay {
            let decision = frontier.handle_crawl_delay(site.host, d, now)?;
            println!(
                "robots.txt of {}: Crawl-delay {d} -> {decision:?}",
                site.host
            );
        }
    }
    // Start requests: the home page of each site; API pages cost 1-3 budget units.
    for site in &sites {
        let mut start = Request::get(site.url(0)).callback("parse").start();
        if site.host == "api.example" {
            start = start.scope("api.example").scope_amount("cost", 2.0);
        }
        frontier.push(&start, now)?;
    }

    let started = Instant::now();
    let mut flights: BinaryHeap<Reverse<(Timestamp, u64)>> = BinaryHeap::new();
    let mut in_air: BTreeMap<u64, Flight> = BTreeMap::new();
    let mut next = 0u64;
    let (mut fetched, mut limited) = (0u64, 0u64);
    let mut per_site = [0u64; 4];
    let mut last_report = Timestamp::ZERO;
    loop {
        // Responses due now: complete (or retry) them and push the links they contain.
        while let Some(&Reverse((at, id))) = flights.peek() {
            if at > now {
                break;
            }
            flights.pop();
            let f = in_air.remove(&id).expect("in flight");
            let outcome = match f.retry_after {
                Some(secs) => Outcome::response(f.status, [("Retry-After", secs)], None),
                None => Outcome::status(f.status),
            };
            if f.status == 429 {
                limited += 1;
                frontier.retry(f.lease, &outcome, -1, now)?;
                continue;
            }
            frontier.complete(f.lease, &outcome, now)?;
            fetched += 1;
            let s = site_of(&f.request.url);
            per_site[s] += 1;
            if trace {
                println!("{now:>10}  200  {}", f.request.url);
            }
            for (i, link) in sites[s]
                .links(page_of(&f.request.url))
                .into_iter()
                .enumerate()
            {
                let mut child = Request::get(sites[s].url(link))
                    .callback(if i == 0 { "parse" } else { "parse_item" })
                    .child_of(&f.request);
                if sites[s].host == "api.example" {
                    child = child
                        .scope("api.example")
                        .scope_amount("cost", 1.0 + (link % 3) as f64);
                }
                frontier.push(&child, now)?;
            }
        }
        // Send everything that may go now.
        let wait = loop {
            match frontier.poll(now)? {
                Poll::Ready(lease) => {
                    let s = site_of(&lease.request.url);
                    let (status, retry_after) = sites[s].answer(now);
                    if trace {
                        println!("{now:>10}  send {}", lease.request.url);
                    }
                    flights.push(Reverse((now + sites[s].latency, next)));
                    in_air.insert(
                        next,
                        Flight {
                            lease: lease.id(),
                            request: lease.request,
                            status,
                            retry_after,
                        },
                    );
                    next += 1;
                }
                other => break other,
            }
        };
        if now.saturating_duration_since(last_report) >= Duration::from_secs(60) {
            last_report = now;
            println!(
                "{now:>10}  fetched {fetched:>5}  queued {:>5}  in flight {:>2}  429s {limited}",
                frontier.len(),
                frontier.in_flight()
            );
        }
        // Jump to the next instant that matters.
        let next_response = flights.peek().map(|Reverse((t, _))| *t);
        let next_send = match wait {
            Poll::NotUntil(t) => Some(t),
            Poll::Empty if next_response.is_none() => break,
            _ => frontier.poll_timeout(),
        };
        now = match (next_response, next_send) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
    }

    let stats = frontier.stats();
    println!(
        "\n{fetched} pages in {now} of simulated crawl, {:.0} ms of CPU; {limited} rate-limited responses retried.",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "duplicates dropped {}, too deep {}, deepest {}, redelivered {}\n",
        stats.filtered, stats.depth_ignored, stats.depth_max, stats.redelivered
    );
    println!(
        "{:<16} {:>6} {:>6} {:>9} {:>9} {:>12} {:>6}",
        "scope", "pages", "sent", "429s", "delay(s)", "concurrency", "level"
    );
    let throttler = frontier.throttler();
    for (i, site) in sites.iter().enumerate() {
        let s = throttler.snapshot(site.host).expect("scope in memory");
        let limit = throttler.scope_settings(site.host);
        println!(
            "{:<16} {:>6} {:>6} {:>9} {:>9.2} {:>12} {:>6}",
            site.host, per_site[i], s.sent, s.triggers, s.delay, limit.concurrency, s.level
        );
    }
    Ok(())
}
