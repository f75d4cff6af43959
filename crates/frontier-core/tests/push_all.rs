//! `Frontier::push_all` against `push` one request at a time: the same outcomes, the same
//! first error (with the requests before it queued and none after it), the same stats and
//! the same order out, whatever the batch sizes.

use polite_frontier_core::{Frontier, FrontierConfig, Poll, PushOutcome, Request, VolatileStore};
use polite_throttle_core::{Outcome, Settings, Timestamp};
use proptest::prelude::*;

type F = Frontier<VolatileStore>;

#[derive(Clone, Debug)]
struct Spec {
    /// Among a few hosts, so that batches revisit groups they created.
    host: usize,
    /// Among a few paths, so that some requests are duplicates.
    path: usize,
    priority: i32,
    depth: u32,
    start: bool,
    dont_filter: bool,
    dont_throttle: bool,
    /// An unusable URL (no host): push fails on it.
    invalid: bool,
    /// A per-request delay (held aside until due).
    delayed: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (0..12usize, 0..40usize, -3i32..=3, 0u32..4),
        (
            any::<bool>(),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.02),
            prop::bool::weighted(0.1),
        ),
    )
        .prop_map(
            |(
                (host, path, priority, depth),
                (start, dont_filter, dont_throttle, invalid, delayed),
            )| Spec {
                host,
                path,
                priority,
                depth,
                start,
                dont_filter,
                dont_throttle,
                invalid,
                delayed,
            },
        )
}

fn request(s: &Spec) -> Request {
    let url = if s.invalid {
        format!("not a url {}", s.path)
    } else if s.host == 11 {
        // A host with a port: the general parser's path.
        format!("http://h11.example.com:8080/{}", s.path)
    } else {
        format!("https://h{}.example.com/p/{}", s.host, s.path)
    };
    let mut r = Request::get(url).priority(s.priority);
    r.depth = s.depth;
    r.start = s.start;
    r.dont_filter = s.dont_filter;
    r.dont_throttle = s.dont_throttle;
    if s.delayed {
        r.delay = Some(5.0);
    }
    r
}

fn frontier() -> F {
    let mut s = Settings::default().without_jitter();
    s.concurrent_requests = 100_000;
    s.concurrent_requests_per_domain = 0;
    let config = FrontierConfig::default().depth_priority(1).depth_limit(2);
    Frontier::open(s, config, VolatileStore::new(), Timestamp::ZERO).unwrap()
}

/// Everything ready at `now`, completed as it comes: (url, priority) in order.
fn drain(f: &mut F, now: Timestamp) -> Vec<(String, i32)> {
    let mut out = vec![];
    while let Poll::Ready(lease) = f.poll(now).unwrap() {
        out.push((lease.request.url.to_string(), lease.request.priority));
        f.complete(lease.id(), &Outcome::status(200), now).unwrap();
    }
    out
}

/// The outcomes of pushing in order, and the index of the first error.
fn one_by_one(f: &mut F, reqs: &[Request]) -> (Vec<PushOutcome>, Option<usize>) {
    let mut out = vec![];
    for (i, r) in reqs.iter().enumerate() {
        match f.push(r, Timestamp::ZERO) {
            Ok(o) => out.push(o),
            Err(_) => return (out, Some(i)),
        }
    }
    (out, None)
}

/// The same through `push_all` in batches of the given sizes (cycled).
fn batched(f: &mut F, reqs: &[Request], sizes: &[usize]) -> (Vec<PushOutcome>, Option<usize>) {
    let mut out = vec![];
    let mut at = 0;
    for &size in sizes.iter().cycle() {
        if at >= reqs.len() {
            break;
        }
        let end = (at + size).min(reqs.len());
        match f.push_all(&reqs[at..end], Timestamp::ZERO) {
            Ok(o) => out.extend(o),
            Err(_) => {
                // push_all stops at the first error with the ones before it handled: which
                // one failed shows in how many were handled (queued, filtered or too deep).
                let stats = f.stats();
                let handled = (stats.enqueued + stats.filtered + stats.depth_ignored) as usize;
                return (out, Some(handled));
            }
        }
        at = end;
    }
    (out, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn push_all_is_push_one_after_the_other(
        specs in prop::collection::vec(spec(), 0..120),
        sizes in prop::collection::vec(1usize..50, 1..6),
    ) {
        let reqs: Vec<Request> = specs.iter().map(request).collect();
        let (mut a, mut b) = (frontier(), frontier());
        let (out_a, err_a) = one_by_one(&mut a, &reqs);
        let (out_b, err_b) = batched(&mut b, &reqs, &sizes);
        prop_assert_eq!(err_a, err_b);
        // A failed batch returns no outcomes: those of the batches before it must match.
        prop_assert!(out_b.len() <= out_a.len());
        prop_assert_eq!(&out_a[..out_b.len()], &out_b[..]);
        if err_b.is_none() {
            prop_assert_eq!(out_a.len(), out_b.len());
        }
        prop_assert_eq!(a.stats(), b.stats());
        prop_assert_eq!(drain(&mut a, Timestamp::ZERO), drain(&mut b, Timestamp::ZERO));
        let later = Timestamp::from_secs_f64(10.0);
        prop_assert_eq!(drain(&mut a, later), drain(&mut b, later));
        prop_assert_eq!(a.stats(), b.stats());
    }
}

#[test]
fn push_all_stops_at_the_first_error_with_the_earlier_requests_queued() {
    let mut f = frontier();
    let reqs: Vec<Request> = (0..40)
        .map(|i| {
            if i == 25 {
                Request::get("no host here")
            } else {
                Request::get(format!("https://h{}.example.com/{i}", i % 7))
            }
        })
        .collect();
    assert!(f.push_all(&reqs, Timestamp::ZERO).is_err());
    assert_eq!(f.stats().enqueued, 25);
    assert_eq!(drain(&mut f, Timestamp::ZERO).len(), 25);
    // The rest goes in once the bad one is left out.
    let outcomes = f.push_all(&reqs[26..], Timestamp::ZERO).unwrap();
    assert!(outcomes.iter().all(|o| matches!(o, PushOutcome::Queued(_))));
    assert_eq!(drain(&mut f, Timestamp::ZERO).len(), 14);
}
