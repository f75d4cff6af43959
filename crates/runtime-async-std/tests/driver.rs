//! The driver's own behaviour on a manual clock: FIFO turns among callers of `next`,
//! the lease stream, periodic checkpoints and close.

use std::cell::RefCell;

use futures_lite::{StreamExt, future};
use polite_frontier_core::{Frontier, Request, VolatileStore};
use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

use std::time::Duration;

use polite_runtime_async_std::{Clock, Driver, DriverError, ManualClock};

/// A driver over an in-memory frontier with `settings`, on a manual clock from zero.
fn manual_driver(settings: Settings) -> (Driver<VolatileStore>, Clock, ManualClock) {
    let (clock, time) = Clock::manual(Timestamp::ZERO);
    let d = Driver::new(Frontier::in_memory(settings, clock.now()).unwrap(), clock);
    (d, clock, time)
}

#[test]
fn concurrent_callers_of_next_are_served_in_arrival_order() {
    let (d, _, time) = manual_driver(
        Settings::default()
            .without_jitter()
            .with_scope("a.com", ScopeConfig::new().delay(1.0)),
    );
    let served = RefCell::new(Vec::new());
    let worker = |name: &'static str| {
        let (d, served) = (d.clone(), &served);
        async move {
            while let Some(l) = d.next().await {
                served.borrow_mut().push((name, d.now()));
                d.complete(l.unwrap().id(), Outcome::status(200))
                    .await
                    .unwrap();
            }
        }
    };
    time.block_on(async {
        for i in 0..6 {
            d.push(Request::get(format!("https://a.com/{i}")))
                .await
                .unwrap();
        }
        future::zip(worker("x"), future::zip(worker("y"), worker("z"))).await;
    });
    // `x` is polled first and takes the first lease (and its next turn) before `y`
    // and `z` arrive; from then on each comes back behind the other two.
    let secs = Timestamp::from_secs;
    assert_eq!(
        *served.borrow(),
        [
            ("x", secs(0)),
            ("x", secs(1)),
            ("y", secs(2)),
            ("z", secs(3)),
            ("x", secs(4)),
            ("y", secs(5))
        ]
    );
}

/// `next` looks without taking the turn only when nobody holds it: a caller that comes
/// while another waits queues behind it, even if a request is ready by then.
#[test]
fn a_caller_that_comes_while_another_waits_does_not_jump_ahead() {
    let (d, _, time) = manual_driver(
        Settings::default()
            .without_jitter()
            .with_scope("a.com", ScopeConfig::new().delay(10.0)),
    );
    let served = RefCell::new(Vec::new());
    time.block_on(async {
        d.push_all(vec![
            Request::get("https://a.com/1"),
            Request::get("https://a.com/2"),
        ])
        .await
        .unwrap();
        let first = d.next().await.unwrap().unwrap();
        d.complete(first.id(), Outcome::status(200)).await.unwrap();
        let take = |name: &'static str| {
            let (d, served) = (d.clone(), &served);
            async move {
                let l = d.next().await.unwrap().unwrap();
                served
                    .borrow_mut()
                    .push((name, l.request.url.to_string(), d.now()));
            }
        };
        // `w` waits for a.com's delay (holding the turn); then b.com's request is
        // pushed, ready at once, and `n` comes: `w` is served first, with it.
        let later = async {
            d.push(Request::get("https://b.com/")).await.unwrap();
            take("n").await;
        };
        future::zip(take("w"), later).await;
    });
    assert_eq!(
        *served.borrow(),
        [
            ("w", "https://b.com/".to_string(), Timestamp::ZERO),
            ("n", "https://a.com/1".to_string(), Timestamp::from_secs(10)),
        ]
    );
}

/// Shutting down ends a `next` that waits for a change (a lease in flight, nothing
/// queued) and one queued behind it for the turn. (On a thread with a deadline: a `next`
/// left asleep would otherwise hang the test.)
#[test]
fn close_ends_the_calls_waiting_in_next() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (d, _, time) = manual_driver(Settings::default());
        time.block_on(async {
            d.push(Request::get("https://a.com/")).await.unwrap();
            let out = d.next().await.unwrap().unwrap();
            let closed = async {
                future::yield_now().await;
                d.close().await.unwrap();
            };
            let ((first, second), ()) = future::zip(future::zip(d.next(), d.next()), closed).await;
            assert!(first.is_none() && second.is_none());
            assert!(matches!(
                d.complete(out.id(), Outcome::status(200)).await,
                Err(DriverError::Closed)
            ));
        });
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("close left a call to next() waiting");
}

#[test]
fn the_lease_stream_and_periodic_flushes_end_with_the_driver() {
    let (d, clock, time) = manual_driver(Settings::default());
    time.block_on(async {
        d.push_all(vec![
            Request::get("https://a.com/"),
            Request::get("https://b.com/"),
        ])
        .await
        .unwrap();
        let checkpointer = d.clone().checkpoint_every(Duration::from_secs(5));
        let crawl = async {
            let mut leases = d.leases();
            let mut n = 0;
            while let Some(l) = leases.next().await {
                d.complete(l.unwrap().id(), Outcome::status(200))
                    .await
                    .unwrap();
                n += 1;
            }
            clock.sleep(Duration::from_secs(12)).await;
            let _store = d.close().await.unwrap();
            n
        };
        let (checkpointed, n) = future::zip(checkpointer, crawl).await;
        assert!(checkpointed.is_ok(), "{checkpointed:?}");
        assert_eq!(n, 2);
    });
    // The checkpointer noticed the close at its next tick.
    assert_eq!(clock.now(), Timestamp::from_secs(15));
    assert!(matches!(
        time.block_on(d.checkpoint()),
        Err(DriverError::Closed)
    ));
}
