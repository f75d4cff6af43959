//! Poll + complete pairs per second through the tokio driver over one local Redis: the
//! driver making one call per lease and per completion (`Batching::off()`, today's
//! driver) against the batched driver (`Batching::default()`), in the same run, in paired
//! rounds (each round runs both, in alternating order, each on a fresh crawl).
//!
//!     redis-driver-batch [N] [WORKERS] [ROUNDS]
//!
//! `FLOOR=1` also measures the script's floor each round (`poll_batch(64)` and
//! `complete_batch` from one client, no driver); `JSON_OUT=FILE` measures it and appends
//! one JSON line per round to FILE (what `scripts/bench-vs-peers` reads); `OPS=1` prints
//! the script calls per operation from the slow log (which slows every call down).
//!
//! N requests (default 20,000) are pushed (untimed), then WORKERS tasks (default 64) on a
//! two-thread tokio runtime loop `next` / `complete(200)` until the crawl is done; the
//! rate is N over that time. Throttling is on for every poll but nothing waits
//! (unlimited concurrency, no delay: the benchmarks' `redis_settings`). Starts its own
//! `redis-server` (no persistence) on a free port.
#![allow(clippy::print_stdout)]
use std::time::Instant;

use polite_frontier_core::DupeFilterConfig;
use polite_runtime_tokio::{Batching, Clock, DriverFor};
use polite_store_redis::RedisFrontier;
use polite_store_redis::testing::RedisServer;
use polite_throttle_core::{Outcome, Timestamp};
use workspace_benches::{drive_to_the_end, peer_requests_range, redis_config, redis_settings};

/// Script calls and their server time (µs) since the last reset (`INFO commandstats`).
fn script_stats(c: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let line = info.lines().find(|l| l.starts_with("cmdstat_fcall:"));
    let field = |name: &str| {
        line.and_then(|l| l.split([':', ',']).find_map(|kv| kv.strip_prefix(name)))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    (field("calls="), field("usec="))
}

/// One timed crawl: (pairs/s, script calls per pair, server µs per pair).
fn round(url: &str, crawl: &str, n: usize, workers: usize, batching: Batching) -> (f64, f64, f64) {
    let config = redis_config(DupeFilterConfig::Disabled);
    let mut f = RedisFrontier::open(url, crawl, redis_settings(), config).unwrap();
    for chunk in peer_requests_range(0, n, 1_000).chunks(10_000) {
        f.push_all(chunk, Timestamp::ZERO).unwrap();
    }
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    if std::env::var_os("OPS").is_some() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(0)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-max-len")
            .arg(500_000)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    }
    let driver = DriverFor::with_batching(f, Clock::wall(), batching);
    let (elapsed, done) = drive_to_the_end(vec![driver], workers);
    assert_eq!(done, n, "every request leased and completed once");
    let (calls, usec) = script_stats(&mut c);
    if std::env::var_os("OPS").is_some() {
        op_counts(&mut c);
    }
    let f = RedisFrontier::open(
        url,
        crawl,
        redis_settings(),
        redis_config(DupeFilterConfig::Disabled),
    )
    .unwrap();
    f.destroy().unwrap();
    (
        n as f64 / elapsed,
        calls as f64 / n as f64,
        usec as f64 / n as f64,
    )
}

/// Script calls by operation, from the slow log (every command logged): calls, mean
/// arguments, mean µs.
fn op_counts(c: &mut redis::Connection) {
    let log: Vec<(u64, u64, u64, Vec<Vec<u8>>)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query::<Vec<redis::Value>>(c)
        .unwrap()
        .into_iter()
        .filter_map(|v| {
            let redis::Value::Array(f) = v else {
                return None;
            };
            let id: u64 = redis::from_redis_value(f[0].clone()).ok()?;
            let t: u64 = redis::from_redis_value(f[1].clone()).ok()?;
            let us: u64 = redis::from_redis_value(f[2].clone()).ok()?;
            let args: Vec<Vec<u8>> = redis::from_redis_value(f[3].clone()).ok()?;
            Some((id, t, us, args))
        })
        .collect();
    let mut by: std::collections::BTreeMap<String, (u64, u64, u64)> = Default::default();
    for (_, _, us, args) in log {
        if args.first().map(|a| a.eq_ignore_ascii_case(b"FCALL")) != Some(true) {
            continue;
        }
        let op = String::from_utf8_lossy(&args[4]).to_string();
        let n = if op == "poll" {
            String::from_utf8_lossy(&args[8]).parse().unwrap_or(0)
        } else if op == "complete_batch" {
            String::from_utf8_lossy(&args[6]).parse().unwrap_or(0)
        } else {
            1
        };
        let e = by.entry(op).or_default();
        e.0 += 1;
        e.1 += n;
        e.2 += us;
    }
    for (op, (calls, n, us)) in by {
        println!(
            "    {op}: {calls} calls, {:.1} asked per call, {:.0} us per call",
            n as f64 / calls as f64,
            us as f64 / calls as f64
        );
    }
}

/// The script's own floor: `poll_batch(64)` and `complete_batch` straight from one
/// client, no driver: (pairs/s, server µs per pair).
fn floor(url: &str, crawl: &str, n: usize) -> (f64, f64) {
    let config = redis_config(DupeFilterConfig::Disabled);
    let mut f = RedisFrontier::open(url, crawl, redis_settings(), config).unwrap();
    for chunk in peer_requests_range(0, n, 1_000).chunks(10_000) {
        f.push_all(chunk, Timestamp::ZERO).unwrap();
    }
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let t0 = Instant::now();
    let mut done = 0;
    loop {
        let leases = f.poll_batch(Timestamp::ZERO, 64).unwrap();
        if leases.is_empty() {
            break;
        }
        let acks: Vec<_> = leases
            .into_iter()
            .map(|l| (l.unwrap().id(), Outcome::status(200), Timestamp::ZERO))
            .collect();
        done += f.complete_batch(&acks).unwrap().len();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    assert_eq!(done, n);
    let (_, usec) = script_stats(&mut c);
    f.destroy().unwrap();
    (n as f64 / elapsed, usec as f64 / n as f64)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let workers: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5);
    let server = RedisServer::start("redis-driver-batch")
        .unwrap()
        .expect("redis-server is needed");
    let url = server.url();
    println!("{n} requests, {workers} workers, {rounds} paired rounds (pairs/s)");
    let (mut single, mut batched, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let run = |batch: bool| {
            let b = if batch {
                Batching::default()
            } else {
                Batching::off()
            };
            round(&url, &format!("bench-{r}-{batch}"), n, workers, b)
        };
        let (s, b) = if r % 2 == 0 {
            let s = run(false);
            (s, run(true))
        } else {
            let b = run(true);
            (run(false), b)
        };
        let ((s, sc, su), (b, bc, bu)) = (s, b);
        println!(
            "round {r}: single {s:>7.0} ({sc:.2} calls, {su:.0} us server per pair)  \
             batched {b:>7.0} ({bc:.2} calls, {bu:.0} us)  ratio {:.2}",
            b / s
        );
        let json = std::env::var_os("JSON_OUT");
        let fl = if std::env::var_os("FLOOR").is_some() || json.is_some() {
            let (fl, fu) = floor(&url, &format!("floor-{r}"), n);
            println!("  floor (poll_batch 64 + complete_batch, no driver): {fl:.0} ({fu:.0} us)");
            Some((fl, fu))
        } else {
            None
        };
        if let (Some(path), Some((fl, fu))) = (json, fl) {
            use std::io::Write;
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(
                out,
                "{{\"round\": {r}, \"requests\": {n}, \"workers\": {workers}, \
                 \"single_pairs_s\": {s:.1}, \"single_calls\": {sc:.3}, \"single_us\": {su:.1}, \
                 \"batched_pairs_s\": {b:.1}, \"batched_calls\": {bc:.3}, \"batched_us\": {bu:.1}, \
                 \"floor_pairs_s\": {fl:.1}, \"floor_us\": {fu:.1}}}"
            )
            .unwrap();
        }
        single.push(s);
        batched.push(b);
        ratios.push(b / s);
    }
    println!(
        "median: single {:.0}  batched {:.0}  ratio (median of paired) {:.2}",
        median(&mut single),
        median(&mut batched),
        median(&mut ratios)
    );
}
