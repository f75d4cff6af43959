//! # polite-frontier-core
//!
//! The crawl frontier as pure logic: push discovered requests, poll the next one that may
//! go out *now*, acknowledge it when done. It never hands out a request whose scopes
//! would make it wait, and one slow scope never holds up the others.
//!
//! ```
//! use polite_frontier_core::{Frontier, Poll, PushOutcome, Request};
//! use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
//!
//! let settings = Settings::default()
//!     .without_jitter()
//!     .with_scope("slow.example.com", ScopeConfig::new().delay(100.0));
//! let now = Timestamp::ZERO;
//! let mut frontier = Frontier::in_memory(settings, now)?;
//!
//! frontier.push(&Request::get("https://slow.example.com/1").priority(5), now)?;
//! frontier.push(&Request::get("https://slow.example.com/2").priority(5), now)?;
//! frontier.push(&Request::get("https://fast.example.com/a"), now)?;
//! assert_eq!(
//!     frontier.push(&Request::get("https://fast.example.com/a#top"), now)?,
//!     PushOutcome::Duplicate
//! );
//!
//! // The slow host's first request goes first (priority 5)...
//! let Poll::Ready(lease) = frontier.poll(now)? else { panic!() };
//! assert_eq!(&*lease.request.url, "https://slow.example.com/2"); // LIFO within a priority
//! frontier.complete(lease.id(), &Outcome::status(200), now)?;
//! // ...then the fast one, without waiting 100 s behind the slow host.
//! let Poll::Ready(lease) = frontier.poll(now)? else { panic!() };
//! assert_eq!(&*lease.request.url, "https://fast.example.com/a");
//! frontier.complete(lease.id(), &Outcome::status(200), now)?;
//! // The rest waits for the slow host's delay.
//! assert_eq!(frontier.poll(now)?, Poll::NotUntil(Timestamp::from_secs(100)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## What is inside
//!
//! - [`Request`] and its compact [`Codec`] (postcard with a format-version byte).
//! - Ordering: priority buckets, LIFO/FIFO per `scheduler_order`, start requests per
//!   `start_order` and after other requests of equal priority, `depth_priority`,
//!   `depth_limit`; `peek` always shows what `poll` would return.
//! - The throttling-aware scheduler (default) and Scrapy's slot-aware [`Policy`].
//! - The duplicate filter: Scrapy-compatible [`fingerprint`](fn@fingerprint)s, an exact set of 64-bit
//!   prefixes or a Bloom filter, import of Scrapy's `requests.seen`.
//! - Leases with at-least-once delivery: [`Frontier::complete`], [`Frontier::retry`], and
//!   redelivery of unacknowledged leases when a store is reopened.
//! - The [`Scheduling`] trait the runtime drivers drive: implemented by [`Frontier`] and by
//!   frontiers shared between processes (`polite-store-redis`).
//! - The synchronous [`Store`] trait, [`VolatileStore`] (persists nothing, leanest),
//!   [`ReferenceStore`] (the reference), and the store conformance suite (feature
//!   `testing`).
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

mod blocks;
mod buckets;
mod codec;
#[cfg(feature = "testing")]
pub mod conformance;
mod dispatch;
mod dupefilter;
mod fingerprint;
mod frontier;
mod group;
mod leases;
mod request;
mod scheduling;
mod settings;
mod spill;
mod stats;
mod store;

pub use codec::{CallbackTable, Codec, DecodeError, DecodeErrorKind, EncodeError, FORMAT_VERSION};
pub use dispatch::Policy;
pub use dupefilter::{BloomFilter, DupeFilter, DupeFilterConfig, DupeFilterConfigError, PrefixSet};
pub use fingerprint::*;
pub use frontier::{Frontier, FrontierConfig, FrontierError, Lease, Poll, PushOutcome, RequestId};
pub use group::{InvalidGroupKey, InvalidRequest, group_key, host_scope, parse_group_key};
pub use request::{Extras, MAX_SCOPES, Method, Request, ScopeAmount};
pub use scheduling::{PollBatch, Scheduling};
pub use settings::{QueueOrder, SettingsFile, StartOrder};
pub use stats::FrontierStats;
pub use store::{
    Durability, EntryMeta, INLINE_PAYLOAD, MemoryStoreError, Payload, RecoveryVisitor,
    ReferenceStore, Store, VolatileStore,
};

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
