//! # store-sqlite
//!
//! The embedded default store of the crawl frontier: one SQLite file (the library is
//! bundled, no system package needed), WAL mode, prepared cached statements and batched
//! transactions per the [`Durability`] policy. Whatever was committed survives `kill -9`
//! and power loss; a reopened store gives the frontier back its queue in order, its
//! unacknowledged leases (delivered again), its duplicate filter, applied per-request
//! delays and saved throttle scope states.
//!
//! ```
//! use frontier_core::{Frontier, FrontierConfig, Poll, Request};
//! use store_sqlite::{SqliteOptions, SqliteStore};
//! use throttle_core::{Outcome, Settings, Timestamp};
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
//! ## Schema (version 1, `PRAGMA user_version`; `PRAGMA application_id` = `0x46524f4e`)
//!
//! ```sql
//! CREATE TABLE groups   (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);   -- scope groups: a host, or scopes joined by newlines
//! CREATE TABLE requests (seq INTEGER PRIMARY KEY,                              -- order of arrival
//!                        grp INTEGER NOT NULL REFERENCES groups (id),
//!                        priority INTEGER NOT NULL,                            -- effective (after depth_priority)
//!                        start INTEGER NOT NULL,                               -- 1 for start requests
//!                        not_before INTEGER,                                   -- per-request delay, ns since the crawl's epoch
//!                        leased INTEGER NOT NULL DEFAULT 0,                    -- 1 while handed out
//!                        payload BLOB NOT NULL);                               -- frontier-core's compact record
//! CREATE INDEX requests_by_group ON requests (grp, priority DESC, seq);       -- next request of a group: one seek
//! CREATE TABLE seen        (fp INTEGER PRIMARY KEY);                           -- first 64 bits of each fingerprint
//! CREATE TABLE callbacks   (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
//! CREATE TABLE scope_states(scope TEXT PRIMARY KEY, state TEXT NOT NULL);      -- JSON of throttle_core::ScopeSnapshot
//! CREATE TABLE meta        (key TEXT PRIMARY KEY, value);                      -- next_seq
//! ```
//!
//! Useful queries (`sqlite3 crawl.sqlite3`):
//!
//! ```sql
//! -- Pending requests per host, busiest first.
//! SELECT g.key AS host, count(*) AS pending FROM requests r JOIN groups g ON g.id = r.grp
//!  WHERE r.leased = 0 GROUP BY g.key ORDER BY pending DESC LIMIT 20;
//! -- What is in flight right now (or was, when the crawler died).
//! SELECT count(*) FROM requests WHERE leased = 1;
//! -- The next request of one host, by priority then arrival.
//! SELECT seq, priority FROM requests
//!  WHERE grp = (SELECT id FROM groups WHERE key = 'example.com')
//!  ORDER BY priority DESC, seq LIMIT 1;
//! -- Backed-off hosts in the saved throttle states.
//! SELECT scope, json_extract(state, '$.level') AS level FROM scope_states WHERE level > 0;
//! ```
//!
//! ## Guarantees and limits
//!
//! - One frontier per file: the store holds an OS lock on `<file>.lock` (released when
//!   the process ends, however it ends); a second opener gets [`SqliteError::Locked`].
//!   Other tools can still read the database while a crawl runs (WAL mode).
//! - A read-only file, a file that is not a frontier database, a corrupted file and a
//!   file written by a newer schema are clear errors naming the path, never panics.
//! - With [`Durability::Batched`], the delay bound is checked on each operation (there
//!   is no background thread): an idle frontier should [`flush`](Store::flush) (the
//!   runtime adapters do).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use frontier_core::{Durability, EntryMeta, Fingerprint, RecoveryVisitor, Store};
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use throttle_core::{ScopeSnapshot, Timestamp};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 1;
/// `PRAGMA application_id` of a frontier database ("FRON").
pub const APPLICATION_ID: i64 = 0x4652_4f4e;

/// Options of a [`SqliteStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqliteOptions {
    /// When changes become durable (default: group commit, see [`Durability`]).
    pub durability: Durability,
    /// Run `PRAGMA quick_check` when opening (reads the whole file; default off).
    pub verify_on_open: bool,
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
    /// A request the frontier asked for is not in the database.
    #[error("{path}: request #{seq} is not in the database", path = .path.display())]
    UnknownRequest {
        /// The database file.
        path: PathBuf,
        /// Its sequence number.
        seq: u64,
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

/// A frontier store in one SQLite file.
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    _lock: std::fs::File,
    durability: Durability,
    in_tx: bool,
    pending: u32,
    batch_started: Instant,
    groups: HashMap<Box<str>, i64>,
    next_seq: u64,
    /// Leases taken in the open transaction and not yet ended: their marks are written
    /// at commit, so a lease acknowledged within one batch costs no write.
    leases: std::collections::HashSet<u64>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("uncommitted", &self.pending)
            .finish_non_exhaustive()
    }
}

const SCHEMA: &str = "
CREATE TABLE groups (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
CREATE TABLE requests (
    seq INTEGER PRIMARY KEY,
    grp INTEGER NOT NULL REFERENCES groups (id),
    priority INTEGER NOT NULL,
    start INTEGER NOT NULL,
    not_before INTEGER,
    leased INTEGER NOT NULL DEFAULT 0,
    payload BLOB NOT NULL
);
CREATE INDEX requests_by_group ON requests (grp, priority DESC, seq);
CREATE TABLE seen (fp INTEGER PRIMARY KEY);
CREATE TABLE callbacks (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE scope_states (scope TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
";

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
            in_tx: false,
            pending: 0,
            batch_started: Instant::now(),
            groups: HashMap::new(),
            next_seq: 0,
            leases: std::collections::HashSet::new(),
        };
        store.prepare(options.verify_on_open)?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store's connection, for queries of your own (see the crate docs). Changes
    /// made through it bypass the frontier: read only.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    fn err(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> SqliteError + '_ {
        move |e| classify(&self.path, op, e)
    }

    fn prepare(&mut self, verify: bool) -> Result<(), SqliteError> {
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
            return Err(SqliteError::Corrupt {
                path: self.path.clone(),
                detail: format!(
                    "an SQLite database of another application (application_id {app:#x}, user_version {version})"
                ),
            });
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
        c.pragma_update(None, "synchronous", "FULL")
            .map_err(self.err("setting synchronous"))?;
        // Queue pages are read back in priority order, not file order: keep a big page
        // cache and read through a memory map instead of a syscall per page.
        c.execute_batch(
            "PRAGMA cache_size = -65536; PRAGMA mmap_size = 1073741824;
             PRAGMA temp_store = MEMORY;",
        )
        .map_err(self.err("tuning the page cache"))?;
        c.execute_batch("BEGIN IMMEDIATE")
            .map_err(self.err("locking the database"))?;
        let tx = (|| {
            if version == 0 {
                c.execute_batch(SCHEMA)?;
                c.pragma_update(None, "application_id", APPLICATION_ID)?;
            }
            // Written on every open: a read-only file fails here, not mid-crawl.
            c.pragma_update(None, "user_version", SCHEMA_VERSION)
        })();
        tx.map_err(self.err("creating the schema"))?;
        c.execute_batch("COMMIT")
            .map_err(self.err("creating the schema"))?;
        if verify {
            let result: String = c
                .query_row("PRAGMA quick_check", [], |r| r.get(0))
                .map_err(self.err("checking integrity"))?;
            if result != "ok" {
                return Err(SqliteError::Corrupt {
                    path: self.path.clone(),
                    detail: result,
                });
            }
        }
        Ok(())
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
        for seq in std::mem::take(&mut self.leases) {
            self.conn
                .prepare_cached("UPDATE requests SET leased = 1 WHERE seq = ?1")
                .and_then(|mut s| s.execute(params![seq as i64]))
                .map_err(self.err("marking a lease"))?;
        }
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?1)")
            .and_then(|mut s| s.execute(params![self.next_seq as i64]))
            .map_err(self.err("saving the sequence counter"))?;
        self.conn
            .execute_batch("COMMIT")
            .map_err(self.err("committing"))?;
        self.in_tx = false;
        self.pending = 0;
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

fn read_seen(conn: &Connection, v: &mut dyn RecoveryVisitor<()>) -> rusqlite::Result<()> {
    let mut s = conn.prepare("SELECT fp FROM seen")?;
    let mut rows = s.query([])?;
    while let Some(r) = rows.next()? {
        let mut bytes = [0u8; 20];
        bytes[..8].copy_from_slice(&(r.get::<_, i64>(0)? as u64).to_be_bytes());
        v.fingerprint(&Fingerprint(bytes));
    }
    Ok(())
}

fn read_scope_states(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut s = conn.prepare("SELECT scope, state FROM scope_states")?;
    let rows = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Replays queued requests in order; returns the largest sequence number.
fn read_requests(
    conn: &Connection,
    v: &mut dyn RecoveryVisitor<()>,
) -> rusqlite::Result<Option<u64>> {
    let mut s = conn.prepare(
        "SELECT r.seq, g.key, r.priority, r.start, r.not_before, r.leased
           FROM requests r JOIN groups g ON g.id = r.grp ORDER BY r.seq",
    )?;
    let mut rows = s.query([])?;
    let mut max_seq = None;
    while let Some(r) = rows.next()? {
        let seq = r.get::<_, i64>(0)? as u64;
        let key: &str = r.get_ref(1)?.as_str()?;
        let priority: i64 = r.get(2)?;
        let meta = EntryMeta {
            group: key,
            priority: priority.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            start: r.get::<_, i64>(3)? != 0,
            not_before: r
                .get::<_, Option<i64>>(4)?
                .map(|t| Timestamp::from_nanos(t.max(0) as u64)),
        };
        let leased = r.get::<_, i64>(5)? != 0;
        max_seq = Some(seq);
        v.entry(seq, meta, (), leased);
    }
    Ok(max_seq)
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
        read_callbacks(&self.conn, v).map_err(self.err("reading callbacks"))?;
        read_seen(&self.conn, v).map_err(self.err("reading the duplicate filter"))?;
        for (scope, state) in
            read_scope_states(&self.conn).map_err(self.err("reading scope states"))?
        {
            let snapshot: ScopeSnapshot =
                serde_json::from_str(&state).map_err(|e| SqliteError::Corrupt {
                    path: self.path.clone(),
                    detail: format!("saved state of scope {scope:?}: {e}"),
                })?;
            v.scope_state(snapshot);
        }
        let max_seq = read_requests(&self.conn, v).map_err(self.err("reading queued requests"))?;
        let stored: Option<i64> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'next_seq'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.err("reading the sequence counter"))?;
        self.next_seq = (stored.unwrap_or(0).max(0) as u64).max(max_seq.map_or(0, |s| s + 1));
        v.next_seq(self.next_seq);
        self.conn
            .execute("UPDATE requests SET leased = 0 WHERE leased = 1", [])
            .map_err(self.err("clearing old leases"))?;
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
            self.conn
                .prepare_cached("INSERT OR IGNORE INTO seen (fp) VALUES (?1)")
                .and_then(|mut s| s.execute(params![fp.prefix64() as i64]))
                .map_err(self.err("marking a fingerprint seen"))?;
        }
        self.next_seq = self.next_seq.max(seq + 1);
        self.done()
    }

    fn load<'a>(
        &'a mut self,
        seq: u64,
        _: &'a (),
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], SqliteError> {
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
            Some(()) => Ok(buf),
            None => Err(self.unknown(seq)),
        }
    }

    fn lease(&mut self, seq: u64, _: &()) -> Result<(), SqliteError> {
        self.begin()?;
        self.leases.insert(seq);
        self.done()
    }

    fn ack(&mut self, seq: u64, _: ()) -> Result<(), SqliteError> {
        self.begin()?;
        self.leases.remove(&seq);
        let n = self
            .conn
            .prepare_cached("DELETE FROM requests WHERE seq = ?1")
            .and_then(|mut s| s.execute(params![seq as i64]))
            .map_err(self.err("acknowledging a request"))?;
        if n == 0 {
            return Err(self.unknown(seq));
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
        self.begin()?;
        self.leases.remove(&seq);
        let grp = self.group_id(meta.group)?;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE requests SET seq = ?1, grp = ?2, priority = ?3, start = ?4,
                        not_before = ?5, leased = 0
                  WHERE seq = ?6",
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
        self.next_seq = self.next_seq.max(new_seq + 1);
        self.done()
    }

    fn add_fingerprints(&mut self, fingerprints: &[Fingerprint]) -> Result<(), SqliteError> {
        self.begin()?;
        for fp in fingerprints {
            self.conn
                .prepare_cached("INSERT OR IGNORE INTO seen (fp) VALUES (?1)")
                .and_then(|mut s| s.execute(params![fp.prefix64() as i64]))
                .map_err(self.err("importing fingerprints"))?;
        }
        self.done()
    }

    fn save_scope_states(&mut self, states: &[ScopeSnapshot]) -> Result<(), SqliteError> {
        self.begin()?;
        self.conn
            .execute("DELETE FROM scope_states", [])
            .map_err(self.err("saving scope states"))?;
        for s in states {
            let json = serde_json::to_string(s).map_err(|e| SqliteError::Corrupt {
                path: self.path.clone(),
                detail: format!("scope state of {:?} does not serialise: {e}", s.scope),
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
