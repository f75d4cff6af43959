//! Reading: segments by number, handles after compaction, records by map, buffer or pread.

use std::path::Path;

use memmap2::Mmap;

use super::{FsHandle, FsStore, LOAD_READ, Segment, Source};
use crate::error::FsError;
use crate::files::{self, read_at};
use crate::format::{self, FrameParse, Record};

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

impl FsStore {
    pub(super) fn active(&self) -> &Segment {
        self.segments
            .back()
            .expect("a store always has an active segment")
    }

    pub(super) fn active_len(&self) -> u64 {
        self.active().len + self.buf.len() as u64
    }

    pub(super) fn first_id(&self) -> u32 {
        self.segments.front().map_or(0, |s| s.id)
    }

    pub(super) fn segment(&self, id: u32) -> Option<&Segment> {
        let first = self.first_id();
        let i = id.checked_sub(first)? as usize;
        self.segments.get(i)
    }

    pub(super) fn unknown(&self, seq: u64) -> FsError {
        FsError::UnknownSeq {
            dir: self.dir.clone(),
            seq,
        }
    }

    /// Where the record of `seq` is now (following a move by compaction).
    pub(super) fn resolve(&self, seq: u64, handle: FsHandle) -> Result<FsHandle, FsError> {
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
    pub(super) fn mapped<'s>(&self, sealed: &'s Segment) -> Option<&'s Mmap> {
        if !self.config.mmap_reads {
            return None;
        }
        sealed.map.get_or_init(|| map_sealed(sealed)).as_ref()
    }

    /// The map of segment `id`, if one was made.
    pub(super) fn existing_map(&self, id: u32) -> Option<&Mmap> {
        self.segment(id)?.map.get()?.as_ref()
    }

    /// Reads the entry record of `seq` at `handle` (already resolved). Returns where its
    /// payload is: in `buf`, in the write buffer (a record not yet written out), or in
    /// the segment's memory map.
    pub(super) fn read_entry(
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
}
