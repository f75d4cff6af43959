//! The decision loop on a simulated clock: three sites, one of them rate-limited, one
//! with a robots.txt Crawl-delay, and a shared cost budget.
//!
//!     cargo run -p polite-throttle-core --example decision_loop [-- --trace]
//!
//! Hours of crawl time run in milliseconds of CPU because the clock is simulated: the loop
//! jumps straight to the next instant at which something can happen (a response arrives
//! or a scope allows a send), exactly as a runtime adapter would sleep until then.
#![allow(clippy::print_stdout)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Instant;

use polite_throttle_core::{
    BackoffConfig, NotReady, Outcome, Permit, RampupConfig, ScopeConfig, ScopeUse, Settings,
    Throttler, Timestamp,
};

/// A request in the simulation: a page on a site, maybe charged to the cost budget.
#[derive(Clone, Debug)]
struct Request {
    site: &'static str,
    page: u32,
    cost: Option<f64>,
}

/// The simulated server behind one site.
struct Site {
    latency: f64,
    /// At most this many requests per second; more are answered 429 + Retry-After.
    rate_limit: Option<(usize, &'static str)>,
    arrivals: VecDeque<f64>,
}

impl Site {
    fn answer(&mut self, now: f64) -> (u16, Option<&'static str>) {
        let Some((per_second, retry_after)) = self.rate_limit else {
            return (200, None);
        };
        while self.arrivals.front().is_some_and(|&t| t <= now - 1.0) {
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

struct InFlight {
    request: Request,
    permit: Permit,
    status: u16,
    retry_after: Option<&'static str>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trace = std::env::args().any(|a| a == "--trace");
    let settings = Settings::default()
        .seed(7)
        .with_scope(
            "books.example.com",
            ScopeConfig::new().delay(0.5).concurrency(2),
        )
        .with_scope(
            "api.example.com",
            ScopeConfig::new()
                .delay(1.0)
                .max_concurrency(4)
                .rampup(RampupConfig::default()),
        )
        // A budget of 40 cost units a minute. Its own backoff codes are empty: a 429 slows the
        // API host down, not the budget.
        .with_scope(
            "cost",
            ScopeConfig::new()
                .concurrency(0)
                .quota(40.0)
                .window(60.0)
                .backoff(BackoffConfig::default().http_codes(vec![])),
        );
    let mut throttler = Throttler::new(settings, Timestamp::ZERO)?;
    // As if robots.txt of slow.example.com said "Crawl-delay: 2".
    throttler.handle_crawl_delay("slow.example.com", 2.0, Timestamp::ZERO)?;

    let mut sites: BTreeMap<&str, Site> = BTreeMap::new();
    sites.insert(
        "books.example.com",
        Site {
            latency: 0.2,
            rate_limit: None,
            arrivals: VecDeque::new(),
        },
    );
    sites.insert(
        "slow.example.com",
        Site {
            latency: 1.5,
            rate_limit: None,
            arrivals: VecDeque::new(),
        },
    );
    sites.insert(
        "api.example.com",
        Site {
            latency: 0.1,
            rate_limit: Some((2, "3")),
            arrivals: VecDeque::new(),
        },
    );

    let mut pending: VecDeque<Request> = VecDeque::new();
    for page in 0..60 {
        pending.push_back(Request {
            site: "books.example.com",
            page,
            cost: None,
        });
        if page < 20 {
            pending.push_back(Request {
                site: "slow.example.com",
                page,
                cost: None,
            });
        }
        pending.push_back(Request {
            site: "api.example.com",
            page,
            cost: Some(1.0 + f64::from(page % 3)),
        });
    }
    let total = pending.len();

    let started = Instant::now();
    let mut now = Timestamp::ZERO;
    let mut in_flight: BinaryHeap<Reverse<(Timestamp, u64)>> = BinaryHeap::new();
    let mut flights: BTreeMap<u64, InFlight> = BTreeMap::new();
    let mut next_id = 0u64;
    let (mut done, mut limited, mut decisions) = (0usize, 0usize, 0u64);

    println!("Crawling {total} pages on a simulated clock...\n");
    loop {
        // 1. Deliver the responses due now; a 429 puts its request back in the queue.
        while let Some(&Reverse((at, id))) = in_flight.peek() {
            if at > now {
                break;
            }
            in_flight.pop();
            let f = flights.remove(&id).expect("in flight");
            let outcome = match f.retry_after {
                Some(secs) => Outcome::response(f.status, [("Retry-After", secs)], None),
                None => Outcome::status(f.status),
            };
            throttler.release(f.permit, &outcome, now);
            if f.status == 429 {
                limited += 1;
                if trace || limited <= 5 {
                    println!(
                        "{:>9}  429 {}/page/{} (Retry-After {}s)",
                        now,
                        f.request.site,
                        f.request.page,
                        f.retry_after.unwrap_or("-")
                    );
                }
                pending.push_back(f.request);
            } else {
                done += 1;
                if trace {
                    println!("{:>9}  200 {}/page/{}", now, f.request.site, f.request.page);
                }
            }
        }
        if pending.is_empty() && in_flight.is_empty() {
            break;
        }
        // 2. Send every request its scopes allow now; remember the earliest other time.
        let mut wake: Option<Timestamp> = None;
        let mut still_pending = VecDeque::with_capacity(pending.len());
        while let Some(request) = pending.pop_front() {
            let mut uses = vec![ScopeUse::new(request.site)];
            if let Some(cost) = request.cost {
                uses.push(ScopeUse::with_amount("cost", cost));
            }
            decisions += 1;
            match throttler.try_acquire(&uses, now) {
                Ok(permit) => {
                    let site = sites.get_mut(request.site).expect("known site");
                    let (status, retry_after) = site.answer(now.as_secs_f64());
                    let at = now + std::time::Duration::from_secs_f64(site.latency);
                    if trace {
                        println!("{now:>9}  send {}/page/{}", request.site, request.page);
                    }
                    flights.insert(
                        next_id,
                        InFlight {
                            request,
                            permit,
                            status,
                            retry_after,
                        },
                    );
                    in_flight.push(Reverse((at, next_id)));
                    next_id += 1;
                }
                Err(NotReady::NotUntil(t)) => {
                    wake = Some(wake.map_or(t, |w| w.min(t)));
                    still_pending.push_back(request);
                }
                Err(NotReady::Blocked) => still_pending.push_back(request),
            }
        }
        pending = still_pending;
        // 3. Jump to the next instant that matters.
        let next_response = in_flight.peek().map(|Reverse((at, _))| *at);
        now = match (wake, next_response) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
    }
    let cpu = started.elapsed();

    println!("\n{done} pages fetched, {limited} rate-limited responses retried.");
    println!(
        "Simulated crawl time {now} in {:.1} ms of CPU ({decisions} admission decisions).\n",
        cpu.as_secs_f64() * 1e3
    );
    println!(
        "{:<20} {:>5} {:>5} {:>9} {:>7} {:>11} {:>6}",
        "scope", "sent", "429s", "delay(s)", "base(s)", "concurrency", "level"
    );
    let mut scopes: Vec<_> = throttler.scopes().map(|(n, _)| n.to_string()).collect();
    scopes.sort();
    for name in scopes {
        let s = throttler.scope_stats(&name, now).expect("live scope");
        println!(
            "{:<20} {:>5} {:>5} {:>9.3} {:>7.3} {:>11} {:>6}",
            name, s.sent, s.triggers, s.delay, s.base_delay, s.concurrency, s.level
        );
    }
    Ok(())
}
