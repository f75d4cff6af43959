//! robots.txt Crawl-delay and the programmatic controls (`delay_scope`, live changes).

use super::*;

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
