//! Options of the filesystem store.

use polite_frontier_core::Durability;

use crate::error::FsError;

/// Options of an [`FsStore`](crate::FsStore).
///
/// ```
/// use polite_frontier_core::Durability;
/// use polite_store_fs::FsConfig;
///
/// let config = FsConfig::default().durability(Durability::EveryOp);
/// assert_eq!(config.segment_size, 32 << 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FsConfig {
    /// When changes become durable (default: group commit every 1,000 operations or
    /// 100 ms, checked on each operation; see [`FsStore`](crate::FsStore#durability)).
    pub durability: Durability,
    /// Bytes after which the log moves on to a new segment file (default 32 MiB, at
    /// least 512 bytes, at most 1 GiB). Compaction works a segment at a time, so this
    /// also bounds the pause one compaction step takes.
    pub segment_size: u32,
    /// Read sealed segments through a read-only memory map instead of one `pread` per
    /// request (default on). A poll then costs no system call and the frontier's
    /// one-ahead [`prefetch`](polite_frontier_core::Store::prefetch) hint can warm the next
    /// payload; at a million requests this is about a third of a pop. The price, as with
    /// SQLite's `mmap_size`: if the disk fails to read a mapped page, or another program
    /// truncates a segment file under a running store, the process receives `SIGBUS` and
    /// dies, where a `pread` would have returned an error naming the file. Nothing
    /// durable is lost either way (the next open scans and checks every record), but turn
    /// it off on network filesystems or failing media. Corrupted bytes are caught by the
    /// record checksums in both modes. The active segment is always read with `pread`.
    pub mmap_reads: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            durability: Durability::default(),
            segment_size: 32 << 20,
            mmap_reads: true,
        }
    }
}

impl FsConfig {
    /// Sets when changes become durable.
    #[must_use]
    pub fn durability(mut self, value: Durability) -> Self {
        self.durability = value;
        self
    }
    /// Sets the size at which a log segment is sealed, in bytes.
    #[must_use]
    pub fn segment_size(mut self, value: u32) -> Self {
        self.segment_size = value;
        self
    }
    /// Sets whether sealed segments are read through a memory map.
    #[must_use]
    pub fn mmap_reads(mut self, value: bool) -> Self {
        self.mmap_reads = value;
        self
    }

    /// The smallest segment size accepted.
    pub const MIN_SEGMENT_SIZE: u32 = 512;
    /// The largest segment size accepted.
    pub const MAX_SEGMENT_SIZE: u32 = 1 << 30;

    /// The default options with another durability policy.
    pub fn with_durability(durability: Durability) -> Self {
        FsConfig::default().durability(durability)
    }

    pub(crate) fn validate(&self) -> Result<(), FsError> {
        if !(Self::MIN_SEGMENT_SIZE..=Self::MAX_SEGMENT_SIZE).contains(&self.segment_size) {
            return Err(FsError::Config(format!(
                "segment_size {} is outside {}..={}",
                self.segment_size,
                Self::MIN_SEGMENT_SIZE,
                Self::MAX_SEGMENT_SIZE
            )));
        }
        if let Durability::Batched { max_ops: 0, .. } = self.durability {
            return Err(FsError::Config(
                "Batched durability needs max_ops >= 1".into(),
            ));
        }
        Ok(())
    }
}
