//! Where the crawl's frontier lives: a local store, or a crawl shared through Redis.

use super::*;

/// `redis://HOST:PORT/CRAWL` (or `rediss://` for TLS): the server's URL and the crawl's
/// name; `None` for a file store. A user name and password in the URL are kept.
pub fn redis_target(store: &std::path::Path) -> anyhow::Result<Option<(String, String)>> {
    let Some(text) = store.to_str() else {
        return Ok(None);
    };
    if !(text.starts_with("redis://") || text.starts_with("rediss://")) {
        return Ok(None);
    }
    let url =
        Url::parse(text).map_err(|e| crate::UsageError::new(format!("--store {text:?}: {e}")))?;
    let name = url.path().trim_matches('/').to_string();
    if name.is_empty() || name.contains('/') {
        return Err(crate::UsageError::new(format!(
            "--store {text:?}: name the crawl after the address, as in redis://HOST:PORT/CRAWL"
        ))
        .into());
    }
    let mut server = url.clone();
    server.set_path("/");
    Ok(Some((server.to_string(), name)))
}

/// What the crawl reads of its frontier beyond [`Scheduling`]: queue length and live
/// scope states. `None` when the frontier cannot answer from `&self` (Redis: the crawl
/// asks through a connection of its own instead).
pub(crate) trait CrawlFrontier: Scheduling + Send + 'static {
    /// Requests left (queued or leased).
    fn left(&self) -> Option<u64>;
    /// The live state of each named scope.
    fn live(&self, names: &[String]) -> Option<Vec<Option<Live>>>;
}

/// A scope's live state, for the progress display.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Live {
    pub(super) delay: f64,
    pub(super) concurrency: u32,
    pub(super) level: u32,
    pub(super) active: u32,
}

impl<S: Store + Send + 'static> CrawlFrontier for Frontier<S>
where
    S::Handle: Send,
{
    fn left(&self) -> Option<u64> {
        Some(self.len() as u64)
    }

    fn live(&self, names: &[String]) -> Option<Vec<Option<Live>>> {
        let scopes: HashMap<&str, _> = self.throttler().scopes().collect();
        Some(
            names
                .iter()
                .map(|n| {
                    scopes.get(n.as_str()).map(|s| Live {
                        delay: s.delay,
                        concurrency: s.concurrency,
                        level: s.level,
                        active: s.active,
                    })
                })
                .collect(),
        )
    }
}

impl CrawlFrontier for RedisFrontier {
    fn left(&self) -> Option<u64> {
        None
    }

    fn live(&self, _names: &[String]) -> Option<Vec<Option<Live>>> {
        None
    }
}

/// A second connection to a Redis crawl, for what needs `&mut` access off the driver:
/// live stats, and permits for robots.txt fetches (so they keep the fleet's spacing).
pub(super) type Side = Arc<Mutex<RedisFrontier>>;

pub(super) async fn side_call<T: Send + 'static>(
    side: &Side,
    f: impl FnOnce(&mut RedisFrontier) -> T + Send + 'static,
) -> anyhow::Result<T> {
    let side = side.clone();
    tokio::task::spawn_blocking(move || f(&mut lock(&side)))
        .await
        .map_err(|e| anyhow::anyhow!("a Redis call failed: {e}"))
}

pub(super) async fn run_redis(
    url: &str,
    name: &str,
    options: CrawlOptions,
    stopper: Stopper,
) -> anyhow::Result<CrawlSummary> {
    let config = RedisConfig::default()
        .time(TimeSource::Server)
        .lease_timeout(Duration::from_secs_f64(options.config.crawl.lease_timeout))
        .frontier(options.config.frontier.clone());
    let open = |what: &str| {
        RedisFrontier::open(url, name, options.config.settings.clone(), config.clone())
            .map_err(|e| anyhow::anyhow!("{what} {url} (crawl {name:?}): {e}"))
    };
    let frontier = open("cannot open the crawl on")?;
    let mut side = open("cannot open a second connection to")?;
    let resumed_with = side.info().map(|i| i.queued + i.delayed).unwrap_or(0);
    let side = Arc::new(Mutex::new(side));
    run(frontier, resumed_with, Some(side), options, stopper).await
}

pub(super) async fn run_local<S>(
    store: S,
    options: CrawlOptions,
    stopper: Stopper,
) -> anyhow::Result<CrawlSummary>
where
    S: Store + Send + 'static,
    S::Handle: Send,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let frontier = Frontier::open(
        options.config.settings.clone(),
        options.config.frontier.clone(),
        store,
        Clock::wall().now(),
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", options.store.display()))?;
    let resumed_with = frontier.len() as u64;
    run(frontier, resumed_with, None, options, stopper).await
}
