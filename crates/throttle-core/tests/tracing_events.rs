//! The debug events of each decision and the held-back warning, through the public API.
//!
//! In a test binary of its own: `tracing` caches per call site whether anyone listens,
//! and unit tests running at the same time on other threads (with no subscriber) made
//! that cache miss this test's thread-local subscriber now and then.
#![cfg(feature = "tracing")]

use std::sync::{Arc, Mutex};

use polite_throttle_core::{
    Outcome, Permit, RampupConfig, RequestFlags, ScopeConfig, ScopeUse, Settings, Throttler,
    Timestamp,
};

fn at(secs: f64) -> Timestamp {
    Timestamp::from_secs_f64(secs)
}

fn admit(t: &mut Throttler, scope: &str, now: f64) -> Permit {
    t.try_acquire(&[ScopeUse::new(scope)], at(now))
        .unwrap_or_else(|e| panic!("{scope} not admitted at {now}: {e:?}"))
}

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn decisions_are_traced() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut s = Settings::default().without_jitter().with_scope(
            "api",
            ScopeConfig::new()
                .delay(1.0)
                .max_concurrency(3)
                .rampup(RampupConfig::default().delay_factor(0.5).min_delay(0.25)),
        );
        s.throttling_scope_limit = 1;
        s.delayed_requests_warn_threshold = 1;
        let mut t = Throttler::new(s, Timestamp::ZERO).unwrap();
        let p = admit(&mut t, "a.com", 0.0);
        assert!(t.release(p, &Outcome::status(429), at(0.0)));
        let p = admit(&mut t, "a.com", 5.0);
        t.release(
            p,
            &Outcome::response(503, [("Retry-After", "9")], None),
            at(5.0),
        );
        assert!(t.scope_stats("a.com", at(200.0)).is_some());
        let p = admit(&mut t, "api", 200.0);
        assert!(t.release(p, &Outcome::status(200), at(200.0)));
        assert!(t.scope_stats("api", at(400.0)).is_some());
        t.handle_crawl_delay("c.com", 2.0, at(400.0)).unwrap();
        t.handle_crawl_delay("api", 2.0, at(400.0)).unwrap();
        let _busy = admit(&mut t, "one", 400.0);
        let waiting =
            t.try_acquire_or_enqueue(&[ScopeUse::new("one")], RequestFlags::default(), at(400.0));
        assert!(waiting.is_err(), "expected to wait");
    });
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    for needle in [
        "backoff step",
        "backoff: header delay honoured",
        "backoff recovery step",
        "rampup: delay lowered",
        "rampup: concurrency raised",
        "crawl-delay applied",
        "more aggressive than its robots.txt",
        "scope state evicted",
        "delayed_requests_warn_threshold",
    ] {
        assert!(log.contains(needle), "missing {needle:?} in:\n{log}");
    }
}
