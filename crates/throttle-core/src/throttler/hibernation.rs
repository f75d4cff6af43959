//! Where evicted scope states go: the hibernation trait, its bounded memory store, the
//! overrides.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use core::fmt;

use crate::scope::{ScopeSnapshot, ScopeState};

/// Where evicted scope states go instead of being forgotten, and come back from.
///
/// With a hibernation store attached, a long crawl over millions of hosts keeps what it
/// learned about hosts it revisits (rampup rates, Crawl-delays, live configuration,
/// counters) while the throttler keeps at most `throttling_scope_limit` states in memory.
///
/// What may be evicted depends on [`keeps_everything`](Self::keeps_everything): a store
/// that may forget (a bounded memory map) only receives states that no longer matter for
/// timing, so a backoff, a future send time, a hard delay or a quota in use stay in
/// memory; a store that keeps everything (a file, a database) also receives those, and
/// memory is then bounded whatever the hosts do. Scopes with requests in flight or
/// waiters are never evicted.
///
/// Implementations cannot fail in [`hibernate`](Self::hibernate) or
/// [`wake`](Self::wake): one that writes somewhere keeps what it could not write and
/// reports the error from [`flush`](Self::flush).
pub trait ScopeHibernation {
    /// Keeps the state of an evicted scope, replacing any kept state of the same scope.
    fn hibernate(&mut self, snapshot: ScopeSnapshot);
    /// Returns (and forgets) the kept state of `scope`, if any.
    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot>;
    /// Whether every snapshot handed over comes back from [`wake`](Self::wake) (until
    /// woken). Only then are states that still matter for timing evicted. Default: no.
    fn keeps_everything(&self) -> bool {
        false
    }
    /// Makes what was handed over durable, where the store persists; reports an error
    /// met since the last call (a write or a read that failed). Default: nothing to do.
    fn flush(&mut self) -> Result<(), HibernationError> {
        Ok(())
    }
}

/// A hibernation store failed (a write, a read, a damaged record): its message names
/// the file or database and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HibernationError {
    message: String,
}

impl HibernationError {
    /// An error with this message (which should name the file and the failed step).
    pub fn new(message: impl Into<String>) -> Self {
        HibernationError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HibernationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scope hibernation: {}", self.message)
    }
}

impl core::error::Error for HibernationError {}

/// A [`ScopeHibernation`] that keeps up to `capacity` snapshots in memory, forgetting the
/// oldest beyond that (tests, crawls that revisit a bounded set of hosts).
///
/// It may forget, so it only receives states that no longer matter for timing (see
/// [`ScopeHibernation::keeps_everything`]): forgetting one loses learned rampup rates and
/// counters, never a backoff. Live configuration and Crawl-delays stay in the
/// throttler's own table (about 60 bytes per scope they were applied to).
///
/// ```
/// use polite_throttle_core::{MemoryHibernation, ScopeHibernation, ScopeSnapshot};
///
/// let mut kept = MemoryHibernation::new(2);
/// for host in ["a.example", "b.example", "c.example"] {
///     kept.hibernate(ScopeSnapshot::new(host));
/// }
/// assert_eq!(kept.len(), 2);
/// assert!(kept.wake("a.example").is_none()); // the oldest was forgotten
/// assert!(kept.wake("c.example").is_some());
/// ```
#[derive(Clone, Debug)]
pub struct MemoryHibernation {
    capacity: usize,
    snapshots: BTreeMap<String, (u64, ScopeSnapshot)>,
    /// Insertion order: (sequence, scope). Stale entries (woken or replaced) are skipped.
    order: VecDeque<(u64, String)>,
    next: u64,
    forgotten: u64,
}

impl MemoryHibernation {
    /// A store for at most `capacity` snapshots (at least one).
    pub fn new(capacity: usize) -> Self {
        MemoryHibernation {
            capacity: capacity.max(1),
            snapshots: BTreeMap::new(),
            order: VecDeque::new(),
            next: 0,
            forgotten: 0,
        }
    }

    /// Snapshots kept now.
    pub fn len(&self) -> usize {
        self.snapshots.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.snapshots.is_empty()
    }

    /// The kept state of `scope`, without waking it.
    pub fn get(&self, scope: &str) -> Option<&ScopeSnapshot> {
        self.snapshots.get(scope).map(|(_, s)| s)
    }

    /// Snapshots forgotten because the store was full.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }
}

impl ScopeHibernation for MemoryHibernation {
    fn hibernate(&mut self, snapshot: ScopeSnapshot) {
        let seq = self.next;
        self.next += 1;
        self.order.push_back((seq, snapshot.scope.clone()));
        self.snapshots
            .insert(snapshot.scope.clone(), (seq, snapshot));
        while self.snapshots.len() > self.capacity {
            let Some((seq, name)) = self.order.pop_front() else {
                break;
            };
            if self.snapshots.get(&name).is_some_and(|(s, _)| *s == seq) {
                self.snapshots.remove(&name);
                self.forgotten += 1;
            }
        }
        // Stale order entries (woken or replaced scopes) are dropped once they outnumber
        // the live ones, so the queue stays within twice the capacity.
        if self.order.len() > 2 * self.capacity {
            let snapshots = &self.snapshots;
            self.order
                .retain(|(seq, name)| snapshots.get(name).is_some_and(|(s, _)| s == seq));
        }
    }

    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot> {
        self.snapshots.remove(scope).map(|(_, s)| s)
    }
}

/// Live changes and Crawl-delay results that must outlive an evicted scope state.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Override {
    pub(super) base_delay: Option<f64>,
    pub(super) concurrency: Option<u32>,
    pub(super) robots_delay: Option<f64>,
    pub(super) robots_warned: bool,
}
impl Override {
    pub(super) fn from_snapshot(s: &ScopeSnapshot) -> Option<Self> {
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

    pub(super) fn fill(&self, s: &mut ScopeSnapshot) {
        s.set_delay = self.base_delay;
        s.set_concurrency = self.concurrency;
        s.robots_delay = self.robots_delay;
        s.robots_warned = self.robots_warned;
    }

    pub(super) fn apply(&self, state: &mut ScopeState) {
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
