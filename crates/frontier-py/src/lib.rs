//! `polite_frontier._native`: the Rust side of the Python package.
//!
//! Two classes, used by the pure-Python modules of the package (`polite_frontier.scrapy`,
//! `polite_frontier.frontier`, `polite_frontier.throttle`), which hold the documented API:
//!
//! - [`Core`]: one crawl frontier (priorities, duplicate filter, leases, throttling-aware
//!   polling) in memory, in a SQLite file or in Redis, with a fast path for Scrapy
//!   `Request` objects: a plain request (no headers, body, cookies, ... at scheduling
//!   time) is kept as the frontier's own compact record and rebuilt when it is handed
//!   out; any other request is kept as a Python object (memory) or as the bytes the
//!   caller encoded (persistent stores).
//! - [`NativeThrottler`]: the politeness engine alone, with FIFO tickets, for the asyncio
//!   `Throttler`.
//!
//! Every error is a Python exception naming what was wrong; nothing here panics on input.
#![allow(unsafe_code)] // pyo3's macros expand to unsafe code.

mod convert;
mod frontier;
mod scrapy;
mod throttler;

use polite_frontier_core::{fingerprint, host_scope};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pub use frontier::Core;
pub use throttler::NativeThrottler;

use frontier::{DUPLICATE, NEEDS_PAYLOAD, TOO_DEEP};

/// The Scrapy default fingerprint of a request (hex), as the frontier computes it.
#[pyfunction]
#[pyo3(signature = (url, method="GET", body=b"".as_slice()))]
fn request_fingerprint(url: &str, method: &str, body: &[u8]) -> PyResult<String> {
    fingerprint(method, url, body)
        .map(|f| f.to_hex())
        .map_err(|e| PyValueError::new_err(format!("invalid URL {url:?}: {e}")))
}

/// The host scope of a URL (lower-cased host, IDNA, non-default port kept).
#[pyfunction]
fn url_scope(url: &str) -> PyResult<String> {
    host_scope(url).map_err(|e| PyValueError::new_err(format!("{e}")))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add_class::<NativeThrottler>()?;
    m.add_function(wrap_pyfunction!(request_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(url_scope, m)?)?;
    m.add("DUPLICATE", DUPLICATE)?;
    m.add("TOO_DEEP", TOO_DEEP)?;
    m.add("NEEDS_PAYLOAD", NEEDS_PAYLOAD)?;
    Ok(())
}
