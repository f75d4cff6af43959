//! [`Settings`]: every setting of the throttler, with Scrapy's names.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
// Named by the setters' docs.
#[cfg(doc)]
use core::time::Duration;

use super::{BackoffTarget, Jitter, ScopeConfig, Seconds};

/// All settings of the throttler (docs/behaviour.md section 2), with Scrapy's names.
///
/// The frontier's ordering settings (`depth_priority`, `depth_limit`, `scheduler_order`,
/// `start_order`), written in the same table by users, belong to polite-frontier-core's
/// `FrontierConfig`.
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
}
