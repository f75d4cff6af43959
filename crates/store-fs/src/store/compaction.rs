//! Compaction: copying the oldest segment's held records forward when garbage dominates.

use std::cell::OnceCell;
use std::fs;

use super::frames::FrameReader;
use super::{FsHandle, FsStore, Next};
use crate::error::FsError;
use crate::files;
use crate::format::{self, EntryRecord, KIND_GROUP, Record, SEGMENT_HEADER_LEN};

impl FsStore {
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
    pub(super) fn maybe_compact(&mut self, steps: u32) -> Result<(), FsError> {
        for _ in 0..steps {
            if self.segments.len() < 2 || !self.garbage_dominates() {
                break;
            }
            self.compact_oldest()?;
        }
        Ok(())
    }

    pub(super) fn compact_oldest(&mut self) -> Result<(), FsError> {
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
}
