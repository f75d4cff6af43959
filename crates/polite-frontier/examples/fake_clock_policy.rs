//! Unit-testing a politeness policy on a fake clock: no sleeping, exact instants.
//! The policy: an API that allows 5 calls per 10-second window, one call at a time,
//! and backs off when it answers 429 (for as long as its `Retry-After` asks).
//!
//!     cargo test -p polite-frontier --example fake_clock_policy
//!     cargo run -p polite-frontier --example fake_clock_policy
#![allow(clippy::print_stdout)] // examples print what they do
use polite_frontier::throttle::{NotReady, ScopeUse};
use polite_frontier::{FakeClock, Jitter, Outcome, ScopeConfig, Settings, Throttler, Timestamp};

/// The policy under test.
fn api_policy() -> Settings {
    Settings::default().without_jitter().with_scope(
        "api",
        ScopeConfig::new()
            .quota(5.0)
            .window(10)
            .concurrency(1)
            .jitter(Jitter::NONE),
    )
}

/// Sends `n` calls as fast as the throttler allows, each answered at once with
/// `answer(i)`; returns the instant of each send.
fn send_times(n: usize, answer: impl Fn(usize) -> Outcome<'static>) -> Vec<Timestamp> {
    let clock = FakeClock::new(Timestamp::ZERO);
    let mut throttler = Throttler::new(api_policy(), clock.now()).expect("valid settings");
    let mut sent = Vec::new();
    while sent.len() < n {
        match throttler.try_acquire(&[ScopeUse::new("api")], clock.now()) {
            Ok(permit) => {
                sent.push(clock.now());
                throttler.release(permit, &answer(sent.len() - 1), clock.now());
            }
            // Jump straight to the instant the throttler names: no real waiting.
            Err(NotReady::NotUntil(t)) => clock.set(t),
            Err(NotReady::Blocked) => unreachable!("every call is answered at once"),
        }
    }
    sent
}

fn main() {
    for t in send_times(12, |_| Outcome::status(200)) {
        println!("sent at {t:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_calls_per_window() {
        let secs: Vec<f64> = send_times(12, |_| Outcome::status(200))
            .iter()
            .map(|t| t.as_secs_f64())
            .collect();
        assert_eq!(
            secs,
            [0., 0., 0., 0., 0., 10., 10., 10., 10., 10., 20., 20.]
        );
    }

    #[test]
    fn a_429_with_retry_after_holds_the_next_call_back() {
        // The third call is answered 429 "Retry-After: 30".
        let times = send_times(4, |i| {
            if i == 2 {
                Outcome::response(429, [("retry-after", "30")], None)
            } else {
                Outcome::status(200)
            }
        });
        assert_eq!(times[2], Timestamp::ZERO);
        assert_eq!(times[3], Timestamp::from_secs(30));
    }
}
