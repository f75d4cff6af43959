//! Errors of the throttled services, and how transport errors are named for backoff.

/// A boxed error, as tower's layers use.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the throttle itself refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request's URI names no host (a relative URI): it has no scope to spend.
    #[error("the request's URI names no host, so it has no throttling scope")]
    NoHost,
    /// The [`ScopeKey`](crate::ScopeKey) function gave no scope for the request.
    #[error("the scope key gave no scope for this request")]
    NoScope,
    /// The shared budget could not be reached (its store's error).
    #[error("shared budget: {0}")]
    Budget(String),
}

/// The backoff name of a transport error: `"timeout"`, `"data_loss"` or `"connection"`
/// (the kinds `backoff_exceptions` lists by default).
pub(crate) fn kind_of(error: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut cur = Some(error);
    while let Some(e) = cur {
        #[cfg(feature = "reqwest")]
        if let Some(r) = e.downcast_ref::<reqwest::Error>() {
            if r.is_timeout() {
                return "timeout";
            }
            if r.is_body() || r.is_decode() {
                return "data_loss";
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::TimedOut => return "timeout",
                std::io::ErrorKind::UnexpectedEof => return "data_loss",
                _ => {}
            }
        }
        // tower's and tokio's timeouts say so in their message ("request timed out",
        // "deadline has elapsed"), and neither crate is a dependency here.
        let text = e.to_string();
        if text.contains("timed out") || text.contains("deadline has elapsed") {
            return "timeout";
        }
        cur = e.source();
    }
    "connection"
}
