//! Lazy updates and the wake-ups they must still produce on time.

use super::eviction::KeepAll;
use super::*;

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
    t.set_hibernation(Box::new(KeepAll::default()));
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

#[test]
fn a_store_that_may_forget_leaves_overrides_in_the_table() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 1;
    let mut t = new(s);
    t.set_hibernation(Box::new(MemoryHibernation::new(1)));
    t.handle_crawl_delay("a.com", 3.0, at(0.0)).unwrap();
    touch(&mut t, "c.com", 0.0);
    touch(&mut t, "d.com", 0.0); // a.com's snapshot is forgotten
    touch(&mut t, "a.com", 10.0);
    assert_eq!(stats(&mut t, "a.com", 10.0).base_delay, 3.0);
}
