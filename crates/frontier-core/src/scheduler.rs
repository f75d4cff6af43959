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

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cmp::Reverse;

use hashbrown::HashMap;
use polite_throttle_core::{
    NotReady, Permit, QueueOrder, RequestFlags, ScopeHint, ScopeUse, StartOrder, Throttler,
    Timestamp,
};

use crate::buckets::{BucketKey, Buckets, Entry, EntryBlocks, merge_sorted};
use crate::group::{InvalidGroupKey, is_plain_key, parse_group_key};
use crate::leases::{LeaseRecord, Leases};

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

/// How many polls ahead the scheduler starts loading a group's record (see
/// [`Scheduler::prefetch_ahead`]). Far enough for a load from memory to arrive in time
/// at a few hundred nanoseconds per poll.
const RECORD_AHEAD: usize = 6;
/// How many polls ahead it loads what a group's record points to (by then the record
/// has arrived).
const POINTEES_AHEAD: usize = 3;
/// How many requests down the queue of the group being served it loads when the tier
/// holds too few groups to look ahead in.
const SERVING_AHEAD: usize = 6;

/// One scope of a group: its number in the scheduler, where its name is in the group
/// key, the quota amount a request of the group consumes, and where the throttler keeps
/// its state.
#[derive(Clone, Copy, Debug)]
struct GroupScope {
    id: u32,
    name: (u32, u32),
    amount: f64,
    hint: ScopeHint,
}

/// A group's scopes: one inline (a host group, the usual case), or any number (none for
/// the unthrottled lane).
#[derive(Debug)]
enum Scopes {
    One(GroupScope),
    Many(Box<[GroupScope]>),
}

impl Scopes {
    fn as_slice(&self) -> &[GroupScope] {
        match self {
            Scopes::One(s) => core::slice::from_ref(s),
            Scopes::Many(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [GroupScope] {
        match self {
            Scopes::One(s) => core::slice::from_mut(s),
            Scopes::Many(v) => v,
        }
    }
}

/// A scope group. The fields a poll reads come first, so that they share the record's
/// first cache lines (`repr(C)` keeps the order); the alignment starts a record on a cache
/// line, so its 192 bytes span exactly three lines instead of straddling four.
#[repr(C, align(64))]
struct Group<H> {
    state: GroupState,
    epoch: u32,
    live: bool,
    /// Another group uses one of its scopes: its load can change behind its back.
    shared: bool,
    /// The key is one plain scope name (no list separators): a host the records of the
    /// group may leave out of their URLs.
    plain: bool,
    len: u32,
    active: u32,
    last_served: u64,
    /// Load of its busiest scope when last looked at (a tie-breaker).
    load: f64,
    /// Total quota amount of its scopes as it ranks (a tie-breaker, see [`Rank`]).
    amount: u16,
    /// Its delayed requests not yet due (beside `amount`, in what would be padding).
    delayed: u32,
    scopes: Scopes,
    key: Arc<str>,
    buckets: Buckets<H>,
    /// The scope that woke this candidate: it gets the chance back if unused.
    woken_by: Option<u32>,
}

impl<H> Group<H> {
    /// The name of one of its scopes (a part of its key).
    fn name(&self, scope: &GroupScope) -> &str {
        self.key
            .get(scope.name.0 as usize..scope.name.1 as usize)
            .unwrap_or("")
    }

    /// Calls `f` with the group's scopes as throttler uses.
    fn with_uses<R>(&self, f: impl FnOnce(&[ScopeUse<'_>]) -> R) -> R {
        const INLINE: usize = 4;
        let scopes = self.scopes.as_slice();
        let name = |s: &GroupScope| ScopeUse::with_amount(self.name(s), s.amount);
        if scopes.len() <= INLINE {
            let mut buf = [ScopeUse::new(""); INLINE];
            for (slot, s) in buf.iter_mut().zip(scopes) {
                *slot = name(s);
            }
            f(&buf[..scopes.len()])
        } else {
            let uses: Vec<ScopeUse<'_>> = scopes.iter().map(name).collect();
            f(&uses)
        }
    }

    /// Its rank but recency (see [`tier_key`]): its head request's priority and
    /// class, its load and its quota amount. Groups of one tier are served
    /// round-robin.
    #[inline]
    fn tier(&self) -> u128 {
        let (Reverse(priority), class) = self.buckets.first_key().unwrap_or((Reverse(i32::MIN), 1));
        tier_key(priority, class, self.load, self.amount)
    }

    /// Whether the group is the unthrottled lane (no scopes).
    fn unthrottled(&self) -> bool {
        self.scopes.as_slice().is_empty()
    }
}

/// Asks the throttler for a permit on every scope of `g`, through their hints.
fn acquire<H>(
    throttler: &mut Throttler,
    g: &mut Group<H>,
    now: Timestamp,
) -> Result<Permit, NotReady> {
    let flags = RequestFlags::default().dont_throttle(g.unthrottled());
    if let Scopes::One(s) = &mut g.scopes {
        let name = g
            .key
            .get(s.name.0 as usize..s.name.1 as usize)
            .unwrap_or("");
        return throttler.try_acquire_one(
            ScopeUse::with_amount(name, s.amount),
            &mut s.hint,
            flags,
            now,
        );
    }
    let mut hints: Vec<ScopeHint> = g.scopes.as_slice().iter().map(|s| s.hint).collect();
    let result = g.with_uses(|uses| throttler.try_acquire_hinted(uses, &mut hints, flags, now));
    for (s, h) in g.scopes.as_mut_slice().iter_mut().zip(hints) {
        s.hint = h;
    }
    result
}

/// Orders candidates and parked groups, packed into one integer so that heap
/// comparisons are cheap. Greater is better (a heap's top). From the most significant
/// bits: priority, other requests before start requests, lower load (in 1/65535ths),
/// larger quota amount (the top 16 bits of its `f32` pattern, which order like the
/// numbers), least recently served; then the lower group number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    key: u128,
    group: Reverse<u32>,
}

/// A total quota amount as it ranks: the top 16 bits of its `f32` pattern, which order
/// like the numbers (0 for none).
fn amount_key(amount: f64) -> u16 {
    if amount.is_finite() && amount > 0.0 {
        ((amount as f32).to_bits() >> 16) as u16
    } else {
        0
    }
}

/// Everything of a [`Rank`] but recency: priority, other requests
/// before start requests, lower load, larger quota amount (`amount` is
/// [`amount_key`]'s).
#[inline]
fn tier_key(priority: i32, class: u8, load: f64, amount: u16) -> u128 {
    let priority = (i64::from(priority) - i64::from(i32::MIN)) as u128;
    let other = u128::from(class == 0);
    let load = u128::from(65_535 - (load.clamp(0.0, 1.0) * 65_535.0 + 0.5) as u32);
    (priority << 33) | (other << 32) | (load << 16) | u128::from(amount)
}

impl Rank {
    /// `tier` is [`tier_key`]'s.
    fn new(tier: u128, last_served: u64, group: u32) -> Self {
        let recent = u128::from((u64::MAX >> 1) - last_served.min(u64::MAX >> 1));
        Rank {
            key: (tier << 63) | recent,
            group: Reverse(group),
        }
    }

    fn group(&self) -> u32 {
        self.group.0
    }
}

/// Candidates of the throttling-aware policy: tiers (priority, class, load, amount) from
/// best to worst, each a round-robin queue ordered by when its groups were last served.
/// Serving a group moves it to the back of its tier, so a poll costs O(1) plus a lookup
/// among the few tiers (a heap over all groups would cost a cache miss per level). The
/// best tier is kept apart from the others, even while empty: a served group usually
/// goes back to it, and then no tree is searched.
#[derive(Default)]
struct Tiers {
    best: Option<(u128, TierQueue)>,
    rest: BTreeMap<Reverse<u128>, TierQueue>,
    /// Emptied queues kept for reuse: groups move between tiers all the time.
    spare: Vec<TierQueue>,
}

/// A tier's entry: (last served, group, epoch of the entry). Entries are served in
/// (last served, group) order; the epoch tells a live entry from a stale one.
type TierEntry = (u64, u32, u32);

/// One tier's groups in serving order.
///
/// A served group is the most recently served, so it joins at the back: those entries
/// form a run in order, a plain FIFO. A group that joins out of order (one never served,
/// or one re-ranked into this tier while others were served since) goes into an ordered
/// set beside the run, and the front is the lesser of the two fronts; once the set is
/// at least as large as the run, the next pop merges it into the run. So a join or a pop
/// costs O(1) in the steady state and O(log n) amortized at worst, where inserting into
/// the run at its place moved O(n) entries: pushes at many hosts with mixed priorities
/// (each raising a group into a higher tier) took quadratic time.
#[derive(Default)]
struct TierQueue {
    run: VecDeque<TierEntry>,
    /// Never empty when present; boxed, so that a queue stays as small as its run
    /// (queues move in and out of the tier map and the spares all the time).
    #[allow(
        clippy::box_collection,
        reason = "one pointer in the queue, not three words"
    )]
    late: Option<Box<BTreeSet<TierEntry>>>,
}

/// The serving order of an entry (its epoch left out).
fn serve_key(e: &TierEntry) -> (u64, u32) {
    (e.0, e.1)
}

impl TierQueue {
    #[inline]
    fn is_empty(&self) -> bool {
        self.run.is_empty() && self.late.is_none()
    }

    #[inline]
    fn push(&mut self, entry: TierEntry) {
        match self.run.back() {
            Some(back) if serve_key(back) > serve_key(&entry) => self.push_late(entry),
            _ => self.run.push_back(entry),
        }
    }

    #[inline(never)]
    fn push_late(&mut self, entry: TierEntry) {
        self.late.get_or_insert_default().insert(entry);
    }

    #[inline]
    fn pop_front(&mut self) -> Option<TierEntry> {
        if self.late.is_some() {
            return self.pop_front_late();
        }
        self.run.pop_front()
    }

    /// [`pop_front`](Self::pop_front) with entries in the ordered set.
    #[inline(never)]
    fn pop_front_late(&mut self) -> Option<TierEntry> {
        let late = self.late.as_mut()?;
        if late.len() >= self.run.len() {
            self.merge();
        } else if let (Some(l), Some(r)) = (late.first(), self.run.front())
            && serve_key(l) < serve_key(r)
        {
            // (Ties go to the run.)
            let e = late.pop_first();
            if late.is_empty() {
                self.late = None;
            }
            return e;
        }
        self.run.pop_front()
    }

    /// Moves the ordered set's entries into the run, in order. It costs O(run + set)
    /// and is done only once the set is at least as large as the run, so each entry's
    /// one move pays for it, and the polls after it take the run's fast path.
    fn merge(&mut self) {
        let Some(late) = self.late.take() else {
            return;
        };
        merge_sorted(&mut self.run, (*late).into_iter(), |l, r| {
            serve_key(l) < serve_key(r)
        });
    }

    /// The entry `n` places behind the front.
    #[inline]
    fn get(&self, n: usize) -> Option<TierEntry> {
        match &self.late {
            None => self.run.get(n).copied(),
            Some(late) => self.get_merged(late, n),
        }
    }

    /// [`get`](Self::get) with entries in the ordered set.
    #[inline(never)]
    fn get_merged(&self, late: &BTreeSet<TierEntry>, n: usize) -> Option<TierEntry> {
        let (mut run, mut late) = (self.run.iter().peekable(), late.iter().peekable());
        let mut left = n;
        loop {
            let take_late = match (late.peek(), run.peek()) {
                (Some(l), Some(r)) => serve_key(l) < serve_key(r),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            let e = if take_late { late.next() } else { run.next() };
            if left == 0 {
                return e.copied();
            }
            left -= 1;
        }
    }
}

impl Tiers {
    /// Queues `entry` in `tier`. A group usually goes back to the best tier it was
    /// taken from (a served group is the most recently served, so it lands at the back
    /// of the run): one comparison and one push, no tree searched.
    #[inline]
    fn push(&mut self, tier: u128, entry: TierEntry) {
        match &mut self.best {
            Some((t, q)) if *t == tier => q.push(entry),
            _ => self.push_elsewhere(tier, entry),
        }
    }

    /// [`push`](Self::push) to a tier other than the best one.
    #[inline(never)]
    fn push_elsewhere(&mut self, tier: u128, entry: TierEntry) {
        let queue = match &mut self.best {
            Some((t, _)) if *t > tier => {
                let spare = &mut self.spare;
                self.rest
                    .entry(Reverse(tier))
                    .or_insert_with(|| spare.pop().unwrap_or_default())
            }
            best => {
                debug_assert!(best.as_ref().is_none_or(|(t, _)| *t < tier));
                // A new best tier: the old one goes back among the others (or, left
                // empty by a pop, among the spares).
                match best.take() {
                    Some((_, q)) if q.is_empty() => self.spare.push(q),
                    Some((t, q)) => {
                        self.rest.insert(Reverse(t), q);
                    }
                    None => {}
                }
                let queue = self.spare.pop().unwrap_or_default();
                &mut best.insert((tier, queue)).1
            }
        };
        queue.push(entry);
    }

    /// The group `n` places behind the best entry of the best tier (`n = 0`: the next
    /// one [`pop`](Self::pop) returns, if still a candidate by then).
    #[inline]
    fn upcoming(&self, n: usize) -> Option<u32> {
        let (_, queue) = self.best.as_ref()?;
        queue.get(n).map(|(_, group, _)| group)
    }

    /// The best entry: (tier, group, epoch). The best tier stays in place when this
    /// empties it: the group just taken usually comes back to it (with few groups, to
    /// an empty queue each time), and a pop that finds it empty moves the next tier up.
    #[inline]
    fn pop(&mut self) -> Option<(u128, u32, u32)> {
        loop {
            let (tier, queue) = self.best.as_mut()?;
            if let Some((_, group, epoch)) = queue.pop_front() {
                return Some((*tier, group, epoch));
            }
            self.next_best();
        }
    }

    /// The best tier is empty: the next one takes its place.
    #[inline(never)]
    fn next_best(&mut self) {
        let next = self.rest.pop_first().map(|(Reverse(t), q)| (t, q));
        if let Some((_, emptied)) = core::mem::replace(&mut self.best, next) {
            self.spare.push(emptied);
        }
    }
}

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

/// What [`Scheduler::poll`] found.
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

pub(crate) struct Scheduler<H> {
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

impl<H> Scheduler<H> {
    pub(crate) fn new(policy: Policy, order: QueueOrder, start_order: StartOrder) -> Self {
        Scheduler {
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
            polite_throttle_core::prefetch(g);
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

    /// The group for `key`, created if needed.
    pub(crate) fn group_for(&mut self, key: &str) -> Result<u32, InvalidGroupKey> {
        if let Some(g) = self.group_of(key) {
            return Ok(g);
        }
        let plain = is_plain_key(key);
        let (scopes, amount, key) = if plain {
            // One host (the common case): no list to parse, nothing to collect.
            let key: Arc<str> = Arc::from(key);
            let one = GroupScope {
                id: self.intern_scope(&key, Some(&key)),
                name: (0, key.len() as u32),
                amount: 1.0,
                hint: ScopeHint::default(),
            };
            (Scopes::One(one), 1.0, key)
        } else {
            let uses: Vec<(&str, f64)> = if key.is_empty() {
                Vec::new()
            } else {
                parse_group_key(key)?
            };
            let base = key.as_ptr() as usize;
            let scopes: Vec<GroupScope> = uses
                .iter()
                .map(|&(name, amount)| {
                    let start = (name.as_ptr() as usize - base) as u32;
                    GroupScope {
                        id: self.intern_scope(name, None),
                        name: (start, start + name.len() as u32),
                        amount,
                        hint: ScopeHint::default(),
                    }
                })
                .collect();
            let scopes = match scopes[..] {
                [one] => Scopes::One(one),
                _ => Scopes::Many(scopes.into_boxed_slice()),
            };
            let amount: f64 = uses.iter().map(|(_, a)| *a).sum();
            (scopes, amount, Arc::from(key))
        };
        let group = Group {
            state: GroupState::Idle,
            epoch: 0,
            live: true,
            shared: false,
            plain,
            len: 0,
            active: 0,
            last_served: 0,
            load: 0.0,
            amount: amount_key(amount),
            scopes,
            key: key.clone(),
            buckets: Buckets::default(),
            delayed: 0,
            woken_by: None,
        };
        let g = match self.free_groups.pop() {
            Some(g) => {
                let epoch = self.groups[g as usize].epoch.wrapping_add(1);
                self.groups[g as usize] = Group { epoch, ..group };
                g
            }
            None => {
                self.groups.push(group);
                (self.groups.len() - 1) as u32
            }
        };
        for i in 0..self.groups[g as usize].scopes.as_slice().len() {
            let s = self.groups[g as usize].scopes.as_slice()[i].id as usize;
            if self.scopes[s].shared {
                self.groups[g as usize].shared = true;
                let owner = self.scopes[s].owner as usize;
                if let Some(o) = self.groups.get_mut(owner).filter(|o| o.live) {
                    o.shared = true;
                }
            } else {
                self.scopes[s].owner = g;
            }
        }
        self.by_key.insert(key, g);
        Ok(g)
    }

    /// The scope slot of `name`, created if needed; `whole` is the group's key when the
    /// scope is all of it (the slot then shares that string).
    fn intern_scope(&mut self, name: &str, whole: Option<&Arc<str>>) -> u32 {
        if let Some(&s) = self.scope_ids.get(name) {
            self.scopes[s as usize].refs += 1;
            self.scopes[s as usize].shared = true;
            return s;
        }
        let name: Arc<str> = whole.map_or_else(|| Arc::from(name), Arc::clone);
        let slot = ScopeSlot {
            name: name.clone(),
            parked: BinaryHeap::new(),
            timer: None,
            refs: 1,
            shared: false,
            owner: u32::MAX,
        };
        let s = match self.free_scopes.pop() {
            Some(s) => {
                self.scopes[s as usize] = slot;
                s
            }
            None => {
                self.scopes.push(slot);
                self.parked_len.push(0);
                (self.scopes.len() - 1) as u32
            }
        };
        self.scope_ids.insert(name, s);
        s
    }

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

    fn enqueue(&mut self, group: u32, seq: u64, handle: H, priority: i32, class: u8) {
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

    fn rank(&self, group: u32) -> Rank {
        let g = &self.groups[group as usize];
        Rank::new(g.tier(), g.last_served, group)
    }

    #[inline]
    fn make_candidate(&mut self, group: u32, woken_by: Option<u32>) {
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
    fn leave_candidates(&mut self, group: u32) {
        if let Candidates::Slots { set, .. } = &mut self.candidates {
            let g = &self.groups[group as usize];
            set.remove(&(g.active, g.key.clone(), group));
        }
    }

    fn park(&mut self, group: u32, scope: u32) {
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

    fn arm(&mut self, scope: u32, at: Timestamp) {
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
    fn rearm(&mut self, scope: u32, throttler: &mut Throttler, now: Timestamp) {
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
    fn handle_events(&mut self, throttler: &mut Throttler, now: Timestamp) {
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

    /// Starts loading what the next polls will read, so that it is in the cache by the
    /// time they get there: the group record [`RECORD_AHEAD`] polls ahead, then what the
    /// record points to (its throttler states, its key and its head request)
    /// [`POINTEES_AHEAD`] polls ahead, once the record has arrived. At thousands of
    /// groups this turns a chain of cache misses per poll into loads that overlap. With
    /// fewer groups than that in the tier, the polls ahead come back to `serving` (the
    /// group being served now): the request [`SERVING_AHEAD`] places down its queue is
    /// loaded instead, which a queue spread over blocks needs to be read at the pace of a
    /// contiguous one.
    fn prefetch_ahead(&self, throttler: &Throttler, serving: u32) {
        let Candidates::Ranked(tiers) = &self.candidates else {
            return;
        };
        let groups = &self.groups;
        if let Some(g) = tiers
            .upcoming(RECORD_AHEAD)
            .and_then(|g| groups.get(g as usize))
        {
            polite_throttle_core::prefetch(g);
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
                    polite_throttle_core::prefetch(scopes);
                    for s in scopes.iter() {
                        throttler.prefetch_hint(&s.hint);
                    }
                }
            }
            // The key (the host) goes back into the URL when the request is decoded: its
            // first and last bytes, as a key often straddles two lines.
            let key = g.key.as_bytes();
            if let (Some(first), Some(last)) = (key.first(), key.last()) {
                polite_throttle_core::prefetch(first);
                polite_throttle_core::prefetch(last);
            }
            g.buckets
                .prefetch(&self.blocks, self.head_lifo(g.buckets.first_key()));
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

    fn park_after_attempt(
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
    fn binding_scope(
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
    fn blocking_scope(
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

    /// Whether a group whose head bucket has `key` pops from the back.
    fn head_lifo(&self, key: Option<BucketKey>) -> bool {
        key.is_some_and(|k| self.lifo(k.1))
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

    /// Takes the head request out of a candidate group that just got `permit`, into a
    /// new lease record.
    fn take_head<'l>(
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

    /// Something changed for the better on `scope` (configuration, quota): look again.
    pub(crate) fn scope_changed(&mut self, scope: &str, throttler: &mut Throttler, now: Timestamp) {
        if let Some(&s) = self.scope_ids.get(scope) {
            self.rearm(s, throttler, now);
        }
    }

    /// Drops a group that holds nothing any more.
    #[inline]
    fn collect(&mut self, group: u32) {
        let g = &self.groups[group as usize];
        if g.live && g.len == 0 && g.delayed == 0 && g.active == 0 && g.state == GroupState::Idle {
            self.drop_group(group);
        }
    }

    /// [`collect`](Self::collect) of a group that holds nothing.
    #[inline(never)]
    fn drop_group(&mut self, group: u32) {
        let key = self.groups[group as usize].key.clone();
        self.by_key.remove(&key);
        let g = &mut self.groups[group as usize];
        g.live = false;
        g.epoch = g.epoch.wrapping_add(1);
        g.buckets = Buckets::default();
        let scopes = core::mem::replace(&mut g.scopes, Scopes::Many(Box::new([])));
        self.free_groups.push(group);
        for s in scopes.as_slice().iter().map(|s| s.id) {
            let slot = &mut self.scopes[s as usize];
            slot.refs -= 1;
            if slot.refs == 0 {
                self.scope_ids.remove(&slot.name);
                self.parked_len[s as usize] = 0;
                *slot = ScopeSlot {
                    name: Arc::default(),
                    parked: BinaryHeap::new(),
                    timer: None,
                    refs: 0,
                    shared: false,
                    owner: u32::MAX,
                };
                self.free_scopes.push(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// A group's record spans three cache lines: one more, at 10,000 hosts, made the
    /// poll loop measurably slower (its records no longer fit the caches as well).
    #[test]
    fn a_group_record_is_three_cache_lines() {
        assert!(core::mem::size_of::<Group<crate::Payload>>() <= 192);
    }

    proptest! {
        /// A tier queue serves like a list sorted by (last served, group), whatever
        /// order its entries join in, and `get(n)` shows the entry n places behind the
        /// front.
        #[test]
        fn a_tier_queue_serves_like_a_sorted_list(
            ops in prop::collection::vec(
                prop_oneof![
                    3 => (0u64..40, 0u32..20).prop_map(Some),
                    2 => Just(None),
                ],
                1..300,
            ),
        ) {
            let mut queue = TierQueue::default();
            let mut model: Vec<(u64, u32)> = Vec::new();
            // The queue's entries keep their serving order apart from their epoch, so an
            // epoch per join keeps every entry distinct, as the scheduler's are.
            for (epoch, op) in ops.into_iter().enumerate() {
                match op {
                    Some((ls, g)) => {
                        queue.push((ls, g, epoch as u32));
                        let at = model.partition_point(|&e| e <= (ls, g));
                        model.insert(at, (ls, g));
                    }
                    None => {
                        let got = queue.pop_front().map(|e| serve_key(&e));
                        let want = (!model.is_empty()).then(|| model.remove(0));
                        prop_assert_eq!(got, want);
                    }
                }
                for n in 0..4 {
                    prop_assert_eq!(queue.get(n).map(|e| serve_key(&e)), model.get(n).copied());
                }
                prop_assert_eq!(queue.is_empty(), model.is_empty());
            }
        }
    }

    /// Groups joining a tier in descending order (each one ahead of all the others)
    /// go into the ordered set, not into the run at its front.
    #[test]
    fn groups_joining_out_of_order_leave_the_run_alone() {
        let mut queue = TierQueue::default();
        for g in (0..1000u32).rev() {
            queue.push((0, g, 0));
        }
        assert_eq!(queue.run.len(), 1);
        assert_eq!(queue.late.as_ref().map(|l| l.len()), Some(999));
        let served: Vec<u32> = core::iter::from_fn(|| queue.pop_front())
            .map(|e| e.1)
            .collect();
        assert_eq!(served, (0..1000).collect::<Vec<_>>());
    }
}
