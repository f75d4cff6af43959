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

/// A small seeded generator for random timelines (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

fn random_settings(rng: &mut Rng, jitter: bool) -> (Settings, FrontierConfig) {
    let mut s = if jitter { Settings::default() } else { base() };
    s.seed = rng.next();
    if jitter {
        s.randomize_download_delay = Jitter::Range {
            low: -0.3,
            high: 0.4,
        };
    }
    s.concurrent_requests = rng.pick(&[2, 4, 16]);
    s.backoff_window = rng.pick(&[5.0, 20.0, 0.0]);
    s.backoff_min_delay = rng.pick(&[0.5, 1.0]);
    let frontier = FrontierConfig::default()
        .scheduler_order(rng.pick(&[QueueOrder::Lifo, QueueOrder::Fifo]))
        .start_order(rng.pick(&[StartOrder::Fifo, StartOrder::Lifo, StartOrder::Same]))
        .depth_priority(rng.pick(&[0, 1]))
        .depth_limit(rng.pick(&[0, 3]));
    s.throttling_window = 15.0;
    let s = s
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(2))
        .with_scope(
            "b.com",
            ScopeConfig::new()
                .delay(0.4)
                .rampup(RampupConfig::default().min_delay(0.05)),
        )
        .with_scope(
            "api",
            ScopeConfig::new()
                .quota(6.0)
                .window(rng.pick(&[10.0, 10.0, 0.0]))
                .concurrency(2),
        )
        .with_scope(
            "c.com",
            ScopeConfig::new().delay(0.25).backoff(
                BackoffConfig::default()
                    .http_codes(vec![500, 429])
                    .delay_factor(3.0),
            ),
        );
    (s, frontier)
}

fn random_steps(rng: &mut Rng, n: usize) -> Vec<Step> {
    const HOSTS: [&str; 6] = [
        "a.com",
        "b.com",
        "c.com",
        "d.com",
        "10.0.0.1:8080",
        "localhost:9",
    ];
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let roll = rng.below(100);
        let step = match roll {
            0..=29 => {
                let host = rng.pick(&HOSTS);
                let scheme = if host.ends_with(":8080") || host.ends_with(":9") {
                    "http"
                } else {
                    "https"
                };
                let mut r = Request::get(format!("{scheme}://{host}/p/{}", rng.below(40)))
                    .priority(rng.below(5) as i32 - 2)
                    .depth(rng.below(5) as u32);
                match rng.below(20) {
                    0 => r = r.start(),
                    1 => r = r.dont_filter(),
                    2 => r = r.dont_track(),
                    3 => r = r.dont_throttle(),
                    4 => r = r.delay(rng.below(5000) as f64 / 1000.0),
                    5 => r = r.scope("api"),
                    6 => r = r.scope("api").scope_amount(host, 2.0),
                    7 => r = r.scope("a.com").scope("c.com"),
                    8 => r = r.callback("parse_item"),
                    _ => {}
                }
                Step::Push(r)
            }
            30..=31 => Step::Peek,
            32..=64 => Step::Poll,
            65..=76 => {
                let out = match rng.below(10) {
                    0 => Out::Status(429),
                    1 => Out::RetryAfter(503, rng.below(20) as u32),
                    2 => Out::Error("timeout"),
                    3 => Out::Status(500),
                    4 => Out::Cancelled,
                    5 => Out::Spent(200, rng.below(10) as u32),
                    _ => Out::Ok,
                };
                Step::Complete(rng.below(8) as usize, out)
            }
            77..=80 => Step::Retry(
                rng.below(8) as usize,
                rng.pick(&[Out::Status(429), Out::Error("connection"), Out::Ok]),
                -1,
            ),
            81..=88 => Step::Advance(rng.below(3000)),
            89..=93 => Step::Sleep,
            94 => Step::DelayScope(rng.pick(&HOSTS), rng.below(10) as f64),
            95 => Step::CrawlDelay(rng.pick(&HOSTS), rng.below(4) as f64 + 0.5),
            96 => Step::SetDelay(rng.pick(&HOSTS), rng.below(3) as f64 * 0.5),
            97 => Step::SetConcurrency(rng.pick(&HOSTS), rng.below(4) as u32),
            _ => Step::Reconcile(
                "api",
                if rng.below(2) == 0 {
                    QuotaReconcile::Consumed(2.0)
                } else {
                    QuotaReconcile::Remaining(1.0)
                },
            ),
        };
        steps.push(step);
    }
    steps
}

const RANDOM_SCOPES: [&str; 7] = [
    "a.com",
    "b.com",
    "c.com",
    "d.com",
    "10.0.0.1:8080",
    "localhost:9",
    "api",
];

#[test]
fn random_timelines_without_jitter() {
    let mut total = 0;
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let s = random_settings(&mut rng, false);
        let steps = random_steps(&mut rng, 250);
        total += run_both(&format!("random seed {seed}"), s, &RANDOM_SCOPES, &steps);
    }
    if server().is_some() {
        assert!(total > 30 * 150, "compared {total} answers");
    }
}

#[test]
fn random_timelines_with_jitter() {
    for seed in 100..=115u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let s = random_settings(&mut rng, true);
        let steps = random_steps(&mut rng, 250);
        run_both(&format!("jitter seed {seed}"), s, &RANDOM_SCOPES, &steps);
    }
}

#[test]
fn random_timelines_through_evalsha() {
    for seed in 200..=205u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let s = random_settings(&mut rng, seed % 2 == 0);
        let steps = random_steps(&mut rng, 250);
        run_both_with(
            &format!("evalsha seed {seed}"),
            s,
            &RANDOM_SCOPES,
            &steps,
            ScriptMode::Eval,
        );
    }
}

/// Many groups: enough hosts and requests that every chunked structure of the Redis
/// layout splits, thins out and merges (the leaves of the candidate and event sets, the
/// buckets of name records, a queue bucket whose requests overflow to a key of their
/// own), compared step by step with the in-process frontier.
#[test]
fn many_groups_through_chunked_structures() {
    for seed in 300..=302u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut s = base();
        s.concurrent_requests = rng.pick(&[16, 64]);
        // Every host waits after each send: hundreds of parked groups and timers.
        s.download_delay = rng.pick(&[0.5, 2.0]);
        let frontier = FrontierConfig::default()
            .scheduler_order(rng.pick(&[QueueOrder::Lifo, QueueOrder::Fifo]))
            .start_order(rng.pick(&[StartOrder::Fifo, StartOrder::Same]));
        let request = |rng: &mut Rng, i: u64| {
            // Host 0 gets a tenth of all requests: more than its queue bucket holds.
            let h = if i.is_multiple_of(10) {
                0
            } else {
                rng.below(400)
            };
            let mut r = Request::get(format!("https://h{h}.example/p/{i}"))
                .priority(rng.below(9) as i32 - 4);
            if rng.below(25) == 0 {
                r = r.start();
            }
            if rng.below(40) == 0 {
                r = r.scope("shared").scope(format!("h{h}.example"));
            }
            r
        };
        let mut steps = Vec::new();
        for i in 0..2000 {
            steps.push(Step::Push(request(&mut rng, i)));
        }
        for i in 2000..6000 {
            let step = match rng.below(20) {
                0..=2 => Step::Push(request(&mut rng, i)),
                3 => Step::Peek,
                4..=11 => Step::Poll,
                12..=15 => Step::Complete(
                    rng.below(32) as usize,
                    if rng.below(15) == 0 {
                        Out::Status(429)
                    } else {
                        Out::Ok
                    },
                ),
                16 => Step::Retry(rng.below(32) as usize, Out::Ok, -1),
                17..=18 => Step::Advance(rng.below(700)),
                _ => Step::Sleep,
            };
            steps.push(step);
        }
        run_both(
            &format!("many groups seed {seed}"),
            (s, frontier),
            &["h0.example", "h1.example", "shared"],
            &steps,
        );
    }
    // The structures these timelines are meant to exercise exist (the other tests'
    // crawls have a few hosts: one bucket, one leaf, no queue of its own).
    let Some(server) = server() else { return };
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("{conf*").query(&mut c).unwrap();
    let count = |pred: &dyn Fn(&[u8]) -> bool| keys.iter().filter(|k| pred(k)).count();
    let after_tag = |k: &[u8]| {
        k.splitn(2, |&b| b == b'}')
            .nth(1)
            .unwrap_or_default()
            .to_vec()
    };
    let own_queues = count(&|k| after_tag(k).starts_with(b":q:"));
    let buckets = count(&|k| after_tag(k).starts_with(b":N:"));
    let split_leaves = count(&|k| {
        let t = after_tag(k);
        (t.starts_with(b":C|") || t.starts_with(b":E|")) && t.len() > 3
    });
    assert!(own_queues >= 1, "no queue overflowed to a key of its own");
    assert!(buckets >= 8, "name buckets did not split: {buckets}");
    assert!(
        split_leaves >= 3,
        "ordered sets did not split: {split_leaves}"
    );
}

/// One input of a standalone-permit timeline (no queue).
#[derive(Clone, Debug)]
enum PStep {
    /// `try_acquire` on these scopes and amounts.
    Acquire(Vec<(&'static str, f64)>),
    /// Releases the `n`-th oldest permit still held (modulo their number).
    Release(usize, Out),
    /// Releases the last permit released again (both sides must refuse it).
    ReleaseAgain,
    Advance(u64),
    /// Jumps to the time of the last `NotUntil` answer.
    Sleep,
}

/// An acquire's answer, as both sides compare it.
fn acquire_text<P>(r: &Result<P, NotReady>) -> String {
    match r {
        Ok(_) => "ok".to_string(),
        Err(NotReady::NotUntil(t)) => format!("until {}", t.as_nanos()),
        Err(NotReady::Blocked) => "blocked".to_string(),
    }
}

/// Runs a permit timeline through polite-throttle-core's `Throttler::try_acquire` /
/// `release` and through `RedisFrontier::try_acquire` / `release`, and panics at the
/// first difference (answers, then every listed scope's state).
fn run_permits(name: &str, settings: Settings, scopes: &[&str], steps: &[PStep]) -> usize {
    let Some(server) = server() else { return 0 };
    let start = Timestamp::from_secs(1000);
    let mut core = Throttler::new(settings.clone(), start).unwrap();
    let config = RedisConfig::default().lease_timeout(std::time::Duration::from_secs(86_400 * 30));
    let mut redis = RedisFrontier::open(&server.url(), &crawl_name(), settings, config).unwrap();
    let mut now = start;
    let mut last_until = None;
    let mut held: Vec<(Permit, RedisPermit)> = Vec::new();
    let mut released = None;
    let mut compared = 0;
    for (i, step) in steps.iter().enumerate() {
        let (a, b) = match step {
            PStep::Acquire(uses) => {
                let uses: Vec<ScopeUse<'_>> = uses
                    .iter()
                    .map(|&(s, amount)| ScopeUse::with_amount(s, amount))
                    .collect();
                let pa = core.try_acquire(&uses, now);
                let pb = redis.try_acquire(&uses, now).unwrap();
                if let Err(NotReady::NotUntil(t)) = pa {
                    last_until = Some(t);
                }
                let answers = (acquire_text(&pa), acquire_text(&pb));
                if let (Ok(x), Ok(y)) = (pa, pb) {
                    held.push((x, y));
                }
                answers
            }
            PStep::Release(n, out) => {
                if held.is_empty() {
                    continue;
                }
                let (x, y) = held.remove(n % held.len());
                released = Some((x, y));
                let o = out.outcome();
                (
                    core.release(x, &o, now).to_string(),
                    redis.release(y, &o, now).unwrap().to_string(),
                )
            }
            PStep::ReleaseAgain => {
                let Some((x, y)) = released else { continue };
                let o = Outcome::status(429);
                (
                    core.release(x, &o, now).to_string(),
                    redis.release(y, &o, now).unwrap().to_string(),
                )
            }
            PStep::Advance(ms) => {
                now += std::time::Duration::from_millis(*ms);
                continue;
            }
            PStep::Sleep => {
                if let Some(t) = last_until.take() {
                    now = now.max(t);
                }
                continue;
            }
        };
        assert_eq!(
            a, b,
            "{name} step {i} ({step:?}) at {now:?}: in-process vs redis"
        );
        compared += 1;
        for s in scopes {
            let ca = core.scopes().find(|(n, _)| n == s).map(|(_, st)| st);
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
    assert_eq!(
        redis.info().unwrap().permits,
        held.len() as u64,
        "{name}: permits held"
    );
    compared
}

#[test]
fn standalone_permits_scripted() {
    let mut s = base()
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(2))
        .with_scope(
            "api",
            ScopeConfig::new().quota(5.0).window(10.0).concurrency(0),
        );
    s.backoff_window = 10.0;
    s.concurrent_requests = 3;
    let mut steps = vec![
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Sleep,
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Release(0, Out::RetryAfter(429, 7)),
        PStep::ReleaseAgain,
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Sleep,
        PStep::Acquire(vec![("a.com", 1.0), ("api", 2.0)]),
        PStep::Acquire(vec![("api", 2.0), ("api", 1.0)]),
        PStep::Acquire(vec![("b.com", 1.0)]),
        PStep::Release(0, Out::Spent(200, 4)),
        PStep::Acquire(vec![("api", 1.0)]),
        PStep::Sleep,
        PStep::Acquire(vec![("api", f64::NAN), ("x.org", -1.0)]),
    ];
    for round in 0..15 {
        steps.extend([
            PStep::Release(
                round,
                [Out::Ok, Out::Status(503), Out::Cancelled][round % 3],
            ),
            PStep::Acquire(vec![("a.com", 1.0), ("api", 1.5)]),
            PStep::Advance(700),
            PStep::Acquire(vec![("a.com", 1.0)]),
            PStep::Sleep,
            PStep::Acquire(vec![("api", 1.0)]),
        ]);
    }
    run_permits(
        "permits_scripted",
        s,
        &["a.com", "api", "b.com", "x.org"],
        &steps,
    );
}

fn random_permit_steps(rng: &mut Rng, n: usize) -> Vec<PStep> {
    const SCOPES: [&str; 7] = [
        "a.com",
        "b.com",
        "c.com",
        "d.com",
        "10.0.0.1:8080",
        "localhost:9",
        "api",
    ];
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let step = match rng.below(100) {
            0..=44 => {
                let k = 1 + rng.below(3) as usize;
                let uses = (0..k)
                    .map(|_| {
                        let amount = rng.pick(&[1.0, 1.0, 2.0, 0.5, -1.0, f64::NAN]);
                        (rng.pick(&SCOPES), amount)
                    })
                    .collect();
                PStep::Acquire(uses)
            }
            45..=69 => {
                let out = match rng.below(10) {
                    0 => Out::Status(429),
                    1 => Out::RetryAfter(503, rng.below(20) as u32),
                    2 => Out::Error("timeout"),
                    3 => Out::Status(500),
                    4 => Out::Cancelled,
                    5 => Out::Spent(200, rng.below(10) as u32),
                    _ => Out::Ok,
                };
                PStep::Release(rng.below(8) as usize, out)
            }
            70..=71 => PStep::ReleaseAgain,
            72..=85 => PStep::Advance(rng.below(3000)),
            _ => PStep::Sleep,
        };
        steps.push(step);
    }
    steps
}

#[test]
fn standalone_permits_random() {
    let mut total = 0;
    for seed in 400..=415u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (s, _) = random_settings(&mut rng, seed % 2 == 1);
        let steps = random_permit_steps(&mut rng, 250);
        total += run_permits(&format!("permits seed {seed}"), s, &RANDOM_SCOPES, &steps);
    }
    if server().is_some() {
        assert!(total > 16 * 150, "compared {total} answers");
    }
}
