//! Queueing and polling: insert, pick the next candidate, acquire, hand out, end leases.

use core::cmp::Reverse;

use polite_throttle_core::{NotReady, Permit, Throttler, Timestamp};

use super::groups::{Scopes, acquire};
use super::tiers::Rank;
use super::{
    Candidates, Delayed, Dispatcher, Event, GroupState, POINTEES_AHEAD, Policy, RECORD_AHEAD,
    SERVING_AHEAD, SchedPoll,
};
use crate::buckets::{BucketKey, Entry};
use crate::leases::{LeaseRecord, Leases};

impl<H> Dispatcher<H> {
    /// Adds a queued request to `group`; `not_before` holds it aside until then.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert(
        &mut self,
        group: u32,
        seq: u64,
        handle: H,
        priority: i32,
        start: bool,
        not_before: Option<Timestamp>,
        now: Timestamp,
    ) {
        let class = self.class(start);
        if let Some(t) = not_before.filter(|&t| t > now) {
            self.groups[group as usize].delayed += 1;
            self.delayed.insert(
                seq,
                Delayed {
                    group,
                    priority,
                    class,
                    handle,
                },
            );
            self.events.push(Reverse((t, Event::Delay(seq))));
            return;
        }
        self.enqueue(group, seq, handle, priority, class);
    }

    pub(super) fn enqueue(&mut self, group: u32, seq: u64, handle: H, priority: i32, class: u8) {
        let old_head = self.head_key(group);
        let g = &mut self.groups[group as usize];
        g.buckets.push(
            &mut self.blocks,
            (Reverse(priority), class),
            Entry { seq, handle },
        );
        g.len += 1;
        self.queued += 1;
        let head_changed = self.head_key(group) != old_head;
        match self.groups[group as usize].state {
            GroupState::Idle => self.make_candidate(group, None),
            // A better head raises the rank: push a fresh entry, the old one goes stale.
            GroupState::Candidate if head_changed && self.policy == Policy::ThrottlingAware => {
                let woken = self.groups[group as usize].woken_by;
                self.make_candidate(group, woken);
            }
            GroupState::Parked(s) if head_changed => self.park(group, s),
            _ => {}
        }
    }

    fn head_key(&self, group: u32) -> Option<BucketKey> {
        self.groups[group as usize].buckets.first_key()
    }

    pub(super) fn rank(&self, group: u32) -> Rank {
        let g = &self.groups[group as usize];
        Rank::new(g.tier(), g.last_served, group)
    }

    /// Starts loading what the next polls will read, so that it is in the cache by the
    /// time they get there: the group record [`RECORD_AHEAD`] polls ahead, then what the
    /// record points to (its throttler states, its key and its head request)
    /// [`POINTEES_AHEAD`] polls ahead, once the record has arrived. At thousands of
    /// groups this turns a chain of cache misses per poll into loads that overlap. With
    /// fewer groups than that in the tier, the polls ahead come back to `serving` (the
    /// group being served now): the request [`SERVING_AHEAD`] places down its queue is
    /// loaded instead, which a queue spread over blocks needs to be read at the pace of a
    /// contiguous one.
    pub(super) fn prefetch_ahead(&self, throttler: &Throttler, serving: u32) {
        let Candidates::Ranked(tiers) = &self.candidates else {
            return;
        };
        let groups = &self.groups;
        if let Some(g) = tiers
            .upcoming(RECORD_AHEAD)
            .and_then(|g| groups.get(g as usize))
        {
            polite_throttle_core::hooks::prefetch(g);
        }
        let Some(g) = tiers.upcoming(POINTEES_AHEAD) else {
            if let Some(g) = groups.get(serving as usize) {
                g.buckets.prefetch_nth(
                    &self.blocks,
                    self.head_lifo(g.buckets.first_key()),
                    SERVING_AHEAD,
                );
            }
            return;
        };
        if let Some(g) = groups.get(g as usize) {
            match &g.scopes {
                Scopes::One(s) => throttler.prefetch_hint(&s.hint),
                Scopes::Many(scopes) => {
                    polite_throttle_core::hooks::prefetch(scopes);
                    for s in scopes.iter() {
                        throttler.prefetch_hint(&s.hint);
                    }
                }
            }
            // The key (the host) goes back into the URL when the request is decoded: its
            // first and last bytes, as a key often straddles two lines.
            let key = g.key.as_bytes();
            if let (Some(first), Some(last)) = (key.first(), key.last()) {
                polite_throttle_core::hooks::prefetch(first);
                polite_throttle_core::hooks::prefetch(last);
            }
            g.buckets
                .prefetch(&self.blocks, self.head_lifo(g.buckets.first_key()));
        }
    }

    /// Pops the best group that is still a candidate.
    fn pop_candidate(&mut self, throttler: &Throttler) -> Option<u32> {
        match &mut self.candidates {
            Candidates::Ranked(tiers) => loop {
                let (tier, group, epoch) = tiers.pop()?;
                let g = &mut self.groups[group as usize];
                if !(g.live && g.epoch == epoch && g.state == GroupState::Candidate) {
                    continue;
                }
                // A group sharing a scope may have been loaded by other groups since it
                // was ranked: re-rank it lazily.
                if g.shared {
                    g.load = g.with_uses(|u| throttler.load(u));
                    let fresh = g.tier();
                    if fresh != tier {
                        tiers.push(fresh, (g.last_served, group, epoch));
                        continue;
                    }
                }
                return Some(group);
            },
            Candidates::Slots { set, last } => {
                let first_active = set.first()?.0;
                let after = last.as_ref().and_then(|name| {
                    set.range((first_active, name.clone(), u32::MAX)..)
                        .take_while(|(a, _, _)| *a == first_active)
                        .find(|(_, n, _)| n != name)
                        .cloned()
                });
                let pick = after.or_else(|| set.first().cloned())?;
                set.remove(&pick);
                *last = Some(pick.1.clone());
                Some(pick.2)
            }
        }
    }

    /// Selects the next request. With `reserve`, takes it out of its group with a permit;
    /// without, only shows it (`peek`): a reserving poll at the same instant returns the
    /// same request.
    pub(crate) fn poll<'l>(
        &mut self,
        throttler: &mut Throttler,
        leases: &'l mut Leases<H>,
        now: Timestamp,
        reserve: bool,
    ) -> SchedPoll<'l, H> {
        self.handle_events(throttler, now);
        while self.queued > 0 {
            let global_full = throttler.in_flight() >= throttler.settings().concurrent_requests;
            let group = if global_full {
                // Only the unthrottled lane bypasses the global cap.
                match self.unthrottled_candidate() {
                    Some(g) => g,
                    None => return SchedPoll::Blocked,
                }
            } else {
                match self.pop_candidate(throttler) {
                    Some(g) => {
                        self.prefetch_ahead(throttler, g);
                        g
                    }
                    None => break,
                }
            };
            let g = &mut self.groups[group as usize];
            let decision = if reserve {
                acquire(throttler, g, now).map(Some)
            } else if g.unthrottled() {
                Ok(None)
            } else {
                g.with_uses(|uses| throttler.check(uses, now).map(|()| None))
            };
            match decision {
                Ok(Some(permit)) => {
                    let g = &mut self.groups[group as usize];
                    g.load = match &g.scopes {
                        Scopes::One(s) => throttler.load_hinted(&s.hint),
                        Scopes::Many(_) => throttler.permit_load(&permit),
                    };
                    let woken_by = g.woken_by.take();
                    let (seq, record) = self.take_head(group, permit, leases);
                    if let Some(s) = woken_by {
                        // The scope may allow more: let its next parked group try.
                        self.rearm(s, throttler, now);
                    }
                    return SchedPoll::Ready { seq, group, record };
                }
                Ok(None) => {
                    let woken = self.groups[group as usize].woken_by;
                    self.make_candidate(group, woken);
                    return SchedPoll::Peeked { group };
                }
                Err(NotReady::Blocked) => match self.blocking_scope(group, throttler, now) {
                    Some(scope) => self.park_after_attempt(group, scope, throttler, now),
                    None => {
                        // Held by the global cap: keep its place and wait for a completion.
                        let woken = self.groups[group as usize].woken_by;
                        self.make_candidate(group, woken);
                        return SchedPoll::Blocked;
                    }
                },
                Err(NotReady::NotUntil(t)) => {
                    let scope = self.binding_scope(group, t, throttler, now);
                    self.park_after_attempt(group, scope, throttler, now);
                    self.arm(scope, t);
                }
            }
        }
        if self.queued == 0 && self.delayed.is_empty() {
            return SchedPoll::Empty;
        }
        match self.next_event() {
            Some(t) => SchedPoll::NotUntil(t),
            None => SchedPoll::Blocked,
        }
    }

    fn unthrottled_candidate(&mut self) -> Option<u32> {
        let &g = self.by_key.get("")?;
        if self.groups[g as usize].state != GroupState::Candidate {
            return None;
        }
        self.leave_candidates(g);
        Some(g)
    }

    /// Takes the head request out of a candidate group that just got `permit`, into a
    /// new lease record.
    pub(super) fn take_head<'l>(
        &mut self,
        group: u32,
        permit: Permit,
        leases: &'l mut Leases<H>,
    ) -> (u64, &'l mut LeaseRecord<H>) {
        self.tick += 1;
        let tick = self.tick;
        let lifo = self.head_lifo(self.head_key(group));
        let g = &mut self.groups[group as usize];
        let (key, e) = g
            .buckets
            .take(&mut self.blocks, lifo)
            .expect("a candidate has requests");
        g.len -= 1;
        g.active += 1;
        g.last_served = tick;
        self.queued -= 1;
        if g.len == 0 {
            g.state = GroupState::Idle;
        } else {
            self.make_candidate(group, None);
        }
        let record = LeaseRecord {
            group,
            permit,
            priority: key.0.0,
            start: false,
            dont_track: false,
            handle: e.handle,
        };
        (e.seq, leases.insert(e.seq, record))
    }

    /// A leased request of `group` ended (completed or put back), leaving its busiest
    /// scope at `load`: its scopes may let parked groups through.
    pub(crate) fn lease_ended(
        &mut self,
        group: u32,
        load: Option<f64>,
        throttler: &mut Throttler,
        now: Timestamp,
    ) {
        let candidate = self.groups[group as usize].state == GroupState::Candidate;
        if candidate && self.policy == Policy::SlotAware {
            self.leave_candidates(group);
        }
        let g = &mut self.groups[group as usize];
        g.active = g.active.saturating_sub(1);
        let load = load.unwrap_or(g.load);
        let reload = load != g.load;
        g.load = load;
        // The slot-aware order depends on `active`; the ranked one on load.
        if candidate && (self.policy == Policy::SlotAware || reload) {
            let woken = g.woken_by;
            self.make_candidate(group, woken);
        }
        // One scope is the common case; the general loop costs ~20 instructions more
        // per complete (it re-borrows the group to index its scopes each round).
        if let Scopes::One(s) = &self.groups[group as usize].scopes {
            let s = s.id;
            self.rearm(s, throttler, now);
        } else {
            for i in 0..self.groups[group as usize].scopes.as_slice().len() {
                let s = self.groups[group as usize].scopes.as_slice()[i].id;
                self.rearm(s, throttler, now);
            }
        }
        self.collect(group);
    }
}
