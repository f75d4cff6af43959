//! Rampup toward the fastest rate a server tolerates.

use super::*;

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
