//! Scenario files: their serde shape, loading (TOML or JSON) and validation.
//!
//! Everything that can be checked before the run is checked here, so that a bad file
//! fails with a message naming the key (and, for syntax and type errors, the line)
//! before any output is printed.

use std::fmt;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use polite_frontier_core::{
    FrontierConfig, Method, Policy, Request, SettingsFile, fingerprint, group_key, host_scope,
};
use polite_throttle_core::{QuotaReconcile, Settings, Timestamp};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

use super::output::Answer;

/// Longest span accepted for `at`, latencies and timeouts: about 31 years, far below
/// what nanoseconds in a `u64` can hold.
const MAX_SECS: f64 = 1e9;

/// Unix time of virtual time 0 unless `[simulation] epoch` says otherwise:
/// 2025-01-01T00:00:00Z.
pub(crate) const DEFAULT_EPOCH: u64 = 1_735_689_600;

/// Scrapy's `RETRY_HTTP_CODES`.
const SCRAPY_RETRY_HTTP_CODES: [u16; 8] = [500, 502, 503, 504, 522, 524, 408, 429];

/// How a scenario file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// TOML (`.toml`).
    Toml,
    /// JSON (`.json`).
    Json,
}

impl Format {
    /// The format named by a file's extension, if it names one.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "toml" => Some(Format::Toml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    /// Guesses from the text: JSON when the first non-blank character opens an object.
    pub fn sniff(text: &str) -> Format {
        if text
            .trim_start_matches('\u{feff}')
            .trim_start()
            .starts_with('{')
        {
            Format::Json
        } else {
            Format::Toml
        }
    }
}

/// A number of seconds, finite and not negative (integers accepted).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Seconds(pub(crate) f64);

impl Seconds {
    /// The span in whole nanoseconds, rounded to the nearest.
    pub(crate) fn nanos(self) -> u64 {
        (self.0 * 1e9).round() as u64
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a number of seconds between 0 and {MAX_SECS:e}")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seconds, E> {
                if v.is_finite() && (0.0..=MAX_SECS).contains(&v) {
                    Ok(Seconds(v))
                } else {
                    Err(E::invalid_value(Unexpected::Float(v), &self))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                if v < 0 {
                    return Err(E::invalid_value(Unexpected::Signed(v), &self));
                }
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seconds, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_any(V)
    }
}

/// Explicit scopes of a request: a list of names (amount 1 each) or a map name → amount.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ScopesSpec(pub(crate) Vec<(String, f64)>);

impl<'de> Deserialize<'de> for ScopesSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ScopesSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of scope names or a map of scope name to quota amount")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ScopesSpec, A::Error> {
                let mut out = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    out.push((name, 1.0));
                }
                Ok(ScopesSpec(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ScopesSpec, A::Error> {
                let mut out = Vec::new();
                while let Some((name, amount)) = map.next_entry::<String, f64>()? {
                    if !amount.is_finite() || amount < 0.0 {
                        return Err(de::Error::invalid_value(
                            Unexpected::Float(amount),
                            &"a quota amount >= 0",
                        ));
                    }
                    out.push((name, amount));
                }
                Ok(ScopesSpec(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Response headers: a map of name to value; numbers and booleans are written as text.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Headers(pub(crate) Vec<(String, String)>);

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Value(String);
        impl<'de> Deserialize<'de> for Value {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = Value;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a header value (text or a number)")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
                        Ok(Value(v.to_owned()))
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
                        Ok(Value(v.to_string()))
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
                        Ok(Value(v.to_string()))
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
                        Ok(Value(v.to_string()))
                    }
                    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
                        Ok(Value(v.to_string()))
                    }
                }
                d.deserialize_any(V)
            }
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Headers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of header name to value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Headers, A::Error> {
                let mut out = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, Value>()? {
                    out.push((name, value.0));
                }
                Ok(Headers(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Which scheduling policy the frontier uses (`[simulation] policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PolicyName {
    /// Throttling-aware (the default, docs/behaviour.md 4.3).
    #[default]
    ThrottlingAware,
    /// Scrapy's slot-aware order (docs/behaviour.md 4.4).
    SlotAware,
}

impl PolicyName {
    pub(crate) fn policy(self) -> Policy {
        match self {
            PolicyName::ThrottlingAware => Policy::ThrottlingAware,
            PolicyName::SlotAware => Policy::SlotAware,
        }
    }
}

/// `[simulation]`: knobs of the simulator itself (not throttling settings).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SimulationConfig {
    /// Unix time (seconds) of virtual time 0; the wall clock for HTTP-dates.
    pub(crate) epoch: u64,
    /// The frontier's scheduling policy.
    pub(crate) policy: PolicyName,
    /// Site models: how many times a failed request is retried (0 = never).
    pub(crate) retry_times: u32,
    /// Site models: statuses that are retried.
    pub(crate) retry_http_codes: Vec<u16>,
    /// Site models: priority change of a retried request.
    pub(crate) retry_priority_adjust: i32,
}

impl Default for SimulationConfig {
    fn default() -> Self {
        SimulationConfig {
            epoch: DEFAULT_EPOCH,
            policy: PolicyName::default(),
            retry_times: 2,
            retry_http_codes: SCRAPY_RETRY_HTTP_CODES.to_vec(),
            retry_priority_adjust: -1,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    /// The throttler's settings and the frontier's ordering keys, in one table.
    #[serde(default)]
    settings: SettingsFile,
    #[serde(default)]
    simulation: SimulationConfig,
    events: Option<Vec<EventSpec>>,
    sites: Option<Vec<SiteSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    at: Seconds,
    push: Option<PushSpec>,
    delay_scope: Option<ScopeSecondsSpec>,
    crawl_delay: Option<ScopeSecondsSpec>,
    set_scope: Option<SetScopeSpec>,
    reconcile_quota: Option<ReconcileSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeSecondsSpec {
    scope: String,
    seconds: Seconds,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetScopeSpec {
    scope: String,
    delay: Option<Seconds>,
    concurrency: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileSpec {
    scope: String,
    consumed: Option<f64>,
    remaining: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PushSpec {
    id: Option<String>,
    url: String,
    method: Option<String>,
    callback: Option<String>,
    depth: Option<u32>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    start: bool,
    scopes: Option<ScopesSpec>,
    delay: Option<Seconds>,
    #[serde(default)]
    dont_track: bool,
    #[serde(default)]
    dont_filter: bool,
    #[serde(default)]
    dont_throttle: bool,
    response: Option<ResponseSpec>,
    #[serde(default)]
    children: Vec<PushSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponseSpec {
    #[serde(default)]
    latency: Seconds,
    status: Option<u16>,
    #[serde(default)]
    headers: Headers,
    error: Option<String>,
}

/// A latency: a fixed number of seconds or a `[low, high]` range drawn uniformly.
#[derive(Clone, Copy, Debug, PartialEq)]
struct LatencySpec(Seconds, Seconds);

impl<'de> Deserialize<'de> for LatencySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LatencySpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of seconds or a [low, high] pair")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LatencySpec, E> {
                let s = Seconds::deserialize(de::value::F64Deserializer::<E>::new(v))?;
                Ok(LatencySpec(s, s))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LatencySpec, E> {
                let s = Seconds::deserialize(de::value::I64Deserializer::<E>::new(v))?;
                Ok(LatencySpec(s, s))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LatencySpec, E> {
                let s = Seconds::deserialize(de::value::U64Deserializer::<E>::new(v))?;
                Ok(LatencySpec(s, s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LatencySpec, A::Error> {
                let lo: Seconds = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let hi: Seconds = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                if lo.0 > hi.0 {
                    return Err(de::Error::custom(format!(
                        "latency range [{}, {}] has low > high",
                        lo.0, hi.0
                    )));
                }
                Ok(LatencySpec(lo, hi))
            }
        }
        d.deserialize_any(V)
    }
}

/// `retry_after`: whole seconds, or `"auto"` (the time until the server's window frees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryAfter {
    /// This many seconds, always.
    Fixed(u64),
    /// The whole seconds (rounded up, at least 1) until a request would be accepted.
    Auto,
}

impl<'de> Deserialize<'de> for RetryAfter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RetryAfter;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of seconds or \"auto\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RetryAfter, E> {
                Ok(RetryAfter::Fixed(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RetryAfter, E> {
                u64::try_from(v)
                    .map(RetryAfter::Fixed)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RetryAfter, E> {
                if v == "auto" {
                    Ok(RetryAfter::Auto)
                } else {
                    Err(E::invalid_value(Unexpected::Str(v), &self))
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitSpec {
    requests: u32,
    #[serde(default = "one_second")]
    per: Seconds,
    retry_after: Option<RetryAfter>,
    #[serde(default = "status_429")]
    status: u16,
}

fn one_second() -> Seconds {
    Seconds(1.0)
}
fn status_429() -> u16 {
    429
}
fn one() -> u32 {
    1
}
fn four() -> u32 {
    4
}
fn tenth() -> LatencySpec {
    LatencySpec(Seconds(0.1), Seconds(0.1))
}
fn timeout_kind() -> String {
    "timeout".to_owned()
}
fn download_timeout() -> Seconds {
    Seconds(180.0)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteSpec {
    host: String,
    #[serde(default = "one")]
    count: u32,
    pages: u64,
    #[serde(default = "four")]
    links_per_page: u32,
    #[serde(default)]
    cross_links: u32,
    #[serde(default = "tenth")]
    latency: LatencySpec,
    rate_limit: Option<RateLimitSpec>,
    crawl_delay: Option<Seconds>,
    #[serde(default)]
    error_rate: f64,
    #[serde(default = "timeout_kind")]
    error: String,
    #[serde(default = "download_timeout")]
    timeout: Seconds,
}

/// A request to push, validated, with how it will end.
#[derive(Clone, Debug)]
pub(crate) struct Push {
    /// The label printed in output lines (`id`, or the URL).
    pub(crate) id: Box<str>,
    /// The request as pushed (children get their depth from their parent when pushed).
    pub(crate) request: Request,
    /// Nanoseconds from send to answer.
    pub(crate) latency: u64,
    /// What comes back.
    pub(crate) answer: Answer,
    /// Response headers (rate-limit headers are honoured on backoff triggers).
    pub(crate) headers: Vec<(String, String)>,
    /// Pushed when the answer arrives, one level deeper.
    pub(crate) children: Vec<Push>,
}

/// One replay input, validated.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    /// Push a request.
    Push(Push),
    /// `delay_scope`: nothing goes to the scope for this many seconds.
    DelayScope { scope: String, seconds: f64 },
    /// A robots.txt Crawl-delay reported for the scope.
    CrawlDelay { scope: String, seconds: f64 },
    /// Live reconfiguration of a scope.
    SetScope {
        scope: String,
        delay: Option<f64>,
        concurrency: Option<u32>,
    },
    /// A quota correction.
    Reconcile { scope: String, how: QuotaReconcile },
}

/// A replay event: what happens, and when.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) at: Timestamp,
    /// Position in the file (ties at one instant are applied in this order).
    pub(crate) index: usize,
    pub(crate) action: Action,
}

/// A server-side rate limit of a modelled site.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RateLimit {
    /// Requests accepted per window.
    pub(crate) requests: u32,
    /// The sliding window, in nanoseconds.
    pub(crate) per: u64,
    /// The `Retry-After` header sent with refusals, if any.
    pub(crate) retry_after: Option<RetryAfter>,
    /// The status of refusals.
    pub(crate) status: u16,
}

/// A modelled site (one `[[sites]]` entry, possibly standing for `count` hosts).
#[derive(Clone, Debug)]
pub(crate) struct SiteModel {
    pub(crate) pages: u64,
    pub(crate) links_per_page: u32,
    pub(crate) cross_links: u32,
    /// Latency range in nanoseconds (equal ends: fixed).
    pub(crate) latency: (u64, u64),
    pub(crate) rate_limit: Option<RateLimit>,
    pub(crate) crawl_delay: Option<f64>,
    pub(crate) error_rate: f64,
    pub(crate) error: Box<str>,
    /// Nanoseconds before an error is reported.
    pub(crate) timeout: u64,
}

/// What a scenario runs: a replay or site models.
#[derive(Clone, Debug)]
pub(crate) enum Body {
    /// Scripted events, sorted by time (file order within an instant).
    Replay(Vec<Event>),
    /// Site models and their hosts (`(host, model index)`, in file order).
    Sites {
        models: Vec<SiteModel>,
        hosts: Vec<(Box<str>, u32)>,
    },
}

/// A parsed and validated scenario, ready to [`simulate`](super::simulate).
#[derive(Clone, Debug)]
pub struct Scenario {
    pub(crate) settings: Settings,
    /// The frontier's ordering settings (from the `[settings]` table too).
    pub(crate) frontier: FrontierConfig,
    pub(crate) simulation: SimulationConfig,
    pub(crate) body: Body,
}

/// Most hosts the site models may expand to.
const MAX_HOSTS: u64 = 10_000_000;

impl Scenario {
    /// Reads and validates a scenario file (`-` reads standard input). The format comes
    /// from `format`, else the extension, else a look at the text.
    pub fn load(path: &Path, format: Option<Format>) -> anyhow::Result<Scenario> {
        let text = if path.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the scenario from standard input")?;
            s
        } else {
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read scenario {}", path.display()))?
        };
        let format = format
            .or_else(|| Format::from_path(path))
            .unwrap_or_else(|| Format::sniff(&text));
        Scenario::parse(&text, format).with_context(|| format!("{}", path.display()))
    }

    /// Parses and validates scenario text.
    pub fn parse(text: &str, format: Format) -> anyhow::Result<Scenario> {
        let text = text.trim_start_matches('\u{feff}');
        let file: ScenarioFile = match format {
            Format::Toml => {
                toml::from_str(text).map_err(|e| anyhow!("{}", e.to_string().trim_end()))?
            }
            Format::Json => serde_json::from_str(text).map_err(|e| anyhow!("{e}"))?,
        };
        file.settings
            .validate()
            .map_err(|e| anyhow!("[settings]: {e}"))?;
        let simulation = file.simulation;
        if let Some(&c) = simulation
            .retry_http_codes
            .iter()
            .find(|c| !(100..=599).contains(*c))
        {
            bail!("[simulation] retry_http_codes: {c} is not an HTTP status code (100-599)");
        }
        let body = match (file.events, file.sites) {
            (Some(_), Some(_)) => {
                bail!("a scenario has either `events` (a replay) or `sites` (models), not both")
            }
            (None, None) => bail!(
                "the scenario has neither `events` (a replay) nor `sites` (models); \
                 write `events = []` for an empty replay"
            ),
            (Some(events), None) => Body::Replay(validate_events(events)?),
            (None, Some(sites)) => validate_sites(sites)?,
        };
        Ok(Scenario {
            settings: file.settings.throttle,
            frontier: file.settings.frontier,
            simulation,
            body,
        })
    }

    /// Replaces `settings.seed` (the jitter and site-model random generator seed).
    pub fn set_seed(&mut self, seed: u64) {
        self.settings.seed = seed;
    }
}

fn validate_events(specs: Vec<EventSpec>) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let path = format!("events[{index}]");
        let at = Timestamp::from_nanos(spec.at.nanos());
        let mut actions = Vec::new();
        if let Some(p) = spec.push {
            actions.push((
                "push",
                Action::Push(validate_push(p, &format!("{path}.push"), 0)?),
            ));
        }
        if let Some(d) = spec.delay_scope {
            check_scope_name(&d.scope, &format!("{path}.delay_scope.scope"))?;
            actions.push((
                "delay_scope",
                Action::DelayScope {
                    scope: d.scope,
                    seconds: d.seconds.0,
                },
            ));
        }
        if let Some(d) = spec.crawl_delay {
            check_scope_name(&d.scope, &format!("{path}.crawl_delay.scope"))?;
            actions.push((
                "crawl_delay",
                Action::CrawlDelay {
                    scope: d.scope,
                    seconds: d.seconds.0,
                },
            ));
        }
        if let Some(s) = spec.set_scope {
            check_scope_name(&s.scope, &format!("{path}.set_scope.scope"))?;
            if s.delay.is_none() && s.concurrency.is_none() {
                bail!("{path}.set_scope: give `delay`, `concurrency` or both");
            }
            actions.push((
                "set_scope",
                Action::SetScope {
                    scope: s.scope,
                    delay: s.delay.map(|d| d.0),
                    concurrency: s.concurrency,
                },
            ));
        }
        if let Some(r) = spec.reconcile_quota {
            check_scope_name(&r.scope, &format!("{path}.reconcile_quota.scope"))?;
            let how = match (r.consumed, r.remaining) {
                (Some(c), None) if c.is_finite() => QuotaReconcile::Consumed(c),
                (None, Some(r)) if r.is_finite() => QuotaReconcile::Remaining(r),
                (Some(_), None) | (None, Some(_)) => {
                    bail!("{path}.reconcile_quota: the amount must be a finite number")
                }
                _ => bail!("{path}.reconcile_quota: give exactly one of `consumed` or `remaining`"),
            };
            actions.push((
                "reconcile_quota",
                Action::Reconcile {
                    scope: r.scope,
                    how,
                },
            ));
        }
        match actions.len() {
            1 => {
                let action = actions.pop().expect("one action").1;
                events.push(Event { at, index, action });
            }
            0 => bail!(
                "{path}: an event needs one of `push`, `delay_scope`, `crawl_delay`, \
                 `set_scope` or `reconcile_quota`"
            ),
            _ => {
                let names: Vec<&str> = actions.iter().map(|(n, _)| *n).collect();
                bail!(
                    "{path}: an event does one thing, this one has {}; split it into \
                     several events with the same `at`",
                    names.join(" and ")
                );
            }
        }
    }
    events.sort_by_key(|e| (e.at, e.index));
    Ok(events)
}

fn check_scope_name(scope: &str, path: &str) -> anyhow::Result<()> {
    if scope.is_empty() || scope.contains(['\t', '\n']) {
        bail!("{path}: scope names must be non-empty and contain no tab or newline");
    }
    Ok(())
}

/// Children deeper than this in one file are surely a mistake (and would recurse deeply).
const MAX_NESTING: usize = 1000;

fn validate_push(spec: PushSpec, path: &str, nesting: usize) -> anyhow::Result<Push> {
    if nesting > MAX_NESTING {
        bail!("{path}: children nested more than {MAX_NESTING} levels deep");
    }
    let mut request = Request::new(
        spec.method
            .as_deref()
            .map_or(Method::Get, Method::from_name),
        spec.url.as_str(),
    )
    .priority(spec.priority);
    if let Some(name) = spec.callback {
        request = request.callback(name);
    }
    if let Some(depth) = spec.depth {
        if nesting > 0 {
            bail!("{path}.depth: children are one level deeper than their parent; leave it out");
        }
        request.depth = depth;
    }
    request.start = spec.start;
    request.dont_track = spec.dont_track;
    request.dont_filter = spec.dont_filter;
    request.dont_throttle = spec.dont_throttle;
    request.delay = spec.delay.map(|d| d.0);
    if let Some(scopes) = spec.scopes {
        if scopes.0.is_empty() {
            bail!("{path}.scopes: list at least one scope, or leave `scopes` out for the host");
        }
        for (name, amount) in scopes.0 {
            request = request.scope_amount(name, amount);
        }
    }
    let mut key = String::new();
    group_key(&request, &mut key).map_err(|e| anyhow!("{path}: {e}"))?;
    if request.scopes.is_some() {
        // Explicit scopes replace the host, but the URL must still be a URL.
        host_scope(&request.url).map_err(|e| anyhow!("{path}.url: {e}"))?;
    }
    fingerprint(request.method.as_str(), &request.url, b"")
        .map_err(|e| anyhow!("{path}.url: {e}"))?;
    let (latency, answer, headers) = match spec.response {
        None => (0, Answer::Status(200), Vec::new()),
        Some(r) => {
            let answer = match (r.status, r.error) {
                (Some(_), Some(_)) => {
                    bail!("{path}.response: give `status` or `error`, not both")
                }
                (Some(s), None) if (100..=599).contains(&s) => Answer::Status(s),
                (Some(s), None) => {
                    bail!("{path}.response.status: {s} is not an HTTP status code (100-599)")
                }
                (None, Some(kind)) if kind.trim().is_empty() => {
                    bail!("{path}.response.error: name the error kind, e.g. \"timeout\"")
                }
                (None, Some(kind)) => {
                    if !r.headers.0.is_empty() {
                        bail!("{path}.response.headers: an error has no headers");
                    }
                    Answer::Error(kind.into_boxed_str())
                }
                (None, None) => Answer::Status(200),
            };
            (r.latency.nanos(), answer, r.headers.0)
        }
    };
    let children = spec
        .children
        .into_iter()
        .enumerate()
        .map(|(i, c)| validate_push(c, &format!("{path}.children[{i}]"), nesting + 1))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Push {
        id: spec.id.unwrap_or(spec.url).into_boxed_str(),
        request,
        latency,
        answer,
        headers,
        children,
    })
}

fn validate_sites(specs: Vec<SiteSpec>) -> anyhow::Result<Body> {
    let mut models = Vec::with_capacity(specs.len());
    let mut hosts: Vec<(Box<str>, u32)> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    let mut total: u64 = 0;
    for (i, s) in specs.into_iter().enumerate() {
        let path = format!("sites[{i}]");
        if s.pages == 0 {
            bail!("{path}.pages: a site has at least one page");
        }
        if s.count == 0 {
            bail!("{path}.count: must be at least 1");
        }
        total += u64::from(s.count);
        if total > MAX_HOSTS {
            bail!("{path}.count: the sites expand to more than {MAX_HOSTS} hosts");
        }
        if s.count > 1 && !s.host.contains("{n}") {
            bail!(
                "{path}.host: with count = {}, put `{{n}}` in the host name where the site \
                 number goes (e.g. \"site{{n}}.example\")",
                s.count
            );
        }
        if !(0.0..=1.0).contains(&s.error_rate) {
            bail!(
                "{path}.error_rate: must be a probability between 0 and 1, got {}",
                s.error_rate
            );
        }
        if s.error.trim().is_empty() {
            bail!("{path}.error: name the error kind, e.g. \"timeout\"");
        }
        let rate_limit = match s.rate_limit {
            None => None,
            Some(r) => {
                if r.requests == 0 {
                    bail!("{path}.rate_limit.requests: must be at least 1");
                }
                if r.per.nanos() == 0 {
                    bail!("{path}.rate_limit.per: the window must be longer than 0 seconds");
                }
                if !(100..=599).contains(&r.status) {
                    bail!(
                        "{path}.rate_limit.status: {} is not an HTTP status code (100-599)",
                        r.status
                    );
                }
                Some(RateLimit {
                    requests: r.requests,
                    per: r.per.nanos(),
                    retry_after: r.retry_after,
                    status: r.status,
                })
            }
        };
        let model = models.len() as u32;
        for n in 0..s.count {
            let host = s.host.replace("{n}", &n.to_string());
            let scope = host_scope(&format!("https://{host}/"))
                .map_err(|e| anyhow!("{path}.host: {host:?} is not a host name ({e})"))?;
            if scope != host {
                bail!(
                    "{path}.host: write the host as the frontier names it: {scope:?}, not {host:?}"
                );
            }
            if let Some(other) = seen.insert(host.clone(), i) {
                bail!("{path}.host: {host:?} is already modelled by sites[{other}]");
            }
            hosts.push((host.into_boxed_str(), model));
        }
        models.push(SiteModel {
            pages: s.pages,
            links_per_page: s.links_per_page,
            cross_links: s.cross_links,
            latency: (s.latency.0.nanos(), s.latency.1.nanos()),
            rate_limit,
            crawl_delay: s.crawl_delay.map(|d| d.0),
            error_rate: s.error_rate,
            error: s.error.into_boxed_str(),
            timeout: s.timeout.nanos(),
        });
    }
    Ok(Body::Sites { models, hosts })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str, format: Format) -> String {
        format!("{:#}", Scenario::parse(text, format).unwrap_err())
    }

    #[test]
    fn sniffing_and_extensions() {
        assert_eq!(Format::sniff("  {\"events\": []}"), Format::Json);
        assert_eq!(Format::sniff("[settings]\n"), Format::Toml);
        assert_eq!(Format::from_path(Path::new("a/b.JSON")), Some(Format::Json));
        assert_eq!(Format::from_path(Path::new("a/b.toml")), Some(Format::Toml));
        assert_eq!(Format::from_path(Path::new("a/b.txt")), None);
    }

    #[test]
    fn a_replay_parses_in_both_formats() {
        let json = r#"{"settings": {"download_delay": 2},
            "events": [
              {"at": 1, "set_scope": {"scope": "x.com", "delay": 1.5}},
              {"at": 0, "push": {"id": "r1", "url": "https://x.com/a",
                 "scopes": {"x.com": 1, "cost": 2.5},
                 "response": {"latency": 0.1, "status": 429, "headers": {"Retry-After": 7}},
                 "children": [{"url": "https://x.com/b", "response": {"error": "timeout"}}]}}
            ]}"#;
        let s = Scenario::parse(json, Format::Json).unwrap();
        let Body::Replay(events) = &s.body else {
            panic!()
        };
        assert_eq!(events[0].at, Timestamp::ZERO);
        let Action::Push(p) = &events[0].action else {
            panic!()
        };
        assert_eq!(&*p.id, "r1");
        assert_eq!(p.latency, 100_000_000);
        assert_eq!(p.headers, [("Retry-After".to_owned(), "7".to_owned())]);
        assert_eq!(p.request.scopes.as_ref().unwrap().len(), 2);
        assert_eq!(&*p.children[0].id, "https://x.com/b");
        assert_eq!(p.children[0].answer, Answer::Error("timeout".into()));
        assert_eq!(events[1].index, 0);

        let toml = r#"
            [settings]
            download_delay = 2
            [[events]]
            at = 0
            push = { id = "r1", url = "https://x.com/a", scopes = ["x.com", "api"] }
        "#;
        let s = Scenario::parse(toml, Format::Toml).unwrap();
        let Body::Replay(events) = &s.body else {
            panic!()
        };
        let Action::Push(p) = &events[0].action else {
            panic!()
        };
        assert_eq!(p.answer, Answer::Status(200));
        assert_eq!(p.latency, 0);
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let e = err(
            "[settings]\ndownload_dela = 1\n[[events]]\nat = 0\n",
            Format::Toml,
        );
        assert!(e.contains("download_dela") && e.contains("line 2"), "{e}");
        let e = err(
            "{\"events\": [\n {\"at\": 0, \"push\": {\"url\": \"https://a.b/\", \"prio\": 1}}]}",
            Format::Json,
        );
        assert!(
            e.contains("unknown field `prio`") && e.contains("line 2"),
            "{e}"
        );
        let e = err("{\"event\": []}", Format::Json);
        assert!(e.contains("unknown field `event`"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = err(
            r#"{"events": [{"at": -1, "push": {"url": "https://a.b/"}}]}"#,
            Format::Json,
        );
        assert!(e.contains("-1") && e.contains("seconds"), "{e}");
        let e = err(
            r#"{"events": [{"at": 0, "push": {"url": "https://a.b/", "delay": -5}}]}"#,
            Format::Json,
        );
        assert!(e.contains("-5") && e.contains("seconds"), "{e}");
        let e = err(
            r#"{"settings": {"download_delay": -1}, "events": []}"#,
            Format::Json,
        );
        assert!(e.contains("download_delay"), "{e}");
        let e = err(
            r#"{"events": [{"at": 0, "push": {"url": "nope"}}]}"#,
            Format::Json,
        );
        assert!(e.contains("events[0].push"), "{e}");
        let e = err(
            r#"{"events": [{"at": 0, "push": {"url": "https://a.b/", "response": {"status": 99}}}]}"#,
            Format::Json,
        );
        assert!(e.contains("events[0].push.response.status"), "{e}");
        let e = err(r#"{"events": [{"at": 0}]}"#, Format::Json);
        assert!(e.contains("events[0]: an event needs one of"), "{e}");
        let e = err(
            r#"{"events": [{"at": 0, "delay_scope": {"scope": "a", "seconds": 1},
                                     "crawl_delay": {"scope": "a", "seconds": 1}}]}"#,
            Format::Json,
        );
        assert!(e.contains("delay_scope and crawl_delay"), "{e}");
        let e = err(r#"{"events": [], "sites": []}"#, Format::Json);
        assert!(e.contains("not both"), "{e}");
        let e = err("[settings]\n", Format::Toml);
        assert!(e.contains("neither"), "{e}");
        let e = err("{\"events\": [", Format::Json);
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn site_models_expand_and_check_hosts() {
        let toml = r#"
            [[sites]]
            host = "s{n}.example"
            count = 3
            pages = 10
            latency = [0.05, 0.2]
            rate_limit = { requests = 2, retry_after = "auto" }
        "#;
        let s = Scenario::parse(toml, Format::Toml).unwrap();
        let Body::Sites { models, hosts } = &s.body else {
            panic!()
        };
        assert_eq!(hosts.len(), 3);
        assert_eq!(&*hosts[2].0, "s2.example");
        assert_eq!(models[0].latency, (50_000_000, 200_000_000));
        assert_eq!(
            models[0].rate_limit.unwrap().retry_after,
            Some(RetryAfter::Auto)
        );
        let e = err("[[sites]]\nhost = \"A.example\"\npages = 1\n", Format::Toml);
        assert!(e.contains("\"a.example\""), "{e}");
        let e = err(
            "[[sites]]\nhost = \"a.example\"\npages = 1\n[[sites]]\nhost = \"a.example\"\npages = 2\n",
            Format::Toml,
        );
        assert!(e.contains("already modelled"), "{e}");
        let e = err(
            "[[sites]]\nhost = \"a{n}.example\"\npages = 1\nlatency = [2, 1]\n",
            Format::Toml,
        );
        assert!(e.contains("low > high"), "{e}");
    }
}
