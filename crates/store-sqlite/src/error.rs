//! [`SqliteError`], and how SQLite's error codes turn into the errors users act on.

use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

/// What went wrong with a frontier database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// Another process has the database open.
    #[error("{path}: the database is in use by another process (one frontier per file)", path = .path.display())]
    Locked {
        /// The database file.
        path: PathBuf,
    },
    /// The file (or its directory) cannot be written.
    #[error("{path}: the database is read-only: {source}", path = .path.display())]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// SQLite's report.
        source: rusqlite::Error,
    },
    /// Not a frontier database, or damaged.
    #[error("{path}: not a frontier database or corrupted: {detail}", path = .path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// Written by a newer version of this crate.
    #[error("{path}: written by a newer version (schema {found}; this build reads up to {supported})", path = .path.display())]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The file's `user_version`.
        found: i64,
        /// The newest schema this build reads.
        supported: i64,
    },
    /// A request the frontier asked for is not in the database (or was acknowledged).
    #[error("{path}: request #{seq} is not in the database", path = .path.display())]
    UnknownRequest {
        /// The database file.
        path: PathBuf,
        /// Its sequence number.
        seq: u64,
    },
    /// A push or retry reused a sequence number: they must only grow.
    #[error("{path}: sequence number {seq} was already used (the next one is {next})", path = .path.display())]
    SeqNotIncreasing {
        /// The database file.
        path: PathBuf,
        /// The sequence number given.
        seq: u64,
        /// The lowest sequence number still unused.
        next: u64,
    },
    /// Any other SQLite failure, with the operation it interrupted.
    #[error("{path}: {op}: {source}", path = .path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What the store was doing.
        op: &'static str,
        /// SQLite's report.
        source: rusqlite::Error,
    },
}

/// Turns SQLite's error codes into the errors users act on.
pub(crate) fn classify(path: &Path, op: &'static str, e: rusqlite::Error) -> SqliteError {
    let path = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => SqliteError::Locked { path },
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied)
            if op != "opening" || e.sqlite_error_code() == Some(ErrorCode::ReadOnly) =>
        {
            SqliteError::ReadOnly { path, source: e }
        }
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => SqliteError::Corrupt {
            path,
            detail: format!("{op}: {e}"),
        },
        _ => SqliteError::Sqlite {
            path,
            op,
            source: e,
        },
    }
}
