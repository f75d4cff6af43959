//! Which sequence numbers are held (queued or leased) and which of those are leased:
//! two bits per number in 64-number chunks, kept only for chunks with a held request.

use hashbrown::HashMap;

#[derive(Clone, Copy, Debug, Default)]
struct Chunk {
    live: u64,
    leased: u64,
}

/// The set of held sequence numbers with their lease marks. Sequence numbers are dense
/// (the frontier hands them out one by one), so this costs well under a byte per held
/// request; a scattered few cost about 30 bytes each.
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveSet {
    chunks: HashMap<u64, Chunk>,
    live: u64,
    leased: u64,
}

fn split(seq: u64) -> (u64, u64) {
    (seq >> 6, 1u64 << (seq & 63))
}

impl LiveSet {
    /// Marks `seq` held (leased or not). Returns whether it was held before.
    pub(crate) fn insert(&mut self, seq: u64, leased: bool) -> bool {
        let (key, bit) = split(seq);
        let c = self.chunks.entry(key).or_default();
        let was = c.live & bit != 0;
        if was {
            if c.leased & bit != 0 {
                self.leased -= 1;
            }
        } else {
            self.live += 1;
        }
        c.live |= bit;
        if leased {
            c.leased |= bit;
            self.leased += 1;
        } else {
            c.leased &= !bit;
        }
        was
    }

    /// Forgets `seq`; `Some(leased)` if it was held.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<bool> {
        let (key, bit) = split(seq);
        let c = self.chunks.get_mut(&key)?;
        if c.live & bit == 0 {
            return None;
        }
        let leased = c.leased & bit != 0;
        c.live &= !bit;
        c.leased &= !bit;
        self.live -= 1;
        if leased {
            self.leased -= 1;
        }
        if c.live == 0 {
            self.chunks.remove(&key);
        }
        Some(leased)
    }

    /// `Some(leased)` if `seq` is held.
    pub(crate) fn get(&self, seq: u64) -> Option<bool> {
        let (key, bit) = split(seq);
        let c = self.chunks.get(&key)?;
        (c.live & bit != 0).then_some(c.leased & bit != 0)
    }

    /// Marks a held `seq` leased; `false` if it is not held.
    pub(crate) fn set_leased(&mut self, seq: u64) -> bool {
        let (key, bit) = split(seq);
        let Some(c) = self.chunks.get_mut(&key) else {
            return false;
        };
        if c.live & bit == 0 {
            return false;
        }
        if c.leased & bit == 0 {
            c.leased |= bit;
            self.leased += 1;
        }
        true
    }

    /// Clears every lease mark.
    pub(crate) fn clear_leased(&mut self) {
        if self.leased == 0 {
            return;
        }
        for c in self.chunks.values_mut() {
            c.leased = 0;
        }
        self.leased = 0;
    }

    /// Held requests.
    pub(crate) fn len(&self) -> u64 {
        self.live
    }

    /// Held requests marked leased.
    pub(crate) fn leased(&self) -> u64 {
        self.leased
    }

    /// Approximate heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * (core::mem::size_of::<(u64, Chunk)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_live_and_leased() {
        let mut s = LiveSet::default();
        assert!(!s.insert(5, false));
        assert!(!s.insert(70, true));
        assert!(s.insert(70, true));
        assert_eq!((s.len(), s.leased()), (2, 1));
        assert_eq!(s.get(5), Some(false));
        assert_eq!(s.get(70), Some(true));
        assert_eq!(s.get(6), None);
        assert!(s.set_leased(5));
        assert!(!s.set_leased(6));
        assert_eq!(s.leased(), 2);
        s.clear_leased();
        assert_eq!(
            (s.get(5), s.get(70), s.leased()),
            (Some(false), Some(false), 0)
        );
        assert_eq!(s.remove(70), Some(false));
        assert_eq!(s.remove(70), None);
        assert_eq!(s.len(), 1);
        assert!(s.insert(5, true));
        assert_eq!(s.remove(5), Some(true));
        assert_eq!((s.len(), s.leased(), s.chunks.len()), (0, 0, 0));
    }
}
