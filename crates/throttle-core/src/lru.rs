//! The recency list of scope states: an intrusive doubly linked list over slot indices,
//! so touching, removing and finding the least recently used entry are all O(1).

use alloc::vec::Vec;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Links {
    prev: u32,
    next: u32,
}

/// Most recently used at the head, least recently used at the tail.
#[derive(Debug, Default)]
pub(crate) struct Lru {
    links: Vec<Links>,
    head: u32,
    tail: u32,
}

impl Lru {
    pub(crate) fn new() -> Self {
        Lru {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    /// Inserts slot `i` (not currently listed) at the head.
    pub(crate) fn push_front(&mut self, i: u32) {
        let idx = i as usize;
        if self.links.len() <= idx {
            self.links.resize(
                idx + 1,
                Links {
                    prev: NIL,
                    next: NIL,
                },
            );
        }
        self.links[idx] = Links {
            prev: NIL,
            next: self.head,
        };
        if self.head != NIL {
            self.links[self.head as usize].prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    /// Unlinks slot `i` (currently listed).
    pub(crate) fn remove(&mut self, i: u32) {
        let Links { prev, next } = self.links[i as usize];
        if prev != NIL {
            self.links[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.links[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
    }

    /// Starts loading slot `i`'s links into the CPU cache (see [`crate::prefetch::prefetch()`]).
    #[inline]
    pub(crate) fn prefetch(&self, i: u32) {
        if let Some(l) = self.links.get(i as usize) {
            crate::prefetch::prefetch(l);
        }
    }

    /// Moves slot `i` (currently listed) to the head.
    #[inline]
    pub(crate) fn touch(&mut self, i: u32) {
        let head = self.head;
        if head == i {
            return;
        }
        // Listed and not the head: it has a predecessor, and the list a head.
        let Links { prev, next } = self.links[i as usize];
        self.links[prev as usize].next = next;
        if next != NIL {
            self.links[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        self.links[i as usize] = Links {
            prev: NIL,
            next: head,
        };
        self.links[head as usize].prev = i;
        self.head = i;
    }

    /// The least recently used slot.
    pub(crate) fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn order(l: &Lru) -> Vec<u32> {
        let mut out = vec![];
        let mut i = l.head;
        while i != NIL {
            out.push(i);
            i = l.links[i as usize].next;
        }
        out
    }

    proptest::proptest! {
        /// The list keeps the order a plain vector would: touched or pushed slots at the
        /// front, the rest in their order, the tail last.
        #[test]
        fn behaves_like_a_vector(ops in proptest::collection::vec((0u8..3, 0u32..12), 1..200)) {
            let mut l = Lru::new();
            let mut model: Vec<u32> = Vec::new();
            for (op, i) in ops {
                let listed = model.contains(&i);
                match (op, listed) {
                    (0, false) => {
                        l.push_front(i);
                        model.insert(0, i);
                    }
                    (1, true) => {
                        l.touch(i);
                        model.retain(|&j| j != i);
                        model.insert(0, i);
                    }
                    (2, true) => {
                        l.remove(i);
                        model.retain(|&j| j != i);
                    }
                    _ => continue,
                }
                proptest::prop_assert_eq!(order(&l), model.clone());
                proptest::prop_assert_eq!(l.tail(), model.last().copied());
            }
        }
    }

    #[test]
    fn push_touch_remove() {
        let mut l = Lru::new();
        assert_eq!(l.tail(), None);
        for i in 0..4 {
            l.push_front(i);
        }
        assert_eq!(order(&l), [3, 2, 1, 0]);
        assert_eq!(l.tail(), Some(0));
        l.touch(0);
        assert_eq!(order(&l), [0, 3, 2, 1]);
        l.touch(0);
        assert_eq!(order(&l), [0, 3, 2, 1]);
        l.remove(2);
        assert_eq!(order(&l), [0, 3, 1]);
        l.remove(1);
        assert_eq!(l.tail(), Some(3));
        l.remove(0);
        l.remove(3);
        assert_eq!(l.tail(), None);
        l.push_front(7);
        assert_eq!(order(&l), [7]);
    }
}
