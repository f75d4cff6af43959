//! Retrying the answers that only ask us to slow down.

use http::StatusCode;
use polite_runtime_common::unix_now;
use polite_throttle_core::headers::header_delay;

use crate::message::{Replay, ThrottledResponse};

/// A [`tower::retry::Policy`] that sends a request again when the server answered a
/// throttling status (429, or 503 with a rate-limit header such as `Retry-After`), at
/// most `max` times. Put it outside a [`ThrottleLayer`](crate::ThrottleLayer): the
/// throttle has already fed the answer to backoff, so the retry waits for the delay the
/// server asked for before it goes. Requests whose body cannot be replayed are not
/// retried; errors are not retried either (use a general retry layer for them).
///
/// ```
/// use polite_runtime_tokio::{Clock, Throttle};
/// use polite_throttle_core::Settings;
/// use polite_throttle_tower::{RetryThrottled, ThrottleLayer};
/// use tower::ServiceBuilder;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let throttle = Throttle::new(Settings::api_client(), Clock::wall()).unwrap();
/// let client = ServiceBuilder::new()
///     .retry(RetryThrottled::new(10))
///     .layer(ThrottleLayer::new(throttle))
///     .service(reqwest::Client::new());
/// # let _ = client; }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RetryThrottled {
    left: u32,
}

impl RetryThrottled {
    /// Retries a request's throttling answers at most `max` times.
    pub fn new(max: u32) -> Self {
        RetryThrottled { left: max }
    }
}

/// Whether a response only asks the client to slow down: 429, or 503 with a rate-limit
/// header that names a wait.
pub fn is_throttling<T: ThrottledResponse + ?Sized>(response: &T) -> bool {
    match response.status() {
        StatusCode::TOO_MANY_REQUESTS => true,
        StatusCode::SERVICE_UNAVAILABLE => {
            header_delay(response.headers(), Some(unix_now())).is_some()
        }
        _ => false,
    }
}

impl<Req: Replay, Res: ThrottledResponse, E> tower::retry::Policy<Req, Res, E> for RetryThrottled {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _req: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Ok(response) if self.left > 0 && is_throttling(response) => {
                self.left -= 1;
                tracing::debug!(
                    status = response.status().as_u16(),
                    left = self.left,
                    "retrying a throttling answer"
                );
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        req.replay()
    }
}
