//! Throttle any HTTP client in one line: a tower [`ThrottleLayer`] (and, with the
//! `reqwest-middleware` feature, a [`ThrottleMiddleware`]) that makes every request wait
//! for its scope's permit, first come, first served, and feeds each answer to the
//! throttle: 429s and 5xx slow the scope down, `Retry-After`, `RateLimit`,
//! `RateLimit-Reset` and `X-RateLimit-*` headers are obeyed, and a response that says
//! the budget is spent (`remaining=0`) holds the next request until the reset instead
//! of letting it earn a 429. [`RetryThrottled`] sends throttled requests again after the
//! wait the server asked for.
//!
//! ```no_run
//! use polite_runtime_tokio::{Clock, Throttle};
//! use polite_throttle_core::{ScopeConfig, Settings};
//! use polite_throttle_tower::{RetryThrottled, ScopeKey, ThrottleLayer};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // One budget for the whole API: 10 calls a second, 4 at once, no jitter.
//! let settings = Settings::api_client()
//!     .with_scope("api", ScopeConfig::per_second(10.0).concurrency(4));
//! let throttle = Throttle::new(settings, Clock::wall())?;
//! let mut client = ServiceBuilder::new()
//!     .retry(RetryThrottled::new(10))
//!     .layer(ThrottleLayer::new(throttle).scope_by(ScopeKey::fixed("api")))
//!     .service(reqwest::Client::new());
//! let request = reqwest::Request::new(reqwest::Method::GET, "https://api.example.com/v1/items".parse()?);
//! let response = client.ready().await?.call(request).await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```
//!
//! The layer wraps any `Service` whose requests and responses implement
//! [`ThrottledRequest`] and [`ThrottledResponse`]: `http::Request`/`http::Response` (hyper,
//! axum's and tonic's clients) and, with the `reqwest` feature, reqwest's own types.
//! Scopes come from a [`ScopeKey`]: the host by default, the registrable domain (`psl`
//! feature), one fixed name, or any function of the request.
//!
//! Features: `reqwest`, `reqwest-middleware`, `psl`, and `redis` (a budget shared by
//! every process through Redis: `ThrottleLayer::shared`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod budget;
mod error;
mod message;
#[cfg(feature = "reqwest-middleware")]
mod middleware;
mod retry;
mod scope;
mod service;
#[cfg(feature = "redis")]
mod shared;

pub use error::{BoxError, Error};
pub use message::{Replay, Target, ThrottledRequest, ThrottledResponse};
#[cfg(feature = "reqwest-middleware")]
pub use middleware::ThrottleMiddleware;
pub use retry::{RetryThrottled, is_throttling};
pub use scope::ScopeKey;
pub use service::{ResponseFuture, ThrottleLayer, ThrottleService};
#[cfg(feature = "redis")]
pub use shared::{SharedBudget, SharedPermit};

// The README's example compiles as a doctest.
#[cfg(all(doctest, feature = "reqwest"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
