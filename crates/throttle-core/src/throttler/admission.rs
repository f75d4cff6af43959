//! Admission: the `try_acquire` variants, `check`, and the all-or-nothing gate over scopes.

use alloc::vec::Vec;

use crate::scope::Gate;
use crate::time::Timestamp;

use super::permits::SlotList;
use super::{EVICTION_BUDGET, NotReady, Permit, RequestFlags, ScopeHint, ScopeUse, Throttler};

impl Throttler {
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
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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
    pub(super) fn bring_up(&mut self, i: u32, name: &str, now: Timestamp) {
        let state = &mut self.slots[i as usize];
        debug_assert_eq!(&*state.name, name, "a hint used for another scope");
        state.advance(&self.params[state.params as usize], now);
        state.last_used = now;
    }

    /// Whether `hint` points at the live state it was made for.
    #[inline]
    pub(super) fn hint_is_live(&self, hint: &ScopeHint) -> bool {
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
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
    pub fn prefetch_hinted(&self, hints: &[ScopeHint]) {
        for hint in hints {
            self.prefetch_hint(hint);
        }
    }

    /// [`prefetch_hinted`](Self::prefetch_hinted) for one hint.
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
    #[inline]
    pub fn prefetch_hint(&self, hint: &ScopeHint) {
        let i = hint.slot as usize;
        if let Some(state) = self.slots.get(i) {
            crate::prefetch::prefetch_prefix(state, crate::scope::HOT_BYTES);
        }
        if let Some(generation) = self.generations.get(i) {
            crate::prefetch::prefetch(generation);
        }
        self.lru.prefetch(hint.slot);
    }

    /// Resolves every scope of a request into `list` (slot, amount), merging repeated
    /// names. Returns how many states were created.
    pub(super) fn resolve_all(
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
    pub(super) fn gate_all(
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

    pub(super) fn admit(
        &mut self,
        list: &[(u32, f64)],
        flags: RequestFlags,
        now: Timestamp,
    ) -> Result<Permit, NotReady> {
        self.gate_all(list, now, true, self.waiters.reserved())?;
        Ok(self.reserve(list, flags, now))
    }
}
