//! Delay and concurrency: spacing from the send, limits by scope kind, global cap, jitter.

use super::*;

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
