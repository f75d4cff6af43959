//! A budget shared through Redis: two "processes" (two layers, each with its own Redis
//! connection) on one crawl space their requests to a scope together. Needs
//! `redis-server` (skips without it, fails under REQUIRE_REDIS=1 or CI).
#![cfg(feature = "redis")]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_runtime_tokio::Clock;
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{RedisConfig, RedisFrontier};
use polite_throttle_core::{ScopeConfig, Settings};
use polite_throttle_tower::{ScopeKey, SharedBudget, ThrottleLayer};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

type Req = http::Request<String>;
type Res = http::Response<String>;

fn budget(server: &RedisServer, settings: &Settings) -> SharedBudget<Clock> {
    let frontier = RedisFrontier::open(
        &server.url(),
        "api-budget",
        settings.clone(),
        RedisConfig::default(),
    )
    .unwrap();
    SharedBudget::new(frontier, Clock::wall())
}

/// A client in its own "process" whose server logs arrivals and answers `status`.
fn client(
    budget: SharedBudget<Clock>,
    log: Arc<Mutex<Vec<(Instant, char)>>>,
    name: char,
    answers: Arc<Mutex<Vec<Res>>>,
) -> impl Service<
    Req,
    Response = Res,
    Error = tower::BoxError,
    Future = polite_throttle_tower::ResponseFuture<Res>,
> + Clone
+ Send
+ 'static {
    ServiceBuilder::new()
        .layer(ThrottleLayer::shared(budget).scope_by(ScopeKey::fixed("api")))
        .service(service_fn(move |_req: Req| {
            log.lock().unwrap().push((Instant::now(), name));
            let res = answers
                .lock()
                .unwrap()
                .pop()
                .unwrap_or_else(|| http::Response::new(String::new()));
            async move { Ok::<_, Infallible>(res) }
        }))
}

fn get() -> Req {
    http::Request::get("http://api.test/")
        .body(String::new())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_space_their_requests_together() {
    let Some(server) = RedisServer::start_or_skip("tower_shared_spacing") else {
        return;
    };
    let settings =
        Settings::api_client().with_scope("api", ScopeConfig::per_second(5.0).concurrency(1));
    let log = Arc::new(Mutex::new(Vec::new()));
    let none = Arc::new(Mutex::new(Vec::new()));
    let a = client(budget(&server, &settings), log.clone(), 'a', none.clone());
    let b = client(budget(&server, &settings), log.clone(), 'b', none.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..12 {
        let mut c = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.spawn(async move { c.ready().await?.call(get()).await });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().unwrap().status(), 200);
    }
    let mut log = log.lock().unwrap().clone();
    log.sort();
    assert_eq!(log.len(), 12);
    assert!(log.iter().any(|e| e.1 == 'a') && log.iter().any(|e| e.1 == 'b'));
    for w in log.windows(2) {
        let gap = w[1].0 - w[0].0;
        // 0.2 s apart across both processes (slack for the clocks' reads and scheduling).
        assert!(
            gap >= Duration::from_millis(185),
            "{:?} -> {:?}: {gap:?}",
            w[0].1,
            w[1].1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_seen_by_one_process_holds_the_other() {
    let Some(server) = RedisServer::start_or_skip("tower_shared_429") else {
        return;
    };
    let settings = Settings::api_client().with_scope("api", ScopeConfig::new().concurrency(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let limited = http::Response::builder()
        .status(429)
        .header("Retry-After", "2")
        .body(String::new())
        .unwrap();
    let mut a = client(
        budget(&server, &settings),
        log.clone(),
        'a',
        Arc::new(Mutex::new(vec![limited])),
    );
    let mut b = client(
        budget(&server, &settings),
        log.clone(),
        'b',
        Arc::new(Mutex::new(Vec::new())),
    );
    let start = Instant::now();
    let r = a.ready().await.unwrap().call(get()).await.unwrap();
    assert_eq!(r.status(), 429);
    // The release goes through a's background thread; b must still wait for the reset.
    let r = b.ready().await.unwrap().call(get()).await.unwrap();
    assert_eq!(r.status(), 200);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1950),
        "b went after {waited:?}"
    );
}
