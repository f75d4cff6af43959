//! `frontier crawl` and `frontier demo`: arguments, signals, and the summary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use polite_throttle_core::{RampupConfig, ScopeConfig};

use crate::UsageError;
use crate::config::Config;
use crate::crawl::{CrawlOptions, CrawlSummary, StopReason, Stopper, crawl};
use crate::progress::{ProgressMode, write_summary};
use crate::sites::{DemoWeb, demo_sites};
use crate::stores::StoreKind;

/// Arguments of `frontier crawl`.
#[derive(Debug, clap::Args)]
#[command(after_help = CRAWL_EXAMPLES)]
pub struct CrawlArgs {
    /// Start URLs.
    #[arg(required = true, value_name = "SEED_URL")]
    pub seeds: Vec<String>,
    /// Follow links into this domain and its subdomains (repeatable; default: the seeds'
    /// hosts). Requests left in a resumed store are checked again against these.
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domains: Vec<String>,
    /// Follow only links whose URL matches this regular expression (repeatable: any).
    #[arg(long, value_name = "REGEX")]
    pub include: Vec<String>,
    /// Never follow links whose URL matches this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub exclude: Vec<String>,
    /// Stop after this many pages in this run (the rest stays queued).
    #[arg(long)]
    pub max_pages: Option<u64>,
    /// Drop requests deeper than this (overrides `depth_limit`).
    #[arg(long)]
    pub depth_limit: Option<u32>,
    /// The crawl's name: the default store is NAME.frontier.sqlite and the default
    /// output NAME.pages.jsonl (default: the first seed's host).
    #[arg(long)]
    pub name: Option<String>,
    /// The frontier's store: a SQLite file, or a directory for the filesystem store.
    /// Rerunning with the same store resumes.
    #[arg(long, env = "FRONTIER_STORE")]
    pub store: Option<PathBuf>,
    /// Which store to create (default: detected from the path; a new path ending in `/`
    /// is a filesystem store).
    #[arg(long, value_enum)]
    pub store_kind: Option<StoreKind>,
    /// Start over: remove the store and the output first.
    #[arg(long)]
    pub fresh: bool,
    /// Settings file (TOML): docs/behaviour.md section 2 at the top level, crawler settings in
    /// `[crawl]`. `FRONTIER_<KEY>` variables override it.
    #[arg(long, env = "FRONTIER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Set any setting, over the file and the environment (repeatable):
    /// `download_delay=0.5`, `crawl.retry_times=0`, `scopes."example.com".delay=2`.
    #[arg(short = 's', long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Append one JSON line per finished URL here (`-` for standard output; default
    /// NAME.pages.jsonl).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The User-Agent (overrides `crawl.user_agent`).
    #[arg(long)]
    pub user_agent: Option<String>,
    /// Send this header with every request (repeatable), e.g. `Accept-Language: en`.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Send every request through this proxy (`http://`, `https://` or `socks5://`).
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// Keep cookies the sites set, and send them back (in memory, for this run).
    #[arg(long)]
    pub cookies: bool,
    /// Keep every page: write requests and responses to this WARC file (WARC/1.1, gzip
    /// per record; pages are then asked for uncompressed, so the bytes are the server's).
    #[arg(long, value_name = "FILE")]
    pub warc: Option<PathBuf>,
    /// Start a new WARC file (NAME-00001.warc.gz, ...) once one reaches this size.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub warc_max_size: u64,
    /// Seed the crawl with the pages of this sitemap (repeatable; sitemap indexes and
    /// gzip are read; robots.txt's `Sitemap:` lines are read too).
    #[arg(long, value_name = "URL")]
    pub sitemap: Vec<String>,
    /// Follow links even where rel=nofollow, a robots meta tag or X-Robots-Tag say not to.
    #[arg(long)]
    pub ignore_robots_meta: bool,
    /// Serve Prometheus metrics (text format, at /metrics or /) on this address while
    /// crawling, e.g. `127.0.0.1:9898`.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Send HOST to ADDR (like curl's --resolve), e.g. `example.test:127.0.0.1:8080`.
    #[arg(long, value_name = "HOST:ADDR:PORT", value_parser = parse_resolve)]
    pub resolve: Vec<(String, SocketAddr)>,
    /// How to show progress.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

const CRAWL_EXAMPLES: &str = "Examples:
  Crawl a site (store and output named after it; run again to resume):
    frontier crawl https://example.com/
  Keep what it fetches in a WARC archive, seeded from its sitemap too:
    frontier crawl --warc example.warc.gz --sitemap https://example.com/sitemap.xml https://example.com/
  A fleet: run this on any number of machines; they share one queue and one budget:
    frontier crawl --store redis://10.0.0.5:6379/example https://example.com/
    frontier inspect redis://10.0.0.5:6379/example
  The same crawl past one Redis: 8 partitions over two servers, or on a Redis Cluster:
    frontier crawl --store 'redis://10.0.0.5/example?partitions=8&server=redis://10.0.0.6/' https://example.com/
    frontier crawl --store 'redis+cluster://10.0.0.5:7000/example?partitions=8' https://example.com/
  Start over, 2 s between requests to each host, at most 500 pages:
    frontier crawl --fresh -s download_delay=2 --max-pages 500 https://example.com/
  Only the blog, as JSON lines on standard output:
    frontier crawl --include '^https://example\\.com/blog/' --out - https://example.com/blog/
  Through a proxy, with a header and cookies:
    frontier crawl --proxy http://127.0.0.1:3128 -H 'Accept-Language: en' --cookies https://example.com/
  More detail on what the throttle decides (backoff, Crawl-delay):
    frontier crawl -v https://example.com/

Exit status: 0 finished and no page failed; 1 some pages failed (see the summary) or
the crawl hit a fatal error; 2 usage or configuration error; 130 interrupted (run
again to resume).";

fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected NAME: VALUE"))?;
    let name = name.trim();
    reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|e| format!("{name:?} is not a header name: {e}"))?;
    reqwest::header::HeaderValue::from_str(value.trim())
        .map_err(|e| format!("{text:?}: the value is not a valid header value: {e}"))?;
    Ok((name.to_string(), value.trim().to_string()))
}

/// The name a crawl's files take by default: `--name`, or the first seed's host.
fn crawl_name(args: &CrawlArgs) -> anyhow::Result<String> {
    let raw = match &args.name {
        Some(name) => name.clone(),
        None => {
            let seed = &args.seeds[0];
            url::Url::parse(seed)
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
                .ok_or_else(|| {
                    UsageError::new(format!("seed {seed:?} is not an absolute URL with a host"))
                })?
        }
    };
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with('.') {
        return Err(UsageError::new(format!("--name {raw:?}: not usable as a file name")).into());
    }
    Ok(name)
}

fn parse_resolve(text: &str) -> Result<(String, SocketAddr), String> {
    let (host, addr) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected HOST:ADDR:PORT"))?;
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("{text:?}: {addr:?} is not an address with a port: {e}"))?;
    Ok((host.to_ascii_lowercase(), addr))
}

/// Arguments of `frontier demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Pages in the generated web (split over its five sites).
    #[arg(long, default_value_t = 1000)]
    pub pages: u32,
    /// Which store keeps the crawl.
    #[arg(long, value_enum, default_value_t = StoreKind::Sqlite)]
    pub store: StoreKind,
    /// Where the store lives (default `frontier-demo.sqlite` or `frontier-demo.fs/` in
    /// the current directory).
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Start over: remove the store and the output first.
    #[arg(long)]
    pub fresh: bool,
    /// Stop after this many pages (run again to resume).
    #[arg(long)]
    pub max_pages: Option<u64>,
    /// Settings file (TOML) over the demo's own settings.
    #[arg(long, env = "FRONTIER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The JSON-lines output (default: next to the store, `.jsonl`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// How to show progress.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Set any setting (repeatable), as `frontier crawl -s`.
    #[arg(short = 's', long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// The demo's settings before `--config` and the environment: fast local sites, a
/// rampup on the rate-limited API, short backoff windows so recovery shows within a
/// demo.
pub fn demo_config() -> Config {
    let mut config = Config::default();
    let s = &mut config.settings;
    s.concurrent_requests = 16;
    s.backoff_window = 5.0;
    s.backoff_min_delay = 0.5;
    s.backoff_max_delay = 10.0;
    s.scopes.insert(
        "books.test".into(),
        ScopeConfig::new().delay(0.02).concurrency(4),
    );
    s.scopes.insert(
        "shop.test".into(),
        ScopeConfig::new().delay(0.05).concurrency(2),
    );
    s.scopes
        .insert("slow.test".into(), ScopeConfig::new().concurrency(4));
    s.scopes.insert(
        "api.test".into(),
        ScopeConfig::new()
            .delay(0.1)
            .max_concurrency(4)
            .rampup(RampupConfig::default().min_delay(0.01)),
    );
    config.crawl.download_timeout = 10.0;
    config
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Ctrl-C (or SIGTERM) once: finish what is in flight and stop; twice: quit now (the
/// store is crash-safe, so nothing is lost either way).
fn watch_signals(stopper: Stopper) {
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            #[cfg(unix)]
            {
                let mut term =
                    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    {
                        Ok(s) => s,
                        Err(_) => return,
                    };
                tokio::select! {
                    r = tokio::signal::ctrl_c() => if r.is_err() { return },
                    _ = term.recv() => {}
                }
            }
            #[cfg(not(unix))]
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            count += 1;
            if count == 1 {
                eprintln!(
                    "\nstopping: finishing the requests in flight (Ctrl-C again to quit at once)"
                );
                stopper.stop();
            } else {
                eprintln!("quitting; the store keeps everything, run again to resume");
                std::process::exit(130);
            }
        }
    });
}

/// Prints the summary (on standard error when the pages go to standard output) and
/// picks the exit status: 130 interrupted, 1 when pages failed, 0 otherwise.
fn report(
    summary: &CrawlSummary,
    store: &Path,
    json: bool,
    pages_on_stdout: bool,
) -> anyhow::Result<ExitCode> {
    let mut out: Box<dyn std::io::Write> = if pages_on_stdout {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    if json {
        serde_json::to_writer_pretty(&mut out, summary)?;
        out.write_all(b"\n")?;
    } else {
        write_summary(&mut out, summary, &store.display().to_string())?;
    }
    Ok(match summary.stop {
        StopReason::Interrupted => ExitCode::from(130),
        _ if summary.failed > 0 => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// Runs `frontier crawl`.
pub fn run_crawl(args: CrawlArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(&Config::default(), args.config.as_deref(), std::env::vars())?;
    config = config.with_overrides(&args.set)?;
    if let Some(depth) = args.depth_limit {
        config.frontier.depth_limit = depth;
    }
    if let Some(agent) = args.user_agent.clone() {
        config.crawl.user_agent = agent;
    }
    let patterns = |list: &[String], flag: &str| -> anyhow::Result<Vec<regex::Regex>> {
        list.iter()
            .map(|p| {
                regex::Regex::new(p).map_err(|e| {
                    UsageError::new(format!("--{flag} {p:?} is not a regular expression: {e}"))
                        .into()
                })
            })
            .collect()
    };
    let include = patterns(&args.include, "include")?;
    let exclude = patterns(&args.exclude, "exclude")?;
    let name = crawl_name(&args)?;
    let store = args
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.frontier.sqlite")));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.pages.jsonl")));
    let to_stdout = out.as_os_str() == "-";
    if args.fresh {
        remove_store(&store)?;
        if !to_stdout {
            remove_file(&out)?;
        }
    }
    let options = CrawlOptions {
        seeds: args.seeds,
        allow_domains: args.allow_domains,
        include,
        exclude,
        max_pages: args.max_pages,
        config,
        store: store.clone(),
        store_kind: args.store_kind,
        out: Some(out),
        resolve: args.resolve,
        headers: args.headers,
        proxy: args.proxy,
        cookies: args.cookies,
        warc: args.warc,
        warc_max_size: Some(args.warc_max_size),
        sitemaps: args.sitemap,
        ignore_robots_meta: args.ignore_robots_meta,
        metrics: args.metrics,
        progress: args.progress,
    };
    runtime()?.block_on(async move {
        let stopper = Stopper::default();
        watch_signals(stopper.clone());
        let summary = crawl(options, stopper).await?;
        report(&summary, &store, args.json, to_stdout)
    })
}

fn remove_file(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            anyhow::bail!("cannot remove {}: {e}", path.display())
        }
        _ => Ok(()),
    }
}

/// Runs `frontier demo`.
pub fn run_demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.pages < 10 {
        return Err(UsageError::new("--pages must be at least 10").into());
    }
    let config = Config::load(&demo_config(), args.config.as_deref(), std::env::vars())?
        .with_overrides(&args.set)?;
    let path = args.path.clone().unwrap_or_else(|| match args.store {
        StoreKind::Sqlite => PathBuf::from("frontier-demo.sqlite"),
        StoreKind::Fs => PathBuf::from("frontier-demo.fs"),
    });
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| path.with_extension("jsonl"));
    if args.fresh {
        remove_store(&path)?;
        remove_file(&out)?;
    }
    runtime()?.block_on(async move {
        let web = DemoWeb::start(demo_sites(args.pages)).await?;
        eprintln!(
            "demo: {} sites with {} pages on {} ({}); store {} ({}), output {}",
            web.sites().len(),
            web.sites().iter().map(|s| s.pages).sum::<u32>(),
            web.addr(),
            web.sites()
                .iter()
                .map(|s| s.host.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            path.display(),
            args.store,
            out.display()
        );
        let options = CrawlOptions {
            seeds: web.seeds(),
            allow_domains: web.sites().into_iter().map(|s| s.host).collect(),
            max_pages: args.max_pages,
            config,
            store: path.clone(),
            store_kind: Some(args.store),
            out: Some(out),
            resolve: web.resolve(),
            progress: args.progress,
            ..CrawlOptions::default()
        };
        let stopper = Stopper::default();
        watch_signals(stopper.clone());
        let summary = crawl(options, stopper).await?;
        if summary.stop == StopReason::Finished && summary.pages == 0 && summary.resumed_with == 0 {
            eprintln!(
                "the crawl in {} is already complete; pass --fresh to start over",
                path.display()
            );
        }
        report(&summary, &path, args.json, false)
    })
}

fn remove_store(path: &Path) -> anyhow::Result<()> {
    let result = if path.is_dir() {
        // Only ever a polite-store-fs directory: never a directory with other files in it.
        for entry in std::fs::read_dir(path)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            let ours = name == "LOCK"
                || name.starts_with("seg-")
                || name.starts_with("seen.dat")
                || name.starts_with("scopes.dat");
            if !ours {
                anyhow::bail!(
                    "--fresh: {} holds {name}, which is not part of a frontier store; remove it yourself",
                    path.display()
                );
            }
        }
        std::fs::remove_dir_all(path)
    } else {
        let r = std::fs::remove_file(path);
        // SQLite's companions.
        for suffix in ["-wal", "-shm", ".lock"] {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        r
    };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            anyhow::bail!("cannot remove {}: {e}", path.display())
        }
        _ => Ok(()),
    }
}
