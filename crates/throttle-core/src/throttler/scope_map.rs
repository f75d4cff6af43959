//! The bounded scope map: finding and creating scope states, and LRU and idle eviction.

use alloc::boxed::Box;
use core::hash::BuildHasher;

use crate::scope::{ScopeKind, ScopeState};
use crate::time::Timestamp;

use super::{Override, ScopeHint, Throttler};

fn kind_index(kind: ScopeKind) -> u32 {
    match kind {
        ScopeKind::Ip => 0,
        ScopeKind::Domain => 1,
        ScopeKind::Other => 2,
    }
}

impl Throttler {
    pub(super) fn params_index(&self, name: &str) -> u32 {
        self.named
            .get(name)
            .copied()
            .unwrap_or_else(|| kind_index(ScopeKind::of(name)))
    }

    pub(super) fn find(&self, name: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(name);
        let slots = &self.slots;
        self.index
            .find(hash, |&i| *slots[i as usize].name == *name)
            .copied()
    }

    /// The slot of `name`'s state, created if needed, brought up to `now` and marked as
    /// just used. Returns whether it was created.
    pub(super) fn resolve(&mut self, name: &str, now: Timestamp) -> (u32, bool) {
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
    pub(super) fn resolve_hinted(
        &mut self,
        name: &str,
        hint: &mut ScopeHint,
        now: Timestamp,
    ) -> (u32, bool) {
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

    pub(super) fn create(&mut self, name: &str, hash: u64, now: Timestamp) -> u32 {
        let params = self.params_index(name);
        let mut state = ScopeState::new(name, params, &self.params[params as usize], now);
        if let Some(snapshot) = self.hibernation.as_mut().and_then(|h| h.wake(name)) {
            state.restore(&snapshot);
            if let Some(ov) = Override::from_snapshot(&snapshot) {
                self.overrides.insert(Box::from(name), ov);
            } else if let Some(ov) = self.overrides.get(name) {
                // A store that may forget did not carry the overrides: they stayed here.
                ov.apply(&mut state);
            }
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

    /// Evicts least recently used states while over `throttling_scope_limit` or idle for
    /// `throttling_scope_max_idle`, examining at most `budget` of them. A state that must
    /// be kept (in flight, backing off, a future send time, waiters, quota in use) goes
    /// back to the front instead, so the work per operation stays constant.
    #[inline]
    pub(super) fn evict_some(&mut self, now: Timestamp, budget: usize) {
        let limit = self.settings.throttling_scope_limit as usize;
        // Below the limit and before the oldest state can be idle: nothing to look at.
        if (limit == 0 || self.index.len() <= limit) && now < self.idle_check_at {
            return;
        }
        self.evict_lru(now, budget, limit);
    }

    pub(super) fn evict_lru(&mut self, now: Timestamp, budget: usize, limit: usize) {
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
            // A store that keeps everything also takes states that still matter for
            // timing (backoff, future send time, quota in use): they come back on wake.
            let keeps_all = self
                .hibernation
                .as_ref()
                .is_some_and(|h| h.keeps_everything());
            if state.evictable(now) || (keeps_all && state.active == 0 && state.waiters.is_empty())
            {
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
            let mut snap = state.snapshot();
            if h.keeps_everything() {
                // The snapshot carries the live configuration: memory stays bounded.
                if let Some(ov) = self.overrides.remove(&*state.name) {
                    ov.fill(&mut snap);
                }
            }
            h.hibernate(snap);
            self.stats.hibernated += 1;
        }
    }
}
