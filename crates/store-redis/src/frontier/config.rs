//! Configuration: [`RedisConfig`], [`ScriptMode`] and [`TimeSource`].

use std::time::Duration;

use polite_frontier_core::FrontierConfig;

// Named by the docs.
#[cfg(doc)]
use super::RedisFrontier;
#[cfg(doc)]
use polite_frontier_core::Policy;

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
    /// Frontier options: the ordering settings (`depth_priority`, `depth_limit`,
    /// `scheduler_order`, `start_order`, which every worker must share like the
    /// [`Settings`](polite_throttle_core::Settings)); `policy` must be
    /// [`Policy::ThrottlingAware`]; the duplicate
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
