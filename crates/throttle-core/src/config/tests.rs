//! Parsing and validation of settings, and the errors naming each bad key.

#![allow(clippy::field_reassign_with_default)]

use alloc::string::{String, ToString};
use alloc::vec;

use crate::rng::JitterRng;

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
    // The frontier's ordering keys belong to polite-frontier-core's `FrontierConfig`.
    let err = serde_json::from_str::<Settings>(r#"{"scheduler_order": "fifo"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `scheduler_order`"), "{err}");
}

#[test]
fn toml_reads_like_scrapy_settings() {
    let s: Settings = toml::from_str(
        r#"
        download_delay = 2
        concurrent_requests = 32
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
