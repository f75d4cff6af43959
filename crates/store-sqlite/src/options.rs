//! [`SqliteOptions`]: durability, verification on open, compaction and the group index.

use polite_frontier_core::Durability;

// Named by the docs.
#[cfg(doc)]
use crate::SqliteStore;

/// Options of a [`SqliteStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// When changes become durable (default: group commit, see [`Durability`]).
    pub durability: Durability,
    /// Run `PRAGMA quick_check` when opening (reads the whole file; default off).
    pub verify_on_open: bool,
    /// Acknowledged requests whose rows stay in the file before the store starts
    /// deleting them, if they also outnumber the pending requests (default 4,096).
    /// Smaller values keep the file tighter at the cost of more, smaller deletions.
    pub compact_after: u32,
    /// Keep the index `requests_by_group (grp, priority DESC, seq)`, which makes "the next
    /// request of a group by priority then arrival" one index seek for queries by hand
    /// (default off: the frontier never needs it, it keeps that order in memory, and the
    /// index makes every push and deletion a random page write: about 3x slower pushes
    /// and 4x slower pops at a million requests). Opening with `true` creates it, opening
    /// with `false` drops it.
    pub group_index: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::default(),
            verify_on_open: false,
            compact_after: 4096,
            group_index: false,
        }
    }
}

impl SqliteOptions {
    /// Sets when changes become durable.
    #[must_use]
    pub fn durability(mut self, value: Durability) -> Self {
        self.durability = value;
        self
    }
    /// Sets whether `PRAGMA quick_check` runs when opening.
    #[must_use]
    pub fn verify_on_open(mut self, value: bool) -> Self {
        self.verify_on_open = value;
        self
    }
    /// Sets how many acknowledged rows stay before deletions start.
    #[must_use]
    pub fn compact_after(mut self, value: u32) -> Self {
        self.compact_after = value;
        self
    }
    /// Sets whether the `requests_by_group` index is kept.
    #[must_use]
    pub fn group_index(mut self, value: bool) -> Self {
        self.group_index = value;
        self
    }
}
