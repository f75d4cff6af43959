//! Standalone permits: processes without a queue (API clients) sharing the crawl's
//! politeness budget through `RedisFrontier::try_acquire` / `release`. Each handle stands
//! for one process; they share one Redis server and one crawl name.

use std::time::Duration;

use polite_frontier_core::{Poll, Request};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{RedisConfig, RedisFrontier, RedisPermit, TimeSource};
use polite_throttle_core::{NotReady, Outcome, ScopeConfig, ScopeUse, Settings, Timestamp};

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn ms(m: u64) -> Timestamp {
    Timestamp::from_nanos(m * 1_000_000)
}

fn open(
    server: &RedisServer,
    crawl: &str,
    settings: &Settings,
    config: &RedisConfig,
) -> RedisFrontier {
    RedisFrontier::open(&server.url(), crawl, settings.clone(), config.clone()).unwrap()
}

/// Two handles ("processes") on one crawl.
fn pair(
    server: &RedisServer,
    crawl: &str,
    settings: Settings,
    config: RedisConfig,
) -> (RedisFrontier, RedisFrontier) {
    (
        open(server, crawl, &settings, &config),
        open(server, crawl, &settings, &config),
    )
}

fn acquire(f: &mut RedisFrontier, scope: &str, now: Timestamp) -> Result<RedisPermit, NotReady> {
    f.try_acquire(&[ScopeUse::new(scope)], now).unwrap()
}

#[test]
fn spacing_and_concurrency_hold_across_processes() {
    let Some(server) = RedisServer::start_or_skip("permits_spacing") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope(
            "api.example.com",
            ScopeConfig::new().delay(2.0).concurrency(2),
        )
        .with_scope(
            "one.example.com",
            ScopeConfig::new().delay(1.0).concurrency(1),
        );
    let (mut a, mut b) = pair(&server, "sp", settings, RedisConfig::default());

    // Spacing: b waits for the delay after a's send.
    let p1 = acquire(&mut a, "api.example.com", t(0)).unwrap();
    assert_eq!(
        acquire(&mut b, "api.example.com", t(0)),
        Err(NotReady::NotUntil(t(2)))
    );
    assert_eq!(
        acquire(&mut b, "api.example.com", ms(1500)),
        Err(NotReady::NotUntil(t(2)))
    );
    let p2 = acquire(&mut b, "api.example.com", t(2)).unwrap();
    assert_ne!(p1, p2);
    // Released by the other process.
    assert!(b.release(p1, &Outcome::status(200), t(3)).unwrap());
    assert_eq!(
        acquire(&mut a, "api.example.com", t(3)),
        Err(NotReady::NotUntil(t(4)))
    );
    let p3 = acquire(&mut a, "api.example.com", t(4)).unwrap();
    // Concurrency 2: both slots taken, a third send waits for a release.
    assert_eq!(
        acquire(&mut b, "api.example.com", t(6)),
        Err(NotReady::Blocked)
    );
    let s = a.scope_stats("api.example.com", t(6)).unwrap().unwrap();
    assert_eq!((s.active, s.sent, s.done), (2, 3, 1));
    assert!(b.release(p2, &Outcome::status(200), t(6)).unwrap());
    let p4 = acquire(&mut b, "api.example.com", t(6)).unwrap();

    // Concurrency 1: the slot taken by a blocks b until a releases it.
    let q = acquire(&mut a, "one.example.com", t(10)).unwrap();
    assert_eq!(
        acquire(&mut b, "one.example.com", t(20)),
        Err(NotReady::Blocked)
    );
    assert!(a.release(q, &Outcome::status(200), t(20)).unwrap());
    let q2 = acquire(&mut b, "one.example.com", t(20)).unwrap();
    assert_eq!(
        acquire(&mut a, "one.example.com", t(30)),
        Err(NotReady::Blocked)
    );

    assert!(b.release(p3, &Outcome::status(200), t(30)).unwrap());
    assert!(a.release(p4, &Outcome::status(200), t(30)).unwrap());
    assert!(a.release(q2, &Outcome::status(200), t(30)).unwrap());
    let info = a.info().unwrap();
    assert_eq!((info.permits, info.in_flight, info.leased), (0, 0, 0));
    assert_eq!(a.in_flight(), 0);
}

#[test]
fn a_429_with_retry_after_released_by_one_holds_the_other() {
    let Some(server) = RedisServer::start_or_skip("permits_429") else {
        return;
    };
    let settings = Settings::default().without_jitter().with_scope(
        "api.example.com",
        ScopeConfig::new().delay(0.5).concurrency(4),
    );
    let (mut a, mut b) = pair(&server, "ra", settings, RedisConfig::default());
    let p = acquire(&mut a, "api.example.com", t(0)).unwrap();
    let limited = Outcome::response(429, [("Retry-After", "30")], None);
    assert!(a.release(p, &limited, t(1)).unwrap());
    assert_eq!(
        acquire(&mut b, "api.example.com", t(2)),
        Err(NotReady::NotUntil(t(31)))
    );
    let s = b.scope_stats("api.example.com", t(2)).unwrap().unwrap();
    assert_eq!((s.level, s.triggers, s.hard_until), (1, 1, t(31)));
    let p = acquire(&mut b, "api.example.com", t(31)).unwrap();
    assert!(b.release(p, &Outcome::status(200), t(31)).unwrap());
}

#[test]
fn a_spent_budget_holds_the_scope_without_backoff() {
    let Some(server) = RedisServer::start_or_skip("permits_budget") else {
        return;
    };
    let settings = Settings::default().without_jitter().with_scope(
        "api.example.com",
        ScopeConfig::new().delay(0.0).concurrency(0),
    );
    let (mut a, mut b) = pair(&server, "bu", settings, RedisConfig::default());
    let p = acquire(&mut a, "api.example.com", t(0)).unwrap();
    // Other requests went meanwhile: nothing holds them.
    let other = acquire(&mut b, "api.example.com", t(0)).unwrap();
    let spent = Outcome::response(
        200,
        [("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "10")],
        None,
    );
    assert!(a.release(p, &spent, t(1)).unwrap());
    assert_eq!(
        acquire(&mut b, "api.example.com", t(2)),
        Err(NotReady::NotUntil(t(11)))
    );
    let s = b.scope_stats("api.example.com", t(2)).unwrap().unwrap();
    assert_eq!((s.level, s.triggers, s.hard_until), (0, 0, t(11)));
    assert!(b.release(other, &Outcome::status(200), t(3)).unwrap());
    assert!(acquire(&mut a, "api.example.com", t(11)).is_ok());
}

#[test]
fn an_unreleased_permit_expires_and_frees_its_slot() {
    let Some(server) = RedisServer::start_or_skip("permits_expiry") else {
        return;
    };
    let settings = Settings::default().without_jitter().with_scope(
        "api.example.com",
        ScopeConfig::new().delay(0.0).concurrency(1),
    );
    let config = RedisConfig::default().lease_timeout(Duration::from_secs(10));
    let (mut a, mut b) = pair(&server, "ex", settings, config);
    let dead = acquire(&mut a, "api.example.com", t(0)).unwrap();
    assert_eq!(b.info().unwrap().permits, 1);
    assert_eq!(
        acquire(&mut b, "api.example.com", ms(9999)),
        Err(NotReady::Blocked)
    );
    // At its expiry, the next acquire frees its slot (as cancelled: no backoff) and wins.
    let p = acquire(&mut b, "api.example.com", t(10)).unwrap();
    let s = b.scope_stats("api.example.com", t(10)).unwrap().unwrap();
    assert_eq!((s.active, s.done, s.level), (1, 1, 0));
    // The dead process's late release is refused and changes nothing.
    assert!(!a.release(dead, &Outcome::status(429), t(11)).unwrap());
    let s = b.scope_stats("api.example.com", t(11)).unwrap().unwrap();
    assert_eq!((s.active, s.triggers), (1, 0));
    assert!(b.release(p, &Outcome::status(200), t(11)).unwrap());
    let info = b.info().unwrap();
    assert_eq!((info.permits, info.in_flight), (0, 0));

    // A release at or past the expiry is refused even when nothing reclaimed it yet.
    let late = acquire(&mut a, "api.example.com", t(20)).unwrap();
    assert!(!a.release(late, &Outcome::status(200), t(30)).unwrap());
    assert_eq!(a.info().unwrap().in_flight, 0);
    assert!(acquire(&mut b, "api.example.com", t(30)).is_ok());
}

#[test]
fn releasing_twice_returns_false() {
    let Some(server) = RedisServer::start_or_skip("permits_twice") else {
        return;
    };
    let settings = Settings::default().without_jitter().with_scope(
        "api.example.com",
        ScopeConfig::new().delay(0.0).concurrency(1),
    );
    let (mut a, mut b) = pair(&server, "tw", settings, RedisConfig::default());
    let p = acquire(&mut a, "api.example.com", t(0)).unwrap();
    let q = b
        .try_acquire(&[ScopeUse::new("other.example.com")], t(0))
        .unwrap()
        .unwrap();
    assert!(a.release(p, &Outcome::status(200), t(1)).unwrap());
    assert!(!a.release(p, &Outcome::status(200), t(1)).unwrap());
    assert!(!b.release(p, &Outcome::status(429), t(2)).unwrap());
    // The second release freed nothing more: the other scope's permit still holds.
    let s = a.scope_stats("api.example.com", t(2)).unwrap().unwrap();
    assert_eq!((s.active, s.done, s.triggers), (0, 1, 0));
    assert_eq!(a.info().unwrap().in_flight, 1);
    assert!(b.release(q, &Outcome::status(200), t(2)).unwrap());
}

#[test]
fn permits_and_crawl_leases_share_one_concurrency_limit() {
    let Some(server) = RedisServer::start_or_skip("permits_leases") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(0.0).concurrency(2));
    let (mut crawler, mut api) = pair(&server, "mix", settings, RedisConfig::default());
    for i in 0..4 {
        crawler
            .push(&Request::get(format!("https://a.com/{i}")), t(0))
            .unwrap();
    }
    let permit = acquire(&mut api, "a.com", t(0)).unwrap();
    let Poll::Ready(l1) = crawler.poll(t(0)).unwrap() else {
        panic!("one slot is left for the crawl")
    };
    assert_eq!(crawler.poll(t(0)).unwrap(), Poll::Blocked);
    assert_eq!(acquire(&mut api, "a.com", t(0)), Err(NotReady::Blocked));
    // The API client's release lets the crawl go on (its parked group is woken).
    assert!(api.release(permit, &Outcome::status(200), t(1)).unwrap());
    let Poll::Ready(l2) = crawler.poll(t(1)).unwrap() else {
        panic!("the permit's slot went back to the crawl")
    };
    assert_eq!(acquire(&mut api, "a.com", t(1)), Err(NotReady::Blocked));
    assert_eq!(crawler.in_flight(), 2);
    // A lease's completion lets the API client in.
    assert!(
        crawler
            .complete(l1.id(), &Outcome::status(200), t(2))
            .unwrap()
    );
    let permit = acquire(&mut api, "a.com", t(2)).unwrap();
    assert_eq!(crawler.poll(t(2)).unwrap(), Poll::Blocked);
    let info = crawler.info().unwrap();
    assert_eq!((info.leased, info.permits, info.in_flight), (1, 1, 2));
    // A 429 on the permit backs the crawl off too.
    let limited = Outcome::response(429, [("Retry-After", "5")], None);
    assert!(api.release(permit, &limited, t(3)).unwrap());
    assert_eq!(crawler.poll(t(3)).unwrap(), Poll::NotUntil(t(8)));
    assert!(matches!(crawler.poll(t(8)).unwrap(), Poll::Ready(_)));
    assert!(
        crawler
            .complete(l2.id(), &Outcome::status(200), t(8))
            .unwrap()
    );
}

#[test]
fn the_global_cap_counts_permits() {
    let Some(server) = RedisServer::start_or_skip("permits_global") else {
        return;
    };
    let mut settings = Settings::default().without_jitter();
    settings.concurrent_requests = 2;
    let (mut crawler, mut api) = pair(&server, "glob", settings, RedisConfig::default());
    crawler.push(&Request::get("https://c.com/"), t(0)).unwrap();
    let p1 = acquire(&mut api, "a.com", t(0)).unwrap();
    // Several scopes at once: one permit, one place under the cap.
    let p2 = api
        .try_acquire(
            &[ScopeUse::new("b.com"), ScopeUse::with_amount("quota", 2.0)],
            t(0),
        )
        .unwrap()
        .unwrap();
    assert_eq!(acquire(&mut api, "d.com", t(0)), Err(NotReady::Blocked));
    assert_eq!(crawler.poll(t(0)).unwrap(), Poll::Blocked);
    assert!(api.release(p2, &Outcome::status(200), t(1)).unwrap());
    assert!(matches!(crawler.poll(t(1)).unwrap(), Poll::Ready(_)));
    assert_eq!(acquire(&mut api, "d.com", t(1)), Err(NotReady::Blocked));
    assert!(api.release(p1, &Outcome::Cancelled, t(1)).unwrap());
    assert!(acquire(&mut api, "d.com", t(1)).is_ok());
}

#[test]
fn server_time_maps_waits_onto_the_callers_clock() {
    let Some(server) = RedisServer::start_or_skip("permits_server_time") else {
        return;
    };
    let settings = Settings::default().without_jitter().with_scope(
        "api.example.com",
        ScopeConfig::new().delay(60.0).concurrency(0),
    );
    let config = RedisConfig::default().time(TimeSource::Server);
    let (mut a, mut b) = pair(&server, "srv", settings, config);
    // Each process's own clock, far apart.
    let clock_a = t(5_000);
    let clock_b = t(1_000_000);
    let p = acquire(&mut a, "api.example.com", clock_a).unwrap();
    match acquire(&mut b, "api.example.com", clock_b) {
        Err(NotReady::NotUntil(at)) => {
            assert!(at > clock_b + Duration::from_secs(50), "{at:?}");
            assert!(at <= clock_b + Duration::from_secs(60), "{at:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(b.release(p, &Outcome::status(200), clock_b).unwrap());
}
