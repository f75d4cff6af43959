//! Backoff on 429/5xx and error kinds, and its lazy linear recovery.

use super::*;

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
