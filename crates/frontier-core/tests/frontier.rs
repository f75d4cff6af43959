//! The frontier's behaviour through its public API: ordering rules, throttling-aware
//! scheduling, per-request delays, leases, policies and stats.

use std::time::Duration;

use polite_frontier_core::{
    Frontier, FrontierConfig, Policy, Poll, PushOutcome, QueueOrder, ReferenceStore, Request,
    RequestId, StartOrder, VolatileStore,
};
use polite_throttle_core::{Outcome, RampupConfig, ScopeConfig, ScopeStats, Settings, Timestamp};

type F = Frontier<VolatileStore>;

fn at(secs: f64) -> Timestamp {
    Timestamp::from_secs_f64(secs)
}

/// Settings where throttling never gets in the way.
fn open_settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = 100_000;
    s.concurrent_requests_per_domain = 0;
    s.throttling_scope_concurrency = 0;
    s
}

fn frontier(settings: Settings) -> F {
    Frontier::in_memory(settings, Timestamp::ZERO).unwrap()
}

fn frontier_with(settings: Settings, config: FrontierConfig) -> F {
    Frontier::open(settings, config, VolatileStore::new(), Timestamp::ZERO).unwrap()
}

fn fifo() -> FrontierConfig {
    FrontierConfig::default().scheduler_order(QueueOrder::Fifo)
}

fn push(f: &mut F, req: Request) -> RequestId {
    match f.push(&req, Timestamp::ZERO).unwrap() {
        PushOutcome::Queued(id) => id,
        other => panic!("{} not queued: {other:?}", req.url),
    }
}

/// Polls and completes everything that is ready now; returns the URLs in order.
fn drain(f: &mut F, now: Timestamp) -> Vec<String> {
    let mut out = vec![];
    while let Poll::Ready(lease) = f.poll(now).unwrap() {
        out.push(lease.request.url.to_string());
        f.complete(lease.id(), &Outcome::status(200), now).unwrap();
    }
    out
}

fn url(i: usize) -> String {
    format!("https://example.com/{i}")
}

// ---------------------------------------------------------------------------- order

#[test]
fn higher_priority_first_lifo_within_a_priority() {
    let mut f = frontier(open_settings());
    for (i, p) in [0, 5, 0, -3, 5, 0].into_iter().enumerate() {
        push(&mut f, Request::get(url(i)).priority(p));
    }
    assert_eq!(
        drain(&mut f, at(0.0)),
        [url(4), url(1), url(5), url(2), url(0), url(3)]
    );
}

#[test]
fn fifo_order_when_configured() {
    let mut f = frontier_with(open_settings(), fifo());
    for i in 0..5 {
        push(&mut f, Request::get(url(i)));
    }
    assert_eq!(drain(&mut f, at(0.0)), (0..5).map(url).collect::<Vec<_>>());
}

#[test]
fn start_requests_fifo_and_after_discovered_ones() {
    let mut f = frontier(open_settings());
    push(&mut f, Request::get(url(0)).start());
    push(&mut f, Request::get(url(1)).start());
    push(&mut f, Request::get(url(2)));
    push(&mut f, Request::get(url(3)));
    push(&mut f, Request::get(url(4)).start().priority(1));
    // Priority first; at equal priority discovered (LIFO) before start requests (FIFO).
    assert_eq!(
        drain(&mut f, at(0.0)),
        [url(4), url(3), url(2), url(0), url(1)]
    );
}

#[test]
fn start_order_lifo_and_same() {
    let lifo = FrontierConfig::default().start_order(StartOrder::Lifo);
    let mut f = frontier_with(open_settings(), lifo);
    for i in 0..3 {
        push(&mut f, Request::get(url(i)).start());
    }
    assert_eq!(drain(&mut f, at(0.0)), [url(2), url(1), url(0)]);

    let mut f = frontier_with(open_settings(), fifo().start_order(StartOrder::Same));
    push(&mut f, Request::get(url(0)).start());
    push(&mut f, Request::get(url(1)));
    push(&mut f, Request::get(url(2)).start());
    assert_eq!(
        drain(&mut f, at(0.0)),
        [url(0), url(1), url(2)],
        "one FIFO order"
    );
}

#[test]
fn identical_requests_keep_their_sequence_order() {
    let mut f = frontier_with(open_settings(), fifo());
    let a = push(&mut f, Request::get(url(0)).callback("a").dont_filter());
    let b = push(&mut f, Request::get(url(0)).callback("a").dont_filter());
    assert!(a < b);
    let Poll::Ready(first) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    let Poll::Ready(second) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert_eq!(
        (first.id(), second.id()),
        (a, b),
        "duplicates by payload never collapse"
    );
}

#[test]
fn depth_priority_makes_breadth_first_and_depth_limit_drops() {
    let mut f = frontier_with(open_settings(), fifo().depth_priority(1).depth_limit(2));
    push(&mut f, Request::get(url(0)).depth(2));
    push(&mut f, Request::get(url(1)).depth(1));
    push(&mut f, Request::get(url(2)).depth(0));
    assert_eq!(
        f.push(&Request::get(url(3)).depth(3), at(0.0)).unwrap(),
        PushOutcome::TooDeep
    );
    assert_eq!(drain(&mut f, at(0.0)), [url(2), url(1), url(0)]);
    let stats = f.stats();
    assert_eq!((stats.depth_ignored, stats.depth_max), (1, 2));
}

#[test]
fn duplicates_are_dropped_and_counted_unless_dont_filter() {
    let mut f = frontier(open_settings());
    push(&mut f, Request::get("https://example.com/a?x=1&y=2"));
    assert_eq!(
        f.push(&Request::get("https://example.com/a?y=2&x=1#frag"), at(0.0))
            .unwrap(),
        PushOutcome::Duplicate
    );
    push(
        &mut f,
        Request::get("https://example.com/a?x=1&y=2").dont_filter(),
    );
    push(
        &mut f,
        Request::get("https://example.com/a?x=1&y=2").body(b"other".to_vec()),
    );
    assert_eq!(f.stats().filtered, 1);
    assert_eq!(f.len(), 3);
}

#[test]
fn peek_always_shows_what_poll_returns() {
    let mut s = open_settings();
    s.concurrent_requests_per_domain = 1;
    let mut f = frontier(s.with_scope("slow.com", ScopeConfig::new().delay(3.0)));
    for i in 0..20 {
        let host = ["a.com", "b.com", "slow.com"][i % 3];
        push(
            &mut f,
            Request::get(format!("https://{host}/{i}")).priority((i % 4) as i32),
        );
    }
    let mut now = at(0.0);
    let mut leases = vec![];
    for _ in 0..200 {
        let peeked = f.peek(now).unwrap();
        match f.poll(now).unwrap() {
            Poll::Ready(lease) => {
                assert_eq!(peeked.as_ref(), Some(&lease.request));
                leases.push(lease.id());
            }
            _ => {
                assert_eq!(peeked, None);
                for id in leases.drain(..) {
                    f.complete(id, &Outcome::status(200), now).unwrap();
                }
                now += Duration::from_millis(500);
            }
        }
    }
    assert!(f.is_empty());
}

// ----------------------------------------------------------- throttling-aware scheduling

#[test]
fn a_slow_scope_never_holds_up_a_fast_one() {
    let settings = Settings::default()
        .without_jitter()
        .with_scope("slow.example.com", ScopeConfig::new().delay(100.0));
    let mut f = frontier(settings);
    for i in 0..3 {
        push(
            &mut f,
            Request::get(format!("https://slow.example.com/{i}")).priority(10),
        );
    }
    for i in 0..50 {
        push(
            &mut f,
            Request::get(format!("https://fast.example.com/{i}")),
        );
    }
    // One slow request goes (it is first by priority), then all fast ones at once.
    let sent = drain(&mut f, at(0.0));
    assert_eq!(sent.len(), 51);
    assert!(sent[0].contains("slow"));
    assert!(sent[1..].iter().all(|u| u.contains("fast")));
    // The poll reports exactly when the slow host may send again.
    assert_eq!(f.poll(at(1.0)).unwrap(), Poll::NotUntil(at(100.0)));
    assert_eq!(f.poll_timeout(), Some(at(100.0)));
    assert_eq!(drain(&mut f, at(99.9)).len(), 0);
    assert_eq!(drain(&mut f, at(100.0)).len(), 1);
    assert_eq!(f.poll(at(100.0)).unwrap(), Poll::NotUntil(at(200.0)));
}

#[test]
fn blocked_until_a_completion_and_empty_when_done() {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests_per_domain = 2;
    let mut f = frontier(s);
    for i in 0..3 {
        push(&mut f, Request::get(url(i)));
    }
    let Poll::Ready(a) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    let Poll::Ready(_b) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::Blocked);
    assert_eq!(f.poll_timeout(), None);
    assert!(f.complete(a.id(), &Outcome::status(200), at(1.0)).unwrap());
    assert!(
        !f.complete(a.id(), &Outcome::status(200), at(1.0)).unwrap(),
        "idempotent"
    );
    let Poll::Ready(_c) = f.poll(at(1.0)).unwrap() else {
        panic!()
    };
    assert_eq!(f.poll(at(1.0)).unwrap(), Poll::Empty);
    assert_eq!(f.in_flight(), 2);
}

#[test]
fn the_global_cap_blocks_all_but_dont_throttle() {
    let mut s = open_settings();
    s.concurrent_requests = 2;
    let mut f = frontier(s);
    for i in 0..4 {
        push(&mut f, Request::get(format!("https://h{i}.com/")));
    }
    push(
        &mut f,
        Request::get("https://free.com/")
            .dont_throttle()
            .priority(-10),
    );
    let Poll::Ready(_) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    let Poll::Ready(_) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    let Poll::Ready(free) = f.poll(at(0.0)).unwrap() else {
        panic!("dont_throttle bypasses the cap")
    };
    assert_eq!(&*free.request.url, "https://free.com/");
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::Blocked);
}

#[test]
fn backoff_from_a_completion_delays_only_that_scope() {
    let mut f = frontier(Settings::default().without_jitter());
    push(&mut f, Request::get("https://a.com/1"));
    push(&mut f, Request::get("https://a.com/2"));
    push(&mut f, Request::get("https://b.com/1"));
    let Poll::Ready(first) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert!(
        first.request.url.contains("a.com"),
        "equal ranks: the older group first"
    );
    let limited = Outcome::response(429, [("Retry-After", "30")], None);
    f.complete(first.id(), &limited, at(0.5)).unwrap();
    let sent = drain(&mut f, at(0.5));
    assert_eq!(sent, ["https://b.com/1"]);
    assert_eq!(f.poll(at(0.5)).unwrap(), Poll::NotUntil(at(30.5)));
    assert_eq!(drain(&mut f, at(30.5)), ["https://a.com/1"]);
}

#[test]
fn equal_priority_prefers_lower_load_then_round_robin() {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = 1000;
    let mut f = frontier(
        s.with_scope("busy.com", ScopeConfig::new().concurrency(4))
            .with_scope("idle.com", ScopeConfig::new().concurrency(4)),
    );
    for i in 0..4 {
        push(&mut f, Request::get(format!("https://busy.com/{i}")));
        push(&mut f, Request::get(format!("https://idle.com/{i}")));
    }
    // Interleaved: after each send the other group has the lower load.
    let mut hosts = vec![];
    let mut leases = vec![];
    while let Poll::Ready(l) = f.poll(at(0.0)).unwrap() {
        hosts.push(if l.request.url.contains("busy") {
            'b'
        } else {
            'i'
        });
        leases.push(l);
    }
    assert_eq!(hosts.len(), 8);
    for pair in hosts.chunks(2) {
        assert_ne!(pair[0], pair[1], "{hosts:?}");
    }
}

#[test]
fn equal_priority_and_load_prefers_the_larger_quota_amount() {
    let mut f = frontier(
        open_settings().with_scope("cost", ScopeConfig::new().concurrency(0).quota(1000.0)),
    );
    push(
        &mut f,
        Request::get("https://api.com/small").scope_amount("cost", 1.0),
    );
    push(
        &mut f,
        Request::get("https://api.com/large").scope_amount("cost", 9.0),
    );
    push(
        &mut f,
        Request::get("https://api.com/medium").scope_amount("cost", 4.0),
    );
    assert_eq!(
        drain(&mut f, at(0.0)),
        [
            "https://api.com/large",
            "https://api.com/medium",
            "https://api.com/small"
        ]
    );
}

#[test]
fn a_shared_scope_admits_its_groups_one_at_a_time() {
    // 200 hosts all behind one API scope with a 1 s delay: each second one request goes,
    // and every poll is answered without waking all 200 groups.
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = 1000;
    let mut f = frontier(s.with_scope("api", ScopeConfig::new().concurrency(0).delay(1.0)));
    for i in 0..200 {
        push(
            &mut f,
            Request::get(format!("https://h{i}.example.com/"))
                .scope("api")
                .scope(format!("h{i}.example.com")),
        );
    }
    for second in 0..200 {
        let now = at(second as f64);
        assert_eq!(drain(&mut f, now).len(), 1, "second {second}");
        if second < 199 {
            assert_eq!(
                f.poll(now).unwrap(),
                Poll::NotUntil(at(second as f64 + 1.0))
            );
        }
    }
    assert!(f.is_empty());
}

#[test]
fn a_concurrency_limited_shared_scope_hands_slots_over() {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = 1000;
    let mut f = frontier(s.with_scope("api", ScopeConfig::new().concurrency(3)));
    for i in 0..30 {
        push(
            &mut f,
            Request::get(format!("https://h{i}.example.com/")).scope("api"),
        );
    }
    let mut done = 0;
    let mut leases: Vec<_> = std::iter::from_fn(|| match f.poll(at(0.0)).unwrap() {
        Poll::Ready(l) => Some(l),
        _ => None,
    })
    .collect();
    assert_eq!(leases.len(), 3);
    while let Some(l) = leases.pop() {
        f.complete(l.id(), &Outcome::status(200), at(1.0)).unwrap();
        done += 1;
        if let Poll::Ready(next) = f.poll(at(1.0)).unwrap() {
            leases.push(next);
        }
        assert!(leases.len() <= 3);
    }
    assert_eq!(done, 30);
}

// ------------------------------------------------------------------- per-request delay

#[test]
fn a_delayed_request_waits_aside_and_keeps_its_place_afterwards() {
    let mut f = frontier_with(open_settings(), fifo());
    push(&mut f, Request::get(url(0)).delay(5.0));
    push(&mut f, Request::get(url(1)));
    assert_eq!(
        drain(&mut f, at(0.0)),
        [url(1)],
        "the delay does not block its group"
    );
    assert_eq!(f.poll(at(1.0)).unwrap(), Poll::NotUntil(at(5.0)));
    assert_eq!(f.len(), 1);
    push(&mut f, Request::get(url(2)));
    push(&mut f, Request::get(url(3)));
    assert_eq!(drain(&mut f, at(4.0)), [url(2), url(3)]);
    push(&mut f, Request::get(url(4)));
    // From 5 s on it competes normally, at its sequence position: FIFO puts it (pushed
    // first) before url(4).
    assert_eq!(drain(&mut f, at(5.0)), [url(0), url(4)]);
    assert!(
        f.push(&Request::get(url(9)).delay(f64::NAN), at(0.0))
            .is_err()
    );
}

// ------------------------------------------------------------------------- leases

#[test]
fn retry_puts_a_lease_back_with_its_priority_adjusted() {
    let mut f = frontier(open_settings());
    push(&mut f, Request::get(url(0)).priority(3));
    push(&mut f, Request::get(url(1)).priority(2));
    let Poll::Ready(l) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*l.request.url, url(0));
    assert!(
        f.retry(l.id(), &Outcome::error("timeout"), -2, at(0.0))
            .unwrap()
    );
    assert!(
        !f.retry(l.id(), &Outcome::error("timeout"), -2, at(0.0))
            .unwrap()
    );
    // The timeout backed example.com off (1 s spacing while at level 1); then url(1)
    // (priority 2) before url(0) (now 1).
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::NotUntil(at(1.0)));
    assert_eq!(drain(&mut f, at(1.0)), [url(1)]);
    assert_eq!(drain(&mut f, at(2.0)), [url(0)]);
    let st = f.stats();
    assert_eq!((st.retried, st.enqueued, st.acked), (1, 3, 2));
}

#[test]
fn retrying_the_only_request_of_a_scope_keeps_it_schedulable() {
    // Releasing the lease leaves its group empty (nothing queued, nothing in flight), so
    // the scheduler frees it; the retried request must land in a live group and go out
    // once the Retry-After wait ends, not be stuck behind `Blocked` forever.
    let mut f = frontier(Settings::default().without_jitter());
    push(&mut f, Request::get(url(0)));
    let Poll::Ready(l) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    let limited = Outcome::response(429, [("Retry-After", "3")], None);
    assert!(f.retry(l.id(), &limited, -1, at(0.5)).unwrap());
    assert_eq!(f.len(), 1);
    assert_eq!(f.poll(at(0.5)).unwrap(), Poll::NotUntil(at(3.5)));
    assert_eq!(f.poll_timeout(), Some(at(3.5)));
    let Poll::Ready(again) = f.poll(at(3.5)).unwrap() else {
        panic!("the retried request is not handed out")
    };
    assert_eq!(&*again.request.url, url(0));
    // Another host pushed meanwhile must not inherit the old group's slot.
    push(&mut f, Request::get("https://other.example/"));
    assert_eq!(drain(&mut f, at(3.5)), ["https://other.example/"]);
    assert!(
        f.complete(again.id(), &Outcome::status(200), at(4.0))
            .unwrap()
    );
    assert!(f.is_empty());
}

#[test]
fn dont_track_outcomes_never_back_off() {
    let mut f = frontier(Settings::default().without_jitter());
    push(&mut f, Request::get(url(1)));
    push(&mut f, Request::get(url(0)).dont_track());
    let Poll::Ready(l) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert!(l.request.dont_track);
    f.complete(l.id(), &Outcome::status(429), at(0.0)).unwrap();
    assert_eq!(
        drain(&mut f, at(0.0)).len(),
        1,
        "no backoff from a dont_track request"
    );
}

#[test]
fn stats_use_scrapys_names() {
    let mut f = Frontier::open(
        open_settings(),
        FrontierConfig::default(),
        ReferenceStore::new(),
        Timestamp::ZERO,
    )
    .unwrap();
    f.push(&Request::get(url(0)), at(0.0)).unwrap();
    f.push(&Request::get(url(0)), at(0.0)).unwrap();
    let Poll::Ready(l) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    f.complete(l.id(), &Outcome::status(200), at(0.0)).unwrap();
    let named = f.stats().named();
    for (name, value) in [
        ("scheduler/enqueued", 1),
        ("scheduler/enqueued/reference", 1),
        ("scheduler/dequeued", 1),
        ("dupefilter/filtered", 1),
        ("scheduler/leased", 1),
        ("scheduler/acked", 1),
        ("scheduler/redelivered", 0),
    ] {
        assert!(
            named.contains(&(name.to_string(), value)),
            "{name} in {named:?}"
        );
    }
}

// ------------------------------------------------------------------------- policies

#[test]
fn slot_aware_policy_prefers_idle_slots_round_robin_by_name() {
    let config = FrontierConfig::default().policy(Policy::SlotAware);
    let mut f = Frontier::open(
        open_settings(),
        config,
        VolatileStore::new(),
        Timestamp::ZERO,
    )
    .unwrap();
    for host in ["c.com", "a.com", "b.com"] {
        for i in 0..3 {
            f.push(
                &Request::get(format!("https://{host}/{i}")).priority(i),
                at(0.0),
            )
            .unwrap();
        }
    }
    // All idle: round-robin by name, each slot's best priority first.
    let mut order = vec![];
    for _ in 0..3 {
        let Poll::Ready(l) = f.poll(at(0.0)).unwrap() else {
            panic!()
        };
        order.push(l.request.url.to_string());
        f.complete(l.id(), &Outcome::status(200), at(0.0)).unwrap();
    }
    assert_eq!(
        order,
        ["https://a.com/2", "https://b.com/2", "https://c.com/2"]
    );
    // With a.com busy (one in flight), the idle slots go first.
    let Poll::Ready(busy) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*busy.request.url, "https://a.com/1");
    let Poll::Ready(next) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*next.request.url, "https://b.com/1");
    let Poll::Ready(next) = f.poll(at(0.0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*next.request.url, "https://c.com/1");
}

#[test]
fn woken_groups_tie_break_on_current_load_then_quota_amount() {
    // Two groups share `api.example.com` (concurrency 2, delay 0.25 s): searches also
    // spend 3 `credits`, the status check spends none. At 0.5 s a search completes and
    // both groups are ready at the same priority and the same api load (1/2): the larger
    // quota amount goes first (docs/behaviour.md 4.3). The status group parked while the api was
    // idle; ranking it with that stale load would send it first.
    let settings = Settings::default()
        .without_jitter()
        .with_scope(
            "api.example.com",
            ScopeConfig::new().concurrency(2).delay(0.25),
        )
        .with_scope("credits", ScopeConfig::new().quota(100.0).concurrency(0));
    let mut f = frontier_with(settings, fifo());
    let search = |i: u32| {
        Request::get(format!("https://api.example.com/s?q={i}"))
            .scope_amount("api.example.com", 1.0)
            .scope_amount("credits", 3.0)
    };
    for i in 1..=3 {
        push(&mut f, search(i));
    }
    push(
        &mut f,
        Request::get("https://api.example.com/status").scope("api.example.com"),
    );
    let take = |f: &mut F, t: f64| match f.poll(at(t)).unwrap() {
        Poll::Ready(l) => l,
        other => panic!("at {t}: {other:?}"),
    };
    let first = take(&mut f, 0.0);
    assert!(first.request.url.ends_with("q=1"));
    // A driver polls again at once: everything waits for the api's delay.
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::NotUntil(at(0.25)));
    let second = take(&mut f, 0.25);
    assert!(second.request.url.ends_with("q=2"));
    // The api is full: everything parks until a completion.
    assert_eq!(f.poll(at(0.25)).unwrap(), Poll::Blocked);
    assert!(
        f.complete(first.id(), &Outcome::status(200), at(0.5))
            .unwrap()
    );
    let third = take(&mut f, 0.5);
    assert!(
        third.request.url.ends_with("q=3"),
        "got {}",
        third.request.url
    );
}

/// Requests too long for a queue slot (their payloads spill into the store's cells, or
/// are boxed beyond 1 KiB) come back whole through polls, retries and completions, and
/// every cell is given back once the last one is done.
#[test]
fn long_urls_come_back_whole_and_give_their_cells_back() {
    let mut f = frontier(open_settings());
    let mut left = std::collections::BTreeMap::new();
    for i in 0..800usize {
        let len = [5, 50, 70, 130, 300, 700, 1_000, 2_500][i % 8];
        let url = format!("https://h{}.example.com/{}?i={i}", i % 7, "x".repeat(len));
        f.push(&Request::get(url.as_str()), Timestamp::ZERO)
            .unwrap();
        left.insert(url, i % 3 == 0);
    }
    // 50 to 1,000 characters spill (100 each of six lengths); 5 stay inline, 2,500 are boxed.
    assert!(
        format!("{:?}", f.store()).contains("spilled_payloads: 600"),
        "{:?}",
        f.store()
    );
    let mut now = Timestamp::ZERO;
    loop {
        match f.poll(now).unwrap() {
            Poll::Ready(lease) => {
                let url = String::from(&*lease.request.url);
                let retry = left.get_mut(&url).expect("a URL that was pushed, whole");
                if std::mem::take(retry) {
                    assert!(f.retry(lease.id(), &Outcome::status(503), 0, now).unwrap());
                } else {
                    f.complete(lease.id(), &Outcome::status(200), now).unwrap();
                    left.remove(&url);
                }
            }
            Poll::NotUntil(t) => now = t,
            Poll::Blocked | Poll::Empty => break,
        }
    }
    assert!(left.is_empty(), "{} never came back", left.len());
    assert!(
        format!("{:?}", f.store()).contains("spilled_payloads: 0"),
        "{:?}",
        f.store()
    );
}

// ------------------------------------------------------------ lazy updates and wake-ups

/// A host on rampup at its delay floor, one request at a time, raising its concurrency
/// every quiet 10 s window up to 3.
fn long_latency_rampup() -> Settings {
    Settings::default()
        .without_jitter()
        .backoff_window(10)
        .with_scope(
            "api.example",
            ScopeConfig::new()
                .delay(0.0)
                .max_concurrency(3)
                .rampup(RampupConfig::default().min_delay(0.0)),
        )
}

/// A scope's state as of the last operation on it.
fn scope_stats(f: &F, scope: &str) -> ScopeStats {
    f.throttler()
        .scopes()
        .find(|(name, _)| *name == scope)
        .map(|(_, st)| st)
        .expect("scope state in memory")
}

fn ready(p: Poll) -> polite_frontier_core::Lease {
    match p {
        Poll::Ready(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

#[test]
fn a_rampup_step_releases_a_waiting_request_at_the_window_boundary() {
    let mut f = frontier(long_latency_rampup());
    for i in 0..4 {
        push(&mut f, Request::get(format!("https://api.example/{i}")));
    }
    let _slow = ready(f.poll(at(0.0)).unwrap());
    // The responses take 100 s, but rampup may raise the concurrency at 10: the frontier
    // names that instant, and a poll then hands the next request out.
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::NotUntil(at(10.0)));
    assert_eq!(f.poll_timeout(), Some(at(10.0)));
    assert_eq!(f.poll(at(9.9)).unwrap(), Poll::NotUntil(at(10.0)));
    let _second = ready(f.poll(at(10.0)).unwrap());
    assert_eq!(scope_stats(&f, "api.example").concurrency, 2);
    assert_eq!(f.poll(at(10.0)).unwrap(), Poll::NotUntil(at(20.0)));
    let _third = ready(f.poll(at(20.0)).unwrap());
    // At max_concurrency only a completion makes room.
    assert_eq!(f.poll(at(20.0)).unwrap(), Poll::Blocked);
    assert_eq!(f.poll_timeout(), None);
    assert_eq!(f.poll(at(99.0)).unwrap(), Poll::Blocked);
    f.complete(_slow.id(), &Outcome::status(200), at(100.0))
        .unwrap();
    let _fourth = ready(f.poll(at(100.0)).unwrap());
}

#[test]
fn a_rampup_step_wakes_one_parked_group_of_a_shared_scope_at_a_time() {
    // Two groups (an explicit scope and the host with it) share the rampup scope.
    let mut f = frontier(long_latency_rampup());
    push(&mut f, Request::get("https://api.example/a"));
    push(
        &mut f,
        Request::get("https://api.example/b")
            .scope("api.example")
            .scope("other"),
    );
    push(&mut f, Request::get("https://api.example/c"));
    let _first = ready(f.poll(at(0.0)).unwrap());
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::NotUntil(at(10.0)));
    let _second = ready(f.poll(at(10.0)).unwrap());
    assert_eq!(f.poll(at(10.0)).unwrap(), Poll::NotUntil(at(20.0)));
    let _third = ready(f.poll(at(20.0)).unwrap());
    assert_eq!(f.poll(at(20.0)).unwrap(), Poll::Empty);
}

#[test]
fn zero_length_windows_in_the_frontier() {
    // A quota window of 0 resets on every request: nothing waits for quota.
    let mut s = open_settings().with_scope(
        "cost",
        ScopeConfig::new().concurrency(0).quota(1.0).window(0.0),
    );
    // A backoff window of 0 recovers at once: a 429 holds the host for the backoff step
    // (1 s from the trigger), then sends are spaced by its own delay again.
    s.backoff_window = 0.0;
    let mut s = s.with_scope("a.com", ScopeConfig::new().delay(0.25));
    s.concurrent_requests_per_domain = 8;
    let mut f = frontier(s);
    for i in 0..3 {
        push(
            &mut f,
            Request::get(format!("https://q.com/{i}")).scope_amount("cost", 5.0),
        );
    }
    assert_eq!(drain(&mut f, at(0.0)).len(), 3);
    for i in 0..3 {
        push(&mut f, Request::get(format!("https://a.com/{i}")));
    }
    let first = ready(f.poll(at(0.0)).unwrap());
    f.complete(first.id(), &Outcome::status(429), at(0.0))
        .unwrap();
    assert_eq!(f.poll(at(0.0)).unwrap(), Poll::NotUntil(at(1.0)));
    let _ = ready(f.poll(at(1.0)).unwrap());
    assert_eq!(f.poll(at(1.0)).unwrap(), Poll::NotUntil(at(1.25)));
    let st = scope_stats(&f, "a.com");
    assert_eq!((st.level, st.delay), (0, 0.25));
}

#[test]
fn a_request_names_at_most_max_scopes_and_they_round_trip() {
    use polite_frontier_core::MAX_SCOPES;
    let now = Timestamp::ZERO;
    let mut f = Frontier::in_memory(Settings::default().without_jitter(), now).unwrap();
    let mut full = Request::get("https://example.com/full");
    for i in 0..MAX_SCOPES {
        full = full.scope_amount(format!("s{i}"), 0.5);
    }
    f.push(&full, now).unwrap();
    let too_many = (0..=MAX_SCOPES).fold(Request::get("https://example.com/more"), |r, i| {
        r.scope(format!("s{i}"))
    });
    let err = f.push(&too_many, now).unwrap_err().to_string();
    assert!(err.contains(&format!("more than {MAX_SCOPES}")), "{err}");
    let Poll::Ready(lease) = f.poll(now).unwrap() else {
        panic!("the full request is ready");
    };
    assert_eq!(lease.request, full, "all {MAX_SCOPES} scopes decoded back");
}
