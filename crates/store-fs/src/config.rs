//! Options of the filesystem store.

use frontier_core::Durability;

use crate::error::FsError;

/// Options of an [`FsStore`](crate::FsStore).
///
/// ```
/// use frontier_core::Durability;
/// use store_fs::FsConfig;
///
/// let config = FsConfig {
///     durability: Durability::EveryOp,
///     ..FsConfig::default()
/// };
/// assert_eq!(config.segment_size, 32 << 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// one-ahead [`prefetch`](frontier_core::Store::prefetch) hint can warm the next
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
    /// The smallest segment size accepted.
    pub const MIN_SEGMENT_SIZE: u32 = 512;
    /// The largest segment size accepted.
    pub const MAX_SEGMENT_SIZE: u32 = 1 << 30;

    /// The default options with another durability policy.
    pub fn with_durability(durability: Durability) -> Self {
        FsConfig {
            durability,
            ..FsConfig::default()
        }
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
