//! Recovery from torn writes and damaged files, the directory lock, durability policies
//! and compaction, through the public API and the files on disk.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use polite_frontier_core::{Durability, Store};
use polite_store_fs::{FORMAT_VERSION, FsConfig, FsError, FsStore};

/// Runs `f` with a tracing subscriber that captures warnings; returns what it printed.
fn capture_warnings<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct W(Arc<Mutex<Vec<u8>>>);
    impl Write for W {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let out = W(Arc::new(Mutex::new(Vec::new())));
    let w = out.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    (r, text)
}

fn last_segment(dir: &std::path::Path) -> std::path::PathBuf {
    segments(dir).pop().expect("a segment")
}

#[test]
fn torn_tail_is_truncated_with_a_warning_and_nothing_before_it_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = filled(dir.path(), FsConfig::default(), 20);
    drop(s);
    let seg = last_segment(dir.path());
    let recs = records(&seg);
    let last = recs.last().unwrap().clone();
    assert_eq!(last.seq, Some(19));
    let full = fs::read(&seg).unwrap();
    // Every cut inside the last record (a write that stopped anywhere in it).
    for cut in last.offset + 1..full.len() {
        fs::write(&seg, &full[..cut]).unwrap();
        let (s, warnings) = capture_warnings(|| FsStore::open(dir.path(), FsConfig::default()));
        let mut s = s.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(
            warnings.contains("torn tail truncated") && warnings.contains("WARN"),
            "cut at {cut}: warning expected, got {warnings:?}"
        );
        let (r, handles) = replay(&mut s);
        let seqs: Vec<u64> = r.entries.iter().map(|e| e.0).collect();
        assert_eq!(seqs, (0..19).collect::<Vec<_>>(), "cut at {cut}");
        for (e, h) in r.entries.iter().zip(&handles) {
            assert_eq!(load(&mut s, e.0, *h).unwrap(), payload(e.0));
        }
        assert_eq!(r.fingerprints.len(), 19);
        drop(s);
        assert_eq!(
            fs::metadata(&seg).unwrap().len() as usize,
            last.offset,
            "truncated to the last valid record"
        );
        fs::write(&seg, &full).unwrap();
    }
    // Zeros after the last record (a power cut after the file grew) are a torn tail too.
    let mut padded = full.clone();
    padded.extend_from_slice(&[0u8; 300]);
    fs::write(&seg, &padded).unwrap();
    let (s, warnings) = capture_warnings(|| FsStore::open(dir.path(), FsConfig::default()));
    let mut s = s.unwrap();
    assert!(warnings.contains("torn tail truncated"));
    assert_eq!(replay(&mut s).0.entries.len(), 20);
    // And the store goes on appending after the cut.
    s.push(20, &meta("a", 0), b"after", None).unwrap();
    drop(s);
    let mut s = FsStore::open(dir.path(), FsConfig::default()).unwrap();
    assert_eq!(replay(&mut s).0.entries.len(), 21);
}

#[test]
fn a_flipped_byte_in_the_middle_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = filled(dir.path(), FsConfig::default(), 20);
    drop(s);
    let seg = last_segment(dir.path());
    let victim = records(&seg)
        .into_iter()
        .find(|r| r.seq == Some(7) && r.kind == 1)
        .unwrap();
    let mut b = fs::read(&seg).unwrap();
    // Every byte of the record: CRC, length, body.
    for at in victim.offset..victim.covered.end {
        b[at] ^= 0x40;
        fs::write(&seg, &b).unwrap();
        let err = FsStore::open(dir.path(), FsConfig::default()).unwrap_err();
        match &err {
            FsError::Corrupt { path, offset, .. } => {
                assert_eq!(path, &seg, "byte {at}");
                assert_eq!(*offset as usize, victim.offset, "byte {at}: {err}");
            }
            other => panic!("byte {at}: expected a corruption error, got {other}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&seg.display().to_string()), "{msg}");
        assert!(msg.contains(&format!("byte {}", victim.offset)), "{msg}");
        b[at] ^= 0x40;
    }
    fs::write(&seg, &b).unwrap();
    FsStore::open(dir.path(), FsConfig::default()).expect("undamaged again");
}

#[test]
fn damage_in_an_older_segment_or_the_seen_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = FsConfig::default().segment_size(1024);
    let (mut s, _) = filled(dir.path(), config, 100);
    s.compact().unwrap();
    // More records after compaction, so the seen file is not the last thing written.
    for i in 100..200 {
        s.push(i, &meta("a", 0), &payload(i), Some(&fp(i))).unwrap();
    }
    s.compact().unwrap();
    drop(s);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3, "{segs:?}");
    // Even the last record of an older segment: it was synced before the next one began.
    let older = &segs[segs.len() - 2];
    let rec = records(older).pop().unwrap();
    let mut b = fs::read(older).unwrap();
    b[rec.covered.end - 1] ^= 1;
    fs::write(older, &b).unwrap();
    match FsStore::open(dir.path(), config).unwrap_err() {
        FsError::Corrupt { path, offset, .. } => {
            assert_eq!(&path, older);
            assert_eq!(offset as usize, rec.offset);
        }
        other => panic!("expected a corruption error, got {other}"),
    }
    b[rec.covered.end - 1] ^= 1;
    fs::write(older, &b).unwrap();

    let seen = dir.path().join("seen.dat");
    let mut b = fs::read(&seen).unwrap();
    assert!(
        b.len() > 16 + 8 + 8 * 100,
        "fingerprints moved to the seen file"
    );
    b[16 + 8 + 3] ^= 1; // inside the first block, which is followed by more
    fs::write(&seen, &b).unwrap();
    let err = FsStore::open(dir.path(), config).unwrap_err();
    assert!(
        matches!(&err, FsError::Corrupt { path, offset: 16, .. } if path == &seen),
        "{err}"
    );
}

#[test]
fn wrong_magic_or_newer_version_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = filled(dir.path(), FsConfig::default(), 3);
    drop(s);
    let seg = last_segment(dir.path());
    let good = fs::read(&seg).unwrap();

    let mut b = good.clone();
    b[..8].copy_from_slice(b"NOTOURS!");
    fs::write(&seg, &b).unwrap();
    let err = FsStore::open(dir.path(), FsConfig::default()).unwrap_err();
    assert!(
        matches!(&err, FsError::BadMagic { path } if path == &seg),
        "{err}"
    );
    assert!(err.to_string().contains("magic"), "{err}");

    let mut b = good.clone();
    b[8..10].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    fs::write(&seg, &b).unwrap();
    let err = FsStore::open(dir.path(), FsConfig::default()).unwrap_err();
    match &err {
        FsError::UnsupportedVersion {
            path,
            found,
            supported,
        } => {
            assert_eq!(path, &seg);
            assert_eq!((*found, *supported), (FORMAT_VERSION + 1, FORMAT_VERSION));
        }
        other => panic!("expected a version error, got {other}"),
    }
    assert!(err.to_string().contains("format version 2"), "{err}");
    fs::write(&seg, &good).unwrap();

    // The other files are checked the same way.
    let seen = dir.path().join("seen.dat");
    let good_seen = fs::read(&seen).unwrap();
    let mut b = good_seen.clone();
    b[8] = 7;
    fs::write(&seen, &b).unwrap();
    let err = FsStore::open(dir.path(), FsConfig::default()).unwrap_err();
    assert!(
        matches!(&err, FsError::UnsupportedVersion { path, found: 7, .. } if path == &seen),
        "{err}"
    );
    fs::write(&seen, &good_seen).unwrap();

    let mut s = FsStore::open(dir.path(), FsConfig::default()).unwrap();
    s.save_scope_states(&[polite_throttle_core::ScopeSnapshot::new("a")])
        .unwrap();
    drop(s);
    let scopes = dir.path().join("scopes.dat");
    let mut b = fs::read(&scopes).unwrap();
    b[..8].copy_from_slice(b"XXXXXXXX");
    fs::write(&scopes, &b).unwrap();
    let mut s = FsStore::open(dir.path(), FsConfig::default()).unwrap();
    let mut v = Collect(Replay::default(), Vec::new());
    let err = s.recover(&mut v).unwrap_err();
    assert!(
        matches!(&err, FsError::BadMagic { path } if path == &scopes),
        "{err}"
    );
}

#[test]
fn a_locked_directory_cannot_be_opened_twice() {
    let dir = tempfile::tempdir().unwrap();
    let first = FsStore::open(dir.path(), FsConfig::default()).unwrap();
    let err = FsStore::open(dir.path(), FsConfig::default()).unwrap_err();
    match &err {
        FsError::Locked { dir: d, holder, .. } => {
            assert_eq!(d, dir.path());
            assert_eq!(
                holder.as_deref(),
                Some(std::process::id().to_string().as_str())
            );
        }
        other => panic!("expected a lock error, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("already open") && msg.contains(&std::process::id().to_string()),
        "{msg}"
    );
    drop(first);
    FsStore::open(dir.path(), FsConfig::default()).expect("free again once closed");
}

#[test]
fn a_missing_segment_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = FsConfig::default().segment_size(1024);
    let (s, _) = filled(dir.path(), config, 100);
    drop(s);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3);
    fs::remove_file(&segs[1]).unwrap();
    let err = FsStore::open(dir.path(), config).unwrap_err();
    assert!(
        matches!(&err, FsError::MissingSegment { path } if path == &segs[1]),
        "{err}"
    );
}

#[test]
fn a_torn_segment_header_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = filled(dir.path(), FsConfig::default(), 5);
    drop(s);
    let seg = last_segment(dir.path());
    let header = fs::read(&seg).unwrap()[..32].to_vec();
    // A crash while creating the next segment: part of a header.
    let next = dir.path().join("seg-0000000002.log");
    fs::write(&next, &header[..11]).unwrap();
    let (s, warnings) = capture_warnings(|| FsStore::open(dir.path(), FsConfig::default()));
    let mut s = s.unwrap();
    assert!(warnings.contains("torn header"), "{warnings}");
    assert_eq!(replay(&mut s).0.entries.len(), 5);
    s.push(5, &meta("a", 0), b"x", None).unwrap();
    drop(s);
    let mut s = FsStore::open(dir.path(), FsConfig::default()).unwrap();
    assert_eq!(replay(&mut s).0.entries.len(), 6);
}

#[test]
fn damage_after_opening_is_reported_by_load() {
    // Request 2 in the active segment (read with pread or from the write buffer), then
    // in a sealed segment read through its memory map, then the same with pread.
    let small = FsConfig::default().segment_size(1024);
    for (config, sealed) in [
        (FsConfig::default(), false),
        (small, true),
        (small.mmap_reads(false), true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, handles) = filled(dir.path(), config, 40);
        let rec = find_entry(dir.path(), 2).unwrap();
        assert_eq!(rec.path != last_segment(dir.path()), sealed, "{config:?}");
        // Read once before the damage, so a map (if any) is already in place.
        assert_eq!(load(&mut s, 2, handles[2]).unwrap(), payload(2));
        let mapped = s.mapped_bytes();
        assert_eq!(
            mapped > 0,
            sealed && config.mmap_reads,
            "{config:?}: {mapped}"
        );
        let f = OpenOptions::new().write(true).open(&rec.path).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"Z", rec.payload.start as u64).unwrap();
        let err = load(&mut s, 2, handles[2]).unwrap_err();
        assert!(
            matches!(&err, FsError::Corrupt { path, offset, .. } if *path == rec.path && *offset as usize == rec.offset),
            "{config:?}: {err}"
        );
        assert_eq!(load(&mut s, 3, handles[3]).unwrap(), payload(3));
        // Asking for a request with another's handle is caught too.
        assert!(matches!(
            load(&mut s, 3, handles[4]),
            Err(FsError::StaleHandle { .. })
        ));
        assert!(matches!(
            load(&mut s, 99, handles[4]),
            Err(FsError::UnknownSeq { .. })
        ));
    }
}

#[test]
fn every_op_survives_a_crash_and_on_close_loses_what_was_not_flushed() {
    for (durability, flush, expect) in [
        (Durability::EveryOp, false, 10),
        (
            Durability::Batched {
                max_ops: 4,
                max_delay: std::time::Duration::from_secs(3600),
            },
            false,
            8,
        ),
        (Durability::OnClose, true, 10),
        (Durability::OnClose, false, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = FsConfig::with_durability(durability);
        let mut s = FsStore::open(dir.path(), config).unwrap();
        for i in 0..10 {
            s.push(i, &meta("a", 0), &payload(i), Some(&fp(i))).unwrap();
        }
        if flush {
            s.flush().unwrap();
        }
        s.abandon();
        let mut s = FsStore::open(dir.path(), config).unwrap();
        let (r, _) = replay(&mut s);
        assert_eq!(r.entries.len(), expect, "{durability:?} flush={flush}");
        assert_eq!(
            r.fingerprints.len(),
            expect,
            "{durability:?}: seen with its request"
        );
    }
}

#[test]
fn compaction_bounds_the_log_and_keeps_handles_working() {
    let dir = tempfile::tempdir().unwrap();
    let config = FsConfig::default().segment_size(4096);
    let (mut s, handles) = filled(dir.path(), config, 2000);
    let before = s.stats();
    // Lease and acknowledge most, newest first (as a LIFO crawl would).
    for i in (0..2000u64).rev() {
        if i % 10 == 0 {
            continue;
        }
        s.lease(i, &handles[i as usize]).unwrap();
        s.ack(i, handles[i as usize]).unwrap();
    }
    // Each commit compacts one more segment while garbage dominates.
    for _ in 0..before.segments {
        s.flush().unwrap();
    }
    let after = s.stats();
    assert_eq!(after.held, 200);
    assert!(
        after.relocated > 0,
        "compaction moved held requests: {after:?}"
    );
    // Within twice the held requests plus two segments (and the active one).
    let held_bytes = 200 * (before.log_bytes / 2000);
    assert!(
        after.log_bytes < 2 * held_bytes + 3 * 4096,
        "garbage was reclaimed: {before:?} -> {after:?}"
    );
    // Old handles still load the right payloads.
    for i in (0..2000u64).step_by(10) {
        assert_eq!(load(&mut s, i, handles[i as usize]).unwrap(), payload(i));
    }
    // Retry one with its old handle, acknowledge another.
    s.lease(0, &handles[0]).unwrap();
    let moved = s.requeue(0, handles[0], 5000, &meta("b", 7)).unwrap();
    assert_eq!(load(&mut s, 5000, moved).unwrap(), payload(0));
    s.ack(10, handles[10]).unwrap();
    s.compact().unwrap();
    let compacted = s.stats();
    assert_eq!(compacted.seen_fingerprints, 2000);
    assert!(compacted.log_bytes < 200 * 64, "{compacted:?}");
    drop(s);

    let mut s = FsStore::open(dir.path(), config).unwrap();
    let (r, hs) = replay(&mut s);
    let seqs: Vec<u64> = r.entries.iter().map(|e| e.0).collect();
    let mut want: Vec<u64> = (20..2000).step_by(10).collect();
    want.push(5000);
    assert_eq!(seqs, want);
    assert_eq!(r.fingerprints.len(), 2000);
    assert_eq!(r.next_seq, 5001);
    let last = r.entries.last().unwrap();
    assert_eq!((last.1.as_str(), last.2), ("b", 7));
    for (e, h) in r.entries.iter().zip(hs) {
        let want = if e.0 == 5000 {
            payload(0)
        } else {
            payload(e.0)
        };
        assert_eq!(load(&mut s, e.0, h).unwrap(), want);
    }
}

#[test]
fn the_high_water_mark_survives_when_everything_is_compacted_away() {
    let dir = tempfile::tempdir().unwrap();
    let config = FsConfig::default().segment_size(1024);
    let (mut s, handles) = filled(dir.path(), config, 50);
    for (i, h) in handles.iter().enumerate() {
        s.ack(i as u64, *h).unwrap();
    }
    s.compact().unwrap();
    assert_eq!(s.stats().held, 0);
    drop(s);
    let mut s = FsStore::open(dir.path(), config).unwrap();
    let (r, _) = replay(&mut s);
    assert!(r.entries.is_empty());
    assert_eq!(r.next_seq, 50);
    assert_eq!(r.fingerprints.len(), 50);
    assert!(matches!(
        s.push(3, &meta("a", 0), b"x", None),
        Err(FsError::SeqNotIncreasing {
            seq: 3,
            next: 50,
            ..
        })
    ));
}

#[test]
fn a_crash_during_compaction_leaves_duplicates_that_recovery_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let config = FsConfig::default().segment_size(1024);
    let (mut s, handles) = filled(dir.path(), config, 60);
    for i in (0..60u64).filter(|i| i % 3 == 0) {
        s.lease(i, &handles[i as usize]).unwrap();
        s.ack(i, handles[i as usize]).unwrap();
    }
    s.lease(1, &handles[1]).unwrap();
    s.flush().unwrap();
    let old: Vec<(std::path::PathBuf, Vec<u8>)> = segments(dir.path())
        .into_iter()
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    s.compact().unwrap();
    drop(s);
    // The copies and the seen file were made durable, the old segments not yet deleted.
    for (p, b) in &old {
        fs::write(p, b).unwrap();
    }
    let mut s = FsStore::open(dir.path(), config).unwrap();
    let (r, hs) = replay(&mut s);
    let seqs: Vec<u64> = r.entries.iter().map(|e| e.0).collect();
    let want: Vec<u64> = (0..60).filter(|i| i % 3 != 0).collect();
    assert_eq!(seqs, want, "each held request once");
    assert_eq!(
        r.entries.iter().filter(|e| e.5).count(),
        1,
        "#1 still leased"
    );
    for (e, h) in r.entries.iter().zip(&hs) {
        assert_eq!(load(&mut s, e.0, *h).unwrap(), payload(e.0));
    }
    // Compacting again copies each held request once, not its stale duplicates too.
    s.compact().unwrap();
    let entries: Vec<u64> = segments(dir.path())
        .iter()
        .flat_map(|p| records(p))
        .filter(|r| r.kind == 1)
        .filter_map(|r| r.seq)
        .collect();
    let mut sorted = entries.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, want, "one record per held request on disk");
    for (e, h) in r.entries.iter().zip(&hs) {
        assert_eq!(load(&mut s, e.0, *h).unwrap(), payload(e.0));
    }
    drop(s);
    let mut s = FsStore::open(dir.path(), config).unwrap();
    let (r2, _) = replay(&mut s);
    assert_eq!(r2.entries.iter().map(|e| e.0).collect::<Vec<_>>(), want);
    assert_eq!(
        r2.entries.iter().filter(|e| e.5).count(),
        0,
        "reported once, then queued"
    );
    let mut fps = r2.fingerprints.clone();
    fps.sort_unstable();
    fps.dedup();
    assert_eq!(
        fps.len(),
        60,
        "every fingerprint kept (some twice, harmlessly)"
    );
}
