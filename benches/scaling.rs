//! Scaling curves: how the cost of a push and of a poll + complete grows with the number
//! of queued requests (1,000 to 1,000,000, over min(N, 10,000) hosts), with the number
//! of scopes (10 to 100,000, 1,000,000 requests), and with the queue of one host where
//! every tenth request carries a per-request delay (10,000 to 1,000,000 queued: the
//! delayed ones rejoin the host's queue behind newer ones, which once cost O(n) each).
//!
//!     cargo run --release -p workspace-benches --bin scaling [-- --quick]
//!
//! Prints one JSON object per point: `axis` (`queued`, `scopes` or `delayed`), `queued`, `scopes`,
//! `push_ns`, `poll_complete_ns` (median of 5 runs, nanoseconds per request, building the
//! requests excluded). In-memory frontier, duplicate filter on, throttling on for every
//! poll (unlimited concurrency, no delay, so nothing waits), the peers' URL shapes.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use polite_frontier_core::{Frontier, Poll, Request};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use workspace_benches::peer_requests;

fn settings() -> Settings {
    Settings::default()
        .concurrent_requests(u32::MAX)
        .concurrent_requests_per_domain(0)
        .throttling_scope_limit(0)
}

/// Nanoseconds per push and per poll + complete of `n` requests over `scopes` hosts.
fn point(n: usize, scopes: usize) -> (f64, f64) {
    time(&peer_requests(n, scopes), Timestamp::ZERO)
}

/// [`point`] for `n` requests to one host, every tenth delayed by 1 s, polled at 2 s
/// (when every delay is over, so nothing waits).
fn delayed_point(n: usize) -> (f64, f64) {
    let reqs: Vec<Request> = (0..n)
        .map(|i| {
            let r = Request::get(format!("https://one.example.com/item/{i}"));
            if i % 10 == 0 { r.delay(1.0) } else { r }
        })
        .collect();
    time(&reqs, Timestamp::from_secs(2))
}

/// Nanoseconds per push (at time zero) and per poll + complete (at `poll_at`) of `reqs`.
fn time(reqs: &[Request], poll_at: Timestamp) -> (f64, f64) {
    let n = reqs.len();
    let mut f = Frontier::in_memory(settings(), Timestamp::ZERO).expect("valid settings");
    let t0 = Instant::now();
    for r in reqs {
        f.push(r, Timestamp::ZERO).expect("a valid request");
    }
    let push = t0.elapsed().as_nanos() as f64 / n as f64;
    let ok = Outcome::status(200);
    let t0 = Instant::now();
    let mut done = 0;
    while let Poll::Ready(lease) = f.poll(poll_at).expect("in-memory poll") {
        f.complete(lease.id(), &ok, poll_at).expect("a live lease");
        done += 1;
    }
    let poll = t0.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(done, n, "every request handed out once");
    (push, poll)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Prints the medians of `runs` runs of `point` as one JSON line.
fn measure(axis: &str, n: usize, scopes: usize, runs: usize, point: impl Fn() -> (f64, f64)) {
    let points: Vec<(f64, f64)> = (0..runs).map(|_| point()).collect();
    let push = median(points.iter().map(|p| p.0).collect());
    let poll = median(points.iter().map(|p| p.1).collect());
    println!(
        "{{\"axis\":\"{axis}\",\"queued\":{n},\"scopes\":{scopes},\"push_ns\":{push:.1},\"poll_complete_ns\":{poll:.1}}}"
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runs = if quick { 1 } else { 5 };
    let top = if quick { 100_000 } else { 1_000_000 };
    let mut n = 1_000;
    while n <= top {
        measure("queued", n, n.min(10_000), runs, || point(n, n.min(10_000)));
        n *= 10;
    }
    for scopes in [10, 100, 1_000, 10_000, 100_000] {
        measure("scopes", top, scopes, runs, || point(top, scopes));
    }
    let mut n = 10_000;
    while n <= top {
        measure("delayed", n, 1, runs, || delayed_point(n));
        n *= 10;
    }
}
