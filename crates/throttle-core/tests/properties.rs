//! Property tests: random timelines of acquires, releases (with every kind of outcome),
//! `delay_scope` calls and clock jumps, checked against simple reference bookkeeping.
//!
//! Invariants (docs/behaviour.md section 3):
//! - sends to a scope are never closer than the spacing in force at the previous send;
//! - in-flight requests never exceed a scope's concurrency nor the global cap;
//! - a quota is never exceeded within a window, except by the one oversized request
//!   allowed when nothing was consumed;
//! - a header delay (or `delay_scope`) is never shortened;
//! - after `level × backoff_window` quiet seconds a scope is back at its base delay;
//! - admission is all-or-nothing;
//! - queued waiters are admitted in ticket order per scope and none is left behind;
//! - no scope ever has a free slot, a waiter ready to go through it and no deadline at
//!   or before now (lazy updates that make room, such as a rampup step, are deadlines).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use polite_throttle_core::{
    Jitter, NotReady, Outcome, Permit, RampupConfig, RequestFlags, ScopeConfig, ScopeUse, Settings,
    Throttler, Ticket, TicketPoll, Timestamp,
};
use proptest::prelude::*;

const SCOPES: [&str; 5] = ["a.com", "b.com", "api", "cost", "x.com"];
const QUOTA: f64 = 10.0;
const QUOTA_WINDOW: f64 = 30.0;
const GLOBAL_CAP: u32 = 6;
const TOLERANCE: Duration = Duration::from_micros(1);

fn settings(seed: u64) -> Settings {
    let mut s = Settings::default()
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(2))
        .with_scope("b.com", ScopeConfig::new().concurrency(1))
        .with_scope(
            "api",
            ScopeConfig::new()
                .delay(0.5)
                .concurrency(3)
                .max_concurrency(5)
                .rampup(RampupConfig::default().min_delay(0.1)),
        )
        .with_scope(
            "cost",
            ScopeConfig::new()
                .concurrency(0)
                .quota(QUOTA)
                .window(QUOTA_WINDOW)
                .jitter(Jitter::Range {
                    low: -0.2,
                    high: 0.4,
                }),
        );
    s.concurrent_requests = GLOBAL_CAP;
    s.seed = seed;
    s
}

#[derive(Clone, Debug)]
enum Done {
    Status(u16),
    RetryAfter(u16, u32),
    Error(&'static str),
    Cancelled,
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        scopes: Vec<usize>,
        amount: f64,
        dont_track: bool,
    },
    Release {
        which: usize,
        done: Done,
    },
    Advance {
        millis: u64,
    },
    DelayScope {
        scope: usize,
        secs: u32,
    },
}

fn done_strategy() -> impl Strategy<Value = Done> {
    prop_oneof![
        4 => prop::sample::select(vec![200u16, 404, 500, 429, 503]).prop_map(Done::Status),
        2 => (prop::sample::select(vec![429u16, 503, 200]), 0u32..400)
            .prop_map(|(s, secs)| Done::RetryAfter(s, secs)),
        1 => prop::sample::select(vec!["timeout", "dns"]).prop_map(Done::Error),
        1 => Just(Done::Cancelled),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (
            prop::collection::btree_set(0..SCOPES.len(), 1..=3),
            0.0f64..6.0,
            prop::bool::weighted(0.1),
        )
            .prop_map(|(set, amount, dont_track)| Op::Acquire {
                scopes: set.into_iter().collect(),
                amount,
                dont_track,
            }),
        4 => (any::<usize>(), done_strategy()).prop_map(|(which, done)| Op::Release { which, done }),
        3 => prop_oneof![0u64..3_000, 0u64..120_000].prop_map(|millis| Op::Advance { millis }),
        1 => (0..SCOPES.len(), 0u32..500).prop_map(|(scope, secs)| Op::DelayScope { scope, secs }),
    ]
}

/// What the reference bookkeeping remembers about one scope.
#[derive(Default, Debug)]
struct Model {
    /// Earliest next send: the previous send plus the lowest spacing it allowed.
    earliest_by_spacing: Option<Timestamp>,
    /// Latest hard minimum imposed by a header delay or `delay_scope`.
    hard_until: Timestamp,
    quota_window_start: Option<Timestamp>,
    consumed: f64,
}

fn outcome(done: &Done) -> Outcome<'static> {
    match *done {
        Done::Status(s) => Outcome::status(s),
        Done::RetryAfter(s, secs) => {
            let v = secs.to_string();
            Outcome::response(s, [("Retry-After", v.as_str())], None)
        }
        Done::Error(kind) => Outcome::error(kind),
        Done::Cancelled => Outcome::Cancelled,
    }
}

/// The smallest spacing the throttler may draw after a send with this state.
fn spacing_lower_bound(scope: &str, delay: f64, level: u32) -> f64 {
    if level > 0 {
        (delay * 0.9).max(1.0) // backoff_jitter 0.1, backoff_min_delay 1
    } else if scope == "cost" {
        delay * 0.8
    } else {
        delay * 0.5 // randomize_download_delay: ±50%
    }
}

fn base_delay(scope: &str) -> f64 {
    match scope {
        "a.com" => 1.0,
        _ => 0.0,
    }
}

fn run_timeline(seed: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut t = Throttler::new(settings(seed), Timestamp::ZERO).unwrap();
    let mut now = Timestamp::ZERO;
    let mut models: HashMap<&str, Model> = HashMap::new();
    let mut permits: Vec<(Permit, Vec<usize>, bool)> = Vec::new();
    let mut last_trigger: HashMap<&str, Timestamp> = HashMap::new();

    for op in ops {
        match op {
            Op::Advance { millis } => now += Duration::from_millis(*millis),
            Op::DelayScope { scope, secs } => {
                let name = SCOPES[*scope];
                t.delay_scope(name, f64::from(*secs), now).unwrap();
                let m = models.entry(name).or_default();
                m.hard_until = m
                    .hard_until
                    .max(now + Duration::from_secs(u64::from(*secs)));
                last_trigger.insert(name, now);
            }
            Op::Acquire {
                scopes,
                amount,
                dont_track,
            } => {
                let uses: Vec<ScopeUse<'_>> = scopes
                    .iter()
                    .map(|&i| ScopeUse::with_amount(SCOPES[i], *amount))
                    .collect();
                let before: Vec<_> = scopes
                    .iter()
                    .map(|&i| t.scope_stats(SCOPES[i], now).map(|s| (s.sent, s.active)))
                    .collect();
                let flags = RequestFlags::default().dont_track(*dont_track);
                match t.try_acquire_with(&uses, flags, now) {
                    Err(why) => {
                        for (k, &i) in scopes.iter().enumerate() {
                            let after = t.scope_stats(SCOPES[i], now).map(|s| (s.sent, s.active));
                            let before = before[k].unwrap_or((0, 0));
                            prop_assert_eq!(after.unwrap_or((0, 0)), before, "partial reservation");
                        }
                        if let NotReady::NotUntil(until) = why {
                            prop_assert!(until > now, "NotUntil in the past");
                        }
                    }
                    Ok(permit) => {
                        prop_assert!(t.in_flight() <= GLOBAL_CAP);
                        for &i in scopes {
                            let name = SCOPES[i];
                            let st = t.scope_stats(name, now).unwrap();
                            prop_assert!(
                                st.concurrency == 0 || st.active <= st.concurrency,
                                "{} has {} in flight, limit {}",
                                name,
                                st.active,
                                st.concurrency
                            );
                            let m = models.entry(name).or_default();
                            if let Some(earliest) = m.earliest_by_spacing {
                                prop_assert!(
                                    now + TOLERANCE >= earliest,
                                    "{} sent at {:?}, spacing allowed {:?}",
                                    name,
                                    now,
                                    earliest
                                );
                            }
                            prop_assert!(now >= m.hard_until, "{} sent inside a hard delay", name);
                            let lb = spacing_lower_bound(name, st.delay, st.level);
                            m.earliest_by_spacing = Some(now + Duration::from_secs_f64(lb));
                            if name == "cost" {
                                let start = *m.quota_window_start.get_or_insert(now);
                                let w = Duration::from_secs_f64(QUOTA_WINDOW);
                                let elapsed = now.saturating_duration_since(start);
                                let k = elapsed.as_nanos() / w.as_nanos();
                                if k > 0 {
                                    m.quota_window_start = Some(start + w * k as u32);
                                    m.consumed = 0.0;
                                }
                                prop_assert!(
                                    m.consumed == 0.0 || m.consumed + amount <= QUOTA + 1e-9,
                                    "quota exceeded: {} + {}",
                                    m.consumed,
                                    amount
                                );
                                m.consumed += amount;
                                prop_assert!((st.consumed - m.consumed).abs() < 1e-9);
                            }
                        }
                        permits.push((permit, scopes.clone(), *dont_track));
                    }
                }
            }
            Op::Release { which, done } => {
                if permits.is_empty() {
                    continue;
                }
                let (permit, scopes, dont_track) = permits.swap_remove(which % permits.len());
                prop_assert!(t.release(permit, &outcome(done), now));
                prop_assert!(!t.release(permit, &outcome(done), now), "released twice");
                let status = match done {
                    Done::Status(s) | Done::RetryAfter(s, _) => Some(*s),
                    _ => None,
                };
                let trigger = !dont_track
                    && (matches!(status, Some(429 | 503))
                        || matches!(done, Done::Error("timeout")));
                if trigger {
                    for &i in &scopes {
                        let name = SCOPES[i];
                        last_trigger.insert(name, now);
                        if let Done::RetryAfter(_, secs) = done
                            && *secs > 0
                        {
                            let h = Duration::from_secs(u64::from((*secs).min(300)));
                            let m = models.entry(name).or_default();
                            m.hard_until = m.hard_until.max(now + h);
                        }
                    }
                }
            }
        }
    }

    // Recovery: once nothing triggers any more, level × window quiet seconds bring every
    // scope back to its base.
    for (p, _, _) in permits.drain(..) {
        t.release(p, &Outcome::status(200), now);
    }
    for name in SCOPES {
        let Some(st) = t.scope_stats(name, now) else {
            continue;
        };
        let later = now + Duration::from_secs(60 * u64::from(st.level));
        let st = t.scope_stats(name, later).unwrap();
        prop_assert_eq!(st.level, 0, "{} still backing off", name);
        prop_assert_eq!(st.delay, st.base_delay, "{} not back at its base", name);
        if name != "api" {
            prop_assert_eq!(st.base_delay, base_delay(name));
        }
        now = later;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_timelines_keep_every_invariant(
        seed in any::<u64>(),
        ops in prop::collection::vec(op_strategy(), 1..120),
    ) {
        run_timeline(seed, &ops)?;
    }
}

// ------------------------------------------------------------------------------ waiters

#[derive(Clone, Debug)]
enum WaitOp {
    Arrive { scopes: Vec<usize> },
    Finish { which: usize, status: u16 },
    Advance { millis: u64 },
    Cancel { which: usize },
}

fn wait_op_strategy() -> impl Strategy<Value = WaitOp> {
    prop_oneof![
        4 => prop::collection::btree_set(0..3usize, 1..=2)
            .prop_map(|s| WaitOp::Arrive { scopes: s.into_iter().collect() }),
        3 => (any::<usize>(), prop::sample::select(vec![200u16, 200, 429]))
            .prop_map(|(which, status)| WaitOp::Finish { which, status }),
        2 => (0u64..5_000).prop_map(|millis| WaitOp::Advance { millis }),
        1 => any::<usize>().prop_map(|which| WaitOp::Cancel { which }),
    ]
}

/// A runtime's loop in miniature: wake due timers, then let every woken ticket look again.
fn drive(t: &mut Throttler, now: Timestamp, admitted: &mut Vec<(Ticket, Permit)>) {
    t.handle_timeout(now);
    while let Some(ticket) = t.poll_wakeup() {
        if let TicketPoll::Ready(p) = t.poll_ticket(ticket, now) {
            admitted.push((ticket, p));
        }
    }
}

fn run_waiters(ops: &[WaitOp]) -> Result<(), TestCaseError> {
    const W: [&str; 3] = ["a.com", "b.com", "api"];
    let mut s = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().concurrency(1))
        .with_scope("b.com", ScopeConfig::new().concurrency(2).delay(0.5))
        .with_scope("api", ScopeConfig::new().concurrency(1).delay(0.2));
    s.concurrent_requests = 3;
    let mut t = Throttler::new(s, Timestamp::ZERO).unwrap();
    let mut now = Timestamp::ZERO;
    let mut in_flight: Vec<(Permit, Vec<usize>)> = Vec::new();
    let mut waiting: BTreeMap<Ticket, Vec<usize>> = BTreeMap::new();
    let mut order: BTreeMap<usize, Vec<Ticket>> = BTreeMap::new();

    let settle = |t: &mut Throttler,
                  now: Timestamp,
                  waiting: &mut BTreeMap<Ticket, Vec<usize>>,
                  in_flight: &mut Vec<(Permit, Vec<usize>)>,
                  order: &mut BTreeMap<usize, Vec<Ticket>>| {
        let mut admitted = Vec::new();
        drive(t, now, &mut admitted);
        for (ticket, p) in admitted {
            let scopes = waiting.remove(&ticket).expect("admitted a known ticket");
            for &i in &scopes {
                order.entry(i).or_default().push(ticket);
            }
            in_flight.push((p, scopes));
        }
    };

    for op in ops {
        match op {
            WaitOp::Arrive { scopes } => {
                let uses: Vec<ScopeUse<'_>> = scopes.iter().map(|&i| W[i].into()).collect();
                match t.try_acquire_or_enqueue(&uses, RequestFlags::default(), now) {
                    Ok(p) => in_flight.push((p, scopes.clone())),
                    Err((ticket, _)) => {
                        waiting.insert(ticket, scopes.clone());
                    }
                }
            }
            WaitOp::Finish { which, status } => {
                if !in_flight.is_empty() {
                    let (p, _) = in_flight.swap_remove(which % in_flight.len());
                    t.release(p, &Outcome::status(*status), now);
                }
            }
            WaitOp::Advance { millis } => now += Duration::from_millis(*millis),
            WaitOp::Cancel { which } => {
                if let Some(&ticket) = waiting.keys().nth(which % waiting.len().max(1)) {
                    prop_assert!(t.cancel(ticket));
                    waiting.remove(&ticket);
                }
            }
        }
        settle(&mut t, now, &mut waiting, &mut in_flight, &mut order);
        for &i in [0usize, 1, 2].iter() {
            let st = t.scope_stats(W[i], now);
            if let Some(st) = st {
                prop_assert!(st.active <= st.concurrency);
            }
        }
    }
    // Liveness: finish everything and let time pass; every waiter gets its turn.
    let mut rounds = 0;
    while !waiting.is_empty() {
        rounds += 1;
        prop_assert!(rounds < 10_000, "waiters stuck: {:?}", waiting);
        for (p, _) in in_flight.drain(..) {
            t.release(p, &Outcome::status(200), now);
        }
        settle(&mut t, now, &mut waiting, &mut in_flight, &mut order);
        match t.poll_timeout() {
            Some(at) if at > now => now = at,
            _ => {}
        }
        settle(&mut t, now, &mut waiting, &mut in_flight, &mut order);
    }
    prop_assert_eq!(t.stats().waiting, 0);
    // Per scope, queued requests were admitted in ticket (arrival) order.
    for (scope, tickets) in order {
        prop_assert!(
            tickets.windows(2).all(|w| w[0] < w[1]),
            "{} admitted out of order: {:?}",
            W[scope],
            tickets
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn waiters_are_fifo_per_scope_and_never_starve(
        ops in prop::collection::vec(wait_op_strategy(), 1..150),
    ) {
        run_waiters(&ops)?;
    }
}

// ------------------------------------------------------------ lazy updates are deadlines

#[derive(Clone, Debug)]
enum LiveOp {
    Arrive { scopes: Vec<usize>, amount: f64 },
    Finish { which: usize, status: u16 },
    Advance { millis: u64 },
    Cancel { which: usize },
}

fn live_op_strategy() -> impl Strategy<Value = LiveOp> {
    prop_oneof![
        5 => (prop::collection::btree_set(0..LIVE.len(), 1..=2), 0.5f64..6.0)
            .prop_map(|(s, amount)| LiveOp::Arrive { scopes: s.into_iter().collect(), amount }),
        2 => (any::<usize>(), prop::sample::select(vec![200u16, 200, 429, 503]))
            .prop_map(|(which, status)| LiveOp::Finish { which, status }),
        3 => prop_oneof![0u64..4_000, 0u64..60_000].prop_map(|millis| LiveOp::Advance { millis }),
        1 => any::<usize>().prop_map(|which| LiveOp::Cancel { which }),
    ]
}

/// Scopes whose slots lazy updates may free: rampup at its floor, rampup still lowering
/// its delay, a quota, and a plain one.
const LIVE: [&str; 4] = ["ramp", "slow", "cost", "a.com"];

fn live_settings(backoff_window: f64, quota_window: f64) -> Settings {
    let mut s = Settings::default()
        .without_jitter()
        .with_scope(
            "ramp",
            ScopeConfig::new()
                .delay(0.0)
                .max_concurrency(4)
                .rampup(RampupConfig::default().min_delay(0.0)),
        )
        .with_scope(
            "slow",
            ScopeConfig::new()
                .delay(2.0)
                .max_concurrency(3)
                .rampup(RampupConfig::default().min_delay(0.5)),
        )
        .with_scope(
            "cost",
            ScopeConfig::new()
                .concurrency(2)
                .quota(QUOTA)
                .window(quota_window),
        )
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(1));
    // High enough never to matter: every slot here is a scope's.
    s.concurrent_requests = 1000;
    s.backoff_window = backoff_window;
    s
}

type Waiting = BTreeMap<Ticket, (Vec<usize>, f64)>;

/// No waiter is first in line on every one of its scopes, allowed by all of them now,
/// while the throttler names no deadline at or before now: it would never be woken.
fn no_forgotten_waiter(
    t: &mut Throttler,
    now: Timestamp,
    waiting: &Waiting,
    queues: &BTreeMap<usize, Vec<Ticket>>,
) -> Result<(), TestCaseError> {
    if t.poll_timeout().is_some_and(|d| d <= now) {
        return Ok(());
    }
    for (ticket, (scopes, amount)) in waiting {
        let first = scopes
            .iter()
            .all(|i| queues.get(i).and_then(|q| q.first()) == Some(ticket));
        if !first {
            continue;
        }
        let ready = scopes.iter().all(|&i| {
            t.check_scope(ScopeUse::with_amount(LIVE[i], *amount), now)
                .is_ok()
        });
        prop_assert!(
            !ready,
            "{ticket:?} on {:?} has a free slot and may go at {now:?}, but the next deadline is {:?}",
            scopes.iter().map(|&i| LIVE[i]).collect::<Vec<_>>(),
            t.poll_timeout()
        );
    }
    Ok(())
}

fn run_live(backoff_window: f64, quota_window: f64, ops: &[LiveOp]) -> Result<(), TestCaseError> {
    let mut t =
        Throttler::new(live_settings(backoff_window, quota_window), Timestamp::ZERO).unwrap();
    let mut now = Timestamp::ZERO;
    let mut in_flight: Vec<Permit> = Vec::new();
    let mut waiting: Waiting = BTreeMap::new();
    // Each scope's waiters in arrival order (the order the throttler must serve them).
    let mut queues: BTreeMap<usize, Vec<Ticket>> = BTreeMap::new();

    let settle = |t: &mut Throttler,
                  now: Timestamp,
                  waiting: &mut Waiting,
                  queues: &mut BTreeMap<usize, Vec<Ticket>>,
                  in_flight: &mut Vec<Permit>| {
        let mut admitted = Vec::new();
        drive(t, now, &mut admitted);
        for (ticket, p) in admitted {
            waiting.remove(&ticket);
            for q in queues.values_mut() {
                q.retain(|&x| x != ticket);
            }
            in_flight.push(p);
        }
    };

    for op in ops {
        match op {
            LiveOp::Arrive { scopes, amount } => {
                let uses: Vec<ScopeUse<'_>> = scopes
                    .iter()
                    .map(|&i| ScopeUse::with_amount(LIVE[i], *amount))
                    .collect();
                match t.try_acquire_or_enqueue(&uses, RequestFlags::default(), now) {
                    Ok(p) => in_flight.push(p),
                    Err((ticket, _)) => {
                        for &i in scopes {
                            queues.entry(i).or_default().push(ticket);
                        }
                        waiting.insert(ticket, (scopes.clone(), *amount));
                    }
                }
            }
            LiveOp::Finish { which, status } => {
                if !in_flight.is_empty() {
                    let p = in_flight.swap_remove(which % in_flight.len());
                    t.release(p, &Outcome::status(*status), now);
                }
            }
            LiveOp::Cancel { which } => {
                if let Some(&ticket) = waiting.keys().nth(which % waiting.len().max(1)) {
                    prop_assert!(t.cancel(ticket));
                    waiting.remove(&ticket);
                    for q in queues.values_mut() {
                        q.retain(|&x| x != ticket);
                    }
                }
            }
            LiveOp::Advance { millis } => {
                // A runtime sleeps until the throttler's next deadline, wakes, serves
                // whoever it woke, and sleeps again; nothing completes meanwhile.
                let target = now + Duration::from_millis(*millis);
                while let Some(d) = t.poll_timeout().filter(|&d| d <= target) {
                    now = now.max(d);
                    settle(&mut t, now, &mut waiting, &mut queues, &mut in_flight);
                    no_forgotten_waiter(&mut t, now, &waiting, &queues)?;
                }
                now = target;
                // No deadline came up to here: nobody may be ready to go now.
                no_forgotten_waiter(&mut t, now, &waiting, &queues)?;
            }
        }
        settle(&mut t, now, &mut waiting, &mut queues, &mut in_flight);
        no_forgotten_waiter(&mut t, now, &waiting, &queues)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn no_scope_has_a_free_slot_a_ready_waiter_and_no_deadline(
        backoff_window in prop::sample::select(vec![0.0, 3.0, 10.0]),
        quota_window in prop::sample::select(vec![0.0, 5.0, 20.0]),
        ops in prop::collection::vec(live_op_strategy(), 1..100),
    ) {
        run_live(backoff_window, quota_window, &ops)?;
    }
}
