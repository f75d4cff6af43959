//! The tower layer and service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use polite_runtime_common::{Runtime, Throttle, unix_now};
use polite_throttle_core::{Outcome, ScopeUse};
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;

use crate::message::{ThrottledRequest, ThrottledResponse};
use crate::scope::ScopeKey;
use crate::{BoxError, Error};

/// What a layer and all its services share.
pub(crate) struct Shared<R: Runtime> {
    pub(crate) budget: crate::budget::Budget<R>,
    pub(crate) key: ScopeKey,
}

/// A tower [`Layer`] that throttles every request through a [`Throttle`]: each request
/// waits for its scope's permit (first come, first served), and its response's status
/// and rate-limit headers, or its transport error, feed the throttle's backoff.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use polite_runtime_tokio::{Clock, Throttle};
/// use polite_throttle_core::{ScopeConfig, Settings};
/// use polite_throttle_tower::{ScopeKey, ThrottleLayer};
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// let settings = Settings::api_client().with_scope("api", ScopeConfig::per_second(10.0));
/// let throttle = Throttle::new(settings, Clock::wall())?;
/// let mut client = ServiceBuilder::new()
///     .layer(ThrottleLayer::new(throttle).scope_by(ScopeKey::fixed("api")))
///     .service(reqwest::Client::new());
/// let request = reqwest::Request::new(reqwest::Method::GET, "https://api.example.com/".parse()?);
/// let response = client.ready().await?.call(request).await?;
/// # let _ = response; Ok(()) }
/// ```
///
/// The permit is released when the response's head arrives (the body is not waited
/// for), or untracked when the call's future is dropped: a cancelled request never
/// holds a slot and never counts as a failure.
pub struct ThrottleLayer<R: Runtime> {
    shared: Arc<Shared<R>>,
}

impl<R: Runtime> Clone for ThrottleLayer<R> {
    fn clone(&self) -> Self {
        ThrottleLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<R: Runtime> std::fmt::Debug for ThrottleLayer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("key", &self.shared.key)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> ThrottleLayer<R> {
    /// A layer spending `throttle`'s budget, one scope per host (see
    /// [`scope_by`](Self::scope_by)).
    pub fn new(throttle: Throttle<R>) -> Self {
        Self::with_budget(crate::budget::Budget::Local(throttle))
    }

    pub(crate) fn with_budget(budget: crate::budget::Budget<R>) -> Self {
        ThrottleLayer {
            shared: Arc::new(Shared {
                budget,
                key: ScopeKey::host(),
            }),
        }
    }

    /// Names each request's scope with `key` (default: [`ScopeKey::host`]).
    pub fn scope_by(self, key: ScopeKey) -> Self {
        ThrottleLayer {
            shared: Arc::new(Shared {
                budget: self.shared.budget.clone(),
                key,
            }),
        }
    }

    #[cfg_attr(not(feature = "reqwest-middleware"), allow(dead_code))]
    pub(crate) fn shared_state(&self) -> &Arc<Shared<R>> {
        &self.shared
    }
}

impl<S, R: Runtime> Layer<S> for ThrottleLayer<R> {
    type Service = ThrottleService<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        ThrottleService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`ThrottleLayer`] wraps around a client.
pub struct ThrottleService<S, R: Runtime> {
    inner: S,
    shared: Arc<Shared<R>>,
}

impl<S: Clone, R: Runtime> Clone for ThrottleService<S, R> {
    fn clone(&self) -> Self {
        ThrottleService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: std::fmt::Debug, R: Runtime> std::fmt::Debug for ThrottleService<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleService")
            .field("inner", &self.inner)
            .field("key", &self.shared.key)
            .finish_non_exhaustive()
    }
}

/// The future of a throttled call.
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, Req, R> Service<Req> for ThrottleService<S, R>
where
    Req: ThrottledRequest + Send + 'static,
    S: Service<Req> + Clone + Send + 'static,
    S::Response: ThrottledResponse + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
    R: Runtime,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        // The service polled ready is the one that sends; a fresh clone waits for the
        // next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let scope = scope_of(&shared.key, &req)?;
            let span = request_span(&scope);
            async move {
                let permit = shared.budget.acquire(&scope).await?;
                let result = inner.call(req).await.map_err(Into::into);
                permit.finish(&outcome_of(&result)).await;
                result
            }
            .instrument(span)
            .await
        })
    }
}

pub(crate) fn scope_of<Req: ThrottledRequest>(key: &ScopeKey, req: &Req) -> Result<String, Error> {
    let target = req.target().ok_or(Error::NoHost)?;
    key.scope_of(&target).ok_or(Error::NoScope)
}

/// The outcome a result feeds to backoff, recorded on the current span.
pub(crate) fn outcome_of<T: ThrottledResponse>(result: &Result<T, BoxError>) -> Outcome<'static> {
    match result {
        Ok(response) => response_outcome(response),
        Err(e) => error_outcome(e.as_ref()),
    }
}

/// The outcome of a response: its status and rate-limit headers.
pub(crate) fn response_outcome<T: ThrottledResponse + ?Sized>(response: &T) -> Outcome<'static> {
    let status = response.status().as_u16();
    tracing::Span::current().record("status", status);
    Outcome::response(status, response.headers(), Some(unix_now()))
}

/// The outcome of a transport error.
pub(crate) fn error_outcome(error: &(dyn std::error::Error + 'static)) -> Outcome<'static> {
    let kind = crate::error::kind_of(error);
    tracing::Span::current().record("error", kind);
    Outcome::error(kind)
}

/// The span of one throttled request.
pub(crate) fn request_span(scope: &str) -> tracing::Span {
    tracing::debug_span!(
        "throttle",
        scope = %scope,
        wait_ms = tracing::field::Empty,
        status = tracing::field::Empty,
        error = tracing::field::Empty,
    )
}

/// One scope use, for the throttle's acquire.
pub(crate) fn uses(scope: &str) -> [ScopeUse<'_>; 1] {
    [ScopeUse::new(scope)]
}
