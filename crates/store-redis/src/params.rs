//! What the server-side script needs to know about the settings: each scope's resolved
//! parameters (throttle-core's `ScopeParams::resolve`, rebuilt from the public settings)
//! and the few global values it reads.

use serde_json::{Map, Value, json};
use throttle_core::{
    Jitter, QueueOrder, Rampup, ScopeConfig, ScopeKind, Settings, StartOrder, secs_to_duration,
};

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

fn nanos(secs: f64) -> u64 {
    u64::try_from(secs_to_duration(secs).as_nanos()).unwrap_or(u64::MAX)
}

/// The parameters of a scope of `kind` with configuration `config`, as JSON for the
/// script. Mirrors `ScopeParams::resolve` field by field; absent options are left out
/// (the script reads a missing key as "none").
pub(crate) fn scope_params(settings: &Settings, kind: ScopeKind, config: &ScopeConfig) -> String {
    let kind_default = match kind {
        ScopeKind::Ip if settings.concurrent_requests_per_ip > 0 => {
            settings.concurrent_requests_per_ip
        }
        ScopeKind::Ip | ScopeKind::Domain => settings.concurrent_requests_per_domain,
        ScopeKind::Other => settings.throttling_scope_concurrency,
    };
    let min_concurrency = config.min_concurrency.unwrap_or(1);
    let rampup = match &config.rampup {
        Rampup::Off => None,
        Rampup::On(r) => {
            let target = r.backoff_target.unwrap_or(settings.rampup_backoff_target);
            Some(json!({
                "low": target.low,
                "high": target.high,
                "factor": r.delay_factor.unwrap_or(0.5),
                "min_delay": r.min_delay.unwrap_or(0.0),
            }))
        }
    };
    let concurrency = match (config.concurrency, rampup.is_some()) {
        (Some(c), _) => c,
        (None, true) => min_concurrency,
        (None, false) if kind_default == 0 => 0,
        (None, false) => kind_default.max(min_concurrency),
    };
    let b = config.backoff.clone().unwrap_or_default();
    let codes: Vec<u16> = b
        .http_codes
        .clone()
        .unwrap_or_else(|| settings.backoff_http_codes.clone())
        .into_iter()
        .filter(|&c| c < 640)
        .collect();
    let exceptions = b
        .exceptions
        .clone()
        .unwrap_or_else(|| settings.backoff_exceptions.clone());
    let mut p = Map::new();
    p.insert("concurrency".into(), json!(concurrency));
    if let Some(c) = config.concurrency {
        p.insert("explicit_concurrency".into(), json!(c));
    }
    if let Some(d) = config.delay {
        p.insert("explicit_delay".into(), json!(d));
    }
    p.insert("min_concurrency".into(), json!(min_concurrency));
    p.insert(
        "max_concurrency".into(),
        json!(
            config
                .max_concurrency
                .unwrap_or(settings.concurrent_requests)
        ),
    );
    p.insert(
        "delay".into(),
        json!(config.delay.unwrap_or(settings.download_delay)),
    );
    p.insert(
        "jitter".into(),
        jitter(config.jitter.unwrap_or(settings.randomize_download_delay)),
    );
    if let Some(q) = config.quota {
        p.insert("quota".into(), json!(q));
    }
    p.insert(
        "qw".into(),
        json!(nanos(config.window.unwrap_or(settings.throttling_window))),
    );
    p.insert("bw".into(), json!(nanos(settings.backoff_window)));
    if let Some(r) = rampup {
        p.insert("rampup".into(), r);
    }
    p.insert("codes".into(), json!(codes));
    p.insert("exceptions".into(), json!(exceptions));
    p.insert(
        "factor".into(),
        json!(b.delay_factor.unwrap_or(settings.backoff_delay_factor)),
    );
    p.insert(
        "bmin".into(),
        json!(b.min_delay.unwrap_or(settings.backoff_min_delay)),
    );
    p.insert(
        "bmax".into(),
        json!(b.max_delay.unwrap_or(settings.backoff_max_delay)),
    );
    p.insert(
        "bjitter".into(),
        jitter(b.jitter.unwrap_or(settings.backoff_jitter)),
    );
    if config.ignore_robots_txt {
        p.insert("ignore_robots_txt".into(), json!(true));
    }
    Value::Object(p).to_string()
}

/// The global settings the script reads.
pub(crate) fn script_settings(settings: &Settings) -> String {
    json!({
        "concurrent_requests": settings.concurrent_requests,
        "scheduler_order": match settings.scheduler_order {
            QueueOrder::Lifo => "lifo",
            QueueOrder::Fifo => "fifo",
        },
        "start_order": match settings.start_order {
            StartOrder::Fifo => "fifo",
            StartOrder::Lifo => "lifo",
            StartOrder::Same => "same",
        },
        "throttling_robotstxt_obey": settings.throttling_robotstxt_obey,
        "throttling_robotstxt_max_delay": settings.throttling_robotstxt_max_delay,
        "max_idle_ns": nanos(settings.throttling_scope_max_idle),
    })
    .to_string()
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
}
