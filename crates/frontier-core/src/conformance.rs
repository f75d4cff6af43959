//! The store conformance suite: what every [`Store`] must do, checked through a
//! [`Frontier`] (ordering, leases, duplicate filter, resume, errors).
//!
//! A store crate implements [`Harness`] (how to create a store and reopen it on the same
//! data) and expands [`store_conformance_tests!`](crate::store_conformance_tests) in a
//! test module:
//!
//! ```
//! use polite_frontier_core::conformance::Harness;
//! use polite_frontier_core::ReferenceStore;
//!
//! struct Memory;
//! impl Harness for Memory {
//!     type Store = ReferenceStore;
//!     fn create(&mut self) -> ReferenceStore {
//!         ReferenceStore::new()
//!     }
//!     fn reopen(&mut self, store: ReferenceStore) -> ReferenceStore {
//!         store
//!     }
//!     fn corrupt_payload(&mut self, store: &mut ReferenceStore, seq: u64) {
//!         store
//!             .overwrite_payload(seq, &[0xff])
//!             .unwrap_or_else(|e| panic!("damaging #{seq}: {e}"));
//!     }
//! }
//! // In a test file: polite_frontier_core::store_conformance_tests!(Memory);
//! polite_frontier_core::conformance::run_all(&mut Memory);
//! ```
//!
//! Every check panics with a message naming what broke.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

use crate::{
    Fingerprint, Frontier, FrontierConfig, FrontierError, Poll, PushOutcome, Request, Store,
    VolatileStore, fingerprint,
};

/// How the suite gets stores.
pub trait Harness {
    /// The store under test.
    type Store: Store;

    /// A new, empty store.
    fn create(&mut self) -> Self::Store;

    /// The same data opened again. `store` has been flushed; drop it (closing files,
    /// releasing locks) before opening the data again.
    fn reopen(&mut self, store: Self::Store) -> Self::Store;

    /// Damages the stored payload of request `seq` (in `store`, which has been flushed)
    /// so it no longer decodes, as a disk or a bug would: overwrite its bytes in the
    /// store's files or tables. Required of every store, and there is no opting out: the
    /// suite then expects reading the request to fail with
    /// [`FrontierError::Corrupt`], so a harness that leaves the payload intact fails
    /// [`corrupted_payloads_are_errors`]. Panic, saying why, if the payload cannot be
    /// found or written.
    fn corrupt_payload(&mut self, store: &mut Self::Store, seq: u64);
}

fn t(secs: u64) -> Timestamp {
    Timestamp::from_secs(secs)
}

/// Settings under which throttling does not reorder anything.
fn open_settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s.throttling_scope_concurrency = 0;
    s
}

fn open<H: Harness>(store: H::Store, settings: Settings, now: Timestamp) -> Frontier<H::Store> {
    match Frontier::open(settings, FrontierConfig::default(), store, now) {
        Ok(f) => f,
        Err(e) => panic!("opening the frontier on the store failed: {e}"),
    }
}

fn reopen<H: Harness>(
    h: &mut H,
    f: Frontier<H::Store>,
    settings: Settings,
    now: Timestamp,
) -> Frontier<H::Store> {
    let store = match f.close() {
        Ok(s) => s,
        Err(e) => panic!("closing the frontier failed: {e}"),
    };
    open::<H>(h.reopen(store), settings, now)
}

fn push<S: Store>(f: &mut Frontier<S>, req: &Request, now: Timestamp) -> PushOutcome {
    match f.push(req, now) {
        Ok(o) => o,
        Err(e) => panic!("push of {} failed: {e}", req.url),
    }
}

/// Polls and completes everything ready at `now`.
fn drain<S: Store>(f: &mut Frontier<S>, now: Timestamp) -> Vec<Request> {
    let mut out = vec![];
    loop {
        match f.poll(now) {
            Ok(Poll::Ready(l)) => {
                let id = l.id();
                out.push(l.request);
                f.complete(id, &Outcome::status(200), now)
                    .unwrap_or_else(|e| panic!("complete failed: {e}"));
            }
            Ok(_) => return out,
            Err(e) => panic!("poll failed: {e}"),
        }
    }
}

fn urls(reqs: &[Request]) -> Vec<String> {
    reqs.iter().map(|r| r.url.to_string()).collect()
}

/// A mixed workload: priorities, start requests, several hosts, callbacks, extras.
fn workload() -> Vec<Request> {
    let mut reqs = vec![];
    for i in 0..60u32 {
        let host = ["a.example.com", "b.example.com", "c.example.com:8080"][(i % 3) as usize];
        let mut r = Request::get(format!("https://{host}/page/{i}?q={i}"))
            .callback(["parse", "parse_item", "parse_list"][(i % 3) as usize])
            .priority((i % 5) as i32 - 2)
            .depth(i % 4);
        if i % 7 == 0 {
            r = r.start();
        }
        if i % 11 == 0 {
            r = r
                .header("X-Test", format!("v{i}").into_bytes())
                .meta(vec![i as u8; 3]);
        }
        if i % 13 == 0 {
            r = r.scope(host).scope_amount("budget", 2.0);
        }
        reqs.push(r);
    }
    reqs.push(
        Request::new(crate::Method::Post, "https://a.example.com/form").body(b"x=1".to_vec()),
    );
    reqs
}

/// Queued requests come back in the same order after a reopen as without one.
pub fn order_survives_reopen<H: Harness>(h: &mut H) {
    let reference: Vec<String> = {
        let mut f: Frontier<VolatileStore> = Frontier::open(
            open_settings(),
            FrontierConfig::default(),
            VolatileStore::new(),
            t(0),
        )
        .unwrap();
        for r in workload() {
            push(&mut f, &r, t(0));
        }
        urls(&drain(&mut f, t(0)))
    };
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    for r in workload() {
        assert!(matches!(push(&mut f, &r, t(0)), PushOutcome::Queued(_)));
    }
    let mut f = reopen(h, f, open_settings(), t(1));
    assert_eq!(f.len(), reference.len(), "queued requests after reopening");
    let got = drain(&mut f, t(1));
    assert_eq!(urls(&got), reference, "order after reopening");
    // Every field came back.
    let want = workload();
    for r in &got {
        let orig = want
            .iter()
            .find(|w| w.url == r.url)
            .expect("pushed request");
        assert_eq!(r, orig, "request fields after reopening");
    }
}

/// Unacknowledged leases are queued again on reopen, acknowledged ones are gone.
pub fn leases_are_redelivered<H: Harness>(h: &mut H) {
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    for i in 0..5 {
        push(
            &mut f,
            &Request::get(format!("https://a.example.com/{i}")),
            t(0),
        );
    }
    let mut leases = vec![];
    for _ in 0..3 {
        match f.poll(t(0)) {
            Ok(Poll::Ready(l)) => leases.push(l),
            other => panic!("expected a lease, got {other:?}"),
        }
    }
    let done = leases.remove(0);
    assert!(
        f.complete(done.id(), &Outcome::status(200), t(0))
            .unwrap_or(false)
    );
    let mut f = reopen(h, f, open_settings(), t(1));
    assert_eq!(f.len(), 4, "2 unacknowledged leases + 2 never polled");
    assert_eq!(f.stats().redelivered, 2, "scheduler/redelivered");
    let mut got = urls(&drain(&mut f, t(1)));
    got.sort();
    let mut want: Vec<String> = (0..5)
        .map(|i| format!("https://a.example.com/{i}"))
        .filter(|u| *u != *done.request.url)
        .collect();
    want.sort();
    assert_eq!(
        got, want,
        "everything but the acknowledged request, exactly once"
    );
    let mut f = reopen(h, f, open_settings(), t(2));
    assert!(
        matches!(f.poll(t(2)), Ok(Poll::Empty)),
        "acknowledged requests stay gone"
    );
}

/// A retried request survives a reopen with its adjusted priority.
pub fn retries_survive_reopen<H: Harness>(h: &mut H) {
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    push(
        &mut f,
        &Request::get("https://a.example.com/first").priority(5),
        t(0),
    );
    push(
        &mut f,
        &Request::get("https://a.example.com/second").priority(3),
        t(0),
    );
    let Ok(Poll::Ready(l)) = f.poll(t(0)) else {
        panic!("expected a lease")
    };
    assert_eq!(&*l.request.url, "https://a.example.com/first");
    assert!(
        f.retry(l.id(), &Outcome::status(200), -4, t(0))
            .unwrap_or(false)
    );
    let mut f = reopen(h, f, open_settings(), t(1));
    assert_eq!(
        urls(&drain(&mut f, t(1))),
        [
            "https://a.example.com/second",
            "https://a.example.com/first"
        ],
        "the retry kept priority 5 - 4 = 1"
    );
}

/// Seen fingerprints (pushed or imported) survive a reopen; `dont_filter` still passes.
pub fn dupefilter_survives_reopen<H: Harness>(h: &mut H) {
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    push(
        &mut f,
        &Request::get("https://a.example.com/x?b=2&a=1"),
        t(0),
    );
    let imported: Fingerprint = fingerprint("GET", "https://b.example.com/old", b"").unwrap();
    f.import_seen(&[imported])
        .unwrap_or_else(|e| panic!("import failed: {e}"));
    let done = drain(&mut f, t(0));
    assert_eq!(done.len(), 1);
    let mut f = reopen(h, f, open_settings(), t(1));
    assert_eq!(
        push(
            &mut f,
            &Request::get("https://a.example.com/x?a=1&b=2#f"),
            t(1)
        ),
        PushOutcome::Duplicate,
        "a crawled URL stays seen after reopening"
    );
    assert_eq!(
        push(&mut f, &Request::get("https://b.example.com/old"), t(1)),
        PushOutcome::Duplicate,
        "an imported fingerprint stays seen"
    );
    assert!(matches!(
        push(
            &mut f,
            &Request::get("https://a.example.com/x?a=1&b=2").dont_filter(),
            t(1)
        ),
        PushOutcome::Queued(_)
    ));
    assert_eq!(f.stats().filtered, 2);
}

/// A per-request delay is applied once: its absolute time survives a reopen.
pub fn delays_are_applied_once<H: Harness>(h: &mut H) {
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    push(
        &mut f,
        &Request::get("https://a.example.com/later").delay(100.0),
        t(0),
    );
    push(&mut f, &Request::get("https://a.example.com/now"), t(0));
    assert_eq!(urls(&drain(&mut f, t(0))), ["https://a.example.com/now"]);
    let mut f = reopen(h, f, open_settings(), t(50));
    assert_eq!(
        f.poll(t(50)).ok(),
        Some(Poll::NotUntil(t(100))),
        "not restarted from the reopen"
    );
    assert_eq!(
        urls(&drain(&mut f, t(100))),
        ["https://a.example.com/later"]
    );
}

/// Throttle scope states saved by `checkpoint` come back: a host backing off stays backed off.
pub fn scope_states_survive_reopen<H: Harness>(h: &mut H) {
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.example.com", ScopeConfig::new().delay(0.0));
    let mut f = open::<H>(h.create(), settings.clone(), t(0));
    push(&mut f, &Request::get("https://a.example.com/1"), t(0));
    push(&mut f, &Request::get("https://a.example.com/2"), t(0));
    let Ok(Poll::Ready(l)) = f.poll(t(0)) else {
        panic!("expected a lease")
    };
    let limited = Outcome::response(429, [("Retry-After", "60")], None);
    f.complete(l.id(), &limited, t(1)).unwrap_or(false);
    let mut f = reopen(h, f, settings, t(2));
    assert_eq!(
        f.poll(t(2)).ok(),
        Some(Poll::NotUntil(t(61))),
        "the Retry-After survived the reopen"
    );
}

/// Ten thousand requests over a hundred hosts: each comes back exactly once, in priority
/// order, after a reopen in the middle.
pub fn many_requests_exactly_once<H: Harness>(h: &mut H) {
    let n = 10_000u32;
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    for i in 0..n {
        let r = Request::get(format!("https://host{}.example.com/p/{i}", i % 100))
            .callback("parse")
            .priority((i % 7) as i32);
        push(&mut f, &r, t(0));
    }
    let mut first = vec![];
    for _ in 0..n / 2 {
        match f.poll(t(0)) {
            Ok(Poll::Ready(l)) => {
                f.complete(l.id(), &Outcome::status(200), t(0))
                    .unwrap_or(false);
                first.push(l.request);
            }
            other => panic!("expected a lease, got {other:?}"),
        }
    }
    let mut f = reopen(h, f, open_settings(), t(1));
    let rest = drain(&mut f, t(1));
    assert_eq!(
        first.len() + rest.len(),
        n as usize,
        "every request exactly once"
    );
    let mut seen: Vec<String> = urls(&first);
    seen.extend(urls(&rest));
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n as usize, "no request twice");
    let priorities: Vec<i32> = first.iter().chain(&rest).map(|r| r.priority).collect();
    assert!(
        priorities.windows(2).all(|w| w[0] >= w[1]),
        "priority order across the reopen"
    );
}

/// A stored payload that no longer decodes is an error naming the request, not a panic,
/// and it can be dropped.
pub fn corrupted_payloads_are_errors<H: Harness>(h: &mut H) {
    let mut f = open::<H>(h.create(), open_settings(), t(0));
    let PushOutcome::Queued(bad) = push(&mut f, &Request::get("https://a.example.com/bad"), t(0))
    else {
        panic!("queued")
    };
    push(
        &mut f,
        &Request::get("https://b.example.com/good").priority(-1),
        t(0),
    );
    let mut store = f.close().unwrap_or_else(|e| panic!("close failed: {e}"));
    h.corrupt_payload(&mut store, bad.0);
    let mut f = open::<H>(h.reopen(store), open_settings(), t(1));
    let err = match f.poll(t(1)) {
        Err(e) => e,
        Ok(poll) => panic!(
            "expected a corruption error for #{}, got {poll:?}: did the harness's \
             corrupt_payload damage the stored payload?",
            bad.0
        ),
    };
    let message = err.to_string();
    let FrontierError::Corrupt { lease, .. } = err else {
        panic!("expected a corruption error for #{}, got {err:?}", bad.0)
    };
    assert_eq!(lease, bad, "the error names the damaged request");
    assert!(
        message.starts_with(&format!("stored request #{}: undecodable", bad.0)),
        "the message names the request and the problem: {message}"
    );
    assert!(
        f.complete(lease, &Outcome::Cancelled, t(1))
            .unwrap_or(false),
        "the damaged request can be dropped"
    );
    assert_eq!(urls(&drain(&mut f, t(1))), ["https://b.example.com/good"]);
}

/// The whole suite.
pub fn run_all<H: Harness>(h: &mut H) {
    order_survives_reopen(h);
    leases_are_redelivered(h);
    retries_survive_reopen(h);
    dupefilter_survives_reopen(h);
    delays_are_applied_once(h);
    scope_states_survive_reopen(h);
    many_requests_exactly_once(h);
    corrupted_payloads_are_errors(h);
}

/// Expands to one `#[test]` per conformance check for the harness built by `$harness`.
#[macro_export]
macro_rules! store_conformance_tests {
    ($harness:expr) => {
        $crate::store_conformance_tests!(@tests $harness;
            order_survives_reopen, leases_are_redelivered, retries_survive_reopen,
            dupefilter_survives_reopen, delays_are_applied_once, scope_states_survive_reopen,
            many_requests_exactly_once, corrupted_payloads_are_errors);
    };
    (@tests $harness:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let mut harness = $harness;
                $crate::conformance::$name(&mut harness);
            }
        )*
    };
}
