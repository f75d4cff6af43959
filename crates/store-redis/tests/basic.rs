//! The Redis frontier's own behaviour: push, poll, leases, errors.

use frontier_core::{Poll, PushOutcome, Request};
use store_redis::testing::RedisServer;
use store_redis::{RedisConfig, RedisFrontier};
use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

#[test]
fn push_poll_complete() {
    let Some(server) = RedisServer::start_or_skip("push_poll_complete") else {
        return;
    };
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.com", ScopeConfig::new().delay(2.0));
    let mut f = RedisFrontier::open(&server.url(), "c1", settings, RedisConfig::default()).unwrap();
    assert!(matches!(
        f.push(&Request::get("https://a.com/1").callback("parse"), t(0))
            .unwrap(),
        PushOutcome::Queued(_)
    ));
    assert!(matches!(
        f.push(&Request::get("https://a.com/2"), t(0)).unwrap(),
        PushOutcome::Queued(_)
    ));
    assert_eq!(
        f.push(&Request::get("https://a.com/1#x"), t(0)).unwrap(),
        PushOutcome::Duplicate
    );
    let Poll::Ready(l) = f.poll(t(0)).unwrap() else {
        panic!()
    };
    assert_eq!(&*l.request.url, "https://a.com/2");
    assert_eq!(f.poll(t(0)).unwrap(), Poll::NotUntil(t(2)));
    assert!(f.complete(l.id(), &Outcome::status(200), t(1)).unwrap());
    let Poll::Ready(l2) = f.poll(t(2)).unwrap() else {
        panic!()
    };
    assert_eq!(&*l2.request.url, "https://a.com/1");
    assert_eq!(l2.request.callback.as_deref(), Some("parse"));
    assert!(f.complete(l2.id(), &Outcome::status(200), t(2)).unwrap());
    assert_eq!(f.poll(t(3)).unwrap(), Poll::Empty);
}
