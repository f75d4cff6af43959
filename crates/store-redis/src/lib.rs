//! # polite-store-redis
//!
//! One crawl frontier and one politeness budget shared by a fleet of workers through
//! Redis. Workers on any number of machines open the same crawl and run the usual loop:
//! [`push`](RedisFrontier::push), [`poll(now)`](RedisFrontier::poll),
//! [`complete`](RedisFrontier::complete) or [`retry`](RedisFrontier::retry). Every decision
//! runs in one server-side Lua script (`EVALSHA`, reloaded after `NOSCRIPT`), atomically:
//!
//! - the duplicate check and the enqueue (binary 64-bit fingerprints in a set, or a Bloom
//!   filter whose bits are checked and set in the same call);
//! - the choice of the next request: highest priority among the scope groups that may
//!   send now, ties to the least loaded and then round-robin, with every scope's delay,
//!   concurrency, hard backoff and quota checked and reserved all-or-nothing, for all
//!   workers together;
//! - the lease, with a visibility timeout: a worker that dies loses nothing, its leases
//!   are delivered again and its concurrency slots come back when they expire;
//! - the completion, which feeds backoff, recovery, header delays and rampup.
//!
//! The script is a port of `polite-throttle-core` and `polite-frontier-core`'s scheduler: the same
//! timeline gives the same decisions as the in-process [`Frontier`](polite_frontier_core::Frontier)
//! (checked step by step, to the nanosecond and jitter included, by this crate's
//! conformance tests). It is loaded once per server as a Redis 7 function library
//! (`FCALL`), or as a cached script (`EVALSHA`, [`ScriptMode::Eval`]). It implements
//! [`Scheduling`](polite_frontier_core::Scheduling), so the runtime drivers drive it unchanged.
//!
//! ```no_run
//! use polite_frontier_core::{Poll, Request};
//! use polite_store_redis::{RedisConfig, RedisFrontier, TimeSource};
//! use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};
//!
//! let settings = Settings::default().with_scope("example.com", ScopeConfig::new().delay(2.0));
//! let config = RedisConfig::default().time(TimeSource::Server);
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
//! each operation stays atomic there; a sharded crawl's partition `k` uses `{name:k}:`). The layout (version 2) keeps per-host structures
//! small: records are fixed-layout binary strings, and they are bucketed into hashes and
//! sorted sets small enough that Redis keeps each one as a compact listpack under its
//! default `hash-max-listpack-*` / `zset-max-listpack-*` limits (no server configuration
//! needed):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `cfg` | hash | layout version, settings, their digest, the crawl's epoch (server time) |
//! | `c`, `st` | string, hash | counters (packed doubles: sequence, queued, in flight, jitter RNG state...); stats |
//! | `np` | hash | each scope's resolved parameters (or a pointer to its kind's defaults) |
//! | `N:<b>` | hash | one binary record per name in use, as a group key, a scheduler scope or both (a host usually is both): ~45 bytes with its field; buckets grow by linear hashing (~48 records each) |
//! | `Q:<g/16>`, `q:<g>` | sorted set | queued requests of 16 groups, each under its own score (group number % 16); a group that would push its bucket past 120 requests gets a key of its own |
//! | `C`, `C\|<sep>` | sorted sets | candidates (groups that may send), as a chunked ordered set: leaves of at most 64 members under an index of separators |
//! | `k:<scope>`, `k:<scope>\|<sep>` | sorted sets | groups parked on a scope shared by several groups (same structure) |
//! | `E`, `E\|<sep>` | sorted sets | scope timers and delayed requests, by time (same structure) |
//! | `gfree` | list | group numbers free for reuse |
//! | `x` | sorted set | scratch space inside one call (a push sorts its changes to the chunked sets there); never left behind |
//! | `dr` | hash | requests held by their own delay |
//! | `t`, `ov`, `ti` | hash, hash, sorted set | throttle scope states (binary); live changes and Crawl-delays; unused states by last use (idle eviction) |
//! | `L`, `lx` | hash, sorted set | leases (binary records); their expiry times, and those of standalone permits (members `p<id>`) |
//! | `pm` | hash | standalone permits: id → msgpack record (the scopes held and their kinds) |
//! | `df` | set | binary 64-bit fingerprints seen (exact duplicate filter) |
//! | `bf:<n>` | string | Bloom filter bits, 2^30 per string (Bloom duplicate filter) |
//! | `cbn`, `cbi` | hash | callback names ↔ numbers |
//!
//! Outside the keys, the script keeps the bucket hashes of up to 32,768 recently used
//! names in the Lua functions' memory (`used_memory_vm_functions`, at most ~5 MB, shared
//! by every crawl on the server; with `ScriptMode::Eval` they last one call): they
//! depend on the name alone, so nothing there can go stale.
//!
//! A queued request is polite-frontier-core's `postcard` record (the host left out when it is
//! the group's) behind its order (1 byte for priorities -31..32), its sequence number
//! (a length byte and 1-6 bytes; descending for LIFO order) and a flags byte: the
//! sorted set orders a group's requests by priority, start class and sequence. At 5
//! requests per host a queued request costs about its payload + 38 bytes of Redis
//! memory, the host's structures included (`redis-bench` prints where they go). A crawl
//! written by layout 1 (a sorted set, a msgpack record and index entries per host) is
//! refused with [`RedisStoreError::Version`]: drain it with the version that wrote it.
//!
//! ## Time
//!
//! [`TimeSource::Caller`]: each call's `now` (a fake clock in tests). [`TimeSource::Server`]:
//! the server's `TIME`, counted from the crawl's creation, so workers with skewed clocks
//! agree; instants returned are mapped onto the caller's `now` (its own clock) so a driver
//! can sleep on them. Times are nanoseconds in doubles inside the script: exact for 104
//! days from the crawl's epoch.
//!
//! ## N workers on M machines
//!
//! Every worker opens the same crawl name on the same server (or the same placement and
//! partition count) with the same [`Settings`](polite_throttle_core::Settings)
//! (the first one stores them; a worker with other settings is refused) and runs its own
//! loop or driver (`polite_runtime_tokio::DriverFor<RedisFrontier>`, any number of tasks per
//! process). Use [`TimeSource::Server`] in production. A worker that dies loses
//! nothing: its leases expire after [`RedisConfig::lease_timeout`] (keep it above your
//! slowest fetch, or call [`RedisFrontier::extend`]) and go to the others, and the
//! concurrency slots they held come back. Completions by one worker do not wake the
//! others: a worker that found everything blocked looks again after
//! [`RedisConfig::recheck`] (the drivers do this through
//! [`poll_timeout`](polite_frontier_core::Scheduling::poll_timeout)).
//!
//! ## Standalone permits
//!
//! A process with no queue (an HTTP API client, a tower layer) shares the crawl's
//! politeness budget through [`RedisFrontier::try_acquire`] and
//! [`RedisFrontier::release`]: the admission and the feedback of `polite-throttle-core`'s
//! `Throttler::try_acquire` / `release` (delay, jitter, concurrency, quotas, backoff,
//! header delays, spent budgets, the global `concurrent_requests` cap), applied to the
//! same scope states as the crawl's leases. A permit's slots count against the crawl's
//! workers and the other way round; releasing one wakes the crawl's groups parked on its
//! scopes. A permit not released within [`RedisConfig::lease_timeout`] expires like a
//! lease (freed with a cancelled outcome, by the next poll, acquire or release that finds
//! it due); releasing it then returns `false`. Permits count in
//! [`RedisInfo::in_flight`] and [`RedisInfo::permits`], not in
//! [`RedisFrontier::in_flight`] (leases).
//!
//! ## One crawl over several servers: sharding
//!
//! One Redis runs one script at a time, so one crawl on one server tops out at the
//! server's time per request (see `docs/performance.md`). [`ShardedRedisFrontier`] splits
//! a crawl into N partitions, each a complete frontier under its own hash tag
//! (`{name:k}:*`), placed on a list of independent servers ([`Placement::Servers`]:
//! partition `k` on server `k % servers`) or on a Redis Cluster ([`Placement::Cluster`],
//! feature `cluster`: the client follows `MOVED` and `ASK`, so each partition lives on
//! whichever primary owns its slot).
//!
//! - A request goes to the partition of its scopes: for a plain request, a stable hash of
//!   its host. A host's queue, duplicate-filter entries and politeness state therefore
//!   live in exactly one partition, and every rule stays exact for it.
//! - A scope shared by requests of several hosts (a quota across an API's hosts) must live
//!   in one partition: pin it, and the hosts that use it, with [`ShardConfig::pin`]. A
//!   request whose scopes live in different partitions is refused at push
//!   ([`FrontierError::InvalidRequest`](polite_frontier_core::FrontierError::InvalidRequest),
//!   naming the scopes and their partitions).
//! - The global `concurrent_requests` cap and the duplicate filter hold per partition.
//! - Workers poll the partitions in turn (none starves; one that said "nothing before t"
//!   costs nothing until then or [`RedisConfig::recheck`]); lease ids carry their
//!   partition; [`ShardedRedisFrontier::info`] sums the partitions' counters.
//! - The partition count is stored with the crawl: opening it with another count, or a
//!   sharded crawl unsharded, is [`RedisStoreError::Partitions`].
//! - [`move_partition`] (feature `cluster`) moves a partition to another primary while
//!   workers run, in one atomic step. Do not move a partition's slot with `redis-cli
//!   --cluster reshard`: it moves keys in batches, and a script that runs between two
//!   batches finds half its keys gone.
//!
//! [`ShardedRedisFrontier`] implements [`Scheduling`](polite_frontier_core::Scheduling):
//! the drivers run it as they run one [`RedisFrontier`].
//!
//! ## Failover and restarts
//!
//! Each operation is one atomic script call: a worker never sees half of one. After a
//! restart or a failover the server may have lost the code (`NOSCRIPT`, "Function not
//! found"): it is loaded again and the call repeated. A lost connection is an error for
//! the call in progress and is made again on the next call; a lease taken by a call whose
//! answer was lost expires and is delivered again. What a failover can lose is what Redis
//! replication loses: writes acknowledged by the old primary but not yet copied to the
//! new one (replication is asynchronous; this crate does not issue `WAIT`). Such a lost
//! push is a lost request, a lost completion a request fetched twice, a lost lease or
//! send a slot or spacing briefly ignored. Run the server with AOF (`appendfsync
//! everysec` or `always`) and `min-replicas-to-write` to bound that window.
//!
//! ## Errors
//!
//! Damaged values, keys of the wrong type, another layout version, settings that differ
//! from the crawl's, and connection failures are [`RedisStoreError`]s inside
//! [`FrontierError::Store`](polite_frontier_core::FrontierError::Store); a payload that does not
//! decode is [`FrontierError::Corrupt`](polite_frontier_core::FrontierError::Corrupt) naming its
//! lease (complete it to drop it). Nothing panics on bad data. A script error midway
//! through an operation (a damaged record found late) leaves the writes made before it:
//! Redis does not roll scripts back.
//!
//! ## What differs from the in-process frontier
//!
//! - Leases expire ([`RedisConfig::lease_timeout`]) and are delivered again while the
//!   crawl runs; a lease id then carries the redelivery count, so the old holder's late
//!   acknowledgement is refused.
//! - Scope states no group uses any more are evicted after `throttling_scope_max_idle`
//!   when nothing about them matters for the future (as in-process; a few are examined
//!   per poll, so the moment can differ from the in-process throttler's, which matters
//!   only for what rampup learned). `throttling_scope_limit` is not enforced: Redis keeps
//!   every state that is not idle.
//! - Only [`Policy::ThrottlingAware`](polite_frontier_core::Policy) is offered. The duplicate
//!   filter is exact (8 bytes per fingerprint in a Redis set, ~51 bytes of Redis memory),
//!   a Bloom filter with polite-frontier-core's sizing and bit positions (~1.2 bytes per URL at
//!   1%; the same false positives as in-process), or none.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod frontier;
mod params;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::RedisStoreError;
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use frontier::move_partition;
pub use frontier::{
    Placement, RedisConfig, RedisFrontier, RedisInfo, RedisPermit, RedisScopeStats, ScriptMode,
    ShardConfig, ShardedRedisFrontier, TimeSource,
};

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
