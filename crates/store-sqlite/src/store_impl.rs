//! The frontier's [`Store`] trait over the database.

use crate::SqliteStore;
use crate::error::SqliteError;
use crate::recovery::{read_callbacks, read_scope_states};
use crate::writes::to_i64;
use polite_frontier_core::{Durability, EntryMeta, Fingerprint, RecoveryVisitor, Store};
use polite_throttle_core::{ScopeHibernation, ScopeSnapshot};
use rusqlite::{OptionalExtension, params};

impl Store for SqliteStore {
    type Handle = ();
    type Error = SqliteError;

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn hibernation(
        &mut self,
        resume: bool,
    ) -> Result<Option<Box<dyn ScopeHibernation + Send>>, SqliteError> {
        Ok(Some(Box::new(self.open_hibernation(resume)?)))
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
