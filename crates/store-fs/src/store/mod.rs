//! The store: segments, the in-memory index, commits, compaction and recovery.
//!
//! Here: [`FsStore`], its handle, stats and state types, and its public methods. The rest,
//! one concern each: `frames` (reading a segment's records in order), `write` (appends,
//! commits, segment rolls), `read` (records through memory maps or `pread`), `compaction`,
//! `recovery` (the opening scan and the replay) and `store_impl` (the frontier's `Store`
//! trait).

use std::cell::OnceCell;
use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use hashbrown::{HashMap, HashSet};
use memmap2::Mmap;
use polite_frontier_core::Durability;
// Named by the docs.
#[cfg(doc)]
use polite_frontier_core::Store;

use crate::config::FsConfig;
use crate::error::FsError;
use crate::files::{self, DirLock, SeenFile};
use crate::format::SEGMENT_HEADER_LEN;
use crate::liveset::LiveSet;

mod compaction;
mod frames;
mod read;
mod recovery;
mod store_impl;
mod write;

/// Where a queued request's record is: a segment number and a byte offset, packed in
/// 8 bytes. This is what the frontier keeps in memory per queued request.
///
/// A handle stays usable after compaction moved its record: the store follows the move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FsHandle(u64);

impl FsHandle {
    fn new(segment: u32, offset: u64) -> Self {
        debug_assert!(offset <= u64::from(u32::MAX));
        FsHandle((u64::from(segment) << 32) | (offset & 0xffff_ffff))
    }

    /// The segment number (`seg-<number>.log`) the record was written to.
    pub fn segment(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The record's byte offset in that segment.
    pub fn offset(self) -> u64 {
        self.0 & 0xffff_ffff
    }
}

/// A snapshot of the store's size, on disk and in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FsStats {
    /// Requests held (queued or leased).
    pub held: u64,
    /// Of those, leased and not acknowledged.
    pub leased: u64,
    /// Segment files.
    pub segments: usize,
    /// Bytes in segment files (including what is buffered and not yet written).
    pub log_bytes: u64,
    /// Bytes of the seen file (fingerprints moved out of compacted segments).
    pub seen_bytes: u64,
    /// Fingerprints in the seen file.
    pub seen_fingerprints: u64,
    /// Scope groups the store knows by number.
    pub groups: usize,
    /// Requests moved by compaction since the store was opened (their handles are
    /// followed through a small map).
    pub relocated: usize,
    /// Approximate heap bytes of the in-memory index (sequence-number bitmap, moved
    /// records, group table), excluding the write buffer.
    pub index_bytes: usize,
}

/// Bytes the write buffer collects before they go to the operating system.
const WRITE_CHUNK: usize = 256 << 10;
/// Bytes read at once when loading a record (most records fit).
const LOAD_READ: usize = 256;
/// Largest scope-group number (two bits of the recovery list hold flags).
const MAX_GROUP_ID: u32 = (1 << 30) - 1;

#[derive(Debug)]
struct Segment {
    id: u32,
    path: PathBuf,
    file: File,
    /// Bytes in the file (for the active segment: written so far, the rest is buffered).
    len: u64,
    /// Entry records in the segment, and how many of them are still held.
    entries: u64,
    held: u64,
    /// The sealed segment's bytes, mapped on its first read (`None` inside: mapping
    /// failed or is turned off, read with `pread`).
    map: OnceCell<Option<Mmap>>,
}

/// Where [`FsStore::read_entry`] found a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Read into the caller's buffer.
    Caller,
    /// Still in the write buffer.
    WriteBuffer,
    /// In the segment's memory map.
    Map,
}

#[derive(Debug)]
struct GroupSlot {
    key: Arc<str>,
    /// The newest segment holding an entry record of this group: once the segment with
    /// the group's name is compacted and nothing newer uses it, the name is dropped.
    last_seg: u32,
}

/// What the store keeps in memory besides its files.
#[derive(Debug, Default)]
struct Index {
    live: LiveSet,
    /// Requests moved by compaction: sequence number to the new place. Handles into
    /// deleted segments are looked up here.
    relocated: HashMap<u64, FsHandle>,
    /// Older copies of a request that a crash during compaction left behind.
    superseded: HashSet<FsHandle>,
    /// Group key to its current number, and the segment last noted in its slot (so a
    /// push updates the slot only once per group and segment).
    group_ids: HashMap<Arc<str>, (u32, u32)>,
    groups: HashMap<u32, GroupSlot>,
    next_group: u32,
    callbacks: BTreeMap<u32, Box<str>>,
    next_seq: u64,
    entry_bytes: u64,
    entry_records: u64,
}

/// A request found by the opening scan, replayed by `recover` (32 bytes).
#[derive(Clone, Copy, Debug)]
struct RecItem {
    seq: u64,
    handle: FsHandle,
    not_before: u64,
    /// Group number, with `RI_START` and `RI_NOT_BEFORE` in the top bits.
    group: u32,
    priority: i32,
}

const _: () = assert!(std::mem::size_of::<RecItem>() == 32);

const RI_START: u32 = 1 << 31;
const RI_NOT_BEFORE: u32 = 1 << 30;

/// The next record of a segment, read sequentially.
enum Next {
    /// A record at this offset; its body is in the reader.
    Record(u64),
    /// The end of the segment.
    End,
    /// An unreadable record at this offset.
    Bad { offset: u64, reason: &'static str },
}

/// A crawl-frontier [`Store`] in a directory: see the [crate documentation](crate) for
/// the design and the on-disk format.
///
/// # Durability
///
/// [`FsConfig::durability`] decides when changes reach the disk (written and
/// `fdatasync`ed):
///
/// - [`Durability::EveryOp`]: before each operation returns.
/// - [`Durability::Batched`]: on the operation that completes `max_ops` pending
///   operations or that comes `max_delay` or later after the oldest pending change
///   (there is no background thread: an idle store commits on its next operation or on
///   [`flush`](FsStore::flush); [`commit_deadline`](FsStore::commit_deadline) says when
///   to call it), and on `flush`. Lease marks do not count towards `max_ops`: losing
///   one loses no request (it is redelivered all the same), only its count in
///   `scheduler/redelivered`; they become durable with the next commit.
/// - [`Durability::OnClose`]: on `flush` and when the store is dropped.
///
/// Whatever was durable survives `kill -9` and power loss. Writes also reach the
/// operating system every 256 KiB, so a killed process (not a power cut) usually loses
/// less than the policy allows. Dropping the store flushes on a best-effort basis.
///
/// # Errors
///
/// A failed write leaves the store unusable ([`FsError::Failed`]) until it is reopened,
/// because the files may hold part of the operation; reopening recovers the state the
/// files hold.
#[derive(Debug)]
pub struct FsStore {
    dir: PathBuf,
    config: FsConfig,
    _lock: DirLock,
    /// Oldest first; the last one is the active segment that records are appended to.
    segments: VecDeque<Segment>,
    /// Records appended to the active segment and not yet written to its file.
    buf: Vec<u8>,
    idx: Index,
    seen: SeenFile,
    /// Scope states saved and not yet written (written on the next commit).
    scopes_pending: Option<Vec<u8>>,
    pending_ops: u32,
    pending_since: Option<Instant>,
    /// Something was written or buffered since the last fsync.
    unsynced: bool,
    /// What the opening scan found, until `recover` replays it.
    recovery: Option<Vec<RecItem>>,
    failed: bool,
    abandoned: bool,
    compacting: bool,
    /// Bytes of all segments, buffered ones included.
    log_bytes: u64,
    body: Vec<u8>,
    copy: Vec<u8>,
}

impl FsStore {
    /// Opens the store in `dir` (created if missing), locking it against other
    /// processes, and checks every file: a torn tail of the newest segment or of the seen
    /// file is cut off with a warning; any other damage is an error naming the file and
    /// offset.
    pub fn open(dir: impl AsRef<Path>, config: FsConfig) -> Result<FsStore, FsError> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| FsError::io(&dir, None, e))?;
        let lock = DirLock::acquire(&dir)?;
        let tmp = dir.join(files::SCOPES_TMP);
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(FsError::io(&tmp, None, e)),
        }
        let mut ids = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|e| FsError::io(&dir, None, e))? {
            let entry = entry.map_err(|e| FsError::io(&dir, None, e))?;
            if let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(files::parse_segment_name)
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        for w in ids.windows(2) {
            if w[1] != w[0] + 1 {
                return Err(FsError::MissingSegment {
                    path: dir.join(files::segment_name(w[0] + 1)),
                });
            }
        }
        let seen = SeenFile::open(&dir)?;
        let mut segments = VecDeque::with_capacity(ids.len());
        for id in ids {
            let path = dir.join(files::segment_name(id));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| FsError::io(&path, None, e))?;
            let len = file
                .metadata()
                .map_err(|e| FsError::io(&path, None, e))?
                .len();
            segments.push_back(Segment {
                id,
                path,
                file,
                len,
                entries: 0,
                held: 0,
                map: OnceCell::new(),
            });
        }
        let mut store = FsStore {
            dir,
            config,
            _lock: lock,
            segments,
            buf: Vec::with_capacity(WRITE_CHUNK + (64 << 10)),
            idx: Index::default(),
            seen,
            scopes_pending: None,
            pending_ops: 0,
            pending_since: None,
            unsynced: false,
            recovery: None,
            failed: false,
            abandoned: false,
            compacting: false,
            log_bytes: 0,
            body: Vec::new(),
            copy: Vec::new(),
        };
        store.scan(true)?;
        if store.segments.is_empty() {
            store.create_segment(1)?;
        }
        Ok(store)
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options the store was opened with.
    pub fn config(&self) -> &FsConfig {
        &self.config
    }

    /// Bytes of sealed segments currently memory-mapped for reading (see
    /// [`FsConfig::mmap_reads`]). The pages of them that were read count in the
    /// process's resident set as file pages: page cache the kernel can drop at will, not
    /// memory the store allocated.
    pub fn mapped_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter_map(|s| s.map.get()?.as_ref())
            .map(|m| m.len() as u64)
            .sum()
    }

    /// Makes every change so far durable (also what [`Store::flush`] does).
    pub fn flush(&mut self) -> Result<(), FsError> {
        self.mutate(|s| s.commit_and_tidy())
    }

    /// When the oldest change not yet durable must be committed under
    /// [`Durability::Batched`]; a caller that may sit idle calls
    /// [`flush`](Self::flush) then. `None` when nothing is pending or under the other
    /// policies.
    pub fn commit_deadline(&self) -> Option<Instant> {
        match self.config.durability {
            Durability::Batched { max_delay, .. } => self.pending_since.map(|t| t + max_delay),
            _ => None,
        }
    }

    /// Rewrites the log so that it holds only what is still needed: every segment
    /// before the active one is compacted now (normally this happens a segment at a
    /// time once garbage outweighs live data). Ends with a commit.
    pub fn compact(&mut self) -> Result<(), FsError> {
        self.mutate(|s| {
            if s.active_len() > SEGMENT_HEADER_LEN as u64 {
                s.roll()?;
            }
            let target = s.active().id;
            while s.segments.len() > 1 && s.segments[0].id < target {
                s.compact_oldest()?;
            }
            s.commit()
        })
    }

    /// Sizes on disk and in memory.
    pub fn stats(&self) -> FsStats {
        let idx = &self.idx;
        let groups = idx.groups.capacity() * (std::mem::size_of::<(u32, GroupSlot)>() + 1)
            + idx.group_ids.capacity() * (std::mem::size_of::<(Arc<str>, (u32, u32))>() + 1)
            + idx.groups.values().map(|g| g.key.len() + 16).sum::<usize>();
        FsStats {
            held: idx.live.len(),
            leased: idx.live.leased(),
            segments: self.segments.len(),
            log_bytes: self.log_bytes,
            seen_bytes: self.seen.len(),
            seen_fingerprints: self.seen.count(),
            groups: idx.groups.len(),
            relocated: idx.relocated.len(),
            index_bytes: idx.live.heap_bytes()
                + idx.relocated.capacity() * 17
                + idx.superseded.capacity() * 9
                + groups,
        }
    }

    /// Closes the store the way a crash would: records still in the write buffer are
    /// lost, nothing is flushed (what already reached the operating system stays). For
    /// tests of recovery.
    #[cfg(feature = "testing")]
    pub fn abandon(mut self) {
        self.abandoned = true;
    }
}

impl Drop for FsStore {
    fn drop(&mut self) {
        if self.failed || self.abandoned {
            return;
        }
        if let Err(e) = self.commit() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "polite-store-fs: flush on close failed");
        }
    }
}
