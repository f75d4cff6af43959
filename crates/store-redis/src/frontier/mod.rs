//! The client side of the shared frontier: encoding, fingerprints and group keys here,
//! every decision in the server-side script.
//!
//! Here: [`RedisFrontier`], its public value types, opening and destroying a crawl. The
//! rest: `config` ([`RedisConfig`] and its choices), `server_code` (installing and calling
//! the script), `reply` (reading its replies), `push` (encoding, deduplication, batches),
//! `poll` (leases out, outcomes back), `controls` (standalone permits and scope controls),
//! `inspect` (scope stats and counters) and `scheduling` (the `Scheduling` trait).

use std::collections::HashMap;
use std::sync::Arc;

use polite_frontier_core::{
    Codec, DupeFilterConfig, Fingerprinter, FrontierError, FrontierStats, Policy, SettingsFile,
};
use polite_throttle_core::{Settings, Timestamp};
use redis::Value;

use crate::error::RedisStoreError;
use crate::params::{all_params, script_settings};

mod config;
mod connection;
mod controls;
mod inspect;
mod poll;
mod push;
mod reply;
#[cfg(feature = "cluster")]
mod reshard;
mod scheduling;
mod server_code;
mod sharded;

pub use config::{RedisConfig, ScriptMode, TimeSource};
pub(crate) use connection::{Backend, Conn};
#[cfg(feature = "cluster")]
pub use reshard::move_partition;
pub(crate) use server_code::ServerCode;
#[cfg(feature = "testing")]
pub(crate) use server_code::function_library;
pub use sharded::{Placement, ShardConfig, ShardedRedisFrontier};

use push::{Dedup, bloom_shape};
use reply::{as_bytes, protocol, store_err};

type Result<T> = std::result::Result<T, FrontierError<RedisStoreError>>;

/// One scope's throttling state as the shared frontier keeps it (the fields of
/// [`polite_throttle_core::ScopeStats`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RedisScopeStats {
    /// Requests sent.
    pub sent: u64,
    /// Requests completed.
    pub done: u64,
    /// Backoff triggers (including `delay_scope`).
    pub triggers: u64,
    /// Requests in flight, by every worker.
    pub active: u32,
    /// The base delay in seconds.
    pub base_delay: f64,
    /// The current spacing delay in seconds.
    pub delay: f64,
    /// The current concurrency limit (0 = unlimited).
    pub concurrency: u32,
    /// The backoff level.
    pub level: u32,
    /// Earliest next send allowed by the spacing delay.
    pub next_allowed: Timestamp,
    /// Earliest next send allowed by a header delay or `delay_scope`.
    pub hard_until: Timestamp,
    /// Quota consumed in the current window.
    pub consumed: f64,
}

/// Counters of the whole crawl, by every worker.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct RedisInfo {
    /// Requests queued (ready or held by their scopes).
    pub queued: u64,
    /// Requests held by their own per-request delay.
    pub delayed: u64,
    /// Leases out.
    pub leased: u64,
    /// Throttled requests in flight (the global `concurrent_requests` count).
    pub in_flight: u64,
    /// Scope groups with requests queued, delayed or in flight.
    pub groups: u64,
    /// Standalone permits held ([`RedisFrontier::try_acquire`]), by every process; they
    /// count in [`in_flight`](Self::in_flight), not in [`leased`](Self::leased).
    pub permits: u64,
    /// The counters with Scrapy's names (store `redis`).
    pub stats: FrontierStats,
}

/// A permit held by a standalone request (one sent without the queue), taken with
/// [`RedisFrontier::try_acquire`] and handed back with [`RedisFrontier::release`].
///
/// It names a record in Redis, so any handle on the same crawl may release it; it expires
/// after [`RedisConfig::lease_timeout`] if nobody does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RedisPermit(u64);

/// A crawl frontier in Redis, shared by every worker (thread, process or machine) that
/// opens the same crawl on the same server: one queue, one duplicate filter, one
/// politeness budget.
///
/// Every decision runs in one server-side script, atomically: the duplicate check with
/// the enqueue, the choice of the next request with the reservation on all its scopes,
/// the completion with backoff. It makes the decisions the in-process
/// [`Frontier`](polite_frontier_core::Frontier) makes on the same timeline. See the crate
/// documentation for the key layout and operations.
pub struct RedisFrontier {
    client: Backend,
    conn: Option<Conn>,
    /// This partition's number and the crawl's partition count, when sharded.
    partition: Option<(u16, u16)>,
    code: Arc<ServerCode>,
    prefix: String,
    crawl: String,
    settings: Settings,
    config: RedisConfig,
    codec: Codec,
    callbacks: HashMap<Arc<str>, u32>,
    fingerprinter: Fingerprinter,
    dedup: Dedup,
    key: String,
    payload: Vec<u8>,
    in_flight: usize,
    timeout: Option<Timestamp>,
}

impl std::fmt::Debug for RedisFrontier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFrontier")
            .field("crawl", &self.crawl)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl RedisFrontier {
    /// Opens (creating on first use) the crawl `crawl` on the server at `url`
    /// (`redis://host:port/db`, `rediss://...`, `redis+unix:///path`).
    ///
    /// Every worker of a crawl must open it with the same settings: the first one stores
    /// them, the others are checked against them
    /// ([`RedisStoreError::SettingsMismatch`]).
    pub fn open(url: &str, crawl: &str, settings: Settings, config: RedisConfig) -> Result<Self> {
        let client = redis::Client::open(url)
            .map_err(|e| store_err(RedisStoreError::from_redis("open", e)))?;
        Self::with_client(client, crawl, settings, config)
    }

    /// [`open`](Self::open) with a configured client.
    pub fn with_client(
        client: redis::Client,
        crawl: &str,
        settings: Settings,
        config: RedisConfig,
    ) -> Result<Self> {
        let mut f = Self::open_on(Backend::Single(client), crawl, None, settings, config)?;
        // A sharded crawl of this name keeps its partition 0 on its first server.
        if f.exists(&format!("{{{crawl}:0}}:cfg"))? {
            return Err(store_err(RedisStoreError::Partitions {
                crawl: crawl.to_string(),
                detail: "it is sharded: open it with ShardedRedisFrontier and its partition count"
                    .into(),
            }));
        }
        f.init()?;
        Ok(f)
    }

    /// Whether `key` exists (checks made before a crawl is created).
    pub(crate) fn exists(&mut self, key: &str) -> Result<bool> {
        let conn = self.conn()?;
        redis::cmd("EXISTS")
            .arg(key)
            .query::<u64>(conn)
            .map(|n| n > 0)
            .map_err(|e| store_err(RedisStoreError::from_redis("open", e)))
    }

    /// A frontier on `client`, checked but not yet initialised ([`init`](Self::init)):
    /// the whole crawl, or its partition `partition.0` of `partition.1`.
    pub(crate) fn open_on(
        client: Backend,
        crawl: &str,
        partition: Option<(u16, u16)>,
        settings: Settings,
        config: RedisConfig,
    ) -> Result<Self> {
        settings.validate().map_err(FrontierError::Config)?;
        if config.frontier.policy != Policy::ThrottlingAware {
            return Err(store_err(RedisStoreError::Unsupported(
                "the slot-aware policy (use Policy::ThrottlingAware)",
            )));
        }
        let dedup = match config.frontier.dupefilter {
            DupeFilterConfig::Exact => Dedup::Exact,
            DupeFilterConfig::Disabled => Dedup::Off,
            DupeFilterConfig::Bloom {
                capacity,
                false_positive_rate,
            } => bloom_shape(capacity, false_positive_rate)?,
            _ => {
                return Err(store_err(RedisStoreError::Unsupported(
                    "this duplicate filter (use Exact, Bloom or Disabled)",
                )));
            }
        };
        if crawl.is_empty() || crawl.contains(['{', '}']) {
            return Err(store_err(RedisStoreError::Invalid {
                detail: format!("crawl name {crawl:?} must be non-empty without braces"),
            }));
        }
        let prefix = match partition {
            None => format!("{{{crawl}}}:"),
            Some((k, _)) => format!("{{{crawl}:{k}}}:"),
        };
        Ok(RedisFrontier {
            client,
            conn: None,
            partition,
            code: Arc::new(ServerCode::new(config.script)),
            prefix,
            crawl: crawl.to_string(),
            config,
            codec: Codec::new(),
            callbacks: HashMap::new(),
            fingerprinter: Fingerprinter::new(),
            dedup,
            key: String::new(),
            payload: Vec::new(),
            in_flight: 0,
            timeout: None,
            settings,
        })
    }

    /// Loads the server-side code and creates the crawl (or checks that the stored
    /// settings, and partition count, are ours).
    pub(crate) fn init(&mut self) -> Result<()> {
        let f = self;
        f.install()?;
        // What every worker must agree on: the settings and the duplicate filter's shape.
        // The settings as one table, the frontier's ordering keys included.
        let table = SettingsFile::new(f.settings.clone(), f.config.frontier.clone());
        let mut full = serde_json::json!({
            "settings": &table,
            "dupefilter": f.dedup.describe(),
        });
        if let Some((_, count)) = f.partition {
            full["partitions"] = count.into();
        }
        let full = serde_json::to_string(&full).map_err(|e| {
            store_err(RedisStoreError::Invalid {
                detail: format!("settings do not serialise: {e}"),
            })
        })?;
        let seed = f.settings.seed;
        let mut args: Vec<Vec<u8>> = vec![
            full.clone().into_bytes(),
            script_settings(&f.settings, &f.config.frontier)
                .map_err(store_err)?
                .into_bytes(),
            (seed >> 32).to_string().into_bytes(),
            (seed & 0xFFFF_FFFF).to_string().into_bytes(),
        ];
        for (name, params) in all_params(&f.settings) {
            args.push(name.into_bytes());
            args.push(params.into_bytes());
        }
        let stored = f.call("init", false, &args)?;
        let stored = as_bytes(&stored).ok_or_else(|| protocol("init", "no settings"))?;
        let theirs: serde_json::Value = serde_json::from_slice(stored).map_err(|_| {
            store_err(RedisStoreError::Corrupt {
                detail: format!("{}cfg: stored settings are not JSON", f.prefix),
            })
        })?;
        let ours: serde_json::Value = serde_json::from_str(&full).expect("just serialised");
        if theirs.get("partitions") != ours.get("partitions") {
            let count = |v: &serde_json::Value| {
                v.get("partitions")
                    .map_or("not sharded".to_string(), |n| format!("{n} partitions"))
            };
            return Err(store_err(RedisStoreError::Partitions {
                crawl: f.crawl.clone(),
                detail: format!(
                    "it was created with {}, opened with {}",
                    count(&theirs),
                    count(&ours)
                ),
            }));
        }
        if theirs != ours {
            return Err(store_err(RedisStoreError::SettingsMismatch {
                crawl: f.crawl.clone(),
            }));
        }
        if let Dedup::Bloom { bits, .. } = f.dedup {
            // A small filter is made at its full size at once: grown bit by bit, Redis
            // would reserve twice its size.
            let bytes = bits.div_ceil(8);
            if bytes < 1 << 20 {
                let key = format!("{}bf:0", f.prefix);
                let zeros = vec![0u8; bytes as usize];
                let conn = f.conn()?;
                redis::cmd("SET")
                    .arg(&key)
                    .arg(zeros)
                    .arg("NX")
                    .query::<Value>(conn)
                    .map_err(|e| store_err(RedisStoreError::from_redis("init", e)))?;
            }
        }
        Ok(())
    }

    /// The crawl's name; its keys are `{name}:*`.
    pub fn crawl(&self) -> &str {
        &self.crawl
    }

    /// The settings the crawl runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Deletes every key of the crawl (`{name}:*`), found with `SCAN` and removed with
    /// `UNLINK`; returns how many. Workers still running on the crawl will fail (it is no
    /// longer initialised).
    pub fn destroy(mut self) -> Result<u64> {
        self.destroy_keys()
    }

    /// [`destroy`](Self::destroy) without consuming: every key under this frontier's
    /// prefix.
    pub(crate) fn destroy_keys(&mut self) -> Result<u64> {
        let err = |e| store_err(RedisStoreError::from_redis("destroy", e));
        #[cfg(feature = "cluster")]
        if let Backend::Cluster(client) = &self.client {
            // The keys share one hash slot: list them on the primary that owns it.
            use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
            let mut conn = client.get_connection().map_err(err)?;
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&self.prefix)
                .query(&mut conn)
                .map_err(err)?;
            let owner = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            let mut n = 0;
            loop {
                let mut list = redis::cmd("CLUSTER");
                list.arg("GETKEYSINSLOT").arg(slot).arg(1000);
                let keys: Vec<Vec<u8>> =
                    redis::from_redis_value(conn.route_command(&list, owner.clone()).map_err(err)?)
                        .map_err(|_| reply::protocol("destroy", "not a list of keys"))?;
                let ours: Vec<Vec<u8>> = keys
                    .into_iter()
                    .filter(|k| k.starts_with(self.prefix.as_bytes()))
                    .collect();
                if ours.is_empty() {
                    return Ok(n);
                }
                let removed: u64 = redis::cmd("UNLINK")
                    .arg(ours)
                    .query(&mut conn)
                    .map_err(err)?;
                n += removed;
            }
        }
        let pattern = format!("{}*", self.prefix);
        let conn = self.conn()?;
        let mut cursor: u64 = 0;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(conn)
                .map_err(err)?;
            if !keys.is_empty() {
                let removed: u64 = redis::cmd("UNLINK").arg(keys).query(conn).map_err(err)?;
                n += removed;
            }
            if next == 0 {
                return Ok(n);
            }
            cursor = next;
        }
    }
}
