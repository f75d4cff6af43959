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
//!
//! [`Settings`] lives in `settings`, the per-scope
//! [`ScopeConfig`] and its parts in `scope_config`, the checks and [`ConfigError`] in
//! `validate`, and the (de)serialisation of the values that accept several shapes in
//! `serde_impls`.

use core::time::Duration;

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

mod scope_config;
#[cfg(feature = "serde")]
mod serde_impls;
mod settings;
#[cfg(all(test, feature = "serde"))]
mod tests;
mod validate;

pub use scope_config::{BackoffConfig, BackoffTarget, Jitter, Rampup, RampupConfig, ScopeConfig};
pub use settings::Settings;
pub use validate::ConfigError;
