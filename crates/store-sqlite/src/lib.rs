//! # polite-store-sqlite
//!
//! The embedded default store of the crawl frontier: one SQLite file (the library is
//! bundled, no system package needed), WAL mode, prepared cached statements and batched
//! transactions per the [`Durability`] policy. Whatever was committed survives `kill -9`
//! and power loss; a reopened store gives the frontier back its queue in order, its
//! unacknowledged leases (delivered again), its duplicate filter, applied per-request
//! delays and saved throttle scope states.
//!
//! ```
//! use polite_frontier_core::{Frontier, FrontierConfig, Poll, Request};
//! use polite_store_sqlite::{SqliteOptions, SqliteStore};
//! use polite_throttle_core::{Outcome, Settings, Timestamp};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("crawl.sqlite3");
//! let now = Timestamp::ZERO;
//!
//! let store = SqliteStore::open(&path, SqliteOptions::default())?;
//! let mut frontier = Frontier::open(Settings::default(), FrontierConfig::default(), store, now)?;
//! frontier.push(&Request::get("https://example.com/").callback("parse"), now)?;
//! frontier.push(&Request::get("https://example.com/about").callback("parse"), now)?;
//! let Poll::Ready(lease) = frontier.poll(now)? else { unreachable!() };
//! frontier.complete(lease.id(), &Outcome::status(200), now)?;
//! drop(frontier); // a crash would do the same: nothing committed is lost
//!
//! let store = SqliteStore::open(&path, SqliteOptions::default())?;
//! let frontier = Frontier::open(Settings::default(), FrontierConfig::default(), store, now)?;
//! assert_eq!(frontier.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Schema (version 2, `PRAGMA user_version`; `PRAGMA application_id` = `0x46524f4e`)
//!
//! The frontier keeps its scheduling index in memory and rebuilds it from the file when
//! it opens, so the file is laid out for writing, not for lookups: queued requests are
//! rows appended in arrival order, and everything that happens to them afterwards
//! (acknowledgements, leases, fingerprints seen) is appended as one row per commit.
//! A commit thus writes a few pages at the end of each table instead of one random
//! page per operation.
//!
//! ```sql
//! CREATE TABLE groups   (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);   -- scope groups: a host, or scopes joined by newlines
//! CREATE TABLE requests (seq INTEGER PRIMARY KEY,                              -- order of arrival
//!                        grp INTEGER NOT NULL REFERENCES groups (id),
//!                        priority INTEGER NOT NULL,                            -- effective (after depth_priority)
//!                        start INTEGER NOT NULL,                               -- 1 for start requests
//!                        not_before INTEGER,                                   -- per-request delay, ns since the crawl's epoch
//!                        payload BLOB NOT NULL);                               -- polite-frontier-core's compact record
//! CREATE TABLE acks     (id INTEGER PRIMARY KEY, seqs TEXT NOT NULL);          -- JSON array per commit: requests acknowledged (or
//!                                                                              --   retried under a new seq) whose rows are still there
//! CREATE TABLE leases   (id INTEGER PRIMARY KEY, seqs TEXT NOT NULL);          -- JSON array per commit: requests handed out since the frontier opened
//! CREATE TABLE seen     (id INTEGER PRIMARY KEY, fps BLOB NOT NULL);           -- first 64 bits of fingerprints, big-endian, 8 bytes each
//! CREATE TABLE callbacks   (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
//! CREATE TABLE scope_states(scope TEXT PRIMARY KEY, state TEXT NOT NULL);      -- JSON of polite_throttle_core::ScopeSnapshot
//! CREATE TABLE meta        (key TEXT PRIMARY KEY, value);                      -- next_seq
//! CREATE INDEX requests_by_group ON requests (grp, priority DESC, seq);      -- only with SqliteOptions::group_index
//! CREATE VIEW acked (seq)  AS ...;  -- the acks arrays, one row per sequence number
//! CREATE VIEW pending      AS ...;  -- requests not acknowledged: seq, grp (the group's key), priority,
//!                                   --   start, not_before, leased (0/1), payload
//! ```
//!
//! Acknowledged rows are deleted in bulk, in `seq` order: once they outnumber both the
//! requests still pending and [`SqliteOptions::compact_after`], each commit deletes a
//! slice of them (twice as many as it has operations, plus 64), and when the pass is
//! over the `acks` rows it covered go too. Rows and acks are deleted in the same
//! transaction, so a crash at any point leaves every request either pending or
//! acknowledged, never lost and never both. The file holds at most about twice the
//! pending requests (plus `compact_after`).
//!
//! Useful queries (`sqlite3 crawl.sqlite3`). By default there is no index but the primary
//! keys, so these scan the table, which takes a second or so at a million requests; with
//! [`SqliteOptions::group_index`] the next request of a host is one index seek:
//!
//! ```sql
//! -- Pending requests per host, busiest first.
//! SELECT grp AS host, count(*) AS pending FROM pending WHERE NOT leased
//!  GROUP BY grp ORDER BY pending DESC LIMIT 20;
//! -- What is in flight right now (or was, when the crawler died).
//! SELECT count(*) FROM pending WHERE leased;
//! -- The next request of one host, by priority then arrival.
//! SELECT seq, priority FROM pending WHERE grp = 'example.com'
//!  ORDER BY priority DESC, seq LIMIT 1;
//! -- Backed-off hosts in the saved throttle states.
//! SELECT scope, json_extract(state, '$.level') AS level FROM scope_states WHERE level > 0;
//! ```
//!
//! A version 1 file (one row per fingerprint, a `leased` column, an index on
//! `(grp, priority DESC, seq)`) is migrated when it is opened.
//!
//! Scope states the throttler evicts from memory (see `Store::hibernation`) go to a
//! second database beside the first, `<file>.hibernated` (table
//! `hibernated_scopes (scope TEXT PRIMARY KEY, state TEXT NOT NULL)`, JSON as in
//! `scope_states`), written in batches of its own and synced with each flush.
//!
//! ## Guarantees and limits
//!
//! - One frontier per file: the store holds an OS lock on `<file>.lock` (released when
//!   the process ends, however it ends); a second opener gets [`SqliteError::Locked`].
//!   Other tools can still read the database while a crawl runs (WAL mode).
//! - A read-only file, a file that is not a frontier database, a corrupted file and a
//!   file written by a newer schema are clear errors naming the path, never panics.
//! - Sequence numbers only grow: a push or retry under a number below the store's
//!   high-water mark is [`SqliteError::SeqNotIncreasing`] (the frontier never does it).
//! - With [`Durability::Batched`], the delay bound is checked on each operation but
//!   lease marks, which go with the next commit (there is no background thread): an
//!   idle frontier should [`flush`](Store::flush) (the runtime adapters do).
//! - Memory: besides SQLite's page cache (2 MiB; the file is read through a memory map
//!   of up to 1 GiB, whose pages count as the process's file-backed memory), the store
//!   keeps the sequence numbers of leases in flight and of acknowledged requests whose
//!   rows are not deleted yet (at most about one per pending request), as bitmaps of 64
//!   consecutive numbers: a few bits per number.
//! - The memory map has SQLite's usual trade-off: a disk that fails to read a mapped
//!   page (or a file truncated by another program) ends the process with `SIGBUS`
//!   instead of returning an error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use polite_frontier_core::Durability;
// Named by the docs.
#[cfg(doc)]
use polite_frontier_core::Store;
use rusqlite::{Connection, OpenFlags};

mod error;
mod hibernation;
mod open;
mod options;
mod recovery;
mod schema;
mod seqs;
mod store_impl;
mod writes;

pub use error::SqliteError;
pub use options::SqliteOptions;

use error::classify;
use open::lock_file;
use seqs::SeqSet;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 2;
/// `PRAGMA application_id` of a frontier database ("FRON").
pub const APPLICATION_ID: i64 = 0x4652_4f4e;

/// A pass of the compaction: the acknowledged rows to delete, in `seq` order, and the
/// last `acks` row whose sequence numbers are all among them.
#[derive(Debug)]
struct Pass {
    seqs: Vec<u64>,
    done: usize,
    last_chunk: i64,
}

/// A frontier store in one SQLite file.
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    _lock: std::fs::File,
    durability: Durability,
    compact_after: u64,
    in_tx: bool,
    pending: u32,
    batch_started: Instant,
    groups: HashMap<Box<str>, i64>,
    next_seq: u64,
    /// `next_seq` as stored in `meta`.
    saved_next_seq: u64,
    /// Requests in `requests` not acknowledged; known once the store was recovered (or
    /// created empty). Compaction waits for it.
    live: Option<u64>,
    /// Acknowledged requests whose rows are still in `requests` (listed in `acks`, or
    /// in `new_acks`).
    acked: SeqSet,
    /// Acknowledged in the open transaction: written to `acks` at commit.
    new_acks: Vec<u64>,
    /// Leases handed out since the store was opened and not ended.
    leased: SeqSet,
    /// Leases taken in the open transaction: those still out at commit are written to
    /// `leases` (a lease acknowledged within one batch costs no write).
    new_leases: Vec<u64>,
    /// Sequence numbers listed in `leases` (counted once recovered).
    lease_marks: u64,
    /// Fingerprint prefixes marked seen in the open transaction (8 bytes each).
    new_seen: Vec<u8>,
    pass: Option<Pass>,
    /// The last request `load`ed, known to exist and not acknowledged.
    last_loaded: Option<u64>,
    json: String,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("uncommitted", &self.pending)
            .field("live", &self.live)
            .field("acked_rows", &self.acked.len())
            .finish_non_exhaustive()
    }
}

/// Extra lease marks tolerated in `leases` before the table is rewritten with the
/// leases still out (beyond twice their number).
const LEASE_SLACK: u64 = 4096;

impl SqliteStore {
    /// Opens (or creates) the frontier database at `path`.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, SqliteError> {
        Self::open_with_flags(path.as_ref(), options, OpenFlags::default())
    }

    /// [`open`](Self::open) with SQLite's own open flags: the tests open with
    /// `SQLITE_OPEN_READ_ONLY`, what SQLite falls back to for a file it cannot write,
    /// to check that the store reports it as root too (root writes past permissions).
    pub(crate) fn open_with_flags(
        path: &Path,
        options: SqliteOptions,
        flags: OpenFlags,
    ) -> Result<Self, SqliteError> {
        let path = path.to_path_buf();
        let lock = lock_file(&path)?;
        let conn =
            Connection::open_with_flags(&path, flags).map_err(|e| classify(&path, "opening", e))?;
        let mut store = SqliteStore {
            conn,
            path,
            _lock: lock,
            durability: options.durability,
            compact_after: u64::from(options.compact_after),
            in_tx: false,
            pending: 0,
            batch_started: Instant::now(),
            groups: HashMap::new(),
            next_seq: 0,
            saved_next_seq: 0,
            live: None,
            acked: SeqSet::default(),
            new_acks: Vec::new(),
            leased: SeqSet::default(),
            new_leases: Vec::new(),
            lease_marks: 0,
            new_seen: Vec::new(),
            pass: None,
            last_loaded: None,
            json: String::new(),
        };
        store.prepare(options.verify_on_open, options.group_index)?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store's connection, for queries of your own (see the crate docs). Changes
    /// made through it bypass the frontier: read only. What the store has done since
    /// its last commit is not in the tables yet (call [`flush`](Store::flush) first).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Err(e) = self.commit() {
            tracing::warn!(error = %e, "committing the frontier database on close failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database SQLite opens read-only (as it does a file it cannot write) is refused
    /// when opening, as read-only, whoever runs the test: the integration test
    /// `a_read_only_database_is_a_clear_error` makes the file itself unwritable.
    #[test]
    fn a_database_opened_read_only_is_a_read_only_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crawl.sqlite3");
        drop(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let err = SqliteStore::open_with_flags(&path, SqliteOptions::default(), flags)
            .expect_err("a read-only connection was accepted");
        assert!(matches!(err, SqliteError::ReadOnly { .. }), "{err}");
        assert!(err.to_string().contains("read-only"), "{err}");
        // Nothing was changed: it opens read-write as before.
        drop(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
    }
}

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
