//! The throttler: a bounded map of scope states, all-or-nothing admission over several
//! scopes, release with outcomes, FIFO waiters, and the programmatic controls.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::hash::BuildHasher;
use core::time::Duration;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

use crate::config::{ConfigError, ScopeConfig, Settings};
use crate::lru::Lru;
use crate::outcome::Outcome;
use crate::rng::JitterRng;
use crate::scope::{Gate, ScopeKind, ScopeParams, ScopeSnapshot, ScopeState, ScopeStats};
use crate::time::{Monotonic, Timestamp, secs_to_duration};
use crate::waiters::Waiters;

/// How many scope states one operation may examine for eviction, beyond those it created.
const EVICTION_BUDGET: usize = 2;

/// One scope a request needs, and how much of its quota the request consumes.
///
/// A plain `&str` converts into a use with amount 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScopeUse<'a> {
    /// The scope's name (a host, an IP, `"api"`, `"cost"`, ...).
    pub scope: &'a str,
    /// Quota consumed if the scope has a quota. Negative or NaN amounts count as 0.
    pub amount: f64,
}

impl<'a> ScopeUse<'a> {
    /// A use of `scope` consuming one unit of its quota.
    pub const fn new(scope: &'a str) -> Self {
        ScopeUse { scope, amount: 1.0 }
    }

    /// A use of `scope` consuming `amount` of its quota.
    pub const fn with_amount(scope: &'a str, amount: f64) -> Self {
        ScopeUse { scope, amount }
    }
}

impl<'a> From<&'a str> for ScopeUse<'a> {
    fn from(scope: &'a str) -> Self {
        ScopeUse::new(scope)
    }
}

impl<'a> From<(&'a str, f64)> for ScopeUse<'a> {
    fn from((scope, amount): (&'a str, f64)) -> Self {
        ScopeUse::with_amount(scope, amount)
    }
}

/// Where a scope's state lives in one throttler: remembered by a caller (a scheduler) so
/// that the next call for that scope skips the name lookup. A hint goes stale when the
/// state is evicted; that is detected and the hint refreshed. The default hint is empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScopeHint {
    slot: u32,
    generation: u32,
}

/// Per-request switches that change how the throttler treats it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RequestFlags {
    /// Its outcome never triggers backoff (login flows, one-off calls).
    pub dont_track: bool,
    /// Bypasses every gate, and is not counted anywhere.
    pub dont_throttle: bool,
}

impl RequestFlags {
    /// Sets `dont_track`.
    #[must_use]
    pub const fn dont_track(mut self, yes: bool) -> Self {
        self.dont_track = yes;
        self
    }

    /// Sets `dont_throttle`.
    #[must_use]
    pub const fn dont_throttle(mut self, yes: bool) -> Self {
        self.dont_throttle = yes;
        self
    }
}

/// Why a request cannot go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotReady {
    /// Delays, hard backoff or a quota window hold it, or a full scope whose rampup may
    /// raise its concurrency then: try again at this instant (the earliest at which every
    /// scope could allow it; a completion may free a full scope sooner).
    NotUntil(Timestamp),
    /// A concurrency limit (of a scope, or the global one) is reached that only a
    /// completion can lift, or earlier waiters are queued on a scope: try again after a
    /// completion or a wake-up.
    Blocked,
}

/// A reservation on every scope of one request. Hand it back with
/// [`Throttler::release`] when the request finishes.
///
/// It is a small copyable handle: releasing it twice is harmless.
#[must_use = "a permit holds concurrency slots until it is released"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Permit {
    slot: u32,
    generation: u32,
}

/// A place in the FIFO queues of a request's scopes (see
/// [`Throttler::try_acquire_or_enqueue`]). Tickets are handed out in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub(crate) u64);

impl Ticket {
    /// The ticket's number (increasing with arrival order).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The state of a queued request after [`Throttler::poll_ticket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum TicketPoll {
    /// Its turn came and every scope allowed it: the ticket is used up.
    Ready(Permit),
    /// Still waiting: `NotUntil(t)` means a wake-up is scheduled for `t`
    /// ([`Throttler::poll_timeout`]); `Blocked` means it will be woken by a completion or
    /// when the waiters ahead of it leave.
    Waiting(NotReady),
    /// No such ticket (already admitted or cancelled).
    Unknown,
}

/// What a reported robots.txt Crawl-delay did.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum CrawlDelayDecision {
    /// The scope now waits at least `delay` seconds between sends, one at a time (or
    /// `concurrency` at a time if its `min_concurrency` is higher).
    Applied {
        /// The new base delay in seconds.
        delay: f64,
        /// The new concurrency limit.
        concurrency: u32,
    },
    /// The scope's configuration is more aggressive and was kept; `warned` tells whether
    /// this call emitted the (one-time) warning.
    KeptConfig {
        /// Whether this call logged the warning.
        warned: bool,
    },
    /// `throttling_robotstxt_obey` is off.
    Ignored,
}

/// A correction of a scope's quota consumption after the fact.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuotaReconcile {
    /// Add this (possibly negative) amount to what was consumed.
    Consumed(f64),
    /// The server says this much is left: consumed = quota − remaining.
    Remaining(f64),
}

/// Where evicted scope states go instead of being forgotten, and come back from.
///
/// With a hibernation store attached, a long crawl over millions of hosts keeps what it
/// learned about hosts it revisits: rampup rates, Crawl-delays, live configuration and
/// counters. (Scopes still backing off are never evicted.)
pub trait ScopeHibernation {
    /// Keeps the state of an evicted scope.
    fn hibernate(&mut self, snapshot: ScopeSnapshot);
    /// Returns (and forgets) the kept state of `scope`, if any.
    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot>;
}

/// A [`ScopeHibernation`] that keeps snapshots in memory (tests, small crawls).
///
/// With a hibernation store attached, evicted scopes take their learned state (rampup
/// rates, counters) and their live configuration and Crawl-delay with them, so memory
/// stays bounded by `throttling_scope_limit`. Without one, live changes and Crawl-delays
/// are remembered in a small side table (about 60 bytes per scope they were applied to)
/// so an evicted scope never forgets them.
#[derive(Clone, Debug, Default)]
pub struct MemoryHibernation {
    /// Hibernated snapshots by scope name.
    pub snapshots: BTreeMap<String, ScopeSnapshot>,
}

impl ScopeHibernation for MemoryHibernation {
    fn hibernate(&mut self, snapshot: ScopeSnapshot) {
        self.snapshots.insert(snapshot.scope.clone(), snapshot);
    }
    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot> {
        self.snapshots.remove(scope)
    }
}

/// Counters of the throttler as a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottlerStats {
    /// Scope states in memory.
    pub live_scopes: usize,
    /// Permits not yet released (counted ones: `dont_throttle` permits are not).
    pub in_flight: u32,
    /// Queued waiters.
    pub waiting: usize,
    /// Scope states created (including re-creations after eviction).
    pub created: u64,
    /// Scope states evicted.
    pub evicted: u64,
    /// Evicted states handed to the hibernation store.
    pub hibernated: u64,
    /// States brought back from the hibernation store.
    pub woken: u64,
}

/// Emits one warning when too many requests are held back; re-arms once none are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldBackMonitor {
    threshold: usize,
    warned: bool,
}

impl HeldBackMonitor {
    /// Warns when `threshold` requests are held back (0 disables the warning).
    pub fn new(threshold: usize) -> Self {
        HeldBackMonitor {
            threshold,
            warned: false,
        }
    }

    /// Reports the number held back now; returns `true` if this call warned.
    pub fn update(&mut self, held_back: usize) -> bool {
        if held_back == 0 {
            self.warned = false;
            return false;
        }
        if self.warned || self.threshold == 0 || held_back < self.threshold {
            return false;
        }
        self.warned = true;
        event!(
            warn,
            held_back,
            threshold = self.threshold,
            "requests held back by throttling reached delayed_requests_warn_threshold; \
             check the throttling settings"
        );
        true
    }
}

/// Live changes and Crawl-delay results that must outlive an evicted scope state.
#[derive(Clone, Copy, Debug, Default)]
struct Override {
    base_delay: Option<f64>,
    concurrency: Option<u32>,
    robots_delay: Option<f64>,
    robots_warned: bool,
}

impl Override {
    fn from_snapshot(s: &ScopeSnapshot) -> Option<Self> {
        let ov = Override {
            base_delay: s.set_delay.filter(|d| d.is_finite() && *d >= 0.0),
            concurrency: s.set_concurrency,
            robots_delay: s.robots_delay.filter(|d| d.is_finite() && *d >= 0.0),
            robots_warned: s.robots_warned,
        };
        (ov.base_delay.is_some()
            || ov.concurrency.is_some()
            || ov.robots_delay.is_some()
            || ov.robots_warned)
            .then_some(ov)
    }

    fn fill(&self, s: &mut ScopeSnapshot) {
        s.set_delay = self.base_delay;
        s.set_concurrency = self.concurrency;
        s.robots_delay = self.robots_delay;
        s.robots_warned = self.robots_warned;
    }

    fn apply(&self, state: &mut ScopeState) {
        if let Some(d) = self.base_delay {
            state.set_base_delay(d);
        }
        if let Some(c) = self.concurrency {
            state.concurrency = c;
        }
        if let Some(d) = self.robots_delay {
            state.robots_floor = Some(d);
        }
    }
}

/// The base delay and concurrency a scope runs with, whether or not its state is in
/// memory.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ScopeSettings {
    /// Base delay in seconds.
    pub delay: f64,
    /// Concurrency limit (0 = unlimited).
    pub concurrency: u32,
}

#[derive(Debug, Default)]
struct PermitSlot {
    generation: u32,
    live: bool,
    counted: bool,
    dont_track: bool,
    scopes: SlotList,
}

/// The scope slots a permit holds: up to two inline (a request usually has one scope),
/// so taking a permit allocates nothing; more spill to a vector kept for reuse.
#[derive(Debug)]
enum SlotList {
    Inline { len: u8, ids: [u32; 2] },
    Heap(Vec<u32>),
}

impl Default for SlotList {
    fn default() -> Self {
        SlotList::Inline {
            len: 0,
            ids: [0; 2],
        }
    }
}

impl SlotList {
    fn one(i: u32) -> Self {
        SlotList::Inline {
            len: 1,
            ids: [i, 0],
        }
    }

    fn as_slice(&self) -> &[u32] {
        match self {
            SlotList::Inline { len, ids } => &ids[..usize::from(*len)],
            SlotList::Heap(v) => v,
        }
    }

    /// Replaces the contents with `ids`.
    fn set(&mut self, ids: impl ExactSizeIterator<Item = u32>) {
        if let SlotList::Heap(v) = self {
            v.clear();
            v.extend(ids);
            return;
        }
        if ids.len() <= 2 {
            let mut inline = [0; 2];
            let mut len = 0;
            for (slot, id) in inline.iter_mut().zip(ids) {
                *slot = id;
                len += 1;
            }
            *self = SlotList::Inline { len, ids: inline };
        } else {
            *self = SlotList::Heap(ids.collect());
        }
    }
}

/// The politeness engine: decides when a request to a set of scopes may go out.
///
/// It never reads a clock: pass `now` to every call. See the crate documentation for the
/// decision loop.
pub struct Throttler {
    settings: Settings,
    /// Resolved parameters: `[Ip, Domain, Other]` defaults, then one per named scope.
    params: Vec<ScopeParams>,
    named: HashMap<Box<str>, u32>,
    overrides: HashMap<Box<str>, Override>,
    hasher: DefaultHashBuilder,
    index: HashTable<u32>,
    slots: Vec<ScopeState>,
    /// Bumped each time a slot's state is evicted: hints of the old state go stale.
    generations: Vec<u32>,
    free_slots: Vec<u32>,
    lru: Lru,
    max_idle: Option<Duration>,
    /// No state can have been idle for `max_idle` before this instant (the least
    /// recently used one was last used `max_idle` earlier).
    idle_check_at: Timestamp,
    permits: Vec<PermitSlot>,
    free_permits: Vec<u32>,
    in_flight: u32,
    rng: JitterRng,
    clock: Monotonic,
    waiters: Waiters,
    held_back: HeldBackMonitor,
    hibernation: Option<Box<dyn ScopeHibernation + Send>>,
    stats: ThrottlerStats,
    scratch: Vec<(u32, f64)>,
}

impl fmt::Debug for Throttler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttler")
            .field("stats", &self.stats())
            .field("now", &self.clock.latest())
            .finish_non_exhaustive()
    }
}

fn kind_index(kind: ScopeKind) -> u32 {
    match kind {
        ScopeKind::Ip => 0,
        ScopeKind::Domain => 1,
        ScopeKind::Other => 2,
    }
}

fn check_secs(key: &str, secs: f64) -> Result<(), ConfigError> {
    if secs.is_finite() && secs >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            &key,
            format!("must be a finite number of seconds >= 0, got {secs}"),
        ))
    }
}

impl Throttler {
    /// A throttler for `settings` (validated first), starting at `now`.
    pub fn new(settings: Settings, now: Timestamp) -> Result<Self, ConfigError> {
        settings.validate()?;
        let empty = ScopeConfig::default();
        let mut params = Vec::with_capacity(3 + settings.scopes.len());
        for kind in [ScopeKind::Ip, ScopeKind::Domain, ScopeKind::Other] {
            params.push(ScopeParams::resolve(&settings, kind, &empty));
        }
        let mut named = HashMap::with_capacity(settings.scopes.len());
        for (name, config) in &settings.scopes {
            named.insert(Box::from(name.as_str()), params.len() as u32);
            params.push(ScopeParams::resolve(&settings, ScopeKind::of(name), config));
        }
        let max_idle = (settings.throttling_scope_max_idle > 0.0)
            .then(|| secs_to_duration(settings.throttling_scope_max_idle));
        Ok(Throttler {
            rng: JitterRng::new(settings.seed),
            held_back: HeldBackMonitor::new(settings.delayed_requests_warn_threshold as usize),
            params,
            named,
            overrides: HashMap::new(),
            hasher: DefaultHashBuilder::default(),
            index: HashTable::new(),
            slots: Vec::new(),
            generations: Vec::new(),
            free_slots: Vec::new(),
            lru: Lru::new(),
            max_idle,
            idle_check_at: Timestamp::ZERO,
            permits: Vec::new(),
            free_permits: Vec::new(),
            in_flight: 0,
            clock: Monotonic::new(now),
            waiters: Waiters::default(),
            hibernation: None,
            stats: ThrottlerStats::default(),
            scratch: Vec::new(),
            settings,
        })
    }

    /// The settings this throttler was built with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Attaches a store for evicted scope states (see [`ScopeHibernation`]).
    pub fn set_hibernation(&mut self, store: Box<dyn ScopeHibernation + Send>) {
        self.hibernation = Some(store);
    }

    /// Detaches and returns the hibernation store.
    pub fn take_hibernation(&mut self) -> Option<Box<dyn ScopeHibernation + Send>> {
        self.hibernation.take()
    }

    /// Tries to reserve every scope of a request at once.
    ///
    /// On success the request may be sent now and the permit must be
    /// [released](Self::release) when it finishes. Otherwise nothing was reserved anywhere.
    /// A new arrival never overtakes waiters queued with
    /// [`try_acquire_or_enqueue`](Self::try_acquire_or_enqueue) on one of its scopes.
    pub fn try_acquire(
        &mut self,
        scopes: &[ScopeUse<'_>],
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        self.try_acquire_with(scopes, RequestFlags::default(), now)
    }

    /// [`try_acquire`](Self::try_acquire) with per-request flags.
    pub fn try_acquire_with(
        &mut self,
        scopes: &[ScopeUse<'_>],
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        let now = self.clock.clamp(now);
        if flags.dont_throttle {
            return Ok(self.new_permit(&[], false, flags.dont_track));
        }
        let mut list = core::mem::take(&mut self.scratch);
        let created = self.resolve_all(scopes, now, &mut list);
        let result = self.admit(&list, flags, now);
        self.scratch = list;
        self.evict_some(now, created + EVICTION_BUDGET);
        result
    }

    /// [`try_acquire_with`](Self::try_acquire_with) for a caller that remembers where
    /// each scope's state lives: `hints[i]` belongs to `scopes[i]` (same name, every
    /// call) and is refreshed when stale. Skips hashing scope names on the hot path.
    pub fn try_acquire_hinted(
        &mut self,
        scopes: &[ScopeUse<'_>],
        hints: &mut [ScopeHint],
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        if hints.len() != scopes.len() {
            return self.try_acquire_with(scopes, flags, now);
        }
        let now = self.clock.clamp(now);
        if flags.dont_throttle {
            return Ok(self.new_permit(&[], false, flags.dont_track));
        }
        let mut list = core::mem::take(&mut self.scratch);
        list.clear();
        let mut created = 0;
        for (u, hint) in scopes.iter().zip(hints.iter_mut()) {
            let amount = if u.amount.is_nan() || u.amount < 0.0 {
                0.0
            } else {
                u.amount
            };
            let (i, new) = self.resolve_hinted(u.scope, hint, now);
            created += usize::from(new);
            match list.iter_mut().find(|(j, _)| *j == i) {
                Some((_, a)) => *a += amount,
                None => list.push((i, amount)),
            }
        }
        let result = self.admit(&list, flags, now);
        self.scratch = list;
        self.evict_some(now, created + EVICTION_BUDGET);
        result
    }

    /// [`try_acquire_hinted`](Self::try_acquire_hinted) for a request with exactly one
    /// scope: the same decision and the same reservation, without building a list of
    /// scopes. Schedulers call it for the usual one-host group.
    #[inline]
    pub fn try_acquire_one(
        &mut self,
        scope: ScopeUse<'_>,
        hint: &mut ScopeHint,
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        let now = self.clock.clamp(now);
        if flags.dont_throttle {
            return Ok(self.new_permit(&[], false, flags.dont_track));
        }
        let amount = if scope.amount.is_nan() || scope.amount < 0.0 {
            0.0
        } else {
            scope.amount
        };
        let i = hint.slot;
        if !self.hint_is_live(hint) {
            return self.try_acquire_one_cold(scope.scope, amount, hint, flags, now);
        }
        self.bring_up(i, scope.scope, now);
        let result = self.admit_one(i, amount, flags, now);
        if result.is_err() {
            // Admitted, the state is in flight: it takes its place in the recency order
            // when its last request ends (see `evict_lru`). Refused, it takes it now.
            self.lru.touch(i);
        }
        self.evict_some(now, EVICTION_BUDGET);
        result
    }

    /// [`try_acquire_one`](Self::try_acquire_one) through the scope's name (a stale or
    /// empty hint, refreshed here).
    #[inline(never)]
    fn try_acquire_one_cold(
        &mut self,
        name: &str,
        amount: f64,
        hint: &mut ScopeHint,
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        let (i, created) = self.resolve_hinted(name, hint, now);
        let result = self.admit_one(i, amount, flags, now);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        result
    }

    /// Brings the state in slot `i` (found through a live hint for `name`) up to `now`
    /// and marks it used (its place in the recency order is the caller's business).
    #[inline]
    fn bring_up(&mut self, i: u32, name: &str, now: Timestamp) {
        let state = &mut self.slots[i as usize];
        debug_assert_eq!(&*state.name, name, "a hint used for another scope");
        state.advance(&self.params[state.params as usize], now);
        state.last_used = now;
    }

    /// Whether `hint` points at the live state it was made for.
    #[inline]
    fn hint_is_live(&self, hint: &ScopeHint) -> bool {
        let i = hint.slot as usize;
        hint.generation != 0
            && self.generations.get(i) == Some(&hint.generation)
            && self.slots[i].live
    }

    /// [`admit`](Self::admit) for one scope, brought up to `now`.
    #[inline]
    fn admit_one(
        &mut self,
        i: u32,
        amount: f64,
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        if self.in_flight.saturating_add(self.waiters.reserved())
            >= self.settings.concurrent_requests
        {
            return Err(NotReady::Blocked);
        }
        if self.first_waiter(i).is_some() {
            return Err(NotReady::Blocked);
        }
        let state = &mut self.slots[i as usize];
        let p = &self.params[state.params as usize];
        match state.gate(p, amount, now) {
            Gate::Open => {}
            Gate::NotUntil(t) => return Err(NotReady::NotUntil(t)),
            Gate::Full => return Err(NotReady::Blocked),
        }
        state.record_send(p, amount, now, &mut self.rng);
        self.in_flight += 1;
        Ok(self.new_permit_of(SlotList::one(i), true, flags.dont_track))
    }

    /// Whether [`try_acquire`](Self::try_acquire) would succeed now, without reserving.
    pub fn check(&mut self, scopes: &[ScopeUse<'_>], now: Timestamp) -> Result<(), NotReady> {
        let now = self.clock.clamp(now);
        let mut list = core::mem::take(&mut self.scratch);
        let created = self.resolve_all(scopes, now, &mut list);
        let result = self.gate_all(&list, now, true, self.waiters.reserved());
        self.scratch = list;
        self.evict_some(now, created + EVICTION_BUDGET);
        result
    }

    /// Whether one scope's own gates (delay, hard backoff, quota for `scope.amount`,
    /// concurrency) allow a send now, ignoring the global `concurrent_requests` cap and
    /// other scopes. Schedulers use it to find which scope holds a request back.
    pub fn check_scope(&mut self, scope: ScopeUse<'_>, now: Timestamp) -> Result<(), NotReady> {
        let now = self.clock.clamp(now);
        let (i, created) = self.resolve(scope.scope, now);
        let amount = if scope.amount.is_nan() || scope.amount < 0.0 {
            0.0
        } else {
            scope.amount
        };
        let state = &self.slots[i as usize];
        let result = match state.gate(&self.params[state.params as usize], amount, now) {
            Gate::Open => Ok(()),
            Gate::NotUntil(t) => Err(NotReady::NotUntil(t)),
            Gate::Full => Err(NotReady::Blocked),
        };
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        result
    }

    /// Starts loading the states `hints` point to into the CPU cache, for a caller that
    /// knows which scopes it will ask about next (a scheduler looking one request
    /// ahead). Only a hint to the processor: nothing changes, stale hints are ignored.
    pub fn prefetch_hinted(&self, hints: &[ScopeHint]) {
        for hint in hints {
            self.prefetch_hint(hint);
        }
    }

    /// [`prefetch_hinted`](Self::prefetch_hinted) for one hint.
    #[inline]
    pub fn prefetch_hint(&self, hint: &ScopeHint) {
        let i = hint.slot as usize;
        if let Some(state) = self.slots.get(i) {
            crate::prefetch::prefetch_prefix(state, crate::scope::HOT_BYTES);
        }
        if let Some(generation) = self.generations.get(i) {
            crate::prefetch(generation);
        }
        self.lru.prefetch(hint.slot);
    }

    /// The load of the busiest scope a live permit holds (see [`load`](Self::load)), found
    /// without looking scope names up. 0 for a released or unthrottled permit.
    pub fn permit_load(&self, permit: &Permit) -> f64 {
        match self.permits.get(permit.slot as usize) {
            Some(p) if p.live && p.generation == permit.generation => {
                self.load_of_slots(p.scopes.as_slice())
            }
            _ => 0.0,
        }
    }

    /// The load (active / concurrency) of the scope state `hint` points to, without
    /// looking its name up; 0 for a stale or empty hint.
    #[inline]
    pub fn load_hinted(&self, hint: &ScopeHint) -> f64 {
        let i = hint.slot as usize;
        if hint.generation == 0 || self.generations.get(i) != Some(&hint.generation) {
            return 0.0;
        }
        match self.slots.get(i) {
            Some(s) if s.live && s.concurrency != 0 => {
                f64::from(s.active) / f64::from(s.concurrency)
            }
            _ => 0.0,
        }
    }

    fn load_of_slots(&self, slots: &[u32]) -> f64 {
        slots
            .iter()
            .map(|&i| self.load_of_slot(i))
            .fold(0.0, f64::max)
    }

    /// Active / concurrency of the state in slot `i` (0 when unlimited).
    #[inline]
    fn load_of_slot(&self, i: u32) -> f64 {
        let s = &self.slots[i as usize];
        if s.concurrency == 0 {
            0.0
        } else {
            f64::from(s.active) / f64::from(s.concurrency)
        }
    }

    /// [`release`](Self::release), returning the load of the permit's busiest scope
    /// afterwards (`None` if it was already released). Schedulers use it to re-rank.
    #[inline]
    pub fn release_and_load(
        &mut self,
        permit: Permit,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Option<f64> {
        self.release_inner(permit, outcome, now)
    }

    /// Finishes a request: frees its slots and feeds its outcome to backoff on every one
    /// of its scopes. Returns `false` (and does nothing) if the permit was already
    /// released.
    pub fn release(&mut self, permit: Permit, outcome: &Outcome<'_>, now: Timestamp) -> bool {
        self.release_inner(permit, outcome, now).is_some()
    }

    #[inline]
    fn release_inner(
        &mut self,
        permit: Permit,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Option<f64> {
        let now = self.clock.clamp(now);
        let slot = self.permits.get_mut(permit.slot as usize)?;
        if !slot.live || slot.generation != permit.generation {
            return None;
        }
        slot.live = false;
        slot.generation = slot.generation.wrapping_add(1);
        let (counted, dont_track) = (slot.counted, slot.dont_track);
        let load = match slot.scopes {
            // The usual permit: one scope, nothing to take out of the slot.
            SlotList::Inline {
                len: 1,
                ids: [i, _],
            } => {
                self.release_scope(i, outcome, dont_track, now);
                self.load_of_slot(i)
            }
            _ => {
                let scopes = core::mem::take(&mut slot.scopes);
                for &i in scopes.as_slice() {
                    self.release_scope(i, outcome, dont_track, now);
                }
                let load = self.load_of_slots(scopes.as_slice());
                // Kept (with any vector it holds) for the slot's next permit.
                self.permits[permit.slot as usize].scopes = scopes;
                load
            }
        };
        if counted {
            self.in_flight -= 1;
            self.waiters.wake_global();
        }
        self.free_permits.push(permit.slot);
        self.evict_some(now, EVICTION_BUDGET);
        Some(load)
    }

    /// The end of a request on scope `i`: frees its slot, feeds its outcome to backoff,
    /// marks the state used and lets its first waiter look again.
    #[inline(always)]
    fn release_scope(&mut self, i: u32, outcome: &Outcome<'_>, dont_track: bool, now: Timestamp) {
        let state = &mut self.slots[i as usize];
        let p = &self.params[state.params as usize];
        state.advance(p, now);
        state.record_done();
        if !dont_track {
            if outcome.is_trigger(&p.backoff) {
                state.trigger(p, outcome.header_delay(), now, &mut self.rng);
            }
            if let Some(reset) = outcome.budget_reset() {
                state.hold(p, reset, now);
            }
        }
        state.last_used = now;
        self.wake_scope(i);
        self.lru.touch(i);
    }

    /// Like [`try_acquire_with`](Self::try_acquire_with), but on failure takes a place in
    /// the FIFO queue of each of the request's scopes and returns its ticket.
    ///
    /// Drive the ticket with [`poll_ticket`](Self::poll_ticket) whenever
    /// [`poll_wakeup`](Self::poll_wakeup) yields it. Waiters on a scope are admitted in
    /// ticket order, so none starves.
    pub fn try_acquire_or_enqueue(
        &mut self,
        scopes: &[ScopeUse<'_>],
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, (Ticket, NotReady)> {
        let now = self.clock.clamp(now);
        if flags.dont_throttle {
            return Ok(self.new_permit(&[], false, flags.dont_track));
        }
        let mut list = core::mem::take(&mut self.scratch);
        let created = self.resolve_all(scopes, now, &mut list);
        let result = self.admit(&list, flags, now);
        let result = match result {
            Ok(permit) => Ok(permit),
            Err(_) => {
                let ticket = self.waiters.insert(list.clone(), flags);
                for &(i, _) in &list {
                    self.slots[i as usize].waiters.push_back(ticket.0);
                }
                self.held_back.update(self.waiters.len());
                match self.poll_ticket(ticket, now) {
                    TicketPoll::Ready(permit) => Ok(permit),
                    TicketPoll::Waiting(why) => Err((ticket, why)),
                    TicketPoll::Unknown => Err((ticket, NotReady::Blocked)),
                }
            }
        };
        self.scratch = list;
        self.evict_some(now, created + EVICTION_BUDGET);
        result
    }

    /// Tries to admit a queued request. It goes only when it is first in the queue of
    /// every one of its scopes and all of them allow it.
    pub fn poll_ticket(&mut self, ticket: Ticket, now: Timestamp) -> TicketPoll {
        let now = self.clock.clamp(now);
        let Some(mut entry) = self.waiters.take(ticket.0) else {
            return TicketPoll::Unknown;
        };
        let mut first_everywhere = true;
        for &(i, _) in &entry.scopes {
            let state = &mut self.slots[i as usize];
            state.advance(&self.params[state.params as usize], now);
            first_everywhere &= state.waiters.front() == Some(&ticket.0);
        }
        if !first_everywhere {
            self.waiters.return_global(&mut entry);
            self.waiters.put_back(ticket.0, entry);
            return TicketPoll::Waiting(NotReady::Blocked);
        }
        let others = self.waiters.reserved() - u32::from(entry.holds_global);
        if self.in_flight.saturating_add(others) >= self.settings.concurrent_requests {
            self.waiters.put_back(ticket.0, entry);
            self.waiters.block_on_global(ticket.0);
            return TicketPoll::Waiting(NotReady::Blocked);
        }
        match self.gate_all(&entry.scopes, now, false, others) {
            Err(why) => {
                // A global slot was reserved for this waiter but it cannot use it: pass it on.
                self.waiters.return_global(&mut entry);
                self.waiters.put_back(ticket.0, entry);
                if let NotReady::NotUntil(t) = why {
                    self.waiters.schedule(ticket.0, t);
                }
                TicketPoll::Waiting(why)
            }
            Ok(()) => {
                self.waiters.use_global(&mut entry);
                for &(i, _) in &entry.scopes {
                    let queue = &mut self.slots[i as usize].waiters;
                    queue.pop_front();
                    if let Some(&next) = queue.front() {
                        self.waiters.wake(next);
                    }
                }
                self.held_back.update(self.waiters.len());
                TicketPoll::Ready(self.reserve(&entry.scopes, entry.flags, now))
            }
        }
    }

    /// Gives up a queued request. Returns `false` for an unknown ticket.
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let Some(mut entry) = self.waiters.take(ticket.0) else {
            return false;
        };
        self.waiters.return_global(&mut entry);
        for &(i, _) in &entry.scopes {
            let queue = &mut self.slots[i as usize].waiters;
            if queue.front() == Some(&ticket.0) {
                queue.pop_front();
                if let Some(&next) = queue.front() {
                    self.waiters.wake(next);
                }
            } else if let Some(pos) = queue.iter().position(|&t| t == ticket.0) {
                queue.remove(pos);
            }
        }
        self.held_back.update(self.waiters.len());
        true
    }

    /// The next instant at which a queued request may become admissible, if any: a
    /// delay or quota window ending, or a rampup boundary that may raise a full scope's
    /// concurrency (docs/behaviour.md 3.8, the wake-up rule).
    /// Sleep until then and call [`handle_timeout`](Self::handle_timeout). It may name
    /// the deadline of a ticket that was since admitted or cancelled: waking early is
    /// harmless, and after `handle_timeout(now)` it is `None` or later than `now`.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.waiters.next_deadline()
    }

    /// Wakes the waiters whose scheduled instant has come. Harmless to call early or
    /// twice; afterwards [`poll_timeout`](Self::poll_timeout) is `None` or later than `now`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let now = self.clock.clamp(now);
        self.waiters.expire(now);
    }

    /// The next queued request that should call [`poll_ticket`](Self::poll_ticket), in
    /// the order they became eligible.
    #[must_use]
    pub fn poll_wakeup(&mut self) -> Option<Ticket> {
        self.waiters.next_wakeup().map(Ticket)
    }

    /// Holds back every request of `scope` for at least `secs` seconds, counted as a
    /// backoff trigger (level + 1). Unlike header delays it is not capped by
    /// `backoff_max_delay`. Use it for soft blocks backoff cannot see (a maintenance page
    /// served with status 200).
    pub fn delay_scope(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        check_secs("delay_scope", secs)?;
        let now = self.clock.clamp(now);
        let (i, created) = self.resolve(scope, now);
        let state = &mut self.slots[i as usize];
        state.hard_delay(
            &self.params[state.params as usize],
            secs_to_duration(secs),
            now,
        );
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Applies a robots.txt Crawl-delay reported for `scope` (docs/behaviour.md 3.6): capped at
    /// `throttling_robotstxt_max_delay`; if the scope's configured delay is lower or its
    /// configured concurrency above 1, the configuration is kept and one warning is logged
    /// (unless `ignore_robots_txt`); otherwise the base delay is raised to the value and the
    /// concurrency set to 1 (floored at `min_concurrency`). Survives eviction.
    pub fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision, ConfigError> {
        check_secs("crawl_delay", secs)?;
        if !self.settings.throttling_robotstxt_obey {
            event!(
                debug,
                scope,
                crawl_delay = secs,
                "crawl-delay ignored (throttling_robotstxt_obey is off)"
            );
            return Ok(CrawlDelayDecision::Ignored);
        }
        if secs == 0.0 {
            event!(debug, scope, "crawl-delay 0 ignored: it asks for nothing");
            return Ok(CrawlDelayDecision::Ignored);
        }
        let now = self.clock.clamp(now);
        let capped = secs.min(self.settings.throttling_robotstxt_max_delay);
        let p = &self.params[self.params_index(scope) as usize];
        let conflicts = p.explicit_delay.is_some_and(|d| d < capped)
            || p.explicit_concurrency.is_some_and(|c| c == 0 || c > 1);
        let (ignore_robots, min_concurrency) = (p.ignore_robots_txt, p.min_concurrency);
        // The base delay in force now (configured, live-set or learned by rampup).
        let current = self.scope_settings(scope).delay;
        let ov = self.overrides.entry(Box::from(scope)).or_default();
        if conflicts {
            let warned = !ignore_robots && !ov.robots_warned;
            if !warned {
                event!(
                    debug,
                    scope,
                    crawl_delay = capped,
                    "crawl-delay kept below the configured rate"
                );
            }
            if warned {
                ov.robots_warned = true;
                event!(
                    warn,
                    scope,
                    crawl_delay = capped,
                    "the scope's configured delay/concurrency is more aggressive than its \
                     robots.txt Crawl-delay; keeping the configuration \
                     (set ignore_robots_txt to silence this)"
                );
            }
            return Ok(CrawlDelayDecision::KeptConfig { warned });
        }
        let delay = current.max(capped);
        let concurrency = min_concurrency.max(1);
        ov.base_delay = Some(delay);
        ov.concurrency = Some(concurrency);
        ov.robots_delay = Some(delay);
        let (i, created) = self.resolve(scope, now);
        let state = &mut self.slots[i as usize];
        state.raise_base_delay(delay);
        state.concurrency = concurrency;
        state.robots_floor = Some(delay);
        event!(debug, scope, delay, concurrency, "crawl-delay applied");
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(CrawlDelayDecision::Applied { delay, concurrency })
    }

    /// Changes the base delay of `scope` at run time (kept across eviction). While the
    /// scope is backing off its current delay never drops below the backoff delay.
    pub fn set_scope_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        check_secs("delay", secs)?;
        let now = self.clock.clamp(now);
        self.overrides
            .entry(Box::from(scope))
            .or_default()
            .base_delay = Some(secs);
        let (i, created) = self.resolve(scope, now);
        self.slots[i as usize].set_base_delay(secs);
        self.wake_scope(i);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Changes the concurrency limit of `scope` at run time (0 = unlimited; kept across
    /// eviction). It must not be below the scope's `min_concurrency`.
    pub fn set_scope_concurrency(
        &mut self,
        scope: &str,
        concurrency: u32,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        let min = self.params[self.params_index(scope) as usize].min_concurrency;
        if concurrency != 0 && concurrency < min {
            return Err(ConfigError::new(
                &"concurrency",
                format!("must not be below the scope's min_concurrency ({concurrency} < {min})"),
            ));
        }
        let now = self.clock.clamp(now);
        self.overrides
            .entry(Box::from(scope))
            .or_default()
            .concurrency = Some(concurrency);
        let (i, created) = self.resolve(scope, now);
        self.slots[i as usize].concurrency = concurrency;
        self.wake_scope(i);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Corrects the quota consumption of `scope` after the fact, e.g. from an API's cost
    /// header. Does nothing for a scope without a quota.
    pub fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<(), ConfigError> {
        let (key, value) = match how {
            QuotaReconcile::Consumed(v) => ("consumed", v),
            QuotaReconcile::Remaining(v) => ("remaining", v),
        };
        if !value.is_finite() {
            return Err(ConfigError::new(
                &key,
                format!("must be finite, got {value}"),
            ));
        }
        let now = self.clock.clamp(now);
        let (i, created) = self.resolve(scope, now);
        let state = &mut self.slots[i as usize];
        if let Some(quota) = self.params[state.params as usize].quota {
            state.consumed = match how {
                QuotaReconcile::Consumed(d) => (state.consumed + d).max(0.0),
                QuotaReconcile::Remaining(r) => (quota - r).max(0.0),
            };
            if state.consumed > 0.0 && state.quota_start.is_none() {
                state.quota_start = Some(now);
            }
            self.wake_scope(i);
        }
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
        Ok(())
    }

    /// Counters and current values of `scope` as of `now` (lazy recovery, rampup and
    /// quota updates applied), if its state is in memory. Does not create a state.
    pub fn scope_stats(&mut self, scope: &str, now: Timestamp) -> Option<ScopeStats> {
        let now = self.clock.clamp(now);
        let i = self.find(scope)?;
        let state = &mut self.slots[i as usize];
        state.advance(&self.params[state.params as usize], now);
        Some(state.stats())
    }

    /// Every scope state in memory with its stats as of the last operation on it, in no
    /// particular order.
    pub fn scopes(&self) -> impl Iterator<Item = (&str, ScopeStats)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.live)
            .map(|s| (&*s.name, s.stats()))
    }

    /// Counters of the throttler as a whole.
    pub fn stats(&self) -> ThrottlerStats {
        ThrottlerStats {
            live_scopes: self.index.len(),
            in_flight: self.in_flight,
            waiting: self.waiters.len(),
            ..self.stats
        }
    }

    /// The load of the busiest of `scopes`: requests in flight divided by its concurrency
    /// limit (0 for unlimited or unknown scopes). Schedulers use it to prefer idle scopes.
    /// Reads only; creates no state.
    pub fn load(&self, scopes: &[ScopeUse<'_>]) -> f64 {
        scopes
            .iter()
            .filter_map(|u| self.find(u.scope))
            .map(|i| {
                let s = &self.slots[i as usize];
                if s.concurrency == 0 {
                    0.0
                } else {
                    f64::from(s.active) / f64::from(s.concurrency)
                }
            })
            .fold(0.0, f64::max)
    }

    /// Requests in flight (released permits excluded, `dont_throttle` ones not counted).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// What `scope` has learned (and its live configuration), for a store to keep.
    pub fn snapshot(&self, scope: &str) -> Option<ScopeSnapshot> {
        self.find(scope)
            .map(|i| self.snapshot_of(&self.slots[i as usize]))
    }

    /// Snapshots of every scope state in memory.
    pub fn snapshots(&self) -> impl Iterator<Item = ScopeSnapshot> + '_ {
        self.slots
            .iter()
            .filter(|s| s.live)
            .map(|s| self.snapshot_of(s))
    }

    fn snapshot_of(&self, state: &ScopeState) -> ScopeSnapshot {
        let mut snap = state.snapshot();
        if let Some(ov) = self.overrides.get(&*state.name) {
            ov.fill(&mut snap);
        }
        snap
    }

    /// The base delay and concurrency `scope` runs with: its live values if its state is
    /// in memory, else its configuration with any live change or Crawl-delay applied.
    pub fn scope_settings(&self, scope: &str) -> ScopeSettings {
        if let Some(i) = self.find(scope) {
            let s = &self.slots[i as usize];
            return ScopeSettings {
                delay: s.base_delay,
                concurrency: s.concurrency,
            };
        }
        let p = &self.params[self.params_index(scope) as usize];
        let ov = self.overrides.get(scope).copied().unwrap_or_default();
        ScopeSettings {
            delay: ov.base_delay.unwrap_or(p.delay),
            concurrency: ov.concurrency.unwrap_or(p.concurrency),
        }
    }

    /// Brings back what a scope had learned (after a restart, say), live configuration
    /// and Crawl-delay included. Requests that were in flight when the snapshot was
    /// taken are not counted again.
    pub fn restore(&mut self, snapshot: &ScopeSnapshot, now: Timestamp) {
        let now = self.clock.clamp(now);
        if let Some(ov) = Override::from_snapshot(snapshot) {
            self.overrides
                .insert(Box::from(snapshot.scope.as_str()), ov);
        }
        let (i, created) = self.resolve(&snapshot.scope, now);
        self.slots[i as usize].restore(snapshot);
        self.wake_scope(i);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
    }

    fn params_index(&self, name: &str) -> u32 {
        self.named
            .get(name)
            .copied()
            .unwrap_or_else(|| kind_index(ScopeKind::of(name)))
    }

    fn find(&self, name: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(name);
        let slots = &self.slots;
        self.index
            .find(hash, |&i| *slots[i as usize].name == *name)
            .copied()
    }

    /// The slot of `name`'s state, created if needed, brought up to `now` and marked as
    /// just used. Returns whether it was created.
    fn resolve(&mut self, name: &str, now: Timestamp) -> (u32, bool) {
        let hash = self.hasher.hash_one(name);
        let slots = &self.slots;
        let found = self
            .index
            .find(hash, |&i| *slots[i as usize].name == *name)
            .copied();
        let (i, created) = match found {
            Some(i) => {
                let state = &mut self.slots[i as usize];
                state.advance(&self.params[state.params as usize], now);
                (i, false)
            }
            None => (self.create(name, hash, now), true),
        };
        self.slots[i as usize].last_used = now;
        self.lru.touch(i);
        (i, created)
    }

    /// [`resolve`](Self::resolve) through a hint when it is still valid.
    fn resolve_hinted(&mut self, name: &str, hint: &mut ScopeHint, now: Timestamp) -> (u32, bool) {
        if self.hint_is_live(hint) {
            self.bring_up(hint.slot, name, now);
            self.lru.touch(hint.slot);
            return (hint.slot, false);
        }
        let (i, created) = self.resolve(name, now);
        *hint = ScopeHint {
            slot: i,
            generation: self.generations[i as usize],
        };
        (i, created)
    }

    fn create(&mut self, name: &str, hash: u64, now: Timestamp) -> u32 {
        let params = self.params_index(name);
        let mut state = ScopeState::new(name, params, &self.params[params as usize], now);
        if let Some(snapshot) = self.hibernation.as_mut().and_then(|h| h.wake(name)) {
            if let Some(ov) = Override::from_snapshot(&snapshot) {
                self.overrides.insert(Box::from(name), ov);
            }
            state.restore(&snapshot);
            state.advance(&self.params[params as usize], now);
            self.stats.woken += 1;
        } else if let Some(ov) = self.overrides.get(name) {
            ov.apply(&mut state);
        }
        let i = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = state;
                i
            }
            None => {
                self.slots.push(state);
                self.generations.push(1);
                (self.slots.len() - 1) as u32
            }
        };
        let (hasher, slots) = (&self.hasher, &self.slots);
        self.index
            .insert_unique(hash, i, |&j| hasher.hash_one(&*slots[j as usize].name));
        self.lru.push_front(i);
        self.stats.created += 1;
        i
    }

    /// Resolves every scope of a request into `list` (slot, amount), merging repeated
    /// names. Returns how many states were created.
    fn resolve_all(
        &mut self,
        scopes: &[ScopeUse<'_>],
        now: Timestamp,
        list: &mut Vec<(u32, f64)>,
    ) -> usize {
        list.clear();
        let mut created = 0;
        for u in scopes {
            let amount = if u.amount.is_nan() || u.amount < 0.0 {
                0.0
            } else {
                u.amount
            };
            let (i, new) = self.resolve(u.scope, now);
            created += usize::from(new);
            match list.iter_mut().find(|(j, _)| *j == i) {
                Some((_, a)) => *a += amount,
                None => list.push((i, amount)),
            }
        }
        created
    }

    /// Checks every gate; `fair` also refuses to overtake queued waiters. `reserved`
    /// global slots are held for woken waiters and not available to this request.
    fn gate_all(
        &self,
        list: &[(u32, f64)],
        now: Timestamp,
        fair: bool,
        reserved: u32,
    ) -> Result<(), NotReady> {
        if self.in_flight.saturating_add(reserved) >= self.settings.concurrent_requests {
            return Err(NotReady::Blocked);
        }
        let mut until: Option<Timestamp> = None;
        let mut full = false;
        for &(i, amount) in list {
            if fair && self.first_waiter(i).is_some() {
                full = true;
                continue;
            }
            let state = &self.slots[i as usize];
            match state.gate(&self.params[state.params as usize], amount, now) {
                Gate::Open => {}
                Gate::NotUntil(t) => until = Some(until.map_or(t, |u| u.max(t))),
                Gate::Full => full = true,
            }
        }
        match (full, until) {
            (true, _) => Err(NotReady::Blocked),
            (false, Some(t)) => Err(NotReady::NotUntil(t)),
            (false, None) => Ok(()),
        }
    }

    fn admit(
        &mut self,
        list: &[(u32, f64)],
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        self.gate_all(list, now, true, self.waiters.reserved())?;
        Ok(self.reserve(list, flags, now))
    }

    /// Records the send on every scope and hands out the permit.
    fn reserve(&mut self, list: &[(u32, f64)], flags: RequestFlags, now: Timestamp) -> Permit {
        for &(i, amount) in list {
            let state = &mut self.slots[i as usize];
            state.record_send(
                &self.params[state.params as usize],
                amount,
                now,
                &mut self.rng,
            );
        }
        self.in_flight += 1;
        self.new_permit(list, true, flags.dont_track)
    }

    fn new_permit(&mut self, list: &[(u32, f64)], counted: bool, dont_track: bool) -> Permit {
        let slot = self.permit_slot();
        let p = &mut self.permits[slot as usize];
        p.live = true;
        p.counted = counted;
        p.dont_track = dont_track;
        p.scopes.set(list.iter().map(|&(i, _)| i));
        Permit {
            slot,
            generation: p.generation,
        }
    }

    /// [`new_permit`](Self::new_permit) holding `scopes` (inline ones: nothing to reuse).
    #[inline]
    fn new_permit_of(&mut self, scopes: SlotList, counted: bool, dont_track: bool) -> Permit {
        let slot = self.permit_slot();
        let p = &mut self.permits[slot as usize];
        p.live = true;
        p.counted = counted;
        p.dont_track = dont_track;
        if !matches!(p.scopes, SlotList::Heap(_)) {
            p.scopes = scopes;
        } else {
            p.scopes.set(scopes.as_slice().iter().copied());
        }
        Permit {
            slot,
            generation: p.generation,
        }
    }

    /// A free permit slot.
    #[inline]
    fn permit_slot(&mut self) -> u32 {
        match self.free_permits.pop() {
            Some(s) => s,
            None => self.new_permit_slot(),
        }
    }

    #[inline(never)]
    fn new_permit_slot(&mut self) -> u32 {
        self.permits.push(PermitSlot::default());
        (self.permits.len() - 1) as u32
    }

    /// The ticket first in scope `i`'s queue. A scope has waiters only while some request
    /// waits at all: without any, its queue, outside the state's first cache line, is
    /// not read.
    #[inline]
    fn first_waiter(&self, i: u32) -> Option<u64> {
        if self.waiters.is_empty() {
            return None;
        }
        self.slots[i as usize].waiters.front().copied()
    }

    /// Something about scope `i` changed for the better: let its first waiter look again.
    #[inline]
    fn wake_scope(&mut self, i: u32) {
        if let Some(head) = self.first_waiter(i) {
            self.waiters.wake(head);
        }
    }

    /// Evicts least recently used states while over `throttling_scope_limit` or idle for
    /// `throttling_scope_max_idle`, examining at most `budget` of them. A state that must
    /// be kept (in flight, backing off, a future send time, waiters, quota in use) goes
    /// back to the front instead, so the work per operation stays constant.
    #[inline]
    fn evict_some(&mut self, now: Timestamp, budget: usize) {
        let limit = self.settings.throttling_scope_limit as usize;
        // Below the limit and before the oldest state can be idle: nothing to look at.
        if (limit == 0 || self.index.len() <= limit) && now < self.idle_check_at {
            return;
        }
        self.evict_lru(now, budget, limit);
    }

    fn evict_lru(&mut self, now: Timestamp, budget: usize, limit: usize) {
        for _ in 0..budget {
            let Some(i) = self.lru.tail() else { return };
            let over = limit != 0 && self.index.len() > limit;
            let state = &mut self.slots[i as usize];
            if state.active > 0 {
                // In flight, so not evictable; and an admission does not move a state
                // in the recency order (its last release does), so its place says
                // nothing about how recently it was used. Look past it.
                self.lru.touch(i);
                continue;
            }
            let idle = self.max_idle.is_some_and(|m| state.last_used + m <= now);
            if !over && !idle {
                self.idle_check_at = self
                    .max_idle
                    .map_or(Timestamp::MAX, |m| state.last_used + m);
                return;
            }
            state.advance(&self.params[state.params as usize], now);
            if state.evictable(now) {
                self.evict(i);
            } else {
                // Kept, but its idle clock is not reset: it goes once it stops mattering.
                self.lru.touch(i);
            }
        }
    }

    fn evict(&mut self, i: u32) {
        let state = core::mem::replace(&mut self.slots[i as usize], ScopeState::vacant());
        let hash = self.hasher.hash_one(&*state.name);
        if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        self.lru.remove(i);
        self.generations[i as usize] = self.generations[i as usize].wrapping_add(1).max(1);
        self.free_slots.push(i);
        self.stats.evicted += 1;
        event!(debug, scope = %state.name, "scope state evicted");
        if let Some(h) = self.hibernation.as_mut() {
            // The hibernated snapshot carries the live configuration: memory stays bounded.
            let mut snap = state.snapshot();
            if let Some(ov) = self.overrides.remove(&*state.name) {
                ov.fill(&mut snap);
            }
            h.hibernate(snap);
            self.stats.hibernated += 1;
        }
    }
}

#[cfg(test)]
#[path = "throttler_tests.rs"]
mod tests;
