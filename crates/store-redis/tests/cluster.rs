//! A sharded crawl on a real local Redis Cluster: three masters on loopback ports, made by
//! `redis-cli --cluster create`, the crawl's three partitions on three different
//! masters. Worker processes (this test binary run again, see
//! `cluster_fleet_worker_process`) crawl a link graph over six hosts through
//! `ShardedRedisFrontier` with the servers' clock:
//!
//! - one worker killed with SIGKILL mid-crawl: every page is completed once (the
//!   server's count), the killed worker's lease goes to the others, and per-host
//!   spacing holds across all processes;
//! - two partitions moved to other masters while the workers run (`move_partition`; the
//!   workers follow `MOVED`): nothing is lost, spacing holds.
//!
//! Needs `redis-server` and `redis-cli` (skips without them, fails under REQUIRE_REDIS=1
//! or CI).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polite_frontier_core::{Poll, Request};
use polite_store_redis::testing::RedisCluster;
use polite_store_redis::{
    Placement, RedisConfig, ShardConfig, ShardedRedisFrontier, TimeSource, move_partition,
};
use polite_throttle_core::{Outcome, Settings, Timestamp};

const HOSTS: usize = 6;
const PAGES: u32 = 12;
const DELAY: f64 = 0.2;

fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.download_delay = DELAY;
    s
}

fn config() -> RedisConfig {
    RedisConfig::default()
        .time(TimeSource::Server)
        .lease_timeout(Duration::from_secs(2))
        .recheck(Duration::from_millis(50))
}

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn slot(conn: &mut redis::Connection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(conn)
        .unwrap()
}

/// Which master (index in `cluster.urls()`) owns `slot`, from `CLUSTER NODES`.
fn owner(cluster: &RedisCluster, slot: u16) -> usize {
    let mut c = redis::Client::open(cluster.urls()[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
    for line in nodes.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let port: u16 = f[1]
            .split('@')
            .next()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        for r in &f[8..] {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>())
                && (a..=b).contains(&slot)
            {
                return cluster
                    .servers()
                    .iter()
                    .position(|s| s.port() == port)
                    .unwrap();
            }
        }
    }
    panic!("no owner for slot {slot}")
}

/// A crawl name whose three partitions hash to three different masters.
fn spread_name(cluster: &RedisCluster, stem: &str) -> String {
    let mut c = redis::Client::open(cluster.urls()[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0.. {
        let name = format!("{stem}{i}");
        let mut owners: Vec<usize> = (0..3)
            .map(|k| owner(cluster, slot(&mut c, &format!("{{{name}:{k}}}:"))))
            .collect();
        owners.sort();
        if owners == [0, 1, 2] {
            return name;
        }
    }
    unreachable!()
}

fn worker(dir: &Path, i: usize, nodes: &[String], crawl: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "cluster_fleet_worker_process",
            "--nocapture",
        ])
        .env("CLUSTER_WORKER_NODES", nodes.join(","))
        .env("CLUSTER_WORKER_CRAWL", crawl)
        .env("CLUSTER_WORKER_LOG", dir.join(format!("w{i}.log")))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One worker: polls with the servers' clock, "fetches" (30 ms), pushes the page's two
/// links, completes; logs `start URL MS` before the fetch and `done URL` once its
/// completion was accepted. Run by the tests below as a child process.
#[test]
#[ignore = "a worker process of the cluster tests, started by them"]
fn cluster_fleet_worker_process() {
    let nodes: Vec<String> = std::env::var("CLUSTER_WORKER_NODES")
        .expect("started by a cluster test")
        .split(',')
        .map(String::from)
        .collect();
    let crawl = std::env::var("CLUSTER_WORKER_CRAWL").unwrap();
    let log = PathBuf::from(std::env::var("CLUSTER_WORKER_LOG").unwrap());
    let mut log = std::fs::File::create(log).unwrap();
    let mut f = ShardedRedisFrontier::open(
        &Placement::Cluster(nodes),
        &crawl,
        ShardConfig::new(3),
        settings(),
        config(),
    )
    .unwrap();
    let epoch = Instant::now();
    let now = || Timestamp::from_nanos(epoch.elapsed().as_nanos() as u64);
    loop {
        match f.poll(now()).unwrap() {
            Poll::Ready(lease) => {
                let url = lease.request.url.to_string();
                writeln!(log, "start {url} {}", wall_ms()).unwrap();
                log.flush().unwrap();
                std::thread::sleep(Duration::from_millis(30));
                let n: u32 = url.rsplit('/').next().unwrap().parse().unwrap();
                let base = url.rsplit_once('/').unwrap().0.to_string();
                let links: Vec<Request> = (n + 1..=n + 2)
                    .filter(|k| *k < PAGES)
                    .map(|k| Request::get(format!("{base}/{k}")))
                    .collect();
                f.push_all(&links, now()).unwrap();
                if f.complete(lease.id(), &Outcome::status(200), now())
                    .unwrap()
                {
                    writeln!(log, "done {url}").unwrap();
                    log.flush().unwrap();
                }
            }
            Poll::Empty | Poll::Blocked | Poll::NotUntil(_) => {
                let info = f.info().unwrap();
                if info.queued + info.delayed + info.leased == 0 {
                    return;
                }
                let wake = f
                    .poll_timeout()
                    .unwrap_or(now() + Duration::from_millis(50));
                let wait = wake.saturating_duration_since(now());
                std::thread::sleep(wait.min(Duration::from_millis(100)));
            }
        }
    }
}

struct Logs {
    starts: Vec<(String, u128, usize)>,
    done: HashMap<String, u32>,
}

fn read_logs(dir: &Path, n: usize) -> Logs {
    let mut starts = Vec::new();
    let mut done: HashMap<String, u32> = HashMap::new();
    for i in 0..n {
        let text = std::fs::read_to_string(dir.join(format!("w{i}.log"))).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                ["start", url, ms] => starts.push((url.to_string(), ms.parse().unwrap(), i)),
                ["done", url] => *done.entry(url.to_string()).or_default() += 1,
                _ => {} // a line cut by SIGKILL
            }
        }
    }
    Logs { starts, done }
}

fn wait_all(workers: &mut [Child]) {
    for w in workers.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = w.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = w.stderr.take() {
                    std::io::Read::read_to_string(&mut e, &mut err).unwrap();
                }
                assert!(status.success(), "a worker failed: {err}");
                break;
            }
            assert!(Instant::now() < deadline, "a worker did not finish");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Per host, fetch starts (any process) at least DELAY apart.
fn assert_spacing(logs: &Logs) {
    let mut by_host: BTreeMap<String, Vec<u128>> = BTreeMap::new();
    for (url, ms, _) in &logs.starts {
        by_host
            .entry(url.split('/').nth(2).unwrap().to_string())
            .or_default()
            .push(*ms);
    }
    assert_eq!(by_host.len(), HOSTS);
    for (host, mut times) in by_host {
        times.sort();
        let gap = times.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        eprintln!("{host}: {} fetches, closest {gap} ms", times.len());
        // The servers' clock and this one read a few ms apart, and a busy machine
        // delays one log line more than the next.
        assert!(
            gap as f64 >= DELAY * 1000.0 - 25.0,
            "{host}: two fetches {gap} ms apart"
        );
    }
}

fn seed(f: &mut ShardedRedisFrontier) {
    let seeds: Vec<Request> = (0..HOSTS)
        .map(|h| Request::get(format!("https://h{h}.test/0")))
        .collect();
    f.push_all(&seeds, Timestamp::ZERO).unwrap();
}

#[test]
fn cluster_fleet_survives_a_killed_worker() {
    let Some(cluster) = RedisCluster::start_or_skip("cluster_fleet", 3) else {
        return;
    };
    let crawl = spread_name(&cluster, "fleet");
    let mut f = ShardedRedisFrontier::open(
        &Placement::Cluster(cluster.urls()),
        &crawl,
        ShardConfig::new(3),
        settings(),
        config(),
    )
    .unwrap();
    seed(&mut f);
    let dir = tempfile::tempdir().unwrap();
    let mut workers: Vec<Child> = (0..3)
        .map(|i| worker(dir.path(), i, &cluster.urls(), &crawl))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_logs(dir.path(), 1).starts.len() < 4 {
        assert!(Instant::now() < deadline, "worker 0 fetched nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    workers[0].kill().unwrap(); // SIGKILL
    workers[0].wait().unwrap();
    wait_all(&mut workers[1..]);

    let logs = read_logs(dir.path(), 3);
    let pages = HOSTS * PAGES as usize;
    let info = f.info().unwrap();
    assert_eq!(
        info.stats.acked as usize, pages,
        "every page completed once"
    );
    assert_eq!((info.queued, info.leased), (0, 0));
    let mut started: HashMap<&str, u32> = HashMap::new();
    for (url, _, _) in &logs.starts {
        *started.entry(url).or_default() += 1;
    }
    assert_eq!(started.len(), pages, "every page fetched");
    let twice: Vec<_> = started.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.len() <= 1,
        "only the killed worker's lease again: {twice:?}"
    );
    assert!(logs.done.values().all(|n| *n == 1));
    // The killed worker may have died between its completion and its log line.
    assert!(
        logs.done.len() + 1 >= pages,
        "{} done lines",
        logs.done.len()
    );
    assert!(info.stats.redelivered <= 1);
    assert_spacing(&logs);
    // Each partition's keys sit on its own master.
    for k in 0..3 {
        let i = &f.partition_info().unwrap()[k];
        assert!(i.stats.acked > 0, "partition {k} did no work");
    }
    f.destroy().unwrap();
}

#[test]
fn cluster_partitions_move_while_workers_run() {
    let Some(cluster) = RedisCluster::start_or_skip("cluster_reshard", 3) else {
        return;
    };
    let crawl = spread_name(&cluster, "moving");
    let urls = cluster.urls();
    let mut f = ShardedRedisFrontier::open(
        &Placement::Cluster(urls.clone()),
        &crawl,
        ShardConfig::new(3),
        settings(),
        config(),
    )
    .unwrap();
    seed(&mut f);
    let dir = tempfile::tempdir().unwrap();
    let mut workers: Vec<Child> = (0..2)
        .map(|i| worker(dir.path(), i, &urls, &crawl))
        .collect();
    let mut c = redis::Client::open(urls[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut moved = Vec::new();
    for (k, after) in [(1u16, 10), (2u16, 25)] {
        let deadline = Instant::now() + Duration::from_secs(60);
        while read_logs(dir.path(), 2).starts.len() < after {
            assert!(Instant::now() < deadline, "the workers fetched nothing");
            std::thread::sleep(Duration::from_millis(10));
        }
        let s = slot(&mut c, &format!("{{{crawl}:{k}}}:"));
        let from = owner(&cluster, s);
        let to = (from + 1) % 3;
        let port = cluster.servers()[to].port();
        let n = move_partition(&urls[0], &crawl, k, &format!("127.0.0.1:{port}")).unwrap();
        assert!(n > 0, "partition {k} had no keys to move");
        let deadline = Instant::now() + Duration::from_secs(10);
        while owner(&cluster, s) != to {
            assert!(Instant::now() < deadline, "slot {s} did not change hands");
            std::thread::sleep(Duration::from_millis(20));
        }
        let acked = f.partition_info().unwrap()[k as usize].stats.acked;
        moved.push((k, from, to, n, acked));
    }
    eprintln!("moved (partition, from, to, keys, acked then): {moved:?}");
    wait_all(&mut workers);
    // The workers went on with the moved partitions on their new masters.
    let parts = f.partition_info().unwrap();
    for (k, _, _, _, acked) in &moved {
        assert!(
            parts[*k as usize].stats.acked > *acked,
            "no work on partition {k} after its move"
        );
    }

    let logs = read_logs(dir.path(), 2);
    let pages = HOSTS * PAGES as usize;
    let info = f.info().unwrap();
    assert_eq!(
        info.stats.acked as usize, pages,
        "every page completed once"
    );
    assert_eq!(info.stats.redelivered, 0, "no lease was lost");
    assert_eq!((info.queued, info.leased), (0, 0));
    assert_eq!(logs.done.len(), pages);
    assert!(logs.done.values().all(|n| *n == 1));
    assert_eq!(logs.starts.len(), pages, "no page fetched twice");
    assert_spacing(&logs);
    f.destroy().unwrap();
}
