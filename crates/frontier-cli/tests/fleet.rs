//! A fleet from the command line: three `frontier crawl --store redis://...` processes
//! on one crawl, one killed with SIGKILL mid-crawl. Every page is written once (the
//! killed process's leases go to the others after `crawl.lease_timeout`), and the
//! server's log shows each host's requests spaced by `download_delay` across all
//! processes. Needs `redis-server` (skips without it, fails under REQUIRE_REDIS=1 or CI).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_store_redis::testing::RedisServer;

const HOSTS: [&str; 2] = ["a.test", "b.test"];

/// Two hosts whose scopes (host and port) live in different partitions of a crawl of
/// `partitions`, for the site on `port`.
fn hosts_apart(port: u16, partitions: u16) -> [String; 2] {
    let shard = polite_store_redis::ShardConfig::new(partitions);
    let part = |h: &str| {
        let scope = polite_frontier_core::host_scope(&format!("http://{h}:{port}/")).unwrap();
        shard.partition_of(&scope)
    };
    let names: Vec<String> = (0..100).map(|i| format!("h{i}.test")).collect();
    let first = names[0].clone();
    let other = names
        .iter()
        .find(|h| part(h) != part(&first))
        .expect("two partitions among 100 hosts")
        .clone();
    [first, other]
}
const PAGES: u32 = 40;
const DELAY: f64 = 0.15;

/// Serves `PAGES` pages per host, each linking to the next two; logs (host, path, time).
async fn site() -> (u16, Arc<Mutex<Vec<(String, String, Instant)>>>) {
    let log: Arc<Mutex<Vec<(String, String, Instant)>>> = Arc::default();
    let l = log.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
            let l = l.clone();
            async move {
                let host = headers
                    .get("host")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .split(':')
                    .next()
                    .unwrap()
                    .to_string();
                l.lock()
                    .unwrap()
                    .push((host, uri.path().to_string(), Instant::now()));
                tokio::time::sleep(Duration::from_millis(20)).await;
                if uri.path() == "/robots.txt" {
                    return axum::response::Html("User-agent: *\nAllow: /\n".to_string());
                }
                let n: u32 = uri
                    .path()
                    .strip_prefix("/p/")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let links: String = (n + 1..=n + 2)
                    .filter(|k| *k < PAGES)
                    .map(|k| format!("<a href=\"/p/{k}\">{k}</a> "))
                    .collect();
                axum::response::Html(format!("<html><body>{links}</body></html>"))
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, log)
}

fn worker(dir: &Path, i: usize, store: &str, port: u16, hosts: &[String; 2]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frontier"));
    cmd.current_dir(dir)
        .env_remove("FRONTIER_CONFIG")
        .env_remove("FRONTIER_STORE")
        .args(["crawl", "--progress", "quiet", "--store"])
        .arg(store)
        .arg("--out")
        .arg(format!("out{i}.jsonl"))
        .args(["-s", &format!("download_delay={DELAY}")])
        .args(["-s", "randomize_download_delay=false"])
        .args(["-s", "crawl.lease_timeout=3"])
        .args(["-s", "concurrent_requests=4"]);
    for host in hosts {
        cmd.arg("--resolve").arg(format!("{host}:127.0.0.1:{port}"));
    }
    for host in hosts {
        cmd.arg(format!("http://{host}:{port}/p/0"));
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

fn lines(dir: &Path, i: usize) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("out{i}.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_share_one_crawl_and_one_budget() {
    let Some(server) = RedisServer::start_or_skip("cli_fleet") else {
        return;
    };
    fleet(&format!("{}fleet", server.url()), |_| {
        HOSTS.map(String::from)
    })
    .await;
}

/// The same fleet on a crawl sharded over 3 partitions on two servers; `frontier
/// inspect` then shows the partitions and their sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_a_sharded_crawl() {
    let Some(a) = RedisServer::start_or_skip("cli_fleet_sharded") else {
        return;
    };
    let Some(b) = RedisServer::start_or_skip("cli_fleet_sharded") else {
        return;
    };
    let store = format!("{}sharded?partitions=3&server={}", a.url(), b.url());
    fleet(&store, |port| hosts_apart(port, 3)).await;
    let out = Command::new(env!("CARGO_BIN_EXE_frontier"))
        .env_remove("FRONTIER_CONFIG")
        .args(["inspect", "--json"])
        .arg(&store)
        .args(["-s", &format!("download_delay={DELAY}")])
        .args(["-s", "randomize_download_delay=false"])
        .args(["-s", "concurrent_requests=4"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = report["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{report}");
    let acked: u64 = parts.iter().map(|p| p["acked"].as_u64().unwrap()).sum();
    assert_eq!(report["acked"].as_u64().unwrap(), acked);
    let busy = parts
        .iter()
        .filter(|p| p["acked"].as_u64() > Some(0))
        .count();
    assert_eq!(busy, 2, "each host in its own partition: {report}");
    // Both hosts' pages and robots.txt fetches: at least every page once.
    assert!(acked >= (HOSTS.len() as u32 * PAGES) as u64, "{report}");
    assert_eq!(report["queued"], 0, "{report}");
    // Another partition count is refused, naming the stored one.
    let out = Command::new(env!("CARGO_BIN_EXE_frontier"))
        .env_remove("FRONTIER_CONFIG")
        .arg("inspect")
        .arg(store.replace("partitions=3", "partitions=4"))
        .args(["-s", &format!("download_delay={DELAY}")])
        .args(["-s", "randomize_download_delay=false"])
        .args(["-s", "concurrent_requests=4"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("3 partitions"),
        "{err}"
    );
}

async fn fleet(store: &str, hosts: impl Fn(u16) -> [String; 2]) {
    let (port, log) = site().await;
    let hosts = hosts(port);
    let dir = tempfile::tempdir().unwrap();
    let mut workers: Vec<Child> = (0..3)
        .map(|i| worker(dir.path(), i, store, port, &hosts))
        .collect();
    // Kill one once the fleet is well under way.
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(dir.path(), 0).len() < 5 {
        assert!(Instant::now() < deadline, "worker 0 wrote nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    workers[0].kill().unwrap(); // SIGKILL
    workers[0].wait().unwrap();
    let mut codes = Vec::new();
    for w in workers.iter_mut().skip(1) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = w.try_wait().unwrap() {
                codes.push(status.code());
                break;
            }
            assert!(Instant::now() < deadline, "a worker did not finish");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for w in workers.iter_mut().skip(1) {
        let mut err = String::new();
        if let Some(mut e) = w.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut err).unwrap();
        }
        eprintln!("worker stderr: {err}");
    }
    assert_eq!(codes, [Some(0), Some(0)]);

    // Every page has its line; at most the killed worker's few leases twice.
    let mut count: HashMap<String, u32> = HashMap::new();
    let mut per_worker = Vec::new();
    for i in 0..3 {
        let l = lines(dir.path(), i);
        per_worker.push(l.len());
        for v in l {
            assert_eq!(v["status"], 200, "{v}");
            *count
                .entry(v["url"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    assert_eq!(count.len(), HOSTS.len() * PAGES as usize, "{per_worker:?}");
    let twice = count.values().filter(|c| **c > 1).count();
    assert!(twice <= 4, "{twice} pages written twice");
    assert!(per_worker[1] > 0 && per_worker[2] > 0, "{per_worker:?}");

    // The server's log: per host, requests at least DELAY apart, whichever process.
    let log = log.lock().unwrap().clone();
    let mut by_host: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
    for (host, _path, t) in &log {
        by_host.entry(host.clone()).or_default().push(*t);
    }
    for (host, mut times) in by_host {
        times.sort();
        let min_gap = times
            .windows(2)
            .map(|w| w[1] - w[0])
            .min()
            .unwrap_or(Duration::MAX);
        eprintln!("{host}: {} requests, closest {min_gap:?}", times.len());
        // Redis's clock and this one read a few ms apart, and a busy machine delays one
        // request's arrival more than the next one's.
        assert!(
            min_gap >= Duration::from_secs_f64(DELAY) - Duration::from_millis(25),
            "{host}: two requests {min_gap:?} apart"
        );
    }
}
