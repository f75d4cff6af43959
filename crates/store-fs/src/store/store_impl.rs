//! The frontier's [`Store`] trait over the segments.

use polite_frontier_core::{EntryMeta, Fingerprint, RecoveryVisitor, Store};
use polite_throttle_core::{ScopeHibernation, ScopeSnapshot, Timestamp};

use super::{FsHandle, FsStore, Source};
use crate::error::FsError;
use crate::files;
use crate::format::{
    self, EntryRecord, FPS_PER_BLOCK, KIND_ACK, KIND_CALLBACK, KIND_FINGERPRINTS, KIND_LEASE,
};

impl Store for FsStore {
    type Handle = FsHandle;
    type Error = FsError;

    fn kind(&self) -> &'static str {
        "fs"
    }

    fn hibernation(
        &mut self,
        resume: bool,
    ) -> Result<Option<Box<dyn ScopeHibernation + Send>>, FsError> {
        let h = crate::hibernation::FsHibernation::open(self.dir(), resume)?;
        Ok(Some(Box::new(h)))
    }

    fn recover(&mut self, visitor: &mut dyn RecoveryVisitor<FsHandle>) -> Result<(), FsError> {
        self.mutate(|s| s.replay(visitor))
    }

    fn put_callback(&mut self, id: u32, name: &str) -> Result<(), FsError> {
        self.mutate(|s| {
            s.check_size(name.len())?;
            s.prepare_write()?;
            s.body.clear();
            format::encode_named(&mut s.body, KIND_CALLBACK, id, name);
            s.append_body()?;
            s.idx.callbacks.insert(id, Box::from(name));
            s.after_op()
        })
    }

    fn push(
        &mut self,
        seq: u64,
        meta: &EntryMeta<'_>,
        payload: &[u8],
        fingerprint: Option<&Fingerprint>,
    ) -> Result<FsHandle, FsError> {
        self.mutate(|s| {
            s.check_new_seq(seq)?;
            s.check_size(payload.len() + meta.group.len())?;
            // A replay after this must see the new request: rescan then.
            s.recovery = None;
            s.prepare_write()?;
            let group = s.intern_group(meta.group)?;
            let handle = s.append_entry(&EntryRecord {
                seq,
                replaces: None,
                group,
                priority: meta.priority,
                start: meta.start,
                leased: false,
                not_before: meta.not_before.map(Timestamp::as_nanos),
                fingerprint: fingerprint.map(format::fp_prefix),
                payload,
            })?;
            s.after_op()?;
            Ok(handle)
        })
    }

    fn load<'a>(
        &'a mut self,
        seq: u64,
        handle: &'a FsHandle,
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], FsError> {
        if self.idx.live.get(seq).is_none() {
            return Err(self.unknown(seq));
        }
        let h = self.resolve(seq, *handle)?;
        let (range, source) = self.read_entry(seq, h, buf)?;
        Ok(match source {
            Source::WriteBuffer => &self.buf[range],
            Source::Caller => &buf[range],
            Source::Map => &self
                .existing_map(h.segment())
                .expect("read_entry just read this map")[range],
        })
    }

    const PREFETCH: bool = true;

    fn prefetch(&self, seq: u64, handle: &FsHandle) {
        let Ok(h) = self.resolve(seq, *handle) else {
            return;
        };
        let map = self.existing_map(h.segment());
        if let Some(bytes) = map.and_then(|m| m.get(h.offset() as usize..)) {
            // A record of a typical request spans one or two cache lines.
            if let Some(line) = bytes.first_chunk::<128>() {
                polite_throttle_core::hooks::prefetch(line);
            } else if let Some(b) = bytes.first() {
                polite_throttle_core::hooks::prefetch(b);
            }
        }
    }

    fn lease(&mut self, seq: u64, _handle: &FsHandle) -> Result<(), FsError> {
        self.mutate(|s| {
            s.prepare_write()?;
            if !s.idx.live.set_leased(seq) {
                return Err(s.unknown(seq));
            }
            s.body.clear();
            format::encode_seq_record(&mut s.body, KIND_LEASE, seq);
            s.append_body()?;
            s.note_change(false)
        })
    }

    fn ack(&mut self, seq: u64, handle: FsHandle) -> Result<(), FsError> {
        self.mutate(|s| {
            s.prepare_write()?;
            if s.idx.live.remove(seq).is_none() {
                return Err(s.unknown(seq));
            }
            if let Ok(h) = s.resolve(seq, handle) {
                s.release(h);
            }
            if !s.idx.relocated.is_empty() {
                s.idx.relocated.remove(&seq);
            }
            s.body.clear();
            format::encode_seq_record(&mut s.body, KIND_ACK, seq);
            s.append_body()?;
            s.after_op()
        })
    }

    fn requeue(
        &mut self,
        seq: u64,
        handle: FsHandle,
        new_seq: u64,
        meta: &EntryMeta<'_>,
    ) -> Result<FsHandle, FsError> {
        self.mutate(|s| {
            if s.idx.live.get(seq).is_none() {
                return Err(s.unknown(seq));
            }
            s.check_new_seq(new_seq)?;
            s.recovery = None;
            s.prepare_write()?;
            // The payload stays as it was; a new record carries it with the new metadata
            // and replaces the old one in the same step.
            let h = s.resolve(seq, handle)?;
            let mut copy = std::mem::take(&mut s.copy);
            let r = s.read_entry(seq, h, &mut copy);
            let result = r.and_then(|(range, source)| {
                match source {
                    Source::WriteBuffer => {
                        copy.clear();
                        copy.extend_from_slice(&s.buf[range]);
                    }
                    Source::Map => {
                        let map = s.existing_map(h.segment());
                        copy.clear();
                        copy.extend_from_slice(&map.expect("read_entry just read this map")[range]);
                    }
                    Source::Caller => {
                        copy.drain(..range.start);
                        copy.truncate(range.end - range.start);
                    }
                }
                s.check_size(copy.len() + meta.group.len())?;
                let group = s.intern_group(meta.group)?;
                let handle = s.append_entry(&EntryRecord {
                    seq: new_seq,
                    replaces: Some(seq),
                    group,
                    priority: meta.priority,
                    start: meta.start,
                    leased: false,
                    not_before: meta.not_before.map(Timestamp::as_nanos),
                    fingerprint: None,
                    payload: &copy,
                })?;
                s.idx.live.remove(seq);
                s.idx.relocated.remove(&seq);
                s.release(h);
                s.after_op()?;
                Ok(handle)
            });
            s.copy = copy;
            result
        })
    }

    fn add_fingerprints(&mut self, fingerprints: &[Fingerprint]) -> Result<(), FsError> {
        self.mutate(|s| {
            for chunk in fingerprints.chunks(FPS_PER_BLOCK) {
                s.prepare_write()?;
                s.body.clear();
                s.body.push(KIND_FINGERPRINTS);
                for fp in chunk {
                    s.body.extend_from_slice(&format::fp_prefix(fp));
                }
                s.append_body()?;
            }
            s.after_op()
        })
    }

    fn save_scope_states(&mut self, states: &[ScopeSnapshot]) -> Result<(), FsError> {
        self.mutate(|s| {
            s.scopes_pending = Some(files::encode_scopes(&s.dir, states)?);
            s.after_op()
        })
    }

    fn flush(&mut self) -> Result<(), FsError> {
        FsStore::flush(self)
    }
}
