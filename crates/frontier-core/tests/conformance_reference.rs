//! The store conformance suite against the in-memory reference store.

use polite_frontier_core::ReferenceStore;
use polite_frontier_core::conformance::Harness;

struct Memory;

impl Harness for Memory {
    type Store = ReferenceStore;

    fn create(&mut self) -> ReferenceStore {
        ReferenceStore::new()
    }

    fn reopen(&mut self, store: ReferenceStore) -> ReferenceStore {
        store
    }

    fn corrupt_payload(&mut self, store: &mut ReferenceStore, seq: u64) {
        store
            .overwrite_payload(seq, &[1, 0xff, 0xff])
            .unwrap_or_else(|e| panic!("damaging the payload of #{seq}: {e}"));
    }
}

polite_frontier_core::store_conformance_tests!(Memory);
