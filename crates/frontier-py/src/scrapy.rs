//! Scrapy requests on the fast path: reading their `meta` and scopes, and the tags and
//! callback-name shapes of the records the frontier keeps for them.

use polite_frontier_core::{Request, ScopeAmount};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// Tag of a record whose Python object is kept in the [`Core`](crate::Core)'s `objects`.
pub(crate) const TAG_OBJECT: u8 = b'M';
/// Tag of a record whose payload is bytes encoded by the caller (a pickled dict form).
pub(crate) const TAG_BYTES: u8 = b'P';
/// Separates a callback name from the meta-shape flags in a fast-path record.
pub(crate) const SHAPE_SEP: char = '\u{1f}';

/// What the fast path learned from a Scrapy request's `meta`.
#[derive(Default)]
pub(crate) struct MetaInfo {
    pub(crate) depth: Option<u32>,
    pub(crate) start: bool,
    /// `meta` holds only `depth` and `is_start_request` (the fast path can rebuild it).
    pub(crate) plain: bool,
    /// `meta["download_slot"]`, Scrapy's downloader slot.
    pub(crate) slot: Option<String>,
}

/// `host:port` without its port (`[::1]:8080` -> `[::1]`); other names unchanged.
pub(crate) fn host_without_port(scope: &str) -> &str {
    match scope.rfind(':') {
        Some(i)
            if !scope[i..].contains(']') && scope[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            &scope[..i]
        }
        _ => scope,
    }
}

/// The flags of a meta shape in a callback name: `d` depth, `s` start request.
pub(crate) fn shape_flags(shape: u8) -> &'static str {
    match shape & 3 {
        0 => "",
        1 => "d",
        2 => "s",
        _ => "ds",
    }
}

/// Reads the scheduling fields of a Scrapy request's meta (depth, start flag, the
/// throttling keys) into `out`.
pub(crate) fn read_meta(
    py: Python<'_>,
    meta: &Bound<'_, PyAny>,
    out: &mut Request,
) -> PyResult<MetaInfo> {
    let mut info = MetaInfo {
        plain: true,
        ..MetaInfo::default()
    };
    if meta.is_none() {
        return Ok(info);
    }
    let meta = meta
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("request.meta must be a dict"))?;
    for (key, value) in meta.iter() {
        let Ok(key) = key.cast::<PyString>() else {
            info.plain = false;
            continue;
        };
        let key = key.to_cow()?;
        match &*key {
            "depth" => {
                let depth: i64 = value.extract().map_err(|_| {
                    PyValueError::new_err(format!(
                        "meta[\"depth\"] must be an int, got {}",
                        value.repr().map(|r| r.to_string()).unwrap_or_default()
                    ))
                })?;
                if !value.is_exact_instance_of::<pyo3::types::PyInt>() {
                    info.plain = false;
                }
                let depth = u32::try_from(depth.max(0)).unwrap_or(u32::MAX);
                out.depth = depth;
                info.depth = Some(depth);
            }
            "is_start_request" => {
                let start = value.is_truthy()?;
                out.start = start;
                info.start = start;
                if !value.is(pyo3::types::PyBool::new(py, true)) {
                    info.plain = false;
                }
            }
            "throttling_scopes" => {
                info.plain = false;
                out.scopes = Some(read_scopes(&value)?);
            }
            "throttling_delay" => {
                info.plain = false;
                if value.is_none() {
                    continue;
                }
                let delay: f64 = value.extract().map_err(|_| {
                    PyValueError::new_err(format!(
                        "meta[\"throttling_delay\"] must be a number of seconds, got {}",
                        value.repr().map(|r| r.to_string()).unwrap_or_default()
                    ))
                })?;
                if !delay.is_finite() || delay < 0.0 {
                    return Err(PyValueError::new_err(format!(
                        "meta[\"throttling_delay\"] must be a finite number of seconds >= 0, got {delay}"
                    )));
                }
                out.delay = Some(delay);
            }
            "throttling_dont_track" => {
                info.plain = false;
                out.dont_track = value.is_truthy()?;
            }
            "dont_throttle" => {
                info.plain = false;
                out.dont_throttle = value.is_truthy()?;
            }
            "download_slot" => {
                info.plain = false;
                info.slot = value.extract::<String>().ok().filter(|s| !s.is_empty());
            }
            _ => info.plain = false,
        }
    }
    Ok(info)
}

/// `meta["throttling_scopes"]`: a name, an iterable of names, or a dict of names to
/// quota amounts.
pub(crate) fn read_scopes(value: &Bound<'_, PyAny>) -> PyResult<Vec<ScopeAmount>> {
    let bad = |what: &str| {
        PyValueError::new_err(format!(
            "meta[\"throttling_scopes\"] must be a scope name, a list or set of names, or a dict of names to amounts; {what}"
        ))
    };
    let mut scopes = Vec::new();
    if let Ok(name) = value.cast::<PyString>() {
        scopes.push(ScopeAmount {
            scope: name.to_cow()?.into(),
            amount: 1.0,
        });
    } else if let Ok(dict) = value.cast::<PyDict>() {
        for (k, v) in dict.iter() {
            let name: String = k.extract().map_err(|_| {
                bad(&format!(
                    "got the key {}",
                    k.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            let amount: f64 = v.extract().map_err(|_| {
                bad(&format!(
                    "the amount of {name:?} is {}",
                    v.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            scopes.push(ScopeAmount {
                scope: name.into(),
                amount,
            });
        }
    } else if let Ok(iter) = value.try_iter() {
        for item in iter {
            let item = item?;
            let name: String = item.extract().map_err(|_| {
                bad(&format!(
                    "got the item {}",
                    item.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            scopes.push(ScopeAmount {
                scope: name.into(),
                amount: 1.0,
            });
        }
    } else {
        return Err(bad(&format!(
            "got {}",
            value.repr().map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    if scopes.is_empty() {
        return Err(bad("got no scope at all"));
    }
    Ok(scopes)
}
