//! Where evicted scope states go: the hibernation trait, its memory store, the overrides.

use alloc::collections::BTreeMap;
use alloc::string::String;

use crate::scope::{ScopeSnapshot, ScopeState};

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
