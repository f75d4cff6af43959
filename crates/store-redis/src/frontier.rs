//! The client side of the shared frontier: encoding, fingerprints and group keys here,
//! every decision in the server-side script.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use polite_frontier_core::{
    Codec, DecodeErrorKind, DupeFilterConfig, Fingerprinter, FrontierConfig, FrontierError,
    FrontierStats, Lease, LeaseId, Policy, Poll, PushOutcome, Request, Scheduling, group_key,
    parse_group_key,
};
use polite_throttle_core::{
    ConfigError, CrawlDelayDecision, NotReady, Outcome, QuotaReconcile, ScopeUse, Settings,
    Throttler, Timestamp, secs_to_duration,
};
use redis::Value;

use crate::error::RedisStoreError;
use crate::params::{all_params, kind_digit, script_settings};

/// The server-side code: loaded once per server as a function library (`FCALL`) or a
/// script (`EVALSHA`), and loaded again when the server has lost it (`NOSCRIPT`, or
/// "Function not found" after a restart, a failover or a flush).
const SCRIPT: &str = include_str!("frontier.lua");

/// How the server-side code is installed and called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptMode {
    /// A Redis 7 function library (`FUNCTION LOAD`, `FCALL`): the code's definitions run
    /// once when loaded, so each call costs only its own work. Falls back to
    /// [`Eval`](ScriptMode::Eval) on servers without functions.
    #[default]
    Function,
    /// A cached script (`SCRIPT LOAD`, `EVALSHA`): every call runs the whole script,
    /// definitions included (about 0.1 ms more per call).
    Eval,
}

/// The code in both forms, named after its SHA1 so that versions never mix.
#[derive(Clone)]
pub(crate) struct ServerCode {
    mode: ScriptMode,
    script: redis::Script,
    function: String,
    library: String,
}

/// The Redis 7 function library that registers `code` (the script's text) as `function`.
pub(crate) fn function_library(function: &str, code: &str) -> String {
    format!("#!lua name={function}\n{code}\nredis.register_function('{function}', main)\n")
}

impl ServerCode {
    /// The function name this build's script is registered under.
    #[cfg(feature = "testing")]
    pub(crate) fn function_name() -> String {
        ServerCode::new(ScriptMode::Function).function
    }

    fn new(mode: ScriptMode) -> Self {
        let script = redis::Script::new(&format!("{SCRIPT}\nreturn main(KEYS, ARGV)\n"));
        let function = format!("polite_frontier_{}", &script.get_hash()[..16]);
        let library = function_library(&function, SCRIPT);
        ServerCode {
            mode,
            script,
            function,
            library,
        }
    }

    fn command(&self, prefix: &str, op: &str, time: &[u8], args: &[Vec<u8>]) -> redis::Cmd {
        let mut cmd = match self.mode {
            ScriptMode::Function => {
                let mut c = redis::cmd("FCALL");
                c.arg(&self.function);
                c
            }
            ScriptMode::Eval => {
                let mut c = redis::cmd("EVALSHA");
                c.arg(self.script.get_hash());
                c
            }
        };
        cmd.arg(1).arg(prefix).arg(op).arg(time);
        for a in args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// [`command`](Self::command) with one argument.
    fn command_with(&self, prefix: &str, op: &str, time: &[u8], arg: &[u8]) -> redis::Cmd {
        let mut cmd = self.command(prefix, op, time, &[]);
        cmd.arg(arg);
        cmd
    }

    fn load(&self, conn: &mut redis::Connection) -> redis::RedisResult<()> {
        match self.mode {
            ScriptMode::Function => redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(&self.library)
                .query::<Value>(conn)
                .map(|_| ()),
            ScriptMode::Eval => self.script.prepare_invoke().load(conn).map(|_| ()),
        }
    }

    /// Whether the server lost the code (restart, failover, flush).
    fn is_missing(e: &redis::RedisError) -> bool {
        e.code() == Some("NOSCRIPT") || e.to_string().contains("Function not found")
    }
}

type Result<T> = std::result::Result<T, FrontierError<RedisStoreError>>;

/// Where the frontier's time comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeSource {
    /// The `now` passed to each call (a fake clock in tests, or a clock all workers
    /// share). Instants are nanoseconds from the epoch the callers chose.
    #[default]
    Caller,
    /// The Redis server's clock (`TIME`), counted from the crawl's creation: every worker
    /// sees the same time whatever its own clock says. Instants returned to a caller are
    /// mapped onto the `now` it passed (its own clock), so it can sleep on them.
    Server,
}

/// Options of a [`RedisFrontier`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// Where time comes from.
    pub time: TimeSource,
    /// A lease not completed, retried or extended within this time is delivered again
    /// (its worker is presumed dead) and its concurrency slots are freed.
    pub lease_timeout: Duration,
    /// How long a worker that found nothing to do (everything blocked on requests in
    /// flight elsewhere, or nothing queued) waits before it looks again: completions by
    /// other processes do not wake it.
    pub recheck: Duration,
    /// How many expired leases one poll redelivers at most.
    pub redeliver_batch: u32,
    /// Requests per script call in [`push_all`](RedisFrontier::push_all) (the calls are
    /// pipelined).
    pub push_batch: usize,
    /// How the server-side code is installed.
    pub script: ScriptMode,
    /// Frontier options: `policy` must be [`Policy::ThrottlingAware`]; the duplicate
    /// filter is exact (binary 64-bit fingerprints in a Redis set), a Bloom filter (bits
    /// in Redis strings, checked and set atomically with the enqueue) or disabled.
    pub frontier: FrontierConfig,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            time: TimeSource::Caller,
            lease_timeout: Duration::from_secs(300),
            recheck: Duration::from_millis(200),
            redeliver_batch: 64,
            push_batch: 1000,
            script: ScriptMode::Function,
            frontier: FrontierConfig::default(),
        }
    }
}

impl RedisConfig {
    /// Sets where the time of every decision comes from.
    #[must_use]
    pub fn time(mut self, value: TimeSource) -> Self {
        self.time = value;
        self
    }
    /// Sets how long a lease stays out before it is delivered again.
    #[must_use]
    pub fn lease_timeout(mut self, value: Duration) -> Self {
        self.lease_timeout = value;
        self
    }
    /// Sets how often a waiting driver asks again when nothing wakes it.
    #[must_use]
    pub fn recheck(mut self, value: Duration) -> Self {
        self.recheck = value;
        self
    }
    /// Sets how many expired leases one call takes back.
    #[must_use]
    pub fn redeliver_batch(mut self, value: u32) -> Self {
        self.redeliver_batch = value;
        self
    }
    /// Sets how many requests one push call sends.
    #[must_use]
    pub fn push_batch(mut self, value: usize) -> Self {
        self.push_batch = value;
        self
    }
    /// Sets how the server-side script is called.
    #[must_use]
    pub fn script(mut self, value: ScriptMode) -> Self {
        self.script = value;
        self
    }
    /// Sets the frontier's own configuration (policy, duplicate filter).
    #[must_use]
    pub fn frontier(mut self, value: FrontierConfig) -> Self {
        self.frontier = value;
        self
    }
}

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
    client: redis::Client,
    conn: Option<redis::Connection>,
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

fn store_err(e: RedisStoreError) -> FrontierError<RedisStoreError> {
    FrontierError::Store(e)
}

fn protocol(op: &'static str, detail: impl Into<String>) -> FrontierError<RedisStoreError> {
    FrontierError::Store(RedisStoreError::Protocol {
        op,
        detail: detail.into(),
    })
}

fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        other => std::str::from_utf8(as_bytes(other)?).ok()?.parse().ok(),
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => {
            let f = as_f64(other)?;
            (f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The error the in-process throttler gives for the same invalid value (same key,
/// same message): asked of a scratch throttler.
fn config_error(op: &str, value: f64) -> ConfigError {
    let mut t = Throttler::new(Settings::default(), Timestamp::ZERO).expect("default settings");
    let now = Timestamp::ZERO;
    let r = match op {
        "delay_scope" => t.delay_scope("x", value, now),
        "delay" => t.set_scope_delay("x", value, now),
        "crawl_delay" => t.handle_crawl_delay("x", value, now).map(|_| ()),
        "c" => t.reconcile_quota("x", QuotaReconcile::Consumed(value), now),
        _ => t.reconcile_quota("x", QuotaReconcile::Remaining(value), now),
    };
    r.expect_err("an invalid value")
}

fn check_secs(op: &str, secs: f64) -> Result<()> {
    if secs.is_finite() && secs >= 0.0 {
        Ok(())
    } else {
        Err(FrontierError::Config(config_error(op, secs)))
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
        let mut f = RedisFrontier {
            client,
            conn: None,
            code: Arc::new(ServerCode::new(config.script)),
            prefix: format!("{{{crawl}}}:"),
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
        };
        f.install()?;
        // What every worker must agree on: the settings and the duplicate filter's shape.
        let full = serde_json::to_string(&serde_json::json!({
            "settings": &f.settings,
            "dupefilter": f.dedup.describe(),
        }))
        .map_err(|e| {
            store_err(RedisStoreError::Invalid {
                detail: format!("settings do not serialise: {e}"),
            })
        })?;
        let seed = f.settings.seed;
        let mut args: Vec<Vec<u8>> = vec![
            full.clone().into_bytes(),
            script_settings(&f.settings)
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
        Ok(f)
    }

    /// The crawl's name; its keys are `{name}:*`.
    pub fn crawl(&self) -> &str {
        &self.crawl
    }

    /// The settings the crawl runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn conn(&mut self) -> Result<&mut redis::Connection> {
        if self.conn.is_none() {
            let c = self
                .client
                .get_connection()
                .map_err(|e| store_err(RedisStoreError::from_redis("connect", e)))?;
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("just connected"))
    }

    fn time_arg(&self, now: Timestamp) -> Vec<u8> {
        match self.config.time {
            TimeSource::Caller => now.as_nanos().to_string().into_bytes(),
            TimeSource::Server => b"server".to_vec(),
        }
    }

    /// Runs one operation of the script. `now` is `None` for the ones that need no time.
    /// Loads the server-side code; a server without functions gets the script form.
    fn install(&mut self) -> Result<()> {
        let code = self.code.clone();
        let conn = self.conn()?;
        match code.load(conn) {
            Ok(()) => Ok(()),
            Err(e)
                if code.mode == ScriptMode::Function
                    && (e.to_string().contains("unknown command")
                        || e.code() == Some("NOPERM")) =>
            {
                tracing::debug!(error = %e, "no Redis functions here: using EVALSHA");
                self.code = Arc::new(ServerCode::new(ScriptMode::Eval));
                let code = self.code.clone();
                let conn = self.conn()?;
                code.load(conn)
                    .map_err(|e| store_err(RedisStoreError::from_redis("load", e)))
            }
            Err(e) => Err(store_err(RedisStoreError::from_redis("load", e))),
        }
    }

    /// Runs one operation of the script. `now` is `None` for the ones that need no time.
    fn call_at(
        &mut self,
        op: &'static str,
        now: Option<Timestamp>,
        args: &[Vec<u8>],
    ) -> Result<Value> {
        let time = now.map_or_else(|| b"-".to_vec(), |n| self.time_arg(n));
        let cmd = self.code.command(&self.prefix, op, &time, args);
        let code = self.code.clone();
        let conn = self.conn()?;
        let mut result = cmd.query::<Value>(conn);
        if let Err(e) = &result
            && ServerCode::is_missing(e)
        {
            result = code.load(conn).and_then(|()| cmd.query::<Value>(conn));
        }
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                let e = RedisStoreError::from_redis(op, e);
                if e.is_connection_error() {
                    self.conn = None;
                }
                Err(store_err(e))
            }
        }
    }

    fn call(&mut self, op: &'static str, timed: bool, args: &[Vec<u8>]) -> Result<Value> {
        self.call_at(op, timed.then_some(Timestamp::ZERO), args)
    }

    /// Maps an instant of the script's clock onto the caller's.
    fn to_caller(&self, t: f64, server_now: f64, now: Timestamp) -> Timestamp {
        let t = if t.is_finite() { t.max(0.0) } else { f64::MAX };
        match self.config.time {
            TimeSource::Caller => Timestamp::from_nanos(t.min(u64::MAX as f64) as u64),
            TimeSource::Server => {
                let ahead = (t - server_now).max(0.0);
                now + Duration::from_nanos(ahead.min(u64::MAX as f64) as u64)
            }
        }
    }

    /// The crawl-wide number of a callback name (asking the server the first time).
    fn callback_id(&mut self, name: &Arc<str>) -> Result<()> {
        if self.callbacks.contains_key(name) {
            return Ok(());
        }
        let v = self.call("callback", false, &[name.as_bytes().to_vec()])?;
        let id = as_u64(&v)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| protocol("callback", "no number"))?;
        self.codec.callbacks_mut().restore(id, name).map_err(|e| {
            store_err(RedisStoreError::Corrupt {
                detail: e.to_string(),
            })
        })?;
        self.callbacks.insert(name.clone(), id);
        Ok(())
    }

    /// Encodes one request for the `push` operation at the end of `batch` (the script's
    /// `PUSHFMT`: group key, the scopes' kinds, fingerprint, priority, flags, delay,
    /// depth, body); `false` if it is not pushed (too deep).
    fn encode_push(&mut self, request: &Request, batch: &mut Vec<u8>) -> Result<bool> {
        if self.settings.depth_limit > 0 && request.depth > self.settings.depth_limit {
            return Ok(false);
        }
        let delay_ns = match request.delay {
            None => None,
            Some(d) if d.is_finite() && d >= 0.0 => Some(nanos(secs_to_duration(d))),
            Some(d) => {
                return Err(FrontierError::InvalidRequest(invalid(
                    request,
                    format!("delay must be a finite number of seconds >= 0, got {d}"),
                )));
            }
        };
        let mut key = std::mem::take(&mut self.key);
        if request.dont_throttle {
            key.clear();
        } else if let Err(e) = group_key(request, &mut key) {
            self.key = key;
            return Err(FrontierError::InvalidRequest(e));
        }
        let out = self.encode_with_key(request, &key, delay_ns, batch);
        self.key = key;
        out.map(|()| true)
    }

    fn encode_with_key(
        &mut self,
        request: &Request,
        key: &str,
        delay_ns: Option<u64>,
        batch: &mut Vec<u8>,
    ) -> Result<()> {
        let kinds: String = if key.is_empty() {
            String::new()
        } else {
            parse_group_key(key)
                .map_err(FrontierError::CorruptGroup)?
                .iter()
                .map(|(n, _)| {
                    if self.settings.scopes.contains_key(*n) {
                        'N'
                    } else {
                        kind_digit(n)
                    }
                })
                .collect()
        };
        // A pushed fingerprint carries one 5-byte bit position per hash.
        let mut fp = [0u8; 1 + 5 * polite_frontier_core::BloomFilter::MAX_HASHES as usize];
        let fp_len = if request.dont_filter || self.dedup == Dedup::Off {
            0
        } else {
            let f = self
                .fingerprinter
                .fingerprint(request.method.as_str(), &request.url, request.body_bytes())
                .map_err(|e| FrontierError::InvalidRequest(invalid(request, e.to_string())))?;
            match self.dedup {
                Dedup::Bloom { bits, hashes } => {
                    // 'B', then the bit positions, 5 bytes each.
                    fp[0] = b'B';
                    let mut at = 1;
                    for pos in bloom_positions(f.prefix64(), bits, hashes) {
                        fp[at..at + 5].copy_from_slice(&pos.to_be_bytes()[3..]);
                        at += 5;
                    }
                    at
                }
                _ => {
                    fp[..8].copy_from_slice(&f.prefix64().to_be_bytes());
                    8
                }
            }
        };
        if let Some(cb) = &request.callback {
            let cb = cb.clone();
            self.callback_id(&cb)?;
        }
        let priority = request
            .priority
            .saturating_sub((request.depth as i32).saturating_mul(self.settings.depth_priority));
        let explicit = request.scopes.as_ref().is_some_and(|s| !s.is_empty());
        let host = (!explicit && !request.dont_throttle).then_some(key);
        let mut flags = 0u8;
        if request.start {
            flags |= 1;
        }
        if request.dont_track {
            flags |= 2;
        }
        self.payload.clear();
        let fresh = self
            .codec
            .encode(request, host, &mut self.payload)
            .map_err(FrontierError::Encode)?;
        debug_assert!(
            fresh.is_none(),
            "callbacks are interned with the server first"
        );
        let too_long = |what: &str| {
            FrontierError::InvalidRequest(invalid(request, format!("{what} is too long")))
        };
        let key_len = u32::try_from(key.len()).map_err(|_| too_long("the group key"))?;
        let kinds_len = u16::try_from(kinds.len()).map_err(|_| too_long("the list of scopes"))?;
        let body_len =
            u32::try_from(1 + self.payload.len()).map_err(|_| too_long("the request"))?;
        batch.extend_from_slice(&key_len.to_be_bytes());
        batch.extend_from_slice(key.as_bytes());
        batch.extend_from_slice(&kinds_len.to_be_bytes());
        batch.extend_from_slice(kinds.as_bytes());
        batch.push(fp_len as u8);
        batch.extend_from_slice(&fp[..fp_len]);
        batch.extend_from_slice(&priority.to_be_bytes());
        batch.push(u8::from(request.start) | if delay_ns.is_some() { 2 } else { 0 });
        // The script's times are doubles: the same rounding as its `tonumber` of the
        // decimal nanoseconds.
        batch.extend_from_slice(&(delay_ns.unwrap_or(0) as f64).to_be_bytes());
        batch.extend_from_slice(&request.depth.to_be_bytes());
        batch.extend_from_slice(&body_len.to_be_bytes());
        batch.push(flags);
        batch.extend_from_slice(&self.payload);
        Ok(())
    }

    /// Queues a request unless it is a duplicate (checked and marked in the same atomic
    /// step) or deeper than `depth_limit`.
    pub fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome> {
        Ok(self.push_all(std::slice::from_ref(request), now)?.remove(0))
    }

    /// Queues many requests: batches of [`RedisConfig::push_batch`] per script call, the
    /// calls pipelined in one round trip. Each request is atomic on its own (a
    /// connection lost midway leaves a prefix of the batch queued; pushing it again is
    /// safe, the duplicate filter drops what made it).
    pub fn push_all(&mut self, requests: &[Request], now: Timestamp) -> Result<Vec<PushOutcome>> {
        let mut outcomes = vec![PushOutcome::TooDeep; requests.len()];
        // Per script call: the requests' indexes and their packed arguments.
        let mut batches: Vec<(Vec<usize>, Vec<u8>)> = Vec::new();
        let per = self.config.push_batch.max(1);
        let mut too_deep = 0u64;
        for (i, r) in requests.iter().enumerate() {
            if batches.last().is_none_or(|b| b.0.len() >= per) {
                batches.push((Vec::new(), Vec::new()));
            }
            let b = batches.last_mut().expect("just pushed");
            if self.encode_push(r, &mut b.1)? {
                b.0.push(i);
            } else {
                too_deep += 1;
            }
        }
        batches.retain(|b| !b.0.is_empty());
        if too_deep > 0 {
            self.call("too_deep", true, &[too_deep.to_string().into_bytes()])?;
        }
        if batches.is_empty() {
            return Ok(outcomes);
        }
        let replies = self.pipelined_push(&batches, now)?;
        for (n, ((idx, _), reply)) in batches.iter().zip(replies).enumerate() {
            let what = |detail: &str| {
                protocol(
                    "push",
                    format!(
                        "reply {} of {} in the pipeline: {detail}",
                        n + 1,
                        batches.len()
                    ),
                )
            };
            let Value::Array(items) = reply else {
                return Err(what("not an array"));
            };
            if items.len() != idx.len() {
                return Err(what("wrong number of results"));
            }
            for (&i, item) in idx.iter().zip(items) {
                outcomes[i] = match item {
                    Value::Int(-1) => PushOutcome::Duplicate,
                    other => PushOutcome::Queued(LeaseId(
                        as_u64(&other).ok_or_else(|| what("bad sequence number"))?,
                    )),
                };
            }
        }
        Ok(outcomes)
    }

    fn pipelined_push(
        &mut self,
        batches: &[(Vec<usize>, Vec<u8>)],
        now: Timestamp,
    ) -> Result<Vec<Value>> {
        let time = self.time_arg(now);
        let mut pipe = redis::pipe();
        for (_, blob) in batches {
            pipe.add_command(self.code.command_with(&self.prefix, "push", &time, blob));
        }
        let code = self.code.clone();
        let conn = self.conn()?;
        let mut result = pipe.query::<Vec<Value>>(conn);
        if let Err(e) = &result
            && ServerCode::is_missing(e)
        {
            // Nothing ran: every command of the pipeline failed the same way.
            result = code
                .load(conn)
                .and_then(|()| pipe.query::<Vec<Value>>(conn));
        }
        result.map_err(|e| {
            let e = RedisStoreError::from_pipeline("push", batches.len(), e);
            if e.is_connection_error() {
                self.conn = None;
            }
            store_err(e)
        })
    }

    fn decode(&mut self, seq: u64, body: &[u8], key: &str) -> Result<Request> {
        for _ in 0..2 {
            match self.codec.decode(body, Some(key)) {
                Ok(r) => return Ok(r),
                Err(e) => {
                    if let DecodeErrorKind::UnknownCallback(id) = e.kind() {
                        let v =
                            self.call("callback_name", false, &[id.to_string().into_bytes()])?;
                        if let Some(name) = as_bytes(&v).and_then(|b| std::str::from_utf8(b).ok()) {
                            let name: Arc<str> = Arc::from(name);
                            if self.codec.callbacks_mut().restore(id, &name).is_ok() {
                                self.callbacks.insert(name, id);
                                continue;
                            }
                        }
                    }
                    return Err(FrontierError::Corrupt {
                        lease: LeaseId(seq),
                        source: e,
                    });
                }
            }
        }
        unreachable!("a known callback decodes or fails for another reason")
    }

    /// The next request that may be sent at `now`, leased (for
    /// [`RedisConfig::lease_timeout`]); or until when nothing may go. Expired leases of
    /// other workers are delivered again first.
    ///
    /// A payload that does not decode gives [`FrontierError::Corrupt`]; its lease stays
    /// out: [`complete`](Self::complete) drops it.
    pub fn poll(&mut self, now: Timestamp) -> Result<Poll> {
        let (mut leases, why) = self.poll_inner(now, 1)?;
        match leases.pop() {
            Some(lease) => lease.map(Poll::Ready),
            None => Ok(why),
        }
    }

    /// Up to `max` leases in one round trip: what `max` polls at `now`, one after the
    /// other, would hand out (a worker with many fetch slots). Empty when nothing may go;
    /// then [`poll_timeout`](Self::poll_timeout) says when to look again. A lease whose
    /// payload does not decode comes back as [`FrontierError::Corrupt`] in its place.
    pub fn poll_batch(&mut self, now: Timestamp, max: usize) -> Result<Vec<Result<Lease>>> {
        Ok(self.poll_inner(now, max.max(1))?.0)
    }

    fn poll_inner(&mut self, now: Timestamp, max: usize) -> Result<(Vec<Result<Lease>>, Poll)> {
        let args = vec![
            nanos(self.config.lease_timeout).to_string().into_bytes(),
            self.config.redeliver_batch.to_string().into_bytes(),
            max.to_string().into_bytes(),
        ];
        let v = self.call_at("poll", Some(now), &args)?;
        let Value::Array(items) = v else {
            return Err(protocol("poll", "not an array"));
        };
        let n = items
            .first()
            .and_then(as_u64)
            .ok_or_else(|| protocol("poll", "no count"))? as usize;
        if items.len() != 1 + 3 * n + 6 {
            return Err(protocol("poll", "wrong length"));
        }
        let tail = &items[1 + 3 * n..];
        self.in_flight = as_u64(&tail[2]).ok_or_else(|| protocol("poll", "leases"))? as usize;
        let server_now = as_f64(&tail[3]).ok_or_else(|| protocol("poll", "time"))?;
        let expiry = as_f64(&tail[4]).ok_or_else(|| protocol("poll", "expiry"))?;
        let event = as_f64(&tail[5]).ok_or_else(|| protocol("poll", "event"))?;
        let mut timeout = None::<Timestamp>;
        for t in [expiry, event] {
            if t >= 0.0 {
                let t = self.to_caller(t, server_now, now);
                timeout = Some(timeout.map_or(t, |x| x.min(t)));
            }
        }
        let why = match as_bytes(&tail[0]) {
            Some(b"until") => {
                let t = as_f64(&tail[1]).ok_or_else(|| protocol("poll", "until"))?;
                Poll::NotUntil(self.to_caller(t, server_now, now))
            }
            Some(b"blocked") => Poll::Blocked,
            Some(b"empty") => Poll::Empty,
            Some(b"more") => Poll::Blocked,
            _ => return Err(protocol("poll", "unknown answer")),
        };
        // Work freed by other processes wakes nobody here: look again after `recheck`.
        if n == 0
            && (matches!(why, Poll::Blocked) || (matches!(why, Poll::Empty) && self.in_flight > 0))
        {
            let t = now + self.config.recheck;
            timeout = Some(timeout.map_or(t, |x| x.min(t)));
        }
        self.timeout = timeout;
        let mut leases = Vec::with_capacity(n);
        for chunk in items[1..1 + 3 * n].chunks(3) {
            let seq = as_u64(&chunk[0]).ok_or_else(|| protocol("poll", "seq"))?;
            let body = as_bytes(&chunk[1]).ok_or_else(|| protocol("poll", "body"))?;
            let key = as_bytes(&chunk[2])
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| protocol("poll", "group key"))?;
            let (body, key) = (body.to_vec(), key.to_string());
            leases.push(
                self.decode(seq, &body, &key)
                    .map(|request| Lease::new(LeaseId(seq), request)),
            );
        }
        Ok((leases, why))
    }

    /// The request a [`poll`](Self::poll) at `now` would hand out, without leasing it.
    pub fn peek(&mut self, now: Timestamp) -> Result<Option<Request>> {
        let v = self.call_at("peek", Some(now), &[])?;
        let Value::Array(items) = v else {
            return Err(protocol("peek", "not an array"));
        };
        if items.is_empty() {
            return Ok(None);
        }
        let seq = as_u64(&items[0]).ok_or_else(|| protocol("peek", "seq"))?;
        let body = as_bytes(&items[1])
            .ok_or_else(|| protocol("peek", "body"))?
            .to_vec();
        let key = as_bytes(&items[2])
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(|| protocol("peek", "key"))?
            .to_string();
        self.decode(seq, &body, &key).map(Some)
    }

    fn outcome_args(outcome: &Outcome<'_>) -> Result<[Vec<u8>; 3]> {
        Ok(match *outcome {
            Outcome::Response {
                status,
                header_delay,
                budget_reset,
                ..
            } => {
                let mut delay = header_delay.map_or("-1".to_string(), |d| nanos(d).to_string());
                if let Some(b) = budget_reset {
                    delay = format!("{delay}/{}", nanos(b));
                }
                [
                    b"s".to_vec(),
                    status.to_string().into_bytes(),
                    delay.into_bytes(),
                ]
            }
            Outcome::Error(kind) => [b"e".to_vec(), kind.as_bytes().to_vec(), Vec::new()],
            Outcome::Cancelled => [b"c".to_vec(), Vec::new(), Vec::new()],
            _ => {
                return Err(store_err(RedisStoreError::Unsupported(
                    "this kind of outcome",
                )));
            }
        })
    }

    /// Acknowledges a lease with how it ended: its scopes' slots are freed for every
    /// worker and the outcome feeds backoff. `false` for a lease that is unknown, already
    /// ended, or expired and delivered again.
    pub fn complete(
        &mut self,
        lease: LeaseId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        let mut args = vec![lease.0.to_string().into_bytes()];
        args.extend(Self::outcome_args(outcome)?);
        let v = self.call_at("complete", Some(now), &args)?;
        let done = as_u64(&v) == Some(1);
        if done {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(done)
    }

    /// Puts a lease back with its priority adjusted, after its outcome fed backoff.
    pub fn retry(
        &mut self,
        lease: LeaseId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool> {
        let mut args = vec![lease.0.to_string().into_bytes()];
        args.extend(Self::outcome_args(outcome)?);
        args.push(priority_adjust.to_string().into_bytes());
        let v = self.call_at("retry", Some(now), &args)?;
        let done = as_u64(&v) == Some(1);
        if done {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(done)
    }

    /// Takes a slot on every scope of `scopes` at once, for a request sent without the
    /// queue (an API client), if all of them allow a send at `now`: the same admission as
    /// [`Throttler::try_acquire`] (delay and jitter, concurrency, quotas with the uses'
    /// amounts, backoff, header delays and spent budgets, the global
    /// `concurrent_requests` cap), on the crawl's own scope states. Crawl workers and API
    /// clients that open the same crawl share one politeness budget.
    ///
    /// Otherwise nothing is reserved and the answer says why: `NotUntil(t)`, with `t` on
    /// the caller's clock like [`poll`](Self::poll)'s answers, or `Blocked` when a
    /// concurrency limit is full (a release, possibly by another process, lifts it: look
    /// again after [`RedisConfig::recheck`] or so).
    ///
    /// The permit must be [released](Self::release) within [`RedisConfig::lease_timeout`]:
    /// after that it expires (its process is presumed dead) and its slots are freed with a
    /// cancelled outcome, like an expired lease. Expired leases and permits are reclaimed
    /// by this call first (at most [`RedisConfig::redeliver_batch`]). Permits do not
    /// count in [`in_flight`](Self::in_flight) (leases only); they count in the crawl's
    /// throttled in flight ([`RedisInfo::in_flight`]) and in [`RedisInfo::permits`].
    pub fn try_acquire(
        &mut self,
        scopes: &[ScopeUse<'_>],
        now: Timestamp,
    ) -> Result<std::result::Result<RedisPermit, NotReady>> {
        let mut args = Vec::with_capacity(2 + 3 * scopes.len());
        args.push(nanos(self.config.lease_timeout).to_string().into_bytes());
        args.push(self.config.redeliver_batch.to_string().into_bytes());
        for u in scopes {
            if u.scope.starts_with('\0') {
                return Err(store_err(RedisStoreError::Invalid {
                    detail: format!("scope name {:?} must not start with a NUL byte", u.scope),
                }));
            }
            // As the throttler: a negative or NaN amount counts as 0.
            let amount = if u.amount.is_nan() || u.amount < 0.0 {
                0.0
            } else {
                u.amount
            };
            let amount = if amount.is_infinite() {
                "1e999".to_string()
            } else {
                format!("{amount:?}")
            };
            args.push(u.scope.as_bytes().to_vec());
            args.push(kind_digit(u.scope).to_string().into_bytes());
            args.push(amount.into_bytes());
        }
        let v = self.call_at("permit_acquire", Some(now), &args)?;
        let Value::Array(items) = v else {
            return Err(protocol("permit_acquire", "not an array"));
        };
        if items.len() != 3 {
            return Err(protocol("permit_acquire", "not 3 fields"));
        }
        let server_now = as_f64(&items[2]).ok_or_else(|| protocol("permit_acquire", "time"))?;
        match as_bytes(&items[0]) {
            Some(b"ok") => {
                let id = as_u64(&items[1]).ok_or_else(|| protocol("permit_acquire", "id"))?;
                Ok(Ok(RedisPermit(id)))
            }
            Some(b"until") => {
                let t = as_f64(&items[1]).ok_or_else(|| protocol("permit_acquire", "until"))?;
                Ok(Err(NotReady::NotUntil(self.to_caller(t, server_now, now))))
            }
            Some(b"blocked") => Ok(Err(NotReady::Blocked)),
            _ => Err(protocol("permit_acquire", "unknown answer")),
        }
    }

    /// Hands back a permit of [`try_acquire`](Self::try_acquire) with how its request
    /// ended: its slots are freed for every process and the outcome feeds backoff on its
    /// scopes, exactly as [`complete`](Self::complete) does for a lease (backoff steps,
    /// header delays, spent budgets). Groups of the crawl parked on those scopes look
    /// again.
    ///
    /// `false` (and nothing fed) for a permit that is unknown, already released, or
    /// expired: one at or past its expiry (`lease_timeout` after it was taken, on the
    /// crawl's clock) was freed as cancelled.
    pub fn release(
        &mut self,
        permit: RedisPermit,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        let mut args = vec![permit.0.to_string().into_bytes()];
        args.extend(Self::outcome_args(outcome)?);
        args.push(self.config.redeliver_batch.to_string().into_bytes());
        let v = self.call_at("permit_release", Some(now), &args)?;
        Ok(as_u64(&v) == Some(1))
    }

    /// Keeps a lease from expiring for another [`RedisConfig::lease_timeout`] (for
    /// requests that legitimately take long). `false` if it is no longer held.
    pub fn extend(&mut self, lease: LeaseId, now: Timestamp) -> Result<bool> {
        let args = vec![
            lease.0.to_string().into_bytes(),
            nanos(self.config.lease_timeout).to_string().into_bytes(),
        ];
        let v = self.call_at("extend", Some(now), &args)?;
        Ok(as_u64(&v) == Some(1))
    }

    /// See [`Throttler::delay_scope`](polite_throttle_core::Throttler::delay_scope): for every
    /// worker.
    pub fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        check_secs("delay_scope", secs)?;
        let ns = nanos(secs_to_duration(secs));
        self.scope_op("delay_scope", scope, &[ns.to_string().into_bytes()], now)
            .map(|_| ())
    }

    /// See [`Throttler::set_scope_delay`](polite_throttle_core::Throttler::set_scope_delay).
    pub fn set_scope_delay(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        check_secs("delay", secs)?;
        self.scope_op("set_delay", scope, &[format!("{secs:?}").into_bytes()], now)
            .map(|_| ())
    }

    /// See [`Throttler::set_scope_concurrency`](polite_throttle_core::Throttler::set_scope_concurrency).
    pub fn set_scope_concurrency(
        &mut self,
        scope: &str,
        concurrency: u32,
        now: Timestamp,
    ) -> Result<()> {
        self.scope_op(
            "set_concurrency",
            scope,
            &[concurrency.to_string().into_bytes()],
            now,
        )
        .map(|_| ())
    }

    /// See [`Throttler::reconcile_quota`](polite_throttle_core::Throttler::reconcile_quota).
    pub fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<()> {
        let (tag, v) = match how {
            QuotaReconcile::Consumed(v) => ("c", v),
            QuotaReconcile::Remaining(v) => ("r", v),
        };
        if !v.is_finite() {
            return Err(FrontierError::Config(config_error(tag, v)));
        }
        self.scope_op(
            "reconcile",
            scope,
            &[tag.as_bytes().to_vec(), format!("{v:?}").into_bytes()],
            now,
        )
        .map(|_| ())
    }

    /// See [`Throttler::handle_crawl_delay`](polite_throttle_core::Throttler::handle_crawl_delay).
    pub fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision> {
        check_secs("crawl_delay", secs)?;
        let v = self.scope_op(
            "crawl_delay",
            scope,
            &[format!("{secs:?}").into_bytes()],
            now,
        )?;
        let Value::Array(items) = v else {
            return Err(protocol("crawl_delay", "not an array"));
        };
        match items.first().and_then(as_bytes) {
            Some(b"applied") => Ok(CrawlDelayDecision::Applied {
                delay: items
                    .get(1)
                    .and_then(as_f64)
                    .ok_or_else(|| protocol("crawl_delay", "delay"))?,
                concurrency: items
                    .get(2)
                    .and_then(as_u64)
                    .and_then(|c| u32::try_from(c).ok())
                    .ok_or_else(|| protocol("crawl_delay", "concurrency"))?,
            }),
            Some(b"kept") => Ok(CrawlDelayDecision::KeptConfig {
                warned: items.get(1).and_then(as_u64) == Some(1),
            }),
            Some(b"ignored") => Ok(CrawlDelayDecision::Ignored),
            _ => Err(protocol("crawl_delay", "unknown decision")),
        }
    }

    fn scope_op(
        &mut self,
        op: &'static str,
        scope: &str,
        rest: &[Vec<u8>],
        now: Timestamp,
    ) -> Result<Value> {
        let mut args = vec![
            scope.as_bytes().to_vec(),
            kind_digit(scope).to_string().into_bytes(),
        ];
        args.extend_from_slice(rest);
        self.call_at(op, Some(now), &args)
    }

    /// A scope's state as of `now` (lazy recovery, rampup and quota updates applied), if
    /// it has one.
    pub fn scope_stats(&mut self, scope: &str, now: Timestamp) -> Result<Option<RedisScopeStats>> {
        let v = self.scope_op("scope", scope, &[], now)?;
        Self::parse_scope(v)
    }

    /// A scope's state as of the last operation on it, changing nothing (what
    /// [`Throttler::scopes`](polite_throttle_core::Throttler::scopes) shows in-process).
    pub fn scope_stats_raw(&mut self, scope: &str) -> Result<Option<RedisScopeStats>> {
        let v = self.scope_op("scope", scope, &[b"raw".to_vec()], Timestamp::ZERO)?;
        Self::parse_scope(v)
    }

    fn parse_scope(v: Value) -> Result<Option<RedisScopeStats>> {
        let items = match v {
            Value::Nil => return Ok(None),
            Value::Array(items) if items.len() == 11 => items,
            _ => return Err(protocol("scope", "not 11 fields")),
        };
        let u = |i: usize| as_u64(&items[i]).ok_or_else(|| protocol("scope", "integer field"));
        let f = |i: usize| as_f64(&items[i]).ok_or_else(|| protocol("scope", "number field"));
        let t = |i: usize| f(i).map(|x| Timestamp::from_nanos(x.max(0.0) as u64));
        Ok(Some(RedisScopeStats {
            sent: u(0)?,
            done: u(1)?,
            triggers: u(2)?,
            active: u(3)? as u32,
            base_delay: f(4)?,
            delay: f(5)?,
            concurrency: u(6)? as u32,
            level: u(7)? as u32,
            next_allowed: t(8)?,
            hard_until: t(9)?,
            consumed: f(10)?,
        }))
    }

    /// Counters of the whole crawl.
    pub fn info(&mut self) -> Result<RedisInfo> {
        let v = self.call("info", true, &[])?;
        let Value::Array(items) = v else {
            return Err(protocol("info", "not an array"));
        };
        if items.len() < 13 {
            return Err(protocol("info", "short reply"));
        }
        let u = |i: usize| as_u64(&items[i]).ok_or_else(|| protocol("info", "integer field"));
        let mut stats = FrontierStats::default();
        stats.store = "redis";
        stats.enqueued = u(5)?;
        stats.dequeued = u(6)?;
        stats.leased = u(7)?;
        stats.acked = u(8)?;
        stats.retried = u(9)?;
        stats.redelivered = u(10)?;
        stats.depth_max = u(11)? as u32;
        for pair in items[13..].chunks(2) {
            if let [k, v] = pair {
                let n = as_u64(v).ok_or_else(|| protocol("info", "stat value"))?;
                match as_bytes(k) {
                    Some(b"filtered") => stats.filtered = n,
                    Some(b"depth_ignored") => stats.depth_ignored = n,
                    _ => {}
                }
            }
        }
        Ok(RedisInfo {
            queued: u(0)?,
            delayed: u(1)?,
            leased: u(2)?,
            in_flight: u(3)?,
            groups: u(4)?,
            permits: u(12)?,
            stats,
        })
    }

    /// Leases out, by every worker, as of the last call.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When to poll again at the latest: the next scope timer or delayed request, the
    /// next lease expiry, or (after `Blocked`, or `Empty` with leases out elsewhere)
    /// [`RedisConfig::recheck`] later, as of the last poll.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timeout
    }

    /// Deletes every key of the crawl (`{name}:*`), found with `SCAN` and removed with
    /// `UNLINK`; returns how many. Workers still running on the crawl will fail (it is no
    /// longer initialised).
    pub fn destroy(mut self) -> Result<u64> {
        let pattern = format!("{}*", self.prefix);
        let conn = self.conn()?;
        let err = |e| store_err(RedisStoreError::from_redis("destroy", e));
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

    /// Runs a test hook of the script (exact conversions), for the conformance tests.
    #[doc(hidden)]
    pub fn debug_call(&mut self, op: &'static str, args: &[String]) -> Result<Value> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.clone().into_bytes()).collect();
        self.call(op, false, &args)
    }
}

/// The crawl's duplicate filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dedup {
    Off,
    /// Binary 64-bit fingerprints in a set.
    Exact,
    /// A Bloom filter of `bits` bits with `hashes` hash functions, in Redis strings of
    /// 2^30 bits each, set atomically by the script.
    Bloom {
        bits: u64,
        hashes: u32,
    },
}

impl Dedup {
    fn describe(self) -> String {
        match self {
            Dedup::Off => "off".into(),
            Dedup::Exact => "exact".into(),
            Dedup::Bloom { bits, hashes } => format!("bloom:{bits}:{hashes}"),
        }
    }
}

/// The size and number of hashes of polite-frontier-core's Bloom filter for `capacity` URLs at
/// false-positive rate `p` (its own sizing, so both filters match bit for bit).
fn bloom_shape(capacity: u64, p: f64) -> Result<Dedup> {
    let (bits, hashes) =
        polite_frontier_core::BloomFilter::shape(capacity, p).map_err(FrontierError::DupeFilter)?;
    Ok(Dedup::Bloom { bits, hashes })
}

/// The bit positions of a fingerprint (enhanced double hashing from its first 64 bits,
/// as polite-frontier-core's `BloomFilter`).
fn bloom_positions(h: u64, m: u64, k: u32) -> impl Iterator<Item = u64> {
    let mut h1 = h;
    let mut h2 = {
        let mut z = h1 ^ 0x9E37_79B9_7F4A_7C15;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) | 1
    };
    (0..u64::from(k)).map(move |i| {
        let pos = ((u128::from(h1) * u128::from(m)) >> 64) as u64;
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(i);
        pos
    })
}

fn invalid(request: &Request, reason: String) -> polite_frontier_core::InvalidRequest {
    polite_frontier_core::InvalidRequest::new(&request.url, reason)
}

impl Scheduling for RedisFrontier {
    type StoreError = RedisStoreError;
    type Closed = ();

    fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome> {
        RedisFrontier::push(self, request, now)
    }

    fn push_all(&mut self, requests: &[Request], now: Timestamp) -> Result<Vec<PushOutcome>> {
        RedisFrontier::push_all(self, requests, now)
    }

    fn poll(&mut self, now: Timestamp) -> Result<Poll> {
        RedisFrontier::poll(self, now)
    }

    fn complete(&mut self, lease: LeaseId, outcome: &Outcome<'_>, now: Timestamp) -> Result<bool> {
        RedisFrontier::complete(self, lease, outcome, now)
    }

    fn retry(
        &mut self,
        lease: LeaseId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool> {
        RedisFrontier::retry(self, lease, outcome, priority_adjust, now)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        RedisFrontier::poll_timeout(self)
    }

    fn in_flight(&self) -> usize {
        RedisFrontier::in_flight(self)
    }

    fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        RedisFrontier::delay_scope(self, scope, secs, now)
    }

    fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision> {
        RedisFrontier::handle_crawl_delay(self, scope, secs, now)
    }

    fn reconcile_quota(&mut self, scope: &str, how: QuotaReconcile, now: Timestamp) -> Result<()> {
        RedisFrontier::reconcile_quota(self, scope, how, now)
    }

    /// Every operation is applied by the server when it returns; its durability is the
    /// server's (AOF / replication), not this client's.
    fn commit(&mut self) -> Result<()> {
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn close(self) -> Result<()> {
        Ok(())
    }
}
