//! Retry-After, RateLimit and related header delays: hard minimums, caps and forms.

use super::*;

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
