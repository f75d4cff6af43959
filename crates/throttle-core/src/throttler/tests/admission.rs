//! All-or-nothing admission over several scopes, loads, hints and permits.

use super::*;

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
