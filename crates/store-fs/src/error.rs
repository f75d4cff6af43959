//! What can go wrong, with the file and byte offset it went wrong at.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// An error of the filesystem store. Each names the file (or the store directory) and,
/// where one applies, the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// An I/O operation failed.
    #[error("{}: I/O error{}: {source}", .path.display(), AtOffset(*.offset))]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Where in the file, if the operation was at an offset.
        offset: Option<u64>,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// A file holds bytes that are not what this store wrote (not a torn tail, which is
    /// truncated with a warning).
    #[error("{}: corrupted at byte {offset}: {reason}", .path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The offset of the damaged record or header.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// The file does not start with this store's magic number.
    #[error("{}: not a polite-store-fs file (wrong magic number at byte 0)", .path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// The file was written in a format version this build does not read.
    #[error(
        "{}: format version {found} (at byte 8) is not supported; this build reads version {supported}",
        .path.display()
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// Another process (or another store in this process) has the directory open.
    #[error(
        "{}: the store directory is already open{}; close it there first (lock file {})",
        .dir.display(), Holder(.holder.as_deref()), .lock.display()
    )]
    Locked {
        /// The store directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The holder's process id as it wrote it in the lock file, if readable.
        holder: Option<String>,
    },
    /// A segment between the oldest and the newest is missing.
    #[error("{}: segment file missing (the log has a gap before byte 0 of the next segment)", .path.display())]
    MissingSegment {
        /// The missing file.
        path: PathBuf,
    },
    /// No queued or leased request has this sequence number.
    #[error("{}: no queued or leased request #{seq}", .dir.display())]
    UnknownSeq {
        /// The store directory.
        dir: PathBuf,
        /// The sequence number asked for.
        seq: u64,
    },
    /// A new request's sequence number is not above every number used before (the
    /// store relies on increasing numbers, which the frontier always gives).
    #[error("{}: sequence number {seq} is below the next unused one, {next}", .dir.display())]
    SeqNotIncreasing {
        /// The store directory.
        dir: PathBuf,
        /// The sequence number given.
        seq: u64,
        /// The lowest number the store accepts.
        next: u64,
    },
    /// A handle points at a record that is not the request asked for.
    #[error("{}: byte {offset} does not hold request #{seq}", .path.display())]
    StaleHandle {
        /// The segment file.
        path: PathBuf,
        /// The handle's offset.
        offset: u64,
        /// The sequence number asked for.
        seq: u64,
    },
    /// A record would be larger than the format allows.
    #[error("{}: a record of {len} bytes exceeds the limit of {max}", .dir.display())]
    TooLarge {
        /// The store directory.
        dir: PathBuf,
        /// The record's size.
        len: usize,
        /// The largest record accepted.
        max: usize,
    },
    /// The scope states could not be encoded or decoded.
    #[error("{}: scope states at byte {offset}: {reason}", .path.display())]
    ScopeStates {
        /// The scope-state file.
        path: PathBuf,
        /// Where the problem is.
        offset: u64,
        /// What went wrong.
        reason: String,
    },
    /// Invalid options.
    #[error("invalid polite-store-fs configuration: {0}")]
    Config(String),
    /// A write failed earlier, so what is in memory may not match the files; reopen the
    /// store (it recovers to the last state the files hold).
    #[error("{}: an earlier write failed; reopen the store to recover", .dir.display())]
    Failed {
        /// The store directory.
        dir: PathBuf,
    },
}

impl FsError {
    pub(crate) fn io(path: &Path, offset: Option<u64>, source: io::Error) -> Self {
        FsError::Io {
            path: path.to_path_buf(),
            offset,
            source,
        }
    }

    pub(crate) fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Self {
        FsError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    /// Whether the error leaves the store unusable until reopened (the files may hold
    /// part of an operation).
    pub(crate) fn poisons(&self) -> bool {
        matches!(self, FsError::Io { .. } | FsError::Corrupt { .. })
    }
}

struct AtOffset(Option<u64>);

impl fmt::Display for AtOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(o) => write!(f, " at byte {o}"),
            None => Ok(()),
        }
    }
}

struct Holder<'a>(Option<&'a str>);

impl fmt::Display for Holder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(pid) => write!(f, " (by process {pid})"),
            None => f.write_str(" by another process"),
        }
    }
}
