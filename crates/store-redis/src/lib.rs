//! # store-redis
//!
//! One crawl frontier and one politeness budget shared by a fleet of workers through
//! Redis. Workers on any number of machines open the same crawl and run the usual loop:
//! [`push`](RedisFrontier::push), [`poll(now)`](RedisFrontier::poll),
//! [`complete`](RedisFrontier::complete) or [`retry`](RedisFrontier::retry). Every decision
//! runs in one server-side Lua script (`EVALSHA`, reloaded after `NOSCRIPT`), atomically:
//!
//! - the duplicate check and the enqueue (binary 64-bit fingerprints);
//! - the choice of the next request: highest priority among the scope groups that may
//!   send now, ties to the least loaded and then round-robin, with every scope's delay,
//!   concurrency, hard backoff and quota checked and reserved all-or-nothing, for all
//!   workers together;
//! - the lease, with a visibility timeout: a worker that dies loses nothing, its leases
//!   are delivered again and its concurrency slots come back when they expire;
//! - the completion, which feeds backoff, recovery, header delays and rampup.
//!
//! The script is a port of `throttle-core` and `frontier-core`'s scheduler: the same
//! timeline gives the same decisions as the in-process [`Frontier`](frontier_core::Frontier)
//! (checked by this crate's conformance tests). It implements
//! [`Scheduling`](frontier_core::Scheduling), so the runtime drivers drive it unchanged.
//!
//! ```no_run
//! use frontier_core::{Poll, Request};
//! use store_redis::{RedisConfig, RedisFrontier, TimeSource};
//! use throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
//!
//! let settings = Settings::default().with_scope("example.com", ScopeConfig::new().delay(2.0));
//! let config = RedisConfig { time: TimeSource::Server, ..RedisConfig::default() };
//! let mut frontier = RedisFrontier::open("redis://127.0.0.1/", "news", settings, config)?;
//!
//! let now = Timestamp::ZERO; // with TimeSource::Server, only the caller's reference
//! frontier.push(&Request::get("https://example.com/").callback("parse"), now)?;
//! if let Poll::Ready(lease) = frontier.poll(now)? {
//!     // ... fetch lease.request.url ...
//!     frontier.complete(lease.id(), &Outcome::status(200), now)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Keys
//!
//! Every key of a crawl starts with `{name}:` (one hash tag: one Redis Cluster slot, so
//! the script stays atomic there):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `cfg` | hash | layout version, settings, the crawl's epoch (server time) |
//! | `c`, `st` | hash | counters (sequence, queued, in flight, RNG state, stats) |
//! | `np`, `sk` | hash | resolved scope parameters; each scope's kind |
//! | `gk`, `g:<id>`, `q:<id>` | hash, string, sorted set | scope groups: key → id, record, queue |
//! | `sid`, `ss:<id>`, `pk:<id>` | hash, string, sorted set | scheduler scopes and the groups parked on them |
//! | `cand`, `ev` | sorted set | groups that may send; scope timers and delayed requests by time |
//! | `dr` | hash | requests held by their own delay |
//! | `t`, `ov` | hash | throttle scope states; live changes and Crawl-delays |
//! | `L`, `lx` | hash, sorted set | leases; their expiry times |
//! | `df` | set | binary fingerprints seen |
//! | `cbn`, `cbi` | hash | callback names ↔ numbers |
//!
//! Queued requests are `postcard` records (frontier-core's codec, the host left out when
//! it is the group's) behind a 14-byte order prefix, in one sorted set per scope group.
//!
//! ## Time
//!
//! [`TimeSource::Caller`]: each call's `now` (a fake clock in tests). [`TimeSource::Server`]:
//! the server's `TIME`, counted from the crawl's creation, so workers with skewed clocks
//! agree; instants returned are mapped onto the caller's `now`.
//!
//! ## Errors
//!
//! Damaged values, keys of the wrong type, another layout version, settings that differ
//! from the crawl's, and connection failures are [`RedisStoreError`]s inside
//! [`FrontierError::Store`](frontier_core::FrontierError::Store); a payload that does not
//! decode is [`FrontierError::Corrupt`](frontier_core::FrontierError::Corrupt) naming its
//! lease. A lost connection is made again on the next call.

mod error;
mod frontier;
mod params;
pub mod testing;

pub use error::RedisStoreError;
pub use frontier::{
    RedisConfig, RedisFrontier, RedisInfo, RedisScopeStats, ScriptMode, TimeSource,
};
