//! Profiling helper for polite-store-redis's script: the `redis-bench` workload's pushes and
//! batched polls, phase by phase, on a server started elsewhere (under valgrind).
//!
//!     REDIS_URL=redis://127.0.0.1:6411/ profile-redis [N] [HOSTS] [batch|single]
//!
//! Phases, each ended by a `PING` (the bench itself sends none): the queue alone
//! (`push_all` without the duplicate filter, batches of 1,000 requests per script call),
//! the same requests with the exact duplicate filter on another crawl, then
//! `poll_batch(64)` on that crawl until it is empty; with `single`, `poll` (one lease per
//! call, what a driver does) until it is empty, then a fourth phase that completes each of
//! those leases (`complete`, one call each): the script's fixed cost per call shows
//! there. Start the server with `valgrind --tool=callgrind
//! --toggle-collect=luaCallFunction --dump-before=pingCommand redis-server ...` and each
//! dump holds one phase's instructions inside script calls (divide by N requests or
//! leases). Prints each phase's count and wall time.
//!
//! `PROFILE_LUA=path/to/frontier.lua` replaces the server's copy of the script with that
//! file's after each `open` (same function name): a changed script measured without a
//! rebuild, as long as it reads and writes the same layout as the built one. The script
//! is its modules in order: `cat crates/store-redis/src/lua/*.lua > /tmp/frontier.lua`.
#![allow(clippy::print_stdout)]
use polite_frontier_core::{DupeFilterConfig, Poll};
use polite_store_redis::{RedisConfig, RedisFrontier};
use polite_throttle_core::{Outcome, Timestamp};
use workspace_benches::{peer_requests_range, redis_config, redis_settings};

/// Loads `PROFILE_LUA`'s script in place of the one `open` installed (see the docs).
fn override_script(c: &mut redis::Connection) {
    let Some(path) = std::env::var("PROFILE_LUA").ok().filter(|p| !p.is_empty()) else {
        return;
    };
    let code = std::fs::read_to_string(&path).expect("PROFILE_LUA: a readable file");
    let library = polite_store_redis::testing::replacement_library(&code);
    let _: redis::Value = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library)
        .query(c)
        .unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5_000);
    let hosts: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let single = match args.get(3).map(String::as_str) {
        None | Some("batch") => false,
        Some("single") => true,
        Some(other) => {
            eprintln!("profile-redis: unknown mode {other:?} (batch, single)");
            std::process::exit(2);
        }
    };
    let url = std::env::var("REDIS_URL").expect("REDIS_URL (a server under valgrind)");
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let phase = |c: &mut redis::Connection, name: &str, t0: std::time::Instant, count| {
        let _: String = redis::cmd("PING").query(c).unwrap();
        println!("{name}: {count} in {:.3} s", t0.elapsed().as_secs_f64());
    };
    let now = Timestamp::ZERO;
    let reqs = peer_requests_range(0, n, hosts);
    let queue_only = redis_config(DupeFilterConfig::Disabled);
    let mut q = RedisFrontier::open(&url, "queue", redis_settings(), queue_only).unwrap();
    override_script(&mut c);
    let t0 = std::time::Instant::now();
    for chunk in reqs.chunks(10_000) {
        q.push_all(chunk, now).unwrap();
    }
    phase(&mut c, "push_no_dupefilter", t0, n);
    let mut f =
        RedisFrontier::open(&url, "bench", redis_settings(), RedisConfig::default()).unwrap();
    override_script(&mut c);
    let t0 = std::time::Instant::now();
    for chunk in reqs.chunks(10_000) {
        f.push_all(chunk, now).unwrap();
    }
    phase(&mut c, "push", t0, n);
    let t0 = std::time::Instant::now();
    if single {
        let mut leases = Vec::with_capacity(n);
        while let Poll::Ready(lease) = f.poll(now).unwrap() {
            leases.push(lease.id());
        }
        assert_eq!(leases.len(), n);
        phase(&mut c, "pop", t0, n);
        let t0 = std::time::Instant::now();
        let ok = Outcome::status(200);
        for id in leases {
            assert!(f.complete(id, &ok, now).unwrap());
        }
        phase(&mut c, "complete", t0, n);
        return;
    }
    let mut popped = 0;
    loop {
        let batch = f.poll_batch(now, 64).unwrap();
        if batch.is_empty() {
            break;
        }
        popped += batch.len();
    }
    assert_eq!(popped, n);
    phase(&mut c, "pop_batch", t0, popped);
}
