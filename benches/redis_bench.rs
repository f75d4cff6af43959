//! The Redis frontier next to scrapy-redis, on the peers' workload (their URL shapes and
//! priorities): Redis memory per queued request, push and pop rates, duplicate-filter
//! bytes per fingerprint. Measured like `shared/peers/bench_scrapy_redis.py` measures
//! scrapy-redis: `INFO memory` `used_memory` before and after the pushes (delta / N;
//! "after" once the pushing connection is closed: its input buffer, up to a pipeline of
//! 10,000 requests, is not queue data; both readings after `CONFIG RESETSTAT`, which
//! frees the latency histogram Redis allocates for each command on its first use, ~30 KB
//! per kind of command the script calls), wall time of each phase, request building
//! excluded.
//!
//!     cargo run --release -p workspace-benches --bin redis-bench -- [N] [HOSTS]
//!
//! Starts its own `redis-server` (no persistence) unless `REDIS_URL` is set. Prints one
//! JSON object per case:
//! - `push_no_dupefilter`: the queue alone (as scrapy-redis's PriorityQueue):
//!   `push_ops_s` (pipelined batches of 1,000 through one script call each) and
//!   `redis_bytes_per_req`; then `layout`: `MEMORY USAGE` per kind of key, per queued
//!   request and per host (where the bytes go): `Q` the queue buckets (sorted sets shared
//!   by 16 groups), `q` a group's own queue (one that outgrew its bucket), `N` the name
//!   records (hash buckets: each host's group and scope record), `C` / `C|` the
//!   candidates' index and leaves, `E` / `E|` events (timers, delayed requests), `c`,
//!   `cfg`, `np`, `cbn`, `cbi` the crawl's counters, settings, parameters and callbacks;
//! - `push`: the same with the duplicate filter: `push_ops_s`, `redis_bytes_per_req`
//!   (queue and fingerprints), `redis_key_usage_bytes_per_req` (MEMORY USAGE of the
//!   queue's keys), `avg_url_len`, `avg_payload_len`;
//! - `pop`: `pop_ops_s`: `poll` until empty, one script call per request (each leases a
//!   request: throttle checks and reservations on its scope, a lease record with its
//!   expiry), and `pop_batch_ops_s` with `poll_batch(64)`; `poll_complete_ops_s`: `poll`
//!   then `complete` (two calls per request);
//! - `pop_workers`, `pop_batch_workers`: 4 threads, one connection each, popping the same
//!   crawl until it is empty, one lease per call or `poll_batch(64)`: Redis runs one
//!   script at a time, so with the round trips overlapped this is the server's own cost
//!   per lease;
//! - `server_us_per_req`, `server_us_per_call`, `server_us_per_lease`: the server's time in
//!   script calls for the phase (`INFO commandstats`), without round trips or the client;
//! - `dupefilter`: `redis_bytes_per_fp` (binary 64-bit fingerprints in a set) and
//!   `dup_seen_ops_s` (pushes of already-seen URLs, pipelined);
//! - `dupefilter_bloom`: the Bloom filter sized for N at 1%: `redis_bytes_per_fp`,
//!   `false_positives` among the N distinct URLs;
//! - every phase also prints what the server did in it (`INFO commandstats`):
//!   `redis_cmds` (commands the scripts ran), `redis_cmds_per_req`, `lua_us` (server
//!   microseconds in Lua itself: the script calls' time without their commands'),
//!   `lua_us_per_req`, `cmd_us_per_req` and `cmd_mix` (commands per request, by name);
//! - `lease_floor`: the bare commands of one single-lease poll (the same commands on the
//!   same kinds of keys, with no scheduling or throttling logic) in one function call:
//!   `cmds_per_call`, `server_us_per_call`, `ops_s` one call after the other; and an
//!   empty function (`empty_server_us_per_call`, `empty_ops_s`): the floor under `pop`;
//!   and the bare commands of a `poll_batch(64)` (`batch_cmds_per_lease`,
//!   `batch_server_us_per_lease`, `batch_ops_s` in leases per second): the floor under
//!   `pop_batch` for this layout of the crawl's keys.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use polite_frontier_core::{DupeFilterConfig, Poll, PushOutcome, Request};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{RedisConfig, RedisFrontier};
use polite_throttle_core::{Outcome, Timestamp};
use workspace_benches::{peer_requests_range, redis_config, redis_settings};

fn used_memory(c: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

/// What the server did in one phase (`INFO commandstats`, then `CONFIG RESETSTAT`): the
/// time in script calls (`FCALL`, `EVALSHA`) and how many, and the commands those
/// scripts ran (each counted in its own `cmdstat_*` line), by name, with their time. The
/// server's own cost, without the round trips.
#[derive(Default)]
struct Server {
    /// Microseconds in script calls, the commands they ran included.
    script_us: f64,
    /// Script calls.
    calls: f64,
    /// Commands run by the scripts (and the few the client sends itself: `SET NX` of a
    /// Bloom filter, a worker's `FUNCTION LOAD`...), by name.
    cmds: std::collections::BTreeMap<String, f64>,
    /// Microseconds in those commands.
    cmd_us: f64,
}

impl Server {
    fn read(c: &mut redis::Connection) -> Server {
        let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
        let mut s = Server::default();
        for line in info.lines() {
            let Some((name, stats)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let (mut usec, mut calls) = (0.0, 0.0);
            for kv in stats.split(',') {
                if let Some(v) = kv.strip_prefix("usec=") {
                    usec = v.trim().parse::<f64>().unwrap();
                } else if let Some(v) = kv.strip_prefix("calls=") {
                    calls = v.trim().parse::<f64>().unwrap();
                }
            }
            match name {
                "fcall" | "fcall_ro" | "evalsha" | "eval" => {
                    s.script_us += usec;
                    s.calls += calls;
                }
                // The bench's own reads and the connections' handshakes.
                "info" | "config|resetstat" | "ping" | "hello" | "client|setinfo" | "select" => {}
                _ => {
                    s.cmd_us += usec;
                    *s.cmds.entry(name.to_string()).or_default() += calls;
                }
            }
        }
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
        s
    }

    /// Commands run in the phase.
    fn commands(&self) -> f64 {
        self.cmds.values().sum()
    }

    /// Microseconds of the script calls spent in Lua itself (the calls' time without the
    /// commands they ran).
    fn lua_us(&self) -> f64 {
        (self.script_us - self.cmd_us).max(0.0)
    }

    /// The JSON fields every phase prints, per `per` units of work (requests or leases):
    /// `redis_cmds` (commands run in the phase), `redis_cmds_per_req`, `lua_us` (server
    /// microseconds in Lua in the phase), `lua_us_per_req`, `cmd_us_per_req` (in the
    /// commands) and `cmd_mix` (commands per unit, by name).
    fn json(&self, per: f64) -> String {
        let per = per.max(1.0);
        let mix: Vec<String> = self
            .cmds
            .iter()
            .filter(|(_, n)| **n / per >= 0.005)
            .map(|(k, n)| format!("\"{k}\": {:.2}", n / per))
            .collect();
        format!(
            "\"redis_cmds\": {:.0}, \"redis_cmds_per_req\": {:.2}, \"lua_us\": {:.0}, \"lua_us_per_req\": {:.1}, \"cmd_us_per_req\": {:.1}, \"cmd_mix\": {{{}}}",
            self.commands(),
            self.commands() / per,
            self.lua_us(),
            self.lua_us() / per,
            self.cmd_us / per,
            mix.join(", ")
        )
    }
}

/// Starts a phase: forgets the server's command statistics (see [`Server`]).
fn reset_stats(c: &mut redis::Connection) {
    Server::read(c);
}

fn key_usage(c: &mut redis::Connection, pattern: &str) -> i64 {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg(pattern).query(c).unwrap();
    keys.iter()
        .map(|k| {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(k.as_slice())
                .arg("SAMPLES")
                .arg(0)
                .query::<Option<i64>>(c)
                .unwrap()
                .unwrap_or(0)
        })
        .sum()
}

/// Prints where a crawl's Redis memory goes: `MEMORY USAGE` summed per kind of key (the
/// part of the name after the hash tag, up to a `:` or the `|` of a chunked set's leaf:
/// `C` is the candidates' index, `C|` their leaves), per queued request and per host.
fn layout(c: &mut redis::Connection, crawl: &str, n: usize, hosts: usize) {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{{{crawl}}}:*"))
        .query(c)
        .unwrap();
    let mut kinds: std::collections::BTreeMap<String, (usize, i64)> = Default::default();
    let tag = format!("{{{crawl}}}:");
    for k in &keys {
        let rest = k.strip_prefix(tag.as_bytes()).unwrap_or(k);
        let cut = rest
            .iter()
            .position(|&b| b == b':' || b == b'|')
            .unwrap_or(rest.len());
        let mut kind = String::from_utf8_lossy(&rest[..cut]).into_owned();
        if rest.get(cut) == Some(&b'|') {
            kind.push('|');
        }
        let usage = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k.as_slice())
            .arg("SAMPLES")
            .arg(0)
            .query::<Option<i64>>(c)
            .unwrap()
            .unwrap_or(0);
        let e = kinds.entry(kind).or_default();
        e.0 += 1;
        e.1 += usage;
    }
    let cells: Vec<String> = kinds
        .iter()
        .map(|(kind, (count, bytes))| {
            format!(
                "\"{kind}\": {{\"keys\": {count}, \"bytes_per_req\": {:.1}, \"bytes_per_host\": {:.1}}}",
                *bytes as f64 / n as f64,
                *bytes as f64 / hosts as f64
            )
        })
        .collect();
    println!(
        "{{\"case\": \"layout\", \"n\": {n}, \"d\": {hosts}, {}}}",
        cells.join(", ")
    );
}

/// An empty server, then crawl `crawl` with every request of `reqs` queued (untimed).
fn refilled(
    c: &mut redis::Connection,
    url: &str,
    crawl: &str,
    reqs: &[Request],
    now: Timestamp,
) -> RedisFrontier {
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    let mut f = RedisFrontier::open(url, crawl, redis_settings(), RedisConfig::default()).unwrap();
    for chunk in reqs.chunks(10_000) {
        f.push_all(chunk, now).unwrap();
    }
    f
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let hosts: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let _server;
    let url = match std::env::var("REDIS_URL") {
        Ok(u) => u,
        Err(_) => {
            _server = RedisServer::start("redis-bench")
                .unwrap_or_else(|e| panic!("{e}"))
                .expect("redis-server is needed (apt-get install -y redis-server)");
            _server.url()
        }
    };
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let now = Timestamp::ZERO;

    // ------------------------------------------- push, queue only (no dupefilter)
    let reqs = peer_requests_range(0, n, hosts);
    let url_len = reqs.iter().map(|r| r.url.len()).sum::<usize>() as f64 / n as f64;
    {
        let config = redis_config(DupeFilterConfig::Disabled);
        let mut f = RedisFrontier::open(&url, "queue", redis_settings(), config).unwrap();
        // Both memory readings follow a CONFIG RESETSTAT (in reset_stats): it frees the
        // latency histograms Redis allocates per command on its first use (~30 KB each,
        // for every command the script calls), which are not queue data.
        reset_stats(&mut c);
        let mem0 = used_memory(&mut c);
        let t0 = Instant::now();
        for chunk in reqs.chunks(10_000) {
            f.push_all(chunk, now).unwrap();
        }
        let push_s = t0.elapsed().as_secs_f64();
        // The pushing connection's input buffer (up to a pipeline of 10 calls of 1,000
        // requests) is not queue data either: it goes with the connection.
        drop(f);
        let srv = Server::read(&mut c);
        let mem1 = used_memory(&mut c);
        println!(
            "{{\"case\": \"push_no_dupefilter\", \"n\": {n}, \"d\": {hosts}, \"push_ops_s\": {:.1}, \"server_us_per_req\": {:.1}, \"redis_bytes_per_req\": {:.1}, \"avg_url_len\": {url_len:.1}, {}}}",
            n as f64 / push_s,
            srv.script_us / n as f64,
            (mem1 - mem0) as f64 / n as f64,
            srv.json(n as f64),
        );
        layout(&mut c, "queue", n, hosts);
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    }

    // ------------------------------------------------ push with the dupefilter
    let mut f =
        RedisFrontier::open(&url, "bench", redis_settings(), RedisConfig::default()).unwrap();
    // Warm the script cache and the callback table (not counted).
    reset_stats(&mut c);
    let mem0 = used_memory(&mut c);
    let t0 = Instant::now();
    for chunk in reqs.chunks(10_000) {
        let out = f.push_all(chunk, now).unwrap();
        assert!(out.iter().all(|o| matches!(o, PushOutcome::Queued(_))));
    }
    let push_s = t0.elapsed().as_secs_f64();
    // As above: measured without the pushing connection's input buffer (a new handle on
    // the same crawl goes on with the pops).
    drop(f);
    let srv = Server::read(&mut c);
    let mem1 = used_memory(&mut c);
    let mut f =
        RedisFrontier::open(&url, "bench", redis_settings(), RedisConfig::default()).unwrap();
    // The queue's keys: queue buckets and own queues, name records, candidates.
    let queue_usage = key_usage(&mut c, "{bench}:Q:*")
        + key_usage(&mut c, "{bench}:q:*")
        + key_usage(&mut c, "{bench}:N:*")
        + key_usage(&mut c, "{bench}:C*");
    let fp_usage = key_usage(&mut c, "{bench}:df");
    // Payload bytes of the queued members (a sample of buckets): each member is the
    // order value (1 byte, 6 outside priorities -31..32), the sequence key (a length
    // byte, or 255 - length for LIFO order, then that many bytes), the flags byte, then
    // the payload.
    let (payload, sampled) = {
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("{bench}:Q:*").query(&mut c).unwrap();
        let mut total = 0i64;
        let mut count = 0i64;
        for k in keys.iter().take(200) {
            let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                .arg(k.as_slice())
                .arg(0)
                .arg(-1)
                .query(&mut c)
                .unwrap();
            for m in &members {
                let order = if m[0] == 0 || m[0] == 255 { 6 } else { 1 };
                let lead = m[order];
                let seq = 1 + if lead <= 6 { lead } else { 255 - lead } as usize;
                total += (m.len() - order - seq - 1) as i64;
                count += 1;
            }
        }
        (total, count)
    };
    println!(
        "{{\"case\": \"push\", \"n\": {n}, \"d\": {hosts}, \"push_ops_s\": {:.1}, \"server_us_per_req\": {:.1}, \"redis_bytes_per_req\": {:.1}, \"redis_key_usage_bytes_per_req\": {:.1}, \"avg_url_len\": {url_len:.1}, \"avg_payload_len\": {:.1}, {}}}",
        n as f64 / push_s,
        srv.script_us / n as f64,
        (mem1 - mem0) as f64 / n as f64,
        queue_usage as f64 / n as f64,
        payload as f64 / sampled.max(1) as f64,
        srv.json(n as f64),
    );
    println!(
        "{{\"case\": \"dupefilter\", \"n\": {n}, \"redis_bytes_per_fp\": {:.1}}}",
        fp_usage as f64 / n as f64
    );

    // ------------------------------------------------- Bloom filter at 1%
    {
        let config = redis_config(DupeFilterConfig::Bloom {
            capacity: n as u64,
            false_positive_rate: 0.01,
        });
        let mut b = RedisFrontier::open(&url, "bloom", redis_settings(), config).unwrap();
        reset_stats(&mut c);
        let t0 = Instant::now();
        let mut dropped = 0;
        for chunk in reqs.chunks(10_000) {
            let out = b.push_all(chunk, now).unwrap();
            dropped += out.iter().filter(|o| **o == PushOutcome::Duplicate).count();
        }
        let bloom_s = t0.elapsed().as_secs_f64();
        let srv = Server::read(&mut c);
        let bytes = key_usage(&mut c, "{bloom}:bf:*");
        println!(
            "{{\"case\": \"dupefilter_bloom\", \"n\": {n}, \"redis_bytes_per_fp\": {:.2}, \"false_positives\": {dropped}, \"push_ops_s\": {:.1}, \"server_us_per_req\": {:.1}, {}}}",
            bytes as f64 / n as f64,
            n as f64 / bloom_s,
            srv.script_us / n as f64,
            srv.json(n as f64),
        );
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("{bloom}:*").query(&mut c).unwrap();
        let _: () = redis::cmd("DEL").arg(keys).query(&mut c).unwrap();
    }

    // ----------------------------------------------------------- duplicates
    let dups = &reqs[..n.min(50_000)];
    reset_stats(&mut c);
    let t0 = Instant::now();
    let out = f.push_all(dups, now).unwrap();
    let dup_s = t0.elapsed().as_secs_f64();
    let srv = Server::read(&mut c);
    assert!(out.iter().all(|o| *o == PushOutcome::Duplicate));
    println!(
        "{{\"case\": \"dupefilter_seen\", \"n\": {}, \"dup_seen_ops_s\": {:.1}, \"server_us_per_req\": {:.1}, {}}}",
        dups.len(),
        dups.len() as f64 / dup_s,
        srv.script_us / dups.len() as f64,
        srv.json(dups.len() as f64),
    );

    // ----------------------------------------------------------------- pop
    reset_stats(&mut c);
    let t0 = Instant::now();
    let mut popped = 0usize;
    let mut last_priority = i32::MAX;
    let mut order_errors = 0;
    while let Poll::Ready(lease) = f.poll(now).unwrap() {
        if lease.request.priority > last_priority {
            order_errors += 1;
        }
        last_priority = lease.request.priority;
        popped += 1;
    }
    let pop_s = t0.elapsed().as_secs_f64();
    let srv = Server::read(&mut c);
    assert_eq!(popped, n);
    println!(
        "{{\"case\": \"pop\", \"n\": {n}, \"pop_ops_s\": {:.1}, \"server_us_per_call\": {:.1}, \"order_errors\": {order_errors}, {}}}",
        n as f64 / pop_s,
        srv.script_us / srv.calls.max(1.0),
        srv.json(n as f64),
    );

    // --------------------------------------------------------- batched pop
    let mut f = refilled(&mut c, &url, "bench3", &reqs, now);
    reset_stats(&mut c);
    let t0 = Instant::now();
    let mut popped = 0usize;
    loop {
        let batch = f.poll_batch(now, BATCH).unwrap();
        if batch.is_empty() {
            break;
        }
        popped += batch.len();
    }
    let popb_s = t0.elapsed().as_secs_f64();
    let srv = Server::read(&mut c);
    assert_eq!(popped, n);
    println!(
        "{{\"case\": \"pop_batch\", \"n\": {n}, \"batch\": {BATCH}, \"pop_batch_ops_s\": {:.1}, \"server_us_per_lease\": {:.1}, {}}}",
        n as f64 / popb_s,
        srv.script_us / n as f64,
        srv.json(n as f64),
    );

    // ------------------------------------------------------ poll + complete
    let mut f = refilled(&mut c, &url, "bench2", &reqs, now);
    let ok = Outcome::status(200);
    reset_stats(&mut c);
    let t0 = Instant::now();
    let mut done = 0usize;
    while let Poll::Ready(lease) = f.poll(now).unwrap() {
        f.complete(lease.id(), &ok, now).unwrap();
        done += 1;
    }
    let pc_s = t0.elapsed().as_secs_f64();
    let srv = Server::read(&mut c);
    assert_eq!(done, n);
    println!(
        "{{\"case\": \"poll_complete\", \"n\": {n}, \"poll_complete_ops_s\": {:.1}, \"server_us_per_req\": {:.1}, {}}}",
        n as f64 / pc_s,
        srv.script_us / n as f64,
        srv.json(n as f64),
    );

    // ------------------------------------------ several workers popping at once
    // Each worker has its own connection; Redis runs one script at a time, so this
    // measures the server's cost per lease once round trips overlap.
    for (batch, label) in [(1usize, "pop_workers"), (BATCH, "pop_batch_workers")] {
        let f = refilled(&mut c, &url, "bench4", &reqs, now);
        drop(f);
        reset_stats(&mut c);
        let t0 = Instant::now();
        let popped: usize = std::thread::scope(|s| {
            let workers: Vec<_> = (0..WORKERS)
                .map(|_| {
                    let url = url.as_str();
                    s.spawn(move || {
                        let mut w = RedisFrontier::open(
                            url,
                            "bench4",
                            redis_settings(),
                            RedisConfig::default(),
                        )
                        .unwrap();
                        let mut got = 0usize;
                        loop {
                            let leases = w.poll_batch(now, batch).unwrap();
                            if leases.is_empty() {
                                return got;
                            }
                            got += leases.len();
                        }
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        let s = t0.elapsed().as_secs_f64();
        // Includes each worker's opening call (4 of them).
        let srv = Server::read(&mut c);
        assert_eq!(popped, n);
        println!(
            "{{\"case\": \"{label}\", \"n\": {n}, \"workers\": {WORKERS}, \"batch\": {batch}, \"pop_ops_s\": {:.1}, \"server_us_per_lease\": {:.1}, {}}}",
            n as f64 / s,
            srv.script_us / n as f64,
            srv.json(n as f64),
        );
    }
    lease_floor(&mut c, &url, &reqs, now);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
}

/// The commands of one single-lease `poll` as the script runs them (in order, on the
/// crawl's own keys: its settings, counters, lease expiries, idle states, events, the
/// candidates' index and first leaf, a host's record, scope state and queue bucket, the
/// lease record and its expiry, the write-backs), with none of the script's logic:
/// what a lease would cost if the scheduler and throttler were free. Writes put back
/// what they read (the popped candidate goes back, the queue's `ZREM` misses), so every
/// call does the same work.
const FLOOR_LIBRARY: &str = r#"#!lua name=bench_floor
redis.register_function('bench_floor_empty', function(keys, args) return 1 end)
-- What a poll reads before its first lease: settings, counters, the earliest lease
-- expiry, idle state and event, and the candidates' first leaf. Returns the counters
-- and the leaf's key.
local function poll_start(P)
  local call = redis.call
  call('HMGET', P .. 'cfg', 'layout', 'epoch_s', 'digest')
  local c = call('GET', P .. 'c')
  call('ZRANGE', P .. 'lx', '0', '0', 'WITHSCORES')
  call('ZRANGE', P .. 'ti', '0', '0', 'WITHSCORES')
  call('ZRANGE', P .. 'E', '0', '0')
  local sep = call('ZRANGE', P .. 'C', '0', '0')[1]
  return c, P .. 'C|' .. sep
end
-- What a poll runs for each lease: the best candidate taken from its leaf (and put
-- back: every call does the same work), the host's record and scope state, its queue
-- bucket's head (the ZREM misses), the record's place in the name buckets. Returns the
-- record and the state.
local function lease_reads(P, leaf, host, nb, q, slot)
  local call = redis.call
  local m = call('ZPOPMIN', leaf)[1]
  local rec = call('HGET', nb, host)
  local st = call('HGET', P .. 't', host)
  call('ZRANGE', q, slot, slot, 'BYSCORE', 'LIMIT', '0', '2')
  call('ZREM', q, 'not a member')
  call('ZREVRANGEBYLEX', P .. 'C', '[' .. m, '-', 'LIMIT', '0', '1')
  call('ZADD', leaf, '0', m)
  return rec, st
end
redis.register_function('bench_floor_lease', function(keys, a)
  local P = keys[1]
  local host, nb, q, slot = a[1], a[2], a[3], a[4]
  local call = redis.call
  local c, leaf = poll_start(P)
  local rec, st = lease_reads(P, leaf, host, nb, q, slot)
  call('ZCARD', leaf)
  call('ZCARD', leaf)
  call('HSET', P .. 'floor:L', '1', rec)
  call('ZADD', P .. 'floor:lx', '1', '1')
  call('HSET', P .. 't', host, st)
  call('HSET', nb, host, rec)
  call('SET', P .. 'c', c)
  call('HLEN', P .. 'L')
  return 1
end)
-- The commands of a `poll_batch` of `n` leases, with none of the logic: per lease those
-- the script runs for each lease of a batch (a candidate popped from its leaf and one put
-- back, the host's record and scope state, its queue bucket's head, the record lookup in
-- the name buckets, the state written back), per batch the rest (settings, counters,
-- expiries, events, the candidates' index, the lease records and expiries in one HSET
-- and one ZADD). Every lease uses the same host, so its keys stay hot: a floor that
-- errs low.
redis.register_function('bench_floor_batch', function(keys, a)
  local P = keys[1]
  local host, nb, q, slot, n = a[1], a[2], a[3], a[4], tonumber(a[5])
  local call = redis.call
  local c, leaf = poll_start(P)
  local lrec, lexp = {}, {}
  for i = 1, n do
    local rec, st = lease_reads(P, leaf, host, nb, q, slot)
    call('HSET', P .. 't', host, st)
    lrec[#lrec + 1] = tostring(i)
    lrec[#lrec + 1] = rec
    lexp[#lexp + 1] = '1'
    lexp[#lexp + 1] = tostring(i)
  end
  call('HSET', P .. 'floor:L', unpack(lrec))
  call('ZADD', P .. 'floor:lx', unpack(lexp))
  call('SET', P .. 'c', c)
  call('HLEN', P .. 'L')
  return 1
end)
"#;

/// `lease_floor`: [`FLOOR_LIBRARY`]'s bare commands of one lease (`cmds_per_call`,
/// `server_us_per_call`, `cmd_us_per_call`: in the commands, `lua_us_per_call`, and
/// `ops_s`: calls one after the other from here), and an `FCALL` of an empty function
/// (`empty_server_us_per_call`, `empty_ops_s`: the round trip), next to the `pop` case's
/// figures: the floor under a single-lease poll.
fn lease_floor(c: &mut redis::Connection, url: &str, reqs: &[Request], now: Timestamp) {
    const CALLS: usize = 5000;
    let mut f = refilled(c, url, "floor", reqs, now);
    // One lease first, so that its host has a scope state; its group is a candidate
    // again (with its next request), listed as "tier, last served, number, key".
    let Poll::Ready(lease) = f.poll(now).unwrap() else {
        panic!("nothing to lease")
    };
    let mut host = String::new();
    polite_frontier_core::group_key(&lease.request, &mut host).expect("a host");
    let leaves: Vec<Vec<u8>> = redis::cmd("KEYS").arg("{floor}:C|*").query(c).unwrap();
    let gid = leaves
        .iter()
        .flat_map(|leaf| {
            redis::cmd("ZRANGE")
                .arg(leaf.as_slice())
                .arg(0)
                .arg(-1)
                .query::<Vec<Vec<u8>>>(c)
                .unwrap()
        })
        .find_map(|m| {
            let key = m.strip_suffix(host.as_bytes())?;
            let at = key.len().checked_sub(4)?;
            Some(u32::from_be_bytes(key[at..].try_into().ok()?))
        })
        .expect("the leased host is a candidate again");
    let buckets: Vec<String> = redis::cmd("KEYS").arg("{floor}:N:*").query(c).unwrap();
    let bucket = buckets
        .into_iter()
        .find(|b| {
            redis::cmd("HEXISTS")
                .arg(b)
                .arg(&host)
                .query::<bool>(c)
                .unwrap()
        })
        .expect("the host has a record");
    let _: redis::Value = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(FLOOR_LIBRARY)
        .query(c)
        .unwrap();
    let q = format!("{{floor}}:Q:{}", gid / 16);
    let slot = (gid % 16).to_string();
    let mut run = |function: &str, calls: usize, batch: usize| {
        reset_stats(c);
        let t0 = Instant::now();
        for _ in 0..calls {
            let _: redis::Value = redis::cmd("FCALL")
                .arg(function)
                .arg(1)
                .arg("{floor}:")
                .arg(&host)
                .arg(&bucket)
                .arg(&q)
                .arg(&slot)
                .arg(batch)
                .query(c)
                .unwrap();
        }
        let s = t0.elapsed().as_secs_f64();
        (Server::read(c), calls as f64 / s)
    };
    let (floor, floor_rate) = run("bench_floor_lease", CALLS, 1);
    let (empty, empty_rate) = run("bench_floor_empty", CALLS, 1);
    let (batch, batch_rate) = run("bench_floor_batch", CALLS / BATCH, BATCH);
    let calls = CALLS as f64;
    let leases = ((CALLS / BATCH) * BATCH) as f64;
    println!(
        "{{\"case\": \"lease_floor\", \"calls\": {CALLS}, \"cmds_per_call\": {:.1}, \"server_us_per_call\": {:.1}, \"cmd_us_per_call\": {:.1}, \"lua_us_per_call\": {:.1}, \"ops_s\": {floor_rate:.1}, \"empty_server_us_per_call\": {:.1}, \"empty_ops_s\": {empty_rate:.1}, \"batch\": {BATCH}, \"batch_cmds_per_lease\": {:.2}, \"batch_server_us_per_lease\": {:.1}, \"batch_cmd_us_per_lease\": {:.1}, \"batch_lua_us_per_lease\": {:.1}, \"batch_ops_s\": {:.1}}}",
        floor.commands() / calls,
        floor.script_us / calls,
        floor.cmd_us / calls,
        floor.lua_us() / calls,
        empty.script_us / calls,
        batch.commands() / leases,
        batch.script_us / leases,
        batch.cmd_us / leases,
        batch.lua_us() / leases,
        batch_rate * BATCH as f64,
    );
    drop(f);
}

/// Workers (threads, one connection each) in the concurrent pop cases.
const WORKERS: usize = 4;

/// Leases per call in the batched pop cases (`poll_batch`).
const BATCH: usize = 64;
