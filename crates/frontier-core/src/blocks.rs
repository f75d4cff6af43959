//! Storage for queued requests: fixed-size blocks shared by every queue of a scheduler
//! and recycled through a free list.
//!
//! A queue ([`Run`]) is a chain of blocks: it grows by taking a block, never by moving
//! its entries, and a block that empties goes back on the free list, where the next
//! queue that grows takes it (the most recently freed first, while it is still in the
//! cache). So the steady flow of a crawl, requests queued at some hosts while others
//! drain, costs no allocator call at all, where a buffer per queue paid a reallocation
//! each time a queue doubled and a free each time one emptied.
//!
//! Blocks come in [`POOLS`] pools, each with its pages and free list; a queue names its
//! pool (the buckets use one per priority), so that the queues a round-robin of polls
//! visits one after the other, one priority at many hosts, were carved from the same
//! pages in the order they grew, and one long queue's blocks follow each other in
//! memory: fewer pages, fewer TLB misses, and streams the hardware prefetcher can follow
//! (at 10,000 hosts ~10% faster polls than one pool, at one host ~15%).
//!
//! Giving a block back touches nothing but the top of its pool's free list and a
//! per-page count: the block itself, cold by then, is left alone (its links are reset
//! when it is taken again). Blocks are carved from pages of [`PAGE`] blocks. When the free list
//! has grown by half since the last sweep, or every block is free, a sweep gives every
//! page whose blocks are all free (but two) back to the allocator, if the free blocks
//! outnumber a quarter of those in use: memory follows the queues down when they drain.
//! A sweep costs O(free list + pages) and comes after at least a third of that many
//! blocks were given back, so sweeping stays O(1) amortized per block.
//!
//! A queue of one entry holds it in a cell instead: one 64-byte slot from pages of
//! [`CELLS`] cells, on a free list of their own. A queue is kept per host and priority,
//! so in a broad crawl (many hosts, few requests each) most queues hold one request,
//! and a whole block for each cost ~450 bytes per request more. A queue's second entry
//! moves the first into a block; a block's queue that shrinks to one entry stays in its
//! block. Cell pages are kept for reuse, not given back: at most 64 bytes for each
//! one-entry queue there has been at once.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::ManuallyDrop;

/// Entries per block: seven 64-byte slots and the links fill eight cache lines.
pub(crate) const BLOCK: usize = 7;
/// Blocks per page (32 KiB of volatile-store requests).
pub(crate) const PAGE: usize = 64;
const NIL: u32 = u32::MAX;
/// Pools of pages: a queue takes its blocks from the pool its caller names (its
/// priority), so that queues served one after the other (same priority, other hosts)
/// sit next to each other in memory.
pub(crate) const POOLS: usize = 16;
/// Cells per page of one-entry queues (32 KiB of volatile-store requests).
pub(crate) const CELLS: usize = 512;

/// The slot of a one-entry queue, aligned like a block's slots.
#[repr(align(64))]
struct Cell<T>(Option<T>);

/// Seven entries and the links of the chain they are in, aligned so that 64-byte
/// entries each sit in one cache line.
#[repr(align(64))]
struct Block<T> {
    slots: [Option<T>; BLOCK],
    next: u32,
    prev: u32,
}

impl<T> Block<T> {
    fn new() -> Self {
        Block {
            slots: core::array::from_fn(|_| None),
            next: NIL,
            prev: NIL,
        }
    }
}

/// `ManuallyDrop`: a page is given back only once all its slots are empty, and then
/// freeing it must not read its 32 KiB again to find nothing to drop. What is still
/// queued when the blocks go is dropped by [`Blocks`]' own `Drop`.
type Page<T> = Box<[ManuallyDrop<Block<T>>]>;

/// The blocks of one scheduler's queues.
pub(crate) struct Blocks<T> {
    /// Pages by number; `None` once given back.
    pages: Vec<Option<Page<T>>>,
    /// Blocks in use per page.
    used_in: Vec<u16>,
    /// Free blocks by pool, the next to hand out last.
    free: [Vec<u32>; POOLS],
    /// The pool each page belongs to.
    page_pool: Vec<u8>,
    /// Numbers of pages given back, for the next new page.
    vacant: Vec<u32>,
    used: usize,
    /// Blocks on the free lists.
    free_len: usize,
    /// The free lists' length that starts the next sweep.
    sweep_at: usize,
    /// Pages of cells, for queues of one entry.
    cells: Vec<Box<[Cell<T>]>>,
    /// Free cells, the next to hand out last.
    free_cells: Vec<u32>,
}

impl<T> Default for Blocks<T> {
    fn default() -> Self {
        Blocks {
            pages: Vec::new(),
            used_in: Vec::new(),
            free: Default::default(),
            page_pool: Vec::new(),
            vacant: Vec::new(),
            used: 0,
            free_len: 0,
            sweep_at: 4 * PAGE,
            cells: Vec::new(),
            free_cells: Vec::new(),
        }
    }
}

impl<T> Drop for Blocks<T> {
    fn drop(&mut self) {
        for page in self.pages.iter_mut().flatten() {
            for block in page.iter_mut() {
                block.slots.iter_mut().for_each(|slot| drop(slot.take()));
            }
        }
    }
}

impl<T> Blocks<T> {
    /// Blocks in use by queues.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Cells holding a one-entry queue's entry.
    #[cfg(test)]
    pub(crate) fn cells_used(&self) -> usize {
        self.cells.len() * CELLS - self.free_cells.len()
    }

    /// Blocks allocated (in use or free), in pages not given back.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.pages.iter().flatten().count() * PAGE
    }

    #[inline]
    fn block(&self, id: u32) -> &Block<T> {
        let page = self.pages[id as usize / PAGE]
            .as_ref()
            .expect("a block in use is in a live page");
        &page[id as usize % PAGE]
    }

    #[inline]
    fn block_mut(&mut self, id: u32) -> &mut Block<T> {
        let page = self.pages[id as usize / PAGE]
            .as_mut()
            .expect("a block in use is in a live page");
        &mut page[id as usize % PAGE]
    }

    #[inline]
    fn cell(&self, id: u32) -> &Option<T> {
        &self.cells[id as usize / CELLS][id as usize % CELLS].0
    }

    #[inline]
    fn cell_mut(&mut self, id: u32) -> &mut Option<T> {
        &mut self.cells[id as usize / CELLS][id as usize % CELLS].0
    }

    /// Puts `value` in a free cell (the one freed last); returns the cell.
    #[inline]
    fn put_in_cell(&mut self, value: T) -> u32 {
        let id = match self.free_cells.pop() {
            Some(id) => id,
            None => self.new_cell_page(),
        };
        *self.cell_mut(id) = Some(value);
        id
    }

    /// Adds a page of cells; returns its first cell (the others go on the free list).
    #[inline(never)]
    fn new_cell_page(&mut self) -> u32 {
        let p = self.cells.len();
        assert!(
            (p + 1) * CELLS < NIL as usize,
            "more queue cells than cell numbers"
        );
        self.cells.push((0..CELLS).map(|_| Cell(None)).collect());
        let first = (p * CELLS) as u32;
        self.free_cells
            .extend((first + 1..first + CELLS as u32).rev());
        first
    }

    /// Takes the value out of cell `id`, which goes back on the free list.
    #[inline]
    fn take_from_cell(&mut self, id: u32) -> Option<T> {
        let value = self.cell_mut(id).take();
        self.free_cells.push(id);
        value
    }

    /// Starts loading cell `id` into the cache (none for `NIL`, an empty run's head).
    #[inline]
    fn prefetch_cell(&self, id: u32) {
        if let Some(cell) = self
            .cells
            .get(id as usize / CELLS)
            .and_then(|page| page.get(id as usize % CELLS))
        {
            polite_throttle_core::hooks::prefetch(cell);
        }
    }

    /// A free block of `pool`, empty and unlinked: the one freed last.
    #[inline]
    fn take(&mut self, pool: usize) -> u32 {
        let id = match self.free[pool].pop() {
            Some(id) => id,
            None => self.new_page(pool),
        };
        self.used_in[id as usize / PAGE] += 1;
        self.used += 1;
        let block = self.block_mut(id);
        debug_assert!(block.slots.iter().all(Option::is_none));
        block.next = NIL;
        block.prev = NIL;
        id
    }

    /// Adds a page to `pool`; returns its first block (the others go on the free list).
    #[inline(never)]
    fn new_page(&mut self, pool: usize) -> u32 {
        let page: Page<T> = (0..PAGE).map(|_| ManuallyDrop::new(Block::new())).collect();
        let p = match self.vacant.pop() {
            Some(p) => {
                self.pages[p as usize] = Some(page);
                self.page_pool[p as usize] = pool as u8;
                p
            }
            None => {
                self.pages.push(Some(page));
                self.used_in.push(0);
                self.page_pool.push(pool as u8);
                (self.pages.len() - 1) as u32
            }
        };
        assert!(
            (p as usize + 1) * PAGE < NIL as usize,
            "more queue blocks than block numbers"
        );
        let first = p * PAGE as u32;
        self.free[pool].extend((first + 1..first + PAGE as u32).rev());
        self.free_len += PAGE - 1;
        first
    }

    /// Takes back a block whose slots are all empty (without touching it).
    #[inline]
    fn give(&mut self, id: u32) {
        let page = id as usize / PAGE;
        self.used_in[page] -= 1;
        self.used -= 1;
        self.free[usize::from(self.page_pool[page])].push(id);
        self.free_len += 1;
        if self.free_len >= self.sweep_at || (self.used == 0 && self.free_len > 2 * PAGE) {
            self.sweep();
        }
    }

    /// Gives back the pages whose blocks are all free (but two), if the free list is
    /// large next to the blocks in use. The next sweep waits until half as many blocks
    /// again have been given back, or until every block is free.
    #[inline(never)]
    fn sweep(&mut self) {
        if self.free_len > 2 * PAGE + self.used / 4 {
            let mut keep = 2;
            for (p, used) in self.used_in.iter().enumerate() {
                if *used == 0 && self.pages[p].is_some() {
                    if keep > 0 {
                        keep -= 1;
                    } else {
                        self.pages[p] = None;
                        self.vacant.push(p as u32);
                    }
                }
            }
            let pages = &self.pages;
            self.free_len = 0;
            for free in &mut self.free {
                free.retain(|&id| pages[id as usize / PAGE].is_some());
                self.free_len += free.len();
            }
        }
        self.sweep_at = self.free_len + (self.free_len / 2).max(4 * PAGE);
    }

    /// Starts loading the slot at `at` of block `id` into the cache, and the block's
    /// links if that is the block's last slot (the next take reads them).
    #[inline]
    fn prefetch(&self, id: u32, at: u8) {
        if let Some(Some(page)) = self.pages.get(id as usize / PAGE)
            && let Some(block) = page.get(id as usize % PAGE)
            && let Some(slot) = block.slots.get(usize::from(at))
        {
            polite_throttle_core::hooks::prefetch(slot);
            if usize::from(at) == BLOCK - 1 || at == 0 {
                polite_throttle_core::hooks::prefetch(&block.next);
            }
        }
    }
}

/// Entries in order in a chain of blocks: pushed at the back, taken from either end.
/// A run of one entry that never had more is in a cell instead: `head` is the cell and
/// `tail` is `NIL`, as in an empty run (see [`blockless`](Self::blockless)).
#[derive(Debug)]
pub(crate) struct Run {
    head: u32,
    tail: u32,
    /// The first entry's slot in the head block.
    start: u8,
    /// One past the last entry's slot in the tail block.
    end: u8,
    len: u32,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            head: NIL,
            tail: NIL,
            start: 0,
            end: 0,
            len: 0,
        }
    }
}

impl Run {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether its one entry is in a cell.
    #[cfg(test)]
    fn is_cell(&self) -> bool {
        self.tail == NIL && self.len == 1
    }

    /// Whether it has no block: it is empty or its one entry is in a cell. One test
    /// tells the paths of a block's run from both.
    #[inline]
    fn blockless(&self) -> bool {
        self.tail == NIL
    }

    /// Takes the entry out of its cell (if it has one), leaving the run empty.
    #[inline]
    fn take_cell<T>(&mut self, blocks: &mut Blocks<T>) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let value = blocks.take_from_cell(self.head);
        *self = Run::default();
        value
    }

    /// The entry in its cell, if it has one.
    #[inline]
    fn in_cell<'b, T>(&self, blocks: &'b Blocks<T>) -> Option<&'b T> {
        if self.len == 0 {
            return None;
        }
        blocks.cell(self.head).as_ref()
    }

    /// Appends `value`, taking a block from `pool` (below [`POOLS`]) when the last one
    /// is full.
    #[inline]
    pub(crate) fn push_back<T>(&mut self, blocks: &mut Blocks<T>, pool: usize, value: T) {
        if self.blockless() {
            if self.len == 0 {
                *self = Run {
                    head: blocks.put_in_cell(value),
                    tail: NIL,
                    start: 0,
                    end: 0,
                    len: 1,
                };
                return;
            }
            // A second entry: the first leaves its cell for a block.
            let first = self.take_cell(blocks);
            let b = blocks.take(pool);
            *self = Run {
                head: b,
                tail: b,
                start: 0,
                end: 1,
                len: 1,
            };
            blocks.block_mut(b).slots[0] = first;
        } else if usize::from(self.end) == BLOCK {
            let b = blocks.take(pool);
            blocks.block_mut(self.tail).next = b;
            blocks.block_mut(b).prev = self.tail;
            self.tail = b;
            self.end = 0;
        }
        blocks.block_mut(self.tail).slots[usize::from(self.end)] = Some(value);
        self.end += 1;
        self.len += 1;
    }

    #[inline]
    pub(crate) fn pop_front<T>(&mut self, blocks: &mut Blocks<T>) -> Option<T> {
        if self.blockless() {
            return self.take_cell(blocks);
        }
        let head = self.head;
        let value = blocks.block_mut(head).slots[usize::from(self.start)].take();
        self.start += 1;
        self.len -= 1;
        if self.len == 0 {
            blocks.give(head);
            *self = Run::default();
        } else if usize::from(self.start) == BLOCK {
            self.head = blocks.block(head).next;
            self.start = 0;
            blocks.give(head);
        }
        value
    }

    #[inline]
    pub(crate) fn pop_back<T>(&mut self, blocks: &mut Blocks<T>) -> Option<T> {
        if self.blockless() {
            return self.take_cell(blocks);
        }
        let tail = self.tail;
        self.end -= 1;
        let value = blocks.block_mut(tail).slots[usize::from(self.end)].take();
        self.len -= 1;
        if self.len == 0 {
            blocks.give(tail);
            *self = Run::default();
        } else if self.end == 0 {
            self.tail = blocks.block(tail).prev;
            self.end = BLOCK as u8;
            blocks.give(tail);
        }
        value
    }

    #[inline]
    pub(crate) fn front<'b, T>(&self, blocks: &'b Blocks<T>) -> Option<&'b T> {
        if self.blockless() {
            return self.in_cell(blocks);
        }
        blocks.block(self.head).slots[usize::from(self.start)].as_ref()
    }

    #[inline]
    pub(crate) fn back<'b, T>(&self, blocks: &'b Blocks<T>) -> Option<&'b T> {
        if self.blockless() {
            return self.in_cell(blocks);
        }
        blocks.block(self.tail).slots[usize::from(self.end) - 1].as_ref()
    }

    /// Starts loading the entry at the front (or, with `back`, the back) into the cache.
    #[inline]
    pub(crate) fn prefetch<T>(&self, blocks: &Blocks<T>, back: bool) {
        if self.blockless() {
            blocks.prefetch_cell(self.head);
        } else if back {
            blocks.prefetch(self.tail, self.end - 1);
        } else {
            blocks.prefetch(self.head, self.start);
        }
    }

    /// Starts loading the entry `n` places behind the front (or, with `back`, before the
    /// back), if it is in the end block or the one next to it.
    #[inline]
    pub(crate) fn prefetch_nth<T>(&self, blocks: &Blocks<T>, back: bool, n: usize) {
        if n >= self.len() {
            return;
        }
        if self.blockless() {
            blocks.prefetch_cell(self.head);
            return;
        }
        if back {
            let end = usize::from(self.end);
            if n < end {
                blocks.prefetch(self.tail, (end - 1 - n) as u8);
            } else if n - end < BLOCK {
                blocks.prefetch(blocks.block(self.tail).prev, (BLOCK - 1 - (n - end)) as u8);
            }
        } else {
            let at = usize::from(self.start) + n;
            if at < BLOCK {
                blocks.prefetch(self.head, at as u8);
            } else if at - BLOCK < BLOCK {
                blocks.prefetch(blocks.block(self.head).next, (at - BLOCK) as u8);
            }
        }
    }

    /// Takes every entry out, in order (its blocks go back).
    pub(crate) fn take_all<T>(&mut self, blocks: &mut Blocks<T>) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len());
        while let Some(v) = self.pop_front(blocks) {
            out.push(v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::VecDeque;
    use proptest::prelude::*;

    #[test]
    fn a_block_of_volatile_entries_is_eight_cache_lines() {
        assert_eq!(
            core::mem::size_of::<Block<crate::buckets::Entry<crate::Payload>>>(),
            8 * 64
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(usize, u32),
        PopFront(usize),
        PopBack(usize),
    }

    proptest! {
        /// Several runs over one set of blocks behave like as many deques, and every
        /// block is back once they are empty.
        #[test]
        fn runs_behave_like_deques(
            ops in prop::collection::vec(
                prop_oneof![
                    4 => (0usize..4, any::<u32>()).prop_map(|(q, v)| Op::Push(q, v)),
                    2 => (0usize..4).prop_map(Op::PopFront),
                    2 => (0usize..4).prop_map(Op::PopBack),
                ],
                1..2000,
            ),
        ) {
            let mut blocks: Blocks<u32> = Blocks::default();
            let mut runs: [Run; 4] = Default::default();
            let mut model: [VecDeque<u32>; 4] = Default::default();
            for op in ops {
                match op {
                    Op::Push(q, v) => {
                        runs[q].push_back(&mut blocks, q, v);
                        model[q].push_back(v);
                    }
                    Op::PopFront(q) => {
                        prop_assert_eq!(runs[q].front(&blocks).copied(), model[q].front().copied());
                        prop_assert_eq!(runs[q].pop_front(&mut blocks), model[q].pop_front());
                    }
                    Op::PopBack(q) => {
                        prop_assert_eq!(runs[q].back(&blocks).copied(), model[q].back().copied());
                        prop_assert_eq!(runs[q].pop_back(&mut blocks), model[q].pop_back());
                    }
                }
                for (r, m) in runs.iter().zip(&model) {
                    prop_assert_eq!(r.len(), m.len());
                    let n = blocks.block_count_of(r);
                    prop_assert_eq!(n == 0, m.is_empty() || r.is_cell());
                    prop_assert!(!r.is_cell() || m.len() == 1);
                    prop_assert!(n <= m.len().div_ceil(BLOCK) + 1, "{} blocks for {}", n, m.len());
                }
                let in_runs: usize = runs.iter().map(|r| blocks.block_count_of(r)).sum();
                prop_assert_eq!(blocks.used(), in_runs);
                let in_cells = runs.iter().filter(|r| r.is_cell()).count();
                prop_assert_eq!(blocks.cells_used(), in_cells);
            }
            for (r, m) in runs.iter_mut().zip(&mut model) {
                let all: Vec<u32> = m.drain(..).collect();
                prop_assert_eq!(r.take_all(&mut blocks), all);
            }
            prop_assert_eq!(blocks.used(), 0);
            prop_assert_eq!(blocks.cells_used(), 0);
            prop_assert!(blocks.allocated() <= 3 * PAGE);
        }
    }

    impl<T> Blocks<T> {
        /// Blocks in `run`'s chain, counted by walking it (none for a cell).
        fn block_count_of(&self, run: &Run) -> usize {
            if run.is_empty() || run.is_cell() {
                return 0;
            }
            let (mut n, mut b) = (1, run.head);
            while b != run.tail {
                b = self.block(b).next;
                n += 1;
            }
            n
        }
    }

    /// A queue of one entry takes a cell and no block, and its second entry moves both
    /// into a block: a million one-entry queues cost 64 MB of cells, not 512 MB of
    /// blocks.
    #[test]
    fn one_entry_queues_take_cells_not_blocks() {
        let mut blocks: Blocks<u64> = Blocks::default();
        let mut runs: Vec<Run> = (0..1000).map(|_| Run::default()).collect();
        for (i, r) in runs.iter_mut().enumerate() {
            r.push_back(&mut blocks, i % POOLS, i as u64);
        }
        assert_eq!(blocks.used(), 0);
        assert_eq!(blocks.cells_used(), 1000);
        assert_eq!(blocks.cells.len(), 1000usize.div_ceil(CELLS));
        runs[7].push_back(&mut blocks, 0, 7_000);
        assert_eq!((blocks.used(), blocks.cells_used()), (1, 999));
        assert_eq!(runs[7].pop_back(&mut blocks), Some(7_000));
        assert_eq!(runs[7].back(&blocks), Some(&7));
        assert_eq!(runs[7].pop_front(&mut blocks), Some(7));
        assert_eq!((blocks.used(), blocks.cells_used()), (0, 999));
        for (i, r) in runs.iter_mut().enumerate().filter(|(i, _)| *i != 7) {
            assert_eq!(r.front(&blocks), Some(&(i as u64)));
            assert_eq!(r.pop_back(&mut blocks), Some(i as u64));
        }
        assert_eq!(blocks.cells_used(), 0);
    }

    /// Entries still queued when the blocks go are dropped with them.
    #[test]
    fn queued_entries_are_dropped_with_the_blocks() {
        let counter = alloc::rc::Rc::new(());
        let mut blocks: Blocks<alloc::rc::Rc<()>> = Blocks::default();
        let mut run = Run::default();
        for _ in 0..100 {
            run.push_back(&mut blocks, 0, counter.clone());
        }
        drop(run.pop_front(&mut blocks));
        let mut single = Run::default();
        single.push_back(&mut blocks, 0, counter.clone());
        assert_eq!(alloc::rc::Rc::strong_count(&counter), 101);
        drop(blocks);
        assert_eq!(alloc::rc::Rc::strong_count(&counter), 1);
    }

    /// A drained set of queues gives its pages back (all but the two kept at hand).
    #[test]
    fn pages_go_back_when_queues_drain() {
        let mut blocks: Blocks<u64> = Blocks::default();
        let mut runs: Vec<Run> = (0..100).map(|_| Run::default()).collect();
        for i in 0..100_000u64 {
            runs[(i % 100) as usize].push_back(&mut blocks, (i % 3) as usize, i);
        }
        assert!(blocks.allocated() >= 100_000 / BLOCK);
        for r in &mut runs {
            while r.pop_front(&mut blocks).is_some() {}
        }
        assert_eq!(blocks.used(), 0);
        assert!(
            blocks.allocated() <= 3 * PAGE,
            "{} blocks kept",
            blocks.allocated()
        );
    }
}
