//! The `Core` class: one crawl frontier (memory, SQLite or Redis) for Python.

use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;
use polite_frontier_core::{
    Frontier, Lease, Method, Poll, PushOutcome, Request, RequestId, Scheduling, ScopeAmount,
    VolatileStore, fingerprint, host_scope, parse_seen_file,
};
use polite_store_redis::{RedisConfig, RedisFrontier, TimeSource};
use polite_store_sqlite::{SqliteOptions, SqliteStore};
use polite_throttle_core::Timestamp;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};

use crate::convert::{
    dupefilter_config, figures, frontier_err, header_pairs, is_empty_attr, make_outcome, now_or,
    parse_settings, scope_stats_dict,
};
use crate::scrapy::{
    SHAPE_SEP, TAG_BYTES, TAG_OBJECT, host_without_port, read_meta, read_scopes, shape_flags,
};

/// `push_scrapy` answers: queued requests get their lease id (>= 0).
pub(crate) const DUPLICATE: i64 = -1;
pub(crate) const TOO_DEEP: i64 = -2;
/// A persistent store needs the caller to encode this request (`payload=`).
pub(crate) const NEEDS_PAYLOAD: i64 = -3;

/// The frontier behind a [`Core`]: one of three stores.
enum Backend {
    Memory(Frontier<VolatileStore>),
    Sqlite(Frontier<SqliteStore>),
    Redis(Box<RedisFrontier>),
}

macro_rules! each {
    ($backend:expr, $f:ident => $body:expr) => {
        match $backend {
            Backend::Memory($f) => $body,
            Backend::Sqlite($f) => $body,
            Backend::Redis($f) => $body,
        }
    };
}

/// A crawl frontier for Python: see the module docs.
#[pyclass(unsendable, module = "polite_frontier._native")]
pub struct Core {
    backend: Option<Backend>,
    /// Python objects of queued requests kept in memory, by key.
    objects: HashMap<u64, Py<PyAny>>,
    next_object: u64,
    /// Interned callback names with their meta shape, by (function pointer, shape).
    callbacks: HashMap<(usize, u8), Arc<str>>,
    /// The spider whose bound methods are callbacks by name.
    spider: Option<Py<PyAny>>,
    /// `scrapy.Request` (exact type for the fast path).
    request_cls: Option<Py<PyAny>>,
    /// The store keeps records across processes: objects cannot live in `objects`,
    /// except unserializable ones (lost on a crash, as in Scrapy).
    persistent: bool,
    kind: &'static str,
}

impl Core {
    fn backend(&mut self) -> PyResult<&mut Backend> {
        self.backend
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the frontier is closed"))
    }

    fn push_one(&mut self, request: &Request, now: Timestamp) -> PyResult<i64> {
        let outcome = each!(self.backend()?, f => f.push(request, now).map_err(frontier_err))?;
        Ok(match outcome {
            PushOutcome::Queued(id) => i64::try_from(id.0).unwrap_or(i64::MAX),
            PushOutcome::Duplicate => DUPLICATE,
            PushOutcome::TooDeep => TOO_DEEP,
            _ => DUPLICATE,
        })
    }

    fn store_object(&mut self, obj: Py<PyAny>) -> Vec<u8> {
        let key = self.next_object;
        self.next_object += 1;
        self.objects.insert(key, obj);
        let mut meta = Vec::with_capacity(9);
        meta.push(TAG_OBJECT);
        meta.extend_from_slice(&key.to_le_bytes());
        meta
    }

    /// The interned callback name (with the meta shape) of a bound method of the spider,
    /// or `None` when the callback is not one (the fast path does not apply).
    fn callback_name(
        &mut self,
        py: Python<'_>,
        callback: &Bound<'_, PyAny>,
        shape: u8,
    ) -> PyResult<Option<Arc<str>>> {
        if callback.is_none() {
            let key = (0usize, shape);
            if let Some(name) = self.callbacks.get(&key) {
                return Ok(Some(name.clone()));
            }
            let name: Arc<str> = format!("{SHAPE_SEP}{}", shape_flags(shape)).into();
            self.callbacks.insert(key, name.clone());
            return Ok(Some(name));
        }
        let Some(spider) = &self.spider else {
            return Ok(None);
        };
        let Ok(owner) = callback.getattr(pyo3::intern!(py, "__self__")) else {
            return Ok(None);
        };
        if !owner.is(spider.bind(py)) {
            return Ok(None);
        }
        let func = callback.getattr(pyo3::intern!(py, "__func__"))?;
        let key = (func.as_ptr() as usize, shape);
        if let Some(name) = self.callbacks.get(&key) {
            return Ok(Some(name.clone()));
        }
        let name: String = func.getattr(pyo3::intern!(py, "__name__"))?.extract()?;
        // The name must find the same function again on the spider.
        let found = spider.bind(py).getattr(name.as_str());
        let same = match found {
            Ok(m) => m
                .getattr(pyo3::intern!(py, "__func__"))
                .map(|f| f.is(&func))
                .unwrap_or(false),
            Err(_) => false,
        };
        if !same || name.contains(SHAPE_SEP) {
            return Ok(None);
        }
        let tagged: Arc<str> = format!("{name}{SHAPE_SEP}{}", shape_flags(shape)).into();
        // Keep the function alive while its address is a key.
        std::mem::forget(func.unbind());
        self.callbacks.insert(key, tagged.clone());
        Ok(Some(tagged))
    }
}

#[pymethods]
impl Core {
    /// Opens a frontier. `store` is `"memory"`, `"sqlite"` (with `path`) or `"redis"`
    /// (with `url` and `crawl`).
    #[new]
    #[pyo3(signature = (settings_json, store="memory", path=None, url=None, crawl=None, dupefilter="exact", lease_timeout=300.0, now=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        settings_json: &str,
        store: &str,
        path: Option<&str>,
        url: Option<&str>,
        crawl: Option<&str>,
        dupefilter: &str,
        lease_timeout: f64,
        now: Option<f64>,
    ) -> PyResult<Self> {
        let (settings, config) = parse_settings(settings_json)?;
        let config = config.dupefilter(dupefilter_config(dupefilter)?);
        let now = now_or(now)?;
        let (backend, persistent, kind) = match store {
            "memory" => (
                Backend::Memory(
                    Frontier::open(settings, config, VolatileStore::new(), now)
                        .map_err(frontier_err)?,
                ),
                false,
                "memory",
            ),
            "sqlite" => {
                let path =
                    path.ok_or_else(|| PyValueError::new_err("the sqlite store needs a path"))?;
                let store = SqliteStore::open(path, SqliteOptions::default())
                    .map_err(|e| PyRuntimeError::new_err(format!("{e}")))?;
                (
                    Backend::Sqlite(
                        Frontier::open(settings, config, store, now).map_err(frontier_err)?,
                    ),
                    true,
                    "sqlite",
                )
            }
            "redis" => {
                let url =
                    url.ok_or_else(|| PyValueError::new_err("the redis store needs a url"))?;
                let crawl = crawl
                    .ok_or_else(|| PyValueError::new_err("the redis store needs a crawl name"))?;
                if !lease_timeout.is_finite() || lease_timeout <= 0.0 {
                    return Err(PyValueError::new_err(format!(
                        "lease_timeout must be a finite number of seconds > 0, got {lease_timeout}"
                    )));
                }
                let config = RedisConfig::default()
                    .time(TimeSource::Server)
                    .lease_timeout(Duration::from_secs_f64(lease_timeout))
                    .frontier(config);
                let frontier = RedisFrontier::open(url, crawl, settings, config)
                    .map_err(|e| PyRuntimeError::new_err(format!("redis frontier: {e}")))?;
                (Backend::Redis(Box::new(frontier)), true, "redis")
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "store must be \"memory\", \"sqlite\" or \"redis\", got {other:?}"
                )));
            }
        };
        Ok(Core {
            backend: Some(backend),
            objects: HashMap::new(),
            next_object: 0,
            callbacks: HashMap::new(),
            spider: None,
            request_cls: None,
            persistent,
            kind,
        })
    }

    /// The store's kind: `memory`, `sqlite` or `redis`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// Binds a spider (callbacks are its methods, by name) and the `scrapy.Request` class.
    fn bind_scrapy(&mut self, spider: Py<PyAny>, request_cls: Py<PyAny>) {
        self.spider = Some(spider);
        self.request_cls = Some(request_cls);
    }

    /// Queues a Scrapy request. Returns its lease id (>= 0), -1 for a duplicate, -2 for
    /// too deep, or -3 when a persistent store needs `payload` (the request's encoded
    /// dict form) because the fast path does not apply. With `fingerprint` (hex, from a
    /// custom fingerprinter) the duplicate filter uses it instead of the URL's.
    #[pyo3(signature = (request, payload=None, fingerprint=None, now=None))]
    fn push_scrapy(
        &mut self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        payload: Option<&Bound<'_, PyAny>>,
        fingerprint: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<i64> {
        let now = now_or(now)?;
        let url_obj = request.getattr(pyo3::intern!(py, "url"))?;
        let url = url_obj
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("request.url must be a str"))?
            .to_cow()?;
        let method_obj = request.getattr(pyo3::intern!(py, "method"))?;
        let method: String = method_obj
            .extract()
            .map_err(|_| PyTypeError::new_err("request.method must be a str"))?;
        let priority: i64 = request
            .getattr(pyo3::intern!(py, "priority"))?
            .extract()
            .map_err(|_| PyTypeError::new_err("request.priority must be an int"))?;
        let Ok(priority32) = i32::try_from(priority) else {
            return Err(PyValueError::new_err(format!(
                "request.priority must fit in 32 bits, got {priority}"
            )));
        };
        let dont_filter = request
            .getattr(pyo3::intern!(py, "dont_filter"))?
            .is_truthy()?;
        let body_obj = request.getattr(pyo3::intern!(py, "body"))?;
        let body = body_obj
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("request.body must be bytes"))?
            .as_bytes();

        let mut req = Request::new(Method::from_name(&method), &*url);
        req.priority = priority32;
        req.dont_filter = dont_filter;
        let meta = match request.getattr(pyo3::intern!(py, "_meta")) {
            Ok(m) => m,
            Err(_) => request.getattr(pyo3::intern!(py, "meta"))?,
        };
        let mut info = read_meta(py, &meta, &mut req)?;

        // Scrapy's `download_slot` meta key names the scope when it is not the URL's
        // own host (the downloader sets it to the host name on every request it handles,
        // and retries carry it: those stay on the host scope, port included).
        // The host is parsed here only when it matters (a slot, or no http(s) URL); the
        // frontier parses it anyway when it queues the request.
        let needs_host = info.slot.is_some()
            || fingerprint.is_some()
            || !(url.starts_with("http://") || url.starts_with("https://"));
        let host = if needs_host {
            host_scope(&url)
        } else {
            Ok(String::new())
        };
        if let (Some(slot), None) = (&info.slot, &req.scopes) {
            let same_host = host.as_ref().is_ok_and(|h| {
                h == slot
                    || host_without_port(h) == slot
                    || host_without_port(h).trim_matches(['[', ']']) == slot
            });
            if !same_host {
                req.scopes = Some(vec![ScopeAmount {
                    scope: slot.as_str().into(),
                    amount: 1.0,
                }]);
            }
        }
        // A URL without a host (data:, file:) is not throttled: it goes to no server.
        if req.scopes.is_none() && host.is_err() {
            let scheme = url.split(':').next().unwrap_or("local");
            req.scopes = Some(vec![ScopeAmount {
                scope: format!("{scheme}:").into(),
                amount: 1.0,
            }]);
            req.dont_throttle = true;
            info.plain = false;
        }
        if let Some(fp) = fingerprint {
            // A custom fingerprinter: the frontier filters on a URL made of the
            // fingerprint, and throttles on the real URL's host (or the meta scopes).
            if req.scopes.is_none() {
                let host = host_scope(&url)
                    .map_err(|e| PyValueError::new_err(format!("invalid request: {e}")))?;
                req.scopes = Some(vec![ScopeAmount {
                    scope: host.into(),
                    amount: 1.0,
                }]);
            }
            if fp.is_empty() || !fp.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(PyValueError::new_err(format!(
                    "a fingerprint must be non-empty hex, got {fp:?}"
                )));
            }
            req.url = format!("http://fingerprint.invalid/{fp}").into();
            req.method = Method::Get;
        } else if !body.is_empty() {
            req = req.body(body.to_vec());
        }

        // The fast path: an exact scrapy.Request whose other attributes are empty.
        let fast = payload.is_none()
            && fingerprint.is_none()
            && info.plain
            && body.is_empty()
            && self
                .request_cls
                .as_ref()
                .is_some_and(|cls| request.get_type().is(cls.bind(py)))
            && is_empty_attr(request, pyo3::intern!(py, "_headers"))?
            && is_empty_attr(request, pyo3::intern!(py, "_cookies"))?
            && is_empty_attr(request, pyo3::intern!(py, "_cb_kwargs"))?
            && is_empty_attr(request, pyo3::intern!(py, "_flags"))?
            && request.getattr(pyo3::intern!(py, "errback"))?.is_none()
            && request
                .getattr(pyo3::intern!(py, "_encoding"))?
                .cast::<PyString>()
                .is_ok_and(|s| s.to_cow().is_ok_and(|s| s == "utf-8"))
            && method.len() <= 16;
        let mut name = None;
        if fast {
            let shape = u8::from(info.depth.is_some()) | (u8::from(info.start) << 1);
            name =
                self.callback_name(py, &request.getattr(pyo3::intern!(py, "callback"))?, shape)?;
        }
        if let Some(name) = name {
            req.callback = Some(name);
            // Methods other than the common ones are kept by name in the record.
            return self.push_one(&req, now);
        }
        let meta_bytes = match payload {
            Some(p) => {
                let p = p
                    .cast::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("payload must be bytes"))?;
                let mut v = Vec::with_capacity(p.as_bytes().len() + 1);
                v.push(TAG_BYTES);
                v.extend_from_slice(p.as_bytes());
                v
            }
            None if self.persistent => return Ok(NEEDS_PAYLOAD),
            None => self.store_object(request.clone().unbind()),
        };
        req = req.meta(meta_bytes);
        let result = self.push_one(&req, now);
        if !matches!(result, Ok(id) if id >= 0)
            && req
                .extras
                .as_ref()
                .is_some_and(|e| e.meta.first() == Some(&TAG_OBJECT))
        {
            self.next_object -= 1;
            self.objects.remove(&self.next_object);
        }
        result
    }

    /// Keeps an object the store cannot persist (an unserializable request) in memory
    /// and queues it; it is lost if the process dies, as in Scrapy.
    #[pyo3(signature = (request, fingerprint=None, now=None))]
    fn push_scrapy_in_memory(
        &mut self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        fingerprint: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<i64> {
        let persistent = self.persistent;
        self.persistent = false;
        // The object path: `payload` is None and the store is treated as in-memory.
        let saved_cls = self.request_cls.take();
        let result = self.push_scrapy(py, request, None, fingerprint, now);
        self.request_cls = saved_cls;
        self.persistent = persistent;
        result
    }

    /// The next request that may be sent now. Returns a tuple for a request:
    /// `(lease_id, obj, url, method, callback, priority, dont_filter, depth, start,
    /// shape)`, where `obj` is the kept Python object, the payload bytes, or `None` when
    /// the request is to be rebuilt from the other fields; a float (seconds to wait)
    /// when nothing may go before then; `None` when nothing can go until a completion
    /// (or nothing is queued).
    #[pyo3(signature = (now=None))]
    fn poll_scrapy<'py>(
        &mut self,
        py: Python<'py>,
        now: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let now = now_or(now)?;
        let poll = each!(self.backend()?, f => f.poll(now).map_err(frontier_err))?;
        match poll {
            Poll::Ready(lease) => self.lease_tuple(py, lease),
            Poll::NotUntil(t) => {
                Ok(PyFloat::new(py, t.saturating_duration_since(now).as_secs_f64()).into_any())
            }
            _ => Ok(py.None().into_bound(py)),
        }
    }

    /// When to poll again at the latest if nothing completes (seconds from now), or
    /// `None`.
    #[pyo3(signature = (now=None))]
    fn poll_timeout(&mut self, now: Option<f64>) -> PyResult<Option<f64>> {
        let now = now_or(now)?;
        let t = each!(self.backend()?, f => f.poll_timeout());
        Ok(t.map(|t| t.saturating_duration_since(now).as_secs_f64()))
    }

    /// Ends a lease: `status` and `headers` for a response, `error` (a kind such as
    /// `"timeout"`) for a failure, neither for a request abandoned without an outcome.
    /// Returns False for an unknown lease.
    #[pyo3(signature = (lease_id, status=None, headers=None, error=None, now=None))]
    fn complete(
        &mut self,
        lease_id: u64,
        status: Option<u16>,
        headers: Option<&Bound<'_, PyAny>>,
        error: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<bool> {
        let now = now_or(now)?;
        let headers = header_pairs(headers)?;
        let outcome = make_outcome(status, &headers, error);
        let id = RequestId(lease_id);
        each!(self.backend()?, f => f.complete(id, &outcome, now).map_err(frontier_err))
    }

    /// Puts a lease back in the queue at its priority plus `priority_adjust`, feeding the
    /// outcome to backoff as `complete` does.
    #[pyo3(signature = (lease_id, status=None, headers=None, error=None, priority_adjust=0, now=None))]
    fn retry(
        &mut self,
        lease_id: u64,
        status: Option<u16>,
        headers: Option<&Bound<'_, PyAny>>,
        error: Option<&str>,
        priority_adjust: i32,
        now: Option<f64>,
    ) -> PyResult<bool> {
        let now = now_or(now)?;
        let headers = header_pairs(headers)?;
        let outcome = make_outcome(status, &headers, error);
        let id = RequestId(lease_id);
        each!(self.backend()?, f => f
            .retry(id, &outcome, priority_adjust, now)
            .map_err(frontier_err))
    }

    /// Queues a plain request (the standalone `Frontier`): returns its lease id, -1 for a
    /// duplicate, -2 for too deep.
    #[pyo3(signature = (url, method="GET", callback=None, priority=0, depth=0, start=false, dont_filter=false, dont_track=false, dont_throttle=false, scopes=None, delay=None, body=None, meta=None, now=None))]
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        url: &str,
        method: &str,
        callback: Option<&str>,
        priority: i32,
        depth: u32,
        start: bool,
        dont_filter: bool,
        dont_track: bool,
        dont_throttle: bool,
        scopes: Option<&Bound<'_, PyAny>>,
        delay: Option<f64>,
        body: Option<&[u8]>,
        meta: Option<&[u8]>,
        now: Option<f64>,
    ) -> PyResult<i64> {
        let now = now_or(now)?;
        let mut req = Request::new(Method::from_name(method), url);
        req.callback = callback.map(Arc::from);
        req.priority = priority;
        req.depth = depth;
        req.start = start;
        req.dont_filter = dont_filter;
        req.dont_track = dont_track;
        req.dont_throttle = dont_throttle;
        req.delay = delay;
        if let Some(scopes) = scopes {
            req.scopes = Some(read_scopes(scopes).map_err(|e| {
                PyValueError::new_err(
                    e.to_string()
                        .replace("meta[\"throttling_scopes\"]", "scopes"),
                )
            })?);
        }
        if let Some(body) = body.filter(|b| !b.is_empty()) {
            req = req.body(body.to_vec());
        }
        if let Some(meta) = meta {
            let mut v = Vec::with_capacity(meta.len() + 1);
            v.push(TAG_BYTES);
            v.extend_from_slice(meta);
            req = req.meta(v);
        }
        self.push_one(&req, now)
    }

    /// The next request (the standalone `Frontier`): a dict, a float (seconds to wait),
    /// or `None`.
    #[pyo3(signature = (now=None))]
    fn poll<'py>(&mut self, py: Python<'py>, now: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let now = now_or(now)?;
        let poll = each!(self.backend()?, f => f.poll(now).map_err(frontier_err))?;
        match poll {
            Poll::Ready(lease) => {
                let d = PyDict::new(py);
                let r = &lease.request;
                d.set_item("id", lease.id().0)?;
                d.set_item("url", &*r.url)?;
                d.set_item("method", r.method.as_str())?;
                d.set_item("callback", r.callback.as_deref())?;
                d.set_item("priority", r.priority)?;
                d.set_item("depth", r.depth)?;
                d.set_item("start", r.start)?;
                d.set_item("dont_filter", r.dont_filter)?;
                let scopes = match &r.scopes {
                    Some(s) => s.iter().map(|s| s.scope.to_string()).collect::<Vec<_>>(),
                    None => host_scope(&r.url).map(|h| vec![h]).unwrap_or_default(),
                };
                d.set_item("scopes", scopes)?;
                d.set_item("body", PyBytes::new(py, r.body_bytes()))?;
                let meta = r
                    .extras
                    .as_ref()
                    .and_then(|e| e.meta.split_first())
                    .filter(|(tag, _)| **tag == TAG_BYTES)
                    .map(|(_, rest)| PyBytes::new(py, rest));
                d.set_item("meta", meta)?;
                Ok(d.into_any())
            }
            Poll::NotUntil(t) => {
                Ok(PyFloat::new(py, t.saturating_duration_since(now).as_secs_f64()).into_any())
            }
            _ => Ok(py.None().into_bound(py)),
        }
    }

    /// Requests queued (not counting those in flight).
    fn __len__(&mut self) -> PyResult<usize> {
        match self.backend()? {
            Backend::Memory(f) => Ok(f.len()),
            Backend::Sqlite(f) => Ok(f.len()),
            Backend::Redis(f) => {
                let info = f
                    .info()
                    .map_err(|e| PyRuntimeError::new_err(format!("redis frontier: {e}")))?;
                Ok(usize::try_from(info.queued + info.delayed).unwrap_or(usize::MAX))
            }
        }
    }

    /// Work left anywhere: queued requests, and for a Redis frontier also the leases of
    /// every worker (a dead worker's come back when they expire).
    fn pending(&mut self) -> PyResult<usize> {
        match self.backend()? {
            Backend::Memory(f) => Ok(f.len()),
            Backend::Sqlite(f) => Ok(f.len()),
            Backend::Redis(f) => {
                let info = f
                    .info()
                    .map_err(|e| PyRuntimeError::new_err(format!("redis frontier: {e}")))?;
                Ok(usize::try_from(info.queued + info.delayed + info.leased).unwrap_or(usize::MAX))
            }
        }
    }

    /// Requests handed out and not completed (by this process).
    fn in_flight(&mut self) -> PyResult<usize> {
        Ok(each!(self.backend()?, f => f.in_flight()))
    }

    /// Scrapy-named counters (`scheduler/enqueued`, `scheduler/dequeued`, ...).
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let named = match self.backend()? {
            Backend::Memory(f) => f.stats().named(),
            Backend::Sqlite(f) => f.stats().named(),
            Backend::Redis(f) => f
                .info()
                .map_err(|e| PyRuntimeError::new_err(format!("redis frontier: {e}")))?
                .stats
                .named(),
        };
        let d = PyDict::new(py);
        for (k, v) in named {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The throttling state of one scope, or `None` if it has none.
    #[pyo3(signature = (scope, now=None))]
    fn scope_stats<'py>(
        &mut self,
        py: Python<'py>,
        scope: &str,
        now: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let now = now_or(now)?;
        let stats = match self.backend()? {
            Backend::Memory(f) => f
                .throttler()
                .scopes()
                .find(|(name, _)| *name == scope)
                .map(|(_, s)| s),
            Backend::Sqlite(f) => f
                .throttler()
                .scopes()
                .find(|(name, _)| *name == scope)
                .map(|(_, s)| s),
            Backend::Redis(f) => {
                let s = f
                    .scope_stats(scope, now)
                    .map_err(|e| PyRuntimeError::new_err(format!("redis frontier: {e}")))?;
                return s.map(|s| scope_stats_dict(py, figures!(s))).transpose();
            }
        };
        stats.map(|s| scope_stats_dict(py, figures!(s))).transpose()
    }

    /// Every scope state in memory as `(name, stats)` (in-process stores; Redis: empty).
    fn scopes<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let throttler = match self.backend()? {
            Backend::Memory(f) => f.throttler(),
            Backend::Sqlite(f) => f.throttler(),
            Backend::Redis(_) => return Ok(list),
        };
        for (name, s) in throttler.scopes() {
            let d = scope_stats_dict(py, figures!(s))?;
            list.append((name, d))?;
        }
        Ok(list)
    }

    /// Holds `scope` for `secs` seconds (a soft block that no status code reveals).
    #[pyo3(signature = (scope, secs, now=None))]
    fn delay_scope(&mut self, scope: &str, secs: f64, now: Option<f64>) -> PyResult<()> {
        let now = now_or(now)?;
        each!(self.backend()?, f => f.delay_scope(scope, secs, now).map_err(frontier_err))
    }

    /// Reports a robots.txt Crawl-delay for `scope`; returns what was done.
    #[pyo3(signature = (scope, secs, now=None))]
    fn handle_crawl_delay(&mut self, scope: &str, secs: f64, now: Option<f64>) -> PyResult<String> {
        let now = now_or(now)?;
        let d = each!(self.backend()?, f => f.handle_crawl_delay(scope, secs, now).map_err(frontier_err))?;
        Ok(format!("{d:?}"))
    }

    /// Marks fingerprints (hex lines, a Scrapy `requests.seen` file's text) as seen.
    /// With `custom=True` they come from a custom fingerprinter (see `push_scrapy`).
    #[pyo3(signature = (text, custom=false))]
    fn import_seen(&mut self, text: &str, custom: bool) -> PyResult<usize> {
        let fps = if custom {
            let mut out = Vec::new();
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                if !line.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return Err(PyValueError::new_err(format!(
                        "line {}: not a fingerprint: {line:?}",
                        i + 1
                    )));
                }
                out.push(
                    fingerprint("GET", &format!("http://fingerprint.invalid/{line}"), b"")
                        .map_err(|e| PyValueError::new_err(format!("line {}: {e}", i + 1)))?,
                );
            }
            out
        } else {
            parse_seen_file(text)
                .map_err(|e| PyValueError::new_err(format!("requests.seen: {e}")))?
        };
        match self.backend()? {
            Backend::Memory(f) => f.import_seen(&fps).map_err(frontier_err),
            Backend::Sqlite(f) => f.import_seen(&fps).map_err(frontier_err),
            Backend::Redis(_) => Err(PyValueError::new_err(
                "importing requests.seen into a Redis frontier is not supported",
            )),
        }
    }

    /// Makes every queue change durable now (persistent stores). Python name kept:
    /// `commit` is the Rust `flush`.
    fn commit(&mut self) -> PyResult<()> {
        each!(self.backend()?, f => f.flush().map_err(frontier_err))
    }

    /// Makes everything durable now, scope states included. Python name kept: `flush` is
    /// the Rust `checkpoint`.
    fn flush(&mut self) -> PyResult<()> {
        each!(self.backend()?, f => f.checkpoint().map_err(frontier_err))
    }

    /// Checkpoints and closes the store. Leases still out are delivered again on reopen.
    fn close(&mut self) -> PyResult<()> {
        if let Some(backend) = self.backend.take() {
            match backend {
                Backend::Memory(f) => drop(f.close().map_err(frontier_err)?),
                Backend::Sqlite(f) => drop(f.close().map_err(frontier_err)?),
                Backend::Redis(mut f) => f.checkpoint().map_err(frontier_err)?,
            }
        }
        self.objects.clear();
        Ok(())
    }

    /// Python objects kept in memory (requests queued without a serialized form).
    fn objects_kept(&self) -> usize {
        self.objects.len()
    }
}

impl Core {
    fn lease_tuple<'py>(&mut self, py: Python<'py>, lease: Lease) -> PyResult<Bound<'py, PyAny>> {
        let id = lease.id().0;
        let r = lease.request;
        let obj: Bound<'py, PyAny> = match r.extras.as_ref().and_then(|e| e.meta.split_first()) {
            Some((&TAG_OBJECT, rest)) => {
                let key = rest
                    .try_into()
                    .map(u64::from_le_bytes)
                    .map_err(|_| PyRuntimeError::new_err("damaged object record"))?;
                match self.objects.remove(&key) {
                    Some(obj) => obj.into_bound(py),
                    // An object of a previous process (an unserializable request that
                    // was queued in a persistent store): gone, as in Scrapy.
                    None => PyString::new(py, "lost").into_any(),
                }
            }
            Some((&TAG_BYTES, rest)) => PyBytes::new(py, rest).into_any(),
            _ => py.None().into_bound(py),
        };
        let (callback, shape) = match r.callback.as_deref() {
            Some(tagged) => match tagged.split_once(SHAPE_SEP) {
                Some((name, shape)) => (Some(name), shape),
                None => (Some(tagged), ""),
            },
            None => (None, ""),
        };
        let callback = callback.filter(|c| !c.is_empty());
        let t = PyTuple::new(
            py,
            [
                id.into_pyobject(py)?.into_any(),
                obj,
                PyString::new(py, &r.url).into_any(),
                PyString::new(py, r.method.as_str()).into_any(),
                callback.into_pyobject(py)?.into_any(),
                r.priority.into_pyobject(py)?.into_any(),
                pyo3::types::PyBool::new(py, r.dont_filter)
                    .to_owned()
                    .into_any(),
                r.depth.into_pyobject(py)?.into_any(),
                pyo3::types::PyBool::new(py, r.start).to_owned().into_any(),
                PyString::new(py, shape).into_any(),
            ],
        )?;
        Ok(t.into_any())
    }
}
