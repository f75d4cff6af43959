//! Regressions found in review, and zero-length windows.

use super::*;

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
