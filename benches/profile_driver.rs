//! Profiling helper: push N requests, then drain them through a driver with an instant
//! fetch (`next` then `complete`), or directly, and print the rate.
//!
//!     profile-driver [N] [HOSTS] [direct|tokio|tokio-multi|async-std]
//!
//! `valgrind --tool=callgrind --toggle-collect='*drain*'` counts only the drain's
//! instructions (the driver bench's shape, repeatable where its timings are not);
//! `PROFILE_PAUSE_MS=3000` sleeps after the pushes, so `perf record -D 4000` sees only
//! the drain; `PROFILE_JSON=1` prints the rate as one JSON line.
#![allow(clippy::print_stdout)]
use std::time::Duration;

use polite_frontier_core::VolatileStore;
use workspace_benches::drive::{Way, fill, run};
use workspace_benches::peer_requests;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let hosts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let name = args.next().unwrap_or_else(|| "tokio".into());
    let Some(way) = Way::from_name(&name) else {
        eprintln!("profile-driver: unknown way {name:?} (direct, tokio, tokio-multi, async-std)");
        std::process::exit(2);
    };
    let f = fill(VolatileStore::new(), &peer_requests(n, hosts));
    if let Some(ms) = std::env::var("PROFILE_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // Lets `perf record -D` skip the push phase.
        std::thread::sleep(Duration::from_millis(ms));
    }
    let (k, took) = run(way, f);
    let rate = k as f64 / took.as_secs_f64();
    if std::env::var_os("PROFILE_JSON").is_some() {
        println!(
            "{{\"case\": \"profile_driver\", \"how\": \"{name}\", \"n\": {n}, \"d\": {hosts}, \"ops_s\": {rate:.0}}}"
        );
    } else {
        println!("{name}: poll + complete {rate:.0}/s ({k})");
    }
}
