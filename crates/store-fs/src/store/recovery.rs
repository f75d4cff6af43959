//! Opening and recovery: the scan that checks segments and rebuilds the index, and replay.

use std::fs;
use std::sync::Arc;

use hashbrown::HashMap;
use polite_frontier_core::{EntryMeta, RecoveryVisitor};
use polite_throttle_core::{ScopeSnapshot, Timestamp};

use super::frames::FrameReader;
use super::{
    FsHandle, FsStore, GroupSlot, Index, MAX_GROUP_ID, Next, RI_NOT_BEFORE, RI_START, RecItem,
    Segment,
};
use crate::error::FsError;
use crate::files::{self, read_at};
use crate::format::{
    self, FP_LEN, HeaderError, KIND_UNLEASE, Record, SEGMENT_HEADER_LEN, SEGMENT_MAGIC,
    SegmentHeader,
};

impl FsStore {
    /// Reads every segment, rebuilding the index and the list of held requests. On the
    /// first scan a torn tail (or torn header) of the newest segment is removed.
    pub(super) fn scan(&mut self, first_open: bool) -> Result<(), FsError> {
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

    pub(super) fn replay(&mut self, v: &mut dyn RecoveryVisitor<FsHandle>) -> Result<(), FsError> {
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
