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
//!   completed, and its links are pushed before that; each completion is flushed
//!   ([`DriverFor::flush`]) before the worker moves on. So a `kill -9` repeats at most
//!   the requests in flight, and a rerun with the same store resumes.

mod backend;
mod discovery;
mod fetch;
mod links;
mod output;
pub mod page;
mod prometheus;
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
    Frontier, FrontierError, Lease, PushOutcome, Request, Scheduling, Store, host_scope,
};
use polite_runtime_tokio::{Clock, DriverError, DriverFor, unix_now};
use polite_store_fs::{FsConfig, FsStore};
use polite_store_redis::{
    RedisConfig, RedisFrontier, RedisInfo, RedisPermit, RedisScopeStats, RedisStoreError,
    ShardConfig, ShardedRedisFrontier, TimeSource,
};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::Outcome;
use polite_throttle_core::{NotReady, ScopeUse, Timestamp};
use serde::Serialize;
use tokio::sync::watch;
use url::Url;

use backend::{CrawlFrontier, Live, Side, run_local, run_redis, side_call};
pub use backend::{RedisTarget, redis_target};
use fetch::{Fetched, client, is_html, response_outcome, sha256_hex};
pub use links::{allowed_domain, extract_links};
pub use output::{OutFile, PageLine};
use prometheus::describe_metrics;
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
    if let Some(target) = redis_target(&options.store)? {
        return run_redis(&target, options, stopper).await;
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
    driver.flush().await?;

    let progress = Progress::start(options.progress, resumed_with);
    let checkpointer = tokio::spawn(driver.clone().checkpoint_every(Duration::from_secs(5)));
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
    // Periodic checkpoints that kept failing (each one is logged) are a failure of the
    // crawl (the store needs attention).
    if checkpointer.is_finished() {
        if let Ok(Err(e)) = checkpointer.await {
            failure.get_or_insert(anyhow::anyhow!("checkpointing the store failed: {e}"));
        }
    } else {
        checkpointer.abort();
    }
    let rows = ctx.rows().await;
    progress.finish(&rows);
    let left = ctx.left().await;
    driver.close().await?;
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The redirect hops a request already made, from its `meta`.
fn hops(request: &Request) -> u32 {
    meta_value(request, "redirects")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl<B> Ctx<B>
where
    B: CrawlFrontier,
    B::StoreError: std::error::Error + Send + Sync + 'static,
    B::Closed: Send + 'static,
{
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

    async fn page(&self, lease: Lease) -> Res {
        let url_text = lease.request.url.to_string();
        let url = match Url::parse(&url_text) {
            Ok(url) => url,
            Err(e) => {
                self.finish(&lease, None, Some(format!("not a URL: {e}")), 0, None)?;
                self.driver.complete(lease.id(), Outcome::Cancelled).await?;
                return Ok(self.driver.flush().await?);
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
            return Ok(self.driver.flush().await?);
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
                return Ok(self.driver.flush().await?);
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
        self.driver.flush().await?;
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

/// A `key=value` line of a request's `meta` (the crawler's own: `redirects=N`,
/// `referer=URL`).
fn meta_value(request: &Request, key: &str) -> Option<String> {
    let meta = std::str::from_utf8(&request.extras.as_ref()?.meta).ok()?;
    meta.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}
