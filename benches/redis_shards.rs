//! One crawl sharded over 1, 2 and 3 partitions, each on its own redis-server: poll +
//! complete pairs per second through the batched tokio driver, the server time per pair,
//! and the Redis memory per queued request.
//!
//!     redis-shards [N] [WORKERS] [ROUNDS] [DRIVERS]
//!
//! Three `redis-server`s (no persistence) on free ports. Each round runs 1, 2 and 3
//! partitions in turn (the order rotating from round to round), each on a fresh crawl:
//! N requests (default 50,000, over 10,000 hosts, the peers' URLs: `redis-bench`'s shape) pushed (untimed; Redis
//! `used_memory` read before and after on every server in use), then WORKERS tasks
//! (default 64) split over DRIVERS drivers (default 4: a fleet of four workers, each with
//! its own handle and connections) on a two-thread tokio runtime loop `next` /
//! `complete(200)` until the crawl is done. A handle calls its partitions one after
//! another: a fleet's parallelism comes from its workers. Throttling is on for every poll but nothing waits (the benchmarks'
//! `redis_settings`). Prints one JSON line per crawl.
//!
//! This machine has 2 cores for the servers and the client together: past two servers
//! the partitions share cores, and the client's own work competes with them. The
//! per-shard server time is what a model of more shards uses (docs/performance.md).
#![allow(clippy::print_stdout)]
use polite_frontier_core::DupeFilterConfig;
use polite_runtime_tokio::{Clock, DriverFor};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{Placement, ShardConfig, ShardedRedisFrontier};
use polite_throttle_core::Timestamp;
use workspace_benches::{drive_to_the_end, peer_requests_range, redis_config, redis_settings};

fn conn(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn used_memory(url: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut conn(url))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Script time (µs) since the last reset.
fn script_usec(url: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn(url))
        .unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_fcall:"))
        .and_then(|l| l.split([':', ',']).find_map(|kv| kv.strip_prefix("usec=")))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn crawl(
    urls: &[String],
    name: &str,
    partitions: u16,
    n: usize,
    workers: usize,
    drivers: usize,
) -> String {
    let placement = Placement::Servers(urls[..partitions as usize].to_vec());
    let open = || {
        ShardedRedisFrontier::open(
            &placement,
            name,
            ShardConfig::new(partitions),
            redis_settings(),
            redis_config(DupeFilterConfig::Disabled),
        )
        .unwrap()
    };
    let used = &urls[..partitions as usize];
    let mut f = open();
    let before: i64 = used.iter().map(|u| used_memory(u)).sum();
    let requests = peer_requests_range(0, n, 10_000);
    let url_bytes = requests.iter().map(|r| r.url.len()).sum::<usize>() as f64 / n as f64;
    for chunk in requests.chunks(10_000) {
        f.push_all(chunk, Timestamp::ZERO).unwrap();
    }
    let after: i64 = used.iter().map(|u| used_memory(u)).sum();
    let per_part: Vec<u64> = f
        .partition_info()
        .unwrap()
        .iter()
        .map(|i| i.queued)
        .collect();
    for u in used {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn(u))
            .unwrap();
    }
    // A fleet: `drivers` handles on the crawl (each its own connections, as separate
    // worker processes would have), the tasks split between them.
    let mut handles = vec![f];
    while handles.len() < drivers {
        handles.push(open());
    }
    let driving = handles
        .into_iter()
        .map(|f| DriverFor::new(f, Clock::wall()))
        .collect();
    let (elapsed, done) = drive_to_the_end(driving, workers);
    assert_eq!(done, n, "every request leased and completed once");
    let usec: Vec<u64> = used.iter().map(|u| script_usec(u)).collect();
    let total: u64 = usec.iter().sum();
    let busiest = *usec.iter().max().unwrap() as f64 / 1e6 / elapsed;
    open().destroy().unwrap();
    format!(
        "{{\"partitions\": {partitions}, \"requests\": {n}, \"workers\": {workers}, \
         \"drivers\": {drivers}, \
         \"pairs_s\": {:.1}, \"server_us_per_pair\": {:.2}, \"busiest_server_busy\": {:.3}, \
         \"bytes_per_request\": {:.1}, \"url_bytes\": {url_bytes:.1}, \"queued_per_partition\": {per_part:?}}}",
        n as f64 / elapsed,
        total as f64 / n as f64,
        busiest,
        (after - before) as f64 / n as f64,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let workers: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    let drivers: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(4);
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::start("redis-shards")
                .unwrap()
                .expect("redis-server is needed")
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    for r in 0..rounds {
        for i in 0..3 {
            let p = ((r + i) % 3 + 1) as u16;
            let line = crawl(&urls, &format!("shards-{r}-{p}"), p, n, workers, drivers);
            println!("{{\"round\": {r}, {}", &line[1..]);
        }
    }
}
