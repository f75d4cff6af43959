//! `frontier inspect PATH`: what a stored frontier holds.
//!
//! The store is opened the way a crawl opens it (it takes the store's lock, so a store in
//! use by a running crawl is refused with a clear error) and read through
//! [`Store::recover`], the same path a resuming frontier takes: the counts are the ones a
//! resumed crawl would start from.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use polite_frontier_core::{EntryMeta, Fingerprint, RecoveryVisitor, Store, parse_group_key};
use polite_store_fs::{FsConfig, FsStore};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::ScopeSnapshot;
use serde::Serialize;

use crate::stores::StoreKind;

/// Arguments of `frontier inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The store: a SQLite file, a polite-store-fs directory, or a crawl shared through
    /// Redis (`redis://HOST:PORT/CRAWL`, opened with the crawl's settings: pass the same
    /// --config and -s as the crawl).
    pub path: PathBuf,
    /// Settings file of a Redis crawl (as given to `frontier crawl`).
    #[arg(long, env = "FRONTIER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Settings of a Redis crawl set on the crawl's command line (repeatable).
    #[arg(short = 's', long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Rows shown per table (all with --json).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

/// What a store holds.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// `sqlite` or `fs`.
    pub kind: String,
    /// The store's path.
    pub path: String,
    /// Requests in the store (queued or leased).
    pub requests: u64,
    /// Requests handed out and never acknowledged (delivered again on resume).
    pub leased: u64,
    /// Requests with a per-request delay.
    pub delayed: u64,
    /// Start requests.
    pub start_requests: u64,
    /// Requests per effective priority, highest first.
    pub by_priority: Vec<PriorityCount>,
    /// Requests per scope, most first (a request with several scopes counts in each).
    pub by_scope: Vec<ScopeCount>,
    /// Fingerprints in the duplicate filter.
    pub seen: u64,
    /// Callback names used by stored requests.
    pub callbacks: Vec<String>,
    /// The next sequence number the store would hand out.
    pub next_seq: u64,
    /// Saved throttle scope states (what a resumed crawl remembers), by scope.
    pub scope_states: Vec<ScopeState>,
}

/// Requests at one priority.
#[derive(Debug, Serialize)]
pub struct PriorityCount {
    /// The effective priority.
    pub priority: i32,
    /// Requests at it.
    pub requests: u64,
}

/// Requests of one scope.
#[derive(Debug, Serialize)]
pub struct ScopeCount {
    /// The scope (`-` for requests that bypass throttling).
    pub scope: String,
    /// Requests (queued or leased).
    pub requests: u64,
    /// Of which leased.
    pub leased: u64,
}

/// A saved scope state, in seconds and counts.
#[derive(Debug, Serialize)]
pub struct ScopeState {
    /// The scope.
    pub scope: String,
    /// Current delay between sends.
    pub delay: f64,
    /// Base delay (configured, set at run time, learned by rampup or from robots.txt).
    pub base_delay: f64,
    /// Concurrency limit (0 = unlimited).
    pub concurrency: u32,
    /// Backoff level (0 = not backing off).
    pub level: u32,
    /// Requests sent.
    pub sent: u64,
    /// Requests completed.
    pub done: u64,
    /// Backoff triggers.
    pub triggers: u64,
    /// The robots.txt Crawl-delay in force, if any.
    pub robots_delay: Option<f64>,
}

impl From<ScopeSnapshot> for ScopeState {
    fn from(s: ScopeSnapshot) -> Self {
        ScopeState {
            scope: s.scope,
            delay: s.delay,
            base_delay: s.base_delay,
            concurrency: s.concurrency,
            level: s.level,
            sent: s.sent,
            done: s.done,
            triggers: s.triggers,
            robots_delay: s.robots_delay,
        }
    }
}

#[derive(Default)]
struct Counter {
    report: Report,
    priorities: BTreeMap<i32, u64>,
    scopes: HashMap<String, (u64, u64)>,
    callbacks: BTreeMap<u32, String>,
    error: Option<String>,
}

impl<H> RecoveryVisitor<H> for Counter {
    fn callback(&mut self, id: u32, name: &str) {
        self.callbacks.insert(id, name.to_string());
    }

    fn fingerprint(&mut self, _: &Fingerprint) {
        self.report.seen += 1;
    }

    fn entry(&mut self, _seq: u64, meta: EntryMeta<'_>, _handle: H, leased: bool) {
        let r = &mut self.report;
        r.requests += 1;
        r.leased += u64::from(leased);
        r.delayed += u64::from(meta.not_before.is_some());
        r.start_requests += u64::from(meta.start);
        *self.priorities.entry(meta.priority).or_default() += 1;
        let mut count = |scope: &str| {
            let c = self.scopes.entry(scope.to_string()).or_default();
            c.0 += 1;
            c.1 += u64::from(leased);
        };
        if meta.group.is_empty() {
            count("-");
            return;
        }
        match parse_group_key(meta.group) {
            Ok(scopes) => scopes.iter().for_each(|(scope, _)| count(scope)),
            Err(e) => {
                self.error
                    .get_or_insert_with(|| format!("a stored scope group is damaged: {e}"));
            }
        }
    }

    fn scope_state(&mut self, snapshot: ScopeSnapshot) {
        self.report.scope_states.push(snapshot.into());
    }

    fn next_seq(&mut self, next: u64) {
        self.report.next_seq = next;
    }
}

/// Reads everything `store` holds.
pub fn report<S: Store>(store: &mut S) -> anyhow::Result<Report>
where
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let mut counter = Counter::default();
    store.recover(&mut counter)?;
    if let Some(error) = counter.error {
        anyhow::bail!(error);
    }
    let mut report = counter.report;
    report.kind = store.kind().to_string();
    report.by_priority = counter
        .priorities
        .into_iter()
        .rev()
        .map(|(priority, requests)| PriorityCount { priority, requests })
        .collect();
    let mut scopes: Vec<ScopeCount> = counter
        .scopes
        .into_iter()
        .map(|(scope, (requests, leased))| ScopeCount {
            scope,
            requests,
            leased,
        })
        .collect();
    scopes.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| a.scope.cmp(&b.scope))
    });
    report.by_scope = scopes;
    report.callbacks = counter.callbacks.into_values().collect();
    report.scope_states.sort_by(|a, b| a.scope.cmp(&b.scope));
    Ok(report)
}

/// Opens the store at `path` (which must exist) and reads it.
pub fn inspect_path(path: &Path) -> anyhow::Result<Report> {
    if !path.exists() {
        anyhow::bail!("{}: no such store", path.display());
    }
    let mut report = match StoreKind::detect(path)? {
        StoreKind::Sqlite => report(&mut SqliteStore::open(path, SqliteOptions::default())?)?,
        StoreKind::Fs => report(&mut FsStore::open(path, FsConfig::default())?)?,
    };
    report.path = path.display().to_string();
    Ok(report)
}

/// Runs `frontier inspect`.
pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    if let Some(target) = crate::crawl::redis_target(&args.path)? {
        return inspect_redis(&target, &args);
    }
    let report = inspect_path(&args.path)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write_text(&mut out, &report, args.top)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What a crawl shared through Redis holds, as every worker sees it.
#[derive(Debug, Serialize)]
pub struct RedisReport {
    /// The server (without the crawl's name).
    pub server: String,
    /// The crawl's name.
    pub crawl: String,
    /// Requests queued (ready or held by their scopes).
    pub queued: u64,
    /// Requests held by their own delay.
    pub delayed: u64,
    /// Leases out (delivered again if their worker dies).
    pub leased: u64,
    /// Requests in flight, fleet-wide.
    pub in_flight: u64,
    /// Scope groups with work.
    pub groups: u64,
    /// Standalone permits held (API clients sharing the budget).
    pub permits: u64,
    /// Requests pushed and queued, over the crawl's life.
    pub enqueued: u64,
    /// Requests handed out.
    pub dequeued: u64,
    /// Completions.
    pub acked: u64,
    /// Retries.
    pub retried: u64,
    /// Leases delivered again after their worker went silent.
    pub redelivered: u64,
    /// Duplicates dropped.
    pub filtered: u64,
    /// A sharded crawl's partitions, each with the same counters (the totals above are
    /// their sums); empty for a crawl on one server.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<RedisReport>,
}

impl RedisReport {
    fn new(server: &str, crawl: &str, info: &polite_store_redis::RedisInfo) -> Self {
        RedisReport {
            server: server.to_string(),
            crawl: crawl.to_string(),
            queued: info.queued,
            delayed: info.delayed,
            leased: info.leased,
            in_flight: info.in_flight,
            groups: info.groups,
            permits: info.permits,
            enqueued: info.stats.enqueued,
            dequeued: info.stats.dequeued,
            acked: info.stats.acked,
            retried: info.stats.retried,
            redelivered: info.stats.redelivered,
            filtered: info.stats.filtered,
            partitions: Vec::new(),
        }
    }

    fn write(&self, out: &mut impl Write, indent: &str) -> std::io::Result<()> {
        let r = self;
        writeln!(
            out,
            "{indent}  queued {} (delayed {}), leased {}, in flight {} (permits {}), groups {}",
            r.queued, r.delayed, r.leased, r.in_flight, r.permits, r.groups
        )?;
        writeln!(
            out,
            "{indent}  enqueued {}, dequeued {}, acked {}, retried {}, redelivered {}, duplicates dropped {}",
            r.enqueued, r.dequeued, r.acked, r.retried, r.redelivered, r.filtered
        )
    }
}

fn inspect_redis(
    target: &crate::crawl::RedisTarget,
    args: &InspectArgs,
) -> anyhow::Result<ExitCode> {
    let (url, name) = (&target.url, &target.name);
    let config = crate::config::Config::load(
        &crate::config::Config::default(),
        args.config.as_deref(),
        std::env::vars(),
    )?
    .with_overrides(&args.set)?;
    let redis_config = polite_store_redis::RedisConfig::default().frontier(config.frontier);
    let failed = |e| anyhow::anyhow!("{url} (crawl {name:?}): {e}");
    let report = match &target.sharded {
        None => {
            let mut frontier =
                polite_store_redis::RedisFrontier::open(url, name, config.settings, redis_config)
                    .map_err(failed)?;
            RedisReport::new(url, name, &frontier.info().map_err(failed)?)
        }
        Some((n, placement)) => {
            let mut frontier = polite_store_redis::ShardedRedisFrontier::open(
                placement,
                name,
                polite_store_redis::ShardConfig::new(*n),
                config.settings,
                redis_config,
            )
            .map_err(failed)?;
            let mut report = RedisReport::new(url, name, &frontier.info().map_err(failed)?);
            report.partitions = frontier
                .partition_info()
                .map_err(failed)?
                .iter()
                .enumerate()
                .map(|(k, i)| RedisReport::new(url, &format!("{name}:{k}"), i))
                .collect();
            report
        }
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let r = &report;
        if r.partitions.is_empty() {
            writeln!(out, "redis crawl {:?} on {}", r.crawl, r.server)?;
        } else {
            writeln!(
                out,
                "redis crawl {:?} over {} partitions (first server {})",
                r.crawl,
                r.partitions.len(),
                r.server
            )?;
        }
        r.write(&mut out, "")?;
        for (k, p) in r.partitions.iter().enumerate() {
            writeln!(out, "  partition {k}:")?;
            p.write(&mut out, "  ")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The human-readable report.
pub fn write_text(out: &mut impl Write, r: &Report, top: usize) -> std::io::Result<()> {
    writeln!(out, "{} store {}", r.kind, r.path)?;
    writeln!(
        out,
        "  requests {} (leased, delivered again on resume: {}; delayed: {}; start: {})",
        r.requests, r.leased, r.delayed, r.start_requests
    )?;
    writeln!(out, "  duplicate filter {} fingerprints", r.seen)?;
    writeln!(out, "  next sequence number {}", r.next_seq)?;
    if !r.callbacks.is_empty() {
        writeln!(out, "  callbacks {}", r.callbacks.join(", "))?;
    }
    if !r.by_priority.is_empty() {
        writeln!(out, "\n  {:>11}  {:>10}", "priority", "requests")?;
        for p in r.by_priority.iter().take(top) {
            writeln!(out, "  {:>11}  {:>10}", p.priority, p.requests)?;
        }
        more(out, r.by_priority.len(), top, "priorities")?;
    }
    if !r.by_scope.is_empty() {
        writeln!(
            out,
            "\n  {:<40}  {:>10}  {:>8}",
            "scope", "requests", "leased"
        )?;
        for s in r.by_scope.iter().take(top) {
            writeln!(
                out,
                "  {:<40}  {:>10}  {:>8}",
                s.scope, s.requests, s.leased
            )?;
        }
        more(out, r.by_scope.len(), top, "scopes")?;
    }
    if !r.scope_states.is_empty() {
        writeln!(
            out,
            "\n  {:<40}  {:>8}  {:>8}  {:>5}  {:>5}  {:>8}  {:>8}  {:>8}  {:>7}",
            "saved scope state",
            "delay",
            "base",
            "conc",
            "level",
            "sent",
            "done",
            "triggers",
            "robots"
        )?;
        for s in r.scope_states.iter().take(top) {
            let robots = s.robots_delay.map_or("-".to_string(), |d| format!("{d}s"));
            let conc = if s.concurrency == 0 {
                "∞".to_string()
            } else {
                s.concurrency.to_string()
            };
            writeln!(
                out,
                "  {:<40}  {:>7.3}s  {:>7.3}s  {:>5}  {:>5}  {:>8}  {:>8}  {:>8}  {:>7}",
                s.scope, s.delay, s.base_delay, conc, s.level, s.sent, s.done, s.triggers, robots
            )?;
        }
        more(out, r.scope_states.len(), top, "scope states")?;
    }
    Ok(())
}

fn more(out: &mut impl Write, len: usize, top: usize, what: &str) -> std::io::Result<()> {
    if len > top {
        writeln!(
            out,
            "  ... and {} more {what} (--top N or --json for all)",
            len - top
        )?;
    }
    Ok(())
}
