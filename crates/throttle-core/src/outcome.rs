//! How a request ended, as the throttler needs to know it.

use core::time::Duration;

use crate::headers::scan;
#[cfg(doc)]
use crate::headers::{budget_reset, header_delay};
use crate::scope::BackoffParams;
use crate::time::Timestamp;

/// The result of a request, reported when its permit is released.
///
/// ```
/// use polite_throttle_core::{Outcome, Timestamp};
///
/// let ok = Outcome::status(200);
/// let limited = Outcome::response(429, [("Retry-After", "7")], None);
/// let failed = Outcome::error("timeout");
/// let dropped = Outcome::Cancelled; // no answer: never a backoff trigger
/// # let _ = (ok, limited, failed, dropped);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// A response arrived. Build it with [`Outcome::status`] or [`Outcome::response`].
    #[non_exhaustive]
    Response {
        /// Its HTTP status.
        status: u16,
        /// The wait its rate-limit headers asked for (see [`header_delay`]); honoured
        /// only when the status is a backoff trigger.
        header_delay: Option<Duration>,
        /// How long until the budget its headers announce as spent is renewed (see
        /// [`budget_reset`]); honoured on any status, without a backoff step: the
        /// request's scopes send nothing more until then.
        budget_reset: Option<Duration>,
    },
    /// The request failed with an error of this kind (`"timeout"`, `"connection"`,
    /// `"data_loss"` or any name listed in `backoff_exceptions`).
    Error(&'a str),
    /// The request was abandoned without an outcome (a dropped permit, a cancelled
    /// task). It frees its slots and never triggers backoff.
    Cancelled,
}

impl<'a> Outcome<'a> {
    /// A response with this status and no rate-limit headers.
    pub fn status(status: u16) -> Self {
        Outcome::Response {
            status,
            header_delay: None,
            budget_reset: None,
        }
    }

    /// A response with this status whose headers are scanned for rate-limit delays.
    /// `wall_clock` (time since the Unix epoch) is needed for HTTP-dates.
    pub fn response<I, N, V>(status: u16, headers: I, wall_clock: Option<Timestamp>) -> Self
    where
        I: IntoIterator<Item = (N, V)>,
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let (header_delay, budget_reset) = scan(headers, wall_clock);
        Outcome::Response {
            status,
            header_delay,
            budget_reset,
        }
    }

    /// A response whose rate-limit headers were read already (by [`header_delay`] and
    /// [`budget_reset`], or recorded by a simulation).
    pub fn parsed(
        status: u16,
        header_delay: Option<Duration>,
        budget_reset: Option<Duration>,
    ) -> Self {
        Outcome::Response {
            status,
            header_delay,
            budget_reset,
        }
    }

    /// A failure of this kind.
    pub fn error(kind: &'a str) -> Self {
        Outcome::Error(kind)
    }

    pub(crate) fn is_trigger(&self, backoff: &BackoffParams) -> bool {
        match *self {
            Outcome::Response { status, .. } => backoff.triggers_on_status(status),
            Outcome::Error(kind) => backoff.triggers_on_error(kind),
            Outcome::Cancelled => false,
        }
    }

    /// The reset of a budget the response's headers announce as spent.
    pub(crate) fn budget_reset(&self) -> Option<Duration> {
        match *self {
            Outcome::Response { budget_reset, .. } => budget_reset,
            _ => None,
        }
    }

    pub(crate) fn header_delay(&self) -> Option<Duration> {
        match *self {
            Outcome::Response { header_delay, .. } => header_delay,
            _ => None,
        }
    }
}
