//! Unit tests of every rule and number in docs/behaviour.md sections 2 and 3, on a fake clock.

// Many tests take permits only to keep requests in flight.
#![allow(unused_must_use, clippy::field_reassign_with_default)]

use super::*;
use crate::config::{BackoffConfig, BackoffTarget, Jitter, Rampup, RampupConfig};
use crate::scope::ScopeSnapshot;
use crate::time::secs_to_duration;
use std::{boxed::Box, format, string::String, vec, vec::Vec};

fn at(secs: f64) -> Timestamp {
    Timestamp::from_secs_f64(secs)
}

fn new(settings: Settings) -> Throttler {
    Throttler::new(settings.without_jitter(), Timestamp::ZERO).unwrap()
}

fn acquire(t: &mut Throttler, scope: &str, now: f64) -> Result<Permit, NotReady> {
    t.try_acquire(&[ScopeUse::new(scope)], at(now))
}

#[track_caller]
fn admit(t: &mut Throttler, scope: &str, now: f64) -> Permit {
    match acquire(t, scope, now) {
        Ok(p) => p,
        Err(e) => panic!("{scope} not admitted at {now}: {e:?}"),
    }
}

#[track_caller]
fn finish(t: &mut Throttler, p: Permit, status: u16, now: f64) {
    assert!(t.release(p, &Outcome::status(status), at(now)));
}

fn stats(t: &mut Throttler, scope: &str, now: f64) -> ScopeStats {
    t.scope_stats(scope, at(now))
        .expect("scope state in memory")
}

fn not_until(secs: f64) -> Result<Permit, NotReady> {
    Err(NotReady::NotUntil(at(secs)))
}

// ---------------------------------------------------------------- delay and concurrency

#[test]
fn delay_counts_from_the_send() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(2.0)));
    let p = admit(&mut t, "a.com", 0.0);
    assert_eq!(acquire(&mut t, "a.com", 0.5), not_until(2.0));
    finish(&mut t, p, 200, 1.5);
    assert_eq!(acquire(&mut t, "a.com", 1.9), not_until(2.0));
    let p = admit(&mut t, "a.com", 2.0);
    finish(&mut t, p, 200, 2.1);
    assert_eq!(acquire(&mut t, "a.com", 2.1), not_until(4.0));
    // The default delay is download_delay.
    let mut s = Settings::default();
    s.download_delay = 0.25;
    let mut t = new(s);
    let _p = admit(&mut t, "b.com", 0.0);
    assert_eq!(acquire(&mut t, "b.com", 0.0), not_until(0.25));
}

#[test]
fn concurrency_limits_and_unlimited() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(2)));
    let p1 = admit(&mut t, "a.com", 0.0);
    let _p2 = admit(&mut t, "a.com", 0.0);
    assert_eq!(acquire(&mut t, "a.com", 0.0), Err(NotReady::Blocked));
    finish(&mut t, p1, 200, 1.0);
    admit(&mut t, "a.com", 1.0);

    let mut s = Settings::default().with_scope("free", ScopeConfig::new().concurrency(0));
    s.concurrent_requests = 1000;
    let mut t = new(s);
    for _ in 0..1000 {
        admit(&mut t, "free", 0.0);
    }
    assert_eq!(t.in_flight(), 1000);
}

#[test]
fn default_concurrency_by_scope_kind() {
    let mut s = Settings::default();
    s.concurrent_requests = 100;
    let mut t = new(s.clone());
    for (scope, expected) in [("example.com", 8), ("10.1.2.3:8080", 8), ("api", 1)] {
        let mut n = 0;
        while acquire(&mut t, scope, 0.0).is_ok() {
            n += 1;
        }
        assert_eq!(n, expected, "{scope}");
    }
    s.concurrent_requests_per_ip = 3;
    let mut t = new(s);
    let mut n = 0;
    while acquire(&mut t, "[::1]:80", 0.0).is_ok() {
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn global_cap_and_dont_throttle() {
    let mut t = new(Settings::default());
    let mut permits = vec![];
    for i in 0..16 {
        permits.push(admit(&mut t, &format!("h{i}.com"), 0.0));
    }
    assert_eq!(acquire(&mut t, "other.com", 0.0), Err(NotReady::Blocked));
    // dont_throttle bypasses every gate and is not counted.
    let flags = RequestFlags::default().dont_throttle(true);
    let free = t
        .try_acquire_with(&["h0.com".into()], flags, at(0.0))
        .unwrap();
    assert_eq!(t.in_flight(), 16);
    assert!(t.release(free, &Outcome::status(429), at(0.0)));
    assert_eq!(stats(&mut t, "h0.com", 0.0).level, 0);
    finish(&mut t, permits.pop().unwrap(), 200, 1.0);
    admit(&mut t, "other.com", 1.0);
}

#[test]
fn jitter_spreads_the_delay() {
    let settings = Settings::default()
        .with_scope("half.com", ScopeConfig::new().delay(2.0).concurrency(0))
        .with_scope(
            "range.com",
            ScopeConfig::new()
                .delay(2.0)
                .concurrency(0)
                .jitter(Jitter::Range {
                    low: 0.0,
                    high: 0.25,
                }),
        );
    for (scope, lo, hi) in [("half.com", 1.0, 3.0), ("range.com", 2.0, 2.5)] {
        let mut t = Throttler::new(settings.clone(), Timestamp::ZERO).unwrap();
        let mut now = 0.0;
        let (mut min, mut max) = (f64::MAX, 0.0f64);
        for _ in 0..500 {
            let p = admit(&mut t, scope, now);
            finish(&mut t, p, 200, now);
            let Err(NotReady::NotUntil(next)) = acquire(&mut t, scope, now) else {
                panic!("expected a delay")
            };
            let gap = next.as_secs_f64() - now;
            assert!((lo - 1e-9..=hi + 1e-9).contains(&gap), "{scope}: gap {gap}");
            min = min.min(gap);
            max = max.max(gap);
            now = next.as_secs_f64();
        }
        assert!(min < lo + 0.1 && max > hi - 0.1, "{scope}: {min}..{max}");
    }
}

#[test]
fn same_seed_same_jitter() {
    let run = |seed| {
        let mut s = Settings::default().with_scope("a.com", ScopeConfig::new().delay(1.0));
        s.seed = seed;
        let mut t = Throttler::new(s, Timestamp::ZERO).unwrap();
        let mut times = vec![];
        let mut now = at(0.0);
        for _ in 0..20 {
            let p = t.try_acquire(&["a.com".into()], now).unwrap();
            t.release(p, &Outcome::status(200), now);
            let Err(NotReady::NotUntil(next)) = t.try_acquire(&["a.com".into()], now) else {
                panic!()
            };
            times.push(next);
            now = next;
        }
        times
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

// ---------------------------------------------------------------------------- backoff

#[test]
fn backoff_steps_double_from_min_delay_up_to_the_cap() {
    let mut s = Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0));
    s.concurrent_requests = 100;
    let mut t = new(s);
    let permits: Vec<_> = (0..12).map(|_| admit(&mut t, "a.com", 0.0)).collect();
    let expected = [
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0, 300.0,
    ];
    for (level, (p, delay)) in permits.into_iter().zip(expected).enumerate() {
        assert!(t.release(p, &Outcome::status(429), at(0.0)));
        let st = stats(&mut t, "a.com", 0.0);
        assert_eq!((st.level, st.delay), (level as u32 + 1, delay));
        // The next send is no earlier than now + delay.
        assert_eq!(acquire(&mut t, "a.com", 0.0), not_until(delay));
    }
}

#[test]
fn backoff_from_a_base_delay_and_never_lowering() {
    let mut t = new(Settings::default()
        .with_scope("five.com", ScopeConfig::new().delay(5.0).concurrency(0))
        .with_scope("slow.com", ScopeConfig::new().delay(500.0).concurrency(0)));
    let p1 = admit(&mut t, "five.com", 0.0);
    let p2 = admit(&mut t, "five.com", 5.0);
    finish(&mut t, p1, 503, 6.0);
    assert_eq!(stats(&mut t, "five.com", 6.0).delay, 10.0);
    assert_eq!(acquire(&mut t, "five.com", 6.0), not_until(16.0));
    finish(&mut t, p2, 503, 7.0);
    assert_eq!(stats(&mut t, "five.com", 7.0).delay, 20.0);
    // A base above backoff_max_delay is not lowered by the clamp.
    let p = admit(&mut t, "slow.com", 0.0);
    finish(&mut t, p, 429, 1.0);
    let st = stats(&mut t, "slow.com", 1.0);
    assert_eq!((st.level, st.delay), (1, 500.0));
}

#[test]
fn what_triggers_backoff() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0)));
    let mut level = 0;
    for (step, (outcome, triggers)) in [
        (Outcome::status(200), false),
        (Outcome::status(500), false),
        (Outcome::status(404), false),
        (Outcome::status(429), true),
        (Outcome::status(503), true),
        (Outcome::status(524), true),
        (Outcome::error("timeout"), true),
        (Outcome::error("connection"), true),
        (Outcome::error("data_loss"), true),
        (Outcome::error("dns"), false),
        (Outcome::Cancelled, false),
    ]
    .into_iter()
    .enumerate()
    {
        // Sends are spaced by backoff; acquire far enough in the future each time.
        let now = 1000.0 * step as f64;
        let p = t.try_acquire(&["a.com".into()], at(now)).expect("admitted");
        t.release(p, &outcome, at(now));
        if triggers {
            level += 1;
        }
        assert_eq!(
            t.scope_stats("a.com", at(now)).unwrap().triggers,
            level,
            "{outcome:?}"
        );
    }
}

#[test]
fn dont_track_never_triggers() {
    let mut t = new(Settings::default());
    let flags = RequestFlags::default().dont_track(true);
    let p = t
        .try_acquire_with(&["a.com".into()], flags, at(0.0))
        .unwrap();
    t.release(
        p,
        &Outcome::response(429, [("Retry-After", "60")], None),
        at(0.0),
    );
    let st = stats(&mut t, "a.com", 0.0);
    assert_eq!((st.level, st.triggers, st.done), (0, 0, 1));
    admit(&mut t, "a.com", 0.0);
}

#[test]
fn per_scope_backoff_overrides() {
    let backoff = BackoffConfig {
        http_codes: Some(vec![503]),
        exceptions: Some(vec!["dns".into()]),
        delay_factor: Some(3.0),
        min_delay: Some(5.0),
        max_delay: Some(20.0),
        jitter: Some(Jitter::NONE),
    };
    let mut t = new(Settings::default().with_scope(
        "api.com",
        ScopeConfig::new().concurrency(0).backoff(backoff),
    ));
    let ps: Vec<_> = (0..6).map(|_| admit(&mut t, "api.com", 0.0)).collect();
    finish(&mut t, ps[0], 429, 0.0); // not in this scope's codes
    assert_eq!(stats(&mut t, "api.com", 0.0).level, 0);
    t.release(ps[1], &Outcome::error("timeout"), at(0.0)); // nor this error
    assert_eq!(stats(&mut t, "api.com", 0.0).level, 0);
    t.release(ps[2], &Outcome::error("dns"), at(0.0));
    assert_eq!(stats(&mut t, "api.com", 0.0).delay, 5.0);
    finish(&mut t, ps[3], 503, 0.0);
    assert_eq!(stats(&mut t, "api.com", 0.0).delay, 15.0);
    finish(&mut t, ps[4], 503, 0.0);
    assert_eq!(stats(&mut t, "api.com", 0.0).delay, 20.0);
    finish(&mut t, ps[5], 503, 0.0);
    let st = stats(&mut t, "api.com", 0.0);
    assert_eq!((st.level, st.delay), (4, 20.0));
}

#[test]
fn a_trigger_applies_to_every_scope_of_the_request() {
    let mut t = new(Settings::default()
        .with_scope("a.com", ScopeConfig::new().concurrency(0))
        .with_scope(
            "only-503",
            ScopeConfig::new()
                .concurrency(0)
                .backoff(BackoffConfig::default().http_codes(vec![503])),
        ));
    let both = [
        ScopeUse::new("a.com"),
        ScopeUse::new("cost"),
        ScopeUse::new("only-503"),
    ];
    let p = t.try_acquire(&both, at(0.0)).unwrap();
    finish(&mut t, p, 429, 0.0);
    assert_eq!(stats(&mut t, "a.com", 0.0).level, 1);
    assert_eq!(stats(&mut t, "cost", 0.0).level, 1);
    assert_eq!(
        stats(&mut t, "only-503", 0.0).level,
        0,
        "its own codes decide"
    );
}

#[test]
fn backoff_jitter_applies_per_send_and_never_below_min_delay() {
    let mut s = Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0));
    s.backoff_jitter = Jitter::Range {
        low: -0.9,
        high: 0.0,
    };
    s.randomize_download_delay = Jitter::NONE;
    let mut t = Throttler::new(s, Timestamp::ZERO).unwrap();
    let ps: Vec<_> = (0..2).map(|_| admit(&mut t, "a.com", 0.0)).collect();
    for p in ps {
        finish(&mut t, p, 429, 0.0); // delay 1, then 2
    }
    let (mut floored, mut jittered) = (0, 0);
    let mut now = 0.0;
    while now < 50.0 {
        let Err(NotReady::NotUntil(next)) = acquire(&mut t, "a.com", now) else {
            panic!()
        };
        let gap = next.as_secs_f64() - now;
        assert!(
            (1.0 - 1e-9..=2.0 + 1e-9).contains(&gap),
            "spacing {gap} outside [min_delay, delay]"
        );
        floored += usize::from((gap - 1.0).abs() < 1e-9);
        jittered += usize::from(gap > 1.0 + 1e-9 && gap < 2.0);
        now = next.as_secs_f64();
        let p = admit(&mut t, "a.com", now);
        finish(&mut t, p, 200, now);
        // The stored delay never compounds the jitter.
        assert_eq!(stats(&mut t, "a.com", now).delay, 2.0);
    }
    assert!(
        floored > 0 && jittered > 0,
        "{floored} floored, {jittered} jittered"
    );
}

// --------------------------------------------------------------------------- recovery

#[test]
fn recovery_timeline_is_lazy_and_linear() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(0.5)));
    let ps: Vec<_> = (0..3)
        .map(|i| admit(&mut t, "a.com", i as f64 * 0.5))
        .collect();
    for p in ps {
        finish(&mut t, p, 429, 1.0);
    }
    // 0.5 → 1 → 2 → 4
    let st = stats(&mut t, "a.com", 1.0);
    assert_eq!((st.level, st.delay), (3, 4.0));
    for (now, level, delay) in [
        (60.9, 3, 4.0),
        (61.0, 2, 2.0),
        (120.9, 2, 2.0),
        (121.0, 1, 1.0),
        (180.0, 1, 1.0),
        (181.0, 0, 0.5),
        (1e6, 0, 0.5),
    ] {
        let st = stats(&mut t, "a.com", now);
        assert_eq!((st.level, st.delay), (level, delay), "at {now}");
    }
}

#[test]
fn recovery_jumps_several_windows_at_once_and_floors_at_min_delay() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0)));
    let ps: Vec<_> = (0..5).map(|_| admit(&mut t, "a.com", 0.0)).collect();
    for p in ps {
        finish(&mut t, p, 429, 0.0);
    }
    assert_eq!(stats(&mut t, "a.com", 0.0).delay, 16.0);
    // Four windows in one jump: 16 → 8 → 4 → 2 → 1 (min_delay floor while level > 0).
    let st = stats(&mut t, "a.com", 240.0);
    assert_eq!((st.level, st.delay), (1, 1.0));
    let st = stats(&mut t, "a.com", 300.0);
    assert_eq!((st.level, st.delay), (0, 0.0), "exactly the base again");
}

#[test]
fn a_new_trigger_restarts_the_countdown() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0)));
    let p = admit(&mut t, "a.com", 0.0);
    finish(&mut t, p, 429, 0.0);
    let p = admit(&mut t, "a.com", 50.0);
    finish(&mut t, p, 429, 50.0);
    let st = stats(&mut t, "a.com", 100.0);
    assert_eq!(
        (st.level, st.delay),
        (2, 2.0),
        "no step 60 s after the first trigger"
    );
    let st = stats(&mut t, "a.com", 110.0);
    assert_eq!((st.level, st.delay), (1, 1.0));
    // A trigger during recovery never lowers the delay.
    let p = admit(&mut t, "a.com", 111.0);
    finish(&mut t, p, 429, 111.0);
    assert_eq!(stats(&mut t, "a.com", 111.0).delay, 2.0);
}

#[test]
fn backoff_never_changes_concurrency() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(3)));
    let ps: Vec<_> = (0..3).map(|_| admit(&mut t, "a.com", 0.0)).collect();
    for p in ps {
        finish(&mut t, p, 503, 0.0);
    }
    assert_eq!(stats(&mut t, "a.com", 0.0).concurrency, 3);
}

// ------------------------------------------------------------------------ header delays

#[test]
fn retry_after_is_a_hard_minimum_that_does_not_grow_the_delay() {
    let mut t = new(Settings::default());
    let p = admit(&mut t, "a.com", 0.0);
    let limited = Outcome::response(429, [("Retry-After", "30")], None);
    t.release(p, &limited, at(0.5));
    let st = stats(&mut t, "a.com", 0.5);
    assert_eq!((st.level, st.delay, st.hard_until), (1, 1.0, at(30.5)));
    assert_eq!(acquire(&mut t, "a.com", 1.0), not_until(30.5));
    admit(&mut t, "a.com", 30.5);
    // After it elapses the spacing is max(delay, min_delay), not the header value.
    assert_eq!(acquire(&mut t, "a.com", 30.5), not_until(31.5));
}

#[test]
fn header_delays_are_capped_ignored_on_success_and_never_shortened() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0)));
    let p = admit(&mut t, "a.com", 0.0);
    t.release(
        p,
        &Outcome::response(503, [("Retry-After", "1000")], None),
        at(0.5),
    );
    assert_eq!(
        stats(&mut t, "a.com", 0.5).hard_until,
        at(300.5),
        "capped at max_delay"
    );

    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0)));
    let p = admit(&mut t, "a.com", 0.0);
    t.release(
        p,
        &Outcome::response(200, [("Retry-After", "60")], None),
        at(0.0),
    );
    let st = stats(&mut t, "a.com", 0.0);
    assert_eq!(
        (st.level, st.hard_until),
        (0, Timestamp::ZERO),
        "a 200 is not a trigger"
    );

    let ps: Vec<_> = (0..2).map(|_| admit(&mut t, "a.com", 0.0)).collect();
    t.release(
        ps[0],
        &Outcome::response(429, [("Retry-After", "100")], None),
        at(0.0),
    );
    t.release(
        ps[1],
        &Outcome::response(429, [("Retry-After", "10")], None),
        at(1.0),
    );
    assert_eq!(
        acquire(&mut t, "a.com", 50.0),
        not_until(100.0),
        "never shortened"
    );
}

#[test]
fn invalid_header_values_fall_back_to_an_exponential_step() {
    for bad in ["-3", "0", "inf", "soon", "Sun, 06 Nov 1994 08:49:37 GMT"] {
        let mut t = new(Settings::default());
        let p = admit(&mut t, "a.com", 0.0);
        let wall = Some(Timestamp::from_secs(1_800_000_000));
        t.release(
            p,
            &Outcome::response(429, [("Retry-After", bad)], wall),
            at(10.0),
        );
        let st = stats(&mut t, "a.com", 10.0);
        assert_eq!(
            (st.level, st.delay, st.hard_until),
            (1, 1.0, Timestamp::ZERO),
            "{bad}"
        );
        assert_eq!(acquire(&mut t, "a.com", 10.0), not_until(11.0), "{bad}");
    }
}

#[test]
fn header_forms_and_largest_wins() {
    let wall = Timestamp::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    let cases: [(&[(&str, &str)], f64); 5] = [
        (&[("Retry-After", "Sun, 06 Nov 1994 08:50:37 GMT")], 60.0),
        (&[("RateLimit-Reset", "2.5")], 2.5),
        (&[("RateLimit", "limit=10, remaining=0, reset=7")], 7.0),
        (&[("X-RateLimit-Reset", "20")], 20.0),
        (
            &[
                ("retry-after", "3"),
                ("ratelimit-reset", "9"),
                ("x-ratelimit-reset", "4"),
            ],
            9.0,
        ),
    ];
    for (headers, secs) in cases {
        let mut t = new(Settings::default());
        let p = admit(&mut t, "a.com", 0.0);
        t.release(
            p,
            &Outcome::response(429, headers.iter().copied(), Some(wall)),
            at(1.0),
        );
        assert_eq!(
            stats(&mut t, "a.com", 1.0).hard_until,
            at(1.0 + secs),
            "{headers:?}"
        );
    }
}

// ------------------------------------------------------------------------------ rampup

fn rampup_settings() -> Settings {
    Settings::default().with_scope(
        "api",
        ScopeConfig::new()
            .delay(1.0)
            .max_concurrency(3)
            .rampup(RampupConfig::default().delay_factor(0.5).min_delay(0.25)),
    )
}

#[test]
fn rampup_lowers_the_delay_then_raises_concurrency() {
    let mut t = new(rampup_settings());
    let st = stats_after_first_use(&mut t);
    assert_eq!(
        (st.delay, st.concurrency),
        (1.0, 1),
        "starts at min_concurrency"
    );
    for (now, delay, concurrency) in [
        (59.9, 1.0, 1),
        (60.0, 0.5, 1),
        (120.0, 0.25, 1),
        (180.0, 0.25, 2),
        (240.0, 0.25, 3),
        (300.0, 0.25, 3),
        (3600.0, 0.25, 3),
    ] {
        let st = stats(&mut t, "api", now);
        assert_eq!(
            (st.delay, st.base_delay, st.concurrency),
            (delay, delay, concurrency),
            "at {now}"
        );
    }
    // Several windows at once reach the same state.
    let mut t = new(rampup_settings());
    stats_after_first_use(&mut t);
    let st = stats(&mut t, "api", 250.0);
    assert_eq!((st.delay, st.concurrency), (0.25, 3));
}

fn stats_after_first_use(t: &mut Throttler) -> ScopeStats {
    let p = admit(t, "api", 0.0);
    finish(t, p, 200, 0.1);
    stats(t, "api", 0.1)
}

#[test]
fn rampup_window_starts_at_first_use() {
    let mut t = new(rampup_settings());
    assert_eq!(t.check(&["api".into()], at(0.0)), Ok(()));
    let p = admit(&mut t, "api", 10.0);
    finish(&mut t, p, 200, 10.0);
    assert_eq!(stats(&mut t, "api", 69.9).delay, 1.0);
    assert_eq!(stats(&mut t, "api", 70.0).delay, 0.5);
}

#[test]
fn rampup_holds_inside_the_target_and_backs_off_above_it() {
    // One trigger (= lo = hi) in the first window only counts: the rate holds, and the
    // window's boundary does not step; the quiet second window does.
    let mut t = new(rampup_settings());
    let p = admit(&mut t, "api", 0.0);
    finish(&mut t, p, 429, 0.0);
    let st = stats(&mut t, "api", 0.0);
    assert_eq!(
        (st.level, st.delay, st.triggers),
        (0, 1.0, 1),
        "held, not backed off"
    );
    assert_eq!(
        acquire(&mut t, "api", 1.0).map(|_| ()),
        Ok(()),
        "spacing unchanged"
    );
    assert_eq!(
        stats(&mut t, "api", 60.0).delay,
        1.0,
        "a window on target holds"
    );
    assert_eq!(stats(&mut t, "api", 120.0).delay, 0.5);

    // Range [1, 3]: three triggers hold (a header delay is still a hard minimum); the
    // fourth in the same window is ordinary backoff.
    let mut s = rampup_settings();
    if let Rampup::On(r) = &mut s.scopes.get_mut("api").unwrap().rampup {
        r.backoff_target = Some(BackoffTarget { low: 1, high: 3 });
    }
    s.scopes.get_mut("api").unwrap().concurrency = Some(0);
    let mut t = new(s);
    let ps: Vec<_> = (0..4).map(|i| admit(&mut t, "api", i as f64)).collect();
    let limited = Outcome::response(429, [("Retry-After", "10")], None);
    for p in &ps[..3] {
        t.release(*p, &limited, at(3.0));
    }
    let st = stats(&mut t, "api", 3.0);
    assert_eq!((st.level, st.delay, st.hard_until), (0, 1.0, at(13.0)));
    finish(&mut t, ps[3], 429, 3.0);
    let st = stats(&mut t, "api", 3.0);
    assert_eq!((st.level, st.delay), (1, 2.0));
    // No rampup step while backing off: the boundary at 60 sees level 1 (recovery is
    // at 63), the window from 60 is quiet and steps at 120.
    let st = stats(&mut t, "api", 62.0);
    assert_eq!((st.level, st.delay), (1, 2.0));
    let st = stats(&mut t, "api", 119.0);
    assert_eq!((st.level, st.delay), (0, 1.0));
    assert_eq!(stats(&mut t, "api", 120.0).delay, 0.5);
}

#[test]
fn rampup_steps_back_when_it_overshoots() {
    let mut s = rampup_settings();
    if let Rampup::On(r) = &mut s.scopes.get_mut("api").unwrap().rampup {
        r.step_back = Some(true);
    }
    let mut t = new(s);
    stats_after_first_use(&mut t);
    // Ramped to delay 0.25, then concurrency 2 (at 180).
    assert_eq!((stats(&mut t, "api", 180.0).concurrency), 2);
    // Two 429s in one window (target 1): the second undoes the last step (the
    // concurrency raise) and backs off; a third in the same window undoes nothing more.
    let ps = [admit(&mut t, "api", 181.0), admit(&mut t, "api", 181.25)];
    finish(&mut t, ps[0], 429, 181.5);
    finish(&mut t, ps[1], 429, 181.5);
    let st = stats(&mut t, "api", 181.5);
    assert_eq!((st.level, st.base_delay, st.concurrency), (1, 0.25, 1));
    let p = admit(&mut t, "api", 185.0);
    finish(&mut t, p, 429, 185.0);
    assert_eq!(stats(&mut t, "api", 185.0).concurrency, 1);
    // Next window: at concurrency 1 (the start), the delay cut is undone instead.
    let ps = admit(&mut t, "api", 250.0);
    finish(&mut t, ps, 429, 250.0);
    let p = admit(&mut t, "api", 260.0);
    finish(&mut t, p, 429, 260.0);
    let st = stats(&mut t, "api", 260.0);
    assert_eq!((st.base_delay, st.concurrency), (0.5, 1));
    // Never above the starting delay.
    for w in 0..4 {
        let now = 400.0 + 60.0 * w as f64;
        for k in 0..2 {
            let p = admit(&mut t, "api", now + 10.0 * k as f64);
            finish(&mut t, p, 429, now + 10.0 * k as f64);
        }
        assert!(stats(&mut t, "api", now + 10.0).base_delay <= 1.0);
    }
    assert_eq!(stats(&mut t, "api", 590.0).base_delay, 1.0);

    // Off (the default): the same burst leaves the ramped concurrency alone.
    let mut t = new(rampup_settings());
    stats_after_first_use(&mut t);
    let ps = [admit(&mut t, "api", 181.0), admit(&mut t, "api", 181.25)];
    finish(&mut t, ps[0], 429, 181.5);
    finish(&mut t, ps[1], 429, 181.5);
    let st = stats(&mut t, "api", 181.5);
    assert_eq!((st.level, st.base_delay, st.concurrency), (1, 0.25, 2));
}

#[test]
fn rampup_never_undoes_a_crawl_delay() {
    let mut t = new(rampup_settings());
    touch(&mut t, "api", 0.0);
    assert!(matches!(
        t.handle_crawl_delay("api", 0.5, at(0.0)),
        Ok(CrawlDelayDecision::Applied { delay, concurrency: 1 }) if delay == 1.0
    ));
    let st = stats(&mut t, "api", 3600.0);
    assert_eq!(
        (st.delay, st.concurrency),
        (1.0, 1),
        "Crawl-delay is rampup's floor"
    );
    let mut t = new(rampup_settings());
    touch(&mut t, "api", 0.0);
    assert_eq!(stats(&mut t, "api", 60.0).delay, 0.5);
    t.handle_crawl_delay("api", 0.4, at(60.0)).unwrap();
    let st = stats(&mut t, "api", 3600.0);
    assert_eq!((st.delay, st.concurrency), (0.5, 1));
}

#[test]
fn rampup_with_explicit_concurrency_and_a_zero_floor() {
    let mut t = new(Settings::default().with_scope(
        "api",
        ScopeConfig::new()
            .concurrency(2)
            .max_concurrency(4)
            .delay(0.004)
            .rampup(RampupConfig::default()),
    ));
    let p = admit(&mut t, "api", 0.0);
    finish(&mut t, p, 200, 0.0);
    assert_eq!(stats(&mut t, "api", 0.0).concurrency, 2);
    // 0.004 → 0.002 → 0.001 → snapped to 0 (closer than 1 ms), then concurrency.
    assert_eq!(stats(&mut t, "api", 60.0).delay, 0.002);
    assert_eq!(stats(&mut t, "api", 120.0).delay, 0.001);
    assert_eq!(stats(&mut t, "api", 180.0).delay, 0.0);
    assert_eq!(stats(&mut t, "api", 240.0).concurrency, 3);
    assert_eq!(stats(&mut t, "api", 300.0).concurrency, 4);
    assert_eq!(stats(&mut t, "api", 1e5).concurrency, 4);
}

// ------------------------------------------------------------------------------ quotas

fn quota_settings() -> Settings {
    Settings::default().with_scope(
        "cost",
        ScopeConfig::new().concurrency(0).quota(10.0).window(60.0),
    )
}

fn spend(t: &mut Throttler, amount: f64, now: f64) -> Result<Permit, NotReady> {
    t.try_acquire(&[ScopeUse::with_amount("cost", amount)], at(now))
}

#[test]
fn quota_windows_hold_requests_until_the_window_ends() {
    let mut t = new(quota_settings());
    spend(&mut t, 4.0, 7.0).unwrap(); // the window starts at the first use: 7
    spend(&mut t, 4.0, 8.0).unwrap();
    assert_eq!(spend(&mut t, 4.0, 9.0), not_until(67.0));
    spend(&mut t, 2.0, 9.0).unwrap(); // exactly the quota
    assert_eq!(spend(&mut t, 0.5, 9.0), not_until(67.0));
    spend(&mut t, 4.0, 67.0).unwrap();
    assert_eq!(stats(&mut t, "cost", 67.0).consumed, 4.0);
    // Windows stay anchored: after a long pause the window is 187..247.
    assert_eq!(stats(&mut t, "cost", 200.0).consumed, 0.0);
    spend(&mut t, 10.0, 200.0).unwrap();
    assert_eq!(spend(&mut t, 1.0, 200.0), not_until(247.0));
}

#[test]
fn one_oversized_request_goes_when_nothing_was_consumed() {
    let mut t = new(quota_settings());
    spend(&mut t, 15.0, 0.0).unwrap();
    assert_eq!(spend(&mut t, 0.1, 1.0), not_until(60.0));
    spend(&mut t, 15.0, 60.0).unwrap();
    // Plain scope uses consume one unit.
    let mut t = new(quota_settings());
    for _ in 0..10 {
        t.try_acquire(&["cost".into()], at(0.0)).unwrap();
    }
    assert_eq!(t.try_acquire(&["cost".into()], at(0.0)), not_until(60.0));
}

#[test]
fn quota_reconciliation() {
    let mut t = new(quota_settings());
    spend(&mut t, 2.0, 0.0).unwrap();
    t.reconcile_quota("cost", QuotaReconcile::Consumed(5.0), at(1.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 1.0).consumed, 7.0);
    assert_eq!(spend(&mut t, 4.0, 1.0), not_until(60.0));
    t.reconcile_quota("cost", QuotaReconcile::Consumed(-100.0), at(1.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 1.0).consumed, 0.0, "never negative");
    t.reconcile_quota("cost", QuotaReconcile::Remaining(1.0), at(2.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 2.0).consumed, 9.0);
    assert_eq!(spend(&mut t, 2.0, 2.0), not_until(60.0));
    let err = t
        .reconcile_quota("cost", QuotaReconcile::Remaining(f64::NAN), at(2.0))
        .unwrap_err();
    assert_eq!(err.key(), "remaining");
    // A scope without a quota ignores reconciliation.
    t.reconcile_quota("a.com", QuotaReconcile::Consumed(5.0), at(2.0))
        .unwrap();
    assert_eq!(stats(&mut t, "a.com", 2.0).consumed, 0.0);
}

#[test]
fn reconciliation_before_any_send_starts_the_window() {
    let mut t = new(quota_settings());
    t.reconcile_quota("cost", QuotaReconcile::Remaining(0.0), at(5.0))
        .unwrap();
    assert_eq!(spend(&mut t, 1.0, 6.0), not_until(65.0));
}

// ------------------------------------------------------------------------- crawl-delay

#[test]
fn crawl_delay_raises_the_delay_and_sets_concurrency_to_one() {
    let mut t = new(Settings::default());
    assert_eq!(
        t.handle_crawl_delay("a.com", 5.0, at(0.0)).unwrap(),
        CrawlDelayDecision::Applied {
            delay: 5.0,
            concurrency: 1
        }
    );
    let st = stats(&mut t, "a.com", 0.0);
    assert_eq!((st.base_delay, st.delay, st.concurrency), (5.0, 5.0, 1));
    // Capped at throttling_robotstxt_max_delay, never lowered.
    assert_eq!(
        t.handle_crawl_delay("b.com", 100.0, at(0.0)).unwrap(),
        CrawlDelayDecision::Applied {
            delay: 60.0,
            concurrency: 1
        }
    );
    t.handle_crawl_delay("a.com", 2.0, at(0.0)).unwrap();
    assert_eq!(stats(&mut t, "a.com", 0.0).base_delay, 5.0);
    let err = t.handle_crawl_delay("a.com", -1.0, at(0.0)).unwrap_err();
    assert_eq!(err.key(), "crawl_delay");
}

#[test]
fn crawl_delay_respects_a_more_aggressive_configuration_with_one_warning() {
    let mut t = new(Settings::default()
        .with_scope("fast.com", ScopeConfig::new().delay(1.0))
        .with_scope("wide.com", ScopeConfig::new().concurrency(4))
        .with_scope(
            "quiet.com",
            ScopeConfig::new().delay(0.0).ignore_robots_txt(true),
        )
        .with_scope("slow.com", ScopeConfig::new().delay(10.0))
        .with_scope("floor.com", ScopeConfig::new().min_concurrency(2)));
    let kept = |warned| Ok(CrawlDelayDecision::KeptConfig { warned });
    for scope in ["fast.com", "wide.com"] {
        t.check(&[scope.into()], at(0.0)).unwrap();
    }
    assert_eq!(t.handle_crawl_delay("fast.com", 5.0, at(0.0)), kept(true));
    assert_eq!(t.handle_crawl_delay("fast.com", 5.0, at(0.0)), kept(false));
    assert_eq!(stats(&mut t, "fast.com", 0.0).base_delay, 1.0);
    assert_eq!(t.handle_crawl_delay("wide.com", 5.0, at(0.0)), kept(true));
    assert_eq!(stats(&mut t, "wide.com", 0.0).concurrency, 4);
    assert_eq!(t.handle_crawl_delay("quiet.com", 5.0, at(0.0)), kept(false));
    // A configured delay at or above the Crawl-delay is no conflict.
    assert_eq!(
        t.handle_crawl_delay("slow.com", 5.0, at(0.0)),
        Ok(CrawlDelayDecision::Applied {
            delay: 10.0,
            concurrency: 1
        })
    );
    assert_eq!(
        t.handle_crawl_delay("floor.com", 5.0, at(0.0)),
        Ok(CrawlDelayDecision::Applied {
            delay: 5.0,
            concurrency: 2
        })
    );
    let mut s = Settings::default();
    s.throttling_robotstxt_obey = false;
    let mut t = new(s);
    assert_eq!(
        t.handle_crawl_delay("a.com", 5.0, at(0.0)),
        Ok(CrawlDelayDecision::Ignored)
    );
}

#[test]
fn crawl_delay_spaces_the_next_send_from_the_last_one() {
    let mut t = new(Settings::default());
    let p = admit(&mut t, "a.com", 0.0);
    finish(&mut t, p, 200, 0.1);
    t.handle_crawl_delay("a.com", 3.0, at(1.0)).unwrap();
    assert_eq!(acquire(&mut t, "a.com", 1.0), not_until(3.0));
}

// ---------------------------------------------------------------- programmatic control

#[test]
fn delay_scope_is_an_uncapped_hard_delay_counted_as_a_trigger() {
    let mut t = new(Settings::default());
    t.delay_scope("a.com", 600.0, at(1.0)).unwrap();
    let st = stats(&mut t, "a.com", 1.0);
    assert_eq!(
        (st.level, st.delay, st.hard_until, st.triggers),
        (1, 1.0, at(601.0), 1)
    );
    assert_eq!(acquire(&mut t, "a.com", 300.0), not_until(601.0));
    admit(&mut t, "a.com", 601.0);
    assert!(t.delay_scope("a.com", f64::NAN, at(1.0)).is_err());
}

#[test]
fn live_delay_and_concurrency_changes() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(10.0)));
    admit(&mut t, "a.com", 0.0);
    assert_eq!(acquire(&mut t, "a.com", 1.0), not_until(10.0));
    t.set_scope_delay("a.com", 2.0, at(1.0)).unwrap();
    assert_eq!(
        acquire(&mut t, "a.com", 1.0),
        not_until(2.0),
        "lowering re-spaces"
    );
    t.set_scope_delay("a.com", 20.0, at(1.0)).unwrap();
    assert_eq!(acquire(&mut t, "a.com", 1.0), not_until(20.0));
    assert_eq!(stats(&mut t, "a.com", 1.0).base_delay, 20.0);

    t.set_scope_concurrency("a.com", 1, at(1.0)).unwrap();
    assert_eq!(stats(&mut t, "a.com", 1.0).concurrency, 1);
    assert!(t.set_scope_delay("a.com", -1.0, at(1.0)).is_err());

    let mut t = new(Settings::default().with_scope("f.com", ScopeConfig::new().min_concurrency(2)));
    let err = t.set_scope_concurrency("f.com", 1, at(0.0)).unwrap_err();
    assert_eq!(err.key(), "concurrency");
    t.set_scope_concurrency("f.com", 0, at(0.0)).unwrap();
}

// ---------------------------------------------------------------------------- admission

#[test]
fn admission_is_all_or_nothing() {
    let mut t = new(Settings::default()
        .with_scope("a.com", ScopeConfig::new().delay(1.0))
        .with_scope("b.com", ScopeConfig::new().concurrency(1))
        .with_scope("c.com", ScopeConfig::new().delay(5.0)));
    let _b = admit(&mut t, "b.com", 0.0);
    let pair = [ScopeUse::new("a.com"), ScopeUse::new("b.com")];
    assert_eq!(t.try_acquire(&pair, at(0.0)), Err(NotReady::Blocked));
    let a = stats(&mut t, "a.com", 0.0);
    assert_eq!(
        (a.sent, a.active, a.next_allowed),
        (0, 0, Timestamp::ZERO),
        "nothing reserved"
    );
    // The wait is the latest of the scopes' times.
    touch(&mut t, "a.com", 0.0);
    touch(&mut t, "c.com", 0.0);
    let pair = [ScopeUse::new("a.com"), ScopeUse::new("c.com")];
    assert_eq!(t.try_acquire(&pair, at(0.0)), not_until(5.0));
    let p = t.try_acquire(&pair, at(5.0)).unwrap();
    assert_eq!(stats(&mut t, "a.com", 5.0).active, 1);
    assert_eq!(stats(&mut t, "c.com", 5.0).active, 1);
    finish(&mut t, p, 200, 6.0);
    assert_eq!(stats(&mut t, "a.com", 6.0).active, 0);
    assert_eq!(stats(&mut t, "c.com", 6.0).active, 0);
}

#[test]
fn load_is_the_busiest_scopes_share_of_its_concurrency() {
    let mut t = new(Settings::default()
        .with_scope("a.com", ScopeConfig::new().concurrency(4))
        .with_scope("free", ScopeConfig::new().concurrency(0)));
    let both = [ScopeUse::new("a.com"), ScopeUse::new("free")];
    assert_eq!(t.load(&both), 0.0);
    t.try_acquire(&both, at(0.0)).unwrap();
    assert_eq!(t.load(&both), 0.25);
    assert_eq!(t.load(&["free".into(), "unknown.com".into()]), 0.0);
}

#[test]
fn check_scope_ignores_the_global_cap_and_other_scopes() {
    let mut s = Settings::default().with_scope("slow.com", ScopeConfig::new().delay(5.0));
    s.concurrent_requests = 1;
    let mut t = new(s);
    let p = admit(&mut t, "slow.com", 0.0);
    assert_eq!(
        acquire(&mut t, "a.com", 0.0),
        Err(NotReady::Blocked),
        "global cap"
    );
    assert_eq!(t.check_scope(ScopeUse::new("a.com"), at(0.0)), Ok(()));
    assert_eq!(
        t.check_scope(ScopeUse::new("slow.com"), at(1.0)),
        Err(NotReady::NotUntil(at(5.0)))
    );
    finish(&mut t, p, 200, 1.0);
    let mut t = new(quota_settings());
    t.try_acquire(&[ScopeUse::with_amount("cost", 8.0)], at(0.0))
        .unwrap();
    assert_eq!(
        t.check_scope(ScopeUse::with_amount("cost", 2.0), at(0.0)),
        Ok(())
    );
    assert_eq!(
        t.check_scope(ScopeUse::with_amount("cost", 3.0), at(0.0)),
        Err(NotReady::NotUntil(at(60.0)))
    );
}

#[test]
fn hints_skip_lookups_and_survive_eviction() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 1;
    let mut t = new(s);
    let mut hint = [ScopeHint::default()];
    let uses = [ScopeUse::new("a.com")];
    let p = t
        .try_acquire_hinted(&uses, &mut hint, RequestFlags::default(), at(0.0))
        .unwrap();
    assert_ne!(hint[0], ScopeHint::default(), "filled in");
    let first = hint[0];
    finish(&mut t, p, 200, 0.0);
    let p = t
        .try_acquire_hinted(&uses, &mut hint, RequestFlags::default(), at(1.0))
        .unwrap();
    assert_eq!(hint[0], first, "reused");
    finish(&mut t, p, 200, 1.0);
    assert_eq!(stats(&mut t, "a.com", 1.0).sent, 2);
    touch(&mut t, "b.com", 2.0); // evicts a.com, reuses its slot
    assert!(t.scope_stats("a.com", at(2.0)).is_none());
    let p = t
        .try_acquire_hinted(&uses, &mut hint, RequestFlags::default(), at(3.0))
        .unwrap();
    assert_ne!(hint[0], first, "a stale hint is refreshed");
    finish(&mut t, p, 200, 3.0);
    assert_eq!(
        stats(&mut t, "a.com", 3.0).sent,
        1,
        "a fresh state, not b.com's"
    );
    // Mismatched lengths fall back to names.
    t.try_acquire_hinted(&uses, &mut [], RequestFlags::default(), at(4.0))
        .unwrap();
}

#[test]
fn release_is_idempotent() {
    let mut t = new(Settings::default());
    let p = admit(&mut t, "a.com", 0.0);
    assert!(t.release(p, &Outcome::status(429), at(0.0)));
    assert!(!t.release(p, &Outcome::status(429), at(0.0)));
    let st = stats(&mut t, "a.com", 0.0);
    assert_eq!((st.done, st.level, st.active), (1, 1, 0));
    assert_eq!(t.in_flight(), 0);
    // A reused slot does not accept the old handle.
    let q = admit(&mut t, "b.com", 0.0);
    assert!(!t.release(p, &Outcome::status(200), at(0.0)));
    assert!(t.release(q, &Outcome::status(200), at(0.0)));
}

#[test]
fn repeated_scopes_in_one_request_are_merged() {
    let mut t = new(quota_settings());
    let uses = [
        ScopeUse::with_amount("cost", 3.0),
        ScopeUse::with_amount("cost", 4.0),
    ];
    let p = t.try_acquire(&uses, at(0.0)).unwrap();
    let st = stats(&mut t, "cost", 0.0);
    assert_eq!((st.active, st.consumed, st.sent), (1, 7.0, 1));
    finish(&mut t, p, 200, 0.0);
    // Nonsense amounts count as zero.
    t.try_acquire(&[ScopeUse::with_amount("cost", f64::NAN)], at(0.0))
        .unwrap();
    t.try_acquire(&[ScopeUse::with_amount("cost", -5.0)], at(0.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 0.0).consumed, 7.0);
}

#[test]
fn time_never_runs_backwards() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(2.0)));
    admit(&mut t, "a.com", 10.0);
    // An earlier `now` is treated as the latest time seen.
    assert_eq!(acquire(&mut t, "a.com", 5.0), not_until(12.0));
}

// ----------------------------------------------------------------------------- waiters

fn waiter(t: &mut Throttler, scopes: &[&str], now: f64) -> Ticket {
    let uses: Vec<ScopeUse<'_>> = scopes.iter().map(|s| ScopeUse::new(s)).collect();
    match t.try_acquire_or_enqueue(&uses, RequestFlags::default(), at(now)) {
        Ok(_) => panic!("expected to wait"),
        Err((ticket, _)) => ticket,
    }
}

fn wakeups(t: &mut Throttler) -> Vec<Ticket> {
    core::iter::from_fn(|| t.poll_wakeup()).collect()
}

#[test]
fn waiters_on_a_scope_are_served_in_arrival_order() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(1)));
    let first = admit(&mut t, "a.com", 0.0);
    let tickets: Vec<_> = (0..3).map(|_| waiter(&mut t, &["a.com"], 0.0)).collect();
    assert!(tickets.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(t.stats().waiting, 3);
    // A newcomer does not overtake them.
    assert_eq!(acquire(&mut t, "a.com", 0.0), Err(NotReady::Blocked));
    // Only the head is woken by the completion, and only it can go.
    finish(&mut t, first, 200, 1.0);
    assert_eq!(wakeups(&mut t), [tickets[0]]);
    assert_eq!(
        t.poll_ticket(tickets[2], at(1.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
    let TicketPoll::Ready(p) = t.poll_ticket(tickets[0], at(1.0)) else {
        panic!()
    };
    // The next head is woken as soon as the first leaves the queue.
    assert_eq!(wakeups(&mut t), [tickets[1]]);
    assert_eq!(
        t.poll_ticket(tickets[1], at(1.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
    finish(&mut t, p, 200, 2.0);
    assert_eq!(wakeups(&mut t), [tickets[1]]);
    assert!(matches!(
        t.poll_ticket(tickets[1], at(2.0)),
        TicketPoll::Ready(_)
    ));
    assert_eq!(
        t.poll_ticket(tickets[1], at(2.0)),
        TicketPoll::Unknown,
        "used up"
    );
}

#[test]
fn timed_waiters_are_woken_by_handle_timeout() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(3.0)));
    admit(&mut t, "a.com", 0.0);
    let ticket = waiter(&mut t, &["a.com"], 0.5);
    assert_eq!(t.poll_timeout(), Some(at(3.0)));
    t.handle_timeout(at(2.9));
    assert_eq!(t.poll_wakeup(), None);
    t.handle_timeout(at(3.0));
    assert_eq!(t.poll_timeout(), None, "nothing left at or before now");
    assert_eq!(t.poll_wakeup(), Some(ticket));
    assert!(matches!(
        t.poll_ticket(ticket, at(3.0)),
        TicketPoll::Ready(_)
    ));
    // Harmless when called again.
    t.handle_timeout(at(3.0));
    assert_eq!(t.poll_wakeup(), None);
}

#[test]
fn cancelling_the_head_wakes_the_next() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(1)));
    let p = admit(&mut t, "a.com", 0.0);
    let a = waiter(&mut t, &["a.com"], 0.0);
    let b = waiter(&mut t, &["a.com"], 0.0);
    let c = waiter(&mut t, &["a.com"], 0.0);
    assert!(t.cancel(b), "from the middle");
    assert!(t.cancel(a), "the head");
    assert!(!t.cancel(a));
    assert_eq!(wakeups(&mut t), [c]);
    finish(&mut t, p, 200, 1.0);
    assert!(matches!(t.poll_ticket(c, at(1.0)), TicketPoll::Ready(_)));
    assert_eq!(t.stats().waiting, 0);
}

#[test]
fn multi_scope_waiters_never_deadlock() {
    let mut t = new(Settings::default()
        .with_scope("a.com", ScopeConfig::new().concurrency(1))
        .with_scope("b.com", ScopeConfig::new().concurrency(1)));
    let pa = admit(&mut t, "a.com", 0.0);
    let pb = admit(&mut t, "b.com", 0.0);
    let ab = waiter(&mut t, &["a.com", "b.com"], 0.0);
    let ba = waiter(&mut t, &["b.com", "a.com"], 0.0);
    let b_only = waiter(&mut t, &["b.com"], 0.0);
    finish(&mut t, pa, 200, 1.0);
    assert_eq!(wakeups(&mut t), [ab]);
    assert_eq!(
        t.poll_ticket(ab, at(1.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
    finish(&mut t, pb, 200, 1.0);
    assert_eq!(wakeups(&mut t), [ab]);
    let TicketPoll::Ready(p) = t.poll_ticket(ab, at(1.0)) else {
        panic!()
    };
    assert_eq!(wakeups(&mut t), [ba]);
    finish(&mut t, p, 200, 2.0);
    wakeups(&mut t);
    assert!(matches!(t.poll_ticket(ba, at(2.0)), TicketPoll::Ready(_)));
    assert_eq!(
        t.poll_ticket(b_only, at(2.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
}

#[test]
fn global_cap_waiters_are_woken_by_any_completion() {
    let mut s = Settings::default();
    s.concurrent_requests = 1;
    let mut t = new(s);
    let p = admit(&mut t, "a.com", 0.0);
    let w = waiter(&mut t, &["b.com"], 0.0);
    finish(&mut t, p, 200, 1.0);
    assert_eq!(wakeups(&mut t), [w]);
    assert!(matches!(t.poll_ticket(w, at(1.0)), TicketPoll::Ready(_)));
}

#[test]
fn global_slot_is_passed_on_when_the_woken_waiter_cannot_use_it() {
    let mut s = Settings::default().with_scope("slow.com", ScopeConfig::new().delay(100.0));
    s.concurrent_requests = 1;
    let mut t = new(s);
    let slow = admit(&mut t, "slow.com", 0.0);
    finish(&mut t, slow, 200, 0.0);
    let p = admit(&mut t, "a.com", 0.0);
    let w_slow = waiter(&mut t, &["slow.com"], 0.0);
    let w_fast = waiter(&mut t, &["b.com"], 0.0);
    finish(&mut t, p, 200, 1.0);
    assert_eq!(wakeups(&mut t), [w_slow]);
    assert_eq!(
        t.poll_ticket(w_slow, at(1.0)),
        TicketPoll::Waiting(NotReady::NotUntil(at(100.0)))
    );
    assert_eq!(wakeups(&mut t), [w_fast]);
    assert!(matches!(
        t.poll_ticket(w_fast, at(1.0)),
        TicketPoll::Ready(_)
    ));
}

#[test]
fn held_back_warning_fires_once_per_pile_up() {
    let mut m = HeldBackMonitor::new(3);
    assert!(!m.update(2));
    assert!(m.update(3));
    assert!(!m.update(4));
    assert!(!m.update(0));
    assert!(m.update(5));
    assert!(!HeldBackMonitor::new(0).update(1_000_000));
}

// ---------------------------------------------------------------------------- eviction

fn touch(t: &mut Throttler, scope: &str, now: f64) {
    let p = admit(t, scope, now);
    finish(t, p, 200, now);
}

#[test]
fn lru_eviction_over_the_limit() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 2;
    let mut t = new(s);
    touch(&mut t, "a.com", 0.0);
    touch(&mut t, "b.com", 1.0);
    touch(&mut t, "a.com", 2.0); // b is now the least recently used
    touch(&mut t, "c.com", 3.0);
    assert_eq!(t.stats().live_scopes, 2);
    assert!(t.scope_stats("b.com", at(3.0)).is_none());
    assert!(t.scope_stats("a.com", at(3.0)).is_some());
    assert_eq!(t.stats().evicted, 1);
}

#[test]
fn scopes_that_matter_are_never_evicted() {
    let mut s = Settings::default()
        .with_scope("delayed.com", ScopeConfig::new().delay(50.0))
        .with_scope("cost", ScopeConfig::new().quota(5.0).window(60.0));
    s.throttling_scope_limit = 1;
    let mut t = new(s);
    let _in_flight = admit(&mut t, "busy.com", 0.0);
    let p = admit(&mut t, "backoff.com", 0.0);
    finish(&mut t, p, 429, 0.0);
    touch(&mut t, "delayed.com", 0.0);
    touch(&mut t, "cost", 0.0);
    t.delay_scope("hard.com", 10.0, at(0.0)).unwrap();
    for i in 0..50 {
        touch(&mut t, &format!("filler{i}.com"), 1.0);
    }
    for scope in ["busy.com", "backoff.com", "delayed.com", "cost", "hard.com"] {
        assert!(
            t.scope_stats(scope, at(1.0)).is_some(),
            "{scope} was evicted"
        );
    }
    assert!(t.stats().live_scopes <= 1 + 5 + 2);
    // Once they no longer matter they go: hard.com's delay ends at 10, backoff.com
    // recovers at 60, delayed.com's next send is at 50, the quota window ends at 60.
    for i in 0..50 {
        touch(&mut t, &format!("late{i}.com"), 61.0);
    }
    for scope in ["backoff.com", "delayed.com", "cost", "hard.com"] {
        assert!(t.scope_stats(scope, at(61.0)).is_none(), "{scope} was kept");
    }
    assert!(t.scope_stats("busy.com", at(61.0)).is_some());
}

#[test]
fn idle_eviction_and_what_survives_it() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 0;
    s.throttling_scope_max_idle = 100.0;
    let mut t = new(s);
    touch(&mut t, "a.com", 0.0);
    t.set_scope_delay("a.com", 3.0, at(0.0)).unwrap();
    t.handle_crawl_delay("b.com", 7.0, at(0.0)).unwrap();
    touch(&mut t, "c.com", 50.0);
    touch(&mut t, "d.com", 100.0); // a and b idle for 100 s
    assert!(t.scope_stats("a.com", at(100.0)).is_none());
    assert!(t.scope_stats("b.com", at(100.0)).is_none());
    assert!(t.scope_stats("c.com", at(100.0)).is_some());
    // Re-created from configuration plus the live changes and the Crawl-delay.
    touch(&mut t, "a.com", 101.0);
    touch(&mut t, "b.com", 101.0);
    assert_eq!(stats(&mut t, "a.com", 101.0).base_delay, 3.0);
    let st = stats(&mut t, "b.com", 101.0);
    assert_eq!((st.base_delay, st.concurrency), (7.0, 1));
}

/// A state admitted through its hint keeps its place in the recency order until its
/// request ends; at the tail, in flight, it must not stop the idle states behind it
/// from going.
#[test]
fn a_state_in_flight_at_the_tail_does_not_hold_back_idle_eviction() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 0;
    s.throttling_scope_max_idle = 100.0;
    let mut t = new(s);
    let mut hint = ScopeHint::default();
    let mut one = |t: &mut Throttler, now: f64| {
        t.try_acquire_one(
            ScopeUse::new("a.com"),
            &mut hint,
            RequestFlags::default(),
            at(now),
        )
        .unwrap()
    };
    let p = one(&mut t, 0.0);
    finish(&mut t, p, 200, 0.0);
    touch(&mut t, "b.com", 1.0);
    let in_flight = one(&mut t, 50.0); // a.com stays at the tail, last used at 50
    touch(&mut t, "c.com", 102.0); // b.com has been idle for 101 s
    assert!(
        t.scope_stats("b.com", at(102.0)).is_none(),
        "b.com was kept"
    );
    assert_eq!(stats(&mut t, "a.com", 102.0).active, 1);
    finish(&mut t, in_flight, 200, 103.0);
    touch(&mut t, "c.com", 202.5); // a.com idle since 103: not yet
    assert!(t.scope_stats("a.com", at(202.5)).is_some());
    touch(&mut t, "c.com", 203.0);
    assert!(
        t.scope_stats("a.com", at(203.0)).is_none(),
        "a.com was kept"
    );
}

#[test]
fn eviction_work_per_operation_is_bounded() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 100;
    let mut t = new(s);
    for i in 0..20_000 {
        touch(&mut t, &format!("h{i}.example.com"), i as f64 / 1000.0);
        assert!(t.stats().live_scopes <= 101);
    }
    assert!(t.stats().evicted >= 19_899);
}

#[test]
fn hibernation_keeps_learned_rates() {
    let mut s = rampup_settings();
    s.throttling_scope_limit = 1;
    let mut t = new(s);
    t.set_hibernation(Box::new(MemoryHibernation::default()));
    touch(&mut t, "api", 0.0);
    assert_eq!(stats(&mut t, "api", 120.0).delay, 0.25);
    touch(&mut t, "other.com", 121.0);
    assert!(t.scope_stats("api", at(121.0)).is_none());
    assert_eq!(t.stats().hibernated, 1);
    touch(&mut t, "api", 122.0);
    assert_eq!(t.stats().woken, 1);
    let st = stats(&mut t, "api", 122.0);
    assert_eq!((st.base_delay, st.sent), (0.25, 2));
}

#[test]
fn snapshot_and_restore_carry_backoff_across_throttlers() {
    let mut a = new(Settings::default());
    let p = admit(&mut a, "a.com", 0.0);
    a.release(
        p,
        &Outcome::response(429, [("Retry-After", "40")], None),
        at(1.0),
    );
    let snap = a.snapshot("a.com").unwrap();
    assert_eq!(a.snapshots().count(), 1);
    let mut b = new(Settings::default());
    b.restore(&snap, at(2.0));
    let st = stats(&mut b, "a.com", 2.0);
    assert_eq!((st.level, st.hard_until, st.active), (1, at(41.0), 0));
    assert_eq!(acquire(&mut b, "a.com", 2.0), not_until(41.0));
}

// -------------------------------------------------------------- review regressions

#[test]
fn a_cancelled_global_waiter_passes_its_slot_on() {
    let mut s = Settings::default();
    s.concurrent_requests = 1;
    let mut t = new(s);
    let p = admit(&mut t, "a.com", 0.0);
    let w1 = waiter(&mut t, &["b.com"], 0.0);
    let w2 = waiter(&mut t, &["c.com"], 0.0);
    finish(&mut t, p, 200, 1.0);
    assert_eq!(wakeups(&mut t), [w1]);
    assert!(t.cancel(w1));
    assert_eq!(wakeups(&mut t), [w2], "the slot reserved for w1 goes to w2");
    assert!(matches!(t.poll_ticket(w2, at(1.0)), TicketPoll::Ready(_)));
}

#[test]
fn a_woken_global_waiter_keeps_its_slot_against_newcomers() {
    let mut s = Settings::default();
    s.concurrent_requests = 1;
    let mut t = new(s);
    let p = admit(&mut t, "a.com", 0.0);
    let w1 = waiter(&mut t, &["b.com"], 0.0);
    let _w2 = waiter(&mut t, &["c.com"], 0.0);
    finish(&mut t, p, 200, 1.0);
    assert_eq!(
        acquire(&mut t, "d.com", 1.0),
        Err(NotReady::Blocked),
        "slot reserved for w1"
    );
    assert_eq!(wakeups(&mut t), [w1]);
    assert!(matches!(t.poll_ticket(w1, at(1.0)), TicketPoll::Ready(_)));
}

#[test]
fn lowering_the_delay_during_backoff_keeps_the_backoff_wait() {
    let mut t = new(Settings::default());
    let p = admit(&mut t, "a.com", 0.0);
    finish(&mut t, p, 429, 5.0);
    assert_eq!(acquire(&mut t, "a.com", 5.0), not_until(6.0));
    t.set_scope_delay("a.com", 0.5, at(5.0)).unwrap();
    assert_eq!(acquire(&mut t, "a.com", 5.0), not_until(6.0));
    assert_eq!(
        stats(&mut t, "a.com", 5.0).delay,
        1.0,
        "backoff delay stands"
    );
}

#[test]
fn the_wait_after_a_trigger_is_never_shortened_by_jitter() {
    let mut s = Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(0));
    s.backoff_jitter = Jitter::Factor(0.5);
    let mut t = Throttler::new(s, Timestamp::ZERO).unwrap();
    for i in 0..20 {
        let now = 1000.0 * i as f64;
        let p = admit(&mut t, "a.com", now);
        finish(&mut t, p, 429, now);
        let st = stats(&mut t, "a.com", now);
        assert!(
            st.next_allowed >= at(now) + secs_to_duration(st.delay),
            "step {i}"
        );
    }
}

#[test]
fn negative_and_non_finite_windows_are_rejected_and_zero_is_accepted() {
    for bad in [-1e-10, -60.0, f64::NAN, f64::INFINITY, 1e-10, 0.000_999] {
        let mut s = Settings::default();
        s.backoff_window = bad;
        assert_eq!(s.validate().unwrap_err().key(), "backoff_window", "{bad}");
        let mut s = Settings::default();
        s.throttling_window = bad;
        assert_eq!(
            s.validate().unwrap_err().key(),
            "throttling_window",
            "{bad}"
        );
        let s = Settings::default().with_scope("c", ScopeConfig::new().quota(10.0).window(bad));
        assert_eq!(
            s.validate().unwrap_err().key(),
            "scopes.\"c\".window",
            "{bad}"
        );
    }
    for ok in [0.0, 0.001, 0.5] {
        let mut s = Settings::default().with_scope("c", ScopeConfig::new().quota(10.0).window(ok));
        s.backoff_window = ok;
        s.throttling_window = ok;
        Throttler::new(s, Timestamp::ZERO).unwrap();
    }
}

// ------------------------------------------------------------------ zero-length windows

#[test]
fn a_zero_backoff_window_recovers_at_once() {
    let mut s = Settings::default();
    s.backoff_window = 0.0;
    let mut t = new(s.with_scope("a.com", ScopeConfig::new().delay(0.5)));
    let p = admit(&mut t, "a.com", 0.0);
    finish(&mut t, p, 429, 0.0);
    // The step itself holds the next send (0.5 doubled: 1 s from the trigger), but its
    // window elapses at once: level 0 and the base delay by the next look.
    let st = stats(&mut t, "a.com", 0.0);
    assert_eq!((st.level, st.delay, st.triggers), (0, 0.5, 1));
    assert_eq!(acquire(&mut t, "a.com", 0.5), not_until(1.0));
    let p = admit(&mut t, "a.com", 1.0);
    assert_eq!(
        acquire(&mut t, "a.com", 1.0),
        not_until(1.5),
        "spaced by the base delay"
    );
    // Triggers never pile up into higher levels.
    finish(&mut t, p, 503, 1.0);
    let p = admit(&mut t, "a.com", 2.0);
    finish(&mut t, p, 503, 2.0);
    let st = stats(&mut t, "a.com", 2.0);
    assert_eq!((st.level, st.delay, st.triggers), (0, 0.5, 3));
    assert_eq!(acquire(&mut t, "a.com", 2.0), not_until(3.0));
}

#[test]
fn a_zero_backoff_window_turns_rampup_off() {
    let mut s = Settings::default();
    s.backoff_window = 0.0;
    let mut t = new(s.with_scope(
        "x.com",
        ScopeConfig::new()
            .delay(1.0)
            .rampup(RampupConfig::default().min_delay(0.0)),
    ));
    let p = admit(&mut t, "x.com", 0.0);
    // As without rampup: the domain default concurrency (8, not min_concurrency), and
    // the first trigger is a backoff step, not one counted toward a target.
    assert_eq!(stats(&mut t, "x.com", 0.0).concurrency, 8);
    finish(&mut t, p, 429, 0.0);
    assert_eq!(acquire(&mut t, "x.com", 1.0), not_until(2.0));
    for now in [60.0, 3600.0, 1e6] {
        let st = stats(&mut t, "x.com", now);
        assert_eq!(
            (st.delay, st.base_delay, st.concurrency),
            (1.0, 1.0, 8),
            "at {now}"
        );
    }
}

#[test]
fn a_zero_quota_window_resets_on_every_request() {
    let mut t = new(Settings::default().with_scope(
        "cost",
        ScopeConfig::new().concurrency(0).quota(10.0).window(0.0),
    ));
    for _ in 0..5 {
        spend(&mut t, 8.0, 0.0).unwrap();
    }
    spend(&mut t, 25.0, 0.0).unwrap();
    assert_eq!(stats(&mut t, "cost", 0.0).consumed, 0.0);
    t.reconcile_quota("cost", QuotaReconcile::Remaining(0.0), at(1.0))
        .unwrap();
    spend(&mut t, 1.0, 1.0).unwrap();
    // The global default window too.
    let mut s =
        Settings::default().with_scope("cost", ScopeConfig::new().concurrency(0).quota(1.0));
    s.throttling_window = 0.0;
    let mut t = new(s);
    for _ in 0..5 {
        spend(&mut t, 1.0, 0.0).unwrap();
    }
}

// ------------------------------------------------------------ lazy updates and wake-ups

/// A rampup scope at its delay floor, one request at a time, raising its concurrency
/// every quiet window of 10 s up to 3.
fn long_latency_rampup() -> Settings {
    Settings::default().backoff_window(10).with_scope(
        "api",
        ScopeConfig::new()
            .delay(0.0)
            .max_concurrency(3)
            .rampup(RampupConfig::default().min_delay(0.0)),
    )
}

#[test]
fn a_rampup_step_frees_a_slot_at_the_window_boundary() {
    let mut t = new(long_latency_rampup());
    let _long = admit(&mut t, "api", 0.0);
    // Full, but rampup may raise the concurrency at the first boundary: try again then.
    assert_eq!(acquire(&mut t, "api", 1.0), not_until(10.0));
    assert_eq!(
        t.check_scope("api".into(), at(1.0)),
        Err(NotReady::NotUntil(at(10.0)))
    );
    let _second = admit(&mut t, "api", 10.0);
    assert_eq!(stats(&mut t, "api", 10.0).concurrency, 2);
    assert_eq!(acquire(&mut t, "api", 10.0), not_until(20.0));
    let _third = admit(&mut t, "api", 20.0);
    // At max_concurrency: only a completion frees a slot now.
    assert_eq!(acquire(&mut t, "api", 20.0), Err(NotReady::Blocked));
    assert_eq!(acquire(&mut t, "api", 1000.0), Err(NotReady::Blocked));
}

#[test]
fn a_rampup_step_wakes_the_waiter_it_makes_room_for() {
    let mut t = new(long_latency_rampup());
    let _long = admit(&mut t, "api", 0.0);
    let first = waiter(&mut t, &["api"], 1.0);
    let second = waiter(&mut t, &["api"], 2.0);
    assert_eq!(
        t.poll_timeout(),
        Some(at(10.0)),
        "the boundary that may raise concurrency"
    );
    t.handle_timeout(at(10.0));
    assert_eq!(wakeups(&mut t), [first]);
    assert!(matches!(
        t.poll_ticket(first, at(10.0)),
        TicketPoll::Ready(_)
    ));
    // The next in line looks again and is due at the next boundary.
    assert_eq!(wakeups(&mut t), [second]);
    assert_eq!(
        t.poll_ticket(second, at(10.0)),
        TicketPoll::Waiting(NotReady::NotUntil(at(20.0)))
    );
    assert_eq!(t.poll_timeout(), Some(at(20.0)));
    t.handle_timeout(at(20.0));
    assert_eq!(wakeups(&mut t), [second]);
    assert!(matches!(
        t.poll_ticket(second, at(20.0)),
        TicketPoll::Ready(_)
    ));
    assert_eq!(t.poll_timeout(), None);
}

#[test]
fn a_full_scope_has_a_deadline_only_while_rampup_may_raise_its_concurrency() {
    // A boundary that can only lower the delay is still a deadline (an early wake-up),
    // as one that a trigger or a backoff level may hold back.
    let mut s = long_latency_rampup();
    s.scopes.get_mut("api").unwrap().delay = Some(4.0);
    let mut t = new(s);
    let _long = admit(&mut t, "api", 0.0);
    assert_eq!(acquire(&mut t, "api", 1.0), not_until(10.0));
    assert_eq!(
        acquire(&mut t, "api", 10.0),
        not_until(20.0),
        "the delay went down, not the concurrency"
    );
    // Never above max_concurrency, nor under a Crawl-delay: only completions free slots.
    let mut s = long_latency_rampup();
    s.scopes.get_mut("api").unwrap().max_concurrency = Some(1);
    let mut t = new(s);
    let _long = admit(&mut t, "api", 0.0);
    assert_eq!(acquire(&mut t, "api", 1.0), Err(NotReady::Blocked));
    let mut s = long_latency_rampup();
    s.scopes.get_mut("api").unwrap().delay = None; // a configured delay would win
    let mut t = new(s);
    let _long = admit(&mut t, "api", 0.0);
    assert!(matches!(
        t.handle_crawl_delay("api", 0.1, at(0.0)),
        Ok(CrawlDelayDecision::Applied { .. })
    ));
    assert_eq!(acquire(&mut t, "api", 1.0), Err(NotReady::Blocked));
    assert_eq!(t.poll_timeout(), None);
    // Backoff recovery and quota resets never change concurrency: a full scope without
    // rampup waits for a completion whatever its level or quota window.
    let mut t = new(Settings::default().with_scope(
        "q",
        ScopeConfig::new().concurrency(1).quota(5.0).window(10.0),
    ));
    let p = admit(&mut t, "q", 0.0);
    finish(&mut t, p, 429, 0.0);
    let _long = admit(&mut t, "q", 1.0);
    assert_eq!(acquire(&mut t, "q", 1.0), Err(NotReady::Blocked));
    assert_eq!(acquire(&mut t, "q", 500.0), Err(NotReady::Blocked));
    // A quota reset is a deadline of its own (a NotUntil), as before.
    let mut t = new(Settings::default().with_scope(
        "q",
        ScopeConfig::new().concurrency(0).quota(1.0).window(10.0),
    ));
    admit(&mut t, "q", 0.0);
    let w = waiter(&mut t, &["q"], 1.0);
    assert_eq!(t.poll_timeout(), Some(at(10.0)));
    t.handle_timeout(at(10.0));
    assert_eq!(wakeups(&mut t), [w]);
}

#[test]
fn min_concurrency_raises_the_kind_default() {
    let mut t = new(Settings::default().with_scope("api", ScopeConfig::new().min_concurrency(3)));
    touch(&mut t, "api", 0.0);
    assert_eq!(stats(&mut t, "api", 0.0).concurrency, 3);
    assert_eq!(t.scope_settings("api").concurrency, 3);
}

#[test]
fn absurd_restored_levels_neither_panic_nor_loop() {
    let mut snap = ScopeSnapshot::new("a.com");
    snap.level = u32::MAX;
    snap.delay = 300.0;
    let mut t = new(Settings::default());
    t.restore(&snap, at(0.0));
    t.delay_scope("a.com", 1.0, at(0.0)).unwrap();
    let st = stats(&mut t, "a.com", 0.0);
    assert!(st.level <= u32::from(crate::scope::MAX_LEVEL));
    assert_eq!(stats(&mut t, "a.com", 1e9).level, 0);
}

#[test]
fn crawl_delay_zero_asks_for_nothing() {
    let mut t = new(Settings::default());
    assert_eq!(
        t.handle_crawl_delay("a.com", 0.0, at(0.0)),
        Ok(CrawlDelayDecision::Ignored)
    );
    assert_eq!(t.scope_settings("a.com").concurrency, 8);
}

#[test]
fn scope_settings_without_a_state_in_memory() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(2.0)));
    assert_eq!(
        t.scope_settings("a.com"),
        ScopeSettings {
            delay: 2.0,
            concurrency: 8
        }
    );
    assert_eq!(
        t.scope_settings("api"),
        ScopeSettings {
            delay: 0.0,
            concurrency: 1
        }
    );
    t.handle_crawl_delay("b.com", 4.0, at(0.0)).unwrap();
    assert_eq!(
        t.scope_settings("b.com"),
        ScopeSettings {
            delay: 4.0,
            concurrency: 1
        }
    );
}

#[test]
fn hibernation_carries_live_configuration_and_bounds_memory() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 1;
    let mut t = new(s);
    t.set_hibernation(Box::new(MemoryHibernation::default()));
    t.handle_crawl_delay("a.com", 3.0, at(0.0)).unwrap();
    t.set_scope_concurrency("b.com", 2, at(0.0)).unwrap();
    touch(&mut t, "c.com", 0.0);
    assert!(
        t.overrides.len() <= 1,
        "evicted scopes took their overrides along"
    );
    touch(&mut t, "a.com", 10.0);
    let st = stats(&mut t, "a.com", 10.0);
    assert_eq!((st.base_delay, st.concurrency), (3.0, 1));
    touch(&mut t, "b.com", 20.0);
    assert_eq!(stats(&mut t, "b.com", 20.0).concurrency, 2);
}

#[test]
fn snapshots_carry_live_configuration_across_throttlers() {
    let mut a = new(Settings::default());
    a.handle_crawl_delay("a.com", 3.0, at(0.0)).unwrap();
    let snap = a.snapshot("a.com").unwrap();
    assert_eq!(snap.robots_delay, Some(3.0));
    let mut b = new(Settings::default());
    b.restore(&snap, at(0.0));
    assert_eq!(
        b.scope_settings("a.com"),
        ScopeSettings {
            delay: 3.0,
            concurrency: 1
        }
    );
}

// ------------------------------------------------------------------------ observability

#[test]
fn decisions_are_traced() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut s = rampup_settings();
        s.throttling_scope_limit = 1;
        s.delayed_requests_warn_threshold = 1;
        let mut t = new(s);
        let p = admit(&mut t, "a.com", 0.0);
        finish(&mut t, p, 429, 0.0);
        let p = admit(&mut t, "a.com", 5.0);
        t.release(
            p,
            &Outcome::response(503, [("Retry-After", "9")], None),
            at(5.0),
        );
        stats(&mut t, "a.com", 200.0);
        touch(&mut t, "api", 200.0);
        stats(&mut t, "api", 400.0);
        t.handle_crawl_delay("c.com", 2.0, at(400.0)).unwrap();
        t.handle_crawl_delay("api", 2.0, at(400.0)).unwrap();
        let _busy = admit(&mut t, "one", 400.0);
        waiter(&mut t, &["one"], 400.0);
    });
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    for needle in [
        "backoff step",
        "backoff: header delay honoured",
        "backoff recovery step",
        "rampup: delay lowered",
        "rampup: concurrency raised",
        "crawl-delay applied",
        "more aggressive than its robots.txt",
        "scope state evicted",
        "delayed_requests_warn_threshold",
    ] {
        assert!(log.contains(needle), "missing {needle:?} in:\n{log}");
    }
}

/// Permits hold their scopes inline up to two and in a vector beyond; a permit slot is
/// reused across both shapes and releases exactly the scopes its permit took.
#[test]
fn permits_of_one_to_four_scopes_reuse_slots() {
    let mut t = new(Settings::default());
    let names = ["a", "b", "c", "d"];
    for round in 0..3 {
        for n in [1, 4, 2, 3, 1] {
            let uses: Vec<ScopeUse<'_>> = names[..n].iter().map(|s| ScopeUse::new(s)).collect();
            let now = at(f64::from(round) * 10.0);
            let p = t.try_acquire(&uses, now).expect("nothing in flight");
            for (i, name) in names.iter().enumerate() {
                let active = t.scope_stats(name, now).map_or(0, |s| s.active);
                assert_eq!(active, u32::from(i < n), "{name} with {n} scopes");
            }
            assert!(t.permit_load(&p) > 0.0);
            assert!(t.release(p, &Outcome::status(200), now));
            assert!(!t.release(p, &Outcome::status(200), now), "released twice");
            for name in names {
                let active = t.scope_stats(name, now).map_or(0, |s| s.active);
                assert_eq!(active, 0, "{name} after releasing {n} scopes");
            }
        }
    }
}

#[test]
fn a_spent_budget_holds_the_scope_until_its_reset_without_backoff() {
    let mut t = new(Settings::default().with_scope("api", ScopeConfig::new().concurrency(0)));
    let p = admit(&mut t, "api", 0.0);
    let spent = [("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "2")];
    t.release(p, &Outcome::response(200, spent, None), at(1.0));
    let st = stats(&mut t, "api", 1.0);
    assert_eq!(
        (st.level, st.hard_until),
        (0, at(3.0)),
        "held, not backed off"
    );
    assert_eq!(acquire(&mut t, "api", 2.0), not_until(3.0));
    admit(&mut t, "api", 3.0);

    // Budget left, or a reset without "remaining: 0": no hold.
    for headers in [
        [("RateLimit", "limit=10, remaining=1, reset=5"), ("x", "y")],
        [("X-RateLimit-Reset", "5"), ("X-RateLimit-Remaining", "4")],
        [("RateLimit-Reset", "5"), ("x", "y")],
    ] {
        let p = admit(&mut t, "api", 10.0);
        t.release(p, &Outcome::response(200, headers, None), at(10.0));
        admit(&mut t, "api", 10.0);
    }

    // Capped at backoff_max_delay; dont_track requests say nothing.
    let p = admit(&mut t, "api", 20.0);
    let far = [("RateLimit", "\"default\";r=0;t=100000")];
    t.release(p, &Outcome::response(200, far, None), at(20.0));
    assert_eq!(acquire(&mut t, "api", 20.0), not_until(320.0));
    let flags = RequestFlags::default().dont_track(true);
    let p = t
        .try_acquire_with(&[ScopeUse::new("b.com")], flags, at(0.0))
        .unwrap();
    t.release(p, &Outcome::response(200, far, None), at(0.0));
    admit(&mut t, "b.com", 0.0);
}
