//! Tickets: FIFO waiters per scope, polling and cancelling them, timeouts and wake-ups.

use crate::time::Timestamp;

use super::{
    EVICTION_BUDGET, NotReady, Permit, RequestFlags, ScopeUse, Throttler, Ticket, TicketPoll,
};

impl Throttler {
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

    /// The ticket first in scope `i`'s queue. A scope has waiters only while some request
    /// waits at all: without any, its queue, outside the state's first cache line, is
    /// not read.
    #[inline]
    pub(super) fn first_waiter(&self, i: u32) -> Option<u64> {
        if self.waiters.is_empty() {
            return None;
        }
        self.slots[i as usize].waiters.front().copied()
    }

    /// Something about scope `i` changed for the better: let its first waiter look again.
    #[inline]
    pub(super) fn wake_scope(&mut self, i: u32) {
        if let Some(head) = self.first_waiter(i) {
            self.waiters.wake(head);
        }
    }
}
