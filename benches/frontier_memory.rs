//! Bytes of memory per queued request: a million requests (the peers' ~70-byte URLs over
//! 10,000 hosts) pushed into a frontier, measured two ways:
//!
//! - `heap`: bytes the frontier asked the allocator for (a counting global allocator),
//! - `rss`: growth of the process's resident set, as the peer script measures Scrapy,
//!   so allocator overhead and fragmentation count too.
//!
//! ```text
//! cargo run --release -p workspace-benches --bin frontier-memory CASE [N] [HOSTS]
//! ```
//!
//! CASE is `exact_dupefilter` or `no_dupefilter`. Run each case in a fresh process (the
//! RSS of a process only grows). Prints one JSON object.
#![allow(clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use polite_frontier_core::{DupeFilterConfig, Frontier, FrontierConfig, Request, VolatileStore};
use polite_throttle_core::{Settings, Timestamp};
use workspace_benches::peer_requests_range;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only counts bytes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "exact_dupefilter".into());
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let hosts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dupefilter = match case.as_str() {
        "exact_dupefilter" => DupeFilterConfig::Exact,
        "no_dupefilter" => DupeFilterConfig::Disabled,
        other => {
            eprintln!("unknown case {other:?}: exact_dupefilter or no_dupefilter");
            std::process::exit(2);
        }
    };
    let settings = Settings::default().concurrent_requests_per_domain(0);
    let config = FrontierConfig::default().dupefilter(dupefilter);
    let heap0 = LIVE.load(Ordering::Relaxed);
    let rss0 = rss_bytes();
    let mut f: Frontier<VolatileStore> =
        Frontier::open(settings, config, VolatileStore::new(), Timestamp::ZERO).unwrap();
    // Requests are built in batches and dropped, like the peers' scheduler cases.
    let mut url_bytes = 0usize;
    for start in (0..n).step_by(10_000) {
        let reqs: Vec<Request> = peer_requests_range(start, (start + 10_000).min(n), hosts);
        for r in &reqs {
            url_bytes += r.url.len();
            f.push(r, Timestamp::ZERO).unwrap();
        }
    }
    assert_eq!(f.len(), n);
    let heap = (LIVE.load(Ordering::Relaxed) - heap0) as f64 / n as f64;
    let rss = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
    println!(
        "{{\"case\":\"{case}\",\"n\":{n},\"hosts\":{hosts},\"avg_url_len\":{:.1},\"heap_bytes_per_req\":{heap:.1},\"rss_bytes_per_req\":{rss:.1},\"dupefilter_bytes_per_req\":{:.1}}}",
        url_bytes as f64 / n as f64,
        f.dupefilter().memory_bytes() as f64 / n as f64
    );
}
