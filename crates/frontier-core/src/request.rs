//! The request record: what a crawler pushes into the frontier.
//!
//! Most crawls only need a URL and the name of the code that handles the response, so
//! those are plain fields and everything rare (headers, body, opaque metadata) lives out
//! of line behind one pointer.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

/// HTTP method of a request. `GET` by default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    #[default]
    Get,
    /// `POST`
    Post,
    /// `HEAD`
    Head,
    /// Any other method, upper-case (`PUT`, `DELETE`, `PATCH`, ...).
    Other(Box<str>),
}

impl Method {
    /// The method as it goes on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Head => "HEAD",
            Method::Other(m) => m,
        }
    }

    /// Parses a method name (case-insensitive).
    pub fn from_name(name: &str) -> Self {
        if name.eq_ignore_ascii_case("GET") {
            Method::Get
        } else if name.eq_ignore_ascii_case("POST") {
            Method::Post
        } else if name.eq_ignore_ascii_case("HEAD") {
            Method::Head
        } else {
            Method::Other(name.to_ascii_uppercase().into_boxed_str())
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most explicit scopes one request may name (a push with more is an
/// [`InvalidRequest`](crate::InvalidRequest)): the frontier handles a request's scope
/// list in fixed inline buffers, never on the heap.
pub const MAX_SCOPES: usize = 16;

/// One scope a request explicitly belongs to, and how much of its quota it consumes.
#[derive(Clone, Debug, PartialEq)]
pub struct ScopeAmount {
    /// Scope name.
    pub scope: Box<str>,
    /// Quota consumed (1 when not given).
    pub amount: f64,
}

/// Rarely used parts of a request, stored out of line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Extras {
    /// Request headers (name, value).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Request body.
    pub body: Vec<u8>,
    /// Opaque bytes for the crawler's own use, returned untouched with the lease.
    pub meta: Vec<u8>,
}

impl Extras {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.body.is_empty() && self.meta.is_empty()
    }
}

/// A request as the crawler sees it.
///
/// ```
/// use polite_frontier_core::Request;
///
/// let start = Request::get("https://example.com/").callback("parse").start();
/// let child = Request::get("https://example.com/a").callback("parse_item").child_of(&start);
/// assert_eq!(child.depth, 1);
/// let api = Request::get("https://api.example.com/v1/items?page=2")
///     .scope("api.example.com")
///     .scope_amount("cost", 3.0)
///     .delay(5.0)
///     .priority(10);
/// assert_eq!(api.scopes.as_ref().unwrap().len(), 2);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Absolute URL.
    pub url: Box<str>,
    /// HTTP method.
    pub method: Method,
    /// Name of the code that handles the response (`None`: the crawler's default).
    /// Shared: every request decoded with the same callback points at one string.
    pub callback: Option<Arc<str>>,
    /// Higher goes first.
    pub priority: i32,
    /// Links followed from a start request to reach this one.
    pub depth: u32,
    /// A start request (ordered by `start_order`).
    pub start: bool,
    /// Skip the duplicate filter.
    pub dont_filter: bool,
    /// Its outcome never triggers backoff.
    pub dont_track: bool,
    /// Bypasses every throttling gate and is not counted.
    pub dont_throttle: bool,
    /// Explicit scopes (replacing the URL's host), with quota amounts.
    pub scopes: Option<Vec<ScopeAmount>>,
    /// Seconds to hold the request after the frontier first sees it.
    pub delay: Option<f64>,
    /// Headers, body and opaque metadata.
    pub extras: Option<Box<Extras>>,
}

impl Request {
    /// A `GET` request for `url`.
    pub fn get(url: impl Into<Box<str>>) -> Self {
        Request {
            url: url.into(),
            method: Method::Get,
            callback: None,
            priority: 0,
            depth: 0,
            start: false,
            dont_filter: false,
            dont_track: false,
            dont_throttle: false,
            scopes: None,
            delay: None,
            extras: None,
        }
    }

    /// A request with another method.
    pub fn new(method: Method, url: impl Into<Box<str>>) -> Self {
        Request {
            method,
            ..Request::get(url)
        }
    }

    /// Sets the callback name.
    pub fn callback(mut self, name: impl Into<Arc<str>>) -> Self {
        self.callback = Some(name.into());
        self
    }

    /// Sets the priority (higher first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Marks it a start request.
    pub fn start(mut self) -> Self {
        self.start = true;
        self
    }

    /// Skips the duplicate filter.
    pub fn dont_filter(mut self) -> Self {
        self.dont_filter = true;
        self
    }

    /// Its outcome never triggers backoff.
    pub fn dont_track(mut self) -> Self {
        self.dont_track = true;
        self
    }

    /// Bypasses throttling entirely.
    pub fn dont_throttle(mut self) -> Self {
        self.dont_throttle = true;
        self
    }

    /// Sets the depth.
    pub fn depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// A child of `parent`: depth + 1.
    pub fn child_of(mut self, parent: &Request) -> Self {
        self.depth = parent.depth.saturating_add(1);
        self
    }

    /// Adds an explicit scope consuming one unit of its quota. Explicit scopes replace
    /// the URL's host: list the host too if you want both.
    pub fn scope(self, scope: impl Into<Box<str>>) -> Self {
        self.scope_amount(scope, 1.0)
    }

    /// Adds an explicit scope consuming `amount` of its quota.
    pub fn scope_amount(mut self, scope: impl Into<Box<str>>, amount: f64) -> Self {
        self.scopes.get_or_insert_with(Vec::new).push(ScopeAmount {
            scope: scope.into(),
            amount,
        });
        self
    }

    /// Holds the request `secs` seconds after the frontier first sees it.
    pub fn delay(mut self, secs: f64) -> Self {
        self.delay = Some(secs);
        self
    }

    /// Sets the request body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.extras.get_or_insert_with(Default::default).body = body.into();
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.extras
            .get_or_insert_with(Default::default)
            .headers
            .push((name.into(), value.into()));
        self
    }

    /// Sets opaque metadata returned with the lease.
    pub fn meta(mut self, meta: impl Into<Vec<u8>>) -> Self {
        self.extras.get_or_insert_with(Default::default).meta = meta.into();
        self
    }

    /// The request body (empty when none).
    pub fn body_bytes(&self) -> &[u8] {
        self.extras.as_ref().map_or(&[], |e| &e.body)
    }
}
