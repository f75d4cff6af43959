//! Evicted scope states in a database of their own beside the store's
//! (`<file>.hibernated`, table `hibernated_scopes`), written in batches of their own so
//! that memory stays bounded whatever the store's durability policy.

use std::path::{Path, PathBuf};

use polite_throttle_core::{HibernationError, ScopeHibernation, ScopeSnapshot};
use rusqlite::{Connection, OptionalExtension, params};

use crate::SqliteStore;
use crate::error::{SqliteError, classify};

/// Changes per transaction (each commit is unsynced; `flush` syncs).
const BATCH: u32 = 1024;

/// The [`ScopeHibernation`] of a [`SqliteStore`].
pub(crate) struct SqliteHibernation {
    conn: Connection,
    path: PathBuf,
    in_tx: bool,
    changes: u32,
    /// The first failure since the last flush, reported by it.
    error: Option<String>,
}

/// The hibernation database of the store at `store`.
pub(crate) fn path_for(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".hibernated");
    PathBuf::from(p)
}

impl SqliteHibernation {
    fn open(path: PathBuf, resume: bool) -> Result<Self, SqliteError> {
        let err = |op: &'static str| {
            let path = path.clone();
            move |e| classify(&path, op, e)
        };
        let conn = Connection::open(&path).map_err(err("opening"))?;
        conn.busy_timeout(std::time::Duration::from_millis(200))
            .map_err(err("setting the busy timeout"))?;
        let _: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(err("switching to WAL"))?;
        conn.execute_batch(
            "PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS hibernated_scopes
                 (scope TEXT PRIMARY KEY, state TEXT NOT NULL);",
        )
        .map_err(err("creating the hibernated_scopes table"))?;
        if !resume {
            conn.execute("DELETE FROM hibernated_scopes", [])
                .map_err(err("discarding hibernated scope states"))?;
        }
        Ok(SqliteHibernation {
            conn,
            path,
            in_tx: false,
            changes: 0,
            error: None,
        })
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> String {
        format!("{}: {what}: {e}", self.path.display())
    }

    fn begin(&mut self) -> Result<(), String> {
        if !self.in_tx {
            self.conn
                .execute_batch("BEGIN IMMEDIATE")
                .map_err(|e| self.fail("starting a transaction", e))?;
            self.in_tx = true;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), String> {
        if self.in_tx {
            self.conn
                .execute_batch("COMMIT")
                .map_err(|e| self.fail("committing", e))?;
            self.in_tx = false;
            self.changes = 0;
        }
        Ok(())
    }

    /// Counts a change; commits a full batch.
    fn changed(&mut self) -> Result<(), String> {
        self.changes += 1;
        if self.changes >= BATCH {
            self.commit()?;
        }
        Ok(())
    }

    fn put(&mut self, snapshot: &ScopeSnapshot) -> Result<(), String> {
        let json = serde_json::to_string(snapshot)
            .map_err(|e| self.fail(&format!("encoding the state of {:?}", snapshot.scope), e))?;
        self.begin()?;
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO hibernated_scopes (scope, state) VALUES (?1, ?2)",
            )
            .and_then(|mut s| s.execute(params![snapshot.scope, json]))
            .map_err(|e| self.fail(&format!("saving the state of {:?}", snapshot.scope), e))?;
        self.changed()
    }

    fn take(&mut self, scope: &str) -> Result<Option<ScopeSnapshot>, String> {
        let row: Option<String> = self
            .conn
            .prepare_cached("SELECT state FROM hibernated_scopes WHERE scope = ?1")
            .and_then(|mut s| s.query_row(params![scope], |r| r.get(0)).optional())
            .map_err(|e| self.fail(&format!("reading the state of {scope:?}"), e))?;
        let Some(json) = row else { return Ok(None) };
        let snapshot: ScopeSnapshot = serde_json::from_str(&json)
            .map_err(|e| self.fail(&format!("the state of {scope:?} does not decode"), e))?;
        self.begin()?;
        self.conn
            .prepare_cached("DELETE FROM hibernated_scopes WHERE scope = ?1")
            .and_then(|mut s| s.execute(params![scope]))
            .map_err(|e| self.fail(&format!("deleting the woken state of {scope:?}"), e))?;
        self.changed()?;
        Ok(Some(snapshot))
    }

    fn sync(&mut self) -> Result<(), String> {
        self.commit()?;
        // NORMAL does not sync WAL commits: a checkpoint of the WAL, synced, does.
        self.conn
            .execute_batch(
                "PRAGMA synchronous = FULL; BEGIN IMMEDIATE; COMMIT; PRAGMA synchronous = NORMAL;",
            )
            .map_err(|e| self.fail("syncing", e))
    }
}

impl ScopeHibernation for SqliteHibernation {
    fn hibernate(&mut self, snapshot: ScopeSnapshot) {
        if let Err(e) = self.put(&snapshot) {
            self.error.get_or_insert(e);
        }
    }

    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot> {
        match self.take(scope) {
            Ok(found) => found,
            Err(e) => {
                // The row stays; the next flush reports the error.
                self.error.get_or_insert(e);
                None
            }
        }
    }

    fn keeps_everything(&self) -> bool {
        true
    }

    fn flush(&mut self) -> Result<(), HibernationError> {
        if let Err(e) = self.sync() {
            self.error.get_or_insert(e);
        }
        self.error
            .take()
            .map_or(Ok(()), |e| Err(HibernationError::new(e)))
    }
}

impl SqliteStore {
    /// The hibernation database beside this store (see `Store::hibernation`).
    pub(crate) fn open_hibernation(
        &mut self,
        resume: bool,
    ) -> Result<SqliteHibernation, SqliteError> {
        SqliteHibernation::open(path_for(&self.path), resume)
    }
}
