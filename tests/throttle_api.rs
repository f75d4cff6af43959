//! The throttler's public surface, driven the way a crawler drives it: settings from a
//! file, a decision loop against simulated servers, and the answers it gives.

use std::collections::VecDeque;
use std::time::Duration;

use polite_throttle_core::{
    NotReady, Outcome, RampupConfig, ScopeConfig, ScopeUse, Settings, Throttler, Timestamp,
};

/// A server that tolerates one request per second and answers anything faster with
/// 429 and `Retry-After: 5`.
struct OnePerSecond {
    arrivals: VecDeque<Timestamp>,
}

impl OnePerSecond {
    fn answer(&mut self, now: Timestamp) -> u16 {
        while self
            .arrivals
            .front()
            .is_some_and(|&t| t + Duration::from_secs(1) <= now)
        {
            self.arrivals.pop_front();
        }
        self.arrivals.push_back(now);
        if self.arrivals.len() > 1 { 429 } else { 200 }
    }
}

#[derive(Debug, Default)]
struct Crawl {
    ok: u64,
    limited: u64,
    sent_inside_retry_after: u64,
}

/// Crawls an endless backlog on one rate-limited host for `hours` of simulated time.
fn crawl_rate_limited_host(settings: Settings, hours: u64) -> (Crawl, Throttler) {
    let mut t = Throttler::new(settings, Timestamp::ZERO).unwrap();
    let mut server = OnePerSecond {
        arrivals: VecDeque::new(),
    };
    let latency = Duration::from_millis(50);
    let end = Timestamp::from_secs(hours * 3600);
    let mut crawl = Crawl::default();
    let mut now = Timestamp::ZERO;
    let mut quiet_until = Timestamp::ZERO;
    let scope = [ScopeUse::new("api.example.com")];
    while now < end {
        match t.try_acquire(&scope, now) {
            Ok(permit) => {
                if now < quiet_until {
                    crawl.sent_inside_retry_after += 1;
                }
                let status = server.answer(now);
                now += latency;
                let outcome = if status == 429 {
                    crawl.limited += 1;
                    quiet_until = quiet_until.max(now + Duration::from_secs(5));
                    Outcome::response(429, [("Retry-After", "5")], None)
                } else {
                    crawl.ok += 1;
                    Outcome::status(200)
                };
                assert!(t.release(permit, &outcome, now));
            }
            Err(NotReady::NotUntil(at)) => {
                assert!(at > now, "a wait must lie in the future");
                now = at;
            }
            Err(NotReady::Blocked) => panic!("nothing is in flight, so nothing can block"),
        }
    }
    (crawl, t)
}

#[test]
fn rampup_finds_the_rate_a_server_tolerates() {
    let settings = Settings::default().with_scope(
        "api.example.com",
        ScopeConfig::new()
            .delay(8.0)
            .max_concurrency(4)
            .rampup(RampupConfig::default().min_delay(0.05)),
    );
    let (crawl, mut t) = crawl_rate_limited_host(settings, 2);
    let stats = t
        .scope_stats("api.example.com", Timestamp::from_secs(7200))
        .unwrap();
    eprintln!("{crawl:?} {stats:?}");
    assert_eq!(
        crawl.sent_inside_retry_after, 0,
        "Retry-After was not honoured"
    );
    // The server allows at most 7,200 requests in two hours. Starting from one request
    // every 8 s (900 in two hours), rampup must find most of that rate...
    assert!(crawl.ok >= 5_000, "only {} pages in two hours", crawl.ok);
    // ...while settling near the target of one 429 per 60 s window (120 windows: the
    // first 429 of a window holds the rate, a second one backs off), not hammering.
    assert!(
        crawl.limited <= 300,
        "{} rate-limited responses",
        crawl.limited
    );
    assert!(crawl.limited >= 20, "rampup never probed the limit");
}

#[test]
fn without_rampup_backoff_alone_stays_polite_but_slow() {
    // A fixed delay that is too aggressive: every other request is rate-limited until
    // backoff slows the host down, and recovery brings it back to the same mistake.
    let settings = Settings::default().with_scope(
        "api.example.com",
        ScopeConfig::new().delay(0.5).concurrency(1),
    );
    let (crawl, _) = crawl_rate_limited_host(settings, 1);
    eprintln!("{crawl:?}");
    assert_eq!(crawl.sent_inside_retry_after, 0);
    assert!(crawl.limited > 0);
    assert!(crawl.ok + crawl.limited < 7_200, "more sends than seconds");
}

#[test]
fn settings_files_are_checked_key_by_key() {
    let good = r#"{
        "concurrent_requests": 32,
        "download_delay": 0.25,
        "scopes": {"api.example.com": {"rampup": {"backoff_target": [1, 3]}, "max_concurrency": 8}}
    }"#;
    let settings: Settings = serde_json::from_str(good).unwrap();
    Throttler::new(settings, Timestamp::ZERO).unwrap();

    let unknown = serde_json::from_str::<Settings>(r#"{"concurent_requests": 32}"#).unwrap_err();
    assert!(
        unknown.to_string().contains("concurent_requests"),
        "{unknown}"
    );

    let invalid: Settings = serde_json::from_str(r#"{"scopes": {"cost": {"quota": -1}}}"#).unwrap();
    let err = Throttler::new(invalid, Timestamp::ZERO).unwrap_err();
    assert_eq!(err.key(), "scopes.\"cost\".quota");
    assert!(err.to_string().contains("positive"), "{err}");
}
