//! Profiling helper: push then poll+complete N requests (see `perf record`).
//!
//!     profile-poll [N] [HOSTS] [poll]
//!
//! With `poll`, leases are left open instead of completed (the `poll_1m` benchmark's
//! shape: the frontier keeps them, the caller reads each URL and drops the request).
//! `PROFILE_PAUSE_MS=3000` sleeps between the phases, so `perf record -D 4000` sees only
//! the polls; `valgrind --tool=callgrind --toggle-collect='*drain*'` counts only their
//! instructions (`'*fill*'`: only the pushes'). `PROFILE_JSON=1` prints the rates as one JSON line (`bench-vs-peers`'s
//! paired rounds read it). `PROFILE_LONG_URLS=1` appends 40 characters of tracking
//! parameters to every URL, so that no record fits a queue slot (the store keeps them
//! in its spill cells). `PROFILE_PUSH_ALL=100` pushes through `push_all` in batches of
//! 100 requests instead of one `push` each. `PROFILE_ONE_SCOPE=1` puts every request in
//! one explicit scope (`.scope("all")`, the `poll_complete_1m_one_group` row's shape).
#![allow(clippy::print_stdout)]
use polite_frontier_core::{DupeFilterConfig, Frontier, FrontierConfig, Poll, VolatileStore};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use workspace_benches::{peer_requests, push_requests};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let hosts: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let complete = std::env::args().nth(3).as_deref() != Some("poll");
    let mut reqs = peer_requests(n, hosts);
    if std::env::var_os("PROFILE_LONG_URLS").is_some() {
        for r in &mut reqs {
            r.url = format!("{}&utm_source=newsletter&utm_medium=email", r.url).into();
        }
    }
    if std::env::var_os("PROFILE_ONE_SCOPE").is_some() {
        reqs = reqs.into_iter().map(|r| r.scope("all")).collect();
    }
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    let config = FrontierConfig::default()
        .dupefilter(DupeFilterConfig::Disabled)
        .persist_scope_states(false);
    let mut f: Frontier<VolatileStore> =
        Frontier::open(s, config, VolatileStore::new(), Timestamp::ZERO).unwrap();
    let t0 = std::time::Instant::now();
    fill(&mut f, &reqs);
    let push = t0.elapsed();
    if let Some(ms) = std::env::var("PROFILE_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // Lets `perf record -D` skip the push phase.
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let t0 = std::time::Instant::now();
    let (k, url_bytes) = drain(&mut f, complete);
    let poll = t0.elapsed();
    std::hint::black_box(url_bytes);
    let (push_rate, poll_rate) = (n as f64 / push.as_secs_f64(), k as f64 / poll.as_secs_f64());
    if std::env::var_os("PROFILE_JSON").is_some() {
        let metric = if complete {
            "poll_complete_ops_s"
        } else {
            "poll_ops_s"
        };
        println!(
            "{{\"case\": \"profile_poll\", \"n\": {n}, \"d\": {hosts}, \"push_ops_s\": {push_rate:.0}, \"{metric}\": {poll_rate:.0}}}"
        );
    } else {
        println!(
            "push {push_rate:.0}/s {} {poll_rate:.0}/s ({k})",
            if complete { "poll+complete" } else { "poll" },
        );
    }
}

/// Pushes every request. A function of its own so that `valgrind --toggle-collect=*fill*`
/// counts only the pushes.
#[inline(never)]
fn fill(f: &mut Frontier<VolatileStore>, reqs: &[polite_frontier_core::Request]) {
    let batch = std::env::var("PROFILE_PUSH_ALL")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0);
    push_requests(f, reqs, batch);
}

/// Polls until nothing is ready, reading each request's URL and completing its lease
/// (or leaving it open); returns the polls and the URL bytes read. A function of its own
/// so that `valgrind --toggle-collect=*drain*` counts only this.
#[inline(never)]
fn drain(f: &mut Frontier<VolatileStore>, complete: bool) -> (usize, usize) {
    let ok = Outcome::status(200);
    let (mut k, mut url_bytes) = (0, 0);
    while let Poll::Ready(l) = f.poll(Timestamp::ZERO).unwrap() {
        url_bytes += l.request.url.len();
        if complete {
            f.complete(l.id(), &ok, Timestamp::ZERO).unwrap();
        }
        k += 1;
    }
    (k, url_bytes)
}
