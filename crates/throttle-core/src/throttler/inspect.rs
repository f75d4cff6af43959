//! Looking in: counters, the held-back warning, per-scope stats, loads and snapshots.

use alloc::boxed::Box;

use crate::scope::{ScopeSnapshot, ScopeState, ScopeStats};
use crate::time::Timestamp;

use super::{EVICTION_BUDGET, Override, Permit, ScopeHint, ScopeUse, Throttler};

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

impl Throttler {
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
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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
    ///
    /// A state the attached hibernation store still holds for the scope is newer than
    /// any snapshot saved while the scope was in memory (it was evicted after), so it
    /// wins: the scope wakes from it and `snapshot` is ignored.
    pub fn restore(&mut self, snapshot: &ScopeSnapshot, now: Timestamp) {
        let now = self.clock.clamp(now);
        let resident = self.find(&snapshot.scope).is_some();
        let kept = match self.hibernation.as_mut() {
            Some(h) if !resident => h.wake(&snapshot.scope),
            _ => None,
        };
        if kept.is_some() {
            self.stats.woken += 1;
        }
        let snapshot = kept.as_ref().unwrap_or(snapshot);
        if let Some(ov) = Override::from_snapshot(snapshot) {
            self.overrides
                .insert(Box::from(snapshot.scope.as_str()), ov);
        }
        let (i, created) = self.resolve(&snapshot.scope, now);
        self.slots[i as usize].restore(snapshot);
        self.wake_scope(i);
        self.evict_some(now, usize::from(created) + EVICTION_BUDGET);
    }

    /// The load of the busiest scope a live permit holds (see [`load`](Self::load)), found
    /// without looking scope names up. 0 for a released or unthrottled permit.
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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

    pub(super) fn load_of_slots(&self, slots: &[u32]) -> f64 {
        slots
            .iter()
            .map(|&i| self.load_of_slot(i))
            .fold(0.0, f64::max)
    }

    /// Active / concurrency of the state in slot `i` (0 when unlimited).
    #[inline]
    pub(super) fn load_of_slot(&self, i: u32) -> f64 {
        let s = &self.slots[i as usize];
        if s.concurrency == 0 {
            0.0
        } else {
            f64::from(s.active) / f64::from(s.concurrency)
        }
    }
}
