//! `frontier crawl`: a polite, resumable crawler built on the frontier.
//!
//! Every fetch goes through the frontier, so throttling, backoff, dedup and persistence
//! apply to all of them: pages, robots.txt files and redirect hops alike.
//!
//! - **Workers**: `concurrent_requests` tasks each take the next ready request from the
//!   [`DriverFor`], fetch it with reqwest (redirects are not followed by the client) and
//!   end the lease with the response's outcome, which feeds backoff.
//! - **robots.txt**: the first page leased on an origin whose robots.txt is unknown is
//!   put back (its outcome "cancelled", so no backoff) behind a robots.txt request with
//!   a higher priority; pages leased while it is in flight wait for it (in a fleet, each
//!   process fetches it itself with a permit of the shared budget). Disallowed pages are
//!   dropped, counted and written to `--out` with an error; a `Crawl-delay` goes to the
//!   throttler. RFC 9309: 4xx answers allow everything; 5xx or no answer after the
//!   retries disallow the origin until robots.txt is fetched again (see `robots`).
//! - **Throttling answers**: a 429, or a 503 with `Retry-After`, is the site asking us to
//!   slow down (the outcome already did): the request is requeued without spending a
//!   retry, up to `max_throttled_retries`.
//! - **Retries**: 5xx, 429 (by default Scrapy's `RETRY_HTTP_CODES`), timeouts and
//!   connection errors are retried up to `retry_times` through
//!   [`DriverFor::retry`], with `retry_priority_adjust`. Retry counts live in memory: a
//!   resumed crawl starts them again, as Scrapy does.
//! - **Redirects**: each hop is a new request (same depth, `redirect_priority_adjust`,
//!   hop count in its `meta`), so dedup and throttling apply; a `Retry-After` on the
//!   redirect becomes the hop's per-request delay, capped at `redirect_max_delay`.
//! - **Links**: `<a href>` and `<area href>` of HTML pages, resolved against the page
//!   (or `<base href>`), kept when their host is in the allowed domains (default: the
//!   seeds' hosts and their subdomains), pushed with depth + 1.
//! - **Nothing lost**: a page's line is written to `--out` before its lease is
//!   completed, and its links are pushed before that; each completion is committed
//!   ([`DriverFor::commit`]) before the worker moves on. So a `kill -9` repeats at most
//!   the requests in flight, and a rerun with the same store resumes.

mod links;
mod output;
pub mod page;
mod robots;
pub mod sitemap;
pub mod warc;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_frontier_core::{
    Frontier, FrontierConfig, FrontierError, Lease, PushOutcome, Request, Scheduling, Store,
    host_scope,
};
use polite_runtime_tokio::{Clock, DriverError, DriverFor, unix_now};
use polite_store_fs::{FsConfig, FsStore};
use polite_store_redis::{RedisConfig, RedisFrontier, TimeSource};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::Outcome;
use serde::Serialize;
use tokio::sync::watch;
use url::Url;

pub use links::{allowed_domain, extract_links};
pub use output::{OutFile, PageLine};
pub use robots::{Rules, parse as parse_robots};

use crate::config::{Config, CrawlSettings};
use crate::progress::{Progress, ProgressMode};
use crate::stores::StoreKind;

/// The callback name of page requests.
pub const PAGE: &str = "page";
/// The callback name of robots.txt requests.
pub const ROBOTS: &str = "robots";
/// The callback name of sitemap requests.
pub const SITEMAP: &str = "sitemap";
/// Priority of sitemap requests: they feed the queue, so they go before pages.
const SITEMAP_PRIORITY: i32 = 1 << 20;
/// Priority of robots.txt requests: ahead of every page of their host.
const ROBOTS_PRIORITY: i32 = 1 << 24;

/// What to crawl and how.
#[derive(Clone, Debug, Default)]
pub struct CrawlOptions {
    /// Start URLs (pushed as start requests; already-seen ones are skipped on resume).
    pub seeds: Vec<String>,
    /// Domains whose links are followed (with subdomains); empty: the seeds' hosts.
    pub allow_domains: Vec<String>,
    /// Links are followed only if they match one of these (when any).
    pub include: Vec<regex::Regex>,
    /// Links matching any of these are never followed.
    pub exclude: Vec<regex::Regex>,
    /// Headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// A proxy for every request.
    pub proxy: Option<String>,
    /// Keep cookies in memory and send them back.
    pub cookies: bool,
    /// Write every page exchange to this WARC file (gzip per record).
    pub warc: Option<PathBuf>,
    /// Start a new WARC file once one reaches this many bytes.
    pub warc_max_size: Option<u64>,
    /// Sitemaps whose pages seed the crawl (besides those robots.txt lists).
    pub sitemaps: Vec<String>,
    /// Follow links even where `rel=nofollow`, meta robots or `X-Robots-Tag` say not to.
    pub ignore_robots_meta: bool,
    /// Serve Prometheus metrics on this address while crawling.
    pub metrics: Option<SocketAddr>,
    /// Stop after this many pages were finished in this run.
    pub max_pages: Option<u64>,
    /// Settings (throttling, ordering, depth limit, crawler).
    pub config: Config,
    /// Where the frontier is kept.
    pub store: PathBuf,
    /// Which store (detected from the path when `None`).
    pub store_kind: Option<StoreKind>,
    /// The JSON-lines output, appended to.
    pub out: Option<PathBuf>,
    /// DNS overrides (host → address), like curl's `--resolve`.
    pub resolve: Vec<(String, SocketAddr)>,
    /// How progress is shown.
    pub progress: ProgressMode,
}

/// Counters of one scope (host) in this run.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HostStats {
    /// New requests queued for it (links, seeds, redirect hops).
    pub queued: u64,
    /// HTTP exchanges (every attempt, robots.txt included).
    pub fetches: u64,
    /// Pages finished (final outcome written to `--out`).
    pub pages: u64,
    /// Pages finished with a 2xx status.
    pub ok: u64,
    /// Pages finished with a redirect.
    pub redirects: u64,
    /// Pages finished with another status or an error.
    pub failed: u64,
    /// 429 answers seen (every attempt).
    pub rate_limited: u64,
    /// Retries scheduled (failures: `retry_times`).
    pub retries: u64,
    /// Requeues after a throttling answer (429, 503 with `Retry-After`), which do not
    /// spend `retry_times`.
    pub throttled: u64,
    /// Pages robots.txt disallowed (never fetched).
    pub disallowed: u64,
    /// Stored requests outside this run's allowed domains or patterns (never fetched).
    pub skipped: u64,
    /// Body bytes received.
    pub bytes: u64,
}

/// The state of one scope at the end (or now).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ScopeRow {
    /// The scope (a host, with its port when not the default).
    pub scope: String,
    /// Counters of this run.
    #[serde(flatten)]
    pub stats: HostStats,
    /// Current delay between sends, in seconds.
    pub delay: f64,
    /// Current concurrency limit (0 = unlimited).
    pub concurrency: u32,
    /// Backoff level.
    pub level: u32,
    /// Requests in flight.
    pub active: u32,
}

/// Why a crawl ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Nothing left to fetch.
    Finished,
    /// `max_pages` reached; the rest stays queued.
    MaxPages,
    /// Asked to stop (Ctrl-C); the rest stays queued.
    Interrupted,
}

/// The end of a crawl.
#[derive(Clone, Debug, Serialize)]
pub struct CrawlSummary {
    /// Why it ended.
    pub stop: StopReason,
    /// Requests the store held when the crawl started (a resumed crawl).
    pub resumed_with: u64,
    /// Requests left in the store.
    pub left: u64,
    /// Pages finished in this run.
    pub pages: u64,
    /// Pages of this run that failed: an error or a status other than 2xx/3xx after
    /// their retries (the exit status is 1 when there are any).
    pub failed: u64,
    /// Wall time of this run, in seconds.
    pub elapsed: f64,
    /// Per scope, sorted by name.
    pub scopes: Vec<ScopeRow>,
    /// Stored requests that could not be decoded and were dropped (reported on stderr).
    pub corrupt: u64,
}

/// A stop switch: [`Stopper::stop`] makes workers finish what they hold and end.
#[derive(Clone, Debug)]
pub struct Stopper {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Stopper {
    fn default() -> Self {
        Stopper {
            tx: Arc::new(watch::channel(false).0),
        }
    }
}

impl Stopper {
    /// Asks the crawl to stop.
    pub fn stop(&self) {
        self.tx.send_replace(true);
    }

    /// Whether a stop was asked for.
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }

    async fn stopped(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`.
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Runs a crawl until it finishes, reaches `max_pages`, or `stopper` is used; returns
/// the summary. The store is flushed and closed before this returns.
pub async fn crawl(options: CrawlOptions, stopper: Stopper) -> anyhow::Result<CrawlSummary> {
    if let Some((url, name)) = redis_target(&options.store)? {
        return run_redis(&url, &name, options, stopper).await;
    }
    let kind = StoreKind::resolve(options.store_kind, &options.store)?;
    match kind {
        StoreKind::Sqlite => {
            let store = SqliteStore::open(&options.store, SqliteOptions::default())?;
            run_local(store, options, stopper).await
        }
        StoreKind::Fs => {
            let store = FsStore::open(&options.store, FsConfig::default())?;
            run_local(store, options, stopper).await
        }
    }
}

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
    delay: f64,
    concurrency: u32,
    level: u32,
    active: u32,
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
type Side = Arc<Mutex<RedisFrontier>>;

async fn side_call<T: Send + 'static>(
    side: &Side,
    f: impl FnOnce(&mut RedisFrontier) -> T + Send + 'static,
) -> anyhow::Result<T> {
    let side = side.clone();
    tokio::task::spawn_blocking(move || f(&mut lock(&side)))
        .await
        .map_err(|e| anyhow::anyhow!("a Redis call failed: {e}"))
}

async fn run_redis(
    url: &str,
    name: &str,
    options: CrawlOptions,
    stopper: Stopper,
) -> anyhow::Result<CrawlSummary> {
    let config = RedisConfig::default()
        .time(TimeSource::Server)
        .lease_timeout(Duration::from_secs_f64(options.config.crawl.lease_timeout));
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

async fn run_local<S>(
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
        FrontierConfig::default(),
        store,
        Clock::wall().now(),
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", options.store.display()))?;
    let resumed_with = frontier.len() as u64;
    run(frontier, resumed_with, None, options, stopper).await
}

/// The shared state of one crawl's workers.
struct Ctx<B: CrawlFrontier> {
    driver: DriverFor<B>,
    side: Option<Side>,
    client: reqwest::Client,
    crawl: CrawlSettings,
    allow: Vec<String>,
    include: Vec<regex::Regex>,
    exclude: Vec<regex::Regex>,
    warc: Option<warc::WarcWriter>,
    extra_headers: Vec<(String, String)>,
    ignore_robots_meta: bool,
    robots: robots::RobotsCache,
    retries: Mutex<HashMap<Box<str>, u32>>,
    throttled: Mutex<HashMap<Box<str>, u32>>,
    out: Option<OutFile>,
    stats: Mutex<BTreeMap<String, HostStats>>,
    pages: AtomicU64,
    corrupt: AtomicU64,
    max_pages: Option<u64>,
    stopper: Stopper,
    limited: Mutex<Option<StopReason>>,
}

type Res = anyhow::Result<()>;

async fn run<B>(
    frontier: B,
    resumed_with: u64,
    side: Option<Side>,
    options: CrawlOptions,
    stopper: Stopper,
) -> anyhow::Result<CrawlSummary>
where
    B: CrawlFrontier,
    B::StoreError: std::error::Error + Send + Sync + 'static,
    B::Closed: Send + 'static,
{
    let started = Instant::now();
    if let Some(addr) = options.metrics {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| crate::UsageError::new(format!("--metrics {addr}: {e}")))?;
        describe_metrics();
    }
    let config = options.config.clone();
    let workers = config.settings.concurrent_requests as usize;
    let clock = Clock::wall();
    let driver = DriverFor::new(frontier, clock);

    let mut allow = options.allow_domains.clone();
    let mut seeds = Vec::new();
    for seed in &options.seeds {
        let url = Url::parse(seed).map_err(|e| {
            crate::UsageError::new(format!("seed {seed:?} is not an absolute URL: {e}"))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(crate::UsageError::new(format!(
                "seed {seed:?}: only http and https URLs can be crawled"
            ))
            .into());
        }
        if options.allow_domains.is_empty() {
            let host = url.host_str().unwrap_or_default().to_string();
            if !allow.contains(&host) {
                allow.push(host);
            }
        }
        seeds.push(url);
    }

    let out = match &options.out {
        Some(path) => Some(OutFile::open(path)?),
        None => None,
    };
    let ctx = Arc::new(Ctx {
        driver: driver.clone(),
        side,
        client: client(&config.crawl, &options)?,
        crawl: config.crawl.clone(),
        allow,
        include: options.include.clone(),
        exclude: options.exclude.clone(),
        warc: match &options.warc {
            Some(path) => Some(
                warc::WarcWriter::open(
                    path,
                    options.warc_max_size,
                    concat!("polite-frontier-cli/", env!("CARGO_PKG_VERSION")),
                )
                .map_err(|e| anyhow::anyhow!("--warc {}: {e}", path.display()))?,
            ),
            None => None,
        },
        extra_headers: options.headers.clone(),
        ignore_robots_meta: options.ignore_robots_meta,
        robots: robots::RobotsCache::default(),
        retries: Mutex::new(HashMap::new()),
        throttled: Mutex::new(HashMap::new()),
        out,
        stats: Mutex::new(BTreeMap::new()),
        pages: AtomicU64::new(0),
        corrupt: AtomicU64::new(0),
        max_pages: options.max_pages,
        stopper: stopper.clone(),
        limited: Mutex::new(None),
    });

    // Seeds: start requests; on a resumed crawl the duplicate filter skips them.
    let requests: Vec<Request> = seeds
        .iter()
        .map(|u| Request::get(u.as_str()).callback(PAGE).start())
        .collect();
    let outcomes = driver.push_all(requests).await?;
    for (url, outcome) in seeds.iter().zip(outcomes) {
        if let PushOutcome::Queued(_) = outcome {
            ctx.count(url.as_str(), |s| s.queued += 1);
        }
    }
    for sitemap in &options.sitemaps {
        let url = Url::parse(sitemap).map_err(|e| {
            crate::UsageError::new(format!("--sitemap {sitemap:?} is not an absolute URL: {e}"))
        })?;
        ctx.push_sitemap(url.as_str()).await?;
    }
    driver.commit().await?;

    let progress = Progress::start(options.progress, resumed_with);
    let flusher = tokio::spawn(driver.clone().flush_every(Duration::from_secs(5)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let ctx = ctx.clone();
        tasks.spawn(async move { ctx.worker().await });
    }
    let mut failure = None;
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => {
                    failure.get_or_insert(e);
                    stopper.stop();
                }
                Some(Err(e)) => {
                    failure.get_or_insert(anyhow::anyhow!("a crawl worker failed: {e}"));
                    stopper.stop();
                }
            },
            () = tokio::time::sleep(progress.interval()) => {
                let rows = ctx.rows().await;
                progress.update(&rows, ctx.pages.load(Ordering::Relaxed));
                if options.metrics.is_some() {
                    ctx.publish_gauges(&rows).await;
                }
            }
        }
    }
    // A periodic flush that failed is a failure of the crawl (the store needs attention).
    if flusher.is_finished() {
        if let Ok(Err(e)) = flusher.await {
            failure.get_or_insert(anyhow::anyhow!("flushing the store failed: {e}"));
        }
    } else {
        flusher.abort();
    }
    let rows = ctx.rows().await;
    progress.finish(&rows);
    let left = ctx.left().await;
    driver.shutdown().await?;
    if let Some(e) = failure {
        return Err(e);
    }
    let stop = if stopper.is_stopped() && left > 0 {
        lock(&ctx.limited).unwrap_or(StopReason::Interrupted)
    } else {
        StopReason::Finished
    };
    Ok(CrawlSummary {
        stop,
        resumed_with,
        left,
        pages: ctx.pages.load(Ordering::Relaxed),
        failed: rows.iter().map(|r| r.stats.failed).sum(),
        elapsed: started.elapsed().as_secs_f64(),
        scopes: rows,
        corrupt: ctx.corrupt.load(Ordering::Relaxed),
    })
}

/// Help texts of the Prometheus metrics (`--metrics`).
fn describe_metrics() {
    metrics::describe_counter!(
        "frontier_requests_sent_total",
        "HTTP requests sent (every attempt, robots.txt and sitemaps included)"
    );
    metrics::describe_counter!(
        "frontier_responses_total",
        "Responses received, by status class"
    );
    metrics::describe_counter!("frontier_rate_limited_total", "Responses with status 429");
    metrics::describe_counter!(
        "frontier_transport_errors_total",
        "Requests that got no response, by error kind"
    );
    metrics::describe_counter!(
        "frontier_retries_total",
        "Requests put back: after a failure (retry_times) or a throttling answer"
    );
    metrics::describe_gauge!("frontier_queue_length", "Requests left in the frontier");
    metrics::describe_gauge!("frontier_in_flight", "Requests in flight");
    metrics::describe_gauge!("frontier_pages_total", "Pages finished in this run");
    metrics::describe_gauge!(
        "frontier_scope_delay_seconds",
        "Current delay between sends of a scope (the busiest 100)"
    );
    metrics::describe_gauge!(
        "frontier_scope_backoff_level",
        "Backoff level of a scope (the busiest 100)"
    );
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn client(crawl: &CrawlSettings, options: &CrawlOptions) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &options.headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| crate::UsageError::new(format!("header {name:?}: {e}")))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|e| crate::UsageError::new(format!("header {name}: {e}")))?;
        headers.append(name, value);
    }
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs_f64(crawl.download_timeout))
        .connect_timeout(Duration::from_secs_f64(crawl.download_timeout.min(30.0)))
        .user_agent(&crawl.user_agent)
        .default_headers(headers)
        .cookie_store(options.cookies)
        .pool_max_idle_per_host(16);
    if options.warc.is_some() {
        // The archive keeps the bytes as the server sent them: ask for no compression.
        builder = builder.no_gzip().no_brotli();
    }
    if let Some(proxy) = &options.proxy {
        let proxy = reqwest::Proxy::all(proxy)
            .map_err(|e| crate::UsageError::new(format!("--proxy {proxy:?}: {e}")))?;
        builder = builder.proxy(proxy);
    }
    for (host, addr) in &options.resolve {
        builder = builder.resolve(host, *addr);
    }
    builder
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))
}

/// The error kind a failed exchange reports to backoff.
fn error_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_body() || e.is_decode() {
        "data_loss"
    } else {
        "connection"
    }
}

/// An error with its causes, on one line.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The redirect hops a request already made, from its `meta`.
fn hops(request: &Request) -> u32 {
    meta_value(request, "redirects")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// How one exchange ended.
enum Fetched {
    Response {
        status: u16,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        content_type: Option<String>,
        /// The body was cut at `download_maxsize`.
        truncated: bool,
        /// From sending the request to the body's end.
        elapsed: Duration,
        /// The server's address.
        ip: Option<std::net::IpAddr>,
        /// `HTTP/1.1`, `HTTP/2.0`, ...
        version: &'static str,
    },
    Failed {
        kind: &'static str,
        message: String,
    },
}

impl<B> Ctx<B>
where
    B: CrawlFrontier,
    B::StoreError: std::error::Error + Send + Sync + 'static,
    B::Closed: Send + 'static,
{
    /// The gauges: queue length, requests in flight, and delay and backoff level of the
    /// busiest scopes (at most 100, to bound the series a broad crawl creates).
    async fn publish_gauges(&self, rows: &[ScopeRow]) {
        metrics::gauge!("frontier_queue_length").set(self.left().await as f64);
        metrics::gauge!("frontier_in_flight")
            .set(rows.iter().map(|r| f64::from(r.active)).sum::<f64>());
        metrics::gauge!("frontier_pages_total").set(self.pages.load(Ordering::Relaxed) as f64);
        let (shown, _) = crate::progress::busiest(rows, 100);
        for row in shown {
            let scope = row.scope.clone();
            metrics::gauge!("frontier_scope_delay_seconds", "scope" => scope.clone())
                .set(row.delay);
            metrics::gauge!("frontier_scope_backoff_level", "scope" => scope)
                .set(f64::from(row.level));
        }
    }

    /// Requests left in the frontier.
    async fn left(&self) -> u64 {
        match &self.side {
            Some(side) => side_call(side, |f| f.info().map(|i| i.queued + i.delayed + i.leased))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0),
            None => self
                .driver
                .inspect(|f| f.left())
                .await
                .ok()
                .flatten()
                .unwrap_or(0),
        }
    }

    /// Whether this run follows `url`: its host is in the allowed domains, it matches an
    /// `--include` pattern (if any) and no `--exclude` pattern.
    fn wanted(&self, url: &str) -> bool {
        let host = Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        allowed_domain(&self.allow, &host)
            && (self.include.is_empty() || self.include.iter().any(|r| r.is_match(url)))
            && !self.exclude.iter().any(|r| r.is_match(url))
    }

    fn count(&self, url: &str, f: impl FnOnce(&mut HostStats)) {
        let scope = host_scope(url).unwrap_or_else(|_| "-".to_string());
        f(lock(&self.stats).entry(scope).or_default());
    }

    async fn rows(&self) -> Vec<ScopeRow> {
        let stats = lock(&self.stats).clone();
        let names: Vec<String> = stats.keys().cloned().collect();
        let live: Vec<Option<Live>> = match &self.side {
            Some(side) => side_call(side, move |f| {
                names
                    .iter()
                    .map(|n| {
                        f.scope_stats_raw(n).ok().flatten().map(|s| Live {
                            delay: s.delay,
                            concurrency: s.concurrency,
                            level: s.level,
                            active: s.active,
                        })
                    })
                    .collect()
            })
            .await
            .unwrap_or_default(),
            None => self
                .driver
                .inspect(move |f| f.live(&names))
                .await
                .ok()
                .flatten()
                .unwrap_or_default(),
        };
        stats
            .into_iter()
            .zip(live.into_iter().chain(std::iter::repeat(None)))
            .map(|((scope, stats), live)| {
                let mut row = ScopeRow {
                    scope,
                    stats,
                    ..ScopeRow::default()
                };
                if let Some(s) = live {
                    row.delay = s.delay;
                    row.concurrency = s.concurrency;
                    row.level = s.level;
                    row.active = s.active;
                }
                row
            })
            .collect()
    }

    async fn worker(self: Arc<Self>) -> Res {
        loop {
            if self.stopper.is_stopped() {
                return Ok(());
            }
            let next = tokio::select! {
                biased;
                () = self.stopper.stopped() => return Ok(()),
                next = self.driver.next() => next,
            };
            let lease = match next {
                None => return Ok(()),
                Some(Ok(lease)) => lease,
                Some(Err(DriverError::Frontier(FrontierError::Corrupt { lease, source }))) => {
                    // Never silent: say which record, drop it, go on with the rest.
                    eprintln!("frontier: dropping stored request #{}: {source}", lease.0);
                    self.corrupt.fetch_add(1, Ordering::Relaxed);
                    self.driver.complete(lease, Outcome::Cancelled).await?;
                    continue;
                }
                Some(Err(DriverError::Closed)) => return Ok(()),
                Some(Err(e)) => return Err(e.into()),
            };
            if self.stopper.is_stopped() {
                // Put it back (it would be delivered again anyway).
                self.driver.retry(lease.id(), Outcome::Cancelled, 0).await?;
                return Ok(());
            }
            match lease.request.callback.as_deref() {
                Some(ROBOTS) => self.robots_txt(lease).await?,
                Some(SITEMAP) => self.sitemap(lease).await?,
                _ => self.page(lease).await?,
            }
        }
    }

    async fn fetch(&self, url: &str) -> Fetched {
        let started = Instant::now();
        metrics::counter!("frontier_requests_sent_total").increment(1);
        let response = match self.client.get(url).send().await {
            Ok(r) => {
                let class = match r.status().as_u16() {
                    100..=199 => "1xx",
                    200..=299 => "2xx",
                    300..=399 => "3xx",
                    400..=499 => "4xx",
                    _ => "5xx",
                };
                metrics::counter!("frontier_responses_total", "class" => class).increment(1);
                if r.status() == 429 {
                    metrics::counter!("frontier_rate_limited_total").increment(1);
                }
                r
            }
            Err(e) => {
                metrics::counter!("frontier_transport_errors_total", "kind" => error_kind(&e))
                    .increment(1);
                return Fetched::Failed {
                    kind: error_kind(&e),
                    message: describe(&e),
                };
            }
        };
        let status = response.status().as_u16();
        let headers: Vec<(String, Vec<u8>)> = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let ip = response.remote_addr().map(|a| a.ip());
        let version = match response.version() {
            reqwest::Version::HTTP_09 => "HTTP/0.9",
            reqwest::Version::HTTP_10 => "HTTP/1.0",
            reqwest::Version::HTTP_2 => "HTTP/2.0",
            reqwest::Version::HTTP_3 => "HTTP/3.0",
            _ => "HTTP/1.1",
        };
        let mut response = response;
        let mut body = Vec::new();
        let mut truncated = false;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = (self.crawl.download_maxsize as usize).saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if chunk.len() > room {
                        truncated = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Fetched::Failed {
                        kind: error_kind(&e),
                        message: describe(&e),
                    };
                }
            }
        }
        Fetched::Response {
            status,
            headers,
            body,
            content_type,
            truncated,
            elapsed: started.elapsed(),
            ip,
            version,
        }
    }

    /// Retries `lease` if its URL has retries left; `true` if it did.
    async fn maybe_retry(&self, lease: &Lease, outcome: Outcome<'static>) -> anyhow::Result<bool> {
        let url = &lease.request.url;
        let retried = {
            let mut retries = lock(&self.retries);
            let n = retries.entry(url.clone()).or_default();
            if *n < self.crawl.retry_times {
                *n += 1;
                true
            } else {
                false
            }
        };
        if retried {
            metrics::counter!("frontier_retries_total", "reason" => "failure").increment(1);
            self.count(url, |s| s.retries += 1);
            self.driver
                .retry(lease.id(), outcome, self.crawl.retry_priority_adjust)
                .await?;
        }
        Ok(retried)
    }

    /// Requeues `lease` after a throttling answer (429, or 503 with a rate-limit
    /// header), without spending its `retry_times`: the outcome has already slowed its
    /// scopes down, so it goes again once they allow. `false` once
    /// `max_throttled_retries` requeues were spent (it is then an ordinary failure).
    async fn maybe_requeue_throttled(
        &self,
        lease: &Lease,
        status: u16,
        outcome: Outcome<'static>,
    ) -> anyhow::Result<bool> {
        let throttling = status == 429
            || (status == 503
                && matches!(
                    outcome,
                    Outcome::Response {
                        header_delay: Some(_),
                        ..
                    }
                ));
        if !throttling {
            return Ok(false);
        }
        let url = &lease.request.url;
        let requeued = {
            let mut throttled = lock(&self.throttled);
            let n = throttled.entry(url.clone()).or_default();
            if *n < self.crawl.max_throttled_retries {
                *n += 1;
                true
            } else {
                false
            }
        };
        if requeued {
            metrics::counter!("frontier_retries_total", "reason" => "throttled").increment(1);
            self.count(url, |s| s.throttled += 1);
            self.driver.retry(lease.id(), outcome, 0).await?;
        }
        Ok(requeued)
    }

    fn retries_of(&self, url: &str) -> u32 {
        lock(&self.throttled).remove(url);
        lock(&self.retries).remove(url).unwrap_or(0)
    }

    /// Fetches `url`'s robots.txt in this worker (fleet mode), each attempt with a
    /// permit of the fleet's budget on its host, retried like a queued robots.txt
    /// request; records and returns the rules (`None` if the crawl was stopped first).
    async fn robots_inline(&self, url: &Url) -> anyhow::Result<Option<robots::Rules>> {
        let Some(side) = &self.side else {
            return Ok(None);
        };
        let origin = robots::origin(url);
        let robots_url = robots::robots_url(url);
        let scope = host_scope(&robots_url).map_err(|e| anyhow::anyhow!("{robots_url}: {e}"))?;
        let (mut retries, mut throttled) = (0, 0);
        let lifetime = Duration::from_secs_f64(self.crawl.robotstxt_cache_lifetime);
        let unreachable = Duration::from_secs_f64(self.crawl.robotstxt_unreachable_retry);
        let (rules, lifetime) = loop {
            // A permit: the same spacing as every page of this host, fleet-wide.
            let permit = loop {
                if self.stopper.is_stopped() {
                    self.robots
                        .set(&origin, robots::Rules::DisallowAll, Duration::ZERO);
                    return Ok(None);
                }
                let (s, now) = (scope.clone(), self.driver.now());
                let got = side_call(side, move |f| {
                    f.try_acquire(&[polite_throttle_core::ScopeUse::new(&s)], now)
                })
                .await??;
                match got {
                    Ok(permit) => break permit,
                    Err(polite_throttle_core::NotReady::NotUntil(t)) => {
                        let wait = t.saturating_duration_since(self.driver.now());
                        tokio::time::sleep(wait.min(Duration::from_secs(5))).await;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let fetched = self.fetch_following(url, &robots_url).await;
            let outcome = match &fetched {
                Fetched::Failed { kind, .. } => Outcome::error(kind),
                Fetched::Response {
                    status, headers, ..
                } => response_outcome(*status, headers),
            };
            let now = self.driver.now();
            side_call(side, move |f| f.release(permit, &outcome, now)).await??;
            let (status, body) = match fetched {
                Fetched::Failed { .. } => (None, Vec::new()),
                Fetched::Response { status, body, .. } => (Some(status), body),
            };
            let throttling = matches!(status, Some(429))
                || (status == Some(503)
                    && matches!(
                        outcome,
                        Outcome::Response {
                            header_delay: Some(_),
                            ..
                        }
                    ));
            if throttling && throttled < self.crawl.max_throttled_retries {
                throttled += 1;
                continue;
            }
            if matches!(status, None | Some(429) | Some(500..)) && retries < self.crawl.retry_times
            {
                retries += 1;
                continue;
            }
            break match status {
                Some(200..=299) => (robots::parse(&self.crawl.user_agent, &body), lifetime),
                None | Some(429) | Some(500..) => (robots::Rules::DisallowAll, unreachable),
                Some(_) => (robots::Rules::AllowAll, lifetime),
            };
        };
        if matches!(rules, robots::Rules::DisallowAll) {
            tracing::warn!(robots = %robots_url, "robots.txt unreachable: its origin is disallowed until it is fetched again");
        }
        if let Some(delay) = rules.crawl_delay() {
            self.driver.handle_crawl_delay(scope, delay).await?;
        }
        self.push_listed_sitemaps(&rules).await?;
        self.robots.set(&origin, rules.clone(), lifetime);
        Ok(Some(rules))
    }

    /// Fetches `target` following up to 5 redirects at once (robots.txt's rule).
    async fn fetch_following(&self, base: &Url, target: &str) -> Fetched {
        let mut fetched = self.fetch(target).await;
        self.count(target, |s| s.fetches += 1);
        let mut hops = 0;
        while let Fetched::Response {
            status: 300..=399,
            headers,
            ..
        } = &fetched
        {
            let next = headers
                .iter()
                .find(|(k, _)| k == "location")
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
                .and_then(|loc| base.join(loc.trim()).ok())
                .filter(|t| matches!(t.scheme(), "http" | "https"));
            let Some(next) = next.filter(|_| hops < 5) else {
                break;
            };
            hops += 1;
            fetched = self.fetch(next.as_str()).await;
            self.count(target, |s| s.fetches += 1);
        }
        fetched
    }

    async fn robots_txt(&self, lease: Lease) -> Res {
        let url_text = lease.request.url.to_string();
        let Ok(url) = Url::parse(&url_text) else {
            self.driver.complete(lease.id(), Outcome::Cancelled).await?;
            return Ok(());
        };
        let origin = robots::origin(&url);
        if self.robots.is_ready(&origin) {
            // A second copy (queued before a restart): already known.
            self.driver.complete(lease.id(), Outcome::Cancelled).await?;
            return Ok(self.driver.commit().await?);
        }
        // Redirects of robots.txt are followed at once, up to 5 hops (RFC 9309 2.3.1.2).
        let fetched = self.fetch_following(&url, &url_text).await;
        let lifetime = Duration::from_secs_f64(self.crawl.robotstxt_cache_lifetime);
        let unreachable = Duration::from_secs_f64(self.crawl.robotstxt_unreachable_retry);
        let (outcome, rules, lifetime) = match fetched {
            Fetched::Failed { kind, .. } => {
                let outcome = Outcome::error(kind);
                if self.maybe_retry(&lease, outcome).await? {
                    return Ok(());
                }
                (outcome, robots::Rules::DisallowAll, unreachable)
            }
            Fetched::Response {
                status,
                headers,
                body,
                ..
            } => {
                let outcome = response_outcome(status, &headers);
                self.count(&url_text, |s| {
                    s.bytes += body.len() as u64;
                    s.rate_limited += u64::from(status == 429);
                });
                if self
                    .maybe_requeue_throttled(&lease, status, outcome)
                    .await?
                    || ((status == 429 || status >= 500)
                        && self.maybe_retry(&lease, outcome).await?)
                {
                    return Ok(());
                }
                match status {
                    200..=299 => (
                        outcome,
                        robots::parse(&self.crawl.user_agent, &body),
                        lifetime,
                    ),
                    // Unreachable (and a 429 that would not stop): disallow all for now.
                    429 | 500.. => (outcome, robots::Rules::DisallowAll, unreachable),
                    // Unavailable (4xx), or a redirect loop: allow all.
                    _ => (outcome, robots::Rules::AllowAll, lifetime),
                }
            }
        };
        if matches!(rules, robots::Rules::DisallowAll) {
            tracing::warn!(robots = %url_text, retry_in = unreachable.as_secs_f64(), "robots.txt unreachable: its origin is disallowed until it is fetched again");
        }
        self.retries_of(&url_text);
        if let Some(delay) = rules.crawl_delay()
            && let Ok(scope) = host_scope(&url_text)
        {
            self.driver.handle_crawl_delay(scope, delay).await?;
        }
        self.push_listed_sitemaps(&rules).await?;
        self.robots.set(&origin, rules, lifetime);
        self.driver.complete(lease.id(), outcome).await?;
        Ok(self.driver.commit().await?)
    }

    async fn page(&self, lease: Lease) -> Res {
        let url_text = lease.request.url.to_string();
        let url = match Url::parse(&url_text) {
            Ok(url) => url,
            Err(e) => {
                self.finish(&lease, None, Some(format!("not a URL: {e}")), 0, None)?;
                self.driver.complete(lease.id(), Outcome::Cancelled).await?;
                return Ok(self.driver.commit().await?);
            }
        };
        if !lease.request.start && !self.wanted(&url_text) {
            // Queued by an earlier run with other rules (a resumed store).
            self.count(&url_text, |s| s.skipped += 1);
            self.finish(
                &lease,
                None,
                Some("outside this run's allowed domains or patterns".into()),
                0,
                None,
            )?;
            self.driver.complete(lease.id(), Outcome::Cancelled).await?;
            return Ok(self.driver.commit().await?);
        }
        if self.crawl.robotstxt_obey {
            let origin = robots::origin(&url);
            let rules = match self.robots.lookup(&origin) {
                robots::Lookup::Ready(rules) => rules,
                robots::Lookup::Unknown if self.side.is_some() => {
                    // A fleet: this process fetches it now, with a permit from the
                    // fleet's budget, as the queue's robots request could be taken by
                    // another process (whose cache is not this one's). The page goes
                    // back meanwhile: the time its lease counted as its send is gone,
                    // and it must be spaced after the robots.txt request.
                    self.driver.retry(lease.id(), Outcome::Cancelled, 0).await?;
                    self.robots_inline(&url).await?;
                    return Ok(());
                }
                robots::Lookup::Pending(rx) if self.side.is_some() => {
                    self.driver.retry(lease.id(), Outcome::Cancelled, 0).await?;
                    tokio::select! {
                        _ = robots::wait(rx) => {}
                        () = self.stopper.stopped() => {}
                    }
                    return Ok(());
                }
                robots::Lookup::Unknown => {
                    // Fetch robots.txt first: it goes ahead of this page, which waits
                    // behind it (no backoff: the page was never sent).
                    let robots = Request::get(robots::robots_url(&url))
                        .callback(ROBOTS)
                        .priority(ROBOTS_PRIORITY)
                        .dont_filter();
                    self.driver.push(robots).await?;
                    self.driver.retry(lease.id(), Outcome::Cancelled, 0).await?;
                    return Ok(());
                }
                robots::Lookup::Pending(rx) => {
                    tokio::select! {
                        rules = robots::wait(rx) => rules.unwrap_or(robots::Rules::DisallowAll),
                        () = self.stopper.stopped() => {
                            self.driver.retry(lease.id(), Outcome::Cancelled, 0).await?;
                            return Ok(());
                        }
                    }
                }
            };
            if !rules.allowed(&url_text) {
                self.count(&url_text, |s| s.disallowed += 1);
                let why = match rules {
                    robots::Rules::DisallowAll => {
                        "robots.txt unreachable (5xx or no answer): its origin is disallowed"
                    }
                    _ => "disallowed by robots.txt",
                };
                self.finish(&lease, None, Some(why.into()), 0, None)?;
                self.driver.complete(lease.id(), Outcome::Cancelled).await?;
                return Ok(self.driver.commit().await?);
            }
        }

        let fetched = self.fetch(&url_text).await;
        self.count(&url_text, |s| s.fetches += 1);
        match fetched {
            Fetched::Failed { kind, message } => {
                let outcome = Outcome::error(kind);
                if self.maybe_retry(&lease, outcome).await? {
                    return Ok(());
                }
                let retries = self.retries_of(&url_text);
                self.count(&url_text, |s| {
                    s.pages += 1;
                    s.failed += 1;
                });
                self.finish(
                    &lease,
                    None,
                    Some(format!("{kind}: {message}")),
                    retries,
                    None,
                )?;
                self.driver.complete(lease.id(), outcome).await?;
            }
            Fetched::Response {
                status,
                headers,
                body,
                content_type,
                truncated,
                elapsed,
                ip,
                version,
            } => {
                let outcome = response_outcome(status, &headers);
                self.count(&url_text, |s| {
                    s.bytes += body.len() as u64;
                    s.rate_limited += u64::from(status == 429);
                });
                if let Some(warc) = &self.warc {
                    let mut ex = warc::Exchange::new(&url, status, &body);
                    ex.response_headers = headers.clone();
                    ex.request_headers = self.request_headers();
                    ex.truncated = truncated;
                    ex.ip = ip;
                    ex.version = version;
                    warc.write_exchange(&ex)
                        .map_err(|e| anyhow::anyhow!("cannot write the WARC file: {e}"))?;
                }
                if self
                    .maybe_requeue_throttled(&lease, status, outcome)
                    .await?
                    || (self.crawl.retry_http_codes.contains(&status)
                        && self.maybe_retry(&lease, outcome).await?)
                {
                    return Ok(());
                }
                let retries = self.retries_of(&url_text);
                let mut location = None;
                if (300..400).contains(&status) && status != 304 {
                    location = self.redirect(&lease, &url, &headers, outcome).await?;
                } else if (200..300).contains(&status) && is_html(content_type.as_deref(), &body) {
                    self.follow_links(&lease, &url, &headers, content_type.as_deref(), &body)
                        .await?;
                }
                self.count(&url_text, |s| {
                    s.pages += 1;
                    match status {
                        200..=299 => s.ok += 1,
                        300..=399 => s.redirects += 1,
                        _ => s.failed += 1,
                    }
                });
                let page = PageInfo {
                    status,
                    bytes: body.len() as u64,
                    content_type,
                    sha256: sha256_hex(&body),
                    elapsed_ms: elapsed.as_secs_f64() * 1e3,
                    truncated,
                };
                self.finish(&lease, Some(page), None, retries, location)?;
                self.driver.complete(lease.id(), outcome).await?;
            }
        }
        self.driver.commit().await?;
        let pages = self.pages.fetch_add(1, Ordering::Relaxed) + 1;
        if self.max_pages.is_some_and(|max| pages >= max) {
            lock(&self.limited).get_or_insert(StopReason::MaxPages);
            self.stopper.stop();
        }
        Ok(())
    }

    /// Queues the redirect's target as a new request; returns the target.
    async fn redirect(
        &self,
        lease: &Lease,
        url: &Url,
        headers: &[(String, Vec<u8>)],
        outcome: Outcome<'static>,
    ) -> anyhow::Result<Option<String>> {
        let Some(target) = headers
            .iter()
            .find(|(k, _)| k == "location")
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .and_then(|loc| url.join(loc.trim()).ok())
        else {
            return Ok(None);
        };
        let hops = hops(&lease.request);
        let host = target.host_str().unwrap_or_default();
        if hops < self.crawl.redirect_max_times
            && matches!(target.scheme(), "http" | "https")
            && allowed_domain(&self.allow, host)
        {
            let mut hop = Request::get(target.as_str())
                .callback(PAGE)
                .priority(
                    lease
                        .request
                        .priority
                        .saturating_add(self.crawl.redirect_priority_adjust),
                )
                .depth(lease.request.depth)
                .meta(
                    format!("redirects={}\nreferer={}", hops + 1, lease.request.url).into_bytes(),
                );
            if let Outcome::Response {
                header_delay: Some(wait),
                ..
            } = outcome
            {
                hop = hop.delay(wait.as_secs_f64().min(self.crawl.redirect_max_delay));
            }
            if let PushOutcome::Queued(_) = self.driver.push(hop).await? {
                self.count(target.as_str(), |s| s.queued += 1);
            }
        }
        Ok(Some(target.to_string()))
    }

    async fn follow_links(
        &self,
        lease: &Lease,
        url: &Url,
        headers: &[(String, Vec<u8>)],
        content_type: Option<&str>,
        body: &[u8],
    ) -> Res {
        let encoding = page::sniff_encoding(body, content_type);
        let (html, _, _) = encoding.decode(body);
        let x_robots: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k == "x-robots-tag")
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .collect();
        let found = page::extract(url, &html, encoding, &x_robots, &self.crawl.user_agent);
        let mut links = found.links;
        if self.ignore_robots_meta {
            links.extend(found.rel_nofollow);
        } else if found.nofollow {
            tracing::debug!(page = %url, "nofollow: links not followed");
            links.clear();
        }
        let children: Vec<Request> = links
            .into_iter()
            .filter(|link| self.wanted(link.as_str()))
            .map(|link| {
                Request::get(link.as_str())
                    .callback(PAGE)
                    .child_of(&lease.request)
                    .meta(format!("referer={url}").into_bytes())
            })
            .collect();
        if children.is_empty() {
            return Ok(());
        }
        let urls: Vec<Box<str>> = children.iter().map(|r| r.url.clone()).collect();
        let outcomes = self.driver.push_all(children).await?;
        for (url, outcome) in urls.iter().zip(outcomes) {
            if let PushOutcome::Queued(_) = outcome {
                self.count(url, |s| s.queued += 1);
            }
        }
        Ok(())
    }

    /// What the WARC request record says was sent: our User-Agent and extra headers.
    fn request_headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut h = vec![(
            "User-Agent".to_string(),
            self.crawl.user_agent.as_bytes().to_vec(),
        )];
        h.extend(
            self.extra_headers
                .iter()
                .map(|(k, v)| (k.clone(), v.as_bytes().to_vec())),
        );
        h
    }

    /// Queues the sitemaps robots.txt lists, within the allowed domains.
    async fn push_listed_sitemaps(&self, rules: &robots::Rules) -> Res {
        for sitemap in rules.sitemaps() {
            let host_ok = Url::parse(&sitemap).ok().is_some_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && allowed_domain(&self.allow, u.host_str().unwrap_or_default())
            });
            if host_ok {
                self.push_sitemap(&sitemap).await?;
            }
        }
        Ok(())
    }

    /// Queues a sitemap (deduplicated like any request).
    async fn push_sitemap(&self, url: &str) -> Res {
        let request = Request::get(url)
            .callback(SITEMAP)
            .priority(SITEMAP_PRIORITY)
            .start();
        if let PushOutcome::Queued(_) = self.driver.push(request).await? {
            self.count(url, |s| s.queued += 1);
        }
        Ok(())
    }

    /// A sitemap: its pages join the crawl as start requests (within the allowed
    /// domains and patterns), its child sitemaps are queued.
    async fn sitemap(&self, lease: Lease) -> Res {
        let url_text = lease.request.url.to_string();
        let fetched = self.fetch(&url_text).await;
        self.count(&url_text, |s| s.fetches += 1);
        let (outcome, body) = match fetched {
            Fetched::Failed { kind, .. } => {
                let outcome = Outcome::error(kind);
                if self.maybe_retry(&lease, outcome).await? {
                    return Ok(());
                }
                (outcome, None)
            }
            Fetched::Response {
                status,
                headers,
                body,
                ..
            } => {
                let outcome = response_outcome(status, &headers);
                self.count(&url_text, |s| s.bytes += body.len() as u64);
                if self
                    .maybe_requeue_throttled(&lease, status, outcome)
                    .await?
                    || (self.crawl.retry_http_codes.contains(&status)
                        && self.maybe_retry(&lease, outcome).await?)
                {
                    return Ok(());
                }
                (outcome, (200..300).contains(&status).then_some(body))
            }
        };
        self.retries_of(&url_text);
        match body.map(|b| sitemap::parse_sitemap(&b)) {
            Some(Ok(map)) => {
                if map.truncated {
                    tracing::warn!(sitemap = %url_text, "sitemap over 50,000 URLs: the rest is ignored");
                }
                match map.kind {
                    sitemap::SitemapKind::Index => {
                        for child in map.urls {
                            self.push_sitemap(child.as_str()).await?;
                        }
                    }
                    _ => {
                        let pages: Vec<Request> = map
                            .urls
                            .iter()
                            .filter(|u| self.wanted(u.as_str()))
                            .map(|u| Request::get(u.as_str()).callback(PAGE).start())
                            .collect();
                        let urls: Vec<Box<str>> = pages.iter().map(|r| r.url.clone()).collect();
                        let outcomes = self.driver.push_all(pages).await?;
                        for (u, o) in urls.iter().zip(outcomes) {
                            if let PushOutcome::Queued(_) = o {
                                self.count(u, |s| s.queued += 1);
                            }
                        }
                    }
                }
            }
            Some(Err(e)) => tracing::warn!(sitemap = %url_text, error = %e, "sitemap not read"),
            None => tracing::warn!(sitemap = %url_text, "sitemap could not be fetched"),
        }
        self.driver.complete(lease.id(), outcome).await?;
        Ok(self.driver.commit().await?)
    }

    fn finish(
        &self,
        lease: &Lease,
        page: Option<PageInfo>,
        error: Option<String>,
        retries: u32,
        location: Option<String>,
    ) -> Res {
        if let Some(out) = &self.out {
            let referer = meta_value(&lease.request, "referer");
            let final_url = match (&page, &location) {
                (Some(_), Some(target)) => Some(target.as_str()),
                (Some(_), None) => Some(&*lease.request.url),
                (None, _) => None,
            };
            let line = PageLine {
                url: &lease.request.url,
                referer: referer.as_deref(),
                final_url,
                elapsed_ms: page.as_ref().map(|p| p.elapsed_ms),
                sha256: page.as_ref().map(|p| p.sha256.as_str()),
                truncated: page.as_ref().is_some_and(|p| p.truncated),
                status: page.as_ref().map(|p| p.status),
                depth: lease.request.depth,
                fetched_at: output::rfc3339(std::time::SystemTime::now()),
                bytes: page.as_ref().map_or(0, |p| p.bytes),
                content_type: page.as_ref().and_then(|p| p.content_type.as_deref()),
                error: error.as_deref(),
                retries,
                location: location.as_deref(),
            };
            // Losing output silently is not an option: the error ends the crawl (the
            // lease is not completed, so a rerun fetches the page again).
            out.write(&line)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.path().display()))?;
        }
        Ok(())
    }
}

struct PageInfo {
    status: u16,
    bytes: u64,
    content_type: Option<String>,
    sha256: String,
    elapsed_ms: f64,
    truncated: bool,
}

fn sha256_hex(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A `key=value` line of a request's `meta` (the crawler's own: `redirects=N`,
/// `referer=URL`).
fn meta_value(request: &Request, key: &str) -> Option<String> {
    let meta = std::str::from_utf8(&request.extras.as_ref()?.meta).ok()?;
    meta.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

fn response_outcome(status: u16, headers: &[(String, Vec<u8>)]) -> Outcome<'static> {
    Outcome::response(
        status,
        headers.iter().map(|(k, v)| (k.as_bytes(), v.as_slice())),
        Some(unix_now()),
    )
}

fn is_html(content_type: Option<&str>, body: &[u8]) -> bool {
    match content_type {
        Some(ct) => {
            let ct = ct.to_ascii_lowercase();
            ct.starts_with("text/html") || ct.starts_with("application/xhtml")
        }
        None => {
            let head = &body[..body.len().min(512)];
            let head = String::from_utf8_lossy(head).to_ascii_lowercase();
            head.contains("<html") || head.contains("<!doctype html")
        }
    }
}
