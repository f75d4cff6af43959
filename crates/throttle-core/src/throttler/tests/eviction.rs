//! The bounded scope map: LRU and idle eviction, and hibernation.

use super::*;

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
    t.set_hibernation(Box::new(MemoryHibernation::new(1 << 20)));
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

/// A hibernation store that keeps everything, as a file or a database would.
#[derive(Default)]
pub(super) struct KeepAll(pub(super) std::collections::BTreeMap<String, ScopeSnapshot>);

impl ScopeHibernation for KeepAll {
    fn hibernate(&mut self, snapshot: ScopeSnapshot) {
        self.0.insert(snapshot.scope.clone(), snapshot);
    }
    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot> {
        self.0.remove(scope)
    }
    fn keeps_everything(&self) -> bool {
        true
    }
}

fn backing_off(t: &mut Throttler, scope: &str, now: f64) {
    let p = admit(t, scope, now);
    t.release(
        p,
        &Outcome::response(429, [("Retry-After", "40")], None),
        at(now),
    );
}

#[test]
fn a_store_that_keeps_everything_takes_backing_off_scopes_and_gives_them_back() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 10;
    let mut t = new(s);
    t.set_hibernation(Box::new(KeepAll::default()));
    for i in 0..1000 {
        backing_off(&mut t, &format!("h{i}.example"), 0.0);
        assert!(
            t.stats().live_scopes <= 11,
            "memory bounded by the scope limit"
        );
    }
    assert!(t.stats().hibernated >= 989);
    // Every host returns: each is still held until its Retry-After ends.
    for i in 0..1000 {
        let name = format!("h{i}.example");
        assert_eq!(acquire(&mut t, &name, 1.0), not_until(40.0), "{name}");
        assert_eq!(stats(&mut t, &name, 1.0).level, 1, "{name}");
    }
    assert!(t.stats().live_scopes <= 11);
}

#[test]
fn a_store_that_may_forget_never_receives_a_backoff() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 10;
    let mut t = new(s);
    t.set_hibernation(Box::new(MemoryHibernation::new(5)));
    for i in 0..100 {
        backing_off(&mut t, &format!("h{i}.example"), 0.0);
    }
    assert_eq!(t.stats().hibernated, 0);
    assert_eq!(
        t.stats().live_scopes,
        100,
        "backing-off states stay in memory"
    );
    for i in 0..100 {
        let name = format!("h{i}.example");
        assert_eq!(acquire(&mut t, &name, 1.0), not_until(40.0), "{name}");
    }
}

#[test]
fn restore_yields_to_a_newer_hibernated_state() {
    let mut s = Settings::default();
    s.throttling_scope_limit = 1;
    let mut t = new(s);
    let mut kept = KeepAll::default();
    let mut newer = ScopeSnapshot::new("a.com");
    newer.level = 2;
    newer.hard_until = at(90.0);
    kept.hibernate(newer);
    t.set_hibernation(Box::new(kept));
    let older = ScopeSnapshot::new("a.com");
    t.restore(&older, at(1.0));
    assert_eq!(stats(&mut t, "a.com", 1.0).level, 2);
    assert_eq!(acquire(&mut t, "a.com", 1.0), not_until(90.0));
}
