//! Writing: appends to the active segment, commits and fsyncs, segment rolls, group ids.

use std::cell::OnceCell;
use std::fs::OpenOptions;
use std::sync::Arc;
use std::time::Instant;

use polite_frontier_core::Durability;

use super::{FsHandle, FsStore, GroupSlot, MAX_GROUP_ID, Segment, WRITE_CHUNK};
use crate::error::FsError;
use crate::files::{self, write_all_at};
use crate::format::{self, EntryRecord, KIND_GROUP, MAX_BODY, SEGMENT_HEADER_LEN, SegmentHeader};

impl FsStore {
    pub(super) fn mutate<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
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

    /// Appends `self.body` as a record to the active segment.
    pub(super) fn append_body(&mut self) -> Result<FsHandle, FsError> {
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
    pub(super) fn write_out(&mut self) -> Result<(), FsError> {
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
    pub(super) fn commit(&mut self) -> Result<(), FsError> {
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
    pub(super) fn commit_and_tidy(&mut self) -> Result<(), FsError> {
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
    pub(super) fn release(&mut self, handle: FsHandle) {
        let first = self.first_id();
        if let Some(i) = handle.segment().checked_sub(first)
            && let Some(seg) = self.segments.get_mut(i as usize)
        {
            seg.held = seg.held.saturating_sub(1);
        }
    }

    /// Counts a new entry record in the active segment.
    pub(super) fn count_entry(&mut self) {
        if let Some(seg) = self.segments.back_mut() {
            seg.entries += 1;
            seg.held += 1;
        }
    }

    /// Applies the durability policy after an operation.
    pub(super) fn after_op(&mut self) -> Result<(), FsError> {
        self.note_change(true)
    }

    /// Applies the durability policy after a change; `counted` changes count towards
    /// `Batched::max_ops` (lease marks do not: losing one loses no request, it only
    /// leaves the redelivery uncounted).
    pub(super) fn note_change(&mut self, counted: bool) -> Result<(), FsError> {
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
    pub(super) fn prepare_write(&mut self) -> Result<(), FsError> {
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
    pub(super) fn roll(&mut self) -> Result<(), FsError> {
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

    pub(super) fn create_segment(&mut self, id: u32) -> Result<(), FsError> {
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

    /// Writes and syncs the log (not the scope states).
    pub(super) fn commit_log(&mut self) -> Result<(), FsError> {
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
    pub(super) fn intern_group(&mut self, key: &str) -> Result<u32, FsError> {
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
    pub(super) fn append_entry(&mut self, entry: &EntryRecord<'_>) -> Result<FsHandle, FsError> {
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

    pub(super) fn check_new_seq(&self, seq: u64) -> Result<(), FsError> {
        if seq < self.idx.next_seq || seq == u64::MAX {
            return Err(FsError::SeqNotIncreasing {
                dir: self.dir.clone(),
                seq,
                next: self.idx.next_seq,
            });
        }
        Ok(())
    }

    pub(super) fn check_size(&self, len: usize) -> Result<(), FsError> {
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
}
