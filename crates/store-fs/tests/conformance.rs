//! The polite-frontier-core store conformance suite against the filesystem store, under each
//! durability policy and with segments small enough that compaction runs during it.

mod common;

use polite_frontier_core::Durability;
use polite_frontier_core::conformance::Harness;
use polite_store_fs::{FsConfig, FsStore};
use tempfile::TempDir;

struct Fs {
    config: FsConfig,
    dirs: Vec<TempDir>,
}

impl Fs {
    fn new(config: FsConfig) -> Self {
        Fs {
            config,
            dirs: Vec::new(),
        }
    }
}

impl Harness for Fs {
    type Store = FsStore;

    fn create(&mut self) -> FsStore {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = FsStore::open(dir.path(), self.config).expect("open a new store");
        self.dirs.push(dir);
        store
    }

    fn reopen(&mut self, store: FsStore) -> FsStore {
        let dir = store.dir().to_path_buf();
        drop(store);
        FsStore::open(&dir, self.config).unwrap_or_else(|e| panic!("reopen: {e}"))
    }

    fn corrupt_payload(&mut self, store: &mut FsStore, seq: u64) {
        let found = common::find_entry(store.dir(), seq).unwrap_or_else(|| {
            panic!(
                "no entry record of #{seq} in the segments of {}",
                store.dir().display()
            )
        });
        assert!(!found.payload.is_empty(), "#{seq} has an empty payload");
        // A payload whose format-version byte is wrong, under a valid checksum.
        let junk = vec![0xff; found.payload.len()];
        common::rewrite_with_crc(&found, found.payload.start, &junk);
    }
}

mod batched {
    use super::*;
    polite_frontier_core::store_conformance_tests!(Fs::new(FsConfig::default()));
}

mod every_op {
    use super::*;
    polite_frontier_core::store_conformance_tests!(Fs::new(FsConfig::with_durability(
        Durability::EveryOp
    )));
}

mod on_close {
    use super::*;
    polite_frontier_core::store_conformance_tests!(Fs::new(FsConfig::with_durability(
        Durability::OnClose
    )));
}

/// 1 KiB segments: compaction (copies, moved handles, carried group names) runs
/// throughout the suite.
mod small_segments {
    use super::*;
    polite_frontier_core::store_conformance_tests!(Fs::new(FsConfig::default().segment_size(1024)));
}

/// The same, reading sealed segments with `pread` instead of a memory map.
mod small_segments_pread {
    use super::*;
    polite_frontier_core::store_conformance_tests!(Fs::new(
        FsConfig::default().segment_size(1024).mmap_reads(false)
    ));
}
