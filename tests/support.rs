//! Shared helpers for the workspace's cross-crate tests.

use std::path::Path;

use polite_frontier_core::Durability;
use polite_throttle_core::Settings;

/// Which store a kill -9 round uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillStore {
    /// `polite-store-sqlite`.
    Sqlite,
    /// `polite-store-fs`.
    Fs,
}

impl std::str::FromStr for KillStore {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sqlite" => Ok(KillStore::Sqlite),
            "fs" => Ok(KillStore::Fs),
            other => Err(format!("unknown store {other:?} (sqlite, fs)")),
        }
    }
}

impl KillStore {
    /// The name the child takes on its command line.
    pub fn name(self) -> &'static str {
        match self {
            KillStore::Sqlite => "sqlite",
            KillStore::Fs => "fs",
        }
    }
}

/// An opened store of any kind.
#[allow(clippy::large_enum_variant)] // one per test process
pub enum AnyStore {
    /// `polite-store-sqlite`.
    Sqlite(polite_store_sqlite::SqliteStore),
    /// `polite-store-fs`.
    Fs(polite_store_fs::FsStore),
}

/// Opens the store of `kind` at `path` (a file or a directory, as the store wants).
pub fn open_store(
    kind: KillStore,
    path: &Path,
    durability: Durability,
) -> Result<AnyStore, String> {
    match kind {
        KillStore::Sqlite => polite_store_sqlite::SqliteStore::open(
            path.join("crawl.sqlite3"),
            polite_store_sqlite::SqliteOptions::default().durability(durability),
        )
        .map(AnyStore::Sqlite)
        .map_err(|e| e.to_string()),
        KillStore::Fs => polite_store_fs::FsStore::open(
            path.join("crawl.fs"),
            polite_store_fs::FsConfig::with_durability(durability),
        )
        .map(AnyStore::Fs)
        .map_err(|e| e.to_string()),
    }
}

/// Settings where throttling never holds anything back.
pub fn open_settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s
}

/// The URL of request `id` in the kill -9 tests.
pub fn request_url(id: u64) -> String {
    format!("https://h{}.example.com/item/{id}", id % 7)
}

/// The id in a [`request_url`].
pub fn request_id(url: &str) -> Option<u64> {
    url.rsplit('/').next()?.parse().ok()
}

/// The sites of the Redis fleet test: `(host, pages)`.
pub const FLEET_SITES: [(&str, u32); 10] = [
    ("s0.test", 200),
    ("s1.test", 200),
    ("s2.test", 200),
    ("s3.test", 200),
    ("s4.test", 200),
    ("s5.test", 200),
    ("s6.test", 200),
    ("s7.test", 200),
    ("s8.test", 200),
    ("s9.test", 200),
];

/// Per-host client politeness in the fleet test: sends at least this far apart...
pub const FLEET_DELAY: f64 = 0.040;
/// ...and at most this many at once, across all workers together.
pub const FLEET_CONCURRENCY: u32 = 2;

/// The settings every worker of the Redis fleet test opens the crawl with (the server
/// listens on `port`, so host scopes carry it).
pub fn fleet_settings(port: u16) -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = 64;
    for (host, _) in FLEET_SITES {
        s = s.with_scope(
            format!("{host}:{port}"),
            polite_throttle_core::ScopeConfig::new()
                .delay(FLEET_DELAY)
                .concurrency(FLEET_CONCURRENCY),
        );
    }
    s
}

/// The links on page `n` of a site with `pages` pages (every page is reachable from 0).
pub fn fleet_links(n: u32, pages: u32) -> Vec<u32> {
    [n * 2 + 1, n * 2 + 2, (n * 7 + 3) % pages, n + 1]
        .into_iter()
        .filter(|&l| l < pages)
        .collect()
}

/// The `href` targets of a page the loopback test servers generate.
pub fn links(body: &str) -> Vec<String> {
    body.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect()
}

/// The host name of a `Host` header value, without its port (`""` when absent).
pub fn host_name(host_header: Option<&str>) -> String {
    host_header
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_string()
}
