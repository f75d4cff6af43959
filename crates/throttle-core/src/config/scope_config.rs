//! Per-scope configuration: jitter, backoff and rampup tuning, and [`ScopeConfig`].

use alloc::string::String;
use alloc::vec::Vec;
// Named by the setters' docs.
#[cfg(doc)]
use core::time::Duration;

use super::Seconds;
use crate::rng::JitterRng;

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
