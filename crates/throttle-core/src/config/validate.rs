//! Validation: the checks of every setting, and [`ConfigError`] naming the offending key.

use alloc::format;
use alloc::string::{String, ToString};
use core::fmt;

use super::{BackoffTarget, Jitter, Rampup, ScopeConfig, Settings};

impl Settings {
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

impl Jitter {
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
