//! The files of a store directory besides the log: names, positional I/O, directory
//! sync, the lock, the seen file (fingerprints moved out of compacted segments) and the
//! scope-state file (replaced atomically).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use polite_throttle_core::ScopeSnapshot;

use crate::error::FsError;
use crate::format::{self, FP_LEN, FPS_PER_BLOCK, HeaderError, SEEN_HEADER_LEN};

pub(crate) const LOCK_FILE: &str = "LOCK";
pub(crate) const SEEN_FILE: &str = "seen.dat";
pub(crate) const SCOPES_FILE: &str = "scopes.dat";
pub(crate) const SCOPES_TMP: &str = "scopes.dat.tmp";

/// The file name of segment `id`: `seg-0000000001.log`, so names sort like ids.
pub(crate) fn segment_name(id: u32) -> String {
    format!("seg-{id:010}.log")
}

/// The id of a segment file name, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Reads up to `buf.len()` bytes at `offset` (fewer only at the end of the file).
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(file, &mut buf[done..], offset + done as u64);
        #[cfg(windows)]
        let n =
            std::os::windows::fs::FileExt::seek_read(file, &mut buf[done..], offset + done as u64);
        match n {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            match std::os::windows::fs::FileExt::seek_write(
                file,
                &buf[done..],
                offset + done as u64,
            ) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A `Read` over `file[pos..end]` by positional reads (the file's cursor is not used, so
/// several readers may share a handle).
pub(crate) struct PosReader<'f> {
    pub(crate) file: &'f File,
    pub(crate) pos: u64,
    pub(crate) end: u64,
}

impl Read for PosReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = read_at(self.file, &mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Makes the directory's entries (created, renamed, deleted files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), FsError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| FsError::io(dir, None, e))
    }
    #[cfg(not(unix))]
    {
        // Directory handles cannot be synced here; renames are durable on their own.
        let _ = dir;
        Ok(())
    }
}

/// An exclusive OS lock on `LOCK` in the store directory, held while the store is open
/// (released by the OS if the process dies).
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    pub(crate) fn acquire(dir: &Path) -> Result<Self, FsError> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| FsError::io(&path, None, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(FsError::Locked {
                    dir: dir.to_path_buf(),
                    lock: path,
                    holder: (!holder.is_empty()).then(|| holder.to_owned()),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(FsError::io(&path, None, e)),
        }
        // The pid is only for the error message of whoever finds the lock taken.
        let pid = std::process::id().to_string();
        file.set_len(0)
            .and_then(|()| write_all_at(&file, pid.as_bytes(), 0))
            .map_err(|e| FsError::io(&path, None, e))?;
        Ok(DirLock { _file: file })
    }
}

pub(crate) fn header_err(path: &Path, e: HeaderError, len: u64) -> FsError {
    match e {
        HeaderError::BadMagic => FsError::BadMagic {
            path: path.to_path_buf(),
        },
        HeaderError::Version(found) => FsError::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            supported: format::FORMAT_VERSION,
        },
        HeaderError::Short => FsError::corrupt(path, len, "file shorter than its header"),
        HeaderError::BadCrc => FsError::corrupt(path, 0, "header checksum mismatch"),
    }
}

/// The seen file: fingerprint prefixes moved out of compacted segments. Append-only in
/// checksummed blocks, never rewritten (fingerprints are never garbage).
#[derive(Debug)]
pub(crate) struct SeenFile {
    path: PathBuf,
    file: File,
    len: u64,
    count: u64,
}

const BLOCK_HEAD: usize = 8;

impl SeenFile {
    /// Opens (or creates) the seen file, checking every block and cutting a torn last
    /// block off with a warning.
    pub(crate) fn open(dir: &Path) -> Result<Self, FsError> {
        let path = dir.join(SEEN_FILE);
        let io_err = |e, at| FsError::io(&path, at, e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err(e, None))?;
        let mut len = file.metadata().map_err(|e| io_err(e, None))?.len();
        if len < SEEN_HEADER_LEN as u64 {
            let mut head = vec![0u8; len as usize];
            read_at(&file, &mut head, 0).map_err(|e| io_err(e, Some(0)))?;
            // What a crash can leave is a prefix of the header this build writes.
            if !format::seen_header().starts_with(&head) {
                let e = format::check_seen_header(&head)
                    .err()
                    .unwrap_or(HeaderError::Short);
                return Err(header_err(&path, e, len));
            }
            if len > 0 {
                tracing::warn!(file = %path.display(), "torn seen-file header rewritten");
            }
            // New, or created by a crash before its header was complete.
            file.set_len(0).map_err(|e| io_err(e, Some(0)))?;
            write_all_at(&file, &format::seen_header(), 0).map_err(|e| io_err(e, Some(0)))?;
            file.sync_all().map_err(|e| io_err(e, None))?;
            sync_dir(dir)?;
            len = SEEN_HEADER_LEN as u64;
        } else {
            let mut head = [0u8; SEEN_HEADER_LEN];
            read_at(&file, &mut head, 0).map_err(|e| io_err(e, Some(0)))?;
            format::check_seen_header(&head).map_err(|e| header_err(&path, e, len))?;
        }
        let mut seen = SeenFile {
            path,
            file,
            len,
            count: 0,
        };
        let (valid, count) = seen.scan(|_| {}, true)?;
        seen.count = count;
        if valid < len {
            tracing::warn!(
                file = %seen.path.display(),
                offset = valid,
                lost_bytes = len - valid,
                "torn tail of the seen file truncated"
            );
            seen.file
                .set_len(valid)
                .and_then(|()| seen.file.sync_all())
                .map_err(|e| FsError::io(&seen.path, Some(valid), e))?;
            seen.len = valid;
        }
        Ok(seen)
    }

    /// Calls `f` with every stored prefix. Returns the end of the last valid block and
    /// the number of prefixes; with `tolerate_torn`, a bad last block ends the scan
    /// instead of failing it.
    pub(crate) fn scan(
        &self,
        mut f: impl FnMut(&[u8]),
        tolerate_torn: bool,
    ) -> Result<(u64, u64), FsError> {
        let mut r = io::BufReader::with_capacity(
            1 << 18,
            PosReader {
                file: &self.file,
                pos: SEEN_HEADER_LEN as u64,
                end: self.len,
            },
        );
        let mut at = SEEN_HEADER_LEN as u64;
        let mut count = 0u64;
        let mut block = Vec::new();
        loop {
            let mut head = [0u8; BLOCK_HEAD];
            let got =
                read_full(&mut r, &mut head).map_err(|e| FsError::io(&self.path, Some(at), e))?;
            if got == 0 {
                return Ok((at, count));
            }
            let left = self.len - at;
            let torn = |why: &str| -> Result<(u64, u64), FsError> {
                if tolerate_torn {
                    Ok((at, count))
                } else {
                    Err(FsError::corrupt(&self.path, at, why.to_owned()))
                }
            };
            if got < BLOCK_HEAD {
                return torn("truncated block header");
            }
            let stored = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let n = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
            let size = BLOCK_HEAD + n * FP_LEN;
            if n == 0 || n > FPS_PER_BLOCK {
                if left < (BLOCK_HEAD + FPS_PER_BLOCK * FP_LEN) as u64 {
                    return torn("bad block length");
                }
                return Err(FsError::corrupt(&self.path, at, "bad block length"));
            }
            block.resize(n * FP_LEN, 0);
            let got =
                read_full(&mut r, &mut block).map_err(|e| FsError::io(&self.path, Some(at), e))?;
            if got < block.len() {
                return torn("truncated block");
            }
            let mut h = crc32fast::Hasher::new();
            h.update(&head[4..]);
            h.update(&block);
            if h.finalize() != stored {
                if left <= size as u64 {
                    return torn("checksum mismatch in the last block");
                }
                return Err(FsError::corrupt(&self.path, at, "block checksum mismatch"));
            }
            for p in block.chunks_exact(FP_LEN) {
                f(p);
            }
            count += n as u64;
            at += size as u64;
        }
    }

    /// Appends prefixes (concatenated) and makes them durable.
    pub(crate) fn append(&mut self, prefixes: &[u8]) -> Result<(), FsError> {
        if prefixes.is_empty() {
            return Ok(());
        }
        let mut out = Vec::with_capacity(prefixes.len() + prefixes.len() / 1000 + 16);
        for chunk in prefixes.chunks(FPS_PER_BLOCK * FP_LEN) {
            format::encode_seen_block(&mut out, chunk);
        }
        write_all_at(&self.file, &out, self.len)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| FsError::io(&self.path, Some(self.len), e))?;
        self.len += out.len() as u64;
        self.count += (prefixes.len() / FP_LEN) as u64;
        Ok(())
    }

    /// Bytes on disk.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Fingerprints held.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match r.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Encodes scope states for the scope-state file.
pub(crate) fn encode_scopes(dir: &Path, states: &[ScopeSnapshot]) -> Result<Vec<u8>, FsError> {
    postcard::to_allocvec(states).map_err(|e| FsError::ScopeStates {
        path: dir.join(SCOPES_FILE),
        offset: 0,
        reason: e.to_string(),
    })
}

/// Replaces the scope-state file atomically: temp file, fsync, rename, fsync of the
/// directory.
pub(crate) fn write_scopes(dir: &Path, body: &[u8]) -> Result<(), FsError> {
    let tmp = dir.join(SCOPES_TMP);
    let path = dir.join(SCOPES_FILE);
    let bytes = format::encode_scopes_file(body);
    let mut f = File::create(&tmp).map_err(|e| FsError::io(&tmp, None, e))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| FsError::io(&tmp, Some(0), e))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(|e| FsError::io(&path, None, e))?;
    sync_dir(dir)
}

/// The saved scope states (none if never saved).
pub(crate) fn read_scopes(dir: &Path) -> Result<Vec<ScopeSnapshot>, FsError> {
    let path = dir.join(SCOPES_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FsError::io(&path, None, e)),
    };
    let body = format::decode_scopes_file(&bytes).map_err(|(e, at)| match e {
        HeaderError::BadCrc | HeaderError::Short => {
            FsError::corrupt(&path, at, "scope-state file damaged (checksum or length)")
        }
        e => header_err(&path, e, bytes.len() as u64),
    })?;
    postcard::from_bytes(body).map_err(|e| FsError::ScopeStates {
        path: path.clone(),
        offset: format::SCOPES_HEADER_LEN as u64,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_sort_like_ids() {
        assert_eq!(segment_name(42), "seg-0000000042.log");
        assert_eq!(parse_segment_name("seg-0000000042.log"), Some(42));
        assert_eq!(parse_segment_name("seg-42.log"), None);
        assert_eq!(parse_segment_name("seen.dat"), None);
        assert!(segment_name(9) < segment_name(10));
    }
}
