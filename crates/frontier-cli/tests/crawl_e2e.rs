//! `frontier crawl` end to end against a local web: a rate-limited API (429 +
//! Retry-After beyond 40 requests a second), a host whose robots.txt disallows an area and
//! sets a Crawl-delay, a host whose links redirect, and a plain host with a configured
//! delay and concurrency. The server's log is the judge: what it saw, not what the
//! crawler says it did.

use std::collections::HashMap;
use std::time::Duration;

use polite_frontier_cli::config::Config;
use polite_frontier_cli::crawl::{CrawlOptions, StopReason, Stopper, crawl};
use polite_frontier_cli::progress::ProgressMode;
use polite_frontier_cli::sites::{DemoWeb, RateLimit, Site};
use polite_frontier_cli::stores::StoreKind;
use polite_throttle_core::{RampupConfig, ScopeConfig};

const API_LIMIT: u32 = 40;

fn sites() -> Vec<Site> {
    vec![
        Site {
            links: 3,
            ..Site::new("books.test", 150)
        },
        Site {
            crawl_delay: Some(0.05),
            private: true,
            ..Site::new("news.test", 100)
        },
        Site {
            redirects: true,
            ..Site::new("shop.test", 100)
        },
        Site {
            limit: Some(RateLimit {
                per_second: API_LIMIT,
                retry_after: Some(1),
            }),
            links: 3,
            ..Site::new("api.test", 700)
        },
    ]
}

fn config() -> Config {
    let mut config = Config::default();
    let s = &mut config.settings;
    s.concurrent_requests = 16;
    s.randomize_download_delay = polite_throttle_core::Jitter::NONE;
    // Rampup windows of 5 s so the test settles in seconds, not minutes.
    s.backoff_window = 5.0;
    s.backoff_min_delay = 0.03;
    s.backoff_max_delay = 5.0;
    s.scopes.insert(
        "books.test".into(),
        ScopeConfig::new().delay(0.05).concurrency(2),
    );
    s.scopes.insert(
        "api.test".into(),
        ScopeConfig::new()
            .delay(0.04)
            .max_concurrency(4)
            .rampup(RampupConfig::default().delay_factor(0.7).min_delay(0.005)),
    );
    config.crawl.download_timeout = 10.0;
    config
}

#[derive(Debug, serde::Deserialize)]
struct Line {
    url: String,
    status: Option<u16>,
    error: Option<String>,
    depth: u32,
}

fn read_lines(path: &std::path::Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polite_crawl_of_a_rate_limited_web() {
    let web = DemoWeb::start(sites()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pages.jsonl");
    let options = CrawlOptions {
        seeds: web.seeds(),
        allow_domains: vec![
            "books.test".into(),
            "news.test".into(),
            "shop.test".into(),
            "api.test".into(),
        ],
        max_pages: None,
        config: config(),
        store: dir.path().join("crawl.sqlite"),
        store_kind: Some(StoreKind::Sqlite),
        out: Some(out.clone()),
        resolve: web.resolve(),
        progress: ProgressMode::Quiet,
        ..CrawlOptions::default()
    };
    let started = std::time::Instant::now();
    let summary = crawl(options, Stopper::default()).await.unwrap();
    eprintln!("crawl took {:.1?}", started.elapsed());
    assert_eq!(summary.stop, StopReason::Finished);
    assert_eq!(summary.left, 0);

    // Every allowed page ends with 200 exactly once in the output; disallowed ones are
    // reported, never fetched.
    let lines = read_lines(&out);
    let mut ok: HashMap<&str, u32> = HashMap::new();
    for line in &lines {
        if line.status == Some(200) {
            *ok.entry(line.url.as_str()).or_default() += 1;
        }
    }
    let log = web.log();
    for site in web.sites() {
        for n in 0..site.pages {
            let url = format!("http://{}/page/{n}", site.host);
            assert_eq!(
                ok.get(url.as_str()),
                Some(&1),
                "{url} must end with 200 exactly once"
            );
        }
        let host = &log.hosts[&site.host];
        let private = host
            .arrivals
            .iter()
            .filter(|a| a.path.starts_with("/private/"))
            .count();
        assert_eq!(private, 0, "{}: robots.txt disallows /private/", site.host);
        assert!(
            host.hits("/robots.txt") <= 1,
            "{}: robots.txt fetched once",
            site.host
        );
    }
    let disallowed = lines
        .iter()
        .filter(|l| l.error.as_deref() == Some("disallowed by robots.txt"))
        .count();
    assert_eq!(
        disallowed, 100,
        "every /private/ link of news.test is reported"
    );
    assert!(
        lines.iter().any(|l| l.depth > 5),
        "links were followed deep"
    );

    // Redirects: each /old/N hop was its own request, and its target was fetched once.
    let shop = &log.hosts["shop.test"];
    assert!(
        shop.count(301) >= 40,
        "shop.test redirected {} times",
        shop.count(301)
    );
    for n in 0..100 {
        assert_eq!(shop.hits(&format!("/page/{n}")), 1, "shop.test /page/{n}");
    }

    // Politeness as the server saw it.
    let books = &log.hosts["books.test"];
    assert!(
        books.max_in_flight <= 2,
        "books.test: {} at once",
        books.max_in_flight
    );
    let gap = books.min_spacing().unwrap();
    assert!(
        gap >= Duration::from_millis(25),
        "books.test: arrivals {gap:?} apart (delay 50 ms)"
    );
    let news = &log.hosts["news.test"];
    assert_eq!(news.max_in_flight, 1, "Crawl-delay caps concurrency at 1");
    // The robots.txt fetch itself precedes the Crawl-delay; pages after it keep it.
    let pages: Vec<_> = news
        .arrivals
        .iter()
        .filter(|a| a.path != "/robots.txt")
        .collect();
    let gap = pages.windows(2).map(|w| w[1].at - w[0].at).min().unwrap();
    assert!(
        gap >= Duration::from_millis(30),
        "news.test: pages {gap:?} apart (Crawl-delay 50 ms)"
    );

    // Rampup on the API: after settling, within 2x of the server's limit, and 429s
    // under 10% of its requests.
    let api = &log.hosts["api.test"];
    let limited = api.count(429);
    let total = api.arrivals.len();
    eprintln!(
        "api.test: {total} requests, {limited} x 429, max {} at once",
        api.max_in_flight
    );
    assert!(
        (limited as f64) < 0.1 * total as f64,
        "api.test: {limited} x 429 of {total}"
    );
    let first = api.arrivals.first().unwrap().at;
    if std::env::var_os("API_TRACE").is_some() {
        let mut buckets = std::collections::BTreeMap::<u64, (u32, u32)>::new();
        for a in &api.arrivals {
            let b = buckets.entry((a.at - first).as_secs()).or_default();
            if a.status == 429 { b.1 += 1 } else { b.0 += 1 }
        }
        eprintln!("api.test per second (ok, 429): {buckets:?}");
    }
    let last = api.arrivals.last().unwrap().at;
    // The settled rate: the middle half of the API's crawl, after the ramp from the
    // configured start rate and before the queue drains at the end.
    let span = last - first;
    let (from, to) = (first + span / 4, first + span * 3 / 4);
    let settled = api
        .arrivals
        .iter()
        .filter(|a| a.at >= from && a.at < to && a.status == 200)
        .count();
    let rate = settled as f64 / (to - from).as_secs_f64();
    eprintln!("api.test: {rate:.1} pages/s in the middle half of its crawl (limit {API_LIMIT}/s)");
    assert!(
        rate >= f64::from(API_LIMIT) / 2.0,
        "api.test settled at {rate:.1}/s, more than 2x below the limit of {API_LIMIT}/s"
    );
}
