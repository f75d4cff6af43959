//! What the server-side script needs to know about the settings: each scope's resolved
//! parameters (polite-throttle-core's `ScopeParams::resolve`) and the few global values it
//! reads.

use crate::RedisStoreError;
use polite_frontier_core::{FrontierConfig, QueueOrder, StartOrder};
use polite_throttle_core::hooks::{ScopeKind, ScopeParams, secs_to_duration};
use polite_throttle_core::{Jitter, ScopeConfig, Settings};
use serde_json::{Map, Value, json};

/// The digit a scope kind is stored as: `0` IP, `1` domain, `2` other.
pub(crate) fn kind_digit(name: &str) -> char {
    match ScopeKind::of(name) {
        ScopeKind::Ip => '0',
        ScopeKind::Domain => '1',
        ScopeKind::Other => '2',
    }
}

fn jitter(j: Jitter) -> Value {
    match j {
        Jitter::Factor(f) => json!([-f, f]),
        Jitter::Range { low, high } => json!([low, high]),
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The parameters of a scope of `kind` with configuration `config`, as JSON for the
/// script: polite-throttle-core's [`ScopeParams::resolve`], field by field; absent options are
/// left out (the script reads a missing key as "none").
pub(crate) fn scope_params(settings: &Settings, kind: ScopeKind, config: &ScopeConfig) -> String {
    let r = ScopeParams::resolve(settings, kind, config);
    let mut p = Map::new();
    p.insert("concurrency".into(), json!(r.concurrency));
    if let Some(c) = r.explicit_concurrency {
        p.insert("explicit_concurrency".into(), json!(c));
    }
    if let Some(d) = r.explicit_delay {
        p.insert("explicit_delay".into(), json!(d));
    }
    p.insert("min_concurrency".into(), json!(r.min_concurrency));
    p.insert("max_concurrency".into(), json!(r.max_concurrency));
    p.insert("delay".into(), json!(r.delay));
    p.insert("jitter".into(), jitter(r.jitter));
    if let Some(q) = r.quota {
        p.insert("quota".into(), json!(q));
    }
    p.insert("qw".into(), json!(nanos(r.quota_window)));
    p.insert("bw".into(), json!(nanos(r.backoff_window)));
    if let Some(ramp) = r.rampup {
        p.insert(
            "rampup".into(),
            json!({
                "low": ramp.target.low,
                "high": ramp.target.high,
                "factor": ramp.delay_factor,
                "min_delay": ramp.min_delay,
                "step_back": ramp.step_back,
            }),
        );
    }
    let b = &r.backoff;
    p.insert("codes".into(), json!(b.http_codes().collect::<Vec<u16>>()));
    p.insert("exceptions".into(), json!(b.exceptions()));
    p.insert("factor".into(), json!(b.factor));
    p.insert("bmin".into(), json!(b.min_delay));
    p.insert("bmax".into(), json!(b.max_delay));
    p.insert("bjitter".into(), jitter(b.jitter));
    if r.ignore_robots_txt {
        p.insert("ignore_robots_txt".into(), json!(true));
    }
    Value::Object(p).to_string()
}

/// The global settings the script reads (the orders from the frontier's configuration).
pub(crate) fn script_settings(
    settings: &Settings,
    frontier: &FrontierConfig,
) -> Result<String, RedisStoreError> {
    Ok(json!({
        "concurrent_requests": settings.concurrent_requests,
        "scheduler_order": match frontier.scheduler_order {
            QueueOrder::Lifo => "lifo",
            QueueOrder::Fifo => "fifo",
            _ => return Err(RedisStoreError::Unsupported("this scheduler_order")),
        },
        "start_order": match frontier.start_order {
            StartOrder::Fifo => "fifo",
            StartOrder::Lifo => "lifo",
            StartOrder::Same => "same",
            _ => return Err(RedisStoreError::Unsupported("this start_order")),
        },
        "throttling_robotstxt_obey": settings.throttling_robotstxt_obey,
        "throttling_robotstxt_max_delay": settings.throttling_robotstxt_max_delay,
        "max_idle_ns": nanos(secs_to_duration(settings.throttling_scope_max_idle)),
    })
    .to_string())
}

/// Everything `init` stores: (field, JSON) for the three kind defaults (fields `\0` and
/// the kind's digit: no scope name starts with a NUL byte) and every named scope.
pub(crate) fn all_params(settings: &Settings) -> Vec<(String, String)> {
    let empty = ScopeConfig::default();
    let mut out = Vec::with_capacity(3 + settings.scopes.len());
    for (digit, kind) in [
        ('0', ScopeKind::Ip),
        ('1', ScopeKind::Domain),
        ('2', ScopeKind::Other),
    ] {
        out.push((format!("\0{digit}"), scope_params(settings, kind, &empty)));
    }
    for (name, config) in &settings.scopes {
        out.push((
            name.clone(),
            scope_params(settings, ScopeKind::of(name), config),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_kind() {
        let s = Settings::default();
        let p: Value = serde_json::from_str(&scope_params(
            &s,
            ScopeKind::Domain,
            &ScopeConfig::default(),
        ))
        .unwrap();
        assert_eq!(p["concurrency"], 8);
        assert_eq!(p["bw"], 60_000_000_000u64);
        assert_eq!(p["jitter"], json!([-0.5, 0.5]));
        assert!(p.get("quota").is_none() && p.get("rampup").is_none());
        let p: Value =
            serde_json::from_str(&scope_params(&s, ScopeKind::Other, &ScopeConfig::default()))
                .unwrap();
        assert_eq!(p["concurrency"], 1);
        let ramp = ScopeConfig::new()
            .min_concurrency(2)
            .rampup(Default::default());
        let p: Value = serde_json::from_str(&scope_params(&s, ScopeKind::Domain, &ramp)).unwrap();
        assert_eq!(p["concurrency"], 2, "rampup starts at min_concurrency");
        assert_eq!(p["rampup"]["low"], 1);
        assert_eq!(kind_digit("10.0.0.1:80"), '0');
        assert_eq!(kind_digit("a.example"), '1');
        assert_eq!(kind_digit("api"), '2');
    }

    /// Zero-length windows reach the script as 0 ns, and a zero backoff window turns
    /// rampup off (no "rampup" key), as `ScopeParams::resolve` does in-process.
    #[test]
    fn zero_windows() {
        let mut s = Settings::default();
        s.backoff_window = 0.0;
        s.throttling_window = 0.0;
        let ramp = ScopeConfig::new().quota(5.0).rampup(Default::default());
        let p: Value = serde_json::from_str(&scope_params(&s, ScopeKind::Domain, &ramp)).unwrap();
        assert_eq!((p["bw"].as_u64(), p["qw"].as_u64()), (Some(0), Some(0)));
        assert!(p.get("rampup").is_none(), "rampup is off");
        assert_eq!(p["concurrency"], 8, "as without rampup");
    }
}
