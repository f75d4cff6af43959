//! The permit slab: outstanding permits, the scope slots each holds, and their reuse.

use alloc::vec::Vec;

use crate::time::Timestamp;

use super::{Permit, RequestFlags, Throttler};

#[derive(Debug, Default)]
pub(super) struct PermitSlot {
    pub(super) generation: u32,
    pub(super) live: bool,
    pub(super) counted: bool,
    pub(super) dont_track: bool,
    pub(super) scopes: SlotList,
}

/// The scope slots a permit holds: up to two inline (a request usually has one scope),
/// so taking a permit allocates nothing; more spill to a vector kept for reuse.
#[derive(Debug)]
pub(super) enum SlotList {
    Inline { len: u8, ids: [u32; 2] },
    Heap(Vec<u32>),
}

impl Default for SlotList {
    fn default() -> Self {
        SlotList::Inline {
            len: 0,
            ids: [0; 2],
        }
    }
}

impl SlotList {
    pub(super) fn one(i: u32) -> Self {
        SlotList::Inline {
            len: 1,
            ids: [i, 0],
        }
    }

    pub(super) fn as_slice(&self) -> &[u32] {
        match self {
            SlotList::Inline { len, ids } => &ids[..usize::from(*len)],
            SlotList::Heap(v) => v,
        }
    }

    /// Replaces the contents with `ids`.
    pub(super) fn set(&mut self, ids: impl ExactSizeIterator<Item = u32>) {
        if let SlotList::Heap(v) = self {
            v.clear();
            v.extend(ids);
            return;
        }
        if ids.len() <= 2 {
            let mut inline = [0; 2];
            let mut len = 0;
            for (slot, id) in inline.iter_mut().zip(ids) {
                *slot = id;
                len += 1;
            }
            *self = SlotList::Inline { len, ids: inline };
        } else {
            *self = SlotList::Heap(ids.collect());
        }
    }
}

impl Throttler {
    /// Records the send on every scope and hands out the permit.
    pub(super) fn reserve(
        &mut self,
        list: &[(u32, f64)],
        flags: RequestFlags,
        now: Timestamp,
    ) -> Permit {
        for &(i, amount) in list {
            let state = &mut self.slots[i as usize];
            state.record_send(
                &self.params[state.params as usize],
                amount,
                now,
                &mut self.rng,
            );
        }
        self.in_flight += 1;
        self.new_permit(list, true, flags.dont_track)
    }

    pub(super) fn new_permit(
        &mut self,
        list: &[(u32, f64)],
        counted: bool,
        dont_track: bool,
    ) -> Permit {
        let slot = self.permit_slot();
        let p = &mut self.permits[slot as usize];
        p.live = true;
        p.counted = counted;
        p.dont_track = dont_track;
        p.scopes.set(list.iter().map(|&(i, _)| i));
        Permit {
            slot,
            generation: p.generation,
        }
    }

    /// [`new_permit`](Self::new_permit) holding `scopes` (inline ones: nothing to reuse).
    #[inline]
    pub(super) fn new_permit_of(
        &mut self,
        scopes: SlotList,
        counted: bool,
        dont_track: bool,
    ) -> Permit {
        let slot = self.permit_slot();
        let p = &mut self.permits[slot as usize];
        p.live = true;
        p.counted = counted;
        p.dont_track = dont_track;
        if !matches!(p.scopes, SlotList::Heap(_)) {
            p.scopes = scopes;
        } else {
            p.scopes.set(scopes.as_slice().iter().copied());
        }
        Permit {
            slot,
            generation: p.generation,
        }
    }

    /// A free permit slot.
    #[inline]
    fn permit_slot(&mut self) -> u32 {
        match self.free_permits.pop() {
            Some(s) => s,
            None => self.new_permit_slot(),
        }
    }

    #[inline(never)]
    fn new_permit_slot(&mut self) -> u32 {
        self.permits.push(PermitSlot::default());
        (self.permits.len() - 1) as u32
    }
}
