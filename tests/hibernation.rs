//! Bounded memory over many hosts: with store-fs and store-sqlite, the throttler keeps at
//! most `throttling_scope_limit` scope states in memory, evicted states (backoffs
//! included) go to the store and come back when their host returns, across a reopen too.
//! Virtual time throughout.

use std::collections::HashMap;
use std::path::Path;

use polite_frontier_core::{Frontier, FrontierConfig, Poll, Request, Store};
use polite_store_fs::{FsConfig, FsStore};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::{Outcome, Settings, Timestamp};

const HOSTS: usize = 3_000;
const LIMIT: u32 = 50;
/// Every host answers its first request with 429 and this Retry-After.
const RETRY_AFTER: f64 = 120.0;

fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.throttling_scope_limit = LIMIT;
    s.concurrent_requests = 10_000;
    s.download_delay = 1.0;
    s
}

fn url(host: usize, page: &str) -> String {
    format!("https://h{host}.example/{page}")
}

fn host_of(url: &str) -> usize {
    let rest = url.strip_prefix("https://h").expect("test URL");
    rest[..rest.find('.').expect("test URL")]
        .parse()
        .expect("test URL")
}

/// Polls everything ready at `now`, completing each with `outcome(url)`; returns the
/// hosts served and the next time to poll.
fn drain<S: Store>(
    f: &mut Frontier<S>,
    now: Timestamp,
    mut outcome: impl FnMut(&str) -> Outcome<'static>,
    served: &mut Vec<(usize, String)>,
) -> Option<Timestamp> {
    loop {
        match f.poll(now).expect("poll") {
            Poll::Ready(lease) => {
                let u = lease.request.url.to_string();
                served.push((host_of(&u), u.clone()));
                f.complete(lease.id(), &outcome(&u), now).expect("complete");
                let live = f.throttler().stats().live_scopes;
                assert!(live <= LIMIT as usize + 2, "{live} scope states in memory");
            }
            Poll::NotUntil(t) => return Some(t),
            Poll::Empty => return None,
            Poll::Blocked => panic!("nothing is in flight"),
        }
    }
}

fn run<S: Store>(open: impl Fn() -> S)
where
    S::Error: std::fmt::Debug,
{
    let t0 = Timestamp::ZERO;
    let mut f = Frontier::open(settings(), FrontierConfig::default(), open(), t0).expect("open");
    for h in 0..HOSTS {
        f.push(&Request::get(url(h, "a").as_str()), t0)
            .expect("push");
    }
    // Every host's first request meets a 429 with Retry-After: a backoff to keep.
    let mut served = Vec::new();
    let limited = || Outcome::response(429, [("Retry-After", "120")], None);
    drain(&mut f, t0, |_| limited(), &mut served);
    assert_eq!(served.len(), HOSTS, "every host served once");
    let stats = f.throttler().stats();
    assert!(
        stats.hibernated >= (HOSTS - LIMIT as usize) as u64,
        "evicted into the store: {stats:?}"
    );
    assert!(stats.live_scopes <= LIMIT as usize + 2, "{stats:?}");

    // Each host returns with a second page, ten seconds later.
    let t1 = Timestamp::from_secs(10);
    for h in 0..HOSTS {
        f.push(&Request::get(url(h, "b").as_str()), t1)
            .expect("push");
    }
    served.clear();
    let next = drain(&mut f, t1, |_| Outcome::status(200), &mut served);
    assert!(
        served.is_empty(),
        "{} backoffs lost, e.g. {:?}",
        served.len(),
        served.first()
    );
    assert!(
        next.is_some_and(|t| t >= Timestamp::from_secs_f64(RETRY_AFTER)),
        "{next:?}"
    );

    // A restart in the middle: the states come back from the store.
    f.checkpoint().expect("flush");
    drop(f.close().expect("close"));
    let t2 = Timestamp::from_secs(20);
    let mut f = Frontier::open(settings(), FrontierConfig::default(), open(), t2).expect("reopen");
    assert_eq!(f.len(), HOSTS);
    served.clear();
    drain(&mut f, t2, |_| Outcome::status(200), &mut served);
    assert!(
        served.is_empty(),
        "{} backoffs lost on reopen, e.g. {:?}",
        served.len(),
        served.first()
    );
    let live = f.throttler().stats().live_scopes;
    assert!(
        live <= LIMIT as usize + 2,
        "{live} scope states in memory after reopen"
    );

    // Once the Retry-After has passed, every host is served, none earlier.
    let mut now = Timestamp::from_secs_f64(RETRY_AFTER);
    let mut when: HashMap<usize, Timestamp> = HashMap::new();
    loop {
        let mut batch = Vec::new();
        let next = drain(&mut f, now, |_| Outcome::status(200), &mut batch);
        for (h, _) in batch {
            assert!(when.insert(h, now).is_none(), "host {h} served twice");
        }
        match next {
            Some(t) => now = t.max(now),
            None => break,
        }
    }
    assert_eq!(when.len(), HOSTS, "every host's second page once");
    assert!(f.throttler().stats().woken > 0);
}

fn fs_store(dir: &Path) -> FsStore {
    FsStore::open(dir, FsConfig::default()).expect("open fs store")
}

fn sqlite_store(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).expect("open sqlite store")
}

#[test]
fn fs_store_keeps_evicted_backoffs_and_bounds_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    run(|| fs_store(dir.path()));
    let len = std::fs::metadata(dir.path().join("hibernated.log"))
        .expect("hibernated.log")
        .len();
    assert!(len > 0);
}

#[test]
fn sqlite_store_keeps_evicted_backoffs_and_bounds_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crawl.sqlite3");
    run(|| sqlite_store(&path));
}

#[test]
fn a_damaged_hibernation_record_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Timestamp::ZERO;
    let mut f = Frontier::open(
        settings(),
        FrontierConfig::default(),
        fs_store(dir.path()),
        t0,
    )
    .unwrap();
    for h in 0..200 {
        f.push(&Request::get(url(h, "a").as_str()), t0).unwrap();
    }
    let mut served = Vec::new();
    drain(
        &mut f,
        t0,
        |_| Outcome::response(429, [("Retry-After", "120")], None),
        &mut served,
    );
    f.checkpoint().unwrap();
    drop(f.close().unwrap());
    let path = dir.path().join("hibernated.log");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[30] ^= 0xff; // inside the first record, with more after it
    std::fs::write(&path, &bytes).unwrap();
    let opened = Frontier::open(
        settings(),
        FrontierConfig::default(),
        fs_store(dir.path()),
        t0,
    );
    let Err(err) = opened else {
        panic!("a damaged record must not open silently");
    };
    let msg = err.to_string();
    assert!(msg.contains("hibernated.log"), "{msg}");
}
