//! The extension point for schedulers built on the throttler and for ports of its rules.
//!
//! A user of the throttler needs none of this: [`Throttler`](crate::Throttler),
//! [`Settings`](crate::Settings), [`Outcome`](crate::Outcome) and the other items at the
//! crate root are the whole of its API. What is here serves code that builds *on* the
//! throttler's internals, as polite-frontier-core's scheduler does, or re-implements its
//! rules elsewhere, as polite-store-redis's server-side script does. It follows the
//! throttler's rules closely and may change with them.
//!
//! - [`ScopeHint`]: where a scope's state lives in one throttler. A scheduler keeps one per
//!   scope it tracks and passes it to the `*_hinted` calls of
//!   [`Throttler`](crate::Throttler) (`try_acquire_hinted`, `load_hinted`,
//!   `prefetch_hinted`) to skip the name lookup; a stale hint is detected and refreshed.
//! - [`HeldBackMonitor`]: the "too many requests held back" warning with its re-arming, for
//!   a scheduler that counts held-back requests itself (the `delayed_requests_warn_threshold`
//!   setting).
//! - [`ScopeParams`] (with [`BackoffParams`] and [`RampupParams`]) and [`ScopeKind`]: the
//!   parameters a scope runs with, resolved from the settings, the scope's kind (IP,
//!   domain, other) and its own configuration exactly as the throttler resolves them; a
//!   port ships them to where its copy of the rules runs.
//! - [`JitterRng`]: the seedable generator behind delay jitter (same `seed`, same
//!   sequence on every platform), for ports and simulators that must reproduce jitter.
//! - [`secs_to_duration`]: the throttler's conversion of a number of seconds to a
//!   `Duration` (saturating, NaN and negatives as zero), so a port rounds as it does.
//! - [`prefetch`]: a cache prefetch hint for code that knows which memory it will touch
//!   next (a no-op where the target has none).
//!
//! The [`Throttler`](crate::Throttler) methods that only schedulers use say so in their
//! documentation and link here.

pub use crate::prefetch::prefetch;
pub use crate::rng::JitterRng;
pub use crate::scope::{BackoffParams, RampupParams, ScopeKind, ScopeParams};
pub use crate::throttler::{HeldBackMonitor, ScopeHint};
pub use crate::time::secs_to_duration;
