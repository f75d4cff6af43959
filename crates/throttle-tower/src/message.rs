//! What the throttle reads from requests and responses, for `http`'s types and (with the
//! `reqwest` feature) reqwest's.

use http::{HeaderMap, Method, StatusCode};

/// Where a request goes, as the throttle sees it: enough to choose its scope.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Target<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// `http`, `https`, ... (empty when the URI has none).
    pub scheme: &'a str,
    /// The host, as written in the URI (IPv6 literals keep their brackets).
    pub host: &'a str,
    /// The port, if the URI names one.
    pub port: Option<u16>,
    /// The request's headers.
    pub headers: &'a HeaderMap,
}

/// A request the throttle can scope: implemented for [`http::Request`] and, with the
/// `reqwest` feature, `reqwest::Request`.
pub trait ThrottledRequest {
    /// Where the request goes; `None` when its URI names no host.
    fn target(&self) -> Option<Target<'_>>;
}

/// A response the throttle learns from: its status and headers.
pub trait ThrottledResponse {
    /// The response's status.
    fn status(&self) -> StatusCode;
    /// The response's headers (`Retry-After`, `RateLimit`, `X-RateLimit-*`, ...).
    fn headers(&self) -> &HeaderMap;
}

/// A request that may be sent again, for [`RetryThrottled`](crate::RetryThrottled):
/// `None` when its body cannot be replayed (a stream), and then it is not retried.
pub trait Replay: Sized {
    /// A copy to send again, if the body allows one.
    fn replay(&self) -> Option<Self>;
}

impl<B> ThrottledRequest for http::Request<B> {
    fn target(&self) -> Option<Target<'_>> {
        let uri = self.uri();
        Some(Target {
            method: self.method(),
            scheme: uri.scheme_str().unwrap_or(""),
            host: uri.host()?,
            port: uri.port_u16(),
            headers: self.headers(),
        })
    }
}

impl<B> ThrottledResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
}

/// Bodies that are plain data (`String`, `Bytes`, `Full<Bytes>`, ...) are `Clone`; a
/// streaming body is not, so its requests cannot be given to a retrying service.
impl<B: Clone> Replay for http::Request<B> {
    fn replay(&self) -> Option<Self> {
        let mut copy = http::Request::new(self.body().clone());
        *copy.method_mut() = self.method().clone();
        *copy.uri_mut() = self.uri().clone();
        *copy.version_mut() = self.version();
        *copy.headers_mut() = self.headers().clone();
        Some(copy)
    }
}

#[cfg(feature = "reqwest")]
mod reqwest_impls {
    use super::*;

    impl ThrottledRequest for reqwest::Request {
        fn target(&self) -> Option<Target<'_>> {
            let url = self.url();
            Some(Target {
                method: self.method(),
                scheme: url.scheme(),
                host: url.host_str()?,
                port: url.port(),
                headers: self.headers(),
            })
        }
    }

    impl ThrottledResponse for reqwest::Response {
        fn status(&self) -> StatusCode {
            self.status()
        }
        fn headers(&self) -> &HeaderMap {
            self.headers()
        }
    }

    /// `None` for a streaming body (reqwest's `try_clone`).
    impl Replay for reqwest::Request {
        fn replay(&self) -> Option<Self> {
            self.try_clone()
        }
    }
}
