//! Property tests: without throttling in the way, the frontier's output order equals a
//! naive reference model (a list sorted by docs/behaviour.md 4.1 rules), and `peek` equals `poll`.

use polite_frontier_core::{
    Frontier, FrontierConfig, Poll, PushOutcome, QueueOrder, Request, StartOrder, VolatileStore,
};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Push {
        host: usize,
        priority: i32,
        start: bool,
    },
    Pop,
}

fn ops(hosts: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0..hosts, -3i32..=3, any::<bool>())
                .prop_map(|(host, priority, start)| Op::Push { host, priority, start }),
            2 => Just(Op::Pop),
        ],
        1..200,
    )
}

#[derive(Clone, Debug)]
struct Entry {
    seq: u64,
    host: usize,
    priority: i32,
    class: u8,
}

/// The reference: the sorted-list rule of docs/behaviour.md 4.1.
struct Model {
    order: QueueOrder,
    start_order: StartOrder,
    entries: Vec<Entry>,
}

impl Model {
    fn class(&self, start: bool) -> u8 {
        u8::from(start && self.start_order != StartOrder::Same)
    }

    /// Sort key: greater goes first.
    fn key(&self, e: &Entry) -> (i32, u8, i64) {
        let lifo = if e.class == 1 {
            self.start_order == StartOrder::Lifo
        } else {
            self.order == QueueOrder::Lifo
        };
        let seq = if lifo { e.seq as i64 } else { -(e.seq as i64) };
        (e.priority, 1 - e.class, seq)
    }

    fn best(&self, host: Option<usize>) -> Option<&Entry> {
        self.entries
            .iter()
            .filter(|e| host.is_none_or(|h| e.host == h))
            .max_by_key(|e| self.key(e))
    }
}

fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = u32::MAX;
    s.concurrent_requests_per_domain = 0;
    s
}

fn run(
    ops: &[Op],
    hosts: usize,
    order: QueueOrder,
    start_order: StartOrder,
) -> Result<(), TestCaseError> {
    let now = Timestamp::ZERO;
    let mut f: Frontier<VolatileStore> = Frontier::open(
        settings(),
        FrontierConfig::default()
            .scheduler_order(order)
            .start_order(start_order),
        VolatileStore::new(),
        now,
    )
    .unwrap();
    let mut model = Model {
        order,
        start_order,
        entries: vec![],
    };
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Push {
                host,
                priority,
                start,
            } => {
                let mut req =
                    Request::get(format!("https://h{host}.example.com/{i}")).priority(priority);
                req.start = start;
                let PushOutcome::Queued(id) = f.push(&req, now).unwrap() else {
                    panic!("unique URLs are queued")
                };
                let class = model.class(start);
                model.entries.push(Entry {
                    seq: id.0,
                    host,
                    priority,
                    class,
                });
            }
            Op::Pop => {
                let peeked = f.peek(now).unwrap();
                let polled = f.poll(now).unwrap();
                let Poll::Ready(lease) = polled else {
                    prop_assert!(
                        model.entries.is_empty(),
                        "nothing polled but the model has {:?}",
                        model.entries
                    );
                    prop_assert_eq!(peeked, None);
                    continue;
                };
                prop_assert_eq!(peeked.as_ref(), Some(&lease.request));
                let got = model
                    .entries
                    .iter()
                    .position(|e| e.seq == lease.id().0)
                    .unwrap();
                let e = model.entries[got].clone();
                if hosts == 1 {
                    // One group: exactly the sorted list's head.
                    prop_assert_eq!(model.best(None).unwrap().seq, e.seq);
                } else {
                    // Many groups: the head of its own group, and nothing queued anywhere
                    // has a higher (priority, class).
                    prop_assert_eq!(model.best(Some(e.host)).unwrap().seq, e.seq);
                    let top = model.best(None).unwrap();
                    prop_assert_eq!((top.priority, top.class), (e.priority, e.class));
                }
                model.entries.remove(got);
                f.complete(lease.id(), &Outcome::status(200), now).unwrap();
            }
        }
    }
    Ok(())
}

fn orders() -> impl Strategy<Value = (QueueOrder, StartOrder)> {
    (
        prop::sample::select(vec![QueueOrder::Lifo, QueueOrder::Fifo]),
        prop::sample::select(vec![StartOrder::Fifo, StartOrder::Lifo, StartOrder::Same]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn one_group_pops_in_sorted_list_order(ops in ops(1), (o, s) in orders()) {
        run(&ops, 1, o, s)?;
    }

    #[test]
    fn many_groups_pop_group_heads_in_priority_order(ops in ops(6), (o, s) in orders()) {
        run(&ops, 6, o, s)?;
    }
}
