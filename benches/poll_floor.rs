//! The floor under a poll + complete at many hosts on this machine: a skeleton that does
//! only what any frontier serving hosts round-robin must do, and nothing else.
//!
//!     poll-floor [N] [HOSTS] [RUNS]
//!
//! The peers' workload (their URL shapes and priorities, N requests over HOSTS hosts) is
//! queued in per-host FIFO queues, one per priority, in 64-byte slots holding the URL
//! without its host (as the frontier's volatile store keeps them). Each poll takes the
//! next host of the best priority round-robin, checks and records a bare delay and
//! concurrency gate kept inline in the host's record, takes the host's head request,
//! rebuilds its URL as an owned `Box<str>` (a lease must own its request), and records a
//! lease in a slab; each completion frees the slab slot, the gate's slot and the URL. It
//! prefetches the host records, their queues and head slots several polls ahead, as the
//! frontier's scheduler does.
//!
//! What it leaves out is everything the frontier must also do (docs/behaviour.md sections 3 and 4):
//! lazy backoff recovery, rampup and quota windows, scope states shared by several groups
//! and kept in a bounded LRU, multi-scope admission, ranking by load and quota amount,
//! start-request and LIFO order, parked groups and timers, lease ids that are sequence
//! numbers, the store interface, decoding a record's flags, callback and depth, stats.
//! So the frontier cannot be faster than this; the ratio of Scrapy's `pop` to this figure
//! bounds what any such frontier can show against it on this machine.
//!
//! Prints one JSON line: `ns_per_op` and `ops_s` are the median of RUNS (default 5)
//! drains, each of a freshly filled queue; `ns_runs` lists every run.
#![allow(clippy::print_stdout)]

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Instant;

use polite_throttle_core::hooks::prefetch;
use workspace_benches::{peer_priority, peer_url};

/// Priorities of the peers' workload: -5..=5, best (5) first.
const PRIORITIES: usize = 11;
/// How many polls ahead the host record, then its queue and host name, then its head
/// slot are prefetched (the best distances found on this machine).
const RECORD_AHEAD: usize = 12;
const QUEUE_AHEAD: usize = 8;
const SLOT_AHEAD: usize = 4;
/// URL bytes after the host that fit a slot.
const SLOT_BYTES: usize = 55;

/// A queued request: its sequence number and its URL without `https://` and the host.
struct Slot {
    seq: u64,
    len: u8,
    rest: [u8; SLOT_BYTES],
}

/// A host: its name, a delay and concurrency gate, and its queues by priority.
struct Host {
    name: Box<str>,
    next_send: u64,
    delay: u64,
    active: u32,
    limit: u32,
    queues: Vec<VecDeque<Slot>>,
}

impl Host {
    fn best(&self) -> Option<usize> {
        self.queues.iter().position(|q| !q.is_empty())
    }
}

struct Lease {
    host: u32,
    seq: u64,
    url: Box<str>,
}

fn fill(n: usize, hosts: usize) -> (Vec<Host>, Vec<VecDeque<u32>>) {
    let mut all: Vec<Host> = (0..hosts)
        .map(|h| Host {
            name: format!("host{h}.example{}.com", h % 100).into(),
            next_send: 0,
            delay: 0,
            active: 0,
            limit: u32::MAX,
            queues: (0..PRIORITIES).map(|_| VecDeque::new()).collect(),
        })
        .collect();
    for i in 0..n {
        let url = peer_url(i, hosts);
        let host = &mut all[i % hosts];
        let rest = &url.as_bytes()["https://".len() + host.name.len()..];
        assert!(rest.len() <= SLOT_BYTES, "a URL longer than a slot: {url}");
        let mut slot = Slot {
            seq: i as u64,
            len: rest.len() as u8,
            rest: [0; SLOT_BYTES],
        };
        slot.rest[..rest.len()].copy_from_slice(rest);
        host.queues[(5 - peer_priority(i)) as usize].push_back(slot);
    }
    // Round-robin queues of hosts by the priority of their best request.
    let mut tiers: Vec<VecDeque<u32>> = (0..PRIORITIES).map(|_| VecDeque::new()).collect();
    for (h, host) in all.iter().enumerate() {
        if let Some(p) = host.best() {
            tiers[p].push_back(h as u32);
        }
    }
    (all, tiers)
}

/// Polls and completes until every request went out; returns the polls and seconds.
#[inline(never)]
fn drain(hosts: &mut [Host], tiers: &mut [VecDeque<u32>]) -> (usize, f64) {
    let mut slab: Vec<Option<Lease>> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    let now = 0u64;
    let (mut polls, mut url_bytes) = (0usize, 0usize);
    let t0 = Instant::now();
    while let Some(p) = tiers.iter().position(|t| !t.is_empty()) {
        let tier = &mut tiers[p];
        let h = tier.pop_front().expect("a non-empty tier");
        if let Some(&a) = tier.get(RECORD_AHEAD) {
            prefetch(&hosts[a as usize]);
        }
        if let Some(&a) = tier.get(QUEUE_AHEAD) {
            let host = &hosts[a as usize];
            prefetch(&host.queues[p]);
            if let Some(b) = host.name.as_bytes().first() {
                prefetch(b);
            }
        }
        if let Some(s) = tier
            .get(SLOT_AHEAD)
            .and_then(|&a| hosts[a as usize].queues[p].front())
        {
            prefetch(s);
        }
        let host = &mut hosts[h as usize];
        // No delay and no limit, as in the frontier's benchmark: the gate always opens.
        assert!(
            host.next_send <= now && host.active < host.limit,
            "the gate opens"
        );
        host.active += 1;
        host.next_send = now + host.delay;
        let slot = host.queues[p]
            .pop_front()
            .expect("a host in a tier has requests");
        if let Some(next) = host.best() {
            tiers[next].push_back(h);
        }
        let rest = core::str::from_utf8(&slot.rest[..usize::from(slot.len)]).expect("ASCII");
        let mut url = String::with_capacity("https://".len() + host.name.len() + rest.len());
        url.push_str("https://");
        url.push_str(&host.name);
        url.push_str(rest);
        let lease = Lease {
            host: h,
            seq: slot.seq,
            url: url.into_boxed_str(),
        };
        let id = match free.pop() {
            Some(id) => {
                slab[id as usize] = Some(lease);
                id
            }
            None => {
                slab.push(Some(lease));
                (slab.len() - 1) as u32
            }
        };
        // The caller reads the URL, then completes the lease.
        url_bytes += slab[id as usize].as_ref().map_or(0, |l| l.url.len());
        let done = slab[id as usize].take().expect("a lease just made");
        free.push(id);
        hosts[done.host as usize].active -= 1;
        black_box(done.seq);
        drop(done);
        polls += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    black_box(url_bytes);
    (polls, secs)
}

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (n, hosts, runs) = (arg(1, 1_000_000), arg(2, 10_000), arg(3, 5).max(1));
    let mut ns: Vec<f64> = (0..runs)
        .map(|_| {
            let (mut all, mut tiers) = fill(n, hosts);
            let (polls, secs) = drain(&mut all, &mut tiers);
            assert_eq!(polls, n, "every request polled once");
            secs * 1e9 / n as f64
        })
        .collect();
    let runs_json: Vec<String> = ns.iter().map(|x| format!("{x:.1}")).collect();
    ns.sort_by(f64::total_cmp);
    let median = ns[ns.len() / 2];
    println!(
        "{{\"case\": \"poll_floor\", \"n\": {n}, \"d\": {hosts}, \"ns_per_op\": {median:.1}, \"ops_s\": {:.0}, \"ns_runs\": [{}]}}",
        1e9 / median,
        runs_json.join(", ")
    );
}
