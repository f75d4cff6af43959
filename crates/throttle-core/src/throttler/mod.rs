//! The throttler: a bounded map of scope states, all-or-nothing admission over several
//! scopes, release with outcomes, FIFO waiters, and the programmatic controls.
//!
//! This module holds the [`Throttler`] itself and the handles a caller exchanges with it;
//! its submodules hold the rest, one concern each:
//! [`admission`] (the `try_acquire` variants and the all-or-nothing gate), [`release`],
//! [`queue`] (tickets and FIFO waiters), [`controls`] (`delay_scope`, Crawl-delay, live
//! changes, quota reconciliation), [`inspect`] (stats, loads, snapshots), [`permits`] (the
//! permit slab), [`scope_map`] (lookup, creation and eviction of scope states) and
//! [`hibernation`] (where evicted states go).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

use crate::config::{ConfigError, ScopeConfig, Settings};
use crate::lru::Lru;
use crate::rng::JitterRng;
use crate::scope::{ScopeKind, ScopeParams, ScopeState};
use crate::time::{Monotonic, Timestamp, secs_to_duration};
use crate::waiters::Waiters;

mod admission;
mod controls;
mod hibernation;
mod inspect;
mod permits;
mod queue;
mod release;
mod scope_map;

pub use controls::{CrawlDelayDecision, QuotaReconcile};
pub use hibernation::{HibernationError, MemoryHibernation, ScopeHibernation};
pub use inspect::{HeldBackMonitor, ScopeSettings, ThrottlerStats};

use hibernation::Override;
use permits::PermitSlot;

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

    /// Flushes the attached hibernation store (see [`ScopeHibernation::flush`]); nothing
    /// to do without one.
    pub fn flush_hibernation(&mut self) -> Result<(), HibernationError> {
        self.hibernation.as_mut().map_or(Ok(()), |h| h.flush())
    }
}

#[cfg(test)]
mod tests;
