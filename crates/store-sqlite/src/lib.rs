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

use polite_frontier_core::{Durability, EntryMeta, Fingerprint, RecoveryVisitor, Store};
use polite_throttle_core::{ScopeSnapshot, Timestamp};
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

mod schema;
mod seqs;

use seqs::SeqSet;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 2;
/// `PRAGMA application_id` of a frontier database ("FRON").
pub const APPLICATION_ID: i64 = 0x4652_4f4e;

/// Options of a [`SqliteStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// When changes become durable (default: group commit, see [`Durability`]).
    pub durability: Durability,
    /// Run `PRAGMA quick_check` when opening (reads the whole file; default off).
    pub verify_on_open: bool,
    /// Acknowledged requests whose rows stay in the file before the store starts
    /// deleting them, if they also outnumber the pending requests (default 4,096).
    /// Smaller values keep the file tighter at the cost of more, smaller deletions.
    pub compact_after: u32,
    /// Keep the index `requests_by_group (grp, priority DESC, seq)`, which makes "the next
    /// request of a group by priority then arrival" one index seek for queries by hand
    /// (default off: the frontier never needs it, it keeps that order in memory, and the
    /// index makes every push and deletion a random page write: about 3x slower pushes
    /// and 4x slower pops at a million requests). Opening with `true` creates it, opening
    /// with `false` drops it.
    pub group_index: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::default(),
            verify_on_open: false,
            compact_after: 4096,
            group_index: false,
        }
    }
}

impl SqliteOptions {
    /// Sets when changes become durable.
    #[must_use]
    pub fn durability(mut self, value: Durability) -> Self {
        self.durability = value;
        self
    }
    /// Sets whether `PRAGMA quick_check` runs when opening.
    #[must_use]
    pub fn verify_on_open(mut self, value: bool) -> Self {
        self.verify_on_open = value;
        self
    }
    /// Sets how many acknowledged rows stay before deletions start.
    #[must_use]
    pub fn compact_after(mut self, value: u32) -> Self {
        self.compact_after = value;
        self
    }
    /// Sets whether the `requests_by_group` index is kept.
    #[must_use]
    pub fn group_index(mut self, value: bool) -> Self {
        self.group_index = value;
        self
    }
}

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
        let path = path.as_ref().to_path_buf();
        let lock = lock_file(&path)?;
        let conn = Connection::open(&path).map_err(|e| classify(&path, "opening", e))?;
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

    fn err(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> SqliteError + '_ {
        move |e| classify(&self.path, op, e)
    }

    fn corrupt(&self, detail: String) -> SqliteError {
        SqliteError::Corrupt {
            path: self.path.clone(),
            detail,
        }
    }

    fn prepare(&mut self, verify: bool, group_index: bool) -> Result<(), SqliteError> {
        let c = &self.conn;
        c.busy_timeout(std::time::Duration::from_millis(200))
            .map_err(self.err("setting the busy timeout"))?;
        let app: i64 = c
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .map_err(self.err("reading the header"))?;
        let version: i64 = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(self.err("reading the header"))?;
        let tables: i64 = c
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .map_err(self.err("reading the schema"))?;
        if version > SCHEMA_VERSION {
            return Err(SqliteError::NewerSchema {
                path: self.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if tables > 0 && (app != APPLICATION_ID || version == 0) {
            return Err(self.corrupt(format!(
                "an SQLite database of another application (application_id {app:#x}, user_version {version})"
            )));
        }
        let mode: String = c
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(self.err("switching to WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(SqliteError::ReadOnly {
                path: self.path.clone(),
                source: rusqlite::Error::InvalidQuery,
            });
        }
        // FULL: a commit is durable when it returns (the WAL is synced on each commit).
        c.pragma_update(None, "synchronous", "FULL")
            .map_err(self.err("setting synchronous"))?;
        // Payloads are read back in scheduling order, not file order: read through a
        // memory map instead of a syscall per page. With the map, a small page cache
        // (SQLite's default 2 MiB) is faster than a big one: its lookups stay in the CPU
        // cache (store-disk sqlite: pop ~310k/s against ~280k/s with 64 MiB).
        c.execute_batch(
            "PRAGMA cache_size = -2000; PRAGMA mmap_size = 1073741824;
             PRAGMA temp_store = MEMORY;",
        )
        .map_err(self.err("tuning the page cache"))?;
        c.execute_batch("BEGIN IMMEDIATE")
            .map_err(self.err("locking the database"))?;
        let tx = (|| {
            if version == 0 {
                schema::create(c)?;
                c.pragma_update(None, "application_id", APPLICATION_ID)?;
            } else if version == 1 {
                schema::migrate_from_v1(c)?;
            }
            c.execute_batch(if group_index {
                "CREATE INDEX IF NOT EXISTS requests_by_group ON requests (grp, priority DESC, seq)"
            } else {
                "DROP INDEX IF EXISTS requests_by_group"
            })?;
            // Written on every open: a read-only file fails here, not mid-crawl.
            c.pragma_update(None, "user_version", SCHEMA_VERSION)
        })();
        if let Err(e) = tx {
            let _ = c.execute_batch("ROLLBACK");
            return Err(classify(
                &self.path,
                if version == 1 {
                    "migrating from schema 1"
                } else {
                    "creating the schema"
                },
                e,
            ));
        }
        c.execute_batch("COMMIT")
            .map_err(self.err("creating the schema"))?;
        if verify {
            let result: String = c
                .query_row("PRAGMA quick_check", [], |r| r.get(0))
                .map_err(self.err("checking integrity"))?;
            if result != "ok" {
                return Err(self.corrupt(result));
            }
        }
        if version == 0 {
            // A new file: nothing to recover, compaction may start right away.
            self.live = Some(0);
        } else {
            // What a store used before (or without) recovery must know: acknowledged
            // rows are gone, and sequence numbers keep growing.
            let acked = self.read_acks()?;
            self.acked = acked;
            let (stored, max_seq) = self.read_seq_marks()?;
            self.next_seq = stored.max(max_seq.map_or(0, |s| s + 1));
            self.saved_next_seq = stored;
        }
        Ok(())
    }

    /// The sequence numbers listed in `acks`.
    fn read_acks(&self) -> Result<SeqSet, SqliteError> {
        self.read_seq_chunks("SELECT seqs FROM acks", "reading acknowledgements")
    }

    fn read_seq_chunks(&self, sql: &str, op: &'static str) -> Result<SeqSet, SqliteError> {
        let mut set = SeqSet::default();
        let mut s = self.conn.prepare(sql).map_err(self.err(op))?;
        let mut rows = s.query([]).map_err(self.err(op))?;
        while let Some(r) = rows.next().map_err(self.err(op))? {
            let text = r
                .get_ref(0)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(self.err(op))?;
            let seqs = seqs::from_json(text).map_err(|e| self.corrupt(format!("{op}: {e}")))?;
            for seq in seqs {
                set.insert(seq);
            }
        }
        Ok(set)
    }

    /// The stored `next_seq` and the largest sequence number in `requests`.
    fn read_seq_marks(&self) -> Result<(u64, Option<u64>), SqliteError> {
        let stored: Option<i64> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'next_seq'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.err("reading the sequence counter"))?;
        let max_seq: Option<i64> = self
            .conn
            .query_row("SELECT max(seq) FROM requests", [], |r| r.get(0))
            .map_err(self.err("reading the sequence counter"))?;
        Ok((
            stored.unwrap_or(0).max(0) as u64,
            max_seq.map(|s| s.max(0) as u64),
        ))
    }

    /// Starts the batch transaction if none is open.
    fn begin(&mut self) -> Result<(), SqliteError> {
        if !self.in_tx {
            self.conn
                .execute_batch("BEGIN IMMEDIATE")
                .map_err(self.err("starting a transaction"))?;
            self.in_tx = true;
            self.batch_started = Instant::now();
        }
        Ok(())
    }

    /// Counts an operation and commits per the durability policy.
    fn done(&mut self) -> Result<(), SqliteError> {
        self.pending += 1;
        let commit = match self.durability {
            Durability::EveryOp => true,
            Durability::Batched { max_ops, max_delay } => {
                self.pending >= max_ops || self.batch_started.elapsed() >= max_delay
            }
            Durability::OnClose => false,
        };
        if commit { self.commit() } else { Ok(()) }
    }

    fn commit(&mut self) -> Result<(), SqliteError> {
        if !self.in_tx {
            return Ok(());
        }
        self.write_marks()?;
        self.compact()?;
        if self.next_seq != self.saved_next_seq {
            self.conn
                .prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?1)")
                .and_then(|mut s| s.execute(params![self.next_seq as i64]))
                .map_err(self.err("saving the sequence counter"))?;
        }
        self.conn
            .execute_batch("COMMIT")
            .map_err(self.err("committing"))?;
        self.saved_next_seq = self.next_seq;
        self.in_tx = false;
        self.pending = 0;
        Ok(())
    }

    /// Appends what the open transaction did to the chunk tables: leases still out,
    /// acknowledgements, fingerprints.
    fn write_marks(&mut self) -> Result<(), SqliteError> {
        let leased = &self.leased;
        self.new_leases.retain(|s| leased.contains(s));
        let marks = self.lease_marks + self.new_leases.len() as u64;
        if self.live.is_some() && marks > 2 * self.leased.len() as u64 + LEASE_SLACK {
            // Most marks are of leases that ended since: keep the ones still out. (Once
            // recovered, every mark in the table was written by this store.)
            let out = self.leased.sorted();
            self.conn
                .execute("DELETE FROM leases", [])
                .map_err(self.err("rewriting lease marks"))?;
            self.lease_marks = 0;
            self.new_leases = out;
        }
        if !self.new_leases.is_empty() {
            self.lease_marks += self.new_leases.len() as u64;
            seqs::to_json(self.new_leases.drain(..), &mut self.json);
            self.conn
                .prepare_cached("INSERT INTO leases (seqs) VALUES (?1)")
                .and_then(|mut s| s.execute(params![self.json]))
                .map_err(self.err("marking leases"))?;
        }
        if !self.new_acks.is_empty() {
            seqs::to_json(self.new_acks.drain(..), &mut self.json);
            self.conn
                .prepare_cached("INSERT INTO acks (seqs) VALUES (?1)")
                .and_then(|mut s| s.execute(params![self.json]))
                .map_err(self.err("recording acknowledgements"))?;
        }
        if !self.new_seen.is_empty() {
            self.conn
                .prepare_cached("INSERT INTO seen (fps) VALUES (?1)")
                .and_then(|mut s| s.execute(params![self.new_seen]))
                .map_err(self.err("marking fingerprints seen"))?;
            self.new_seen.clear();
        }
        Ok(())
    }

    /// Deletes a slice of the acknowledged rows (see the crate docs), in the open
    /// transaction.
    fn compact(&mut self) -> Result<(), SqliteError> {
        let Some(live) = self.live else {
            return Ok(());
        };
        if self.acked.is_empty() {
            return Ok(());
        }
        if live == 0 {
            // Every row is acknowledged (and no lease is out): empty the tables.
            self.conn
                .execute_batch("DELETE FROM requests; DELETE FROM acks; DELETE FROM leases;")
                .map_err(self.err("deleting acknowledged requests"))?;
            self.acked.clear();
            self.pass = None;
            self.lease_marks = 0;
            return Ok(());
        }
        let mut pass = match self.pass.take() {
            Some(pass) => pass,
            None => {
                let n = self.acked.len() as u64;
                if n < self.compact_after || n < live {
                    return Ok(());
                }
                let last_chunk: i64 = self
                    .conn
                    .query_row("SELECT coalesce(max(id), 0) FROM acks", [], |r| r.get(0))
                    .map_err(self.err("deleting acknowledged requests"))?;
                let seqs = self.acked.sorted();
                Pass {
                    seqs,
                    done: 0,
                    last_chunk,
                }
            }
        };
        let budget = 2 * self.pending as usize + 64;
        let end = pass.seqs.len().min(pass.done + budget);
        {
            // One prepared statement run per row, in ascending order: cheaper than one
            // `IN (json_each(..))` statement, which builds a temporary index of the list
            // before deleting (measured: compaction ~25% faster).
            let slice = &pass.seqs[pass.done..end];
            let deleted = self
                .conn
                .prepare_cached("DELETE FROM requests WHERE seq = ?1")
                .and_then(|mut s| {
                    slice
                        .iter()
                        .try_for_each(|&seq| s.execute(params![seq as i64]).map(drop))
                });
            deleted.map_err(|e| classify(&self.path, "deleting acknowledged requests", e))?;
            for seq in slice {
                self.acked.remove(seq);
            }
        }
        pass.done = end;
        if end == pass.seqs.len() {
            self.conn
                .prepare_cached("DELETE FROM acks WHERE id <= ?1")
                .and_then(|mut s| s.execute(params![pass.last_chunk]))
                .map_err(self.err("deleting acknowledged requests"))?;
        } else {
            self.pass = Some(pass);
        }
        Ok(())
    }

    fn group_id(&mut self, key: &str) -> Result<i64, SqliteError> {
        if let Some(&id) = self.groups.get(key) {
            return Ok(id);
        }
        let id = self
            .conn
            .prepare_cached(
                "INSERT INTO groups (key) VALUES (?1) ON CONFLICT (key) DO UPDATE SET key = key RETURNING id",
            )
            .and_then(|mut s| s.query_row(params![key], |r| r.get::<_, i64>(0)))
            .map_err(self.err("recording a scope group"))?;
        self.groups.insert(Box::from(key), id);
        Ok(id)
    }

    fn unknown(&self, seq: u64) -> SqliteError {
        SqliteError::UnknownRequest {
            path: self.path.clone(),
            seq,
        }
    }

    /// Fails unless `seq` is a new sequence number.
    fn check_fresh(&self, seq: u64) -> Result<(), SqliteError> {
        if seq < self.next_seq || seq > i64::MAX as u64 {
            return Err(SqliteError::SeqNotIncreasing {
                path: self.path.clone(),
                seq,
                next: self.next_seq,
            });
        }
        Ok(())
    }

    /// Fails unless request `seq` is queued or leased.
    fn check_known(&self, seq: u64) -> Result<(), SqliteError> {
        if self.last_loaded == Some(seq) {
            return Ok(());
        }
        if self.acked.contains(&seq) {
            return Err(self.unknown(seq));
        }
        let found = self
            .conn
            .prepare_cached("SELECT 1 FROM requests WHERE seq = ?1")
            .and_then(|mut s| s.exists(params![seq as i64]))
            .map_err(self.err("looking a request up"))?;
        if found {
            Ok(())
        } else {
            Err(self.unknown(seq))
        }
    }

    /// Records that request `seq` (known to be there) is acknowledged.
    fn mark_acked(&mut self, seq: u64) {
        self.leased.remove(&seq);
        if self.last_loaded == Some(seq) {
            self.last_loaded = None;
        }
        self.acked.insert(seq);
        self.new_acks.push(seq);
    }
}

/// Takes the exclusive OS lock that keeps a second frontier off this database.
fn lock_file(path: &Path) -> Result<std::fs::File, SqliteError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| SqliteError::ReadOnly {
            path: path.to_path_buf(),
            source: rusqlite::Error::InvalidPath(format!("{}: {e}", lock_path.display()).into()),
        })?;
    // A process that just forked keeps a copy of the lock until it execs: retry briefly
    // before calling the database taken.
    let mut attempts = 0;
    loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if attempts < 20 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => break lock_result(path, &lock_path, file, other),
        }
    }
}

fn lock_result(
    path: &Path,
    lock_path: &Path,
    file: std::fs::File,
    result: Result<(), std::fs::TryLockError>,
) -> Result<std::fs::File, SqliteError> {
    match result {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(SqliteError::Locked {
            path: path.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(SqliteError::Sqlite {
            path: path.to_path_buf(),
            op: "locking",
            source: rusqlite::Error::InvalidPath(format!("{}: {e}", lock_path.display()).into()),
        }),
    }
}

fn to_i64(t: Option<Timestamp>) -> Option<i64> {
    t.map(|t| i64::try_from(t.as_nanos()).unwrap_or(i64::MAX))
}

/// Turns SQLite's error codes into the errors users act on.
fn classify(path: &Path, op: &'static str, e: rusqlite::Error) -> SqliteError {
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

fn read_callbacks(conn: &Connection, v: &mut dyn RecoveryVisitor<()>) -> rusqlite::Result<()> {
    let mut s = conn.prepare("SELECT id, name FROM callbacks")?;
    let mut rows = s.query([])?;
    while let Some(r) = rows.next()? {
        v.callback(r.get::<_, i64>(0)? as u32, &r.get::<_, String>(1)?);
    }
    Ok(())
}

fn read_scope_states(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut s = conn.prepare("SELECT scope, state FROM scope_states")?;
    let rows = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

impl SqliteStore {
    /// Replays the `seen` chunks.
    fn read_seen(&self, v: &mut dyn RecoveryVisitor<()>) -> Result<(), SqliteError> {
        let op = "reading the duplicate filter";
        let mut s = self
            .conn
            .prepare("SELECT fps FROM seen")
            .map_err(self.err(op))?;
        let mut rows = s.query([]).map_err(self.err(op))?;
        while let Some(r) = rows.next().map_err(self.err(op))? {
            let blob = r
                .get_ref(0)
                .and_then(|b| Ok(b.as_blob()?))
                .map_err(self.err(op))?;
            if blob.len() % 8 != 0 {
                return Err(self.corrupt(format!(
                    "{op}: a row of {} bytes is not a list of 8-byte fingerprints",
                    blob.len()
                )));
            }
            for prefix in blob.chunks_exact(8) {
                let mut bytes = [0u8; 20];
                bytes[..8].copy_from_slice(prefix);
                v.fingerprint(&Fingerprint(bytes));
            }
        }
        Ok(())
    }

    /// Replays the requests not acknowledged, in order, and notes the acknowledged rows
    /// still there; returns the number replayed and the largest sequence number.
    fn read_requests(
        &mut self,
        acks: &SeqSet,
        leases: &SeqSet,
        v: &mut dyn RecoveryVisitor<()>,
    ) -> Result<(u64, Option<u64>), SqliteError> {
        let op = "reading queued requests";
        let mut keys: HashMap<i64, Box<str>> = HashMap::new();
        {
            let mut s = self
                .conn
                .prepare("SELECT id, key FROM groups")
                .map_err(self.err(op))?;
            let mut rows = s.query([]).map_err(self.err(op))?;
            while let Some(r) = rows.next().map_err(self.err(op))? {
                let id: i64 = r.get(0).map_err(self.err(op))?;
                let key: String = r.get(1).map_err(self.err(op))?;
                keys.insert(id, key.into());
            }
        }
        let mut s = self
            .conn
            .prepare("SELECT seq, grp, priority, start, not_before FROM requests ORDER BY seq")
            .map_err(self.err(op))?;
        let mut rows = s.query([]).map_err(self.err(op))?;
        let (mut live, mut max_seq) = (0, None);
        while let Some(r) = rows.next().map_err(self.err(op))? {
            let row = (|| {
                Ok::<_, rusqlite::Error>((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)? != 0,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })();
            let (seq, grp, priority, start, not_before) =
                row.map_err(|e| classify(&self.path, op, e))?;
            max_seq = Some(seq);
            if acks.contains(&seq) {
                self.acked.insert(seq);
                continue;
            }
            let Some(group) = keys.get(&grp) else {
                return Err(
                    self.corrupt(format!("request #{seq} names group {grp}, not in the file"))
                );
            };
            let meta = EntryMeta {
                group,
                priority: priority.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
                start,
                not_before: not_before.map(|t| Timestamp::from_nanos(t.max(0) as u64)),
            };
            live += 1;
            v.entry(seq, meta, (), leases.contains(&seq));
        }
        drop(rows);
        drop(s);
        self.groups = keys.into_iter().map(|(id, key)| (key, id)).collect();
        Ok((live, max_seq))
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Err(e) = self.commit() {
            tracing::warn!(error = %e, "committing the frontier database on close failed");
        }
    }
}

impl Store for SqliteStore {
    type Handle = ();
    type Error = SqliteError;

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn recover(&mut self, v: &mut dyn RecoveryVisitor<()>) -> Result<(), SqliteError> {
        self.begin()?;
        // What this store did before (if anything) goes into the tables first.
        self.write_marks()?;
        read_callbacks(&self.conn, v).map_err(self.err("reading callbacks"))?;
        self.read_seen(v)?;
        for (scope, state) in
            read_scope_states(&self.conn).map_err(self.err("reading scope states"))?
        {
            let snapshot: ScopeSnapshot = serde_json::from_str(&state)
                .map_err(|e| self.corrupt(format!("saved state of scope {scope:?}: {e}")))?;
            v.scope_state(snapshot);
        }
        let acks = self.read_acks()?;
        let leases = self.read_seq_chunks("SELECT seqs FROM leases", "reading lease marks")?;
        self.acked.clear();
        self.pass = None;
        self.last_loaded = None;
        let (live, max_seq) = self.read_requests(&acks, &leases, v)?;
        let (stored, _) = self.read_seq_marks()?;
        self.next_seq = self.next_seq.max(stored).max(max_seq.map_or(0, |s| s + 1));
        v.next_seq(self.next_seq);
        // Leases end with the process that took them: the frontier delivers them again.
        self.conn
            .execute("DELETE FROM leases", [])
            .map_err(self.err("clearing old leases"))?;
        self.leased.clear();
        self.lease_marks = 0;
        if acks.len() != self.acked.len() {
            // Some acknowledged rows were deleted before the `acks` rows that list them
            // (a compaction pass cut short): list only those still there.
            let still = self.acked.sorted();
            self.conn
                .execute("DELETE FROM acks", [])
                .map_err(self.err("rewriting acknowledgements"))?;
            self.new_acks = still;
        }
        self.live = Some(live);
        self.commit()
    }

    fn put_callback(&mut self, id: u32, name: &str) -> Result<(), SqliteError> {
        self.begin()?;
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO callbacks (id, name) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![i64::from(id), name]))
            .map_err(self.err("recording a callback"))?;
        self.done()
    }

    fn push(
        &mut self,
        seq: u64,
        meta: &EntryMeta<'_>,
        payload: &[u8],
        fingerprint: Option<&Fingerprint>,
    ) -> Result<(), SqliteError> {
        self.check_fresh(seq)?;
        self.begin()?;
        let grp = self.group_id(meta.group)?;
        self.conn
            .prepare_cached(
                "INSERT INTO requests (seq, grp, priority, start, not_before, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    seq as i64,
                    grp,
                    i64::from(meta.priority),
                    i64::from(meta.start),
                    to_i64(meta.not_before),
                    payload
                ])
            })
            .map_err(self.err("queueing a request"))?;
        if let Some(fp) = fingerprint {
            self.new_seen.extend_from_slice(&fp.0[..8]);
        }
        self.next_seq = seq + 1;
        if let Some(live) = &mut self.live {
            *live += 1;
        }
        self.done()
    }

    fn load<'a>(
        &'a mut self,
        seq: u64,
        _: &'a (),
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], SqliteError> {
        if self.acked.contains(&seq) {
            return Err(self.unknown(seq));
        }
        let found = self
            .conn
            .prepare_cached("SELECT payload FROM requests WHERE seq = ?1")
            .and_then(|mut s| {
                s.query_row(params![seq as i64], |r| {
                    let bytes = r.get_ref(0)?.as_blob()?;
                    buf.clear();
                    buf.extend_from_slice(bytes);
                    Ok(())
                })
                .optional()
            })
            .map_err(self.err("reading a request"))?;
        match found {
            Some(()) => {
                self.last_loaded = Some(seq);
                Ok(buf)
            }
            None => Err(self.unknown(seq)),
        }
    }

    fn lease(&mut self, seq: u64, _: &()) -> Result<(), SqliteError> {
        if !self.leased.contains(&seq) {
            self.check_known(seq)?;
        }
        self.begin()?;
        if self.leased.insert(seq) {
            self.new_leases.push(seq);
        }
        // A lease mark never starts a batched commit (as in polite-store-fs): it goes with the
        // next one, and its loss loses no request, only a redelivery count. It is written
        // by a poll after the request's send was allowed at the poll's time, so a commit
        // here (an fsync, at times seconds long) would send the request that much later
        // than its scope recorded, and the scope's next request could follow it without
        // its delay.
        match self.durability {
            Durability::EveryOp => self.commit(),
            Durability::Batched { .. } | Durability::OnClose => Ok(()),
        }
    }

    fn ack(&mut self, seq: u64, _: ()) -> Result<(), SqliteError> {
        // A lease out is a request known to be there.
        if !self.leased.contains(&seq) {
            self.check_known(seq)?;
        }
        self.begin()?;
        self.mark_acked(seq);
        if let Some(live) = &mut self.live {
            *live -= 1;
        }
        self.done()
    }

    fn requeue(
        &mut self,
        seq: u64,
        _: (),
        new_seq: u64,
        meta: &EntryMeta<'_>,
    ) -> Result<(), SqliteError> {
        self.check_fresh(new_seq)?;
        if !self.leased.contains(&seq) {
            self.check_known(seq)?;
        }
        self.begin()?;
        let grp = self.group_id(meta.group)?;
        // The retry is a new row at the end of the table (its payload copied), the old
        // one is acknowledged: no page in the middle of the file is rewritten.
        let n = self
            .conn
            .prepare_cached(
                "INSERT INTO requests (seq, grp, priority, start, not_before, payload)
                 SELECT ?1, ?2, ?3, ?4, ?5, payload FROM requests WHERE seq = ?6",
            )
            .and_then(|mut s| {
                s.execute(params![
                    new_seq as i64,
                    grp,
                    i64::from(meta.priority),
                    i64::from(meta.start),
                    to_i64(meta.not_before),
                    seq as i64
                ])
            })
            .map_err(self.err("putting a request back"))?;
        if n == 0 {
            return Err(self.unknown(seq));
        }
        self.mark_acked(seq);
        self.next_seq = new_seq + 1;
        self.done()
    }

    fn add_fingerprints(&mut self, fingerprints: &[Fingerprint]) -> Result<(), SqliteError> {
        self.begin()?;
        for fp in fingerprints {
            self.new_seen.extend_from_slice(&fp.0[..8]);
        }
        self.done()
    }

    fn save_scope_states(&mut self, states: &[ScopeSnapshot]) -> Result<(), SqliteError> {
        self.begin()?;
        self.conn
            .execute("DELETE FROM scope_states", [])
            .map_err(self.err("saving scope states"))?;
        for s in states {
            let json = serde_json::to_string(s).map_err(|e| {
                self.corrupt(format!(
                    "scope state of {:?} does not serialise: {e}",
                    s.scope
                ))
            })?;
            self.conn
                .prepare_cached("INSERT INTO scope_states (scope, state) VALUES (?1, ?2)")
                .and_then(|mut st| st.execute(params![s.scope, json]))
                .map_err(self.err("saving scope states"))?;
        }
        self.done()
    }

    fn flush(&mut self) -> Result<(), SqliteError> {
        self.commit()
    }
}

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
