//! Quotas per time window, and their reconciliation.

use super::*;

#[test]
fn quota_windows_hold_requests_until_the_window_ends() {
    let mut t = new(quota_settings());
    spend(&mut t, 4.0, 7.0).unwrap(); // the window starts at the first use: 7
    spend(&mut t, 4.0, 8.0).unwrap();
    assert_eq!(spend(&mut t, 4.0, 9.0), not_until(67.0));
    spend(&mut t, 2.0, 9.0).unwrap(); // exactly the quota
    assert_eq!(spend(&mut t, 0.5, 9.0), not_until(67.0));
    spend(&mut t, 4.0, 67.0).unwrap();
    assert_eq!(stats(&mut t, "cost", 67.0).consumed, 4.0);
    // Windows stay anchored: after a long pause the window is 187..247.
    assert_eq!(stats(&mut t, "cost", 200.0).consumed, 0.0);
    spend(&mut t, 10.0, 200.0).unwrap();
    assert_eq!(spend(&mut t, 1.0, 200.0), not_until(247.0));
}

#[test]
fn one_oversized_request_goes_when_nothing_was_consumed() {
    let mut t = new(quota_settings());
    spend(&mut t, 15.0, 0.0).unwrap();
    assert_eq!(spend(&mut t, 0.1, 1.0), not_until(60.0));
    spend(&mut t, 15.0, 60.0).unwrap();
    // Plain scope uses consume one unit.
    let mut t = new(quota_settings());
    for _ in 0..10 {
        t.try_acquire(&["cost".into()], at(0.0)).unwrap();
    }
    assert_eq!(t.try_acquire(&["cost".into()], at(0.0)), not_until(60.0));
}

#[test]
fn quota_reconciliation() {
    let mut t = new(quota_settings());
    spend(&mut t, 2.0, 0.0).unwrap();
    t.reconcile_quota("cost", QuotaReconcile::Consumed(5.0), at(1.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 1.0).consumed, 7.0);
    assert_eq!(spend(&mut t, 4.0, 1.0), not_until(60.0));
    t.reconcile_quota("cost", QuotaReconcile::Consumed(-100.0), at(1.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 1.0).consumed, 0.0, "never negative");
    t.reconcile_quota("cost", QuotaReconcile::Remaining(1.0), at(2.0))
        .unwrap();
    assert_eq!(stats(&mut t, "cost", 2.0).consumed, 9.0);
    assert_eq!(spend(&mut t, 2.0, 2.0), not_until(60.0));
    let err = t
        .reconcile_quota("cost", QuotaReconcile::Remaining(f64::NAN), at(2.0))
        .unwrap_err();
    assert_eq!(err.key(), "remaining");
    // A scope without a quota ignores reconciliation.
    t.reconcile_quota("a.com", QuotaReconcile::Consumed(5.0), at(2.0))
        .unwrap();
    assert_eq!(stats(&mut t, "a.com", 2.0).consumed, 0.0);
}

#[test]
fn reconciliation_before_any_send_starts_the_window() {
    let mut t = new(quota_settings());
    t.reconcile_quota("cost", QuotaReconcile::Remaining(0.0), at(5.0))
        .unwrap();
    assert_eq!(spend(&mut t, 1.0, 6.0), not_until(65.0));
}
