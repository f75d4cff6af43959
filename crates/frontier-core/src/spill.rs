//! Where a [`VolatileStore`](crate::VolatileStore) keeps payloads too long to sit in a
//! queue slot: cells of a few sizes cut from 64 KiB chunks, reused last-freed-first.
//!
//! Boxing each long payload on its own measured 3× slower polls than inline ones at
//! 10,000 hosts (glibc): a drain frees payloads in scheduling order, not in the order
//! they were allocated, and the allocator then walks and merges chunks scattered over
//! the whole heap. Here a freed cell goes on its size's free list and the next long
//! payload of that size takes it while it is still in the cache; nothing else is
//! touched. The memory stays with the store while any long payload is queued (the most
//! it held at once, like a queue's own blocks between sweeps) and is released when the
//! last one goes.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

/// Cell sizes, smallest first. A payload takes the smallest cell that holds it; longer
/// ones than the last are boxed on their own (rare: a URL of several kilobytes).
pub(crate) const CELL_SIZES: [usize; 10] = [64, 96, 128, 160, 192, 256, 384, 512, 768, 1024];

/// Bytes per chunk (cells of one size are cut from chunks of this size).
const CHUNK_BYTES: usize = 64 * 1024;

/// Chunk bytes an empty spill keeps for the next long payloads.
const KEPT_WHEN_EMPTY: usize = 1024 * 1024;

/// Cell `id` of size class `class`: its chunk, and its first byte's offset there.
#[inline]
fn place(class: usize, id: u32) -> (usize, usize) {
    let size = CELL_SIZES.get(class).copied().unwrap_or(CHUNK_BYTES);
    let per_chunk = CHUNK_BYTES / size;
    (id as usize / per_chunk, (id as usize % per_chunk) * size)
}

/// Where a spilled payload is: its size class, its cell and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    class: u8,
    len: u16,
    id: u32,
}

impl Cell {
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }
}

/// The cells of one size.
#[derive(Clone, Default)]
struct Class {
    chunks: Vec<Box<[u8]>>,
    /// Freed cells, the last freed on top.
    free: Vec<u32>,
    /// Cells handed out so far from the chunks (the ones after it were never used).
    fresh: u32,
}

/// The spill cells of one store.
#[derive(Clone, Default)]
pub(crate) struct Spill {
    classes: [Class; CELL_SIZES.len()],
    /// Cells holding a payload.
    live: usize,
}

impl Spill {
    /// Copies `bytes` into a free cell; `None` if they are longer than the largest cell.
    pub(crate) fn put(&mut self, bytes: &[u8]) -> Option<Cell> {
        let class = CELL_SIZES.iter().position(|&size| bytes.len() <= size)?;
        let per_chunk = CHUNK_BYTES / CELL_SIZES[class];
        let c = &mut self.classes[class];
        let id = match c.free.pop() {
            Some(id) => id,
            None => {
                let id = c.fresh;
                if id as usize == c.chunks.len() * per_chunk {
                    c.chunks
                        .push(vec![0; per_chunk * CELL_SIZES[class]].into_boxed_slice());
                }
                c.fresh += 1;
                id
            }
        };
        let (chunk, at) = place(class, id);
        c.chunks[chunk][at..at + bytes.len()].copy_from_slice(bytes);
        self.live += 1;
        Some(Cell {
            class: class as u8,
            len: bytes.len() as u16,
            id,
        })
    }

    /// The bytes `cell` holds; `None` for a cell this spill never handed out (a handle
    /// from another store).
    #[inline]
    pub(crate) fn get(&self, cell: &Cell) -> Option<&[u8]> {
        let class = usize::from(cell.class);
        let (chunk, at) = place(class, cell.id);
        self.classes
            .get(class)?
            .chunks
            .get(chunk)?
            .get(at..at + cell.len())
    }

    /// Gives `cell` back (its bytes are no longer needed). When no cell is left in use
    /// and the chunks add up to more than [`KEPT_WHEN_EMPTY`], they all go back to the
    /// allocator (below that they stay: a queue that keeps emptying and filling again
    /// would otherwise allocate a chunk for nearly every long payload).
    pub(crate) fn free(&mut self, cell: Cell) {
        let Some(c) = self.classes.get_mut(usize::from(cell.class)) else {
            return;
        };
        if cell.id >= c.fresh || self.live == 0 {
            return; // never handed out here: a handle from another store
        }
        c.free.push(cell.id);
        self.live -= 1;
        if self.live == 0 && self.chunk_bytes() > KEPT_WHEN_EMPTY {
            self.clear();
        }
    }

    /// Forgets every cell (the handles pointing at them are gone).
    pub(crate) fn clear(&mut self) {
        *self = Spill::default();
    }

    /// Cells holding a payload.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Bytes of chunks held.
    pub(crate) fn chunk_bytes(&self) -> usize {
        self.classes
            .iter()
            .map(|c| c.chunks.iter().map(|b| b.len()).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every payload put reads back unchanged until it is freed, whatever was put
        /// and freed in between; cells never overlap; an empty spill keeps at most
        /// `KEPT_WHEN_EMPTY` of chunks.
        #[test]
        fn cells_keep_their_bytes(
            ops in prop::collection::vec(
                (prop::bool::weighted(0.6), 0usize..1100, any::<u8>(), any::<prop::sample::Index>()),
                1..2000,
            ),
        ) {
            let mut spill = Spill::default();
            let mut held: Vec<(Cell, Vec<u8>)> = Vec::new();
            for (put, len, fill, pick) in ops {
                if put || held.is_empty() {
                    let bytes: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                    match spill.put(&bytes) {
                        Some(cell) => {
                            prop_assert_eq!(cell.len(), len);
                            held.push((cell, bytes));
                        }
                        None => prop_assert!(len > CELL_SIZES[CELL_SIZES.len() - 1]),
                    }
                } else {
                    let (cell, bytes) = held.swap_remove(pick.index(held.len()));
                    prop_assert_eq!(spill.get(&cell), Some(&bytes[..]));
                    spill.free(cell);
                }
                prop_assert_eq!(spill.live(), held.len());
                for (cell, bytes) in &held {
                    prop_assert_eq!(spill.get(cell), Some(&bytes[..]));
                }
            }
            for (cell, _) in held.drain(..) {
                spill.free(cell);
            }
            prop_assert_eq!(spill.live(), 0);
            prop_assert!(spill.chunk_bytes() <= KEPT_WHEN_EMPTY);
        }
    }

    #[test]
    fn a_freed_cell_is_the_next_one_taken() {
        let mut spill = Spill::default();
        let a = spill.put(&[1; 70]).unwrap();
        let b = spill.put(&[2; 70]).unwrap();
        spill.free(a);
        let c = spill.put(&[3; 80]).unwrap();
        assert_eq!(c.id, a.id);
        assert_eq!(spill.get(&c), Some(&[3; 80][..]));
        assert_eq!(spill.get(&b), Some(&[2; 70][..]));
        assert!(spill.put(&[0; 1025]).is_none());
    }

    /// A cell another spill handed out reads as nothing and frees nothing here.
    #[test]
    fn a_foreign_cell_is_refused_not_a_panic() {
        let mut other = Spill::default();
        for _ in 0..5000 {
            other.put(&[9; 500]).unwrap();
        }
        let foreign = other.put(&[9; 500]).unwrap();
        let mut spill = Spill::default();
        assert_eq!(spill.get(&foreign), None);
        spill.free(foreign);
        assert_eq!(spill.live(), 0);
        let mine = spill.put(&[1; 500]).unwrap();
        spill.free(foreign);
        assert_eq!(spill.live(), 1);
        assert_eq!(spill.get(&mine), Some(&[1; 500][..]));
    }
}
