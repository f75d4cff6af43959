//! Reading the on-disk format from the outside (as the crate documentation describes it),
//! to damage files the way a disk or a bug would.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

pub(crate) const SEGMENT_HEADER_LEN: usize = 32;

/// The segment files of a store directory, oldest first.
pub(crate) fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("seg-") && n.ends_with(".log")
        })
        .collect();
    v.sort();
    v
}

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let x = b[*at];
        *at += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

/// A record found in a segment.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    /// Offset of the record (its CRC).
    pub(crate) offset: usize,
    /// Offset and length of the varint length field plus body (what the CRC covers).
    pub(crate) covered: std::ops::Range<usize>,
    /// The entry's payload.
    pub(crate) payload: std::ops::Range<usize>,
    pub(crate) kind: u8,
    pub(crate) seq: Option<u64>,
}

/// Every record of a segment file.
pub(crate) fn records(path: &Path) -> Vec<Found> {
    let b = fs::read(path).unwrap();
    let mut out = vec![];
    let mut at = SEGMENT_HEADER_LEN;
    while at < b.len() {
        let offset = at;
        at += 4;
        let len_at = at;
        let len = varint(&b, &mut at) as usize;
        let body = at..at + len;
        let tag = b[body.start];
        let kind = tag & 7;
        let mut p = body.start + 1;
        let mut seq = None;
        let mut payload = body.end..body.end;
        if kind == 1 {
            seq = Some(varint(&b, &mut p));
            if tag & 0x80 != 0 {
                varint(&b, &mut p);
            }
            varint(&b, &mut p); // group
            varint(&b, &mut p); // priority
            if tag & 0x40 != 0 {
                varint(&b, &mut p);
            }
            if tag & 0x20 != 0 {
                p += 8;
            }
            payload = p..body.end;
        } else if kind == 2 || kind == 3 {
            seq = Some(varint(&b, &mut p));
        }
        out.push(Found {
            path: path.to_path_buf(),
            offset,
            covered: len_at..body.end,
            payload,
            kind,
            seq,
        });
        at = body.end;
    }
    out
}

/// The newest entry record of request `seq`.
pub(crate) fn find_entry(dir: &Path, seq: u64) -> Option<Found> {
    segments(dir)
        .iter()
        .flat_map(|p| records(p))
        .rfind(|r| r.kind == 1 && r.seq == Some(seq))
}

/// Overwrites bytes of a record and fixes its CRC (damage the checksum cannot see, as an
/// encoder bug would leave).
pub(crate) fn rewrite_with_crc(found: &Found, at: usize, bytes: &[u8]) {
    let mut b = fs::read(&found.path).unwrap();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    let crc = crc32(&b[found.covered.clone()]);
    b[found.offset..found.offset + 4].copy_from_slice(&crc.to_le_bytes());
    fs::write(&found.path, b).unwrap();
}

/// CRC-32 (IEEE), bit by bit: the tests do not share the crate's implementation.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

use polite_frontier_core::{EntryMeta, Fingerprint, RecoveryVisitor, Store};
use polite_store_fs::{FsConfig, FsError, FsHandle, FsStore};
use polite_throttle_core::{ScopeSnapshot, Timestamp};

/// Everything a store replays, in the order it came.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Replay {
    pub(crate) callbacks: Vec<(u32, String)>,
    pub(crate) fingerprints: Vec<u64>,
    pub(crate) scopes: Vec<ScopeSnapshot>,
    /// seq, group, priority, start, not_before, leased
    pub(crate) entries: Vec<(u64, String, i32, bool, Option<Timestamp>, bool)>,
    pub(crate) next_seq: u64,
}

/// A visitor collecting a replay and the handles of its entries.
#[derive(Debug, Default)]
pub(crate) struct Collect<H>(pub(crate) Replay, pub(crate) Vec<H>);

impl<H> RecoveryVisitor<H> for Collect<H> {
    fn callback(&mut self, id: u32, name: &str) {
        self.0.callbacks.push((id, name.to_owned()));
    }
    fn fingerprint(&mut self, fp: &Fingerprint) {
        self.0.fingerprints.push(fp.prefix64());
    }
    fn entry(&mut self, seq: u64, meta: EntryMeta<'_>, handle: H, leased: bool) {
        self.0.entries.push((
            seq,
            meta.group.to_owned(),
            meta.priority,
            meta.start,
            meta.not_before,
            leased,
        ));
        self.1.push(handle);
    }
    fn scope_state(&mut self, s: ScopeSnapshot) {
        self.0.scopes.push(s);
    }
    fn next_seq(&mut self, next: u64) {
        self.0.next_seq = next;
    }
}

/// Replays a store.
pub(crate) fn replay<S: Store>(store: &mut S) -> (Replay, Vec<S::Handle>) {
    let mut v = Collect(Replay::default(), Vec::new());
    store
        .recover(&mut v)
        .unwrap_or_else(|e| panic!("recover: {e}"));
    (v.0, v.1)
}

pub(crate) fn meta(group: &str, priority: i32) -> EntryMeta<'_> {
    EntryMeta {
        group,
        priority,
        start: false,
        not_before: None,
    }
}

pub(crate) fn fp(i: u64) -> Fingerprint {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    Fingerprint(b)
}

pub(crate) fn payload(i: u64) -> Vec<u8> {
    format!("payload-{i}-{}", "x".repeat((i % 17) as usize)).into_bytes()
}

/// Opens a store and pushes `n` requests (seq 0..n) with fingerprints, then flushes.
pub(crate) fn filled(dir: &Path, config: FsConfig, n: u64) -> (FsStore, Vec<FsHandle>) {
    let mut s = FsStore::open(dir, config).unwrap();
    let _ = replay(&mut s);
    let mut handles = vec![];
    for i in 0..n {
        let g = format!("host{}.example", i % 3);
        handles.push(
            s.push(i, &meta(&g, (i % 5) as i32), &payload(i), Some(&fp(i)))
                .unwrap(),
        );
    }
    s.flush().unwrap();
    (s, handles)
}

/// Loads a payload through the Store trait.
pub(crate) fn load(s: &mut FsStore, seq: u64, h: FsHandle) -> Result<Vec<u8>, FsError> {
    let mut buf = vec![];
    s.load(seq, &h, &mut buf).map(|b| b.to_vec())
}
