//! The store conformance suite against the in-memory reference store.

use polite_frontier_core::MemoryStore;
use polite_frontier_core::conformance::Harness;

struct Memory;

impl Harness for Memory {
    type Store = MemoryStore;

    fn create(&mut self) -> MemoryStore {
        MemoryStore::new()
    }

    fn reopen(&mut self, store: MemoryStore) -> MemoryStore {
        store
    }

    fn corrupt_payload(&mut self, store: &mut MemoryStore, seq: u64) {
        store
            .overwrite_payload(seq, &[1, 0xff, 0xff])
            .unwrap_or_else(|e| panic!("damaging the payload of #{seq}: {e}"));
    }
}

polite_frontier_core::store_conformance_tests!(Memory);
