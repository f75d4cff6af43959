//! Bookkeeping of queued requests: tickets, their scheduled wake-ups, and the order in
//! which they should look again. The per-scope FIFO queues live in the scope states; this
//! module owns everything else about a waiter.

use alloc::collections::{BinaryHeap, VecDeque};
use alloc::vec::Vec;
use core::cmp::Reverse;

use hashbrown::HashMap;

use crate::throttler::{RequestFlags, Ticket};
use crate::time::Timestamp;

#[derive(Debug)]
pub(crate) struct WaitEntry {
    /// Slot and quota amount of each scope the request needs.
    pub(crate) scopes: Vec<(u32, f64)>,
    pub(crate) flags: RequestFlags,
    deadline: Option<Timestamp>,
    wake_queued: bool,
    in_global: bool,
    /// A global slot is reserved for this waiter (it was woken for it).
    pub(crate) holds_global: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Waiters {
    next: u64,
    entries: HashMap<u64, WaitEntry>,
    timers: BinaryHeap<Reverse<(Timestamp, u64)>>,
    wake: VecDeque<u64>,
    /// Waiters held only by the global `concurrent_requests` cap, in arrival order.
    global: VecDeque<u64>,
    /// Global slots reserved for woken waiters that have not polled yet.
    reserved: u32,
}

impl Waiters {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no request waits. Then no scope's queue holds a ticket either: a ticket
    /// leaves its scopes' queues when it leaves here (admitted or cancelled).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn insert(&mut self, scopes: Vec<(u32, f64)>, flags: RequestFlags) -> Ticket {
        let t = self.next;
        self.next += 1;
        self.entries.insert(
            t,
            WaitEntry {
                scopes,
                flags,
                deadline: None,
                wake_queued: false,
                in_global: false,
                holds_global: false,
            },
        );
        Ticket(t)
    }

    pub(crate) fn take(&mut self, t: u64) -> Option<WaitEntry> {
        self.entries.remove(&t)
    }

    /// Puts back an entry taken with [`take`](Self::take) that is still waiting.
    pub(crate) fn put_back(&mut self, t: u64, entry: WaitEntry) {
        self.entries.insert(t, entry);
    }

    /// Queues `t` to look again (once, however often it is woken before it does).
    pub(crate) fn wake(&mut self, t: u64) {
        if let Some(e) = self.entries.get_mut(&t)
            && !e.wake_queued
        {
            e.wake_queued = true;
            self.wake.push_back(t);
        }
    }

    /// Global slots reserved for woken waiters.
    pub(crate) fn reserved(&self) -> u32 {
        self.reserved
    }

    /// An unreserved global slot is free: reserve it for the longest-waiting request held
    /// by the global cap, and wake that request.
    #[inline]
    pub(crate) fn wake_global(&mut self) {
        if !self.global.is_empty() {
            self.wake_first_global();
        }
    }

    #[inline(never)]
    fn wake_first_global(&mut self) {
        while let Some(t) = self.global.pop_front() {
            if let Some(e) = self.entries.get_mut(&t)
                && e.in_global
            {
                e.in_global = false;
                e.holds_global = true;
                self.reserved += 1;
                self.wake(t);
                return;
            }
        }
    }

    /// `entry` gives its reserved global slot back (it cannot use it, or is cancelled):
    /// the next global waiter gets it.
    pub(crate) fn return_global(&mut self, entry: &mut WaitEntry) {
        if entry.holds_global {
            entry.holds_global = false;
            self.reserved -= 1;
            self.wake_global();
        }
    }

    /// `entry` is admitted and uses its reserved slot.
    pub(crate) fn use_global(&mut self, entry: &mut WaitEntry) {
        if entry.holds_global {
            entry.holds_global = false;
            self.reserved -= 1;
        }
    }

    pub(crate) fn block_on_global(&mut self, t: u64) {
        if let Some(e) = self.entries.get_mut(&t)
            && !e.in_global
        {
            e.in_global = true;
            self.global.push_back(t);
        }
    }

    /// Wakes `t` at `at` (replacing an earlier schedule).
    pub(crate) fn schedule(&mut self, t: u64, at: Timestamp) {
        if let Some(e) = self.entries.get_mut(&t)
            && e.deadline != Some(at)
        {
            e.deadline = Some(at);
            self.timers.push(Reverse((at, t)));
        }
    }

    /// The earliest scheduled wake-up (possibly one that no longer matters: waking early
    /// is harmless).
    pub(crate) fn next_deadline(&self) -> Option<Timestamp> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    /// Wakes every waiter scheduled at or before `now`.
    pub(crate) fn expire(&mut self, now: Timestamp) {
        while let Some(&Reverse((at, t))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let due = self.entries.get_mut(&t).is_some_and(|e| {
                e.deadline == Some(at) && {
                    e.deadline = None;
                    true
                }
            });
            if due {
                self.wake(t);
            }
        }
    }

    pub(crate) fn next_wakeup(&mut self) -> Option<u64> {
        while let Some(t) = self.wake.pop_front() {
            if let Some(e) = self.entries.get_mut(&t) {
                e.wake_queued = false;
                return Some(t);
            }
        }
        None
    }
}
