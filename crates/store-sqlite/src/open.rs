//! Opening: the lock file against a second frontier, and preparing the database.

use std::path::{Path, PathBuf};

use crate::error::{SqliteError, classify};
use crate::schema;
use crate::{APPLICATION_ID, SCHEMA_VERSION, SqliteStore};

impl SqliteStore {
    pub(crate) fn prepare(&mut self, verify: bool, group_index: bool) -> Result<(), SqliteError> {
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
}

/// Takes the exclusive OS lock that keeps a second frontier off this database.
pub(crate) fn lock_file(path: &Path) -> Result<std::fs::File, SqliteError> {
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
