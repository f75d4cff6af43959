//! Persistent stores at a million requests: push rate, pop (poll + complete) rate and
//! bytes on disk per queued request, with group commit, measured like the peer script
//! measures Scrapy's disk queues (wall time of the whole phase, fresh process).
//!
//!     cargo run --release -p workspace-benches --bin store-disk -- STORE [N] [HOSTS]
//!
//! STORE is `sqlite`, `sqlite-indexed` (with `SqliteOptions::group_index`), `fs`, or
//! `fs-pread` (with `FsConfig::mmap_reads` off). Prints one JSON object:
//! `push_ops_s`, `pop_ops_s`, `disk_bytes_per_req` (all files of the store after the
//! pushes are durable), `avg_url_len`, and `rss_queued_mib`: the process's resident
//! memory with all N requests queued (frontier, duplicate filter and store included;
//! the requests are generated in batches of 10,000, so they are not counted),
//! `rss_peak_mib`: the largest resident memory sampled over the run, and
//! `rss_anon_peak_mib`: the largest anonymous part of it (leaving out file pages the
//! store maps, which the kernel can drop at will).
//!
//! `STORE_DISK_PAUSE_MS=N` sleeps N ms between the phases (for `perf record -D`).
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::Instant;

use polite_frontier_core::{Durability, Frontier, FrontierConfig, Poll, Store};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use workspace_benches::peer_requests_range;

fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                total += disk_bytes(&e.path());
            } else if !e.file_name().to_string_lossy().ends_with(".lock") {
                total += meta.len();
            }
        }
    }
    total
}

/// A `/proc/self/status` figure of this process in MiB (Linux; 0 elsewhere).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Resident memory of this process in MiB (Linux; 0 elsewhere).
fn rss_mib() -> f64 {
    status_mib("VmRSS")
}

/// The largest resident set seen so far, and the largest anonymous part of it (what the
/// process itself allocated, as opposed to file pages it maps, which the kernel can drop
/// and which a `pread` would have kept in the page cache all the same).
#[derive(Default)]
struct Peaks {
    rss: f64,
    anon: f64,
}

impl Peaks {
    fn sample(&mut self) {
        self.rss = self.rss.max(rss_mib());
        self.anon = self.anon.max(status_mib("RssAnon"));
    }
}

struct Measured {
    rss_queued_mib: f64,
    peaks: Peaks,
    push_ops_s: f64,
    pop_ops_s: f64,
    disk_bytes_per_req: f64,
    avg_url_len: f64,
}

fn measure<S: Store>(store: S, dir: &Path, n: usize, hosts: usize) -> Measured
where
    S::Error: std::fmt::Display,
{
    let settings = Settings::default()
        .concurrent_requests(u32::MAX)
        .concurrent_requests_per_domain(0);
    let config = FrontierConfig::default().persist_scope_states(false);
    let now = Timestamp::ZERO;
    let mut f = Frontier::open(settings, config, store, now).unwrap_or_else(|e| panic!("{e}"));
    let mut push_time = 0.0;
    let mut url_bytes = 0usize;
    let mut peaks = Peaks::default();
    for start in (0..n).step_by(10_000) {
        // Building requests is excluded, as in the peer script.
        let reqs = peer_requests_range(start, (start + 10_000).min(n), hosts);
        url_bytes += reqs.iter().map(|r| r.url.len()).sum::<usize>();
        let t0 = Instant::now();
        for r in &reqs {
            f.push(r, now).unwrap_or_else(|e| panic!("{e}"));
        }
        push_time += t0.elapsed().as_secs_f64();
        peaks.sample();
    }
    let t0 = Instant::now();
    f.checkpoint().unwrap_or_else(|e| panic!("{e}"));
    push_time += t0.elapsed().as_secs_f64();
    let disk = disk_bytes(dir);
    let rss_queued_mib = rss_mib();
    if let Some(ms) = std::env::var("STORE_DISK_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // Lets `perf record -D` skip the push phase.
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let ok = Outcome::status(200);
    let t0 = Instant::now();
    let mut popped = 0;
    while let Poll::Ready(lease) = f.poll(now).unwrap_or_else(|e| panic!("{e}")) {
        f.complete(lease.id(), &ok, now)
            .unwrap_or_else(|e| panic!("{e}"));
        popped += 1;
        if popped % 65_536 == 0 {
            peaks.sample();
        }
    }
    f.checkpoint().unwrap_or_else(|e| panic!("{e}"));
    let pop_time = t0.elapsed().as_secs_f64();
    assert_eq!(popped, n, "every request popped once");
    peaks.sample();
    Measured {
        peaks,
        push_ops_s: n as f64 / push_time,
        pop_ops_s: n as f64 / pop_time,
        disk_bytes_per_req: disk as f64 / n as f64,
        rss_queued_mib,
        avg_url_len: url_bytes as f64 / n as f64,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "sqlite".into());
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let hosts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir_in(std::env::var("STORE_BENCH_DIR").unwrap_or_else(|_| ".".into()))
        .expect("a scratch directory");
    let durability = Durability::Batched {
        max_ops: 1000,
        max_delay: std::time::Duration::from_millis(100),
    };
    let m = match kind.as_str() {
        "sqlite" | "sqlite-indexed" => {
            let options = polite_store_sqlite::SqliteOptions::default()
                .durability(durability)
                .group_index(kind == "sqlite-indexed");
            let store =
                polite_store_sqlite::SqliteStore::open(dir.path().join("crawl.sqlite3"), options)
                    .expect("opening the database");
            measure(store, dir.path(), n, hosts)
        }
        "fs" | "fs-pread" => {
            let config =
                polite_store_fs::FsConfig::with_durability(durability).mmap_reads(kind == "fs");
            let store = polite_store_fs::FsStore::open(dir.path().join("crawl.fs"), config)
                .expect("opening the store directory");
            measure(store, dir.path(), n, hosts)
        }
        other => {
            eprintln!("unknown store {other:?} (sqlite, sqlite-indexed, fs, fs-pread)");
            std::process::exit(2);
        }
    };
    println!(
        "{{\"store\":\"{kind}\",\"n\":{n},\"hosts\":{hosts},\"avg_url_len\":{:.1},\"push_ops_s\":{:.0},\"pop_ops_s\":{:.0},\"disk_bytes_per_req\":{:.1},\"rss_queued_mib\":{:.0},\"rss_peak_mib\":{:.0},\"rss_anon_peak_mib\":{:.0}}}",
        m.avg_url_len,
        m.push_ops_s,
        m.pop_ops_s,
        m.disk_bytes_per_req,
        m.rss_queued_mib,
        m.peaks.rss,
        m.peaks.anon
    );
}
