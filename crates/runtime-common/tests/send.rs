//! The driver's and the throttle's futures are `Send`, so tasks using them can be spawned
//! on a multi-threaded executor (a compile-time check).

use std::future::Future;
use std::time::Duration;

use polite_frontier_core::{Frontier, Request};
use polite_runtime_common::{DriverFor, Job, Runtime, Throttle};
use polite_throttle_core::{Outcome, Timestamp};

#[derive(Clone, Copy)]
struct Instant0;

impl Runtime for Instant0 {
    fn now(&self) -> Timestamp {
        Timestamp::ZERO
    }
    fn sleep_until(&self, _: Timestamp) -> impl Future<Output = ()> + Send + use<> {
        async {}
    }
    fn sleep(&self, _: Duration) -> impl Future<Output = ()> + Send + use<> {
        async {}
    }
    fn unblock(&self, job: Job) -> impl Future<Output = Result<(), String>> + Send + use<> {
        async move {
            job();
            Ok(())
        }
    }
}

fn spawnable<T: Future + Send + 'static>(_: T) {}

#[test]
fn futures_are_send() {
    let d: DriverFor<Frontier, Instant0> = DriverFor::new(
        Frontier::in_memory(Default::default(), Timestamp::ZERO).unwrap(),
        Instant0,
    );
    let d1 = d.clone();
    spawnable(async move {
        let _ = d1.next().await;
    });
    let d2 = d.clone();
    spawnable(async move {
        let _ = d2.push(Request::get("https://a.com/")).await;
    });
    let d3 = d.clone();
    spawnable(async move {
        let _ = d3.flush().await;
        let _ = d3.checkpoint().await;
    });
    let d4 = d.clone();
    spawnable(async move {
        let _ = d4
            .complete(polite_frontier_core::RequestId(0), Outcome::status(200))
            .await;
    });
    let t = Throttle::new(Default::default(), Instant0).unwrap();
    spawnable(async move {
        let p = t.acquire(&["a.com".into()]).await;
        p.finish(&Outcome::status(200));
    });
}
