//! Conformance: the same fake-clock timelines run through the in-process frontier
//! (`polite_frontier_core::Frontier`, which owns `polite_throttle_core::Throttler`) and through the Redis
//! frontier must produce identical decisions, step by step: push outcomes and lease ids,
//! what each poll hands out (or `NotUntil(t)` / `Blocked` / `Empty`), completions and
//! retries, Crawl-delay decisions, and every touched scope's state (delay, backoff level,
//! concurrency, next send times, quota consumed, counters).
//!
//! Scripted timelines cover each rule (delay, backoff steps, recovery, header delays,
//! quotas, multi-scope admission, rampup, ordering); random timelines (seeded, with and
//! without jitter) mix them all.
//!
//! This file holds the harness (`run_both`) and the scripted timelines; `random` holds the
//! random timelines, `permits` the standalone-permit differential (`run_permits`), `suite`
//! the invariant checks any `Scheduling` implementation runs (`suite::run_suite`).

mod permits;
mod random;
mod suite;

use std::sync::OnceLock;

use polite_frontier_core::{
    Frontier, FrontierConfig, Poll, PushOutcome, QueueOrder, Request, RequestId, StartOrder,
};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{RedisConfig, RedisFrontier, RedisPermit, RedisScopeStats, ScriptMode};
use polite_throttle_core::{
    BackoffConfig, BackoffTarget, Jitter, NotReady, Outcome, Permit, QuotaReconcile, RampupConfig,
    ScopeConfig, ScopeStats, ScopeUse, Settings, Throttler, Timestamp,
};

fn server() -> Option<&'static RedisServer> {
    static SERVER: OnceLock<Option<RedisServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| RedisServer::start_or_skip("polite-store-redis conformance"))
        .as_ref()
}

fn crawl_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("conf{}", N.fetch_add(1, Ordering::Relaxed))
}

/// One input of a timeline.
#[derive(Clone, Debug)]
enum Step {
    Push(Request),
    Poll,
    /// What the next poll would hand out, without leasing it.
    Peek,
    /// Completes the `n`-th oldest lease still out (modulo their number).
    Complete(usize, Out),
    Retry(usize, Out, i32),
    Advance(u64),
    /// Jumps to the time of the last `NotUntil` answer.
    Sleep,
    DelayScope(&'static str, f64),
    CrawlDelay(&'static str, f64),
    SetDelay(&'static str, f64),
    SetConcurrency(&'static str, u32),
    Reconcile(&'static str, QuotaReconcile),
}

#[derive(Clone, Copy, Debug)]
enum Out {
    Ok,
    Status(u16),
    RetryAfter(u16, u32),
    /// A response announcing its budget spent until a reset this many seconds away.
    Spent(u16, u32),
    Error(&'static str),
    Cancelled,
}

impl Out {
    fn outcome(self) -> Outcome<'static> {
        match self {
            Out::Ok => Outcome::status(200),
            Out::Status(s) => Outcome::status(s),
            Out::RetryAfter(s, secs) => {
                let v = secs.to_string();
                Outcome::response(s, [("Retry-After", v.as_str())], None)
            }
            Out::Spent(s, secs) => {
                let v = secs.to_string();
                let h = [
                    ("X-RateLimit-Remaining", "0"),
                    ("X-RateLimit-Reset", v.as_str()),
                ];
                Outcome::response(s, h, None)
            }
            Out::Error(k) => Outcome::error(k),
            Out::Cancelled => Outcome::Cancelled,
        }
    }
}

/// What one side answered to a step (compared between the two sides).
#[derive(Debug, PartialEq)]
enum Answer {
    Pushed(Result<PushOutcome, String>),
    Polled(String),
    Done(bool),
    Ok,
    Text(String),
}

fn poll_text(p: &Poll) -> String {
    match p {
        Poll::Ready(l) => format!("ready #{} {}", l.id().0, l.request.url),
        Poll::NotUntil(t) => format!("until {}", t.as_nanos()),
        Poll::Blocked => "blocked".into(),
        Poll::Empty => "empty".into(),
    }
}

fn core_stats(s: &ScopeStats) -> String {
    format!(
        "sent {} done {} trig {} active {} base {:?} delay {:?} conc {} level {} next {} hard {} consumed {:?}",
        s.sent,
        s.done,
        s.triggers,
        s.active,
        s.base_delay,
        s.delay,
        s.concurrency,
        s.level,
        s.next_allowed.as_nanos(),
        s.hard_until.as_nanos(),
        s.consumed
    )
}

fn redis_stats(s: &RedisScopeStats) -> String {
    format!(
        "sent {} done {} trig {} active {} base {:?} delay {:?} conc {} level {} next {} hard {} consumed {:?}",
        s.sent,
        s.done,
        s.triggers,
        s.active,
        s.base_delay,
        s.delay,
        s.concurrency,
        s.level,
        s.next_allowed.as_nanos(),
        s.hard_until.as_nanos(),
        s.consumed
    )
}

thread_local! {
    /// The poll answers of the last timeline run on this thread (both sides agreed on
    /// them), for tests that also check what the answers were.
    static POLLS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The throttler's settings and the frontier's options both sides run with.
struct Setup {
    settings: Settings,
    frontier: FrontierConfig,
}

impl From<Settings> for Setup {
    fn from(settings: Settings) -> Self {
        Setup {
            settings,
            frontier: FrontierConfig::default(),
        }
    }
}

impl From<(Settings, FrontierConfig)> for Setup {
    fn from((settings, frontier): (Settings, FrontierConfig)) -> Self {
        Setup { settings, frontier }
    }
}

/// Runs `steps` through both frontiers and panics at the first difference.
fn run_both(name: &str, setup: impl Into<Setup>, scopes: &[&str], steps: &[Step]) -> usize {
    run_both_with(name, setup, scopes, steps, ScriptMode::Function)
}

fn run_both_with(
    name: &str,
    setup: impl Into<Setup>,
    scopes: &[&str],
    steps: &[Step],
    script: ScriptMode,
) -> usize {
    let Some(server) = server() else { return 0 };
    let Setup { settings, frontier } = setup.into();
    let start = Timestamp::from_secs(1000);
    let mut core = Frontier::open(
        settings.clone(),
        frontier.clone(),
        polite_frontier_core::VolatileStore::new(),
        start,
    )
    .unwrap();
    // Leases never expire here: the in-process frontier redelivers only on reopen.
    let config = RedisConfig::default()
        .lease_timeout(std::time::Duration::from_secs(86_400 * 30))
        .script(script)
        .frontier(frontier);
    let mut redis = RedisFrontier::open(&server.url(), &crawl_name(), settings, config).unwrap();
    let mut now = start;
    let mut last_until = None;
    let mut leases: Vec<RequestId> = Vec::new();
    let mut compared = 0;
    POLLS.with(|p| p.borrow_mut().clear());
    for (i, step) in steps.iter().enumerate() {
        let (a, b) = match step {
            Step::Push(r) => (
                Answer::Pushed(core.push(r, now).map_err(|e| e.to_string())),
                Answer::Pushed(redis.push(r, now).map_err(|e| e.to_string())),
            ),
            Step::Poll => {
                let pa = core.poll(now).unwrap();
                let pb = redis.poll(now).unwrap();
                if let Poll::NotUntil(t) = pa {
                    last_until = Some(t);
                }
                if let Poll::Ready(l) = &pa {
                    leases.push(l.id());
                }
                if let (Poll::Ready(x), Poll::Ready(y)) = (&pa, &pb) {
                    assert_eq!(
                        x.request, y.request,
                        "{name} step {i}: leased requests differ"
                    );
                }
                POLLS.with(|p| p.borrow_mut().push(poll_text(&pa)));
                (
                    Answer::Polled(poll_text(&pa)),
                    Answer::Polled(poll_text(&pb)),
                )
            }
            Step::Complete(n, out) | Step::Retry(n, out, _) => {
                if leases.is_empty() {
                    continue;
                }
                let id = leases.remove(n % leases.len());
                let o = out.outcome();
                match step {
                    Step::Retry(_, _, adj) => (
                        Answer::Done(core.retry(id, &o, *adj, now).unwrap()),
                        Answer::Done(redis.retry(id, &o, *adj, now).unwrap()),
                    ),
                    _ => (
                        Answer::Done(core.complete(id, &o, now).unwrap()),
                        Answer::Done(redis.complete(id, &o, now).unwrap()),
                    ),
                }
            }
            Step::Peek => {
                let pa = core.peek(now).unwrap();
                let pb = redis.peek(now).unwrap();
                (
                    Answer::Text(format!("{:?}", pa.map(|r| r.url))),
                    Answer::Text(format!("{:?}", pb.map(|r| r.url))),
                )
            }
            Step::Advance(ms) => {
                now += std::time::Duration::from_millis(*ms);
                continue;
            }
            Step::Sleep => {
                if let Some(t) = last_until.take() {
                    now = now.max(t);
                }
                continue;
            }
            Step::DelayScope(s, secs) => {
                core.delay_scope(s, *secs, now).unwrap();
                redis.delay_scope(s, *secs, now).unwrap();
                (Answer::Ok, Answer::Ok)
            }
            Step::CrawlDelay(s, secs) => (
                Answer::Text(format!(
                    "{:?}",
                    core.handle_crawl_delay(s, *secs, now).unwrap()
                )),
                Answer::Text(format!(
                    "{:?}",
                    redis.handle_crawl_delay(s, *secs, now).unwrap()
                )),
            ),
            Step::SetDelay(s, secs) => {
                core.set_scope_delay(s, *secs, now).unwrap();
                redis.set_scope_delay(s, *secs, now).unwrap();
                (Answer::Ok, Answer::Ok)
            }
            Step::SetConcurrency(s, c) => (
                Answer::Text(format!(
                    "{:?}",
                    core.set_scope_concurrency(s, *c, now).is_ok()
                )),
                Answer::Text(format!(
                    "{:?}",
                    redis.set_scope_concurrency(s, *c, now).is_ok()
                )),
            ),
            Step::Reconcile(s, how) => {
                core.reconcile_quota(s, *how, now).unwrap();
                redis.reconcile_quota(s, *how, now).unwrap();
                (Answer::Ok, Answer::Ok)
            }
        };
        assert_eq!(
            a, b,
            "{name} step {i} ({step:?}) at {now:?}: in-process vs redis"
        );
        compared += 1;
        // Every scope's state after every step, as of the last operation on it (a
        // read that changes nothing on either side).
        for s in scopes {
            let ca = core
                .throttler()
                .scopes()
                .find(|(n, _)| n == s)
                .map(|(_, st)| st);
            let cb = redis.scope_stats_raw(s).unwrap();
            match (ca, cb) {
                (None, None) => {}
                (Some(cs), Some(rs)) => assert_eq!(
                    core_stats(&cs),
                    redis_stats(&rs),
                    "{name} step {i} ({step:?}) at {now:?}: scope {s} state differs"
                ),
                (x, y) => panic!(
                    "{name} step {i} ({step:?}): scope {s} exists in-process {}, in redis {}",
                    x.is_some(),
                    y.is_some()
                ),
            }
        }
    }
    // Both agree on the counters too.
    let info = redis.info().unwrap();
    let st = core.stats();
    assert_eq!(
        (
            info.stats.enqueued,
            info.stats.dequeued,
            info.stats.filtered,
            info.stats.acked,
            info.stats.retried,
            info.stats.depth_ignored,
            info.stats.depth_max
        ),
        (
            st.enqueued,
            st.dequeued,
            st.filtered,
            st.acked,
            st.retried,
            st.depth_ignored,
            st.depth_max
        ),
        "{name}: stats differ"
    );
    assert_eq!(
        info.queued + info.delayed,
        core.len() as u64,
        "{name}: queue length"
    );
    compared
}

fn get(url: &str) -> Request {
    Request::get(url)
}

fn base() -> Settings {
    Settings::default().without_jitter()
}

#[test]
fn delay_and_concurrency() {
    let s = base()
        .with_scope("a.com", ScopeConfig::new().delay(2.0).concurrency(1))
        .with_scope("b.com", ScopeConfig::new().delay(0.5).concurrency(2));
    let mut steps = Vec::new();
    for i in 0..6 {
        steps.push(Step::Push(get(&format!("https://a.com/{i}"))));
        steps.push(Step::Push(get(&format!("https://b.com/{i}"))));
    }
    for _ in 0..30 {
        steps.extend([
            Step::Poll,
            Step::Poll,
            Step::Complete(0, Out::Ok),
            Step::Poll,
            Step::Sleep,
            Step::Advance(100),
        ]);
    }
    run_both("delay_and_concurrency", s, &["a.com", "b.com"], &steps);
}

#[test]
fn backoff_steps_recovery_and_header_delays() {
    let mut s = base().with_scope("a.com", ScopeConfig::new().delay(0.5).concurrency(1));
    s.backoff_window = 10.0;
    let mut steps = Vec::new();
    for i in 0..20 {
        steps.push(Step::Push(get(&format!("https://a.com/{i}"))));
    }
    let outs = [
        Out::Status(429),
        Out::Status(503),
        Out::Ok,
        Out::RetryAfter(429, 7),
        Out::Status(200),
        Out::Error("timeout"),
        Out::Error("dns"),
        Out::RetryAfter(200, 30),   // not a trigger: ignored
        Out::Status(500),           // not in the default codes
        Out::RetryAfter(503, 1000), // capped at backoff_max_delay
        Out::Spent(200, 4),         // held until the reset, no backoff step
        Out::Spent(429, 9),
        Out::Spent(200, 5000), // capped
    ];
    for round in 0..20 {
        steps.extend([
            Step::Poll,
            Step::Advance(300),
            Step::Complete(0, outs[round % outs.len()]),
            Step::Poll,
            Step::Sleep,
            Step::Poll,
            Step::Advance(4000),
        ]);
    }
    run_both("backoff", s, &["a.com"], &steps);
}

#[test]
fn quotas_and_reconcile() {
    let s = base()
        .with_scope(
            "api",
            ScopeConfig::new().quota(5.0).window(10.0).concurrency(0),
        )
        .with_scope(
            "cost",
            ScopeConfig::new().quota(10.0).window(30.0).concurrency(0),
        );
    let mut steps = Vec::new();
    for i in 0..30 {
        let mut r = get(&format!("https://api.example.com/q/{i}")).scope("api");
        if i % 3 == 0 {
            r = r.scope_amount("cost", 4.0);
        }
        steps.push(Step::Push(r));
    }
    for round in 0..40 {
        steps.extend([Step::Poll, Step::Complete(0, Out::Ok), Step::Poll]);
        if round % 7 == 3 {
            steps.push(Step::Reconcile("api", QuotaReconcile::Remaining(1.0)));
        }
        if round % 11 == 5 {
            steps.push(Step::Reconcile("cost", QuotaReconcile::Consumed(-3.0)));
        }
        steps.extend([Step::Poll, Step::Sleep, Step::Advance(700)]);
    }
    run_both("quotas", s, &["api", "cost"], &steps);
}

#[test]
fn multi_scope_admission_and_ordering() {
    let mut s = base()
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(2))
        .with_scope("shared", ScopeConfig::new().concurrency(2))
        .with_scope("b.com", ScopeConfig::new().concurrency(1));
    s.concurrent_requests = 3;
    let mut steps = Vec::new();
    for i in 0..8 {
        steps.push(Step::Push(
            get(&format!("https://a.com/{i}"))
                .scope("a.com")
                .scope("shared")
                .priority(i % 3),
        ));
        steps.push(Step::Push(
            get(&format!("https://b.com/{i}"))
                .scope("b.com")
                .scope("shared")
                .priority(1),
        ));
        steps.push(Step::Push(
            get(&format!("https://c.com/{i}")).priority((i % 2) - 1),
        ));
        steps.push(Step::Push(get(&format!("https://d.com/s{i}")).start()));
    }
    for round in 0..50 {
        steps.extend([
            Step::Poll,
            Step::Poll,
            Step::Poll,
            Step::Complete(round % 3, Out::Ok),
            Step::Poll,
            Step::Sleep,
            Step::Advance(250),
        ]);
        if round % 9 == 4 {
            steps.push(Step::Retry(0, Out::Status(503), -1));
        }
    }
    run_both(
        "multi_scope",
        s,
        &["a.com", "shared", "b.com", "c.com", "d.com"],
        &steps,
    );
    let fifo = FrontierConfig::default()
        .scheduler_order(QueueOrder::Fifo)
        .start_order(StartOrder::Lifo)
        .depth_priority(1);
    let mut steps = Vec::new();
    for i in 0..12 {
        let mut r = get(&format!("https://e.com/{i}")).depth(i % 4);
        if i % 5 == 0 {
            r = r.start();
        }
        steps.push(Step::Push(r));
    }
    for _ in 0..15 {
        steps.extend([Step::Poll, Step::Complete(0, Out::Ok)]);
    }
    run_both("fifo_depth", (base(), fifo), &["e.com"], &steps);
}

/// A group parked on a scope no other group uses is still ranked with today's load when
/// that scope wakes it, if it shares another of its scopes: `a.com + c.com` parks on
/// `c.com` (held by a delay) while `a.com` has a request of its own group in flight (load
/// 0.5); once that request is done and `c.com`'s wait is over, it ties with `b.com` on
/// priority and load 0 and goes first for its larger quota amount. Ranked with the load it
/// parked with, it went after `b.com`.
#[test]
fn a_group_parked_on_an_unshared_scope_ranks_with_todays_load() {
    let s = base().with_scope("a.com", ScopeConfig::new().concurrency(2));
    let steps = [
        Step::Push(get("https://a.com/1")),
        Step::Poll, // a.com/1 in flight: a.com's load is 0.5
        Step::Push(get("https://c.com/x").scope("a.com").scope("c.com")),
        Step::DelayScope("c.com", 5.0),
        Step::Poll, // the a.com + c.com group parks on c.com, ranked at load 0.5
        Step::Complete(0, Out::Ok),
        Step::Advance(5000),
        Step::Push(get("https://b.com/1")),
        Step::Peek,
        Step::Poll, // c.com's timer wakes its group, now at load 0
        Step::Poll,
    ];
    run_both(
        "unshared_scope_parking",
        s,
        &["a.com", "b.com", "c.com"],
        &steps,
    );
    if server().is_some() {
        let polls = POLLS.with(|p| p.borrow().clone());
        assert_eq!(
            polls,
            [
                "ready #0 https://a.com/1",
                "until 1005000000000",
                "ready #1 https://c.com/x",
                "ready #2 https://b.com/1",
            ]
        );
    }
}

#[test]
fn rampup_crawl_delay_and_live_changes() {
    let mut s = base()
        .with_scope(
            "r.com",
            ScopeConfig::new().delay(1.0).max_concurrency(4).rampup(
                RampupConfig::default()
                    .backoff_target(BackoffTarget { low: 1, high: 2 })
                    .min_delay(0.1),
            ),
        )
        .with_scope("k.com", ScopeConfig::new().delay(0.2).concurrency(4))
        .with_scope(
            "z.com",
            ScopeConfig::new()
                .delay(0.05)
                .rampup(RampupConfig::default()),
        );
    s.backoff_window = 5.0;
    let mut steps = Vec::new();
    for i in 0..40 {
        steps.push(Step::Push(get(&format!("https://r.com/{i}"))));
        steps.push(Step::Push(get(&format!("https://k.com/{i}"))));
        steps.push(Step::Push(get(&format!("https://m.com/{i}"))));
        steps.push(Step::Push(get(&format!("https://z.com/{i}"))));
    }
    steps.push(Step::CrawlDelay("k.com", 3.0)); // configured faster: kept, warned once
    steps.push(Step::CrawlDelay("k.com", 3.0));
    steps.push(Step::CrawlDelay("m.com", 2.5)); // applied
    for round in 0..60 {
        let out = if round % 13 == 0 {
            Out::Status(429)
        } else {
            Out::Ok
        };
        steps.extend([
            Step::Poll,
            Step::Poll,
            Step::Complete(0, out),
            Step::Poll,
            Step::Sleep,
            Step::Advance(900),
        ]);
        if round == 20 {
            steps.push(Step::SetDelay("m.com", 0.5));
            steps.push(Step::SetConcurrency("k.com", 1));
            steps.push(Step::SetConcurrency("r.com", 0));
        }
        if round == 30 {
            steps.push(Step::DelayScope("k.com", 12.0));
        }
    }
    run_both("rampup", s, &["r.com", "k.com", "m.com", "z.com"], &steps);
}

/// Rampup overshoots and steps back: quiet stretches ramp the delay down and then the
/// concurrency up; bursts of 429s (more than the target in one window) undo one step
/// each, first a concurrency raise, then delay cuts, never past the start.
#[test]
fn rampup_steps_back_on_bursts() {
    let mut s = base().with_scope(
        "r.com",
        ScopeConfig::new().delay(0.8).max_concurrency(3).rampup(
            RampupConfig::default()
                .delay_factor(0.5)
                .min_delay(0.2)
                .step_back(true),
        ),
    );
    s.backoff_window = 4.0;
    let mut steps = Vec::new();
    for i in 0..200 {
        steps.push(Step::Push(get(&format!("https://r.com/{i}"))));
    }
    for round in 0..150 {
        let burst = (40..46).contains(&round) || (90..100).contains(&round);
        let out = if burst { Out::Status(429) } else { Out::Ok };
        steps.extend([
            Step::Poll,
            Step::Poll,
            Step::Complete(0, out),
            Step::Poll,
            Step::Sleep,
            Step::Advance(400),
        ]);
    }
    run_both("rampup step back", s, &["r.com"], &steps);
}

/// A long-latency scope on rampup at its delay floor, one at a time, 10 s windows: each
/// quiet window's end raises its concurrency, and a request already waiting goes at that
/// moment (both sides name the boundary as the next deadline), up to max_concurrency;
/// then only a completion makes room.
#[test]
fn rampup_boundaries_wake_waiting_requests() {
    let s = base().backoff_window(10).with_scope(
        "slow.com",
        ScopeConfig::new()
            .delay(0.0)
            .max_concurrency(3)
            .rampup(RampupConfig::default().min_delay(0.0)),
    );
    let mut steps: Vec<Step> = (0..5)
        .map(|i| Step::Push(get(&format!("https://slow.com/{i}"))))
        .collect();
    steps.extend([
        Step::Poll,          // #1 at 1000
        Step::Poll,          // until 1010
        Step::Advance(9999), // not yet
        Step::Poll,
        Step::Sleep,
        Step::Poll, // #2 at 1010
        Step::Poll, // until 1020
        Step::Sleep,
        Step::Poll, // #3 at 1020
        Step::Poll, // blocked: at max_concurrency
        Step::Advance(80_000),
        Step::Poll,
        Step::Complete(0, Out::Ok), // the first answers at 1100
        Step::Poll,
    ]);
    run_both("rampup_wakeups", s, &["slow.com"], &steps);
    if server().is_none() {
        return;
    }
    let polls = POLLS.with(|p| p.borrow().clone());
    let until = |secs: u64| format!("until {}", secs * 1_000_000_000);
    assert_eq!(
        polls,
        [
            "ready #4 https://slow.com/4".to_string(),
            until(1010),
            until(1010),
            "ready #3 https://slow.com/3".to_string(),
            until(1020),
            "ready #2 https://slow.com/2".to_string(),
            "blocked".to_string(),
            "blocked".to_string(),
            "ready #1 https://slow.com/1".to_string(),
        ]
    );

    // The same with the window's end hidden behind others: a scope still lowering its
    // delay while full, a quota window, a backoff recovering, and triggers in a window.
    let mut s = base()
        .with_scope(
            "slow.com",
            ScopeConfig::new()
                .delay(0.0)
                .max_concurrency(4)
                .rampup(RampupConfig::default().min_delay(0.0)),
        )
        .with_scope(
            "r.com",
            ScopeConfig::new()
                .delay(3.0)
                .max_concurrency(3)
                .rampup(RampupConfig::default().min_delay(0.5)),
        )
        .with_scope(
            "q.com",
            ScopeConfig::new().concurrency(1).quota(2.0).window(7.0),
        );
    s.backoff_window = 4.0;
    let mut steps = Vec::new();
    for i in 0..12 {
        for host in ["slow.com", "r.com", "q.com"] {
            steps.push(Step::Push(get(&format!("https://{host}/{i}"))));
        }
        steps.push(Step::Push(
            get(&format!("https://slow.com/both/{i}"))
                .scope("slow.com")
                .scope("r.com"),
        ));
    }
    for round in 0..50 {
        steps.extend([Step::Poll, Step::Poll, Step::Poll, Step::Sleep]);
        match round % 9 {
            3 => steps.push(Step::Complete(round, Out::Status(429))),
            6 => steps.push(Step::Complete(round, Out::Ok)),
            8 => steps.push(Step::Advance(1500)),
            _ => {}
        }
    }
    run_both(
        "rampup_wakeups_mixed",
        s,
        &["slow.com", "r.com", "q.com"],
        &steps,
    );
}

/// Zero-length windows: backoff recovers at once, rampup is off, a quota resets on every
/// request (the global default quota window and a scope's own).
#[test]
fn zero_length_windows() {
    let mut s = base()
        .with_scope(
            "r.com",
            ScopeConfig::new()
                .delay(0.5)
                .max_concurrency(4)
                .rampup(RampupConfig::default().min_delay(0.0)),
        )
        .with_scope(
            "q.com",
            ScopeConfig::new().concurrency(2).quota(1.0).window(0.0),
        )
        .with_scope("cost", ScopeConfig::new().concurrency(0).quota(3.0));
    s.backoff_window = 0.0;
    s.throttling_window = 0.0;
    let mut steps = Vec::new();
    for i in 0..10 {
        steps.push(Step::Push(get(&format!("https://r.com/{i}"))));
        steps.push(Step::Push(get(&format!("https://q.com/{i}"))));
        steps.push(Step::Push(
            get(&format!("https://c.com/{i}")).scope_amount("cost", 2.0),
        ));
    }
    for round in 0..30 {
        steps.extend([Step::Poll, Step::Poll, Step::Poll]);
        steps.push(match round % 4 {
            0 => Step::Complete(round, Out::Status(429)),
            1 => Step::Complete(round, Out::RetryAfter(503, 2)),
            2 => Step::Complete(round, Out::Ok),
            _ => Step::Reconcile("cost", QuotaReconcile::Remaining(0.0)),
        });
        steps.extend([Step::Poll, Step::Sleep, Step::Advance(300)]);
    }
    run_both("zero_windows", s, &["r.com", "q.com", "cost"], &steps);
}
