//! The driver's own behaviour on a manual clock: FIFO turns among callers of `next`,
//! the lease stream, periodic flushes and shutdown.

use std::cell::RefCell;

use frontier_core::{Frontier, Request};
use futures_lite::{StreamExt, future};
use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

use std::time::Duration;

use runtime_async_std::{Clock, Driver, DriverError};

#[test]
fn concurrent_callers_of_next_are_served_in_arrival_order() {
    let (clock, time) = Clock::manual(Timestamp::ZERO);
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(1.0));
    let d = Driver::new(Frontier::in_memory(settings, clock.now()).unwrap(), clock);
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

#[test]
fn the_lease_stream_and_periodic_flushes_end_with_the_driver() {
    let (clock, time) = Clock::manual(Timestamp::ZERO);
    let d = Driver::new(
        Frontier::in_memory(Settings::default(), clock.now()).unwrap(),
        clock,
    );
    time.block_on(async {
        d.push_all(vec![
            Request::get("https://a.com/"),
            Request::get("https://b.com/"),
        ])
        .await
        .unwrap();
        let flusher = d.clone().flush_every(Duration::from_secs(5));
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
            let _store = d.shutdown().await.unwrap();
            n
        };
        let ((), n) = future::zip(flusher, crawl).await;
        assert_eq!(n, 2);
    });
    // The flusher noticed the shutdown at its next tick.
    assert_eq!(clock.now(), Timestamp::from_secs(15));
    assert!(matches!(time.block_on(d.flush()), Err(DriverError::Closed)));
}
