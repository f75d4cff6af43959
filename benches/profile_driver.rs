//! Profiling helper: push N requests, then drain them through a driver with an instant
//! fetch (`next` then `complete`), or directly, and print the rates.
//!
//!     profile-driver [N] [HOSTS] [direct|tokio|tokio-multi|async-std]
//!
//! `valgrind --tool=callgrind --toggle-collect='*drain*'` counts only the drain's
//! instructions (the driver bench's shape, repeatable where its timings are not);
//! `PROFILE_PAUSE_MS=3000` sleeps after the pushes, so `perf record -D 4000` sees only
//! the drain; `PROFILE_JSON=1` prints the rate as one JSON line.
#![allow(clippy::print_stdout)]
use std::time::{Duration, Instant};

use frontier_core::{Frontier, FrontierConfig, Poll, VolatileStore};
use throttle_core::{Outcome, Settings, Timestamp};
use workspace_benches::peer_requests;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let hosts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let how = args.next().unwrap_or_else(|| "tokio".into());
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    let config = FrontierConfig {
        persist_scope_states: false,
        ..FrontierConfig::default()
    };
    let mut f: Frontier<VolatileStore> =
        Frontier::open(s, config, VolatileStore, Timestamp::ZERO).unwrap();
    for r in &peer_requests(n, hosts) {
        f.push(r, Timestamp::ZERO).unwrap();
    }
    if let Some(ms) = std::env::var("PROFILE_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // Lets `perf record -D` skip the push phase.
        std::thread::sleep(Duration::from_millis(ms));
    }
    let (k, took) = match how.as_str() {
        "direct" => drain_direct(f),
        "tokio" | "tokio-multi" => {
            let rt = if how == "tokio" {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
            .enable_time()
            .build()
            .unwrap();
            let clock = runtime_tokio::Clock::starting_at(Timestamp::ZERO);
            rt.block_on(async move {
                tokio::spawn(drain_driver(runtime_tokio::Driver::new(f, clock)))
                    .await
                    .unwrap()
            })
        }
        "async-std" => {
            let clock = runtime_async_std::Clock::starting_at(Timestamp::ZERO);
            futures_lite::future::block_on(drain_driver(runtime_async_std::Driver::new(f, clock)))
        }
        other => {
            eprintln!(
                "profile-driver: unknown way {other:?} (direct, tokio, tokio-multi, async-std)"
            );
            std::process::exit(2);
        }
    };
    let rate = k as f64 / took.as_secs_f64();
    if std::env::var_os("PROFILE_JSON").is_some() {
        println!(
            "{{\"case\": \"profile_driver\", \"how\": \"{how}\", \"n\": {n}, \"d\": {hosts}, \"ops_s\": {rate:.0}}}"
        );
    } else {
        println!("{how}: poll + complete {rate:.0}/s ({k})");
    }
}

#[inline(never)]
fn drain_direct(mut f: Frontier<VolatileStore>) -> (usize, Duration) {
    let ok = Outcome::status(200);
    let (t0, mut k) = (Instant::now(), 0);
    while let Poll::Ready(l) = f.poll(Timestamp::ZERO).unwrap() {
        f.complete(l.id(), &ok, Timestamp::ZERO).unwrap();
        k += 1;
    }
    (k, t0.elapsed())
}

/// Takes every lease through the driver and completes it at once (an instant fetch).
async fn drain_driver<R: runtime_common::Runtime>(
    driver: runtime_common::DriverFor<Frontier<VolatileStore>, R>,
) -> (usize, Duration) {
    let (t0, mut k) = (Instant::now(), 0);
    while let Some(l) = driver.next().await {
        driver
            .complete(l.unwrap().id(), Outcome::status(200))
            .await
            .unwrap();
        k += 1;
    }
    (k, t0.elapsed())
}
