//! Memory of a crawl over many hosts whose scope states cannot simply be forgotten:
//! every host answers its first request with 429 and a Retry-After of an hour, then
//! returns with a second page, so each host's backoff must be kept until it ends.
//!
//! ```text
//! cargo run --release -p workspace-benches --bin hibernation-memory CASE [HOSTS] [LIMIT]
//! ```
//!
//! Hosts are visited one after another (the queue stays short), so after the visits the
//! memory is mostly scope states: `rss_after_visits_mib`. Then every host returns at
//! once, and the peak (`peak_rss_mib`) adds the queue's own cost per queued host.
//!
//! CASE is `fs`, `sqlite` (evicted states go to the store: the default) or
//! `fs_resident`, `sqlite_resident` (hibernation off: backing-off states stay in memory).
//! HOSTS defaults to 1,000,000, LIMIT (`throttling_scope_limit`) to 10,000. The crawl
//! flushes every 10,000 operations, as a crawler flushing after completions would. Prints one JSON
//! object: peak RSS (`VmHWM`), scope states in memory at the end, states hibernated and
//! woken, hosts served before their Retry-After ended (must be 0), seconds taken. Run
//! each case in a fresh process.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use polite_frontier_core::{Frontier, FrontierConfig, Poll, Request, Store};
use polite_store_fs::{FsConfig, FsStore};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::{Outcome, Settings, Timestamp};

const RETRY_AFTER: &str = "3600";

fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

struct Report {
    early: u64,
    served: u64,
    rss_visited: u64,
}

fn current_rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn crawl<S: Store>(store: S, hosts: usize, limit: u32, hibernate: bool) -> (Report, String)
where
    S::Error: std::fmt::Debug,
{
    let mut settings = Settings::default().without_jitter();
    settings.throttling_scope_limit = limit;
    settings.concurrent_requests = u32::MAX;
    let config = FrontierConfig::default().hibernate_scopes(hibernate);
    let t0 = Timestamp::ZERO;
    let mut f = Frontier::open(settings, config, store, t0).expect("open");
    let mut ops = 0u64;
    let mut tick = |f: &mut Frontier<S>| {
        ops += 1;
        if ops.is_multiple_of(10_000) {
            f.flush().expect("commit");
        }
    };
    let limited = Outcome::response(429, [("Retry-After", RETRY_AFTER)], None);
    let mut report = Report {
        early: 0,
        served: 0,
        rss_visited: 0,
    };
    // Hosts are visited one after another (the queue stays short): each answers 429, so
    // each keeps a backoff for an hour.
    for h in 0..hosts {
        f.push(
            &Request::get(format!("https://h{h}.example/a").as_str()),
            t0,
        )
        .expect("push");
        tick(&mut f);
        while let Poll::Ready(lease) = f.poll(t0).expect("poll") {
            f.complete(lease.id(), &limited, t0).expect("complete");
            report.served += 1;
            tick(&mut f);
        }
    }
    f.flush().expect("commit");
    report.rss_visited = current_rss();
    // Every host returns, a minute later: nothing may go before the hour is over.
    let t1 = Timestamp::from_secs(60);
    for h in 0..hosts {
        f.push(
            &Request::get(format!("https://h{h}.example/b").as_str()),
            t1,
        )
        .expect("push");
        tick(&mut f);
    }
    while let Poll::Ready(lease) = f.poll(t1).expect("poll") {
        report.early += 1;
        f.complete(lease.id(), &Outcome::status(200), t1)
            .expect("complete");
    }
    f.flush().expect("commit");
    let s = f.throttler().stats();
    let extra = format!(
        "\"resident_scopes\": {}, \"hibernated\": {}, \"woken\": {}, \"queued\": {}",
        s.live_scopes,
        s.hibernated,
        s.woken,
        f.len()
    );
    (report, extra)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "fs".into());
    let hosts: usize = args.next().map_or(1_000_000, |a| a.parse().expect("HOSTS"));
    let limit: u32 = args.next().map_or(10_000, |a| a.parse().expect("LIMIT"));
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let (report, extra) = match case.as_str() {
        "fs" | "fs_resident" => {
            let store = FsStore::open(dir.path(), FsConfig::default()).expect("fs store");
            crawl(store, hosts, limit, case == "fs")
        }
        "sqlite" | "sqlite_resident" => {
            let path = dir.path().join("crawl.sqlite3");
            let store = SqliteStore::open(&path, SqliteOptions::default()).expect("sqlite");
            crawl(store, hosts, limit, case == "sqlite")
        }
        other => panic!("unknown case {other:?}: fs, sqlite, fs_resident, sqlite_resident"),
    };
    println!(
        "{{\"case\": \"{case}\", \"hosts\": {hosts}, \"scope_limit\": {limit}, \
         \"rss_after_visits_mib\": {:.1}, \"peak_rss_mib\": {:.1}, \"served_first\": {}, \
         \"served_early\": {}, {extra}, \"seconds\": {:.1}}}",
        report.rss_visited as f64 / 1048576.0,
        peak_rss() as f64 / 1048576.0,
        report.served,
        report.early,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report.early, 0, "a backoff was lost");
}
