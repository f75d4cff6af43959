//! Reading the script's replies, and the errors a bad reply or argument turns into.

use std::time::Duration;

use polite_frontier_core::FrontierError;
use polite_throttle_core::{ConfigError, QuotaReconcile, Settings, Throttler, Timestamp};
use redis::Value;

use crate::error::RedisStoreError;

use super::Result;

pub(super) fn store_err(e: RedisStoreError) -> FrontierError<RedisStoreError> {
    FrontierError::Store(e)
}

pub(super) fn protocol(
    op: &'static str,
    detail: impl Into<String>,
) -> FrontierError<RedisStoreError> {
    FrontierError::Store(RedisStoreError::Protocol {
        op,
        detail: detail.into(),
    })
}

pub(super) fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(super) fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        other => std::str::from_utf8(as_bytes(other)?).ok()?.parse().ok(),
    }
}

pub(super) fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => {
            let f = as_f64(other)?;
            (f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
        }
    }
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The error the in-process throttler gives for the same invalid value (same key,
/// same message): asked of a scratch throttler.
pub(super) fn config_error(op: &str, value: f64) -> ConfigError {
    let mut t = Throttler::new(Settings::default(), Timestamp::ZERO).expect("default settings");
    let now = Timestamp::ZERO;
    let r = match op {
        "delay_scope" => t.delay_scope("x", value, now),
        "delay" => t.set_scope_delay("x", value, now),
        "crawl_delay" => t.handle_crawl_delay("x", value, now).map(|_| ()),
        "c" => t.reconcile_quota("x", QuotaReconcile::Consumed(value), now),
        _ => t.reconcile_quota("x", QuotaReconcile::Remaining(value), now),
    };
    r.expect_err("an invalid value")
}

pub(super) fn check_secs(op: &str, secs: f64) -> Result<()> {
    if secs.is_finite() && secs >= 0.0 {
        Ok(())
    } else {
        Err(FrontierError::Config(config_error(op, secs)))
    }
}
