//! Evicted scope states in the `hibernated_scopes` table, written with the store's own
//! commits and read back through a read-only connection.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use polite_throttle_core::{HibernationError, ScopeHibernation, ScopeSnapshot};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::SqliteStore;
use crate::error::SqliteError;

/// The table, created when a frontier first attaches hibernation to a database.
pub(crate) const TABLE: &str =
    "CREATE TABLE IF NOT EXISTS hibernated_scopes (scope TEXT PRIMARY KEY, state TEXT NOT NULL)";

/// What the throttler handed over or took back since the store's last commit.
#[derive(Default)]
pub(crate) struct Changes {
    /// States to write, by scope.
    put: HashMap<String, ScopeSnapshot>,
    /// Scopes woken from the table: their rows go (before `put` is written).
    woken: HashSet<String>,
    /// A read that failed, reported by the next flush.
    error: Option<String>,
}

impl Changes {
    pub(crate) fn is_empty(&self) -> bool {
        self.put.is_empty() && self.woken.is_empty()
    }
}

pub(crate) type Shared = Arc<Mutex<Changes>>;

/// The [`ScopeHibernation`] of a [`SqliteStore`]: evicted states wait in memory for the
/// store's next commit, which writes them in the same transaction as the queue changes.
pub(crate) struct SqliteHibernation {
    changes: Shared,
    reader: Connection,
    path: PathBuf,
}

impl SqliteHibernation {
    fn read(&self, scope: &str) -> Result<Option<ScopeSnapshot>, String> {
        let row: Option<String> = self
            .reader
            .prepare_cached("SELECT state FROM hibernated_scopes WHERE scope = ?1")
            .and_then(|mut s| s.query_row(params![scope], |r| r.get(0)).optional())
            .map_err(|e| {
                format!(
                    "{}: reading the hibernated state of {scope:?}: {e}",
                    self.path.display()
                )
            })?;
        row.map(|json| {
            serde_json::from_str(&json).map_err(|e| {
                format!(
                    "{}: hibernated state of {scope:?} does not decode: {e}",
                    self.path.display()
                )
            })
        })
        .transpose()
    }
}

impl ScopeHibernation for SqliteHibernation {
    fn hibernate(&mut self, snapshot: ScopeSnapshot) {
        let mut c = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
        c.put.insert(snapshot.scope.clone(), snapshot);
    }

    fn wake(&mut self, scope: &str) -> Option<ScopeSnapshot> {
        let mut c = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = c.put.remove(scope) {
            return Some(s);
        }
        // A scope already woken since the last commit is in memory, not here: its row
        // is stale until that commit deletes it.
        if c.woken.contains(scope) {
            return None;
        }
        match self.read(scope) {
            Ok(Some(s)) => {
                c.woken.insert(scope.to_owned());
                Some(s)
            }
            Ok(None) => None,
            Err(e) => {
                // The row stays: the next flush reports the error.
                c.error.get_or_insert(e);
                None
            }
        }
    }

    fn keeps_everything(&self) -> bool {
        true
    }

    fn flush(&mut self) -> Result<(), HibernationError> {
        let mut c = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
        match c.error.take() {
            Some(e) => Err(HibernationError::new(e)),
            None => Ok(()),
        }
    }
}

impl SqliteStore {
    /// Creates the table and the hibernation handle (see `Store::hibernation`).
    pub(crate) fn open_hibernation(
        &mut self,
        resume: bool,
    ) -> Result<SqliteHibernation, SqliteError> {
        self.begin()?;
        self.conn
            .execute_batch(TABLE)
            .map_err(self.err("creating the hibernated_scopes table"))?;
        if !resume {
            self.conn
                .execute("DELETE FROM hibernated_scopes", [])
                .map_err(self.err("discarding hibernated scope states"))?;
        }
        // The reader must see the table: commit its creation now.
        self.commit()?;
        let reader = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(self.err("opening a reader for hibernated scope states"))?;
        let changes = Shared::default();
        self.hibernated = Some(Arc::clone(&changes));
        Ok(SqliteHibernation {
            changes,
            reader,
            path: self.path.clone(),
        })
    }

    /// Writes the hibernation changes into the open transaction (called by `commit`).
    /// On failure they stay queued for the next commit.
    pub(crate) fn write_hibernated(&mut self) -> Result<(), SqliteError> {
        let Some(shared) = self.hibernated.clone() else {
            return Ok(());
        };
        let mut c = shared.lock().unwrap_or_else(PoisonError::into_inner);
        for scope in &c.woken {
            self.conn
                .prepare_cached("DELETE FROM hibernated_scopes WHERE scope = ?1")
                .and_then(|mut s| s.execute(params![scope]))
                .map_err(self.err("deleting a woken scope state"))?;
        }
        for (scope, snapshot) in &c.put {
            let json = serde_json::to_string(snapshot).map_err(|e| {
                self.corrupt(format!("scope state of {scope:?} does not serialise: {e}"))
            })?;
            self.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO hibernated_scopes (scope, state) VALUES (?1, ?2)",
                )
                .and_then(|mut s| s.execute(params![scope, json]))
                .map_err(self.err("saving a hibernated scope state"))?;
        }
        // Cleared once in the transaction; a failed COMMIT is reported and the frontier
        // treats the store as failed, like any other lost commit.
        c.woken.clear();
        c.put.clear();
        Ok(())
    }

    /// Whether hibernation changes wait for a commit.
    pub(crate) fn hibernated_pending(&self) -> bool {
        self.hibernated
            .as_ref()
            .is_some_and(|h| !h.lock().unwrap_or_else(PoisonError::into_inner).is_empty())
    }
}
