//! FIFO waiters: tickets served in arrival order, timeouts, cancellation, no deadlock.

use super::*;

#[test]
fn waiters_on_a_scope_are_served_in_arrival_order() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(1)));
    let first = admit(&mut t, "a.com", 0.0);
    let tickets: Vec<_> = (0..3).map(|_| waiter(&mut t, &["a.com"], 0.0)).collect();
    assert!(tickets.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(t.stats().waiting, 3);
    // A newcomer does not overtake them.
    assert_eq!(acquire(&mut t, "a.com", 0.0), Err(NotReady::Blocked));
    // Only the head is woken by the completion, and only it can go.
    finish(&mut t, first, 200, 1.0);
    assert_eq!(wakeups(&mut t), [tickets[0]]);
    assert_eq!(
        t.poll_ticket(tickets[2], at(1.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
    let TicketPoll::Ready(p) = t.poll_ticket(tickets[0], at(1.0)) else {
        panic!()
    };
    // The next head is woken as soon as the first leaves the queue.
    assert_eq!(wakeups(&mut t), [tickets[1]]);
    assert_eq!(
        t.poll_ticket(tickets[1], at(1.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
    finish(&mut t, p, 200, 2.0);
    assert_eq!(wakeups(&mut t), [tickets[1]]);
    assert!(matches!(
        t.poll_ticket(tickets[1], at(2.0)),
        TicketPoll::Ready(_)
    ));
    assert_eq!(
        t.poll_ticket(tickets[1], at(2.0)),
        TicketPoll::Unknown,
        "used up"
    );
}

#[test]
fn timed_waiters_are_woken_by_handle_timeout() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().delay(3.0)));
    admit(&mut t, "a.com", 0.0);
    let ticket = waiter(&mut t, &["a.com"], 0.5);
    assert_eq!(t.poll_timeout(), Some(at(3.0)));
    t.handle_timeout(at(2.9));
    assert_eq!(t.poll_wakeup(), None);
    t.handle_timeout(at(3.0));
    assert_eq!(t.poll_timeout(), None, "nothing left at or before now");
    assert_eq!(t.poll_wakeup(), Some(ticket));
    assert!(matches!(
        t.poll_ticket(ticket, at(3.0)),
        TicketPoll::Ready(_)
    ));
    // Harmless when called again.
    t.handle_timeout(at(3.0));
    assert_eq!(t.poll_wakeup(), None);
}

#[test]
fn cancelling_the_head_wakes_the_next() {
    let mut t = new(Settings::default().with_scope("a.com", ScopeConfig::new().concurrency(1)));
    let p = admit(&mut t, "a.com", 0.0);
    let a = waiter(&mut t, &["a.com"], 0.0);
    let b = waiter(&mut t, &["a.com"], 0.0);
    let c = waiter(&mut t, &["a.com"], 0.0);
    assert!(t.cancel(b), "from the middle");
    assert!(t.cancel(a), "the head");
    assert!(!t.cancel(a));
    assert_eq!(wakeups(&mut t), [c]);
    finish(&mut t, p, 200, 1.0);
    assert!(matches!(t.poll_ticket(c, at(1.0)), TicketPoll::Ready(_)));
    assert_eq!(t.stats().waiting, 0);
}

#[test]
fn multi_scope_waiters_never_deadlock() {
    let mut t = new(Settings::default()
        .with_scope("a.com", ScopeConfig::new().concurrency(1))
        .with_scope("b.com", ScopeConfig::new().concurrency(1)));
    let pa = admit(&mut t, "a.com", 0.0);
    let pb = admit(&mut t, "b.com", 0.0);
    let ab = waiter(&mut t, &["a.com", "b.com"], 0.0);
    let ba = waiter(&mut t, &["b.com", "a.com"], 0.0);
    let b_only = waiter(&mut t, &["b.com"], 0.0);
    finish(&mut t, pa, 200, 1.0);
    assert_eq!(wakeups(&mut t), [ab]);
    assert_eq!(
        t.poll_ticket(ab, at(1.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
    finish(&mut t, pb, 200, 1.0);
    assert_eq!(wakeups(&mut t), [ab]);
    let TicketPoll::Ready(p) = t.poll_ticket(ab, at(1.0)) else {
        panic!()
    };
    assert_eq!(wakeups(&mut t), [ba]);
    finish(&mut t, p, 200, 2.0);
    wakeups(&mut t);
    assert!(matches!(t.poll_ticket(ba, at(2.0)), TicketPoll::Ready(_)));
    assert_eq!(
        t.poll_ticket(b_only, at(2.0)),
        TicketPoll::Waiting(NotReady::Blocked)
    );
}

#[test]
fn global_cap_waiters_are_woken_by_any_completion() {
    let mut s = Settings::default();
    s.concurrent_requests = 1;
    let mut t = new(s);
    let p = admit(&mut t, "a.com", 0.0);
    let w = waiter(&mut t, &["b.com"], 0.0);
    finish(&mut t, p, 200, 1.0);
    assert_eq!(wakeups(&mut t), [w]);
    assert!(matches!(t.poll_ticket(w, at(1.0)), TicketPoll::Ready(_)));
}

#[test]
fn global_slot_is_passed_on_when_the_woken_waiter_cannot_use_it() {
    let mut s = Settings::default().with_scope("slow.com", ScopeConfig::new().delay(100.0));
    s.concurrent_requests = 1;
    let mut t = new(s);
    let slow = admit(&mut t, "slow.com", 0.0);
    finish(&mut t, slow, 200, 0.0);
    let p = admit(&mut t, "a.com", 0.0);
    let w_slow = waiter(&mut t, &["slow.com"], 0.0);
    let w_fast = waiter(&mut t, &["b.com"], 0.0);
    finish(&mut t, p, 200, 1.0);
    assert_eq!(wakeups(&mut t), [w_slow]);
    assert_eq!(
        t.poll_ticket(w_slow, at(1.0)),
        TicketPoll::Waiting(NotReady::NotUntil(at(100.0)))
    );
    assert_eq!(wakeups(&mut t), [w_fast]);
    assert!(matches!(
        t.poll_ticket(w_fast, at(1.0)),
        TicketPoll::Ready(_)
    ));
}

#[test]
fn held_back_warning_fires_once_per_pile_up() {
    let mut m = HeldBackMonitor::new(3);
    assert!(!m.update(2));
    assert!(m.update(3));
    assert!(!m.update(4));
    assert!(!m.update(0));
    assert!(m.update(5));
    assert!(!HeldBackMonitor::new(0).update(1_000_000));
}
