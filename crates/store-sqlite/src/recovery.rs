//! Reading back: sequence marks, callbacks, scope states, the seen set and queued requests.

use std::collections::HashMap;

use crate::SqliteStore;
use crate::error::{SqliteError, classify};
use crate::seqs;
use crate::seqs::SeqSet;
use polite_frontier_core::{EntryMeta, Fingerprint, RecoveryVisitor};
use polite_throttle_core::Timestamp;
use rusqlite::{Connection, OptionalExtension};

impl SqliteStore {
    /// The sequence numbers listed in `acks`.
    pub(crate) fn read_acks(&self) -> Result<SeqSet, SqliteError> {
        self.read_seq_chunks("SELECT seqs FROM acks", "reading acknowledgements")
    }

    pub(crate) fn read_seq_chunks(
        &self,
        sql: &str,
        op: &'static str,
    ) -> Result<SeqSet, SqliteError> {
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
    pub(crate) fn read_seq_marks(&self) -> Result<(u64, Option<u64>), SqliteError> {
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

    /// Replays the `seen` chunks.
    pub(crate) fn read_seen(&self, v: &mut dyn RecoveryVisitor<()>) -> Result<(), SqliteError> {
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
    pub(crate) fn read_requests(
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

pub(crate) fn read_callbacks(
    conn: &Connection,
    v: &mut dyn RecoveryVisitor<()>,
) -> rusqlite::Result<()> {
    let mut s = conn.prepare("SELECT id, name FROM callbacks")?;
    let mut rows = s.query([])?;
    while let Some(r) = rows.next()? {
        v.callback(r.get::<_, i64>(0)? as u32, &r.get::<_, String>(1)?);
    }
    Ok(())
}

pub(crate) fn read_scope_states(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut s = conn.prepare("SELECT scope, state FROM scope_states")?;
    let rows = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}
