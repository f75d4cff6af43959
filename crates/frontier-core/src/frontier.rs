//! The frontier: push discovered requests, poll the next one that may go out now,
//! acknowledge it when it is done.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use polite_throttle_core::hooks::{HeldBackMonitor, secs_to_duration};
use polite_throttle_core::{
    ConfigError, CrawlDelayDecision, HibernationError, Outcome, QuotaReconcile, ScopeSnapshot,
    Settings, Throttler, Timestamp,
};

use crate::codec::{Codec, DecodeError, EncodeError};
use crate::dispatch::{Dispatcher, Policy, SchedPoll};
use crate::dupefilter::{DupeFilter, DupeFilterConfig, DupeFilterConfigError};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::group::{InvalidGroupKey, InvalidRequest, group_key_inline};
use crate::leases::{LeaseRecord, Leases};
use crate::request::Request;
use crate::settings::{QueueOrder, StartOrder};
use crate::stats::FrontierStats;
use crate::store::{EntryMeta, RecoveryVisitor, Store, VolatileStore};

/// How many requests apart [`Frontier::push_all`]'s prefetch steps run: a host's record
/// is loaded three steps ahead of its push, what the record points to one and two steps
/// ahead.
const PUSH_AHEAD: usize = 4;
/// The pipeline's length (more than the `3 * PUSH_AHEAD` requests in it at once), a
/// power of two.
const PUSH_RING: usize = 16;

/// Options of the frontier itself: its ordering settings and how it schedules, filters
/// and persists (the throttling settings are in [`Settings`]).
///
/// With the `serde` feature, the four ordering settings (`depth_priority`, `depth_limit`,
/// `scheduler_order`, `start_order`) (de)serialise with Scrapy's names; the other options
/// are for code only and keep their defaults. Users write the ordering keys in the same
/// table as the throttler's: read such a table with [`SettingsFile`](crate::SettingsFile).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct FrontierConfig {
    /// `priority -= depth × depth_priority`.
    pub depth_priority: i32,
    /// Requests deeper than this are dropped (0 = no limit).
    pub depth_limit: u32,
    /// Order within a priority for non-start requests.
    pub scheduler_order: QueueOrder,
    /// Order within a priority for start requests.
    pub start_order: StartOrder,
    /// How ready groups are chosen.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub policy: Policy,
    /// How seen fingerprints are remembered.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub dupefilter: DupeFilterConfig,
    /// Save throttle scope states in the store on [`checkpoint`](Frontier::checkpoint) and
    /// restore them on open, so a resumed crawl keeps its backoff and learned rates.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub persist_scope_states: bool,
    /// Hand the states of scopes the throttler evicts to the store, when it keeps them
    /// ([`Store::hibernation`]): memory stays bounded by `throttling_scope_limit` over
    /// any number of hosts, backoffs included. Default: on. Off, evicted states that
    /// still matter for timing stay in memory.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub hibernate_scopes: bool,
}

impl Default for FrontierConfig {
    fn default() -> Self {
        FrontierConfig {
            depth_priority: 0,
            depth_limit: 0,
            scheduler_order: QueueOrder::Lifo,
            start_order: StartOrder::Fifo,
            policy: Policy::ThrottlingAware,
            dupefilter: DupeFilterConfig::Exact,
            persist_scope_states: true,
            hibernate_scopes: true,
        }
    }
}

impl FrontierConfig {
    /// Sets `priority -= depth * depth_priority`.
    #[must_use]
    pub fn depth_priority(mut self, value: i32) -> Self {
        self.depth_priority = value;
        self
    }
    /// Sets the depth beyond which requests are dropped (0 = no limit).
    #[must_use]
    pub fn depth_limit(mut self, value: u32) -> Self {
        self.depth_limit = value;
        self
    }
    /// Sets the order within a priority for non-start requests.
    #[must_use]
    pub fn scheduler_order(mut self, value: QueueOrder) -> Self {
        self.scheduler_order = value;
        self
    }
    /// Sets the order within a priority for start requests.
    #[must_use]
    pub fn start_order(mut self, value: StartOrder) -> Self {
        self.start_order = value;
        self
    }
    /// Sets the scheduling policy.
    #[must_use]
    pub fn policy(mut self, value: Policy) -> Self {
        self.policy = value;
        self
    }
    /// Sets the duplicate filter.
    #[must_use]
    pub fn dupefilter(mut self, value: DupeFilterConfig) -> Self {
        self.dupefilter = value;
        self
    }
    /// Sets whether scope states are saved in the store.
    #[must_use]
    pub fn persist_scope_states(mut self, value: bool) -> Self {
        self.persist_scope_states = value;
        self
    }
    /// Sets whether evicted scope states go to the store.
    #[must_use]
    pub fn hibernate_scopes(mut self, value: bool) -> Self {
        self.hibernate_scopes = value;
        self
    }
}

/// Identifies a queued request: [`PushOutcome::Queued`] returns it, and the [`Lease`]
/// that hands the request out carries it ([`Lease::id`]), so that
/// [`complete`](Frontier::complete) and [`retry`](Frontier::retry) can name it.
///
/// How long an id lasts:
///
/// - In a [`Frontier`] it is the request's sequence number in its store. The id a push
///   returns is the id of every lease on that request, including a redelivery after the
///   store is reopened with the lease unacknowledged.
/// - A **retry changes it**: [`Frontier::retry`] queues the request again under a new id
///   (the next sequence number, which is not returned; the lease that hands the request
///   out again carries it). The old id is then unknown: `complete` or `retry` with it
///   return `false`.
/// - A frontier shared through Redis (`polite-store-redis`) returns the sequence number
///   from a push too, but a lease's id also counts the request's redeliveries (the
///   sequence number plus 2^40 times the redelivery count modulo 64): a lease that expired
///   and went to another worker has a new id, so the worker that lost it cannot end the
///   new one. A retry there also queues the request under a new sequence number.
///
/// [`FrontierError::Corrupt`] names the lease of an undecodable request by this id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A request handed out by [`Frontier::poll`]: send it, then
/// [`complete`](Frontier::complete) or [`retry`](Frontier::retry) it.
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a lease holds throttling slots until it is completed or retried"]
pub struct Lease {
    id: RequestId,
    /// The request to send.
    pub request: Request,
}

impl Lease {
    /// A lease on `request` (for [`Scheduling`](crate::Scheduling) implementations that
    /// hand out leases of their own).
    pub fn new(id: RequestId, request: Request) -> Self {
        Lease { id, request }
    }

    /// The leased request's id (see [`RequestId`] for when it changes).
    pub fn id(&self) -> RequestId {
        self.id
    }
}

/// The answer of [`Frontier::poll`].
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Poll {
    /// Send this request now.
    Ready(Lease),
    /// Nothing may go before this instant (unless a completion frees a scope earlier).
    NotUntil(Timestamp),
    /// Everything queued waits for a completion.
    Blocked,
    /// Nothing is queued.
    Empty,
}

/// What [`Frontier::push`] did with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushOutcome {
    /// Queued (and durable per the store's policy) under this id, which the request's
    /// lease will carry.
    Queued(RequestId),
    /// Already seen (the duplicate filter), dropped.
    Duplicate,
    /// Deeper than `depth_limit`, dropped.
    TooDeep,
}

/// Why a frontier operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum FrontierError<E> {
    /// The store failed.
    Store(E),
    /// The request cannot be accepted (bad URL, scope names, delay, ...).
    InvalidRequest(InvalidRequest),
    /// Invalid settings.
    Config(ConfigError),
    /// Invalid duplicate-filter configuration.
    DupeFilter(DupeFilterConfigError),
    /// A stored request could not be decoded. It stays leased under `lease`: complete
    /// it to drop it, or retry it after repairing the store.
    Corrupt {
        /// The lease holding the undecodable request.
        lease: RequestId,
        /// Why it could not be decoded.
        source: DecodeError,
    },
    /// The store holds a scope group key that does not parse.
    CorruptGroup(InvalidGroupKey),
    /// A request could not be encoded.
    Encode(EncodeError),
    /// The store's keeping of evicted scope states failed (see [`Store::hibernation`]).
    Hibernation(HibernationError),
}

impl<E: fmt::Display> fmt::Display for FrontierError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontierError::Store(e) => write!(f, "store error: {e}"),
            FrontierError::InvalidRequest(e) => e.fmt(f),
            FrontierError::Config(e) => e.fmt(f),
            FrontierError::DupeFilter(e) => e.fmt(f),
            FrontierError::Corrupt { lease, source } => {
                write!(f, "stored request #{}: {source}", lease.0)
            }
            FrontierError::CorruptGroup(e) => write!(f, "corrupted store: {e}"),
            FrontierError::Encode(e) => e.fmt(f),
            FrontierError::Hibernation(e) => e.fmt(f),
        }
    }
}

impl<E: core::error::Error + 'static> core::error::Error for FrontierError<E> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            FrontierError::Store(e) => Some(e),
            FrontierError::Corrupt { source, .. } => Some(source),
            FrontierError::Hibernation(e) => Some(e),
            _ => None,
        }
    }
}

/// The crawl frontier over a [`Store`].
///
/// It owns the [`Throttler`]: a polled request already holds its throttling slots, and
/// its completion feeds backoff.
pub struct Frontier<S: Store = VolatileStore> {
    store: S,
    throttler: Throttler,
    scheduler: Dispatcher<S::Handle>,
    codec: Codec,
    filter: DupeFilter,
    leases: Leases<S::Handle>,
    next_seq: u64,
    stats: FrontierStats,
    config: FrontierConfig,
    depth_priority: i32,
    depth_limit: u32,
    held_back: HeldBackMonitor,
    payload: Vec<u8>,
    key: String,
    /// [`push_all`](Frontier::push_all)'s group keys of the requests in its pipeline, by
    /// position modulo [`PUSH_RING`] (kept from batch to batch, allocated once).
    ahead: Vec<Ahead>,
    /// `key` holds the group key of the request [`push`](Frontier::push) is given (set by
    /// `push_all` for one call).
    keyed: bool,
    fingerprinter: Fingerprinter,
}

/// A request in [`Frontier::push_all`]'s pipeline: its group key, if it has a valid one,
/// and its group, if that exists already.
#[derive(Default)]
struct Ahead {
    key: String,
    valid: bool,
    group: Option<u32>,
}

/// The key of the group `request` joins: its own (see [`group_key`](crate::group_key)),
/// or the unthrottled lane's (empty) for a `dont_throttle` request. Inlined, as
/// [`group_key_inline`] is, for push.
#[inline(always)]
fn request_key(request: &Request, out: &mut String) -> Result<(), InvalidRequest> {
    if request.dont_throttle {
        out.clear();
        Ok(())
    } else {
        group_key_inline(request, out)
    }
}

// The ring holds every request between its look-ahead and its push.
const _: () = assert!(PUSH_RING > 3 * PUSH_AHEAD);

impl<S: Store> fmt::Debug for Frontier<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frontier")
            .field("store", &self.store.kind())
            .field("queued", &self.len())
            .field("leased", &self.leases.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Rebuilds a frontier from what its store replays.
struct Rebuild<'a, H> {
    scheduler: &'a mut Dispatcher<H>,
    codec: &'a mut Codec,
    filter: &'a mut DupeFilter,
    throttler: &'a mut Throttler,
    stats: &'a mut FrontierStats,
    restore_scopes: bool,
    next_seq: u64,
    now: Timestamp,
    error: Option<RebuildError>,
}

enum RebuildError {
    Callback(DecodeError),
    Group(InvalidGroupKey),
}

impl<H> RecoveryVisitor<H> for Rebuild<'_, H> {
    fn callback(&mut self, id: u32, name: &str) {
        if let Err(e) = self.codec.callbacks_mut().restore(id, name) {
            self.error.get_or_insert(RebuildError::Callback(e));
        }
    }

    fn fingerprint(&mut self, fingerprint: &Fingerprint) {
        self.filter.insert(fingerprint);
    }

    fn entry(&mut self, seq: u64, meta: EntryMeta<'_>, handle: H, leased: bool) {
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
        let group = match self.scheduler.group_for(meta.group) {
            Ok(g) => g,
            Err(e) => {
                self.error.get_or_insert(RebuildError::Group(e));
                return;
            }
        };
        if leased {
            self.stats.redelivered += 1;
        }
        self.scheduler.insert(
            group,
            seq,
            handle,
            meta.priority,
            meta.start,
            meta.not_before,
            self.now,
        );
    }

    fn scope_state(&mut self, snapshot: ScopeSnapshot) {
        if self.restore_scopes {
            self.throttler.restore(&snapshot, self.now);
        }
    }

    fn next_seq(&mut self, next: u64) {
        self.next_seq = self.next_seq.max(next);
    }
}

impl Frontier<VolatileStore> {
    /// An in-memory frontier that persists nothing.
    pub fn in_memory(
        settings: Settings,
        now: Timestamp,
    ) -> Result<Self, FrontierError<crate::store::MemoryStoreError>> {
        Frontier::open(
            settings,
            FrontierConfig::default(),
            VolatileStore::new(),
            now,
        )
    }
}

impl<S: Store> Frontier<S> {
    /// Opens a frontier on `store`, replaying what it holds: queued requests in their
    /// order, unacknowledged leases (queued again and counted as redelivered), the
    /// duplicate filter, callback names and, if configured, throttle scope states.
    pub fn open(
        settings: Settings,
        config: FrontierConfig,
        mut store: S,
        now: Timestamp,
    ) -> Result<Self, FrontierError<S::Error>> {
        let mut scheduler =
            Dispatcher::new(config.policy, config.scheduler_order, config.start_order);
        let held_back = HeldBackMonitor::new(settings.delayed_requests_warn_threshold as usize);
        let (depth_priority, depth_limit) = (config.depth_priority, config.depth_limit);
        let mut throttler = Throttler::new(settings, now).map_err(FrontierError::Config)?;
        // Attached before recovery: a hibernated state is newer than a saved live one.
        if config.hibernate_scopes
            && let Some(h) = store
                .hibernation(config.persist_scope_states)
                .map_err(FrontierError::Store)?
        {
            throttler.set_hibernation(h);
        }
        let mut filter = DupeFilter::new(config.dupefilter).map_err(FrontierError::DupeFilter)?;
        let mut codec = Codec::new();
        let mut stats = FrontierStats::new(store.kind());
        let mut rebuild = Rebuild {
            scheduler: &mut scheduler,
            codec: &mut codec,
            filter: &mut filter,
            throttler: &mut throttler,
            stats: &mut stats,
            restore_scopes: config.persist_scope_states,
            next_seq: 0,
            now,
            error: None,
        };
        store.recover(&mut rebuild).map_err(FrontierError::Store)?;
        let next_seq = rebuild.next_seq;
        match rebuild.error {
            Some(RebuildError::Callback(e)) => {
                return Err(FrontierError::Corrupt {
                    lease: RequestId(0),
                    source: e,
                });
            }
            Some(RebuildError::Group(e)) => return Err(FrontierError::CorruptGroup(e)),
            None => {}
        }
        #[cfg(feature = "tracing")]
        if stats.redelivered > 0 {
            tracing::info!(
                redelivered = stats.redelivered,
                "unacknowledged leases queued again"
            );
        }
        Ok(Frontier {
            store,
            throttler,
            scheduler,
            codec,
            filter,
            leases: Leases::new(),
            next_seq,
            stats,
            config,
            depth_priority,
            depth_limit,
            held_back,
            payload: Vec::new(),
            key: String::new(),
            ahead: Vec::new(),
            keyed: false,
            fingerprinter: Fingerprinter::new(),
        })
    }

    /// Queues a request (unless it is a duplicate or too deep). It is durable, with its
    /// fingerprint marked seen, in the same store step.
    pub fn push(
        &mut self,
        request: &Request,
        now: Timestamp,
    ) -> Result<PushOutcome, FrontierError<S::Error>> {
        // Set by push_all when it has put this request's group key in `self.key`.
        let keyed = core::mem::take(&mut self.keyed);
        if self.depth_limit > 0 && request.depth > self.depth_limit {
            self.stats.depth_ignored += 1;
            return Ok(PushOutcome::TooDeep);
        }
        let not_before = match request.delay {
            None => None,
            Some(d) if d.is_finite() && d >= 0.0 => Some(now + secs_to_duration(d)),
            Some(d) => {
                return Err(FrontierError::InvalidRequest(InvalidRequest::new(
                    &request.url,
                    alloc::format!("delay must be a finite number of seconds >= 0, got {d}"),
                )));
            }
        };
        let mut key = core::mem::take(&mut self.key);
        if !keyed && let Err(e) = request_key(request, &mut key) {
            self.key = key;
            return Err(FrontierError::InvalidRequest(e));
        }
        let fp = if request.dont_filter || matches!(self.filter, DupeFilter::Disabled) {
            None
        } else {
            let fp = self
                .fingerprinter
                .fingerprint(request.method.as_str(), &request.url, request.body_bytes())
                .map_err(|e| {
                    FrontierError::InvalidRequest(InvalidRequest::new(
                        &request.url,
                        alloc::format!("{e}"),
                    ))
                });
            match fp {
                Ok(fp) if self.filter.contains(&fp) => {
                    self.key = key;
                    self.stats.filtered += 1;
                    return Ok(PushOutcome::Duplicate);
                }
                Ok(fp) => Some(fp),
                Err(e) => {
                    self.key = key;
                    return Err(e);
                }
            }
        };
        let result = self.store_new(request, &key, fp.as_ref(), not_before, now);
        self.key = key;
        let seq = result?;
        if let Some(fp) = &fp {
            self.filter.insert(fp);
        }
        self.stats.enqueued += 1;
        self.stats.depth_max = self.stats.depth_max.max(request.depth);
        self.held_back.update(self.scheduler.delayed());
        Ok(PushOutcome::Queued(RequestId(seq)))
    }

    /// The priority `request` is queued at: its own, lowered by `depth_priority` per level
    /// of depth.
    fn priority_of(&self, request: &Request) -> i32 {
        request
            .priority
            .saturating_sub((request.depth as i32).saturating_mul(self.depth_priority))
    }

    /// Queues many requests, in order, as [`push`](Self::push) one after the other would
    /// (stopping at the first error, with the requests before it queued), and faster: while
    /// it queues one request it starts loading, into the CPU cache, what the pushes a few
    /// requests ahead will read (their host's record and the end of the queue they join).
    /// Over many hosts a push mostly waits for memory, so batches of links, as a page's
    /// links come, go in at a fraction of the time per request.
    pub fn push_all(
        &mut self,
        requests: &[Request],
        now: Timestamp,
    ) -> Result<Vec<PushOutcome>, FrontierError<S::Error>> {
        let mut out = Vec::with_capacity(requests.len());
        let mut ahead = core::mem::take(&mut self.ahead);
        ahead.resize_with(PUSH_RING, Ahead::default);
        let result = self.push_pipelined(requests, &mut ahead, &mut out, now);
        self.ahead = ahead;
        result.map(|()| out)
    }

    /// [`push_all`](Self::push_all)'s loop: request `i + 3 * PUSH_AHEAD` gets its group
    /// key and group and its host's record starts loading; `i + 2 * PUSH_AHEAD` and
    /// `i + PUSH_AHEAD` take the two steps of [`Dispatcher::prefetch_push`]; request `i`
    /// is pushed with its key computed already.
    fn push_pipelined(
        &mut self,
        requests: &[Request],
        ahead: &mut [Ahead],
        out: &mut Vec<PushOutcome>,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        let slot = |i: usize| i % PUSH_RING;
        for (i, request) in requests.iter().enumerate().take(3 * PUSH_AHEAD) {
            self.look_ahead(request, &mut ahead[slot(i)]);
        }
        for (i, request) in requests.iter().enumerate() {
            let first = i + 3 * PUSH_AHEAD;
            if let Some(r) = requests.get(first) {
                self.look_ahead(r, &mut ahead[slot(first)]);
            }
            for (at, second) in [(i + 2 * PUSH_AHEAD, false), (i + PUSH_AHEAD, true)] {
                if let (Some(r), Some(g)) = (requests.get(at), ahead[slot(at)].group) {
                    self.scheduler
                        .prefetch_push(g, self.priority_of(r), r.start, second);
                }
            }
            // The key goes to `push` and its buffer comes back to the ring.
            let a = &mut ahead[slot(i)];
            core::mem::swap(&mut self.key, &mut a.key);
            self.keyed = a.valid;
            let result = self.push(request, now);
            self.keyed = false;
            core::mem::swap(&mut self.key, &mut a.key);
            out.push(result?);
        }
        Ok(())
    }

    /// Computes `request`'s group key into `a`, finds its group if it exists and starts
    /// loading the group's record.
    fn look_ahead(&self, request: &Request, a: &mut Ahead) {
        a.valid = request_key(request, &mut a.key).is_ok();
        a.group = if a.valid {
            self.scheduler.group_of(&a.key)
        } else {
            None
        };
        if let Some(g) = a.group {
            self.scheduler.prefetch_group(g);
        }
    }

    fn store_new(
        &mut self,
        request: &Request,
        key: &str,
        fp: Option<&Fingerprint>,
        not_before: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<u64, FrontierError<S::Error>> {
        let group = self
            .scheduler
            .group_for(key)
            .map_err(FrontierError::CorruptGroup)?;
        let priority = self.priority_of(request);
        self.payload.clear();
        let host = elidable_host(request, key);
        if let Some((id, name)) = self
            .codec
            .encode(request, host, &mut self.payload)
            .map_err(FrontierError::Encode)?
        {
            self.store
                .put_callback(id, name)
                .map_err(FrontierError::Store)?;
        }
        let seq = self.next_seq;
        let meta = EntryMeta {
            group: key,
            priority,
            start: request.start,
            not_before,
        };
        let handle = self
            .store
            .push(seq, &meta, &self.payload, fp)
            .map_err(FrontierError::Store)?;
        self.next_seq += 1;
        self.scheduler
            .insert(group, seq, handle, priority, request.start, not_before, now);
        Ok(seq)
    }

    /// The next request that may go out now, leased; or when to ask again.
    pub fn poll(&mut self, now: Timestamp) -> Result<Poll, FrontierError<S::Error>> {
        let (seq, group, record) =
            match self
                .scheduler
                .poll(&mut self.throttler, &mut self.leases, now, true)
            {
                SchedPoll::Ready { seq, group, record } => (seq, group, record),
                SchedPoll::NotUntil(t) => return Ok(Poll::NotUntil(t)),
                SchedPoll::Blocked => return Ok(Poll::Blocked),
                SchedPoll::Empty => return Ok(Poll::Empty),
                SchedPoll::Peeked { .. } => unreachable!("a reserving poll never peeks"),
            };
        self.stats.dequeued += 1;
        self.stats.leased += 1;
        if S::PREFETCH
            && self.store.wants_prefetch()
            && let Some((seq, handle)) = self.scheduler.upcoming_head()
        {
            self.store.prefetch(seq, handle);
        }
        let decoded = match self.store.load(seq, &record.handle, &mut self.payload) {
            Err(e) => Err(FrontierError::Store(e)),
            Ok(bytes) => self
                .codec
                .decode_plain_host(bytes, self.scheduler.plain_key(group))
                .map_err(|source| FrontierError::Corrupt {
                    lease: RequestId(seq),
                    source,
                }),
        };
        // The request is leased even if it cannot be read: completing it drops it.
        let leased = self.store.lease(seq, &record.handle);
        let request = decoded?;
        record.start = request.start;
        record.dont_track = request.dont_track;
        leased.map_err(FrontierError::Store)?;
        Ok(Poll::Ready(Lease {
            id: RequestId(seq),
            request,
        }))
    }

    /// The request a [`poll`](Self::poll) at `now` would hand out, without leasing it.
    pub fn peek(&mut self, now: Timestamp) -> Result<Option<Request>, FrontierError<S::Error>> {
        let group = match self
            .scheduler
            .poll(&mut self.throttler, &mut self.leases, now, false)
        {
            SchedPoll::Peeked { group, .. } => group,
            _ => return Ok(None),
        };
        let (seq, handle) = self.scheduler.peek_head(group);
        let bytes = self
            .store
            .load(seq, handle, &mut self.payload)
            .map_err(FrontierError::Store)?;
        self.codec
            .decode_plain_host(bytes, self.scheduler.plain_key(group))
            .map(Some)
            .map_err(|source| FrontierError::Corrupt {
                lease: RequestId(seq),
                source,
            })
    }

    /// Acknowledges a leased request with how it ended: its throttling slots are freed,
    /// the outcome feeds backoff, and the store forgets it. Returns `false` for a lease
    /// that is unknown or already ended.
    pub fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool, FrontierError<S::Error>> {
        let Some(rec) = self.leases.remove(lease.0) else {
            return Ok(false);
        };
        self.release(&rec, outcome, now);
        self.stats.acked += 1;
        self.store
            .ack(lease.0, rec.handle)
            .map_err(FrontierError::Store)?;
        Ok(true)
    }

    /// Puts a leased request back in the queue (after its outcome fed backoff), with its
    /// priority raised by `priority_adjust` (Scrapy's retries use -1). It skips the
    /// duplicate filter. Returns `false` for a lease that is unknown or already ended.
    pub fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool, FrontierError<S::Error>> {
        let Some(rec) = self.leases.remove(lease.0) else {
            return Ok(false);
        };
        // Releasing the lease frees its group when nothing else is queued or in flight
        // there: keep the key and look the group up again (recreating it if needed).
        let mut key = core::mem::take(&mut self.key);
        key.clear();
        key.push_str(self.scheduler.group_key(rec.group));
        self.release(&rec, outcome, now);
        let result = self.requeue(lease, rec, &key, priority_adjust, now);
        self.key = key;
        result?;
        Ok(true)
    }

    /// The second half of [`retry`](Self::retry): queue the request again in the group
    /// of `key`.
    fn requeue(
        &mut self,
        lease: RequestId,
        rec: LeaseRecord<S::Handle>,
        key: &str,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        let group = self
            .scheduler
            .group_for(key)
            .map_err(FrontierError::CorruptGroup)?;
        let new_seq = self.next_seq;
        self.next_seq += 1;
        let priority = rec.priority.saturating_add(priority_adjust);
        let meta = EntryMeta {
            group: key,
            priority,
            start: rec.start,
            not_before: None,
        };
        let handle = self
            .store
            .requeue(lease.0, rec.handle, new_seq, &meta)
            .map_err(FrontierError::Store)?;
        self.scheduler
            .insert(group, new_seq, handle, priority, rec.start, None, now);
        self.stats.retried += 1;
        self.stats.enqueued += 1;
        Ok(())
    }

    fn release(&mut self, rec: &LeaseRecord<S::Handle>, outcome: &Outcome<'_>, now: Timestamp) {
        let outcome = if rec.dont_track {
            &Outcome::Cancelled
        } else {
            outcome
        };
        let load = self.throttler.release_and_load(rec.permit, outcome, now);
        self.scheduler
            .lease_ended(rec.group, load, &mut self.throttler, now);
    }

    /// When to poll again at the latest if nothing completes: the next scope timer (a
    /// delay or quota window ending, or a rampup boundary that may raise a full scope's
    /// concurrency) or delayed request.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.scheduler.next_event()
    }

    /// Requests queued (not leased), including ones held by their own delay.
    pub fn len(&self) -> usize {
        self.scheduler.queued() + self.scheduler.delayed()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Leases not yet completed or retried.
    pub fn in_flight(&self) -> usize {
        self.leases.len()
    }

    /// Scope groups in memory.
    pub fn groups(&self) -> usize {
        self.scheduler.groups()
    }

    /// Counters with Scrapy's names.
    pub fn stats(&self) -> &FrontierStats {
        &self.stats
    }

    /// The throttler (read-only; use the frontier's methods to change scopes, so parked
    /// requests are looked at again).
    pub fn throttler(&self) -> &Throttler {
        &self.throttler
    }

    /// The duplicate filter.
    pub fn dupefilter(&self) -> &DupeFilter {
        &self.filter
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The frontier's options.
    pub fn config(&self) -> &FrontierConfig {
        &self.config
    }

    /// See [`Throttler::delay_scope`].
    pub fn delay_scope(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        self.throttler
            .delay_scope(scope, secs, now)
            .map_err(FrontierError::Config)
    }

    /// See [`Throttler::handle_crawl_delay`].
    pub fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision, FrontierError<S::Error>> {
        self.throttler
            .handle_crawl_delay(scope, secs, now)
            .map_err(FrontierError::Config)
    }

    /// See [`Throttler::set_scope_delay`]; parked requests are looked at again.
    pub fn set_scope_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        self.change_scope(scope, now, |t| t.set_scope_delay(scope, secs, now))
    }

    /// See [`Throttler::set_scope_concurrency`]; parked requests are looked at again.
    pub fn set_scope_concurrency(
        &mut self,
        scope: &str,
        concurrency: u32,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        self.change_scope(scope, now, |t| {
            t.set_scope_concurrency(scope, concurrency, now)
        })
    }

    /// See [`Throttler::reconcile_quota`]; parked requests are looked at again.
    pub fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<(), FrontierError<S::Error>> {
        self.change_scope(scope, now, |t| t.reconcile_quota(scope, how, now))
    }

    /// Applies a live change to `scope` and lets its parked requests look again.
    fn change_scope(
        &mut self,
        scope: &str,
        now: Timestamp,
        change: impl FnOnce(&mut Throttler) -> Result<(), ConfigError>,
    ) -> Result<(), FrontierError<S::Error>> {
        change(&mut self.throttler).map_err(FrontierError::Config)?;
        self.scheduler
            .scope_changed(scope, &mut self.throttler, now);
        Ok(())
    }

    /// Marks fingerprints seen (e.g. from a Scrapy `requests.seen` file, see
    /// [`parse_seen_file`](crate::parse_seen_file)), in the filter and the store.
    pub fn import_seen(
        &mut self,
        fingerprints: &[Fingerprint],
    ) -> Result<usize, FrontierError<S::Error>> {
        self.store
            .add_fingerprints(fingerprints)
            .map_err(FrontierError::Store)?;
        Ok(fingerprints
            .iter()
            .filter(|fp| self.filter.insert(fp))
            .count())
    }

    /// Makes every queue change so far durable (one store flush) without saving scope
    /// states: cheap enough to call after each completion, so that a crash repeats only
    /// the requests that were in flight. [`checkpoint`](Self::checkpoint) also saves
    /// scope states.
    pub fn flush(&mut self) -> Result<(), FrontierError<S::Error>> {
        self.store.flush().map_err(FrontierError::Store)?;
        self.throttler
            .flush_hibernation()
            .map_err(FrontierError::Hibernation)
    }

    /// [`flush`](Self::flush)es and saves the throttle's learned scope states in the
    /// store (if [`FrontierConfig::persist_scope_states`]), so a reopened frontier keeps
    /// its backoff and learned rates.
    pub fn checkpoint(&mut self) -> Result<(), FrontierError<S::Error>> {
        if self.config.persist_scope_states {
            let states: Vec<ScopeSnapshot> = self.throttler.snapshots().collect();
            self.store
                .save_scope_states(&states)
                .map_err(FrontierError::Store)?;
        }
        self.flush()
    }

    /// [`checkpoint`](Self::checkpoint)s and hands the store back (to reopen it later).
    /// Leases still out are not acknowledged: a frontier reopened on the store delivers
    /// them again.
    pub fn close(mut self) -> Result<S, FrontierError<S::Error>> {
        self.checkpoint()?;
        Ok(self.store)
    }

    /// Hands the store back without flushing, as a crash would leave it (tests).
    #[cfg(feature = "testing")]
    pub fn abandon(self) -> S {
        self.store
    }
}

/// The host to leave out of a stored record: its group key when the group is the URL's
/// own host (no explicit scopes).
fn elidable_host<'k>(request: &Request, key: &'k str) -> Option<&'k str> {
    let explicit = request.scopes.as_ref().is_some_and(|s| !s.is_empty());
    (!explicit && !request.dont_throttle).then_some(key)
}

#[cfg(test)]
#[allow(dead_code)]
fn frontier_is_send<S: Store + Send>(f: Frontier<S>) -> impl Send
where
    S::Handle: Send,
{
    f
}
