//! Throttling-aware scheduling: which queued request goes next.
//!
//! Requests are grouped by scope set. A group with queued requests is in exactly one of
//! two places:
//!
//! - a **candidate**: it may be able to send now. Candidates are ordered by the policy:
//!   throttling-aware (head priority, other requests before start requests, lower load of
//!   the busiest scope, larger quota amount, least recently served) or slot-aware (fewest
//!   requests in flight, then round-robin by group name);
//! - **parked on one scope** that stops it: the scope whose delay, backoff or quota ends
//!   last, or whose concurrency is full. Each scope keeps its parked groups in priority
//!   order and has at most one timer. When the scope's time comes, or one of its requests
//!   completes, it wakes its best parked group only; if that group cannot use the chance
//!   (another of its scopes stops it), the chance passes to the next one.
//!
//! So a poll costs O(log n) in the number of groups, one slow scope never blocks the
//! others, and a scope shared by thousands of groups wakes them one at a time instead of
//! all at once. Requests held only by their own `delay` wait in the event heap and join
//! their group, at their sequence position, when it ends.
//!
//! Here: the [`Dispatcher`] and its accessors. Its parts: `groups` (groups by scope set,
//! their creation and collection), `tiers` (the candidate order), `parking` (groups parked
//! on the scope that stops them, scope timers and wake-ups) and `poll` (queueing, and
//! picking and handing out the next request).

use alloc::collections::{BTreeSet, BinaryHeap};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cmp::Reverse;

use hashbrown::HashMap;
use polite_throttle_core::Timestamp;

use crate::settings::{QueueOrder, StartOrder};

use crate::buckets::{BucketKey, Entry, EntryBlocks};
use crate::leases::LeaseRecord;

mod groups;
mod parking;
mod poll;
#[cfg(test)]
mod tests;
mod tiers;

use groups::Group;
use tiers::{Rank, Tiers};

/// How the frontier chooses among groups that may send now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// Highest priority first; at equal priority other requests before start requests,
    /// then the lower load of the group's busiest scope, then the larger quota amount,
    /// then round-robin.
    #[default]
    ThrottlingAware,
    /// Scrapy's downloader-aware order: the group (download slot) with the fewest
    /// requests in flight, ties broken round-robin by name; priority decides within a
    /// group.
    SlotAware,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupState {
    /// Nothing queued right now (maybe delayed requests or leases in flight).
    Idle,
    Candidate,
    Parked(u32),
}

/// How many polls ahead the dispatcher starts loading a group's record (see
/// [`Dispatcher::prefetch_ahead`]). Far enough for a load from memory to arrive in time
/// at a few hundred nanoseconds per poll.
const RECORD_AHEAD: usize = 6;
/// How many polls ahead it loads what a group's record points to (by then the record
/// has arrived).
const POINTEES_AHEAD: usize = 3;
/// How many requests down the queue of the group being served it loads when the tier
/// holds too few groups to look ahead in.
const SERVING_AHEAD: usize = 6;

struct ScopeSlot {
    /// Shared with the key of `scope_ids` and, for a one-scope group, with the group's
    /// key: a host costs one copy of its name here, not three.
    name: Arc<str>,
    parked: BinaryHeap<(Rank, u32)>,
    timer: Option<Timestamp>,
    refs: u32,
    /// More than one group has used this scope.
    shared: bool,
    /// The first group that used it (marked shared when a second one comes).
    owner: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Timer(u32),
    Delay(u64),
}

struct Delayed<H> {
    group: u32,
    priority: i32,
    class: u8,
    handle: H,
}

enum Candidates {
    Ranked(Tiers),
    Slots {
        set: BTreeSet<(u32, Arc<str>, u32)>,
        last: Option<Arc<str>>,
    },
}

/// What [`Dispatcher::poll`] found.
pub(crate) enum SchedPoll<'l, H> {
    /// Reserved, taken out of its group and recorded as leased.
    Ready {
        seq: u64,
        group: u32,
        record: &'l mut LeaseRecord<H>,
    },
    /// What a reserving poll at the same instant would return.
    Peeked {
        group: u32,
    },
    NotUntil(Timestamp),
    Blocked,
    Empty,
}

pub(crate) struct Dispatcher<H> {
    policy: Policy,
    order: QueueOrder,
    start_order: StartOrder,
    groups: Vec<Group<H>>,
    /// What every group's queues are made of.
    blocks: EntryBlocks<H>,
    free_groups: Vec<u32>,
    by_key: HashMap<Arc<str>, u32>,
    scopes: Vec<ScopeSlot>,
    /// Entries (live or stale) in each scope's parked heap, kept apart from the scope
    /// slots so a completion can skip scopes nobody waits on without touching them.
    parked_len: Vec<u32>,
    scope_ids: HashMap<Arc<str>, u32>,
    free_scopes: Vec<u32>,
    candidates: Candidates,
    events: BinaryHeap<Reverse<(Timestamp, Event)>>,
    delayed: HashMap<u64, Delayed<H>>,
    tick: u64,
    queued: usize,
}

impl<H> Dispatcher<H> {
    pub(crate) fn new(policy: Policy, order: QueueOrder, start_order: StartOrder) -> Self {
        Dispatcher {
            policy,
            order,
            start_order,
            groups: Vec::new(),
            blocks: EntryBlocks::default(),
            free_groups: Vec::new(),
            by_key: HashMap::new(),
            scopes: Vec::new(),
            parked_len: Vec::new(),
            scope_ids: HashMap::new(),
            free_scopes: Vec::new(),
            candidates: match policy {
                Policy::ThrottlingAware => Candidates::Ranked(Tiers::default()),
                Policy::SlotAware => Candidates::Slots {
                    set: BTreeSet::new(),
                    last: None,
                },
            },
            events: BinaryHeap::new(),
            delayed: HashMap::new(),
            tick: 0,
            queued: 0,
        }
    }

    /// Requests queued (ready or parked), not counting delayed ones.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Requests held back by their own delay.
    pub(crate) fn delayed(&self) -> usize {
        self.delayed.len()
    }

    /// Groups in memory.
    pub(crate) fn groups(&self) -> usize {
        self.by_key.len()
    }

    pub(crate) fn group_key(&self, group: u32) -> &str {
        &self.groups[group as usize].key
    }

    /// The group's key if it is one plain scope name (a host its records may leave out).
    pub(crate) fn plain_key(&self, group: u32) -> Option<&str> {
        let g = &self.groups[group as usize];
        g.plain.then_some(&*g.key)
    }

    /// The earliest instant a timer or a delayed request is due.
    pub(crate) fn next_event(&self) -> Option<Timestamp> {
        self.events.peek().map(|Reverse((t, _))| *t)
    }

    /// The class of a request: 1 for start requests ordered separately.
    fn class(&self, start: bool) -> u8 {
        u8::from(start && self.start_order != StartOrder::Same)
    }

    fn lifo(&self, class: u8) -> bool {
        if class == 1 {
            self.start_order == StartOrder::Lifo
        } else {
            self.order == QueueOrder::Lifo
        }
    }

    /// The group of `key` if there is one (none is created).
    pub(crate) fn group_of(&self, key: &str) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// Starts loading group `group`'s record (the first step of a push's prefetch).
    pub(crate) fn prefetch_group(&self, group: u32) {
        if let Some(g) = self.groups.get(group as usize) {
            polite_throttle_core::hooks::prefetch(g);
        }
    }

    /// Starts loading what a push into `group` at `priority` will read, once the group's
    /// record has arrived (see [`Buckets::prefetch_push`] for the two steps).
    pub(crate) fn prefetch_push(&self, group: u32, priority: i32, start: bool, second: bool) {
        if let Some(g) = self.groups.get(group as usize) {
            let key = (Reverse(priority), self.class(start));
            g.buckets.prefetch_push(&self.blocks, key, second);
        }
    }

    /// The request the next poll will most likely take (its slot was prefetched by the
    /// poll before), for the store to prefetch its payload.
    pub(crate) fn upcoming_head(&self) -> Option<(u64, &H)> {
        let Candidates::Ranked(tiers) = &self.candidates else {
            return None;
        };
        let e = self.head(self.groups.get(tiers.upcoming(0)? as usize)?)?;
        Some((e.seq, &e.handle))
    }

    /// The request a candidate group would hand out next.
    pub(crate) fn peek_head(&self, group: u32) -> (u64, &H) {
        let e = self.head(&self.groups[group as usize]);
        let e = e.expect("a group's buckets are never empty");
        (e.seq, &e.handle)
    }

    /// The entry `g` hands out next (what [`take_head`](Self::take_head) takes).
    fn head<'g>(&'g self, g: &'g Group<H>) -> Option<&'g Entry<H>> {
        g.buckets
            .peek(&self.blocks, self.head_lifo(g.buckets.first_key()))
    }

    /// Whether a group whose head bucket has `key` pops from the back.
    fn head_lifo(&self, key: Option<BucketKey>) -> bool {
        key.is_some_and(|k| self.lifo(k.1))
    }
}
