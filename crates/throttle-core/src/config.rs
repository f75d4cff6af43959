//! Settings and per-scope configuration.
//!
//! Names mirror Scrapy's settings in snake_case so that a `settings.toml` reads like a
//! Scrapy `settings.py`. Every value is checked by [`Settings::validate`] (also run by
//! [`Throttler::new`](crate::Throttler::new)); a bad value is an error naming its key, never
//! silently clamped.
//!
//! ```
//! # #[cfg(feature = "serde")] {
//! use polite_throttle_core::Settings;
//!
//! let settings: Settings = serde_json::from_str(r#"{
//!     "download_delay": 0.5,
//!     "randomize_download_delay": [0.0, 0.25],
//!     "scopes": {
//!         "api.example.com": { "concurrency": 4, "rampup": { "backoff_target": [1, 3] } },
//!         "cost": { "quota": 100.0, "window": 60.0 }
//!     }
//! }"#).unwrap();
//! settings.validate().unwrap();
//!
//! let bad: Settings = serde_json::from_str(
//!     r#"{"scopes": {"x.com": {"backoff": {"delay_factor": 0.5}}}}"#).unwrap();
//! let err = bad.validate().unwrap_err();
//! assert_eq!(err.key(), "scopes.\"x.com\".backoff.delay_factor");
//! # }
//! ```

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::rng::JitterRng;

/// A length of time given to a setter: a number of seconds (`0.5`, `2`) or a
/// [`Duration`]. Settings keep seconds as `f64`, Scrapy's unit.
///
/// ```
/// use core::time::Duration;
/// use polite_throttle_core::{ScopeConfig, Settings};
///
/// let a = Settings::default().download_delay(0.25);
/// let b = Settings::default().download_delay(Duration::from_millis(250));
/// assert_eq!(a, b);
/// let scope = ScopeConfig::new().delay(2).window(Duration::from_secs(60));
/// assert_eq!(scope.delay, Some(2.0));
/// ```
pub trait Seconds {
    /// The value in seconds.
    fn seconds(self) -> f64;
}

impl Seconds for f64 {
    fn seconds(self) -> f64 {
        self
    }
}

impl Seconds for f32 {
    fn seconds(self) -> f64 {
        f64::from(self)
    }
}

impl Seconds for i32 {
    fn seconds(self) -> f64 {
        f64::from(self)
    }
}

impl Seconds for u32 {
    fn seconds(self) -> f64 {
        f64::from(self)
    }
}

impl Seconds for u64 {
    fn seconds(self) -> f64 {
        self as f64
    }
}

impl Seconds for Duration {
    fn seconds(self) -> f64 {
        self.as_secs_f64()
    }
}

/// Chained setters, one per field: `field(value)` sets it and returns the value.
/// `secs` fields take any [`Seconds`]; `opt` fields are `Option`s set to `Some`.
macro_rules! setters {
    ($ty:ident { $($kind:ident $field:ident: $t:ty => $doc:literal;)* }) => {
        impl $ty {
            $(setters!(@one $kind $field: $t => $doc);)*
        }
    };
    (@one plain $field:ident: $t:ty => $doc:literal) => {
        #[doc = $doc]
        #[must_use]
        pub fn $field(mut self, value: $t) -> Self {
            self.$field = value;
            self
        }
    };
    (@one secs $field:ident: $t:ty => $doc:literal) => {
        #[doc = $doc]
        #[must_use]
        pub fn $field(mut self, value: impl Seconds) -> Self {
            self.$field = value.seconds();
            self
        }
    };
    (@one opt $field:ident: $t:ty => $doc:literal) => {
        #[doc = $doc]
        #[must_use]
        pub fn $field(mut self, value: $t) -> Self {
            self.$field = Some(value);
            self
        }
    };
    (@one optsecs $field:ident: $t:ty => $doc:literal) => {
        #[doc = $doc]
        #[must_use]
        pub fn $field(mut self, value: impl Seconds) -> Self {
            self.$field = Some(value.seconds());
            self
        }
    };
}

/// Random variation applied to a delay each time it is used.
///
/// Accepted in settings as `true` (±50%), `false` (none), a number `j` (±`j`) or a pair
/// `[low, high]` (multiply by `1 + uniform(low, high)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Jitter {
    /// `delay × uniform(1 - j, 1 + j)`.
    Factor(f64),
    /// `delay × (1 + uniform(low, high))`.
    Range {
        /// Lower end of the relative variation (≥ -1).
        low: f64,
        /// Upper end of the relative variation (≥ `low`).
        high: f64,
    },
}

impl Jitter {
    /// No variation at all.
    pub const NONE: Jitter = Jitter::Factor(0.0);
    /// Scrapy's `RANDOMIZE_DOWNLOAD_DELAY = True`: ±50%.
    pub const HALF: Jitter = Jitter::Factor(0.5);

    /// Whether this jitter never changes a delay.
    pub fn is_none(&self) -> bool {
        match *self {
            Jitter::Factor(j) => j == 0.0,
            Jitter::Range { low, high } => low == 0.0 && high == 0.0,
        }
    }

    /// `delay` with this variation applied, never negative. Draws from `rng` only when
    /// there is something to vary.
    pub fn apply(&self, delay: f64, rng: &mut JitterRng) -> f64 {
        if delay <= 0.0 || self.is_none() {
            return delay.max(0.0);
        }
        let (lo, hi) = match *self {
            Jitter::Factor(j) => (-j, j),
            Jitter::Range { low, high } => (low, high),
        };
        (delay * (1.0 + rng.uniform(lo, hi))).max(0.0)
    }

    /// The smallest value [`apply`](Self::apply) can return for `delay`.
    pub fn lower_bound(&self, delay: f64) -> f64 {
        let lo = match *self {
            Jitter::Factor(j) => -j,
            Jitter::Range { low, .. } => low,
        };
        (delay * (1.0 + lo)).max(0.0)
    }

    fn validate(&self, key: &dyn fmt::Display) -> Result<(), ConfigError> {
        match *self {
            Jitter::Factor(j) => {
                if !j.is_finite() || !(0.0..=1.0).contains(&j) {
                    return Err(ConfigError::new(
                        key,
                        format!("jitter must be a fraction between 0 and 1, got {j}"),
                    ));
                }
            }
            Jitter::Range { low, high } => {
                if !low.is_finite() || !high.is_finite() || low < -1.0 || low > high {
                    return Err(ConfigError::new(
                        key,
                        format!("jitter range must satisfy -1 <= low <= high, got [{low}, {high}]"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Default for Jitter {
    fn default() -> Self {
        Jitter::HALF
    }
}

/// Backoff triggers per window that rampup aims for: a single number or `[low, high]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffTarget {
    /// Fewer triggers than this in a window: ramp up one step.
    pub low: u32,
    /// Up to this many triggers in a window only count (the rate holds); each one
    /// beyond is an ordinary backoff step.
    pub high: u32,
}

impl BackoffTarget {
    /// A target of exactly `n` triggers per window.
    pub const fn exactly(n: u32) -> Self {
        BackoffTarget { low: n, high: n }
    }

    /// A target of `low` to `high` triggers per window.
    pub const fn range(low: u32, high: u32) -> Self {
        BackoffTarget { low, high }
    }
}

impl Default for BackoffTarget {
    fn default() -> Self {
        BackoffTarget::exactly(1)
    }
}

/// Order within one priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum QueueOrder {
    /// Last in, first out: depth-first crawling (Scrapy's default).
    #[default]
    Lifo,
    /// First in, first out: breadth-first when combined with `depth_priority = 1`.
    Fifo,
}

/// Order of start requests within one priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum StartOrder {
    /// In the order they were pushed (the default).
    #[default]
    Fifo,
    /// Most recently pushed first.
    Lifo,
    /// No special treatment: start requests are ordered like any other request.
    Same,
}

/// Per-scope overrides of the global `backoff_*` settings. Unset keys fall back to them.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct BackoffConfig {
    /// Response statuses that trigger backoff.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub http_codes: Option<Vec<u16>>,
    /// Error kinds (as reported in [`Outcome::Error`](crate::Outcome::Error)) that trigger backoff.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub exceptions: Option<Vec<String>>,
    /// Multiplier per backoff step (> 1).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub delay_factor: Option<f64>,
    /// Ceiling of the backoff delay and cap of header delays, in seconds.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub max_delay: Option<f64>,
    /// First backoff step and floor while backing off, in seconds.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub min_delay: Option<f64>,
    /// Jitter applied to the spacing of sends while backing off.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub jitter: Option<Jitter>,
}

/// Fine-tuning of rampup for one scope.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct RampupConfig {
    /// Overrides `rampup_backoff_target` for this scope.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub backoff_target: Option<BackoffTarget>,
    /// Multiplier applied to the delay on each rampup step, in (0, 1). Default 0.5.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub delay_factor: Option<f64>,
    /// Rampup never lowers the delay below this many seconds. Default 0.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub min_delay: Option<f64>,
    /// Whether the first trigger beyond the target in a window undoes rampup's last step
    /// (docs/behaviour.md §3.4). Default `false`, as Scrapy's design; turn it on for an
    /// exact limiter and no jitter (an API), where a probe past the limit would
    /// otherwise stay there.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub step_back: Option<bool>,
}

/// Whether a scope probes for its fastest tolerated rate: `true`, `false` or a table.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Rampup {
    /// No rampup (the default).
    #[default]
    Off,
    /// Rampup with these parameters (all optional).
    On(RampupConfig),
}

/// Configuration of one named scope (`scopes."name" = {...}`). Unset keys take the
/// defaults of docs/behaviour.md section 2: concurrency by scope kind, `download_delay`,
/// `randomize_download_delay`, `throttling_window` and the global `backoff_*` settings.
///
/// Scope names are case-sensitive; the frontier lower-cases the host scopes it derives
/// from URLs.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct ScopeConfig {
    /// Requests in flight at once; 0 means unlimited. Default by scope kind.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub concurrency: Option<u32>,
    /// Floor for backoff and rampup (default 1).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub min_concurrency: Option<u32>,
    /// Ceiling for rampup (default `concurrent_requests`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub max_concurrency: Option<u32>,
    /// Base delay between sends, in seconds (default `download_delay`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub delay: Option<f64>,
    /// Jitter on the delay (default `randomize_download_delay`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub jitter: Option<Jitter>,
    /// Amount that may be consumed per window (no quota when unset).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub quota: Option<f64>,
    /// Quota window in seconds (default `throttling_window`; 0: the quota resets on
    /// every request).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub window: Option<f64>,
    /// Rampup: probe for the fastest rate the server tolerates.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Rampup::is_off"))]
    pub rampup: Rampup,
    /// Overrides of the global backoff settings.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub backoff: Option<BackoffConfig>,
    /// Silences the warning about a configuration more aggressive than robots.txt.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "core::ops::Not::not"))]
    pub ignore_robots_txt: bool,
}

setters!(BackoffConfig {
    opt http_codes: Vec<u16> => "Sets the statuses that trigger backoff in this scope.";
    opt delay_factor: f64 => "Sets the multiplier per backoff step (> 1).";
    optsecs max_delay: f64 => "Sets the backoff ceiling (seconds or a [`Duration`]).";
    optsecs min_delay: f64 => "Sets the first backoff step (seconds or a [`Duration`]).";
    opt jitter: Jitter => "Sets the jitter on send spacing while backing off.";
});

impl BackoffConfig {
    /// Sets the error kinds that trigger backoff in this scope.
    #[must_use]
    pub fn exceptions<S: Into<String>>(mut self, kinds: impl IntoIterator<Item = S>) -> Self {
        self.exceptions = Some(kinds.into_iter().map(Into::into).collect());
        self
    }
}

setters!(RampupConfig {
    opt backoff_target: BackoffTarget => "Sets the backoff triggers per window to aim for.";
    opt delay_factor: f64 => "Sets the multiplier of the delay per rampup step, in (0, 1).";
    optsecs min_delay: f64 => "Sets the delay rampup never goes below (seconds or a [`Duration`]).";
    opt step_back: bool => "Sets whether an overshoot undoes rampup's last step.";
});

impl Rampup {
    /// `true` when rampup is disabled.
    pub fn is_off(&self) -> bool {
        matches!(self, Rampup::Off)
    }
}

impl ScopeConfig {
    /// An empty configuration: every key at its default.
    pub fn new() -> Self {
        Self::default()
    }
    /// At most `n` requests a second: a delay of `1/n` seconds and no jitter. `n` must
    /// be positive (validation names `delay` otherwise).
    pub fn per_second(n: f64) -> Self {
        Self::new().delay(1.0 / n).jitter(Jitter::NONE)
    }
    /// At most `n` requests a minute: a delay of `60/n` seconds and no jitter.
    pub fn per_minute(n: f64) -> Self {
        Self::per_second(n / 60.0)
    }
    /// Sets `concurrency` (0 = unlimited).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }
    /// Sets `min_concurrency`.
    pub fn min_concurrency(mut self, n: u32) -> Self {
        self.min_concurrency = Some(n);
        self
    }
    /// Sets `max_concurrency`.
    pub fn max_concurrency(mut self, n: u32) -> Self {
        self.max_concurrency = Some(n);
        self
    }
    /// Sets the base `delay` (seconds or a [`Duration`]).
    pub fn delay(mut self, secs: impl Seconds) -> Self {
        self.delay = Some(secs.seconds());
        self
    }
    /// Sets the `jitter`.
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = Some(jitter);
        self
    }
    /// Sets a `quota` per window (`throttling_window` unless [`window`](Self::window)).
    pub fn quota(mut self, quota: f64) -> Self {
        self.quota = Some(quota);
        self
    }
    /// Sets the quota `window` (seconds or a [`Duration`]).
    pub fn window(mut self, secs: impl Seconds) -> Self {
        self.window = Some(secs.seconds());
        self
    }
    /// Enables rampup with these parameters.
    pub fn rampup(mut self, rampup: RampupConfig) -> Self {
        self.rampup = Rampup::On(rampup);
        self
    }
    /// Sets the per-scope backoff overrides.
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = Some(backoff);
        self
    }
    /// Sets `ignore_robots_txt`.
    pub fn ignore_robots_txt(mut self, yes: bool) -> Self {
        self.ignore_robots_txt = yes;
        self
    }
}

/// All settings of the throttler and the frontier (docs/behaviour.md section 2), with Scrapy's names.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct Settings {
    /// Global cap on requests in flight (≥ 1).
    pub concurrent_requests: u32,
    /// Default concurrency of domain scopes (0 = unlimited).
    pub concurrent_requests_per_domain: u32,
    /// Default concurrency of IP scopes; when > 0 the caller adds the resolved IP as a
    /// second scope. 0 makes IP scopes use the per-domain default.
    pub concurrent_requests_per_ip: u32,
    /// Default concurrency of scopes that are neither domains nor IPs (0 = unlimited).
    pub throttling_scope_concurrency: u32,
    /// Base delay in seconds of a scope without its own `delay`.
    pub download_delay: f64,
    /// Default jitter on base delays.
    pub randomize_download_delay: Jitter,
    /// Response statuses that trigger backoff.
    pub backoff_http_codes: Vec<u16>,
    /// Error kinds that trigger backoff.
    pub backoff_exceptions: Vec<String>,
    /// Multiplier per backoff step (> 1).
    pub backoff_delay_factor: f64,
    /// Delay of the first backoff step and floor while backing off, in seconds.
    pub backoff_min_delay: f64,
    /// Ceiling of backoff and cap of header delays, in seconds.
    pub backoff_max_delay: f64,
    /// Jitter on send spacing while backing off.
    pub backoff_jitter: Jitter,
    /// Quiet seconds per recovery step; also the rampup window. 0: backoff recovers at
    /// once and rampup is off.
    pub backoff_window: f64,
    /// Backoff triggers per window rampup aims for.
    pub rampup_backoff_target: BackoffTarget,
    /// Default quota window in seconds (0: a quota resets on every request).
    pub throttling_window: f64,
    /// Maximum scope states kept in memory (0 = unbounded).
    pub throttling_scope_limit: u32,
    /// Idle seconds before a scope state is evicted (0 = never).
    pub throttling_scope_max_idle: f64,
    /// Apply robots.txt Crawl-delay values reported by the caller.
    pub throttling_robotstxt_obey: bool,
    /// Cap on Crawl-delay, in seconds.
    pub throttling_robotstxt_max_delay: f64,
    /// Number of held-back requests that triggers one warning.
    pub delayed_requests_warn_threshold: u32,
    /// `priority -= depth × depth_priority`.
    pub depth_priority: i32,
    /// Requests deeper than this are dropped (0 = no limit).
    pub depth_limit: u32,
    /// Order within a priority for non-start requests.
    pub scheduler_order: QueueOrder,
    /// Order within a priority for start requests.
    pub start_order: StartOrder,
    /// Seed of the jitter random generator.
    pub seed: u64,
    /// Per-scope configuration, by scope name.
    pub scopes: BTreeMap<String, ScopeConfig>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrent_requests: 16,
            concurrent_requests_per_domain: 8,
            concurrent_requests_per_ip: 0,
            throttling_scope_concurrency: 1,
            download_delay: 0.0,
            randomize_download_delay: Jitter::HALF,
            backoff_http_codes: vec![429, 502, 503, 504, 520, 521, 522, 523, 524],
            backoff_exceptions: vec![
                "timeout".to_string(),
                "connection".to_string(),
                "data_loss".to_string(),
            ],
            backoff_delay_factor: 2.0,
            backoff_min_delay: 1.0,
            backoff_max_delay: 300.0,
            backoff_jitter: Jitter::Factor(0.1),
            backoff_window: 60.0,
            rampup_backoff_target: BackoffTarget::exactly(1),
            throttling_window: 60.0,
            throttling_scope_limit: 100_000,
            throttling_scope_max_idle: 3600.0,
            throttling_robotstxt_obey: true,
            throttling_robotstxt_max_delay: 60.0,
            delayed_requests_warn_threshold: 500,
            depth_priority: 0,
            depth_limit: 0,
            scheduler_order: QueueOrder::Lifo,
            start_order: StartOrder::Fifo,
            seed: 0,
            scopes: BTreeMap::new(),
        }
    }
}

setters!(Settings {
    plain concurrent_requests: u32 => "Sets the global cap on requests in flight (>= 1).";
    plain concurrent_requests_per_domain: u32 => "Sets the default concurrency of domain scopes (0 = unlimited).";
    plain concurrent_requests_per_ip: u32 => "Sets the default concurrency of IP scopes.";
    plain throttling_scope_concurrency: u32 => "Sets the default concurrency of other named scopes (0 = unlimited).";
    secs download_delay: f64 => "Sets the base delay of scopes without their own (seconds or a [`Duration`]).";
    plain randomize_download_delay: Jitter => "Sets the default jitter on base delays.";
    plain backoff_delay_factor: f64 => "Sets the multiplier per backoff step (> 1).";
    secs backoff_min_delay: f64 => "Sets the first backoff step and floor while backing off.";
    secs backoff_max_delay: f64 => "Sets the backoff ceiling and the cap on header delays.";
    plain backoff_jitter: Jitter => "Sets the jitter on send spacing while backing off.";
    secs backoff_window: f64 => "Sets the quiet time per recovery step, also the rampup window.";
    plain rampup_backoff_target: BackoffTarget => "Sets the backoff triggers per window rampup aims for.";
    secs throttling_window: f64 => "Sets the default quota window.";
    plain throttling_scope_limit: u32 => "Sets the most scope states kept in memory (0 = unbounded).";
    secs throttling_scope_max_idle: f64 => "Sets how long an idle scope state is kept (0 = forever).";
    plain throttling_robotstxt_obey: bool => "Sets whether reported robots.txt Crawl-delays apply.";
    secs throttling_robotstxt_max_delay: f64 => "Sets the cap on Crawl-delay.";
    plain delayed_requests_warn_threshold: u32 => "Sets the number of held-back requests that triggers a warning.";
    plain depth_priority: i32 => "Sets `priority -= depth * depth_priority`.";
    plain depth_limit: u32 => "Sets the depth beyond which requests are dropped (0 = no limit).";
    plain scheduler_order: QueueOrder => "Sets the order within a priority for non-start requests.";
    plain start_order: StartOrder => "Sets the order within a priority for start requests.";
    plain seed: u64 => "Sets the seed of the jitter random generator.";
});

impl Settings {
    /// Sets the statuses that trigger backoff.
    #[must_use]
    pub fn backoff_http_codes(mut self, codes: impl IntoIterator<Item = u16>) -> Self {
        self.backoff_http_codes = codes.into_iter().collect();
        self
    }

    /// Sets the error kinds that trigger backoff.
    #[must_use]
    pub fn backoff_exceptions<S: Into<String>>(
        mut self,
        kinds: impl IntoIterator<Item = S>,
    ) -> Self {
        self.backoff_exceptions = kinds.into_iter().map(Into::into).collect();
        self
    }

    /// Adds (or replaces) the configuration of one scope.
    pub fn with_scope(mut self, name: impl Into<String>, config: ScopeConfig) -> Self {
        self.scopes.insert(name.into(), config);
        self
    }

    /// Defaults for a client of a rate-limited API rather than a crawler: no jitter on
    /// delays or backoff (an API's limit is exact, and Scrapy's ±50% would halve the
    /// rate it allows), backoff on 429 and 503 only (with transport errors), and robots.txt not
    /// consulted. Give the API's limit with [`ScopeConfig::per_second`] or
    /// [`ScopeConfig::per_minute`].
    ///
    /// ```
    /// use polite_throttle_core::{ScopeConfig, Settings};
    ///
    /// let settings = Settings::api_client()
    ///     .with_scope("api", ScopeConfig::per_second(10.0).concurrency(4));
    /// assert!(settings.validate().is_ok());
    /// ```
    pub fn api_client() -> Self {
        Settings {
            randomize_download_delay: Jitter::NONE,
            backoff_jitter: Jitter::NONE,
            backoff_http_codes: vec![429, 503],
            throttling_robotstxt_obey: false,
            ..Settings::default()
        }
    }

    /// Settings without any randomness: no jitter on delays or backoff. Handy for
    /// tests and simulations that check exact times.
    pub fn without_jitter(mut self) -> Self {
        self.randomize_download_delay = Jitter::NONE;
        self.backoff_jitter = Jitter::NONE;
        self
    }

    /// Checks every value; the error names the first offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrent_requests == 0 {
            return Err(ConfigError::new(
                &"concurrent_requests",
                "must be at least 1".into(),
            ));
        }
        non_negative_secs("download_delay", self.download_delay)?;
        self.randomize_download_delay
            .validate(&"randomize_download_delay")?;
        http_codes("backoff_http_codes", &self.backoff_http_codes)?;
        exceptions("backoff_exceptions", &self.backoff_exceptions)?;
        backoff_factor("backoff_delay_factor", self.backoff_delay_factor)?;
        non_negative_secs("backoff_min_delay", self.backoff_min_delay)?;
        non_negative_secs("backoff_max_delay", self.backoff_max_delay)?;
        if self.backoff_min_delay > self.backoff_max_delay {
            return Err(ConfigError::new(
                &"backoff_min_delay",
                format!(
                    "must not exceed backoff_max_delay ({} > {})",
                    self.backoff_min_delay, self.backoff_max_delay
                ),
            ));
        }
        self.backoff_jitter.validate(&"backoff_jitter")?;
        window_secs("backoff_window", self.backoff_window)?;
        backoff_target("rampup_backoff_target", self.rampup_backoff_target)?;
        window_secs("throttling_window", self.throttling_window)?;
        non_negative_secs("throttling_scope_max_idle", self.throttling_scope_max_idle)?;
        non_negative_secs(
            "throttling_robotstxt_max_delay",
            self.throttling_robotstxt_max_delay,
        )?;
        for (name, scope) in &self.scopes {
            if name.is_empty() {
                return Err(ConfigError::new(
                    &"scopes",
                    "scope names must not be empty".into(),
                ));
            }
            self.validate_scope(name, scope)?;
        }
        Ok(())
    }

    fn validate_scope(&self, name: &str, scope: &ScopeConfig) -> Result<(), ConfigError> {
        let key = |field: &'static str| ScopeKey { name, field };
        let min_c = scope.min_concurrency.unwrap_or(1);
        if min_c == 0 {
            return Err(ConfigError::new(
                &key("min_concurrency"),
                "must be at least 1".into(),
            ));
        }
        if let Some(c) = scope.concurrency
            && c != 0
            && c < min_c
        {
            return Err(ConfigError::new(
                &key("concurrency"),
                format!("must not be below min_concurrency ({c} < {min_c})"),
            ));
        }
        let max_c = scope.max_concurrency.unwrap_or(self.concurrent_requests);
        if max_c != 0 && max_c < min_c {
            return Err(ConfigError::new(
                &key("max_concurrency"),
                format!("must not be below min_concurrency ({max_c} < {min_c})"),
            ));
        }
        if let Some(d) = scope.delay {
            non_negative_secs(key("delay"), d)?;
        }
        if let Some(j) = scope.jitter {
            j.validate(&key("jitter"))?;
        }
        if let Some(q) = scope.quota
            && (!q.is_finite() || q <= 0.0)
        {
            return Err(ConfigError::new(
                &key("quota"),
                format!("must be a positive number, got {q}"),
            ));
        }
        if let Some(w) = scope.window {
            window_secs(key("window"), w)?;
        }
        if let Rampup::On(r) = &scope.rampup {
            if let Some(t) = r.backoff_target {
                backoff_target(key("rampup.backoff_target"), t)?;
            }
            if let Some(f) = r.delay_factor
                && (!f.is_finite() || f <= 0.0 || f >= 1.0)
            {
                return Err(ConfigError::new(
                    &key("rampup.delay_factor"),
                    format!("must be between 0 and 1 (exclusive), got {f}"),
                ));
            }
            if let Some(d) = r.min_delay {
                non_negative_secs(key("rampup.min_delay"), d)?;
            }
        }
        if let Some(b) = &scope.backoff {
            if let Some(codes) = &b.http_codes {
                http_codes(key("backoff.http_codes"), codes)?;
            }
            if let Some(ex) = &b.exceptions {
                exceptions(key("backoff.exceptions"), ex)?;
            }
            if let Some(f) = b.delay_factor {
                backoff_factor(key("backoff.delay_factor"), f)?;
            }
            if let Some(d) = b.min_delay {
                non_negative_secs(key("backoff.min_delay"), d)?;
            }
            if let Some(d) = b.max_delay {
                non_negative_secs(key("backoff.max_delay"), d)?;
            }
            let min_d = b.min_delay.unwrap_or(self.backoff_min_delay);
            let max_d = b.max_delay.unwrap_or(self.backoff_max_delay);
            if min_d > max_d {
                return Err(ConfigError::new(
                    &key("backoff.min_delay"),
                    format!("must not exceed the scope's backoff max_delay ({min_d} > {max_d})"),
                ));
            }
            if let Some(j) = b.jitter {
                j.validate(&key("backoff.jitter"))?;
            }
        }
        Ok(())
    }
}

/// Displays `scopes."name".field`.
struct ScopeKey<'a> {
    name: &'a str,
    field: &'a str,
}

impl fmt::Display for ScopeKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scopes.{:?}.{}", self.name, self.field)
    }
}

fn non_negative_secs(key: impl fmt::Display, v: f64) -> Result<(), ConfigError> {
    if !v.is_finite() || v < 0.0 {
        return Err(ConfigError::new(
            &key,
            format!("must be a finite number of seconds >= 0, got {v}"),
        ));
    }
    Ok(())
}

/// Windows: 0, or finite and at least a millisecond. 0 is Scrapy's "each window
/// elapses at once": backoff recovers immediately, rampup is off, a quota resets on every
/// request (docs/behaviour.md 3.2, 3.4, 3.5). Positive windows shorter than a millisecond
/// stay errors: the Redis script keeps times as doubles, where a nanosecond-scale window
/// stops advancing a window start after ~100 days and its loop would never end.
fn window_secs(key: impl fmt::Display, v: f64) -> Result<(), ConfigError> {
    if !v.is_finite() || v < 0.0 || (v > 0.0 && v < 0.001) {
        return Err(ConfigError::new(
            &key,
            format!(
                "must be 0 (the window elapses at once) or a finite number of seconds >= 0.001, got {v}"
            ),
        ));
    }
    Ok(())
}

fn backoff_factor(key: impl fmt::Display, v: f64) -> Result<(), ConfigError> {
    if !v.is_finite() || v <= 1.0 {
        return Err(ConfigError::new(
            &key,
            format!("must be greater than 1, got {v}"),
        ));
    }
    Ok(())
}

fn backoff_target(key: impl fmt::Display, t: BackoffTarget) -> Result<(), ConfigError> {
    if t.low == 0 {
        return Err(ConfigError::new(
            &key,
            "the low end must be at least 1 trigger per window".into(),
        ));
    }
    if t.low > t.high {
        return Err(ConfigError::new(
            &key,
            format!("low must not exceed high, got [{}, {}]", t.low, t.high),
        ));
    }
    Ok(())
}

fn http_codes(key: impl fmt::Display, codes: &[u16]) -> Result<(), ConfigError> {
    if let Some(c) = codes.iter().find(|c| !(100..=599).contains(*c)) {
        return Err(ConfigError::new(
            &key,
            format!("{c} is not an HTTP status code (100-599)"),
        ));
    }
    Ok(())
}

fn exceptions(key: impl fmt::Display, names: &[String]) -> Result<(), ConfigError> {
    if names.iter().any(|n| n.trim().is_empty()) {
        return Err(ConfigError::new(
            &key,
            "error kind names must not be empty".into(),
        ));
    }
    Ok(())
}

/// An invalid setting: which key, and what is wrong with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    key: String,
    reason: String,
}

impl ConfigError {
    pub(crate) fn new(key: &dyn fmt::Display, reason: String) -> Self {
        ConfigError {
            key: key.to_string(),
            reason,
        }
    }

    /// The offending key, e.g. `backoff_window` or `scopes."x.com".backoff.delay_factor`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What is wrong with its value.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid setting `{}`: {}", self.key, self.reason)
    }
}

impl core::error::Error for ConfigError {}

#[cfg(feature = "serde")]
mod serde_impls {
    //! Hand-written (de)serialisation for the values that accept several shapes, so that
    //! errors say what was expected instead of "did not match any variant".

    use super::*;
    use serde::de::{self, MapAccess, SeqAccess, Visitor};
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    impl Serialize for Jitter {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match *self {
                Jitter::Factor(j) => s.serialize_f64(j),
                Jitter::Range { low, high } => {
                    let mut seq = s.serialize_seq(Some(2))?;
                    seq.serialize_element(&low)?;
                    seq.serialize_element(&high)?;
                    seq.end()
                }
            }
        }
    }

    impl<'de> Deserialize<'de> for Jitter {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Jitter;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a boolean, a fraction like 0.5, or a [low, high] pair")
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<Jitter, E> {
                    Ok(if v { Jitter::HALF } else { Jitter::NONE })
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Jitter, E> {
                    Ok(Jitter::Factor(v))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Jitter, E> {
                    Ok(Jitter::Factor(v as f64))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Jitter, E> {
                    Ok(Jitter::Factor(v as f64))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Jitter, A::Error> {
                    let low: f64 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                    let high: f64 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                    if seq.next_element::<de::IgnoredAny>()?.is_some() {
                        return Err(de::Error::invalid_length(3, &self));
                    }
                    Ok(Jitter::Range { low, high })
                }
            }
            d.deserialize_any(V)
        }
    }

    impl Serialize for BackoffTarget {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            if self.low == self.high {
                s.serialize_u32(self.low)
            } else {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element(&self.low)?;
                seq.serialize_element(&self.high)?;
                seq.end()
            }
        }
    }

    impl<'de> Deserialize<'de> for BackoffTarget {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = BackoffTarget;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a whole number of triggers or a [low, high] pair")
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<BackoffTarget, E> {
                    let n = u32::try_from(v)
                        .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))?;
                    Ok(BackoffTarget::exactly(n))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<BackoffTarget, E> {
                    let n = u32::try_from(v)
                        .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))?;
                    Ok(BackoffTarget::exactly(n))
                }
                fn visit_seq<A: SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<BackoffTarget, A::Error> {
                    let low: u32 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                    let high: u32 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                    if seq.next_element::<de::IgnoredAny>()?.is_some() {
                        return Err(de::Error::invalid_length(3, &self));
                    }
                    Ok(BackoffTarget { low, high })
                }
            }
            d.deserialize_any(V)
        }
    }

    impl Serialize for Rampup {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Rampup::Off => s.serialize_bool(false),
                Rampup::On(cfg) if *cfg == RampupConfig::default() => s.serialize_bool(true),
                Rampup::On(cfg) => cfg.serialize(s),
            }
        }
    }

    impl<'de> Deserialize<'de> for Rampup {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Rampup;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str(
                        "true, false, or a table with backoff_target, delay_factor, min_delay",
                    )
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<Rampup, E> {
                    Ok(if v {
                        Rampup::On(RampupConfig::default())
                    } else {
                        Rampup::Off
                    })
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Rampup, A::Error> {
                    RampupConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                        .map(Rampup::On)
                }
            }
            d.deserialize_any(V)
        }
    }
}

#[cfg(all(test, feature = "serde"))]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Settings {
        serde_json::from_str(json).unwrap()
    }

    fn error_key(json: &str) -> String {
        parse(json).validate().unwrap_err().key().to_string()
    }

    #[test]
    fn defaults_match_the_spec_table() {
        let s = Settings::default();
        assert_eq!(s.concurrent_requests, 16);
        assert_eq!(s.concurrent_requests_per_domain, 8);
        assert_eq!(s.concurrent_requests_per_ip, 0);
        assert_eq!(s.throttling_scope_concurrency, 1);
        assert_eq!(s.download_delay, 0.0);
        assert_eq!(s.randomize_download_delay, Jitter::Factor(0.5));
        assert_eq!(
            s.backoff_http_codes,
            [429, 502, 503, 504, 520, 521, 522, 523, 524]
        );
        assert_eq!(s.backoff_exceptions, ["timeout", "connection", "data_loss"]);
        assert_eq!(s.backoff_delay_factor, 2.0);
        assert_eq!(s.backoff_min_delay, 1.0);
        assert_eq!(s.backoff_max_delay, 300.0);
        assert_eq!(s.backoff_jitter, Jitter::Factor(0.1));
        assert_eq!(s.backoff_window, 60.0);
        assert_eq!(s.rampup_backoff_target, BackoffTarget::exactly(1));
        assert_eq!(s.throttling_window, 60.0);
        assert_eq!(s.throttling_scope_limit, 100_000);
        assert_eq!(s.throttling_scope_max_idle, 3600.0);
        assert!(s.throttling_robotstxt_obey);
        assert_eq!(s.throttling_robotstxt_max_delay, 60.0);
        assert_eq!(s.delayed_requests_warn_threshold, 500);
        assert_eq!(s.depth_priority, 0);
        assert_eq!(s.depth_limit, 0);
        assert_eq!(s.scheduler_order, QueueOrder::Lifo);
        assert_eq!(s.start_order, StartOrder::Fifo);
        assert_eq!(s.seed, 0);
        s.validate().unwrap();
        // An empty document gives the defaults.
        assert_eq!(parse("{}"), s);
    }

    #[test]
    fn jitter_accepts_every_documented_shape() {
        assert_eq!(
            parse(r#"{"randomize_download_delay": true}"#).randomize_download_delay,
            Jitter::HALF
        );
        assert_eq!(
            parse(r#"{"randomize_download_delay": false}"#).randomize_download_delay,
            Jitter::NONE
        );
        assert_eq!(
            parse(r#"{"randomize_download_delay": 0.2}"#).randomize_download_delay,
            Jitter::Factor(0.2)
        );
        assert_eq!(
            parse(r#"{"randomize_download_delay": [-0.1, 0.3]}"#).randomize_download_delay,
            Jitter::Range {
                low: -0.1,
                high: 0.3
            }
        );
        let err = serde_json::from_str::<Settings>(r#"{"randomize_download_delay": "x"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("[low, high] pair"), "{err}");
        assert!(serde_json::from_str::<Settings>(r#"{"backoff_jitter": [1, 2, 3]}"#).is_err());
    }

    #[test]
    fn rampup_and_target_shapes() {
        let s = parse(
            r#"{"rampup_backoff_target": [1, 3],
                "scopes": {"a": {"rampup": true}, "b": {"rampup": {"delay_factor": 0.25}},
                           "c": {"rampup": false}}}"#,
        );
        assert_eq!(s.rampup_backoff_target, BackoffTarget { low: 1, high: 3 });
        assert_eq!(s.scopes["a"].rampup, Rampup::On(RampupConfig::default()));
        assert_eq!(
            s.scopes["b"].rampup,
            Rampup::On(RampupConfig::default().delay_factor(0.25))
        );
        assert_eq!(s.scopes["c"].rampup, Rampup::Off);
        let err = serde_json::from_str::<Settings>(r#"{"scopes": {"a": {"rampup": {"x": 1}}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `x`"), "{err}");
        assert!(serde_json::from_str::<Settings>(r#"{"rampup_backoff_target": -1}"#).is_err());
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let err = serde_json::from_str::<Settings>(r#"{"download_dela": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `download_dela`"), "{err}");
        let err = serde_json::from_str::<Settings>(r#"{"scopes": {"a": {"concurency": 1}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `concurency`"), "{err}");
        let err = serde_json::from_str::<Settings>(r#"{"scheduler_order": "random"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `random`"), "{err}");
    }

    #[test]
    fn toml_reads_like_scrapy_settings() {
        let s: Settings = toml::from_str(
            r#"
            download_delay = 2
            concurrent_requests = 32
            start_order = "same"
            [scopes."api.example.com"]
            concurrency = 4
            backoff = { http_codes = [429], max_delay = 120 }
            [scopes.cost]
            quota = 100
            "#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.download_delay, 2.0);
        assert_eq!(s.start_order, StartOrder::Same);
        assert_eq!(s.scopes["cost"].quota, Some(100.0));
        let back = toml::to_string(&s).unwrap();
        let again: Settings = toml::from_str(&back).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn invalid_values_name_their_key() {
        assert_eq!(
            error_key(r#"{"concurrent_requests": 0}"#),
            "concurrent_requests"
        );
        assert_eq!(error_key(r#"{"download_delay": -1}"#), "download_delay");
        assert_eq!(
            error_key(r#"{"backoff_delay_factor": 1.0}"#),
            "backoff_delay_factor"
        );
        assert_eq!(error_key(r#"{"backoff_window": -1}"#), "backoff_window");
        assert_eq!(
            error_key(r#"{"backoff_min_delay": 10, "backoff_max_delay": 5}"#),
            "backoff_min_delay"
        );
        assert_eq!(
            error_key(r#"{"backoff_http_codes": [42]}"#),
            "backoff_http_codes"
        );
        assert_eq!(
            error_key(r#"{"backoff_exceptions": [""]}"#),
            "backoff_exceptions"
        );
        assert_eq!(
            error_key(r#"{"randomize_download_delay": 1.5}"#),
            "randomize_download_delay"
        );
        assert_eq!(
            error_key(r#"{"randomize_download_delay": [0.5, 0.1]}"#),
            "randomize_download_delay"
        );
        assert_eq!(
            error_key(r#"{"rampup_backoff_target": [3, 1]}"#),
            "rampup_backoff_target"
        );
        assert_eq!(
            error_key(r#"{"rampup_backoff_target": 0}"#),
            "rampup_backoff_target"
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"concurrency": 2, "min_concurrency": 3}}}"#),
            r#"scopes."a".concurrency"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"min_concurrency": 0}}}"#),
            r#"scopes."a".min_concurrency"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"max_concurrency": 1, "min_concurrency": 2}}}"#),
            r#"scopes."a".max_concurrency"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"delay": -0.5}}}"#),
            r#"scopes."a".delay"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"quota": 0}}}"#),
            r#"scopes."a".quota"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"window": -0.5}}}"#),
            r#"scopes."a".window"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"rampup": {"delay_factor": 1.5}}}}"#),
            r#"scopes."a".rampup.delay_factor"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"backoff": {"min_delay": 400}}}}"#),
            r#"scopes."a".backoff.min_delay"#
        );
        assert_eq!(
            error_key(r#"{"scopes": {"a": {"backoff": {"http_codes": [700]}}}}"#),
            r#"scopes."a".backoff.http_codes"#
        );
        // 0 means unlimited and is never "below min_concurrency".
        parse(r#"{"scopes": {"a": {"concurrency": 0, "min_concurrency": 2}}}"#)
            .validate()
            .unwrap();
    }

    #[test]
    fn non_finite_values_are_rejected() {
        let mut s = Settings::default();
        s.backoff_window = f64::NAN;
        assert_eq!(s.validate().unwrap_err().key(), "backoff_window");
        let mut s = Settings::default();
        s.download_delay = f64::INFINITY;
        assert_eq!(s.validate().unwrap_err().key(), "download_delay");
        let s = Settings::default().with_scope("x", ScopeConfig::new().delay(f64::NAN));
        let err = s.validate().unwrap_err();
        assert_eq!(err.key(), r#"scopes."x".delay"#);
        assert!(
            err.to_string()
                .starts_with("invalid setting `scopes.\"x\".delay`")
        );
    }

    #[test]
    fn jitter_application() {
        let mut rng = JitterRng::new(3);
        for _ in 0..1000 {
            let v = Jitter::HALF.apply(2.0, &mut rng);
            assert!((1.0..3.0).contains(&v));
            let v = Jitter::Range {
                low: -1.0,
                high: -0.5,
            }
            .apply(2.0, &mut rng);
            assert!((0.0..=1.0).contains(&v));
        }
        assert_eq!(Jitter::NONE.apply(2.0, &mut rng), 2.0);
        assert_eq!(Jitter::HALF.apply(0.0, &mut rng), 0.0);
        assert_eq!(Jitter::HALF.lower_bound(2.0), 1.0);
    }

    #[test]
    fn api_client_preset() {
        let s = Settings::api_client().with_scope("api", ScopeConfig::per_minute(120.0));
        assert!(s.validate().is_ok());
        let api = &s.scopes["api"];
        assert_eq!((api.delay, api.jitter), (Some(0.5), Some(Jitter::NONE)));
        assert_eq!(s.randomize_download_delay, Jitter::NONE);
        assert_eq!(s.backoff_http_codes, vec![429, 503]);
        for n in [0.0, -1.0, f64::NAN] {
            let bad = Settings::api_client().with_scope("api", ScopeConfig::per_second(n));
            let err = bad.validate().unwrap_err().to_string();
            assert!(err.contains("delay"), "{n}: {err}");
        }
    }
}
