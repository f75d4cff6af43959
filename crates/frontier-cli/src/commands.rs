//! `frontier crawl` and `frontier demo`: arguments, signals, and the summary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use polite_throttle_core::{RampupConfig, ScopeConfig};

use crate::config::Config;
use crate::crawl::{CrawlOptions, CrawlSummary, StopReason, Stopper, crawl};
use crate::progress::{ProgressMode, write_summary};
use crate::sites::{DemoWeb, demo_sites};
use crate::stores::StoreKind;

/// Arguments of `frontier crawl`.
#[derive(Debug, clap::Args)]
pub struct CrawlArgs {
    /// Start URLs.
    #[arg(required = true, value_name = "SEED_URL")]
    pub seeds: Vec<String>,
    /// Follow links into this domain and its subdomains (repeatable; default: the seeds'
    /// hosts).
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub allow_domains: Vec<String>,
    /// Stop after this many pages in this run (the rest stays queued).
    #[arg(long)]
    pub max_pages: Option<u64>,
    /// Drop requests deeper than this (overrides `depth_limit`).
    #[arg(long)]
    pub depth_limit: Option<u32>,
    /// The frontier's store: a SQLite file, or a directory for the filesystem store.
    /// Rerunning with the same store resumes.
    #[arg(long, default_value = "frontier.sqlite", env = "FRONTIER_STORE")]
    pub store: PathBuf,
    /// Which store to create (default: detected from the path; a new path ending in `/`
    /// is a filesystem store).
    #[arg(long, value_enum)]
    pub store_kind: Option<StoreKind>,
    /// Settings file (TOML): docs/behaviour.md section 2 at the top level, crawler settings in
    /// `[crawl]`. `FRONTIER_<KEY>` variables override it.
    #[arg(long, env = "FRONTIER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Append one JSON line per finished URL here.
    #[arg(long, default_value = "pages.jsonl")]
    pub out: PathBuf,
    /// The User-Agent (overrides `crawl.user_agent`).
    #[arg(long)]
    pub user_agent: Option<String>,
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

fn report(summary: &CrawlSummary, store: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, summary)?;
        std::io::Write::write_all(&mut out, b"\n")?;
    } else {
        write_summary(&mut out, summary, &store.display().to_string())?;
    }
    Ok(match summary.stop {
        StopReason::Interrupted => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

/// Runs `frontier crawl`.
pub fn run_crawl(args: CrawlArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(&Config::default(), args.config.as_deref(), std::env::vars())?;
    if let Some(depth) = args.depth_limit {
        config.settings.depth_limit = depth;
    }
    if let Some(agent) = args.user_agent {
        config.crawl.user_agent = agent;
    }
    let options = CrawlOptions {
        seeds: args.seeds,
        allow_domains: args.allow_domains,
        max_pages: args.max_pages,
        config,
        store: args.store.clone(),
        store_kind: args.store_kind,
        out: Some(args.out),
        resolve: args.resolve,
        progress: args.progress,
    };
    runtime()?.block_on(async move {
        let stopper = Stopper::default();
        watch_signals(stopper.clone());
        let summary = crawl(options, stopper).await?;
        report(&summary, &args.store, args.json)
    })
}

/// Runs `frontier demo`.
pub fn run_demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.pages < 10 {
        anyhow::bail!("--pages must be at least 10");
    }
    let config = Config::load(&demo_config(), args.config.as_deref(), std::env::vars())?;
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
        match std::fs::remove_file(&out) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                anyhow::bail!("cannot remove {}: {e}", out.display())
            }
            _ => {}
        }
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
        report(&summary, &path, args.json)
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
