//! The schema this build writes, and the migration from older layouts.

use rusqlite::{Connection, params};

use crate::seqs;

/// The tables of schema version 2 (the crate docs describe them).
pub(crate) const SCHEMA: &str = "
CREATE TABLE groups (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
CREATE TABLE requests (
    seq INTEGER PRIMARY KEY,
    grp INTEGER NOT NULL REFERENCES groups (id),
    priority INTEGER NOT NULL,
    start INTEGER NOT NULL,
    not_before INTEGER,
    payload BLOB NOT NULL
);
CREATE TABLE callbacks (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE scope_states (scope TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
";

/// The tables and views version 2 adds to version 1.
const CHUNKS: &str = "
CREATE TABLE seen (id INTEGER PRIMARY KEY, fps BLOB NOT NULL);
CREATE TABLE acks (id INTEGER PRIMARY KEY, seqs TEXT NOT NULL);
CREATE TABLE leases (id INTEGER PRIMARY KEY, seqs TEXT NOT NULL);
CREATE VIEW acked (seq) AS SELECT j.value FROM acks, json_each(acks.seqs) AS j;
CREATE VIEW pending AS
  SELECT r.seq, g.key AS grp, r.priority, r.start, r.not_before,
         r.seq IN (SELECT j.value FROM leases, json_each(leases.seqs) AS j) AS leased,
         r.payload
    FROM requests r JOIN groups g ON g.id = r.grp
   WHERE r.seq NOT IN (SELECT seq FROM acked);
";

/// Fingerprint prefixes per `seen` row written by the migration.
const SEEN_PER_ROW: usize = 65_536;

/// Creates the schema in an empty database (inside the caller's transaction).
pub(crate) fn create(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch(SCHEMA)?;
    c.execute_batch(CHUNKS)
}

/// Rewrites a version 1 database as version 2 (inside the caller's transaction):
/// the secondary index goes, fingerprints move into chunk rows, lease flags into a
/// `leases` row.
pub(crate) fn migrate_from_v1(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch(
        "DROP INDEX IF EXISTS requests_by_group;
         ALTER TABLE seen RENAME TO seen_v1;",
    )?;
    let fps: Vec<i64> = c
        .prepare("SELECT fp FROM seen_v1 ORDER BY fp")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let leased: Vec<i64> = c
        .prepare("SELECT seq FROM requests WHERE leased = 1 ORDER BY seq")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    c.execute_batch(CHUNKS)?;
    for chunk in fps.chunks(SEEN_PER_ROW) {
        let blob: Vec<u8> = chunk
            .iter()
            .flat_map(|&fp| (fp as u64).to_be_bytes())
            .collect();
        c.execute("INSERT INTO seen (fps) VALUES (?1)", params![blob])?;
    }
    if !leased.is_empty() {
        let mut json = String::new();
        seqs::to_json(leased.iter().map(|&s| s as u64), &mut json);
        c.execute("INSERT INTO leases (seqs) VALUES (?1)", params![json])?;
    }
    c.execute_batch(
        "DROP TABLE seen_v1;
         ALTER TABLE requests DROP COLUMN leased;",
    )
}
