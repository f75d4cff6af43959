//! The reqwest-middleware integration.

use std::sync::Arc;

use http::Extensions;
use polite_runtime_common::Runtime;
use reqwest_middleware::{Middleware, Next};

use crate::message::Replay;
use crate::service::{Shared, error_outcome, request_span, response_outcome, scope_of};
use crate::{BoxError, ThrottleLayer};
use tracing::Instrument;

/// A [`reqwest_middleware::Middleware`] that throttles like [`ThrottleLayer`]: each
/// request waits for its scope's permit, and its answer feeds backoff. With
/// [`retry_throttled`](Self::retry_throttled), throttling answers (429, 503 with
/// `Retry-After`) are sent again after the wait the server asked for.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use polite_runtime_tokio::{Clock, Throttle};
/// use polite_throttle_core::{ScopeConfig, Settings};
/// use polite_throttle_tower::{ScopeKey, ThrottleLayer, ThrottleMiddleware};
///
/// let settings = Settings::api_client().with_scope("api", ScopeConfig::per_second(5.0));
/// let layer = ThrottleLayer::new(Throttle::new(settings, Clock::wall())?)
///     .scope_by(ScopeKey::fixed("api"));
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ThrottleMiddleware::new(layer).retry_throttled(10))
///     .build();
/// let body = client.get("https://api.example.com/items").send().await?.text().await?;
/// # let _ = body; Ok(()) }
/// ```
pub struct ThrottleMiddleware<R: Runtime> {
    shared: Arc<Shared<R>>,
    retries: u32,
}

impl<R: Runtime> std::fmt::Debug for ThrottleMiddleware<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleMiddleware")
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> ThrottleMiddleware<R> {
    /// A middleware spending `layer`'s budget with its scope key; no retries.
    pub fn new(layer: ThrottleLayer<R>) -> Self {
        ThrottleMiddleware {
            shared: layer.shared_state().clone(),
            retries: 0,
        }
    }

    /// Sends a request again, at most `max` times, when the answer only asks to slow
    /// down (see [`is_throttling`](crate::is_throttling)); not for streaming bodies.
    pub fn retry_throttled(mut self, max: u32) -> Self {
        self.retries = max;
        self
    }
}

#[async_trait::async_trait]
impl<R: Runtime> Middleware for ThrottleMiddleware<R> {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let scope =
            scope_of(&self.shared.key, &req).map_err(reqwest_middleware::Error::middleware)?;
        let mut req = req;
        let mut left = self.retries;
        loop {
            let again = if left > 0 { req.replay() } else { None };
            let result = async {
                let permit = self
                    .shared
                    .budget
                    .acquire(&scope)
                    .await
                    .map_err(middleware_error)?;
                let result = next.clone().run(req, extensions).await;
                let outcome = match &result {
                    Ok(response) => response_outcome(response),
                    Err(reqwest_middleware::Error::Reqwest(e)) => error_outcome(e),
                    Err(reqwest_middleware::Error::Middleware(e)) => error_outcome(e.as_ref()),
                };
                permit.finish(&outcome).await;
                result
            }
            .instrument(request_span(&scope))
            .await;
            match (result, again) {
                (Ok(response), Some(copy)) if crate::is_throttling(&response) => {
                    left -= 1;
                    req = copy;
                    tracing::debug!(
                        status = response.status().as_u16(),
                        left,
                        "retrying a throttling answer"
                    );
                }
                (result, _) => return result,
            }
        }
    }
}

fn middleware_error(e: BoxError) -> reqwest_middleware::Error {
    reqwest_middleware::Error::Middleware(anyhow::Error::from_boxed(e))
}
