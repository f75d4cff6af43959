//! Settings for `crawl` and `demo`: a TOML file, then environment overrides.
//!
//! The file holds the throttling and ordering settings of docs/behaviour.md section 2 at the top level
//! (Scrapy's names in snake_case, per-scope tables under `[scopes."host"]`) and the
//! crawler's own settings under `[crawl]`:
//!
//! ```toml
//! download_delay = 0.25
//! concurrent_requests = 32
//!
//! [scopes."api.example.com"]
//! rampup = { backoff_target = [1, 3], min_delay = 0.05 }
//!
//! [crawl]
//! retry_times = 3
//! user_agent = "mybot/1.0 (+https://example.com/bot)"
//! ```
//!
//! An environment variable `FRONTIER_<KEY>` overrides the top-level key `<key>`
//! (`FRONTIER_DOWNLOAD_DELAY=0.5`), and `FRONTIER_CRAWL_<KEY>` a crawler key
//! (`FRONTIER_CRAWL_RETRY_TIMES=0`). Values are read as TOML (`0.5`, `true`,
//! `[0.0, 0.25]`, `"fifo"`); a bare word is taken as a string. Per-scope tables cannot be
//! overridden from the environment. Every error names the key (and the file or
//! variable) it comes from; nothing is silently clamped.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use polite_frontier_core::{FrontierConfig, SettingsFile};
use polite_throttle_core::Settings;
use serde::{Deserialize, Serialize};

/// Prefix of the environment variables that override settings.
pub const ENV_PREFIX: &str = "FRONTIER_";

/// The crawler's own settings (the `[crawl]` table), with Scrapy's defaults where Scrapy
/// has the setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlSettings {
    /// Retries of a failed request (5xx, 429, timeout, connection error) before it is
    /// given up (Scrapy's `RETRY_TIMES`).
    pub retry_times: u32,
    /// Priority change of each retry (Scrapy's `RETRY_PRIORITY_ADJUST`).
    pub retry_priority_adjust: i32,
    /// Statuses that are retried (Scrapy's `RETRY_HTTP_CODES`).
    pub retry_http_codes: Vec<u16>,
    /// Seconds before a request times out (Scrapy's `DOWNLOAD_TIMEOUT` is 180).
    pub download_timeout: f64,
    /// Largest body read, in bytes; longer bodies are cut and the page marked truncated.
    pub download_maxsize: u64,
    /// The `User-Agent` header, also the agent matched in robots.txt.
    pub user_agent: String,
    /// Fetch robots.txt once per host and obey it (Scrapy's `ROBOTSTXT_OBEY`).
    pub robotstxt_obey: bool,
    /// Redirect hops followed from one URL (Scrapy's `REDIRECT_MAX_TIMES`).
    pub redirect_max_times: u32,
    /// Priority change of a redirect hop (Scrapy's `REDIRECT_PRIORITY_ADJUST`).
    pub redirect_priority_adjust: i32,
    /// Cap, in seconds, on a redirect's `Retry-After` honoured as the hop's delay.
    pub redirect_max_delay: f64,
    /// Requeues of one request answered 429, or 503 with `Retry-After`: the site asking
    /// us to slow down, which the throttler does, so these do not spend `retry_times`.
    pub max_throttled_retries: u32,
    /// Seconds a fetched robots.txt is trusted before it is fetched again (RFC 9309
    /// suggests no more than 24 hours).
    pub robotstxt_cache_lifetime: f64,
    /// Seconds before a robots.txt that could not be reached (5xx, no answer) is tried
    /// again; meanwhile its origin is disallowed entirely.
    pub robotstxt_unreachable_retry: f64,
    /// With a Redis store: seconds after which a lease not completed is delivered to
    /// another worker (its process is presumed dead).
    pub lease_timeout: f64,
}

impl Default for CrawlSettings {
    fn default() -> Self {
        CrawlSettings {
            retry_times: 2,
            retry_priority_adjust: -1,
            retry_http_codes: vec![500, 502, 503, 504, 522, 524, 408, 429],
            download_timeout: 30.0,
            download_maxsize: 16 * 1024 * 1024,
            user_agent: concat!("polite-frontier/", env!("CARGO_PKG_VERSION")).to_string(),
            robotstxt_obey: true,
            redirect_max_times: 20,
            redirect_priority_adjust: 2,
            redirect_max_delay: 60.0,
            max_throttled_retries: 10,
            robotstxt_cache_lifetime: 86_400.0,
            robotstxt_unreachable_retry: 600.0,
            lease_timeout: 120.0,
        }
    }
}

impl CrawlSettings {
    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, reason: &str| {
            Err(ConfigError::Invalid {
                source: Source::Value,
                key: format!("crawl.{key}"),
                reason: reason.to_string(),
            })
        };
        if !(self.download_timeout.is_finite() && self.download_timeout > 0.0) {
            return bad("download_timeout", "must be a positive number of seconds");
        }
        if !(self.redirect_max_delay.is_finite() && self.redirect_max_delay >= 0.0) {
            return bad(
                "redirect_max_delay",
                "must be a non-negative number of seconds",
            );
        }
        for (key, v) in [
            ("robotstxt_cache_lifetime", self.robotstxt_cache_lifetime),
            (
                "robotstxt_unreachable_retry",
                self.robotstxt_unreachable_retry,
            ),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(key, "must be a non-negative number of seconds");
            }
        }
        if self.download_maxsize == 0 {
            return bad("download_maxsize", "must be at least 1 byte");
        }
        if self.user_agent.trim().is_empty() {
            return bad("user_agent", "must not be empty");
        }
        if let Some(code) = self
            .retry_http_codes
            .iter()
            .find(|c| !(100..=599).contains(*c))
        {
            return bad("retry_http_codes", &format!("{code} is not an HTTP status"));
        }
        Ok(())
    }
}

/// Everything `crawl` and `demo` read from `--config` and the environment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// Throttling (docs/behaviour.md section 2).
    pub settings: Settings,
    /// Ordering (`depth_priority`, `depth_limit`, `scheduler_order`, `start_order`, read
    /// from the same table as `settings`); the other options at their defaults.
    pub frontier: FrontierConfig,
    /// The crawler's own settings.
    pub crawl: CrawlSettings,
}

/// Where a bad value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A settings file.
    File(PathBuf),
    /// An environment variable.
    Env(String),
    /// A `-s KEY=VALUE` option.
    Flag(String),
    /// The merged settings (a value that parses but is out of range).
    Value,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::Flag(pair) => write!(f, "-s {pair}"),
            Source::Value => f.write_str("settings"),
        }
    }
}

/// Why settings could not be loaded.
#[derive(Debug, PartialEq)]
pub enum ConfigError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// The file is not valid TOML.
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        reason: String,
    },
    /// A key that does not exist or a value of the wrong shape or range.
    Invalid {
        /// Where it came from.
        source: Source,
        /// The key, e.g. `download_delay` or `scopes."x.com".delay`.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, reason } => {
                write!(f, "cannot read settings file {}: {reason}", path.display())
            }
            ConfigError::Syntax { path, reason } => {
                write!(
                    f,
                    "settings file {} is not valid TOML: {reason}",
                    path.display()
                )
            }
            ConfigError::Invalid {
                source,
                key,
                reason,
            } => write!(f, "{source}: invalid setting `{key}`: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Loads `file` (if any) over `base`, then the `FRONTIER_*` variables of `env`
    /// (pass `std::env::vars()`), and validates the result.
    pub fn load(
        base: &Config,
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = to_table(base);
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
            let file_table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Syntax {
                        path: path.to_path_buf(),
                        reason: e.to_string().trim_end().to_string(),
                    })?;
            merge(&mut table, file_table);
            // Check now so the error names the file.
            from_table(&table, &Source::File(path.to_path_buf()))?;
        }
        let mut overrides: BTreeMap<String, String> = BTreeMap::new();
        for (var, value) in env {
            if var.starts_with(ENV_PREFIX) && !RESERVED_ENV.contains(&var.as_str()) {
                overrides.insert(var, value);
            }
        }
        for (var, value) in overrides {
            let key = var[ENV_PREFIX.len()..].to_ascii_lowercase();
            let value = parse_env_value(&value);
            let source = Source::Env(var.clone());
            if let Some(crawl_key) = key.strip_prefix("crawl_") {
                let crawl = table
                    .entry("crawl")
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(crawl) = crawl {
                    crawl.insert(crawl_key.to_string(), value);
                }
            } else if key == "scopes" || key == "crawl" {
                return Err(ConfigError::Invalid {
                    source,
                    key,
                    reason: "tables cannot be set from the environment; use --config".into(),
                });
            } else {
                table.insert(key, value);
            }
            from_table(&table, &source)?;
        }
        from_table(&table, &Source::Value)
    }
}

impl Config {
    /// Applies `-s KEY=VALUE` overrides over `self` (after the file and the environment):
    /// `KEY` is a dotted path, `download_delay`, `crawl.retry_times` or
    /// `scopes."api.example.com".delay` (quotes optional when the name has no dot:
    /// `scopes.localhost.delay`); `VALUE` is read as TOML, a bare word as a string.
    pub fn with_overrides(&self, pairs: &[String]) -> Result<Config, ConfigError> {
        let mut table = to_table(self);
        for pair in pairs {
            let source = Source::Flag(pair.clone());
            let Some((key, value)) = pair.split_once('=') else {
                return Err(ConfigError::Invalid {
                    source,
                    key: pair.clone(),
                    reason: "expected KEY=VALUE".into(),
                });
            };
            let path = split_key(key.trim()).ok_or_else(|| ConfigError::Invalid {
                source: source.clone(),
                key: key.to_string(),
                reason: "not a key path (e.g. download_delay, crawl.retry_times, scopes.\"example.com\".delay)".into(),
            })?;
            let (last, parents) = path
                .split_last()
                .expect("split_key returns a non-empty path");
            let mut at = &mut table;
            for part in parents {
                let next = at
                    .entry(part.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                at = match next {
                    toml::Value::Table(t) => t,
                    _ => {
                        return Err(ConfigError::Invalid {
                            source,
                            key: key.to_string(),
                            reason: format!("`{part}` is not a table"),
                        });
                    }
                };
            }
            at.insert(last.clone(), parse_env_value(value.trim()));
            from_table(&table, &source)?;
        }
        from_table(&table, &Source::Value)
    }
}

/// `a.b."c.d".e` -> [a, b, c.d, e]; `None` for an empty part or an unclosed quote.
fn split_key(key: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut rest = key;
    while !rest.is_empty() {
        let (part, tail) = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"')?;
            (quoted[..end].to_string(), &quoted[end + 1..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            (rest[..end].to_string(), &rest[end..])
        };
        if part.is_empty() {
            return None;
        }
        parts.push(part);
        rest = match tail.strip_prefix('.') {
            Some(t) if !t.is_empty() => t,
            Some(_) => return None,
            None if tail.is_empty() => tail,
            None => return None,
        };
    }
    (!parts.is_empty()).then_some(parts)
}

/// `FRONTIER_*` variables that are command options, not settings.
const RESERVED_ENV: &[&str] = &["FRONTIER_CONFIG", "FRONTIER_STORE", "FRONTIER_LOG"];

fn parse_env_value(text: &str) -> toml::Value {
    // Parse as the right-hand side of a TOML assignment; a bare word is a string.
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

fn to_table(config: &Config) -> toml::Table {
    let both = SettingsFile::new(config.settings.clone(), config.frontier.clone());
    let mut table = toml::Table::try_from(&both).expect("settings serialize to TOML");
    table.insert(
        "crawl".into(),
        toml::Value::Table(
            toml::Table::try_from(&config.crawl).expect("crawl settings serialize to TOML"),
        ),
    );
    table
}

/// Overlays `over` on `base`: tables merge key by key, everything else is replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

fn from_table(table: &toml::Table, source: &Source) -> Result<Config, ConfigError> {
    let mut table = table.clone();
    let crawl = table
        .remove("crawl")
        .unwrap_or(toml::Value::Table(toml::Table::new()));
    // One table: the frontier's ordering keys go to `frontier`, the rest to `settings`.
    let file: SettingsFile = deserialize(toml::Value::Table(table), source, "")?;
    let (settings, frontier) = (file.throttle, file.frontier);
    let crawl: CrawlSettings = deserialize(crawl, source, "crawl.")?;
    settings.validate().map_err(|e| ConfigError::Invalid {
        source: source.clone(),
        key: e.key().to_string(),
        reason: e.reason().to_string(),
    })?;
    crawl.validate().map_err(|e| match e {
        ConfigError::Invalid { key, reason, .. } => ConfigError::Invalid {
            source: source.clone(),
            key,
            reason,
        },
        other => other,
    })?;
    Ok(Config {
        settings,
        frontier,
        crawl,
    })
}

fn deserialize<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    source: &Source,
    prefix: &str,
) -> Result<T, ConfigError> {
    let mut track = serde_path_to_error::Track::new();
    T::deserialize(serde_path_to_error::Deserializer::new(value, &mut track)).map_err(|e| {
        let path = track.path().to_string();
        let message = e.to_string();
        // serde names an unknown field in its message; point at it in the key.
        let key = match unknown_field(&message) {
            Some(field) if path == "." || path.is_empty() => format!("{prefix}{field}"),
            _ => format!("{prefix}{path}"),
        };
        ConfigError::Invalid {
            source: source.clone(),
            key: key.trim_end_matches('.').to_string(),
            reason: message,
        }
    })
}

fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn file_then_environment() {
        let file = write(
            "download_delay = 0.5\nconcurrent_requests = 4\n[scopes.\"a.test\"]\nconcurrency = 2\n[crawl]\nretry_times = 5\n",
        );
        let config = Config::load(
            &Config::default(),
            Some(file.path()),
            env(&[
                ("FRONTIER_DOWNLOAD_DELAY", "0.25"),
                ("FRONTIER_SCHEDULER_ORDER", "fifo"),
                ("FRONTIER_CRAWL_USER_AGENT", "bot/1"),
                ("HOME", "/root"),
            ]),
        )
        .unwrap();
        assert_eq!(config.settings.download_delay, 0.25);
        assert_eq!(config.settings.concurrent_requests, 4);
        assert_eq!(config.settings.scopes["a.test"].concurrency, Some(2));
        assert_eq!(
            config.frontier.scheduler_order,
            polite_frontier_core::QueueOrder::Fifo
        );
        assert_eq!(config.crawl.retry_times, 5);
        assert_eq!(config.crawl.user_agent, "bot/1");
    }

    #[test]
    fn base_values_survive_a_file_that_does_not_mention_them() {
        let mut base = Config::default();
        base.settings.download_delay = 2.0;
        base.crawl.retry_times = 0;
        let file = write("concurrent_requests = 3\n");
        let config = Config::load(&base, Some(file.path()), env(&[])).unwrap();
        assert_eq!(config.settings.download_delay, 2.0);
        assert_eq!(config.crawl.retry_times, 0);
        assert_eq!(config.settings.concurrent_requests, 3);
    }

    /// The frontier's ordering keys sit in the same table as the throttler's, as before
    /// they moved to `FrontierConfig`; an unknown key beside them is still named.
    #[test]
    fn a_file_with_the_frontier_keys_loads_and_unknown_keys_are_rejected() {
        use polite_frontier_core::{QueueOrder, StartOrder};
        let file = write(
            "download_delay = 1\ndepth_priority = 1\ndepth_limit = 4\nscheduler_order = \"fifo\"\nstart_order = \"same\"\n[crawl]\nretry_times = 1\n",
        );
        let config = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap();
        assert_eq!(config.settings.download_delay, 1.0);
        assert_eq!(config.frontier.depth_priority, 1);
        assert_eq!(config.frontier.depth_limit, 4);
        assert_eq!(config.frontier.scheduler_order, QueueOrder::Fifo);
        assert_eq!(config.frontier.start_order, StartOrder::Same);
        assert_eq!(config.crawl.retry_times, 1);
        // They survive a reload on top (the merge goes through a table).
        let again = Config::load(&config, None, env(&[("FRONTIER_DEPTH_LIMIT", "5")])).unwrap();
        assert_eq!(again.frontier.depth_limit, 5);
        assert_eq!(again.frontier.scheduler_order, QueueOrder::Fifo);

        let file = write("depth_limit = 2\nscheduler_ordr = \"fifo\"\n");
        let err = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap_err();
        assert!(err.to_string().contains("`scheduler_ordr`"), "{err}");
        let file = write("start_order = \"random\"\n");
        let err = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap_err();
        assert!(err.to_string().contains("start_order"), "{err}");
    }

    #[test]
    fn errors_name_the_key_and_where_it_came_from() {
        let file = write("download_dealy = 0.5\n");
        let err = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`download_dealy`"), "{text}");
        assert!(text.contains(&file.path().display().to_string()), "{text}");

        let file = write("[scopes.\"x.test\"]\ndelay = -1.0\n");
        let err = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap_err();
        assert!(err.to_string().contains("scopes"), "{err}");
        assert!(err.to_string().contains("delay"), "{err}");

        let file = write("[crawl]\nretry_tims = 1\n");
        let err = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap_err();
        assert!(err.to_string().contains("`crawl.retry_tims`"), "{err}");

        let err = Config::load(
            &Config::default(),
            None,
            env(&[("FRONTIER_BACKOFF_DELAY_FACTOR", "0.5")]),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("FRONTIER_BACKOFF_DELAY_FACTOR"), "{text}");
        assert!(text.contains("backoff_delay_factor"), "{text}");

        let err = Config::load(
            &Config::default(),
            None,
            env(&[("FRONTIER_CONCURRENT_REQUESTS", "many")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("concurrent_requests"), "{err}");

        let err = Config::load(
            &Config::default(),
            None,
            env(&[("FRONTIER_CRAWL_DOWNLOAD_TIMEOUT", "0")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("crawl.download_timeout"), "{err}");

        let file = write("download_delay = [\n");
        let err = Config::load(&Config::default(), Some(file.path()), env(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");

        let err = Config::load(
            &Config::default(),
            Some(Path::new("/nonexistent/x.toml")),
            env(&[]),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    }

    #[test]
    fn set_flags_reach_any_key_and_name_it_on_error() {
        let base = Config::default();
        let c = base
            .with_overrides(&[
                "download_delay=0.5".into(),
                "crawl.retry_times=0".into(),
                "scopes.\"api.example.com\".delay=2".into(),
                "scopes.localhost.concurrency=3".into(),
            ])
            .unwrap();
        assert_eq!(c.settings.download_delay, 0.5);
        assert_eq!(c.crawl.retry_times, 0);
        assert_eq!(c.settings.scopes["api.example.com"].delay, Some(2.0));
        assert_eq!(c.settings.scopes["localhost"].concurrency, Some(3));
        let err = base
            .with_overrides(&["download_dely=1".into()])
            .unwrap_err();
        assert!(err.to_string().contains("-s download_dely=1"), "{err}");
        assert!(err.to_string().contains("download_dely"), "{err}");
        let err = base
            .with_overrides(&["crawl.retry_times=-1".into()])
            .unwrap_err();
        assert!(err.to_string().contains("crawl.retry_times"), "{err}");
        for bad in ["nokey", "a..b=1", "scopes.\"x=1", "=3"] {
            assert!(base.with_overrides(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
