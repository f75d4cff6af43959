//! A fleet of workers sharing one frontier and one politeness budget in Redis, over real
//! loopback HTTP: 4 worker processes (`redis-worker`) crawl 2,000 pages on 10 local
//! sites; the server records every arrival. One worker is killed with SIGKILL mid-crawl.
//!
//! Checked from the server's own log: every page was fetched; a page was requested twice
//! (counted on arrival) only if the killed worker held its lease when it died (its leases expire and go to the
//! others, and the slots it held come back); no site ever saw more than 2 requests at
//! once or two arrivals closer than the 40 ms the crawl keeps between sends (less a
//! tolerance for the time between a send decision and the arrival), across all workers
//! together.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use polite_frontier_core::Request;
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{RedisConfig, RedisFrontier, TimeSource};
use polite_throttle_core::Timestamp;
use workspace_tests::{
    FLEET_CONCURRENCY, FLEET_DELAY, FLEET_SITES, fleet_links, fleet_settings, host_name,
};

const WORKERS: usize = 4;
const TASKS_PER_WORKER: usize = 4;
/// Arrivals may be closer than the client's spacing by this much (a send decision and
/// the request reaching the server are not the same instant on a loaded machine).
const TOLERANCE: Duration = Duration::from_millis(20);

#[derive(Default)]
struct SiteLog {
    arrivals: Vec<Instant>,
    in_flight: u32,
    max_in_flight: u32,
    /// Requests received per page (counted on arrival, answered or not).
    arrived: HashMap<u32, u32>,
    /// Pages answered in full.
    ok: HashMap<u32, u32>,
}

#[derive(Clone, Default)]
struct Server {
    sites: Arc<Mutex<HashMap<String, SiteLog>>>,
}

async fn page(State(server): State<Server>, headers: HeaderMap, Path(n): Path<u32>) -> Response {
    let host = host_name(headers.get(header::HOST).and_then(|h| h.to_str().ok()));
    let Some(&(_, pages)) = FLEET_SITES.iter().find(|(h, _)| *h == host) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    {
        let mut sites = server.sites.lock().unwrap();
        let log = sites.entry(host.clone()).or_default();
        log.arrivals.push(Instant::now());
        *log.arrived.entry(n).or_default() += 1;
        log.in_flight += 1;
        log.max_in_flight = log.max_in_flight.max(log.in_flight);
    }
    // Leaves the in-flight count even if the handler is dropped midway (the killed
    // worker's connection closes under it).
    let _leave = Leave(server.clone(), host.clone());
    // Slower than the spacing: the concurrency limit is what binds.
    tokio::time::sleep(Duration::from_millis(50 + u64::from(n * 37 % 60))).await;
    *server
        .sites
        .lock()
        .unwrap()
        .get_mut(&host)
        .unwrap()
        .ok
        .entry(n)
        .or_default() += 1;
    let links: String = fleet_links(n, pages)
        .iter()
        .map(|l| format!("<a href=\"{l}\">{l}</a> "))
        .collect();
    (
        [(header::CONTENT_TYPE, "text/html")],
        format!("<html><body>{links}</body></html>"),
    )
        .into_response()
}

struct Leave(Server, String);
impl Drop for Leave {
    fn drop(&mut self) {
        if let Some(log) = self.0.sites.lock().unwrap().get_mut(&self.1) {
            log.in_flight -= 1;
        }
    }
}

/// Kills every child still running when the test ends (by its pid).
struct Children(Vec<Option<Child>>);
impl Drop for Children {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn four_workers_share_one_budget_and_survive_a_sigkill() {
    let Some(redis) = RedisServer::start_or_skip("redis_fleet") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = Server::default();
    let app = axum::Router::new()
        .route("/page/{n}", axum::routing::get(page))
        .with_state(server.clone());
    let addr: SocketAddr = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    });
    let port = addr.port();

    let config = RedisConfig::default().time(TimeSource::Server);
    let mut seeder =
        RedisFrontier::open(&redis.url(), "fleet", fleet_settings(port), config).unwrap();
    let seeds: Vec<Request> = FLEET_SITES
        .iter()
        .map(|(h, _)| Request::get(format!("http://{h}:{port}/page/0")).start())
        .collect();
    seeder.push_all(&seeds, Timestamp::ZERO).unwrap();

    let (tx, rx) = mpsc::channel::<(usize, Option<String>)>();
    let mut children = Children(Vec::new());
    for w in 0..WORKERS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_redis-worker"))
            .args([
                redis.url(),
                "fleet".into(),
                port.to_string(),
                TASKS_PER_WORKER.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning a worker");
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send((w, Some(line))).is_err() {
                    return;
                }
            }
            let _ = tx.send((w, None));
        });
        children.0.push(Some(child));
    }
    drop(tx);

    let started = Instant::now();
    let victim = 1;
    let mut leased: Vec<HashSet<String>> = vec![HashSet::new(); WORKERS];
    let mut done: Vec<HashSet<String>> = vec![HashSet::new(); WORKERS];
    let mut total_done = 0;
    let mut killed = false;
    let mut in_flight_at_kill: Option<HashSet<String>> = None;
    let mut open = WORKERS;
    while open > 0 {
        let (w, line) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the workers went silent for two minutes");
        match line {
            None => {
                open -= 1;
                if w == victim && killed {
                    // Everything it wrote before dying has been read.
                    in_flight_at_kill = Some(leased[w].difference(&done[w]).cloned().collect());
                }
            }
            Some(line) => {
                let (tag, url) = line.split_once(' ').expect("tagged line");
                match tag {
                    "L" => {
                        leased[w].insert(url.to_string());
                    }
                    "D" => {
                        done[w].insert(url.to_string());
                        total_done += 1;
                    }
                    other => panic!("unexpected line {other:?}"),
                }
            }
        }
        if !killed && total_done >= 500 {
            let child = children.0[victim].as_mut().unwrap();
            child.kill().expect("SIGKILL"); // SIGKILL on Unix
            let _ = child.wait();
            children.0[victim] = None;
            killed = true;
            eprintln!("killed worker {victim} after {total_done} pages");
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the crawl did not finish in 5 minutes"
        );
    }
    assert!(killed, "the crawl ended before the kill");
    for (w, c) in children.0.iter_mut().enumerate() {
        if let Some(c) = c {
            let status = c.wait().unwrap();
            assert!(status.success(), "worker {w} failed: {status}");
        }
    }
    let elapsed = started.elapsed();
    let in_flight_at_kill = in_flight_at_kill.expect("the victim's output was read to its end");

    let sites = server.sites.lock().unwrap();
    let mut twice = Vec::new();
    let mut total = 0;
    for (host, pages) in FLEET_SITES {
        let log = &sites[host];
        for n in 0..pages {
            let answered = log.ok.get(&n).copied().unwrap_or(0);
            assert!(answered >= 1, "{host}/page/{n} was never fetched");
            // Counted on arrival: a request the killed worker had sent counts too.
            if log.arrived.get(&n).copied().unwrap_or(0) > 1 {
                twice.push(format!("http://{host}:{port}/page/{n}"));
            }
        }
        total += log.ok.values().sum::<u32>();
        assert!(
            log.max_in_flight <= FLEET_CONCURRENCY,
            "{host}: {} requests at once across the fleet",
            log.max_in_flight
        );
        let closest = log.arrivals.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        let spacing = Duration::from_secs_f64(FLEET_DELAY);
        assert!(
            closest + TOLERANCE >= spacing,
            "{host}: two arrivals {closest:?} apart (the crawl spaces them {spacing:?})"
        );
        eprintln!(
            "{host}: {} pages, max {} at once, closest arrivals {closest:?}",
            log.ok.len(),
            log.max_in_flight
        );
    }
    for url in &twice {
        assert!(
            in_flight_at_kill.contains(url),
            "{url} was requested twice but was not in flight at the kill"
        );
    }
    let info = seeder.info().unwrap();
    assert_eq!((info.queued, info.leased), (0, 0), "the crawl is drained");
    if !in_flight_at_kill.is_empty() {
        assert!(
            info.stats.redelivered >= 1,
            "the killed worker's leases were delivered again"
        );
    }
    eprintln!(
        "{total} fetches of {} pages in {elapsed:.1?}; {} in flight at the kill, {} requested twice, {} redelivered",
        FLEET_SITES.iter().map(|(_, p)| p).sum::<u32>(),
        in_flight_at_kill.len(),
        twice.len(),
        info.stats.redelivered
    );
}
