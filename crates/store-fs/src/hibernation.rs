//! Evicted scope states in `hibernated.log`: an append-only file of checksummed records
//! (a state, or a tombstone when the scope wakes) with an in-memory index of 64-bit name
//! hashes to offsets, about 20-40 bytes per hibernated scope.
//!
//! Records are framed as the log segments' are (`format::frame`: CRC, varint length,
//! body), body = `1 | postcard(ScopeSnapshot)` or `2 | name`. The last record of a scope wins; a tombstone means "in memory again".
//! A record cut short at the end of the file (a crash mid-write) is dropped when the file
//! is opened; a damaged record anywhere else is an error naming the file and offset.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use polite_throttle_core::{HibernationError, ScopeHibernation, ScopeSnapshot};

use crate::error::FsError;
use crate::files::{read_at, sync_dir};
use crate::format::{self, FrameParse};

/// The file, in the store directory.
pub(crate) const FILE: &str = "hibernated.log";
const TMP: &str = "hibernated.log.tmp";
const MAGIC: &[u8; 8] = b"PFHIB01\n";
const HEADER: u64 = MAGIC.len() as u64;
const STATE: u8 = 1;
const TOMBSTONE: u8 = 2;
/// Appends wait in memory up to this size (then go to the file, unsynced).
const BUFFER: usize = 64 * 1024;
/// The file is rewritten with only live records when it exceeds this and holds more
/// than twice their size.
const COMPACT_MIN: u64 = 1 << 20;

/// A fixed hasher: the index is rebuilt from the file at each open.
type NameHasher = BuildHasherDefault<DefaultHasher>;

/// The [`ScopeHibernation`] of an [`FsStore`](crate::FsStore).
pub(crate) struct FsHibernation {
    path: PathBuf,
    dir: PathBuf,
    file: File,
    /// Bytes in the file; `buf` continues it.
    file_len: u64,
    buf: Vec<u8>,
    /// Name hash -> offset of the scope's state record.
    index: HashMap<u64, u64>,
    /// Scopes whose hash is taken in `index` by another scope (rare).
    collided: HashMap<Box<str>, u64>,
    /// Bytes of the records `index` and `collided` point to.
    live_bytes: u64,
    /// Set when the file was opened or since a write failed; reported by `flush`.
    error: Option<String>,
    hasher: NameHasher,
}

impl FsHibernation {
    /// Opens (or creates) the file in `dir` and indexes it; with `resume` false, empties
    /// it first.
    pub(crate) fn open(dir: &Path, resume: bool) -> Result<Self, FsError> {
        let path = dir.join(FILE);
        let _ = fs::remove_file(dir.join(TMP));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| FsError::io(&path, None, e))?;
        let mut h = FsHibernation {
            path,
            dir: dir.to_path_buf(),
            file,
            file_len: 0,
            buf: Vec::new(),
            index: HashMap::new(),
            collided: HashMap::new(),
            live_bytes: 0,
            error: None,
            hasher: NameHasher::default(),
        };
        let len = h
            .file
            .metadata()
            .map_err(|e| FsError::io(&h.path, None, e))?
            .len();
        if !resume || len < HEADER {
            h.file
                .set_len(0)
                .and_then(|()| h.file.write_all(MAGIC))
                .and_then(|()| h.file.sync_all())
                .map_err(|e| FsError::io(&h.path, Some(0), e))?;
            h.file_len = HEADER;
            return Ok(h);
        }
        h.scan(len)?;
        Ok(h)
    }

    /// Rebuilds the index from the file.
    fn scan(&mut self, len: u64) -> Result<(), FsError> {
        let bytes = fs::read(&self.path).map_err(|e| FsError::io(&self.path, None, e))?;
        if bytes.len() as u64 != len || &bytes[..MAGIC.len()] != MAGIC {
            return Err(FsError::corrupt(
                &self.path,
                0,
                "not a hibernated-scopes file (bad magic)",
            ));
        }
        let mut at = HEADER as usize;
        // Scope -> (offset, frame length) of its last state, if not woken since.
        let mut names: HashMap<Box<str>, (u64, u64)> = HashMap::new();
        while at < bytes.len() {
            let (body, len) = match format::parse_frame(&bytes[at..]) {
                FrameParse::Record { body, len } => (&bytes[at..][body], len),
                FrameParse::Incomplete { .. } => {
                    // Cut short by a crash: drop the tail.
                    tracing::warn!(file = %self.path.display(), offset = at, "torn hibernated-scope record dropped");
                    break;
                }
                FrameParse::BadCrc | FrameParse::BadLength => {
                    return Err(FsError::corrupt(
                        &self.path,
                        at as u64,
                        "hibernated scope record damaged (checksum or length)",
                    ));
                }
            };
            match body.first() {
                Some(&STATE) => {
                    let s: ScopeSnapshot = postcard::from_bytes(&body[1..]).map_err(|e| {
                        FsError::corrupt(
                            &self.path,
                            at as u64,
                            format!("hibernated scope state does not decode: {e}"),
                        )
                    })?;
                    names.insert(s.scope.into_boxed_str(), (at as u64, len as u64));
                }
                Some(&TOMBSTONE) => {
                    let name = std::str::from_utf8(&body[1..]).map_err(|_| {
                        FsError::corrupt(
                            &self.path,
                            at as u64,
                            "hibernated scope tombstone is not UTF-8",
                        )
                    })?;
                    names.remove(name);
                }
                _ => {
                    return Err(FsError::corrupt(
                        &self.path,
                        at as u64,
                        "unknown hibernated scope record kind",
                    ));
                }
            }
            at += len;
        }
        if at < bytes.len() {
            self.file
                .set_len(at as u64)
                .and_then(|()| self.file.sync_all())
                .map_err(|e| FsError::io(&self.path, Some(at as u64), e))?;
        }
        self.file_len = at as u64;
        for (name, (off, len)) in names {
            self.live_bytes += len;
            self.index_at(&name, off);
        }
        Ok(())
    }

    /// Indexes the state of `name` at `off`; a hash already taken by another scope (rare)
    /// sends it to `collided`.
    fn index_at(&mut self, name: &str, off: u64) {
        let h = self.hash(name);
        let taken = self
            .index
            .get(&h)
            .is_some_and(|&other| self.state_at(other).map_or(true, |(s, _)| s.scope != name));
        if taken {
            self.collided.insert(name.into(), off);
        } else {
            self.index.insert(h, off);
        }
    }

    fn hash(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    /// Appends a record, writing the buffer out when it is full: its offset and frame
    /// length.
    fn append(&mut self, kind: u8, payload: &[u8]) -> Result<(u64, u64), String> {
        let off = self.file_len + self.buf.len() as u64;
        let mut body = Vec::with_capacity(1 + payload.len());
        body.push(kind);
        body.extend_from_slice(payload);
        format::frame(&mut self.buf, &body);
        let len = self.file_len + self.buf.len() as u64 - off;
        if self.buf.len() >= BUFFER {
            self.write_out()?;
        }
        Ok((off, len))
    }

    fn write_out(&mut self) -> Result<(), String> {
        if self.buf.is_empty() {
            return Ok(());
        }
        crate::files::write_all_at(&self.file, &self.buf, self.file_len)
            .map_err(|e| format!("{}: writing at {}: {e}", self.path.display(), self.file_len))?;
        self.file_len += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// The record at `off` (in the file or still in the buffer): its body and frame length.
    fn read(&self, off: u64) -> Result<(Vec<u8>, u64), String> {
        let fail = |what: &str| {
            format!(
                "{}: hibernated scope record at {off}: {what}",
                self.path.display()
            )
        };
        // The CRC and the longest varint length first, then the whole frame.
        let end = self.file_len + self.buf.len() as u64;
        let mut frame = vec![0u8; end.saturating_sub(off).min(14) as usize];
        loop {
            self.read_bytes(off, &mut frame).map_err(|e| fail(&e))?;
            match format::parse_frame(&frame) {
                FrameParse::Record { body, len } => {
                    return Ok((frame[body].to_vec(), len as u64));
                }
                FrameParse::Incomplete { need: Some(n) } if n > frame.len() => {
                    frame.resize(n, 0);
                }
                FrameParse::Incomplete { .. } => return Err(fail("cut short")),
                FrameParse::BadCrc | FrameParse::BadLength => {
                    return Err(fail("damaged (checksum or length)"));
                }
            }
        }
    }

    fn read_bytes(&self, off: u64, out: &mut [u8]) -> Result<(), String> {
        if off >= self.file_len {
            let start = (off - self.file_len) as usize;
            let src = self
                .buf
                .get(start..start + out.len())
                .ok_or("past the end")?;
            out.copy_from_slice(src);
            return Ok(());
        }
        match read_at(&self.file, out, off) {
            Ok(n) if n == out.len() => Ok(()),
            Ok(_) => Err("cut short".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn state_at(&self, off: u64) -> Result<(ScopeSnapshot, u64), String> {
        let (body, len) = self.read(off)?;
        if body.first() != Some(&STATE) {
            return Err(format!(
                "{}: record at {off} is not a scope state",
                self.path.display()
            ));
        }
        let s = postcard::from_bytes(&body[1..]).map_err(|e| {
            format!(
                "{}: hibernated state at {off} does not decode: {e}",
                self.path.display()
            )
        })?;
        Ok((s, len))
    }

    /// Rewrites the file with only the live records.
    fn compact(&mut self) -> Result<(), String> {
        let tmp = self.dir.join(TMP);
        let io = |e: std::io::Error| format!("{}: compacting: {e}", tmp.display());
        let mut out = MAGIC.to_vec();
        let mut moved: Vec<(u64, u64)> = Vec::new();
        let offsets: Vec<u64> = self
            .index
            .values()
            .chain(self.collided.values())
            .copied()
            .collect();
        for off in offsets {
            let (body, _) = self.read(off)?;
            moved.push((off, out.len() as u64));
            format::frame(&mut out, &body);
        }
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(&out).and_then(|()| f.sync_all()).map_err(io)?;
        drop(f);
        fs::rename(&tmp, &self.path).map_err(io)?;
        sync_dir(&self.dir).map_err(|e| e.to_string())?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io)?;
        let map: HashMap<u64, u64> = moved.into_iter().collect();
        for off in self.index.values_mut().chain(self.collided.values_mut()) {
            *off = map[off];
        }
        self.file_len = out.len() as u64;
        self.live_bytes = self.file_len - HEADER;
        Ok(())
    }

    fn try_flush(&mut self) -> Result<(), String> {
        self.write_out()?;
        self.file
            .sync_data()
            .map_err(|e| format!("{}: syncing: {e}", self.path.display()))?;
        if self.file_len > COMPACT_MIN && self.live_bytes * 2 < self.file_len {
            self.compact()?;
        }
        Ok(())
    }
}

impl ScopeHibernation for FsHibernation {
    fn hibernate(&mut self, snapshot: ScopeSnapshot) {
        let payload = match postcard::to_allocvec(&snapshot) {
            Ok(p) => p,
            Err(e) => {
                self.error.get_or_insert(format!(
                    "scope state of {:?} does not encode: {e}",
                    snapshot.scope
                ));
                return;
            }
        };
        match self.append(STATE, &payload) {
            Ok((off, len)) => {
                self.live_bytes += len;
                self.index_at(&snapshot.scope, off);
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot> {
        let h = self.hash(scope);
        let off = match self.collided.get(scope) {
            Some(&off) => off,
            None => *self.index.get(&h)?,
        };
        let (snapshot, len) = match self.state_at(off) {
            Ok(found) => found,
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        };
        if snapshot.scope != scope {
            return None; // the hash's owner is another scope
        }
        if let Err(e) = self.append(TOMBSTONE, scope.as_bytes()) {
            self.error.get_or_insert(e);
        }
        if self.collided.remove(scope).is_none() {
            self.index.remove(&h);
        }
        self.live_bytes = self.live_bytes.saturating_sub(len);
        Some(snapshot)
    }

    fn keeps_everything(&self) -> bool {
        true
    }

    fn flush(&mut self) -> Result<(), HibernationError> {
        if let Err(e) = self.try_flush() {
            self.error.get_or_insert(e);
        }
        match self.error.take() {
            Some(e) => Err(HibernationError::new(e)),
            None => Ok(()),
        }
    }
}
