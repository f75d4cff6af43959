//! The Redis frontier's own behaviour: push, poll, leases, errors.

use polite_frontier_core::{FrontierError, Poll, PushOutcome, Request};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{RedisConfig, RedisFrontier, RedisStoreError, ScriptMode, TimeSource};
use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

#[test]
fn push_poll_complete() {
    let Some(server) = RedisServer::start_or_skip("push_poll_complete") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(2.0));
    let mut f = RedisFrontier::open(&server.url(), "c1", settings, RedisConfig::default()).unwrap();
    assert!(matches!(
        f.push(&Request::get("https://a.com/1").callback("parse"), t(0))
            .unwrap(),
        PushOutcome::Queued(_)
    ));
    assert!(matches!(
        f.push(&Request::get("https://a.com/2"), t(0)).unwrap(),
        PushOutcome::Queued(_)
    ));
    assert_eq!(
        f.push(&Request::get("https://a.com/1#x"), t(0)).unwrap(),
        PushOutcome::Duplicate
    );
    let Poll::Ready(l) = f.poll(t(0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*l.request.url, "https://a.com/2");
    assert_eq!(f.poll(t(0)).unwrap(), Poll::NotUntil(t(2)));
    assert!(f.complete(l.id(), &Outcome::status(200), t(1)).unwrap());
    let Poll::Ready(l2) = f.poll(t(2)).unwrap() else {
        panic!()
    };
    assert_eq!(&*l2.request.url, "https://a.com/1");
    assert_eq!(l2.request.callback.as_deref(), Some("parse"));
    assert!(f.complete(l2.id(), &Outcome::status(200), t(2)).unwrap());
    assert_eq!(f.poll(t(3)).unwrap(), Poll::Empty);
}

fn open(
    server: &RedisServer,
    crawl: &str,
    settings: Settings,
    config: RedisConfig,
) -> RedisFrontier {
    RedisFrontier::open(&server.url(), crawl, settings, config).unwrap()
}

/// The in-process frontier a Redis one is compared with, on the same settings.
fn in_process(
    settings: &Settings,
    frontier: &polite_frontier_core::FrontierConfig,
) -> polite_frontier_core::Frontier {
    polite_frontier_core::Frontier::open(
        settings.clone(),
        frontier.clone(),
        polite_frontier_core::VolatileStore::new(),
        t(0),
    )
    .unwrap()
}

fn conn(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Overwrites `host`'s name record in crawl `crawl` with bytes that do not decode;
/// returns the hash bucket that holds it.
fn damage_name_record(c: &mut redis::Connection, crawl: &str, host: &str) -> String {
    let buckets: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{crawl}}}:N:*"))
        .query(c)
        .unwrap();
    let bucket = buckets
        .iter()
        .find(|b| {
            redis::cmd("HEXISTS")
                .arg(b.as_str())
                .arg(host)
                .query::<bool>(c)
                .unwrap()
        })
        .unwrap_or_else(|| panic!("{host} has a record"))
        .clone();
    let _: () = redis::cmd("HSET")
        .arg(&bucket)
        .arg(host)
        .arg("\u{1}not a record")
        .query(c)
        .unwrap();
    bucket
}

#[test]
fn expired_leases_are_redelivered_and_free_their_slots() {
    let Some(server) = RedisServer::start_or_skip("expired_leases") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().concurrency(1));
    let config = RedisConfig::default().lease_timeout(std::time::Duration::from_secs(10));
    let mut a = open(&server, "leases", settings.clone(), config.clone());
    let mut b = open(&server, "leases", settings, config);
    a.push(&Request::get("https://a.com/1"), t(0)).unwrap();
    a.push(&Request::get("https://a.com/2"), t(0)).unwrap();
    let Poll::Ready(first) = a.poll(t(0)).unwrap() else {
        panic!()
    };
    // Worker b sees the host busy (concurrency 1 held by a), and a recheck time.
    assert_eq!(b.poll(t(1)).unwrap(), Poll::Blocked);
    assert_eq!(b.in_flight(), 1);
    assert!(b.poll_timeout().is_some_and(|p| p <= t(10)));
    // a extends its lease once, then dies: the lease expires at 15 s.
    assert!(a.extend(first.id(), t(5)).unwrap());
    assert_eq!(b.poll(t(12)).unwrap(), Poll::Blocked);
    let Poll::Ready(again) = b.poll(t(15)).unwrap() else {
        panic!("redelivered")
    };
    assert_ne!(again.id(), first.id(), "a new lease on the same request");
    assert_eq!(
        again.id().0 % (1 << 40),
        first.id().0,
        "same sequence number"
    );
    assert_eq!(again.request, first.request);
    // The dead worker's late acknowledgement is refused: the lease is b's now.
    assert!(
        !a.complete(first.id(), &Outcome::status(200), t(16))
            .unwrap()
    );
    assert!(
        b.complete(again.id(), &Outcome::status(200), t(16))
            .unwrap()
    );
    let Poll::Ready(second) = b.poll(t(16)).unwrap() else {
        panic!()
    };
    assert!(
        b.complete(second.id(), &Outcome::status(200), t(16))
            .unwrap()
    );
    assert_eq!(b.poll(t(16)).unwrap(), Poll::Empty);
    let info = b.info().unwrap();
    assert_eq!(info.stats.redelivered, 1);
    assert_eq!(info.stats.acked, 2);
    assert_eq!(info.leased, 0);
}

#[test]
fn damaged_data_gives_typed_errors() {
    let Some(server) = RedisServer::start_or_skip("damaged_data") else {
        return;
    };
    let settings = Settings::default().without_jitter();
    let mut f = open(&server, "dmg", settings.clone(), RedisConfig::default());
    let mut c = conn(&server);
    f.push(&Request::get("https://a.com/1"), t(0)).unwrap();
    f.push(&Request::get("https://b.com/1"), t(0)).unwrap();

    // A payload that does not decode: Corrupt naming its lease, which complete drops.
    // Group 0 (a.com) queues in bucket Q:0 under score 0; a member is the order value
    // (1 byte at priority 0), the sequence key (2 bytes for sequence number 0), the flags
    // byte, the payload.
    let q: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg("{dmg}:Q:0")
        .arg(0)
        .arg(0)
        .arg("BYSCORE")
        .query(&mut c)
        .unwrap();
    assert_eq!(q.len(), 1, "a.com's one request");
    let mut bad = q[0][..4].to_vec();
    bad.extend_from_slice(b"\x09garbage");
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg("{dmg}:Q:0")
        .arg(&q[0])
        .ignore()
        .cmd("ZADD")
        .arg("{dmg}:Q:0")
        .arg(0)
        .arg(&bad)
        .ignore()
        .query(&mut c)
        .unwrap();
    match f.poll(t(0)) {
        Err(FrontierError::Corrupt { lease, .. }) => {
            assert!(f.complete(lease, &Outcome::Cancelled, t(0)).unwrap());
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let Poll::Ready(l) = f.poll(t(0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*l.request.url, "https://b.com/1");
    f.complete(l.id(), &Outcome::status(200), t(0)).unwrap();

    // A name record that does not decode: the error names its bucket and its field.
    f.push(&Request::get("https://c.com/1"), t(0)).unwrap();
    let bucket = damage_name_record(&mut c, "dmg", "c.com");
    match f.poll(t(0)) {
        Err(FrontierError::Store(RedisStoreError::Corrupt { detail })) => {
            assert!(detail.contains(&format!("{bucket}[c.com]")), "{detail}")
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }

    // A queued request cut short (a crawl of its own: d.com is group 0 there).
    let mut g2 = open(&server, "dmg2", settings.clone(), RedisConfig::default());
    g2.push(&Request::get("https://d.com/1"), t(0)).unwrap();
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg("{dmg2}:Q:0")
        .ignore()
        .cmd("ZADD")
        .arg("{dmg2}:Q:0")
        .arg(0)
        .arg(&b"\x7f\xff"[..])
        .ignore()
        .query(&mut c)
        .unwrap();
    match g2.poll(t(0)) {
        Err(FrontierError::Store(RedisStoreError::Corrupt { detail })) => {
            assert!(detail.contains("queued request"), "{detail}");
        }
        other => panic!("expected a corrupt queued request, got {other:?}"),
    }

    // Damaged counters.
    let _: () = redis::cmd("SET")
        .arg("{dmg2}:c")
        .arg("short")
        .query(&mut c)
        .unwrap();
    match g2.poll(t(0)) {
        Err(FrontierError::Store(RedisStoreError::Corrupt { detail })) => {
            assert!(detail.contains("{dmg2}:c"), "{detail}");
        }
        other => panic!("expected corrupt counters, got {other:?}"),
    }

    // A key of the wrong type.
    let mut g = open(
        &server,
        "wrongtype",
        settings.clone(),
        RedisConfig::default(),
    );
    let _: () = redis::cmd("SET")
        .arg("{wrongtype}:df")
        .arg("x")
        .query(&mut c)
        .unwrap();
    match g.push(&Request::get("https://a.com/"), t(0)) {
        Err(FrontierError::Store(RedisStoreError::WrongType { .. })) => {}
        other => panic!("expected WrongType, got {other:?}"),
    }

    // Other settings than the crawl's.
    let other = Settings::default();
    match RedisFrontier::open(&server.url(), "dmg", other, RedisConfig::default()) {
        Err(FrontierError::Store(RedisStoreError::SettingsMismatch { .. })) => {}
        other => panic!("expected SettingsMismatch, got {other:?}"),
    }

    // Invalid inputs are refused before anything is written, as in-process.
    let err = f
        .push(&Request::get("https://a.com/x").delay(-1.0), t(0))
        .unwrap_err();
    assert!(matches!(err, FrontierError::InvalidRequest(_)), "{err}");
    let err = f.delay_scope("a.com", f64::NAN, t(0)).unwrap_err();
    assert!(err.to_string().contains("delay_scope"), "{err}");
    assert!(f.set_scope_concurrency("api", 0, t(0)).is_ok());
}

#[test]
fn scripts_reload_and_connections_recover() {
    let Some(server) = RedisServer::start_or_skip("script_reload") else {
        return;
    };
    let mut c = conn(&server);
    for mode in [ScriptMode::Function, ScriptMode::Eval] {
        let crawl = format!("reload-{mode:?}");
        let config = RedisConfig::default().script(mode);
        let mut f = open(
            &server,
            &crawl,
            Settings::default().without_jitter(),
            config,
        );
        f.push(&Request::get("https://a.com/1"), t(0)).unwrap();
        // The server forgets its code (a restart, a failover to a replica without it).
        let forget = |c: &mut redis::Connection| {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(c).unwrap();
            let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(c).unwrap();
        };
        forget(&mut c);
        let pushed = f
            .push_all(
                &[
                    Request::get("https://a.com/2"),
                    Request::get("https://a.com/3"),
                ],
                t(0),
            )
            .unwrap();
        assert!(pushed.iter().all(|p| matches!(p, PushOutcome::Queued(_))));
        forget(&mut c);
        assert!(matches!(f.poll(t(0)).unwrap(), Poll::Ready(_)), "{mode:?}");
        // The connection is cut: the next call fails with a typed error or reconnects,
        // and the one after works.
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut c)
            .unwrap();
        let first = f.poll(t(0));
        if let Err(e) = &first {
            assert!(
                matches!(e, FrontierError::Store(RedisStoreError::Redis { .. })),
                "{e}"
            );
        }
        assert!(matches!(
            f.poll(t(0)).unwrap(),
            Poll::Ready(_) | Poll::Blocked
        ));
    }
}

#[test]
fn server_time_is_shared_and_mapped_to_the_caller() {
    let Some(server) = RedisServer::start_or_skip("server_time") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(0.3));
    let config = RedisConfig::default().time(TimeSource::Server);
    let mut f = open(&server, "stime", settings, config);
    // The caller's clock is arbitrary (here: far in the future); the server decides.
    let mine = Timestamp::from_secs(5_000_000);
    f.push(&Request::get("https://a.com/1"), mine).unwrap();
    f.push(&Request::get("https://a.com/2"), mine).unwrap();
    let started = std::time::Instant::now();
    assert!(matches!(f.poll(mine).unwrap(), Poll::Ready(_)));
    let Poll::NotUntil(until) = f.poll(mine).unwrap() else {
        panic!()
    };
    let answered = std::time::Instant::now();
    // The server's 0.3 s, less the time between the two polls (measured here, so that a
    // slow machine does not fail the test), on the caller's clock.
    let wait = until.saturating_duration_since(mine);
    let delay = std::time::Duration::from_millis(300);
    let between = answered.duration_since(started);
    assert!(
        wait <= delay && wait + between + std::time::Duration::from_millis(5) >= delay,
        "wait {wait:?}, {between:?} between the polls"
    );
    // Ready once that wait is over, whenever the answer came.
    std::thread::sleep(
        (wait + std::time::Duration::from_millis(20)).saturating_sub(answered.elapsed()),
    );
    assert!(matches!(f.poll(mine).unwrap(), Poll::Ready(_)));
}

#[test]
fn bloom_filter_matches_the_in_process_one_false_positives_included() {
    use polite_frontier_core::{DupeFilterConfig, FrontierConfig};
    let Some(server) = RedisServer::start_or_skip("bloom") else {
        return;
    };
    // Small on purpose: false positives happen, and must be the same ones.
    let dupefilter = DupeFilterConfig::Bloom {
        capacity: 300,
        false_positive_rate: 0.05,
    };
    let frontier = FrontierConfig::default().dupefilter(dupefilter);
    let settings = Settings::default().without_jitter();
    let mut core = in_process(&settings, &frontier);
    let config = RedisConfig::default().frontier(frontier);
    let mut f = open(&server, "bloom", settings.clone(), config);
    let reqs: Vec<Request> = (0..1500)
        .map(|i| Request::get(format!("https://h{}.example/p/{}", i % 900 % 13, i % 900)))
        .collect();
    let a: Vec<PushOutcome> = reqs.iter().map(|r| core.push(r, t(0)).unwrap()).collect();
    let b = f.push_all(&reqs, t(0)).unwrap();
    assert_eq!(a, b);
    let dropped = b.iter().filter(|o| **o == PushOutcome::Duplicate).count();
    assert!(
        dropped > 600,
        "real duplicates and some false positives: {dropped}"
    );
    // Another worker with another filter shape is refused.
    let other = RedisConfig::default();
    match RedisFrontier::open(&server.url(), "bloom", settings, other) {
        Err(FrontierError::Store(RedisStoreError::SettingsMismatch { .. })) => {}
        other => panic!("expected SettingsMismatch, got {other:?}"),
    }
    // An impossible shape is the same error as in-process.
    let bad = RedisConfig::default().frontier(FrontierConfig::default().dupefilter(
        DupeFilterConfig::Bloom {
            capacity: 0,
            false_positive_rate: 0.01,
        },
    ));
    assert!(matches!(
        RedisFrontier::open(&server.url(), "bloom2", Settings::default(), bad),
        Err(FrontierError::DupeFilter(_))
    ));
}

#[test]
fn idle_scope_states_are_evicted_unless_they_still_matter() {
    let Some(server) = RedisServer::start_or_skip("idle_eviction") else {
        return;
    };
    let mut settings = Settings::default().without_jitter();
    settings.throttling_scope_max_idle = 10.0;
    settings.backoff_window = 60.0;
    let mut f = open(&server, "idle", settings, RedisConfig::default());
    for host in ["a.com", "b.com"] {
        f.push(&Request::get(format!("https://{host}/")), t(0))
            .unwrap();
        let Poll::Ready(l) = f.poll(t(0)).unwrap() else {
            panic!()
        };
        // b.com is rate-limited: backing off, its state must be kept.
        let status = if host == "b.com" { 429 } else { 200 };
        f.complete(l.id(), &Outcome::status(status), t(1)).unwrap();
    }
    assert!(f.scope_stats_raw("a.com").unwrap().is_some());
    assert_eq!(f.poll(t(5)).unwrap(), Poll::Empty);
    assert!(
        f.scope_stats_raw("a.com").unwrap().is_some(),
        "not idle long enough"
    );
    assert_eq!(f.poll(t(12)).unwrap(), Poll::Empty);
    assert!(
        f.scope_stats_raw("a.com").unwrap().is_none(),
        "idle: evicted"
    );
    let b = f
        .scope_stats_raw("b.com")
        .unwrap()
        .expect("backing off: kept");
    assert_eq!(b.level, 1);
    // Once b.com has recovered (one backoff window) and idled, it goes too.
    for s in [70, 90] {
        assert_eq!(f.poll(t(s)).unwrap(), Poll::Empty);
    }
    assert!(f.scope_stats_raw("b.com").unwrap().is_none());
    // A scope used again starts afresh and works as before.
    f.push(&Request::get("https://a.com/again"), t(90)).unwrap();
    assert!(matches!(f.poll(t(90)).unwrap(), Poll::Ready(_)));
    assert_eq!(f.scope_stats_raw("a.com").unwrap().unwrap().sent, 1);
}

#[test]
fn destroy_removes_every_key_of_the_crawl_and_only_those() {
    let Some(server) = RedisServer::start_or_skip("destroy") else {
        return;
    };
    let mut c = conn(&server);
    let _: () = redis::cmd("SET")
        .arg("unrelated")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let mut f = open(&server, "gone", Settings::default(), RedisConfig::default());
    for i in 0..50 {
        f.push(&Request::get(format!("https://h{}.com/{i}", i % 7)), t(0))
            .unwrap();
    }
    let _ = f.poll(t(0)).unwrap();
    let removed = f.destroy().unwrap();
    assert!(removed > 10, "{removed}");
    let left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert_eq!(left, ["unrelated"]);
}

#[test]
fn another_layout_version_is_refused_with_a_clear_error() {
    let Some(server) = RedisServer::start_or_skip("layout_version") else {
        return;
    };
    let settings = Settings::default().without_jitter();
    let mut f = open(&server, "old", settings.clone(), RedisConfig::default());
    f.push(&Request::get("https://a.com/1"), t(0)).unwrap();
    // What an older version of this crate left (layout 1: sorted-set queues per group,
    // msgpack records): this client reads neither, and says so.
    let mut c = conn(&server);
    let _: () = redis::cmd("HSET")
        .arg("{old}:cfg")
        .arg("layout")
        .arg("1")
        .query(&mut c)
        .unwrap();
    match f.poll(t(0)) {
        Err(FrontierError::Store(RedisStoreError::Version { detail })) => {
            assert!(detail.contains("layout 1"), "{detail}");
        }
        other => panic!("expected a version error, got {other:?}"),
    }
    match RedisFrontier::open(&server.url(), "old", settings, RedisConfig::default()) {
        Err(FrontierError::Store(RedisStoreError::Version { detail })) => {
            assert!(
                detail.contains("layout 1") && detail.contains("destroy"),
                "{detail}"
            );
        }
        other => panic!("expected a version error, got {other:?}"),
    }
}

#[test]
fn batched_pushes_decide_as_pushes_one_at_a_time() {
    use polite_frontier_core::{DupeFilterConfig, FrontierConfig};
    let Some(server) = RedisServer::start_or_skip("batched_push") else {
        return;
    };
    let settings = Settings::default().without_jitter();
    // Duplicates inside one script call and across calls, requests that skip the filter,
    // too deep, delayed, start requests, several scopes, unthrottled.
    let mut reqs = Vec::new();
    for i in 0..120u32 {
        let url = format!("https://h{}.example/p/{}", i % 45 % 7, i % 45);
        let mut r = Request::get(url.as_str()).priority((i % 5) as i32 - 2);
        match i % 11 {
            1 => r = r.dont_filter(),
            2 => r = r.depth(4 + i % 2),
            3 => r = r.delay(1.5),
            4 => r = r.start(),
            5 => r = r.dont_throttle(),
            6 => r = r.depth(2),
            _ => {}
        }
        reqs.push(r);
    }
    for (n, dupefilter) in [
        DupeFilterConfig::Exact,
        DupeFilterConfig::Bloom {
            capacity: 60,
            false_positive_rate: 0.2,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let frontier = FrontierConfig::default()
            .dupefilter(dupefilter)
            .depth_limit(3);
        let mut core = in_process(&settings, &frontier);
        let config = RedisConfig::default().frontier(frontier).push_batch(13);
        let mut f = open(&server, &format!("batched{n}"), settings.clone(), config);
        let a: Vec<PushOutcome> = reqs.iter().map(|r| core.push(r, t(0)).unwrap()).collect();
        let b = f.push_all(&reqs, t(0)).unwrap();
        assert_eq!(a, b, "{dupefilter:?}");
        assert!(
            b.contains(&PushOutcome::Duplicate) && b.contains(&PushOutcome::TooDeep),
            "{b:?}"
        );
        // The same queue: both hand out the same requests in the same order.
        for s in 0..40 {
            let mut got = (Vec::new(), Vec::new());
            loop {
                let x = core.poll(t(s)).unwrap();
                let y = f.poll(t(s)).unwrap();
                match (x, y) {
                    (Poll::Ready(x), Poll::Ready(y)) => {
                        assert_eq!(x.id(), y.id());
                        got.0.push(x.request.url.clone());
                        got.1.push(y.request.url.clone());
                        core.complete(x.id(), &Outcome::status(200), t(s)).unwrap();
                        f.complete(y.id(), &Outcome::status(200), t(s)).unwrap();
                    }
                    (x, y) => {
                        assert_eq!(x, y, "at {s}s");
                        break;
                    }
                }
            }
            assert_eq!(got.0, got.1);
        }
        assert_eq!(f.poll(t(100)).unwrap(), Poll::Empty);
        let info = f.info().unwrap();
        assert_eq!(info.stats.filtered, core.stats().filtered);
        assert_eq!(info.stats.depth_ignored, core.stats().depth_ignored);
    }
}

/// The leaves of chunked ordered set `set` (`C` candidates, `E` events) of crawl `crawl`:
/// each separator in the index with its leaf's size, in order. Panics unless every leaf
/// is indexed, the first separator is "", no leaf is empty or past 64 members or kept
/// as a skiplist (short members: Redis keeps such a set as a compact listpack), and
/// each leaf's members sort from its separator up to (not including) the next one.
fn leaves(c: &mut redis::Connection, crawl: &str, set: &str) -> Vec<(Vec<u8>, usize)> {
    let index = format!("{{{crawl}}}:{set}");
    let seps: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(&index)
        .arg(0)
        .arg(-1)
        .query(c)
        .unwrap();
    let mut out = Vec::new();
    for sep in &seps {
        let mut leaf = format!("{index}|").into_bytes();
        leaf.extend_from_slice(sep);
        let n: usize = redis::cmd("ZCARD").arg(&leaf).query(c).unwrap();
        assert!((1..=64).contains(&n), "{set} leaf {sep:?}: {n} members");
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&leaf)
            .query(c)
            .unwrap();
        assert_eq!(encoding, "listpack", "{set} leaf {sep:?}");
        let ends: Vec<Vec<u8>> = ["0", "-1"]
            .iter()
            .map(|&at| {
                let m: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                    .arg(&leaf)
                    .arg(at)
                    .arg(at)
                    .query(c)
                    .unwrap();
                m[0].clone()
            })
            .collect();
        assert!(ends[0] >= *sep, "{set} leaf {sep:?} holds {:?}", ends[0]);
        out.push((sep.clone(), n));
        if let Some(next) = seps.get(out.len()) {
            assert!(ends[1] < *next, "{set} leaf {sep:?} holds {:?}", ends[1]);
        }
    }
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{index}|*"))
        .query(c)
        .unwrap();
    assert_eq!(keys.len(), seps.len(), "{set}: leaves outside the index");
    if let Some((first, _)) = out.first() {
        assert!(first.is_empty(), "{set}: the first separator is {first:?}");
    }
    out
}

/// A push of many requests in one script call re-ranks hundreds of groups; their
/// candidate and event entries are changed leaf by leaf at the end of the call. The
/// decisions are those of pushes one at a time, and the sets keep their shape.
#[test]
fn big_batches_rank_groups_as_single_pushes_would() {
    let Some(server) = RedisServer::start_or_skip("big_batches") else {
        return;
    };
    let settings = Settings::default().without_jitter();
    let frontier = polite_frontier_core::FrontierConfig::default();
    let mut core = in_process(&settings, &frontier);
    let config = RedisConfig::default()
        .frontier(frontier.clone())
        .push_batch(1000);
    let mut f = open(&server, "big", settings.clone(), config);
    let mut c = conn(&server);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut i = 0u64;
    let (mut listed, mut delayed) = (std::collections::HashSet::new(), 0);
    // Rounds of pushes: the first lists ~700 new groups at once (one leaf splits many
    // ways), later ones move listed groups between leaves (changed heads: removals
    // that thin leaves out, additions that split them) and add delayed requests.
    for (round, count) in [2500u64, 1500, 300].into_iter().enumerate() {
        let mut reqs = Vec::new();
        for _ in 0..count {
            let host = next(700);
            let mut r = Request::get(format!("https://h{host}.example/p/{i}"))
                .priority(next(11) as i32 - 5 + round as i32);
            if next(13) == 0 {
                r = r.delay(1.5);
                delayed += 1;
            } else {
                listed.insert(host);
            }
            if next(17) == 0 {
                r = r.start();
            }
            reqs.push(r);
            i += 1;
        }
        let a: Vec<PushOutcome> = reqs.iter().map(|r| core.push(r, t(0)).unwrap()).collect();
        assert_eq!(a, f.push_all(&reqs, t(0)).unwrap(), "round {round}");
        // Every group with a request queued is listed once; every delayed request waits.
        let cand = leaves(&mut c, "big", "C");
        assert!(
            cand.len() >= 10,
            "round {round}: {} candidate leaves",
            cand.len()
        );
        let total = |l: &[(Vec<u8>, usize)]| l.iter().map(|e| e.1).sum::<usize>();
        assert_eq!(total(&cand), listed.len(), "round {round}: candidates");
        assert_eq!(total(&leaves(&mut c, "big", "E")), delayed, "round {round}");
    }
    // Both hand out the same requests in the same order, delayed ones after 1.5 s.
    let mut served = 0;
    for s in [0, 2] {
        loop {
            match (core.poll(t(s)).unwrap(), f.poll(t(s)).unwrap()) {
                (Poll::Ready(x), Poll::Ready(y)) => {
                    assert_eq!(x.request.url, y.request.url, "request {served}");
                    core.complete(x.id(), &Outcome::status(200), t(s)).unwrap();
                    f.complete(y.id(), &Outcome::status(200), t(s)).unwrap();
                    served += 1;
                }
                (x, y) => {
                    assert_eq!(x, y, "at {s}s after {served}");
                    break;
                }
            }
        }
    }
    assert_eq!(served, i);
    assert_eq!(f.poll(t(3)).unwrap(), Poll::Empty);
    assert!(leaves(&mut c, "big", "C").is_empty());
}

/// The script keeps names' bucket hashes from call to call, two generations of 16,384
/// names: past them (20,000 hosts, each pushed to twice, in calls of 5,000 requests) every
/// host still finds its one record, so no group or record is made twice.
#[test]
fn name_records_are_found_past_the_hash_cache() {
    let Some(server) = RedisServer::start_or_skip("hash_cache") else {
        return;
    };
    let config = RedisConfig::default().push_batch(5000);
    let mut f = open(&server, "hc", Settings::default(), config);
    let hosts = 20_000;
    for pass in 0..2 {
        let reqs: Vec<Request> = (0..hosts)
            .map(|h| Request::get(format!("https://h{h}.example/{pass}")))
            .collect();
        let out = f.push_all(&reqs, t(0)).unwrap();
        assert!(out.iter().all(|o| matches!(o, PushOutcome::Queued(_))));
        let info = f.info().unwrap();
        assert_eq!(info.groups, hosts, "pass {pass}");
        assert_eq!(info.queued, hosts * (pass + 1), "pass {pass}");
    }
    let mut c = conn(&server);
    let buckets: Vec<String> = redis::cmd("KEYS").arg("{hc}:N:*").query(&mut c).unwrap();
    let records: u64 = buckets
        .iter()
        .map(|b| redis::cmd("HLEN").arg(b).query::<u64>(&mut c).unwrap())
        .sum();
    assert_eq!(records, hosts);
}

#[test]
fn script_errors_in_a_pipeline_keep_their_type_and_name_the_call() {
    let Some(server) = RedisServer::start_or_skip("pipeline_errors") else {
        return;
    };
    let config = RedisConfig::default().push_batch(1);
    let mut f = open(&server, "pe", Settings::default(), config);
    let mut c = conn(&server);
    f.push(&Request::get("https://a.com/1"), t(0)).unwrap();
    f.push(&Request::get("https://b.com/1"), t(0)).unwrap();
    // b.com's name record is damaged: the first call of the pipeline (a.com) succeeds,
    // the second fails.
    let bucket = damage_name_record(&mut c, "pe", "b.com");
    let reqs = [
        Request::get("https://a.com/2"),
        Request::get("https://b.com/2"),
    ];
    match f.push_all(&reqs, t(0)) {
        Err(FrontierError::Store(RedisStoreError::Corrupt { detail })) => {
            assert!(detail.contains(&format!("{bucket}[b.com]")), "{detail}");
            assert!(detail.contains("call 2 of 2 in a pipeline"), "{detail}");
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }
    // Damaged counters: every call fails; the first one is named.
    let _: () = redis::cmd("SET")
        .arg("{pe}:c")
        .arg("short")
        .query(&mut c)
        .unwrap();
    match f.push_all(&reqs, t(0)) {
        Err(FrontierError::Store(RedisStoreError::Corrupt { detail })) => {
            assert!(detail.contains("{pe}:c"), "{detail}");
            assert!(detail.contains("call 1 of 2 in a pipeline"), "{detail}");
        }
        other => panic!("expected corrupt counters, got {other:?}"),
    }
    // A key of the wrong type, in a pipeline.
    let mut g = open(&server, "pe2", Settings::default(), RedisConfig::default());
    let _: () = redis::cmd("SET")
        .arg("{pe2}:df")
        .arg("x")
        .query(&mut c)
        .unwrap();
    match g.push_all(&reqs, t(0)) {
        Err(FrontierError::Store(RedisStoreError::WrongType { detail })) => {
            assert!(detail.contains("call 1 of 1 in a pipeline"), "{detail}");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
}

#[test]
fn poll_timeout_follows_the_earliest_lease_expiry() {
    let Some(server) = RedisServer::start_or_skip("lease_expiry") else {
        return;
    };
    let config = RedisConfig::default()
        .lease_timeout(std::time::Duration::from_secs(10))
        .recheck(std::time::Duration::from_secs(1000));
    let mut f = open(&server, "lx", Settings::default().without_jitter(), config);
    for h in ["a", "b", "c"] {
        f.push(&Request::get(format!("https://{h}.com/")), t(0))
            .unwrap();
    }
    let lease = |f: &mut RedisFrontier, s| match f.poll(t(s)).unwrap() {
        Poll::Ready(l) => l,
        other => panic!("{other:?} at {s}s"),
    };
    let a = lease(&mut f, 0);
    assert_eq!(f.poll_timeout(), Some(t(10)));
    let b = lease(&mut f, 3);
    assert_eq!(f.poll_timeout(), Some(t(10)), "the earlier of two leases");
    assert!(f.complete(a.id(), &Outcome::status(200), t(4)).unwrap());
    let _c = lease(&mut f, 5);
    assert_eq!(f.poll_timeout(), Some(t(13)), "a's lease ended");
    assert_eq!(f.poll(t(6)).unwrap(), Poll::Empty);
    assert_eq!(f.poll_timeout(), Some(t(13)));
    // b's lease is due at 13 s: delivered again, now until 23 s; c's ends at 15 s.
    let again = lease(&mut f, 13);
    assert_eq!(again.request.url, b.request.url);
    assert_eq!(f.poll_timeout(), Some(t(15)));
}

#[test]
fn batched_completions_and_a_hand_back() {
    let Some(server) = RedisServer::start_or_skip("complete_batch") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(2.0).concurrency(1));
    let mut f = open(&server, "cbatch", settings, RedisConfig::default());
    for r in ["https://a.com/1", "https://b.com/1", "https://c.com/1"] {
        f.push(&Request::get(r), t(0)).unwrap();
    }
    let leases: Vec<_> = f
        .poll_batch(t(0), 8)
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(leases.len(), 3);
    let a = leases
        .iter()
        .find(|l| l.request.url.contains("a.com"))
        .unwrap();
    let others: Vec<_> = leases.iter().filter(|l| l.id() != a.id()).collect();

    // a.com's lease goes back unused: queued again in its place, its slot free at once,
    // its send kept (a.com waits its 2 s from t0).
    assert!(f.hand_back(a.id(), t(1)).unwrap());
    assert_eq!(f.in_flight(), 2);
    assert!(!f.hand_back(a.id(), t(1)).unwrap(), "only once");
    assert_eq!(f.poll(t(1)).unwrap(), Poll::NotUntil(t(2)));

    // One round trip, each at its own time; an unknown lease is refused in its place.
    let done = f
        .complete_batch(&[
            (others[0].id(), Outcome::status(200), t(1)),
            (a.id(), Outcome::status(200), t(1)),
            (others[1].id(), Outcome::status(200), t(1)),
        ])
        .unwrap();
    assert_eq!(done, [true, false, true]);
    assert_eq!(f.in_flight(), 0);
    let Poll::Ready(again) = f.poll(t(2)).unwrap() else {
        panic!("a.com/1 again")
    };
    assert_eq!(again.request, a.request);
    assert_eq!(
        again.id().0 % (1 << 40),
        a.id().0 % (1 << 40),
        "same sequence number"
    );
    assert_eq!(
        f.complete_batch(&[(again.id(), Outcome::status(200), t(2))])
            .unwrap(),
        [true]
    );
    assert_eq!(f.poll(t(3)).unwrap(), Poll::Empty);
    let info = f.info().unwrap();
    assert_eq!(info.stats.acked, 3);
    assert_eq!(info.leased, 0);
    assert_eq!(
        (info.stats.redelivered, info.stats.retried),
        (0, 0),
        "a hand-back is neither"
    );
}

/// A handed-back request keeps its place: still first of its host's queue.
#[test]
fn a_handed_back_request_keeps_its_place() {
    let Some(server) = RedisServer::start_or_skip("hand_back_place") else {
        return;
    };
    let mut f = open(
        &server,
        "hback",
        Settings::default().without_jitter(),
        RedisConfig::default(),
    );
    for p in 1..=3 {
        f.push(&Request::get(format!("https://a.com/{p}")), t(0))
            .unwrap();
    }
    let Poll::Ready(first) = f.poll(t(0)).unwrap() else {
        panic!()
    };
    // LIFO, the default order: the last pushed goes first.
    assert_eq!(&*first.request.url, "https://a.com/3");
    assert!(f.hand_back(first.id(), t(0)).unwrap());
    let order: Vec<String> = (0..3)
        .map(|_| {
            let Poll::Ready(l) = f.poll(t(5)).unwrap() else {
                panic!()
            };
            assert_ne!(l.id(), first.id(), "the old id is dead");
            f.complete(l.id(), &Outcome::status(200), t(5)).unwrap();
            l.request.url.to_string()
        })
        .collect();
    assert_eq!(
        order,
        ["https://a.com/3", "https://a.com/2", "https://a.com/1"]
    );
    assert_eq!(f.info().unwrap().queued, 0);
}
