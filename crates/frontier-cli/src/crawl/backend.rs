//! Where the crawl's frontier lives: a local store, or a crawl shared through Redis.

use super::*;

/// A crawl shared through Redis, as `--store` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// The first server's URL, without the crawl's name.
    pub url: String,
    /// The crawl's name.
    pub name: String,
    /// For a sharded crawl: the partition count and where they live.
    pub sharded: Option<(u16, polite_store_redis::Placement)>,
}

/// `redis://HOST:PORT/CRAWL` (or `rediss://` for TLS): the server's URL and the crawl's
/// name; `None` for a file store. A user name and password in the URL are kept.
///
/// A sharded crawl adds `?partitions=N`, on this server alone or with more servers
/// (`&server=redis://HOST2:PORT2/`, repeated, in order); `redis+cluster://HOST:PORT/CRAWL?partitions=N`
/// (or `rediss+cluster://`) puts the partitions on the Redis Cluster that node belongs to.
pub fn redis_target(store: &std::path::Path) -> anyhow::Result<Option<RedisTarget>> {
    let Some(text) = store.to_str() else {
        return Ok(None);
    };
    let cluster = text.starts_with("redis+cluster://") || text.starts_with("rediss+cluster://");
    if !(text.starts_with("redis://") || text.starts_with("rediss://") || cluster) {
        return Ok(None);
    }
    let usage = |what: String| crate::UsageError::new(format!("--store {text:?}: {what}"));
    let url = Url::parse(text).map_err(|e| usage(e.to_string()))?;
    let name = url.path().trim_matches('/').to_string();
    if name.is_empty() || name.contains('/') {
        return Err(usage(
            "name the crawl after the address, as in redis://HOST:PORT/CRAWL".into(),
        )
        .into());
    }
    let mut partitions = None;
    let mut servers = Vec::new();
    for (k, v) in url.query_pairs() {
        match &*k {
            "partitions" => {
                let n: u16 = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    usage(format!("partitions={v} is not a count from 1 to 65535"))
                })?;
                partitions = Some(n);
            }
            "server" => {
                let s = Url::parse(&v).map_err(|e| usage(format!("server={v}: {e}")))?;
                if !matches!(s.scheme(), "redis" | "rediss") {
                    return Err(usage(format!("server={v} is not a redis:// URL")).into());
                }
                servers.push(s.to_string());
            }
            other => {
                return Err(usage(format!(
                    "unknown option {other:?} (partitions=N, server=URL)"
                ))
                .into());
            }
        }
    }
    let mut server = url.clone();
    server.set_path("/");
    server.set_query(None);
    let first = if cluster {
        // The cluster client takes plain redis:// node addresses.
        server.as_str().replacen("+cluster", "", 1)
    } else {
        server.to_string()
    };
    let sharded = match (partitions, cluster) {
        (None, false) if servers.is_empty() => None,
        (None, _) => {
            return Err(usage("a sharded crawl needs ?partitions=N".into()).into());
        }
        (Some(n), false) => {
            let mut all = vec![first.clone()];
            all.extend(servers);
            Some((n, polite_store_redis::Placement::Servers(all)))
        }
        (Some(n), true) => {
            if !servers.is_empty() {
                return Err(
                    usage("a cluster's nodes are found from one: drop server=".into()).into(),
                );
            }
            Some((
                n,
                polite_store_redis::Placement::Cluster(vec![first.clone()]),
            ))
        }
    };
    Ok(Some(RedisTarget {
        url: first,
        name,
        sharded,
    }))
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

impl CrawlFrontier for ShardedRedisFrontier {
    fn left(&self) -> Option<u64> {
        None
    }

    fn live(&self, _names: &[String]) -> Option<Vec<Option<Live>>> {
        None
    }
}

type RedisResult<T> = Result<T, FrontierError<RedisStoreError>>;

/// What the side connection does, on one crawl or a sharded one.
pub(super) trait SideOps: Send {
    fn info(&mut self) -> RedisResult<RedisInfo>;
    fn try_acquire(
        &mut self,
        scopes: &[ScopeUse<'_>],
        now: Timestamp,
    ) -> RedisResult<Result<RedisPermit, NotReady>>;
    fn release(
        &mut self,
        permit: RedisPermit,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> RedisResult<bool>;
    fn scope_stats_raw(&mut self, scope: &str) -> RedisResult<Option<RedisScopeStats>>;
}

macro_rules! side_ops {
    ($t:ty) => {
        impl SideOps for $t {
            fn info(&mut self) -> RedisResult<RedisInfo> {
                <$t>::info(self)
            }
            fn try_acquire(
                &mut self,
                scopes: &[ScopeUse<'_>],
                now: Timestamp,
            ) -> RedisResult<Result<RedisPermit, NotReady>> {
                <$t>::try_acquire(self, scopes, now)
            }
            fn release(
                &mut self,
                permit: RedisPermit,
                outcome: &Outcome<'_>,
                now: Timestamp,
            ) -> RedisResult<bool> {
                <$t>::release(self, permit, outcome, now)
            }
            fn scope_stats_raw(&mut self, scope: &str) -> RedisResult<Option<RedisScopeStats>> {
                <$t>::scope_stats_raw(self, scope)
            }
        }
    };
}
side_ops!(RedisFrontier);
side_ops!(ShardedRedisFrontier);

/// A second connection to a Redis crawl, for what needs `&mut` access off the driver:
/// live stats, and permits for robots.txt fetches (so they keep the fleet's spacing).
pub(super) type Side = Arc<Mutex<Box<dyn SideOps>>>;

pub(super) async fn side_call<T: Send + 'static>(
    side: &Side,
    f: impl FnOnce(&mut dyn SideOps) -> T + Send + 'static,
) -> anyhow::Result<T> {
    let side = side.clone();
    tokio::task::spawn_blocking(move || f(&mut **lock(&side)))
        .await
        .map_err(|e| anyhow::anyhow!("a Redis call failed: {e}"))
}

pub(super) async fn run_redis(
    target: &RedisTarget,
    options: CrawlOptions,
    stopper: Stopper,
) -> anyhow::Result<CrawlSummary> {
    let (url, name) = (&target.url, &target.name);
    let config = RedisConfig::default()
        .time(TimeSource::Server)
        .lease_timeout(Duration::from_secs_f64(options.config.crawl.lease_timeout))
        .frontier(options.config.frontier.clone());
    if let Some((n, placement)) = &target.sharded {
        let open = |what: &str| {
            ShardedRedisFrontier::open(
                placement,
                name,
                ShardConfig::new(*n),
                options.config.settings.clone(),
                config.clone(),
            )
            .map_err(|e| anyhow::anyhow!("{what} {url} (crawl {name:?}, {n} partitions): {e}"))
        };
        let frontier = open("cannot open the crawl on")?;
        let mut side = open("cannot open a second connection to")?;
        let resumed_with = side.info().map(|i| i.queued + i.delayed).unwrap_or(0);
        let side: Side = Arc::new(Mutex::new(Box::new(side)));
        return run(frontier, resumed_with, Some(side), options, stopper).await;
    }
    let open = |what: &str| {
        RedisFrontier::open(url, name, options.config.settings.clone(), config.clone())
            .map_err(|e| anyhow::anyhow!("{what} {url} (crawl {name:?}): {e}"))
    };
    let frontier = open("cannot open the crawl on")?;
    let mut side = open("cannot open a second connection to")?;
    let resumed_with = side.info().map(|i| i.queued + i.delayed).unwrap_or(0);
    let side: Side = Arc::new(Mutex::new(Box::new(side)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use polite_store_redis::Placement;

    fn target(s: &str) -> anyhow::Result<Option<RedisTarget>> {
        redis_target(std::path::Path::new(s))
    }

    #[test]
    fn redis_store_urls() {
        assert!(target("crawl.db").unwrap().is_none());
        let t = target("redis://10.0.0.5:6379/news").unwrap().unwrap();
        assert_eq!(
            (t.url.as_str(), t.name.as_str()),
            ("redis://10.0.0.5:6379/", "news")
        );
        assert_eq!(t.sharded, None);
        let t = target("redis://a/news?partitions=8&server=redis://b:7000/&server=rediss://c/")
            .unwrap()
            .unwrap();
        assert_eq!(
            t.sharded,
            Some((
                8,
                Placement::Servers(vec![
                    "redis://a/".into(),
                    "redis://b:7000/".into(),
                    "rediss://c/".into()
                ])
            ))
        );
        let t = target("redis+cluster://n1:7000/news?partitions=3")
            .unwrap()
            .unwrap();
        assert_eq!(
            t.sharded,
            Some((3, Placement::Cluster(vec!["redis://n1:7000/".into()])))
        );
        for (bad, why) in [
            ("redis://a/news?partitions=0", "partitions=0"),
            ("redis://a/news?partitions=x", "partitions=x"),
            ("redis://a/news?server=redis://b/", "needs ?partitions=N"),
            ("redis+cluster://a/news", "needs ?partitions=N"),
            (
                "redis://a/news?partitions=2&server=http://b/",
                "not a redis:// URL",
            ),
            ("redis://a/news?shards=2", "unknown option"),
            ("redis://a/", "name the crawl"),
        ] {
            let e = target(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
