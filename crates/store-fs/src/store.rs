//! The store: segments, the in-memory index, commits, compaction and recovery.

use std::cell::OnceCell;
use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use hashbrown::{HashMap, HashSet};
use memmap2::Mmap;
use polite_frontier_core::{Durability, EntryMeta, Fingerprint, RecoveryVisitor, Store};
use polite_throttle_core::{ScopeSnapshot, Timestamp};

use crate::config::FsConfig;
use crate::error::FsError;
use crate::files::{self, DirLock, PosReader, SeenFile, read_at, read_full, write_all_at};
use crate::format::{
    self, EntryRecord, FP_LEN, FPS_PER_BLOCK, FrameParse, HeaderError, KIND_ACK, KIND_CALLBACK,
    KIND_FINGERPRINTS, KIND_GROUP, KIND_LEASE, KIND_UNLEASE, MAX_BODY, Record, SEGMENT_HEADER_LEN,
    SEGMENT_MAGIC, SegmentHeader,
};
use crate::liveset::LiveSet;

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

/// Maps a sealed segment read-only (`None` if the system refuses: reads fall back to
/// `pread`).
#[allow(unsafe_code)]
fn map_sealed(seg: &Segment) -> Option<Mmap> {
    let len = usize::try_from(seg.len).ok().filter(|&l| l > 0)?;
    // SAFETY: the mapping is only sound while nobody changes the file. A sealed segment
    // is never written again by this store (appends go to the active segment; the only
    // truncation, of a torn tail, happens while opening, before any read), the
    // directory lock keeps other frontier processes out, and the map is dropped with the
    // segment before compaction deletes its file. What the lock cannot stop (another
    // program truncating the file, a disk read error) is documented on
    // `FsConfig::mmap_reads`: a SIGBUS, not memory unsafety visible to safe code.
    unsafe { memmap2::MmapOptions::new().len(len).map(&seg.file) }.ok()
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

/// Reads the records of `file[start..end]` in order.
struct FrameReader<'f> {
    r: BufReader<PosReader<'f>>,
    at: u64,
    end: u64,
    body: Vec<u8>,
}

impl<'f> FrameReader<'f> {
    fn new(file: &'f File, start: u64, end: u64) -> Self {
        FrameReader {
            r: BufReader::with_capacity(
                1 << 18,
                PosReader {
                    file,
                    pos: start,
                    end,
                },
            ),
            at: start,
            end,
            body: Vec::new(),
        }
    }

    fn next(&mut self) -> io::Result<Next> {
        let start = self.at;
        let bad = |reason| {
            Ok(Next::Bad {
                offset: start,
                reason,
            })
        };
        let mut head = [0u8; 4 + 10];
        let got = read_full(&mut self.r, &mut head[..4])?;
        if got == 0 {
            return Ok(Next::End);
        }
        if got < 4 {
            return bad("truncated record header");
        }
        let mut n = 0;
        let mut len: u64 = 0;
        loop {
            if n == 10 {
                return bad("unreadable record length");
            }
            let mut b = [0u8; 1];
            if read_full(&mut self.r, &mut b)? == 0 {
                return bad("truncated record header");
            }
            head[4 + n] = b[0];
            len |= u64::from(b[0] & 0x7f)
                .checked_shl(7 * n as u32)
                .unwrap_or(0);
            n += 1;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        if n == 10 && head[13] > 1 || len == 0 || len > MAX_BODY as u64 {
            return bad("unreadable record length");
        }
        let body_at = start + 4 + n as u64;
        if len > self.end.saturating_sub(body_at) {
            return bad("record runs past the end of the file");
        }
        self.body.resize(len as usize, 0);
        if read_full(&mut self.r, &mut self.body)? < len as usize {
            return bad("truncated record");
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&head[4..4 + n]);
        h.update(&self.body);
        if h.finalize() != u32::from_le_bytes([head[0], head[1], head[2], head[3]]) {
            return bad("record checksum mismatch");
        }
        self.at = body_at + len;
        Ok(Next::Record(start))
    }

    fn body(&self) -> &[u8] {
        &self.body
    }

    /// Bytes of the record just read (framing included).
    fn frame_len(&self, offset: u64) -> u64 {
        self.at - offset
    }
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

    // -----------------------------------------------------------------------------------
    // Plumbing.

    fn mutate<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, FsError>) -> Result<T, FsError> {
        if self.failed {
            return Err(FsError::Failed {
                dir: self.dir.clone(),
            });
        }
        let r = f(self);
        if let Err(e) = &r
            && e.poisons()
        {
            self.failed = true;
        }
        r
    }

    fn active(&self) -> &Segment {
        self.segments
            .back()
            .expect("a store always has an active segment")
    }

    fn active_len(&self) -> u64 {
        self.active().len + self.buf.len() as u64
    }

    fn first_id(&self) -> u32 {
        self.segments.front().map_or(0, |s| s.id)
    }

    fn segment(&self, id: u32) -> Option<&Segment> {
        let first = self.first_id();
        let i = id.checked_sub(first)? as usize;
        self.segments.get(i)
    }

    fn unknown(&self, seq: u64) -> FsError {
        FsError::UnknownSeq {
            dir: self.dir.clone(),
            seq,
        }
    }

    /// Appends `self.body` as a record to the active segment.
    fn append_body(&mut self) -> Result<FsHandle, FsError> {
        let seg = self
            .segments
            .back()
            .expect("a store always has an active segment");
        let (id, offset) = (seg.id, seg.len + self.buf.len() as u64);
        let before = self.buf.len();
        format::frame(&mut self.buf, &self.body);
        self.log_bytes += (self.buf.len() - before) as u64;
        self.unsynced = true;
        if self.buf.len() >= WRITE_CHUNK {
            self.write_out()?;
        }
        Ok(FsHandle::new(id, offset))
    }

    /// Hands the write buffer to the operating system (no fsync).
    fn write_out(&mut self) -> Result<(), FsError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let seg = self
            .segments
            .back_mut()
            .expect("a store always has an active segment");
        write_all_at(&seg.file, &self.buf, seg.len)
            .map_err(|e| FsError::io(&seg.path, Some(seg.len), e))?;
        seg.len += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Makes everything durable: the log, then the scope states.
    fn commit(&mut self) -> Result<(), FsError> {
        self.commit_log()?;
        if let Some(body) = self.scopes_pending.take() {
            files::write_scopes(&self.dir, &body)?;
        }
        self.pending_ops = 0;
        self.pending_since = None;
        Ok(())
    }

    /// A commit, then one compaction step if garbage dominates and the oldest segment
    /// is mostly garbage: a store that only acknowledges (and so rarely starts a new
    /// segment) still gives space back, in steps that copy little.
    fn commit_and_tidy(&mut self) -> Result<(), FsError> {
        self.commit()?;
        if !self.compacting
            && self.segments.len() > 1
            && self.segments[0].held * 2 <= self.segments[0].entries
        {
            self.maybe_compact(1)?;
        }
        Ok(())
    }

    /// Notes that the request at `handle` (resolved) is no longer held.
    fn release(&mut self, handle: FsHandle) {
        let first = self.first_id();
        if let Some(i) = handle.segment().checked_sub(first)
            && let Some(seg) = self.segments.get_mut(i as usize)
        {
            seg.held = seg.held.saturating_sub(1);
        }
    }

    /// Counts a new entry record in the active segment.
    fn count_entry(&mut self) {
        if let Some(seg) = self.segments.back_mut() {
            seg.entries += 1;
            seg.held += 1;
        }
    }

    /// Applies the durability policy after an operation.
    fn after_op(&mut self) -> Result<(), FsError> {
        self.note_change(true)
    }

    /// Applies the durability policy after a change; `counted` changes count towards
    /// `Batched::max_ops` (lease marks do not: losing one loses no request, it only
    /// leaves the redelivery uncounted).
    fn note_change(&mut self, counted: bool) -> Result<(), FsError> {
        match self.config.durability {
            Durability::EveryOp => self.commit_and_tidy(),
            Durability::OnClose => Ok(()),
            Durability::Batched { max_ops, max_delay } => {
                if self.pending_since.is_none() {
                    self.pending_since = Some(Instant::now());
                }
                if !counted {
                    return Ok(());
                }
                self.pending_ops += 1;
                // The clock is read on every 16th operation: a commit is at most 15
                // operations late, never early.
                if self.pending_ops >= max_ops
                    || (self.pending_ops.is_multiple_of(16)
                        && self
                            .pending_since
                            .is_some_and(|since| since.elapsed() >= max_delay))
                {
                    return self.commit_and_tidy();
                }
                Ok(())
            }
        }
    }

    /// Before an operation appends: moves to a new segment when the active one is full
    /// (and compacts if garbage dominates).
    fn prepare_write(&mut self) -> Result<(), FsError> {
        if self.active_len() >= u64::from(self.config.segment_size) {
            self.roll()?;
            if !self.compacting {
                // Two old segments per new one: compaction outpaces appends, and one
                // step's pause stays bounded by the segment size.
                self.maybe_compact(2)?;
            }
        }
        Ok(())
    }

    /// Seals the active segment (durably) and starts the next one.
    fn roll(&mut self) -> Result<(), FsError> {
        self.write_out()?;
        let seg = self.active();
        seg.file
            .sync_data()
            .map_err(|e| FsError::io(&seg.path, None, e))?;
        let id = seg
            .id
            .checked_add(1)
            .ok_or_else(|| FsError::corrupt(&seg.path, 12, "segment numbers exhausted"))?;
        self.unsynced = false;
        self.create_segment(id)
    }

    fn create_segment(&mut self, id: u32) -> Result<(), FsError> {
        let path = self.dir.join(files::segment_name(id));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| FsError::io(&path, None, e))?;
        let header = SegmentHeader {
            id,
            base_seq: self.idx.next_seq,
        };
        write_all_at(&file, &header.encode(), 0)
            .and_then(|()| file.sync_all())
            .map_err(|e| FsError::io(&path, Some(0), e))?;
        files::sync_dir(&self.dir)?;
        self.segments.push_back(Segment {
            id,
            path,
            file,
            len: SEGMENT_HEADER_LEN as u64,
            entries: 0,
            held: 0,
            map: OnceCell::new(),
        });
        self.log_bytes += SEGMENT_HEADER_LEN as u64;
        Ok(())
    }

    fn avg_entry_bytes(&self) -> u64 {
        self.idx
            .entry_bytes
            .checked_div(self.idx.entry_records)
            .unwrap_or(64)
    }

    /// Whether garbage outweighs what is held: the log is more than twice the held
    /// requests' estimated size, plus two segments of slack.
    fn garbage_dominates(&self) -> bool {
        let live = self.idx.live.len().saturating_mul(self.avg_entry_bytes());
        self.log_bytes
            > live
                .saturating_mul(2)
                .saturating_add(2 * u64::from(self.config.segment_size))
    }

    /// Compacts up to `steps` of the oldest segments while garbage dominates.
    fn maybe_compact(&mut self, steps: u32) -> Result<(), FsError> {
        for _ in 0..steps {
            if self.segments.len() < 2 || !self.garbage_dominates() {
                break;
            }
            self.compact_oldest()?;
        }
        Ok(())
    }

    fn compact_oldest(&mut self) -> Result<(), FsError> {
        self.compacting = true;
        let r = self.compact_oldest_inner();
        self.compacting = false;
        r
    }

    /// Copies what is still needed from the oldest segment to the active one, moves its
    /// fingerprints to the seen file, commits, and deletes it.
    ///
    /// Compacting strictly oldest first is what makes dropping acknowledgements and
    /// lease marks safe: the entry record such a record refers to was written before it,
    /// so it is in this segment or in one deleted earlier.
    fn compact_oldest_inner(&mut self) -> Result<(), FsError> {
        let (seg_id, seg_len, path, file) = {
            let seg = &self.segments[0];
            let file = seg
                .file
                .try_clone()
                .map_err(|e| FsError::io(&seg.path, None, e))?;
            (seg.id, seg.len, seg.path.clone(), file)
        };
        let mut reader = FrameReader::new(&file, SEGMENT_HEADER_LEN as u64, seg_len);
        let mut fps: Vec<u8> = Vec::new();
        let mut groups: Vec<(u32, String)> = Vec::new();
        loop {
            let off = match reader
                .next()
                .map_err(|e| FsError::io(&path, Some(reader.at), e))?
            {
                Next::End => break,
                Next::Bad { offset, reason } => {
                    return Err(FsError::corrupt(&path, offset, reason));
                }
                Next::Record(off) => off,
            };
            let rec =
                format::parse_record(reader.body()).map_err(|r| FsError::corrupt(&path, off, r))?;
            match rec {
                Record::Entry(e) => {
                    if let Some(fp) = e.fingerprint {
                        fps.extend_from_slice(&fp);
                    }
                    if self.idx.superseded.remove(&FsHandle::new(seg_id, off)) {
                        continue;
                    }
                    let Some(leased) = self.idx.live.get(e.seq) else {
                        continue;
                    };
                    self.prepare_write()?;
                    self.body.clear();
                    EntryRecord {
                        replaces: None,
                        fingerprint: None,
                        leased,
                        ..e
                    }
                    .encode(&mut self.body);
                    let frame_start = self.log_bytes;
                    let handle = self.append_body()?;
                    let active = handle.segment();
                    let slot = self.idx.groups.get_mut(&e.group).ok_or_else(|| {
                        FsError::corrupt(&path, off, "entry refers to an undefined scope group")
                    })?;
                    slot.last_seg = active;
                    self.idx.relocated.insert(e.seq, handle);
                    self.count_entry();
                    self.idx.entry_bytes += self.log_bytes - frame_start;
                    self.idx.entry_records += 1;
                }
                Record::Callback { .. } => {
                    self.prepare_write()?;
                    self.body.clear();
                    self.body.extend_from_slice(reader.body());
                    self.append_body()?;
                }
                Record::Group { id, key } => groups.push((id, key.to_owned())),
                Record::Fingerprints(b) => fps.extend_from_slice(b),
                Record::Lease(_) | Record::Ack(_) | Record::Unlease => {}
            }
        }
        for (id, key) in groups {
            let keep = match self.idx.groups.get(&id) {
                Some(slot) => slot.last_seg > seg_id,
                None => continue,
            };
            if keep {
                self.prepare_write()?;
                self.body.clear();
                format::encode_named(&mut self.body, KIND_GROUP, id, &key);
                self.append_body()?;
            } else {
                self.idx.groups.remove(&id);
                if self.idx.group_ids.get(key.as_str()).map(|g| g.0) == Some(id) {
                    self.idx.group_ids.remove(key.as_str());
                }
            }
        }
        // Copies first, fingerprints second, deletion last: a crash in between leaves
        // duplicates, which recovery tolerates, never a loss.
        self.commit_log()?;
        self.seen.append(&fps)?;
        drop(reader);
        drop(file);
        // Unmapped before the file goes (Windows refuses to delete a mapped file).
        self.segments[0].map = OnceCell::new();
        fs::remove_file(&path).map_err(|e| FsError::io(&path, None, e))?;
        files::sync_dir(&self.dir)?;
        if let Some(seg) = self.segments.pop_front() {
            self.log_bytes -= seg.len;
        }
        Ok(())
    }

    /// Writes and syncs the log (not the scope states).
    fn commit_log(&mut self) -> Result<(), FsError> {
        self.write_out()?;
        if self.unsynced {
            let seg = self.active();
            seg.file
                .sync_data()
                .map_err(|e| FsError::io(&seg.path, None, e))?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// The group number for `key`, writing its name to the log the first time.
    fn intern_group(&mut self, key: &str) -> Result<u32, FsError> {
        let active = self.active().id;
        if let Some((id, noted)) = self.idx.group_ids.get_mut(key) {
            if *noted != active {
                *noted = active;
                if let Some(slot) = self.idx.groups.get_mut(id) {
                    slot.last_seg = active;
                }
            }
            return Ok(*id);
        }
        let id = self.idx.next_group;
        if id > MAX_GROUP_ID {
            return Err(FsError::Config(format!(
                "more than {MAX_GROUP_ID} scope groups in one store"
            )));
        }
        self.body.clear();
        format::encode_named(&mut self.body, KIND_GROUP, id, key);
        self.append_body()?;
        let key: Arc<str> = Arc::from(key);
        self.idx.group_ids.insert(key.clone(), (id, active));
        self.idx.groups.insert(
            id,
            GroupSlot {
                key,
                last_seg: self.active().id,
            },
        );
        self.idx.next_group = id + 1;
        Ok(id)
    }

    /// Appends an entry record for a new request (or a retry) and updates the index.
    fn append_entry(&mut self, entry: &EntryRecord<'_>) -> Result<FsHandle, FsError> {
        self.body.clear();
        entry.encode(&mut self.body);
        let before = self.log_bytes;
        let handle = self.append_body()?;
        self.idx.entry_bytes += self.log_bytes - before;
        self.idx.entry_records += 1;
        self.count_entry();
        self.idx.live.insert(entry.seq, false);
        self.idx.next_seq = self.idx.next_seq.max(entry.seq + 1);
        Ok(handle)
    }

    fn check_new_seq(&self, seq: u64) -> Result<(), FsError> {
        if seq < self.idx.next_seq || seq == u64::MAX {
            return Err(FsError::SeqNotIncreasing {
                dir: self.dir.clone(),
                seq,
                next: self.idx.next_seq,
            });
        }
        Ok(())
    }

    fn check_size(&self, len: usize) -> Result<(), FsError> {
        // Room for the entry's fields ahead of the payload.
        if len > MAX_BODY - 64 {
            return Err(FsError::TooLarge {
                dir: self.dir.clone(),
                len,
                max: MAX_BODY - 64,
            });
        }
        Ok(())
    }

    /// Where the record of `seq` is now (following a move by compaction).
    fn resolve(&self, seq: u64, handle: FsHandle) -> Result<FsHandle, FsError> {
        if handle.segment() < self.first_id() {
            return self
                .idx
                .relocated
                .get(&seq)
                .copied()
                .ok_or_else(|| self.unknown(seq));
        }
        Ok(handle)
    }

    /// The memory map of a sealed segment (never the active one), made on first use;
    /// `None` with `mmap_reads` off, or if mapping failed (then `pread` it is).
    fn mapped<'s>(&self, sealed: &'s Segment) -> Option<&'s Mmap> {
        if !self.config.mmap_reads {
            return None;
        }
        sealed.map.get_or_init(|| map_sealed(sealed)).as_ref()
    }

    /// The map of segment `id`, if one was made.
    fn existing_map(&self, id: u32) -> Option<&Mmap> {
        self.segment(id)?.map.get()?.as_ref()
    }

    /// Reads the entry record of `seq` at `handle` (already resolved). Returns where its
    /// payload is: in `buf`, in the write buffer (a record not yet written out), or in
    /// the segment's memory map.
    fn read_entry(
        &self,
        seq: u64,
        handle: FsHandle,
        buf: &mut Vec<u8>,
    ) -> Result<(core::ops::Range<usize>, Source), FsError> {
        let stale = |path: &Path| FsError::StaleHandle {
            path: path.to_path_buf(),
            offset: handle.offset(),
            seq,
        };
        let Some(seg) = self.segment(handle.segment()) else {
            return Err(stale(&self.dir.join(files::segment_name(handle.segment()))));
        };
        let off = handle.offset();
        let is_active = seg.id == self.active().id;
        let (bytes, source): (&[u8], Source) = if is_active && off >= seg.len {
            let start = (off - seg.len) as usize;
            (
                self.buf.get(start..).ok_or_else(|| stale(&seg.path))?,
                Source::WriteBuffer,
            )
        } else if let Some(map) = (!is_active).then(|| self.mapped(seg)).flatten() {
            let bytes = usize::try_from(off)
                .ok()
                .and_then(|off| map.get(off..))
                .filter(|b| !b.is_empty())
                .ok_or_else(|| stale(&seg.path))?;
            (bytes, Source::Map)
        } else {
            let end = seg.len;
            if off >= end {
                return Err(stale(&seg.path));
            }
            let want = (end - off).min(LOAD_READ as u64) as usize;
            buf.resize(want, 0);
            let n =
                read_at(&seg.file, buf, off).map_err(|e| FsError::io(&seg.path, Some(off), e))?;
            buf.truncate(n);
            if let FrameParse::Incomplete { need: Some(total) } = format::parse_frame(buf)
                && total as u64 <= end - off
            {
                buf.resize(total, 0);
                let more = read_at(&seg.file, &mut buf[n..], off + n as u64)
                    .map_err(|e| FsError::io(&seg.path, Some(off), e))?;
                buf.truncate(n + more);
            }
            (&buf[..], Source::Caller)
        };
        let body = match format::parse_frame(bytes) {
            FrameParse::Record { body, .. } => body,
            FrameParse::BadCrc => {
                return Err(FsError::corrupt(&seg.path, off, "record checksum mismatch"));
            }
            FrameParse::BadLength | FrameParse::Incomplete { .. } => return Err(stale(&seg.path)),
        };
        match format::parse_record(&bytes[body.clone()]) {
            Ok(Record::Entry(e)) if e.seq == seq => {
                let start = body.end - e.payload.len();
                let base = match source {
                    Source::WriteBuffer => (off - seg.len) as usize,
                    Source::Map => off as usize,
                    Source::Caller => 0,
                };
                Ok((base + start..base + body.end, source))
            }
            Ok(_) => Err(stale(&seg.path)),
            Err(reason) => Err(FsError::corrupt(&seg.path, off, reason)),
        }
    }

    // -----------------------------------------------------------------------------------
    // Opening scan.

    /// Reads every segment, rebuilding the index and the list of held requests. On the
    /// first scan a torn tail (or torn header) of the newest segment is removed.
    fn scan(&mut self, first_open: bool) -> Result<(), FsError> {
        let mut idx = Index::default();
        let mut list: Vec<RecItem> = Vec::new();
        let mut names: HashMap<u32, Arc<str>> = HashMap::new();
        let mut group_last: HashMap<u32, u32> = HashMap::new();
        let mut next_seq = 0u64;
        let mut i = 0;
        while i < self.segments.len() {
            let last = i + 1 == self.segments.len();
            let Some(header) = self.segment_header(i, last && first_open)? else {
                let seg = self.segments.pop_back().expect("the last segment");
                tracing::warn!(
                    file = %seg.path.display(),
                    bytes = seg.len,
                    "segment with a torn header (a crash while creating it) removed"
                );
                drop(seg.file);
                fs::remove_file(&seg.path).map_err(|e| FsError::io(&seg.path, None, e))?;
                files::sync_dir(&self.dir)?;
                break;
            };
            next_seq = next_seq.max(header.base_seq);
            let seg = &self.segments[i];
            if seg.len > u64::from(u32::MAX) {
                return Err(FsError::corrupt(
                    &seg.path,
                    u64::from(u32::MAX),
                    "segment larger than 4 GiB (this store never writes one)",
                ));
            }
            let mut reader = FrameReader::new(&seg.file, SEGMENT_HEADER_LEN as u64, seg.len);
            let mut cut = None;
            let mut seg_entries = 0u64;
            loop {
                let off = match reader
                    .next()
                    .map_err(|e| FsError::io(&seg.path, Some(reader.at), e))?
                {
                    Next::End => break,
                    Next::Bad { offset, reason } => {
                        if last && first_open && is_torn_tail(seg, offset)? {
                            cut = Some(offset);
                            break;
                        }
                        return Err(FsError::corrupt(&seg.path, offset, reason));
                    }
                    Next::Record(off) => off,
                };
                let frame_len = reader.frame_len(off);
                let rec = format::parse_record(reader.body())
                    .map_err(|r| FsError::corrupt(&seg.path, off, r))?;
                match rec {
                    Record::Entry(e) => {
                        if e.group > MAX_GROUP_ID {
                            return Err(FsError::corrupt(
                                &seg.path,
                                off,
                                "scope group number out of range",
                            ));
                        }
                        if let Some(r) = e.replaces {
                            idx.live.remove(r);
                        }
                        idx.live.insert(e.seq, e.leased);
                        next_seq = next_seq.max(e.seq.saturating_add(1));
                        group_last.insert(e.group, seg.id);
                        idx.entry_bytes += frame_len;
                        idx.entry_records += 1;
                        seg_entries += 1;
                        let mut group = e.group;
                        if e.start {
                            group |= RI_START;
                        }
                        if e.not_before.is_some() {
                            group |= RI_NOT_BEFORE;
                        }
                        list.push(RecItem {
                            seq: e.seq,
                            handle: FsHandle::new(seg.id, off),
                            not_before: e.not_before.unwrap_or(0),
                            group,
                            priority: e.priority,
                        });
                        if list.len() > 4096 && list.len() as u64 > 2 * idx.live.len() + 4096 {
                            list.retain(|it| idx.live.get(it.seq).is_some());
                        }
                    }
                    Record::Lease(seq) => {
                        idx.live.set_leased(seq);
                    }
                    Record::Ack(seq) => {
                        idx.live.remove(seq);
                    }
                    Record::Callback { id, name } => {
                        idx.callbacks.insert(id, Box::from(name));
                    }
                    Record::Group { id, key } => {
                        if id > MAX_GROUP_ID {
                            return Err(FsError::corrupt(
                                &seg.path,
                                off,
                                "scope group number out of range",
                            ));
                        }
                        names.insert(id, Arc::from(key));
                    }
                    Record::Fingerprints(_) => {}
                    Record::Unlease => idx.live.clear_leased(),
                }
            }
            drop(reader);
            self.segments[i].entries = seg_entries;
            self.segments[i].held = 0;
            if let Some(offset) = cut {
                let seg = &mut self.segments[i];
                tracing::warn!(
                    file = %seg.path.display(),
                    offset,
                    lost_bytes = seg.len - offset,
                    "torn tail truncated to the last valid record"
                );
                seg.file
                    .set_len(offset)
                    .and_then(|()| seg.file.sync_all())
                    .map_err(|e| FsError::io(&seg.path, Some(offset), e))?;
                seg.len = offset;
            }
            i += 1;
        }

        // Held requests in sequence order, the newest copy of each.
        list.retain(|it| idx.live.get(it.seq).is_some());
        if !list.is_sorted_by_key(|it| (it.seq, it.handle)) {
            list.sort_unstable_by_key(|it| (it.seq, it.handle));
        }
        let superseded = &mut idx.superseded;
        list.dedup_by(|later, kept| {
            if later.seq == kept.seq {
                superseded.insert(kept.handle);
                *kept = *later;
                true
            } else {
                false
            }
        });
        for (id, key) in names {
            let last_seg = group_last.get(&id).copied().unwrap_or(0);
            idx.next_group = idx.next_group.max(id + 1);
            idx.group_ids
                .entry(key.clone())
                .and_modify(|g| *g = (g.0.max(id), 0))
                .or_insert((id, 0));
            idx.groups.insert(id, GroupSlot { key, last_seg });
        }
        let first = self.first_id();
        for it in &list {
            if let Some(seg) = it
                .handle
                .segment()
                .checked_sub(first)
                .and_then(|i| self.segments.get_mut(i as usize))
            {
                seg.held += 1;
            }
            if !idx.groups.contains_key(&(it.group & MAX_GROUP_ID)) {
                let path = self
                    .segment(it.handle.segment())
                    .map_or_else(|| self.dir.clone(), |s| s.path.clone());
                return Err(FsError::corrupt(
                    &path,
                    it.handle.offset(),
                    format!("request #{} refers to an undefined scope group", it.seq),
                ));
            }
        }
        idx.next_seq = next_seq;
        self.log_bytes = self.segments.iter().map(|s| s.len).sum::<u64>() + self.buf.len() as u64;
        self.idx = idx;
        self.recovery = Some(list);
        Ok(())
    }

    /// Reads the header of segment `i`. `None`: a torn header that may be removed
    /// (`tolerate_torn`: the newest segment on opening).
    fn segment_header(
        &self,
        i: usize,
        tolerate_torn: bool,
    ) -> Result<Option<SegmentHeader>, FsError> {
        let seg = &self.segments[i];
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        let n = read_at(&seg.file, &mut b, 0).map_err(|e| FsError::io(&seg.path, Some(0), e))?;
        let short = n < SEGMENT_HEADER_LEN;
        let ours = b[..n.min(8)] == SEGMENT_MAGIC[..n.min(8)] || b[..n].iter().all(|&x| x == 0);
        match SegmentHeader::decode(&b[..n]) {
            Ok(h) if h.id != seg.id => Err(FsError::corrupt(
                &seg.path,
                12,
                format!(
                    "header names segment {} but the file name says {}",
                    h.id, seg.id
                ),
            )),
            Ok(h) => Ok(Some(h)),
            Err(HeaderError::Short) | Err(HeaderError::BadMagic)
                if short && ours && tolerate_torn =>
            {
                Ok(None)
            }
            Err(HeaderError::BadCrc) if seg.len == SEGMENT_HEADER_LEN as u64 && tolerate_torn => {
                Ok(None)
            }
            Err(e) => Err(files::header_err(&seg.path, e, seg.len)),
        }
    }

    // -----------------------------------------------------------------------------------
    // Recovery.

    fn replay(&mut self, v: &mut dyn RecoveryVisitor<FsHandle>) -> Result<(), FsError> {
        let list = match self.recovery.take() {
            Some(list) => list,
            None => {
                self.write_out()?;
                self.scan(false)?;
                self.recovery.take().unwrap_or_default()
            }
        };
        for (id, name) in &self.idx.callbacks {
            v.callback(*id, name);
        }
        self.seen
            .scan(|p| v.fingerprint(&format::fp_from_prefix(p)), false)?;
        self.write_out()?;
        for seg in &self.segments {
            let mut reader = FrameReader::new(&seg.file, SEGMENT_HEADER_LEN as u64, seg.len);
            loop {
                let off = match reader
                    .next()
                    .map_err(|e| FsError::io(&seg.path, Some(reader.at), e))?
                {
                    Next::End => break,
                    Next::Bad { offset, reason } => {
                        return Err(FsError::corrupt(&seg.path, offset, reason));
                    }
                    Next::Record(off) => off,
                };
                match format::parse_record(reader.body()) {
                    Ok(Record::Entry(e)) => {
                        if let Some(fp) = e.fingerprint {
                            v.fingerprint(&format::fp_from_prefix(&fp));
                        }
                    }
                    Ok(Record::Fingerprints(b)) => {
                        for p in b.chunks_exact(FP_LEN) {
                            v.fingerprint(&format::fp_from_prefix(p));
                        }
                    }
                    Ok(_) => {}
                    Err(reason) => return Err(FsError::corrupt(&seg.path, off, reason)),
                }
            }
        }
        let states: Vec<ScopeSnapshot> = match &self.scopes_pending {
            Some(body) => postcard::from_bytes(body).map_err(|e| FsError::ScopeStates {
                path: self.dir.join(files::SCOPES_FILE),
                offset: 0,
                reason: e.to_string(),
            })?,
            None => files::read_scopes(&self.dir)?,
        };
        for s in states {
            v.scope_state(s);
        }
        for it in &list {
            let Some(leased) = self.idx.live.get(it.seq) else {
                continue;
            };
            let handle = self.resolve(it.seq, it.handle)?;
            let group = it.group & MAX_GROUP_ID;
            let Some(slot) = self.idx.groups.get(&group) else {
                return Err(FsError::corrupt(
                    &self.dir,
                    handle.offset(),
                    format!("request #{} refers to an undefined scope group", it.seq),
                ));
            };
            let key = &slot.key;
            let meta = EntryMeta {
                group: key,
                priority: it.priority,
                start: it.group & RI_START != 0,
                not_before: (it.group & RI_NOT_BEFORE != 0)
                    .then_some(Timestamp::from_nanos(it.not_before)),
            };
            v.entry(it.seq, meta, handle, leased);
        }
        v.next_seq(self.idx.next_seq);
        if self.idx.live.leased() > 0 {
            // Reported as leased once; from now on they are queued again.
            self.idx.live.clear_leased();
            self.prepare_write()?;
            self.body.clear();
            self.body.push(KIND_UNLEASE);
            self.append_body()?;
            self.after_op()?;
        }
        Ok(())
    }
}

/// Whether the bad record at `offset` of the newest segment is a torn tail: no valid
/// record follows it.
fn is_torn_tail(seg: &Segment, offset: u64) -> Result<bool, FsError> {
    let mut rest = vec![0u8; (seg.len - offset) as usize];
    let n = read_at(&seg.file, &mut rest, offset)
        .map_err(|e| FsError::io(&seg.path, Some(offset), e))?;
    rest.truncate(n);
    Ok(!format::valid_record_after(&rest))
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

impl Store for FsStore {
    type Handle = FsHandle;
    type Error = FsError;

    fn kind(&self) -> &'static str {
        "fs"
    }

    fn recover(&mut self, visitor: &mut dyn RecoveryVisitor<FsHandle>) -> Result<(), FsError> {
        self.mutate(|s| s.replay(visitor))
    }

    fn put_callback(&mut self, id: u32, name: &str) -> Result<(), FsError> {
        self.mutate(|s| {
            s.check_size(name.len())?;
            s.prepare_write()?;
            s.body.clear();
            format::encode_named(&mut s.body, KIND_CALLBACK, id, name);
            s.append_body()?;
            s.idx.callbacks.insert(id, Box::from(name));
            s.after_op()
        })
    }

    fn push(
        &mut self,
        seq: u64,
        meta: &EntryMeta<'_>,
        payload: &[u8],
        fingerprint: Option<&Fingerprint>,
    ) -> Result<FsHandle, FsError> {
        self.mutate(|s| {
            s.check_new_seq(seq)?;
            s.check_size(payload.len() + meta.group.len())?;
            // A replay after this must see the new request: rescan then.
            s.recovery = None;
            s.prepare_write()?;
            let group = s.intern_group(meta.group)?;
            let handle = s.append_entry(&EntryRecord {
                seq,
                replaces: None,
                group,
                priority: meta.priority,
                start: meta.start,
                leased: false,
                not_before: meta.not_before.map(Timestamp::as_nanos),
                fingerprint: fingerprint.map(format::fp_prefix),
                payload,
            })?;
            s.after_op()?;
            Ok(handle)
        })
    }

    fn load<'a>(
        &'a mut self,
        seq: u64,
        handle: &'a FsHandle,
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], FsError> {
        if self.idx.live.get(seq).is_none() {
            return Err(self.unknown(seq));
        }
        let h = self.resolve(seq, *handle)?;
        let (range, source) = self.read_entry(seq, h, buf)?;
        Ok(match source {
            Source::WriteBuffer => &self.buf[range],
            Source::Caller => &buf[range],
            Source::Map => &self
                .existing_map(h.segment())
                .expect("read_entry just read this map")[range],
        })
    }

    const PREFETCH: bool = true;

    fn prefetch(&self, seq: u64, handle: &FsHandle) {
        let Ok(h) = self.resolve(seq, *handle) else {
            return;
        };
        let map = self.existing_map(h.segment());
        if let Some(bytes) = map.and_then(|m| m.get(h.offset() as usize..)) {
            // A record of a typical request spans one or two cache lines.
            if let Some(line) = bytes.first_chunk::<128>() {
                polite_throttle_core::prefetch(line);
            } else if let Some(b) = bytes.first() {
                polite_throttle_core::prefetch(b);
            }
        }
    }

    fn lease(&mut self, seq: u64, _handle: &FsHandle) -> Result<(), FsError> {
        self.mutate(|s| {
            s.prepare_write()?;
            if !s.idx.live.set_leased(seq) {
                return Err(s.unknown(seq));
            }
            s.body.clear();
            format::encode_seq_record(&mut s.body, KIND_LEASE, seq);
            s.append_body()?;
            s.note_change(false)
        })
    }

    fn ack(&mut self, seq: u64, handle: FsHandle) -> Result<(), FsError> {
        self.mutate(|s| {
            s.prepare_write()?;
            if s.idx.live.remove(seq).is_none() {
                return Err(s.unknown(seq));
            }
            if let Ok(h) = s.resolve(seq, handle) {
                s.release(h);
            }
            if !s.idx.relocated.is_empty() {
                s.idx.relocated.remove(&seq);
            }
            s.body.clear();
            format::encode_seq_record(&mut s.body, KIND_ACK, seq);
            s.append_body()?;
            s.after_op()
        })
    }

    fn requeue(
        &mut self,
        seq: u64,
        handle: FsHandle,
        new_seq: u64,
        meta: &EntryMeta<'_>,
    ) -> Result<FsHandle, FsError> {
        self.mutate(|s| {
            if s.idx.live.get(seq).is_none() {
                return Err(s.unknown(seq));
            }
            s.check_new_seq(new_seq)?;
            s.recovery = None;
            s.prepare_write()?;
            // The payload stays as it was; a new record carries it with the new metadata
            // and replaces the old one in the same step.
            let h = s.resolve(seq, handle)?;
            let mut copy = std::mem::take(&mut s.copy);
            let r = s.read_entry(seq, h, &mut copy);
            let result = r.and_then(|(range, source)| {
                match source {
                    Source::WriteBuffer => {
                        copy.clear();
                        copy.extend_from_slice(&s.buf[range]);
                    }
                    Source::Map => {
                        let map = s.existing_map(h.segment());
                        copy.clear();
                        copy.extend_from_slice(&map.expect("read_entry just read this map")[range]);
                    }
                    Source::Caller => {
                        copy.drain(..range.start);
                        copy.truncate(range.end - range.start);
                    }
                }
                s.check_size(copy.len() + meta.group.len())?;
                let group = s.intern_group(meta.group)?;
                let handle = s.append_entry(&EntryRecord {
                    seq: new_seq,
                    replaces: Some(seq),
                    group,
                    priority: meta.priority,
                    start: meta.start,
                    leased: false,
                    not_before: meta.not_before.map(Timestamp::as_nanos),
                    fingerprint: None,
                    payload: &copy,
                })?;
                s.idx.live.remove(seq);
                s.idx.relocated.remove(&seq);
                s.release(h);
                s.after_op()?;
                Ok(handle)
            });
            s.copy = copy;
            result
        })
    }

    fn add_fingerprints(&mut self, fingerprints: &[Fingerprint]) -> Result<(), FsError> {
        self.mutate(|s| {
            for chunk in fingerprints.chunks(FPS_PER_BLOCK) {
                s.prepare_write()?;
                s.body.clear();
                s.body.push(KIND_FINGERPRINTS);
                for fp in chunk {
                    s.body.extend_from_slice(&format::fp_prefix(fp));
                }
                s.append_body()?;
            }
            s.after_op()
        })
    }

    fn save_scope_states(&mut self, states: &[ScopeSnapshot]) -> Result<(), FsError> {
        self.mutate(|s| {
            s.scopes_pending = Some(files::encode_scopes(&s.dir, states)?);
            s.after_op()
        })
    }

    fn flush(&mut self) -> Result<(), FsError> {
        FsStore::flush(self)
    }
}
