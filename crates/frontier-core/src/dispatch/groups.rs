//! Groups: requests queued for one scope set, their scopes, creation and collection.

use alloc::boxed::Box;
use alloc::collections::BinaryHeap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cmp::Reverse;

use polite_throttle_core::hooks::ScopeHint;
use polite_throttle_core::{NotReady, Permit, RequestFlags, ScopeUse, Throttler, Timestamp};

use super::tiers::{amount_key, tier_key};
use super::{Dispatcher, GroupState, ScopeSlot};
use crate::buckets::Buckets;
use crate::group::{InvalidGroupKey, is_plain_key, parse_group_key};

/// One scope of a group: its number in the dispatcher, where its name is in the group
/// key, the quota amount a request of the group consumes, and where the throttler keeps
/// its state.
#[derive(Clone, Copy, Debug)]
pub(super) struct GroupScope {
    pub(super) id: u32,
    pub(super) name: (u32, u32),
    pub(super) amount: f64,
    pub(super) hint: ScopeHint,
}

/// A group's scopes: one inline (a host group, the usual case), or any number (none for
/// the unthrottled lane).
#[derive(Debug)]
pub(super) enum Scopes {
    One(GroupScope),
    Many(Box<[GroupScope]>),
}

impl Scopes {
    pub(super) fn as_slice(&self) -> &[GroupScope] {
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
pub(super) struct Group<H> {
    pub(super) state: GroupState,
    pub(super) epoch: u32,
    pub(super) live: bool,
    /// Another group uses one of its scopes: its load can change behind its back.
    pub(super) shared: bool,
    /// The key is one plain scope name (no list separators): a host the records of the
    /// group may leave out of their URLs.
    pub(super) plain: bool,
    pub(super) len: u32,
    pub(super) active: u32,
    pub(super) last_served: u64,
    /// Load of its busiest scope when last looked at (a tie-breaker).
    pub(super) load: f64,
    /// Total quota amount of its scopes as it ranks (a tie-breaker, see [`Rank`]).
    pub(super) amount: u16,
    /// Its delayed requests not yet due (beside `amount`, in what would be padding).
    pub(super) delayed: u32,
    pub(super) scopes: Scopes,
    pub(super) key: Arc<str>,
    pub(super) buckets: Buckets<H>,
    /// The scope that woke this candidate: it gets the chance back if unused.
    pub(super) woken_by: Option<u32>,
}

impl<H> Group<H> {
    /// The name of one of its scopes (a part of its key).
    pub(super) fn name(&self, scope: &GroupScope) -> &str {
        self.key
            .get(scope.name.0 as usize..scope.name.1 as usize)
            .unwrap_or("")
    }

    /// Calls `f` with the group's scopes as throttler uses.
    pub(super) fn with_uses<R>(&self, f: impl FnOnce(&[ScopeUse<'_>]) -> R) -> R {
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
    pub(super) fn tier(&self) -> u128 {
        let (Reverse(priority), class) = self.buckets.first_key().unwrap_or((Reverse(i32::MIN), 1));
        tier_key(priority, class, self.load, self.amount)
    }

    /// Whether the group is the unthrottled lane (no scopes).
    pub(super) fn unthrottled(&self) -> bool {
        self.scopes.as_slice().is_empty()
    }
}

/// Asks the throttler for a permit on every scope of `g`, through their hints.
pub(super) fn acquire<H>(
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

impl<H> Dispatcher<H> {
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

    /// Drops a group that holds nothing any more.
    #[inline]
    pub(super) fn collect(&mut self, group: u32) {
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
