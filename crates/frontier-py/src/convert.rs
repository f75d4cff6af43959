//! Conversions between Python values and the cores' types: time, settings, headers,
//! outcomes, scope figures, and errors as Python exceptions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use polite_frontier_core::{DupeFilterConfig, FrontierConfig, FrontierError, SettingsFile};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

/// The wall clock as a [`Timestamp`].
fn wall_now() -> Timestamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `now` (seconds since the epoch) from Python, or the wall clock when `None`.
pub(crate) fn now_or(now: Option<f64>) -> PyResult<Timestamp> {
    match now {
        None => Ok(wall_now()),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Timestamp::from_secs_f64(s)),
        Some(s) => Err(PyValueError::new_err(format!(
            "now must be a finite number of seconds >= 0, got {s}"
        ))),
    }
}

/// A frontier error as a Python exception: `ValueError` for bad input, else `RuntimeError`.
pub(crate) fn frontier_err<E: std::fmt::Display>(e: FrontierError<E>) -> PyErr {
    match e {
        FrontierError::InvalidRequest(e) => PyValueError::new_err(format!("invalid request: {e}")),
        FrontierError::Config(e) => PyValueError::new_err(format!("invalid setting: {e}")),
        other => PyRuntimeError::new_err(format!("frontier: {other}")),
    }
}

/// Parses the settings document (JSON, the keys of `docs/behaviour.md` §2): the
/// throttler's settings and the frontier's ordering keys, in one table.
pub(crate) fn parse_settings(json: &str) -> PyResult<(Settings, FrontierConfig)> {
    let file: SettingsFile = serde_json::from_str(json)
        .map_err(|e| PyValueError::new_err(format!("invalid throttling settings: {e}")))?;
    file.validate()
        .map_err(|e| PyValueError::new_err(format!("invalid throttling settings: {e}")))?;
    Ok((file.throttle, file.frontier))
}

/// The duplicate filter named by `dupefilter=` (`exact`, `disabled`, `bloom:CAPACITY:RATE`).
pub(crate) fn dupefilter_config(name: &str) -> PyResult<DupeFilterConfig> {
    match name {
        "exact" => Ok(DupeFilterConfig::Exact),
        "disabled" => Ok(DupeFilterConfig::Disabled),
        _ => {
            if let Some(rest) = name.strip_prefix("bloom:") {
                let mut parts = rest.split(':');
                let capacity = parts.next().and_then(|c| c.parse::<u64>().ok());
                let rate = parts.next().and_then(|r| r.parse::<f64>().ok());
                if let (Some(capacity), Some(false_positive_rate), None) =
                    (capacity, rate, parts.next())
                {
                    return Ok(DupeFilterConfig::Bloom {
                        capacity,
                        false_positive_rate,
                    });
                }
            }
            Err(PyValueError::new_err(format!(
                "dupefilter must be \"exact\", \"disabled\" or \"bloom:CAPACITY:RATE\", got {name:?}"
            )))
        }
    }
}

/// Whether attribute `name` of `obj` is `None` or empty.
pub(crate) fn is_empty_attr(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<bool> {
    let v = obj.getattr(name)?;
    Ok(v.is_none() || !v.is_truthy()?)
}

/// Headers given as (name, value) pairs of bytes or str; none for `None` (absent or
/// Python's `None`).
pub(crate) fn header_pairs(
    headers: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let Some(headers) = headers.filter(|h| !h.is_none()) else {
        return Ok(out);
    };
    for item in headers.try_iter()? {
        let item = item?;
        let (name, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item
            .extract()
            .map_err(|_| PyTypeError::new_err("headers must be a list of (name, value) pairs"))?;
        out.push((to_bytes(&name)?, to_bytes(&value)?));
    }
    Ok(out)
}

/// A header name or value (bytes or str) as bytes.
fn to_bytes(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        Ok(b.as_bytes().to_vec())
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(s.to_cow()?.as_bytes().to_vec())
    } else {
        Err(PyTypeError::new_err(format!(
            "a header name or value must be bytes or str, got {}",
            v.get_type().name()?
        )))
    }
}

/// How a request ended: a response (`status`, `headers`), an error kind, or cancelled.
pub(crate) fn make_outcome<'a>(
    status: Option<u16>,
    headers: &'a [(Vec<u8>, Vec<u8>)],
    error: Option<&'a str>,
) -> Outcome<'a> {
    match (status, error) {
        (Some(status), _) => Outcome::response(
            status,
            headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
            Some(wall_now()),
        ),
        (None, Some(kind)) => Outcome::error(kind),
        (None, None) => Outcome::Cancelled,
    }
}

/// A scope's figures, from the in-process throttler or from Redis.
pub(crate) struct Figures {
    pub(crate) sent: u64,
    pub(crate) done: u64,
    pub(crate) triggers: u64,
    pub(crate) active: u32,
    pub(crate) base_delay: f64,
    pub(crate) delay: f64,
    pub(crate) concurrency: u32,
    pub(crate) level: u32,
    pub(crate) next_allowed: Timestamp,
    pub(crate) hard_until: Timestamp,
    pub(crate) consumed: f64,
}

/// The [`Figures`] of any stats value with the same fields (the in-process and Redis
/// scope stats).
macro_rules! figures {
    ($s:expr) => {
        $crate::convert::Figures {
            sent: $s.sent,
            done: $s.done,
            triggers: $s.triggers,
            active: $s.active,
            base_delay: $s.base_delay,
            delay: $s.delay,
            concurrency: $s.concurrency,
            level: $s.level,
            next_allowed: $s.next_allowed,
            hard_until: $s.hard_until,
            consumed: $s.consumed,
        }
    };
}
pub(crate) use figures;

/// A scope's figures as the dict the Python API documents.
pub(crate) fn scope_stats_dict<'py>(py: Python<'py>, f: Figures) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("sent", f.sent)?;
    d.set_item("done", f.done)?;
    d.set_item("triggers", f.triggers)?;
    d.set_item("active", f.active)?;
    d.set_item("base_delay", f.base_delay)?;
    d.set_item("delay", f.delay)?;
    d.set_item("concurrency", f.concurrency)?;
    d.set_item("level", f.level)?;
    d.set_item("next_allowed", f.next_allowed.as_secs_f64())?;
    d.set_item("hard_until", f.hard_until.as_secs_f64())?;
    d.set_item("consumed", f.consumed)?;
    Ok(d)
}
