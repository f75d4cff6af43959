//! Permit slots and the held-back monitor (the tracing events of each decision are
//! checked in `tests/tracing_events.rs`, a process of their own).

use super::*;

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
