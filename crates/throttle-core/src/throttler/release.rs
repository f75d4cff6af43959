//! Release: handing a permit back with how its request ended, scope by scope.

use crate::outcome::Outcome;
use crate::time::Timestamp;

use super::permits::SlotList;
use super::{EVICTION_BUDGET, Permit, Throttler};

impl Throttler {
    /// [`release`](Self::release), returning the load of the permit's busiest scope
    /// afterwards (`None` if it was already released). Schedulers use it to re-rank.
    ///
    /// Part of the [extension point for schedulers](crate::hooks): a user of the throttler
    /// does not need it.
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
}
