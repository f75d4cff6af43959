//! Parking: groups parked on the scope that stops them, scope timers and wake-ups.

use core::cmp::Reverse;

use polite_throttle_core::{NotReady, ScopeUse, Throttler, Timestamp};

use super::{Candidates, Dispatcher, Event, GroupState};

impl<H> Dispatcher<H> {
    #[inline]
    pub(super) fn make_candidate(&mut self, group: u32, woken_by: Option<u32>) {
        let g = &mut self.groups[group as usize];
        g.epoch = g.epoch.wrapping_add(1);
        g.state = GroupState::Candidate;
        g.woken_by = woken_by;
        match &mut self.candidates {
            Candidates::Ranked(tiers) => {
                tiers.push(g.tier(), (g.last_served, group, g.epoch));
            }
            Candidates::Slots { set, .. } => {
                set.insert((g.active, g.key.clone(), group));
            }
        }
    }

    /// Takes `group` out of the slot-aware set (the ranked heap drops stale entries lazily).
    pub(super) fn leave_candidates(&mut self, group: u32) {
        if let Candidates::Slots { set, .. } = &mut self.candidates {
            let g = &self.groups[group as usize];
            set.remove(&(g.active, g.key.clone(), group));
        }
    }

    pub(super) fn park(&mut self, group: u32, scope: u32) {
        if self.groups[group as usize].state == GroupState::Candidate {
            self.leave_candidates(group);
        }
        let rank = self.rank(group);
        let g = &mut self.groups[group as usize];
        g.epoch = g.epoch.wrapping_add(1);
        g.state = GroupState::Parked(scope);
        g.woken_by = None;
        let epoch = g.epoch;
        self.scopes[scope as usize].parked.push((rank, epoch));
        self.parked_len[scope as usize] += 1;
    }

    pub(super) fn arm(&mut self, scope: u32, at: Timestamp) {
        let slot = &mut self.scopes[scope as usize];
        if slot.timer.is_none_or(|t| at < t) {
            slot.timer = Some(at);
            self.events.push(Reverse((at, Event::Timer(scope))));
        }
    }

    /// The best group still parked on `scope`. A group sharing a scope with others was
    /// ranked with the load it had when it parked; its rank is refreshed (lazily, at the
    /// top of the heap) so that equal-priority groups tie-break on today's load.
    fn best_parked(&mut self, scope: u32, throttler: &Throttler) -> Option<u32> {
        loop {
            let &(rank, epoch) = self.scopes[scope as usize].parked.peek()?;
            let group = rank.group();
            let g = &self.groups[group as usize];
            if g.live && g.epoch == epoch && g.state == GroupState::Parked(scope) {
                if g.shared {
                    let load = g.with_uses(|u| throttler.load(u));
                    self.groups[group as usize].load = load;
                    let fresh = self.rank(group);
                    if fresh != rank {
                        let parked = &mut self.scopes[scope as usize].parked;
                        parked.pop();
                        parked.push((fresh, epoch));
                        continue;
                    }
                }
                return Some(group);
            }
            self.scopes[scope as usize].parked.pop();
            self.parked_len[scope as usize] -= 1;
        }
    }

    /// Gives `scope`'s best parked group a chance if the scope's own gates allow a send
    /// now; otherwise arms the scope's timer (or leaves it to a completion if it is full).
    #[inline]
    pub(super) fn rearm(&mut self, scope: u32, throttler: &mut Throttler, now: Timestamp) {
        if self.parked_len[scope as usize] != 0 {
            self.rearm_parked(scope, throttler, now);
        }
    }

    /// [`rearm`](Self::rearm) of a scope with parked groups.
    #[inline(never)]
    fn rearm_parked(&mut self, scope: u32, throttler: &mut Throttler, now: Timestamp) {
        let Some(best) = self.best_parked(scope, throttler) else {
            return;
        };
        let g = &self.groups[best as usize];
        let amount = g
            .scopes
            .as_slice()
            .iter()
            .find(|s| s.id == scope)
            .map_or(1.0, |s| s.amount);
        let name = &self.scopes[scope as usize].name;
        match throttler.check_scope(ScopeUse::with_amount(name, amount), now) {
            Ok(()) => {
                self.scopes[scope as usize].parked.pop();
                self.parked_len[scope as usize] -= 1;
                self.make_candidate(best, Some(scope));
            }
            Err(NotReady::NotUntil(t)) => self.arm(scope, t),
            Err(NotReady::Blocked) => {}
        }
    }

    /// Releases delayed requests and fires scope timers due at `now`.
    pub(super) fn handle_events(&mut self, throttler: &mut Throttler, now: Timestamp) {
        while let Some(&Reverse((t, event))) = self.events.peek() {
            if t > now {
                break;
            }
            self.events.pop();
            match event {
                Event::Delay(seq) => {
                    if let Some(d) = self.delayed.remove(&seq) {
                        self.groups[d.group as usize].delayed -= 1;
                        self.enqueue(d.group, seq, d.handle, d.priority, d.class);
                    }
                }
                Event::Timer(scope) => {
                    if self.scopes[scope as usize].timer == Some(t) {
                        self.scopes[scope as usize].timer = None;
                        self.rearm(scope, throttler, now);
                    }
                }
            }
        }
    }

    pub(super) fn park_after_attempt(
        &mut self,
        group: u32,
        scope: u32,
        throttler: &mut Throttler,
        now: Timestamp,
    ) {
        let woken_by = self.groups[group as usize].woken_by.take();
        self.park(group, scope);
        // The chance this group was woken for is still unused: pass it on.
        if let Some(s) = woken_by.filter(|&s| s != scope) {
            self.rearm(s, throttler, now);
        }
    }

    /// The scope of `group` whose own wait ends at `t` (the latest of its scopes).
    pub(super) fn binding_scope(
        &mut self,
        group: u32,
        t: Timestamp,
        throttler: &mut Throttler,
        now: Timestamp,
    ) -> u32 {
        let g = &self.groups[group as usize];
        let scopes = g.scopes.as_slice();
        if let [one] = scopes {
            return one.id;
        }
        let mut best = (Timestamp::ZERO, scopes[0].id);
        for s in scopes {
            if let Err(NotReady::NotUntil(u)) =
                throttler.check_scope(ScopeUse::with_amount(g.name(s), s.amount), now)
            {
                if u == t {
                    return s.id;
                }
                if u > best.0 {
                    best = (u, s.id);
                }
            }
        }
        best.1
    }

    /// The scope of `group` whose concurrency is full, if any.
    pub(super) fn blocking_scope(
        &mut self,
        group: u32,
        throttler: &mut Throttler,
        now: Timestamp,
    ) -> Option<u32> {
        let g = &self.groups[group as usize];
        g.scopes.as_slice().iter().find_map(|s| {
            (throttler.check_scope(ScopeUse::with_amount(g.name(s), s.amount), now)
                == Err(NotReady::Blocked))
            .then_some(s.id)
        })
    }

    /// Something changed for the better on `scope` (configuration, quota): look again.
    pub(crate) fn scope_changed(&mut self, scope: &str, throttler: &mut Throttler, now: Timestamp) {
        if let Some(&s) = self.scope_ids.get(scope) {
            self.rearm(s, throttler, now);
        }
    }
}
