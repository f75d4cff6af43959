//! Property test: random sequences of store operations, with reopens and simulated
//! crashes in between, leave the filesystem store in exactly the state the in-memory
//! reference store reports for the same operations (everything `recover` yields, and
//! every payload).

mod common;

use std::time::Duration;

use common::*;
use polite_frontier_core::{Durability, EntryMeta, ReferenceStore, Store};
use polite_store_fs::{FsConfig, FsHandle, FsStore};
use polite_throttle_core::{ScopeSnapshot, Timestamp};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Push {
        group: u8,
        priority: i8,
        start: bool,
        delay: Option<u32>,
        fingerprint: bool,
        len: u16,
    },
    Callback(u8),
    Lease(usize),
    Ack(usize),
    Requeue {
        at: usize,
        group: u8,
        priority: i8,
    },
    Load(usize),
    AddFingerprints(u8),
    SaveScopes(u8),
    Flush,
    Compact,
    /// Drop (which flushes) and open again.
    Reopen,
    /// Flush, then close without flushing the way a crash would (under `EveryOp`
    /// without the flush: every operation is already durable).
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..5, -3i8..4, any::<bool>(), prop::option::weighted(0.2, 0u32..1000), prop::bool::weighted(0.8), 0u16..300)
            .prop_map(|(group, priority, start, delay, fingerprint, len)| Op::Push {
                group, priority, start, delay, fingerprint, len
            }),
        1 => (0u8..4).prop_map(Op::Callback),
        4 => any::<usize>().prop_map(Op::Lease),
        4 => any::<usize>().prop_map(Op::Ack),
        2 => (any::<usize>(), 0u8..5, -3i8..4).prop_map(|(at, group, priority)| Op::Requeue { at, group, priority }),
        2 => any::<usize>().prop_map(Op::Load),
        1 => (1u8..20).prop_map(Op::AddFingerprints),
        1 => (0u8..4).prop_map(Op::SaveScopes),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

fn config() -> impl Strategy<Value = FsConfig> {
    let durability = prop_oneof![
        Just(Durability::EveryOp),
        (1u32..5).prop_map(|max_ops| Durability::Batched {
            max_ops,
            max_delay: Duration::from_secs(3600)
        }),
        Just(Durability::OnClose),
    ];
    (
        durability,
        prop_oneof![Just(512u32), Just(2048), Just(32 << 20)],
        any::<bool>(),
    )
        .prop_map(|(durability, segment_size, mmap_reads)| {
            FsConfig::default()
                .durability(durability)
                .segment_size(segment_size)
                .mmap_reads(mmap_reads)
        })
}

fn group_name(g: u8) -> String {
    // Group keys as the frontier makes them: hosts, or scope sets with amounts.
    match g {
        0 => String::new(),
        1 => "a.example.com".into(),
        2 => "b.example.com:8080".into(),
        3 => "api\tbudget=2".into(),
        _ => format!("host{g}.example"),
    }
}

fn payload_of(seq: u64, len: u16) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

struct Model {
    mem: ReferenceStore,
    fs: Option<FsStore>,
    config: FsConfig,
    dir: tempfile::TempDir,
    /// Held requests: sequence number and the filesystem store's handle.
    held: Vec<(u64, FsHandle)>,
    next_seq: u64,
}

impl Model {
    fn fs(&mut self) -> &mut FsStore {
        self.fs.as_mut().expect("open")
    }

    /// Recovers both stores and compares everything they replay.
    fn compare(&mut self) -> Result<(), TestCaseError> {
        let (want, _) = replay(&mut self.mem);
        let fs = self.fs.as_mut().expect("open");
        let (mut got, handles) = replay(fs);
        let mut want_fps = want.fingerprints.clone();
        want_fps.sort_unstable();
        got.fingerprints.sort_unstable();
        prop_assert_eq!(&got.fingerprints, &want_fps, "fingerprints (as multisets)");
        prop_assert_eq!(&got.callbacks, &want.callbacks, "callbacks");
        prop_assert_eq!(&got.scopes, &want.scopes, "scope states");
        prop_assert_eq!(&got.entries, &want.entries, "entries in seq order");
        prop_assert_eq!(got.next_seq, want.next_seq, "next_seq");
        self.held = got.entries.iter().map(|e| e.0).zip(handles).collect();
        for &(seq, h) in &self.held.clone() {
            let mut a = vec![];
            let mut b = vec![];
            let m = self.mem.load(seq, &(), &mut a).unwrap().to_vec();
            let f = self.fs().load(seq, &h, &mut b).unwrap().to_vec();
            prop_assert_eq!(f, m, "payload of #{}", seq);
        }
        Ok(())
    }

    fn reopen(&mut self) {
        drop(self.fs.take());
        self.fs = Some(FsStore::open(self.dir.path(), self.config).unwrap());
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let pick =
            |held: &[(u64, FsHandle)], at: usize| (!held.is_empty()).then(|| held[at % held.len()]);
        match *op {
            Op::Push {
                group,
                priority,
                start,
                delay,
                fingerprint,
                len,
            } => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let g = group_name(group);
                let meta = EntryMeta {
                    group: &g,
                    priority: i32::from(priority),
                    start,
                    not_before: delay.map(|d| Timestamp::from_millis(u64::from(d))),
                };
                let payload = payload_of(seq, len);
                let f = fingerprint.then(|| fp(seq % 7)); // some fingerprints repeat
                self.mem.push(seq, &meta, &payload, f.as_ref()).unwrap();
                let h = self.fs().push(seq, &meta, &payload, f.as_ref()).unwrap();
                self.held.push((seq, h));
            }
            Op::Callback(id) => {
                let name = format!("parse_{id}");
                self.mem.put_callback(u32::from(id), &name).unwrap();
                self.fs().put_callback(u32::from(id), &name).unwrap();
            }
            Op::Lease(at) => {
                if let Some((seq, h)) = pick(&self.held, at) {
                    self.mem.lease(seq, &()).unwrap();
                    self.fs().lease(seq, &h).unwrap();
                }
            }
            Op::Ack(at) => {
                if let Some((seq, h)) = pick(&self.held, at) {
                    self.held.retain(|x| x.0 != seq);
                    self.mem.ack(seq, ()).unwrap();
                    self.fs().ack(seq, h).unwrap();
                }
            }
            Op::Requeue {
                at,
                group,
                priority,
            } => {
                if let Some((seq, h)) = pick(&self.held, at) {
                    let new_seq = self.next_seq;
                    self.next_seq += 1;
                    let g = group_name(group);
                    let meta = EntryMeta {
                        group: &g,
                        priority: i32::from(priority),
                        start: false,
                        not_before: None,
                    };
                    self.mem.requeue(seq, (), new_seq, &meta).unwrap();
                    let nh = self.fs().requeue(seq, h, new_seq, &meta).unwrap();
                    self.held.retain(|x| x.0 != seq);
                    self.held.push((new_seq, nh));
                }
            }
            Op::Load(at) => {
                if let Some((seq, h)) = pick(&self.held, at) {
                    let mut a = vec![];
                    let mut b = vec![];
                    let m = self.mem.load(seq, &(), &mut a).unwrap().to_vec();
                    let f = self.fs().load(seq, &h, &mut b).unwrap().to_vec();
                    prop_assert_eq!(f, m, "payload of #{}", seq);
                }
            }
            Op::AddFingerprints(n) => {
                let fps: Vec<_> = (0..u64::from(n)).map(|i| fp(1000 + i % 5)).collect();
                self.mem.add_fingerprints(&fps).unwrap();
                self.fs().add_fingerprints(&fps).unwrap();
            }
            Op::SaveScopes(n) => {
                let states: Vec<ScopeSnapshot> = (0..n)
                    .map(|i| {
                        let mut s = ScopeSnapshot::new(format!("scope{i}"));
                        s.level = u32::from(i);
                        s.delay = f64::from(i) * 0.5;
                        s
                    })
                    .collect();
                self.mem.save_scope_states(&states).unwrap();
                self.fs().save_scope_states(&states).unwrap();
            }
            Op::Flush => self.fs().flush().unwrap(),
            Op::Compact => self.fs().compact().unwrap(),
            Op::Reopen => {
                self.reopen();
                self.compare()?;
            }
            Op::Crash => {
                if self.config.durability != Durability::EveryOp {
                    self.fs().flush().unwrap();
                }
                self.fs.take().expect("open").abandon();
                self.fs = Some(FsStore::open(self.dir.path(), self.config).unwrap());
                self.compare()?;
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn fs_store_matches_the_memory_store(config in config(), ops in prop::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStore::open(dir.path(), config).unwrap();
        let mut m = Model { mem: ReferenceStore::new(), fs: Some(fs), config, dir, held: vec![], next_seq: 0 };
        for op in &ops {
            m.apply(op)?;
        }
        m.reopen();
        m.compare()?;
    }
}
