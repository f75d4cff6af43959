//! A behaviour suite any [`Scheduling`] implementation runs: the in-process
//! `Frontier`, one `RedisFrontier`, and any other frontier with a [`Maker`].
//!
//! Unlike the step-by-step differential in `main.rs`, nothing here compares two
//! implementations: each check drives one frontier on a fake clock (seeded, deterministic)
//! and holds every answer against a model of what the contract (docs/behaviour.md) allows.
//! An implementation may order requests across hosts as it likes (a sharded frontier
//! does); what it hands out, and when, must still keep every rule:
//!
//! 1. [`exactly_once`]: random pushes over 30 hosts with duplicate URLs (pushed one by one
//!    and in `push_all` batches), `dont_filter` and `dont_track` requests; random
//!    completions (some of them backoff triggers), retries and hand-backs; drained to
//!    `Empty`. Every accepted push is completed exactly once, a retried or handed-back
//!    lease is delivered again, no URL is out more often than it was accepted, duplicates
//!    come back `Duplicate`, and nothing is delivered after `Empty` with nothing in flight.
//! 2. [`spacing_and_concurrency`]: per-host delays and concurrency limits (from
//!    `download_delay`, `concurrent_requests_per_domain` and `ScopeConfig`s) and the global
//!    `concurrent_requests`, no jitter, no trigger: the model is exact, so every send keeps
//!    the host's delay after its previous send and its limit, every `NotUntil(t)` is no
//!    later than the moment the model lets something go, `Blocked` only when every host
//!    with work is full (or the global cap is reached), and `poll_timeout` is no later
//!    than a `NotUntil`.
//! 3. [`backoff_with_headers`]: 429 / 503 with `Retry-After` (some above
//!    `backoff_max_delay`, so capped), a `Retry-After` on a 200 (ignored), spent budgets
//!    (`X-RateLimit-Remaining: 0`, held on any status), plain triggers: no host sends
//!    before its header delay (or a plain step's `backoff_min_delay`) has elapsed, counted
//!    from the completion. Hosts only ever hit by header delays (their delay at least
//!    `backoff_min_delay`) stay exactly modelled; a plain step makes a host's model a
//!    lower bound.
//! 4. [`priority_and_order`]: within one host, the request delivered is always the best
//!    queued one: higher priority, then ordinary before start requests, then LIFO (the
//!    default `QueueOrder`) or FIFO among ordinary ones, FIFO among start ones; retries
//!    re-queue with the adjusted priority under a new sequence number.
//! 5. [`scope_limit_and_eviction`]: `throttling_scope_limit = 20`,
//!    `throttling_scope_max_idle = 2 s`, 320 hosts with a 5 s delay, a third of the
//!    answers 429 + `Retry-After`, the clock jumping past `max_idle`: evicting (or
//!    hibernating) scope states never makes a host forget a backoff or a last send that
//!    still matters, and every request is delivered once.
//! 6. [`delay_scope_and_crawl_delay`]: `delay_scope(host, secs)` (uncapped, also on hosts
//!    with nothing queued or never seen) holds the host until then; `handle_crawl_delay`
//!    answers `Applied` with the capped delay and concurrency 1 (the host is then spaced
//!    and limited accordingly), `KeptConfig` for a host configured more aggressively.
//!
//! Checks 1, 2, 3, 5 and 6 share one model ([`Harness`]): per host its delay, concurrency,
//! last send, requests in flight and queued, and the instant before which nothing may go
//! (header delays, budgets, `delay_scope`, plain steps). Every poll answer is checked
//! against it ([`Harness::ready`], [`Harness::waiting`]): a lease only when the model
//! lets its host send (and within the global cap, and never for a URL with no accepted
//! copy left); `NotUntil(t)` in the future and never later than the first moment the
//! model lets an exactly modelled host send (an earlier `t`, a spurious wake-up, is
//! allowed; a later one is a missed wake-up), with `poll_timeout()` at or before `t`;
//! `Blocked` only when every host with work is full or the global cap is reached;
//! `Empty` only with nothing queued. `in_flight()` must equal the leases out after every
//! poll that handed some out. Leases are handed out by `poll` and `poll_batch`, ended by
//! `complete`, `complete_batch` (some items dated at their response time, before `now`),
//! `retry` and `hand_back`; ending a lease twice must answer `false`.
//!
//! Each check runs in its own fresh frontier; a failing check does not stop the others:
//! [`run_suite`] runs them all and then fails naming each check that failed and why.
//!
//! # Adding an implementation
//!
//! Write a [`Maker`] whose `make` opens a fresh, empty frontier (a new crawl, a new
//! database) on the settings and frontier options given, then a `#[test]` calling
//! [`run_suite`] with it. The frontier must take its time from the `now` of each call
//! (`TimeSource::Caller` for Redis); the suite's clock starts at 1000 s and never goes
//! back, so a frontier opened at any earlier instant is fine. Leases must not expire
//! during a timeline (a check can span hours of fake time): give them a long timeout.
//! The checks use nothing but the trait's methods.
//!
//! Run time (2 shared cores, optimized test profile): about 0.1 s in-process and 5 to
//! 10 s on one Redis (depending on the machine's load), most of it round trips.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use polite_frontier_core::{
    Frontier, FrontierConfig, Lease, Poll, PushOutcome, QueueOrder, Request, RequestId, Scheduling,
    VolatileStore,
};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{
    Placement, RedisConfig, RedisFrontier, ShardConfig, ShardedRedisFrontier,
};
use polite_throttle_core::{CrawlDelayDecision, Outcome, ScopeConfig, Settings, Timestamp};

// How a request ended: the differential's own `Out` (here `Out` is a lease out).
use super::Out as Reply;
use super::random::Rng;
use super::{crawl_name, server};

/// Builds a fresh, empty frontier for one timeline. Its clock is the `now` of each call
/// (a fake clock: `TimeSource::Caller` for Redis).
pub(crate) trait Maker {
    /// The frontier it builds.
    type F: Scheduling;
    /// A new frontier, sharing nothing with those built before.
    fn make(&mut self, settings: Settings, config: FrontierConfig) -> Self::F;
    /// Which share of the global `concurrent_requests` cap each host's requests count
    /// against: one for the whole frontier (the default), or one per partition for a
    /// sharded frontier, whose partitions each enforce the cap on their own.
    fn cap_groups(&self) -> CapGroups {
        Box::new(|_| 0)
    }
}

/// A host's share of the global cap (see [`Maker::cap_groups`]).
pub(crate) type CapGroups = Box<dyn Fn(&str) -> usize>;

/// Runs every check on frontiers built by `maker`; panics naming each check that failed.
pub(crate) fn run_suite<M: Maker>(label: &str, maker: &mut M) {
    type Check<M> = fn(&str, &mut M);
    let checks: [(&str, Check<M>); 6] = [
        ("exactly_once", exactly_once::<M>),
        ("spacing_and_concurrency", spacing_and_concurrency::<M>),
        ("backoff_with_headers", backoff_with_headers::<M>),
        ("priority_and_order", priority_and_order::<M>),
        ("scope_limit_and_eviction", scope_limit_and_eviction::<M>),
        (
            "delay_scope_and_crawl_delay",
            delay_scope_and_crawl_delay::<M>,
        ),
    ];
    let start = Instant::now();
    let mut failed = Vec::new();
    for (name, check) in checks {
        let t = Instant::now();
        let what = format!("{label}/{name}");
        match catch_unwind(AssertUnwindSafe(|| check(&what, maker))) {
            Ok(()) => eprintln!("{what}: ok in {:.2?}", t.elapsed()),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                eprintln!("{what}: FAILED in {:.2?}", t.elapsed());
                failed.push(format!("{name}: {msg}"));
            }
        }
    }
    eprintln!("{label}: suite ran in {:.2?}", start.elapsed());
    assert!(
        failed.is_empty(),
        "{label}: {} check(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// The implementations run here.

/// The in-process frontier on the volatile in-memory store.
pub(crate) struct InProcess;

impl Maker for InProcess {
    type F = Frontier<VolatileStore>;
    fn make(&mut self, settings: Settings, config: FrontierConfig) -> Self::F {
        Frontier::open(settings, config, VolatileStore::new(), Timestamp::ZERO).unwrap()
    }
}

/// One `RedisFrontier` per timeline (a new crawl name) on the shared throwaway server.
pub(crate) struct OneRedis {
    url: String,
}

impl Maker for OneRedis {
    type F = RedisFrontier;
    fn make(&mut self, settings: Settings, config: FrontierConfig) -> Self::F {
        let config = RedisConfig::default()
            .lease_timeout(Duration::from_secs(86_400 * 30))
            .frontier(config);
        RedisFrontier::open(&self.url, &crawl_name(), settings, config).unwrap()
    }
}

/// A `ShardedRedisFrontier` over 3 partitions on two servers per timeline.
pub(crate) struct ShardedRedis {
    placement: Placement,
    shard: ShardConfig,
}

impl Maker for ShardedRedis {
    type F = ShardedRedisFrontier;
    fn make(&mut self, settings: Settings, config: FrontierConfig) -> Self::F {
        let config = RedisConfig::default()
            .lease_timeout(Duration::from_secs(86_400 * 30))
            .frontier(config);
        ShardedRedisFrontier::open(
            &self.placement,
            &crawl_name(),
            self.shard.clone(),
            settings,
            config,
        )
        .unwrap()
    }
    fn cap_groups(&self) -> CapGroups {
        let shard = self.shard.clone();
        Box::new(move |host| shard.partition_of(host) as usize)
    }
}

#[test]
fn suite_in_process() {
    run_suite("in-process", &mut InProcess);
}

#[test]
fn suite_one_redis() {
    let Some(server) = server() else { return };
    run_suite("one-redis", &mut OneRedis { url: server.url() });
}

#[test]
fn suite_sharded_redis() {
    let Some(server) = server() else { return };
    let Some(second) = RedisServer::start_or_skip("conformance suite, second server") else {
        return;
    };
    let placement = Placement::Servers(vec![server.url(), second.url()]);
    run_suite(
        "sharded-redis",
        &mut ShardedRedis {
            placement,
            shard: ShardConfig::new(3),
        },
    );
}

// ---------------------------------------------------------------------------------------
// Helpers.

/// Where every timeline starts.
const START: Timestamp = Timestamp::from_secs(1000);

fn host_name(i: usize) -> String {
    format!("h{i:03}.example")
}

/// The scope of a request without explicit scopes: the host of its URL.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d)
}

/// What happens to a lease once its response is due.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Complete(Reply),
    Retry(Reply, i32),
    HandBack,
}

/// The model of one host (one scope: every request here has only its URL's host).
#[derive(Debug)]
struct Host {
    /// Base delay between sends (the spacing while the host is not backing off).
    delay: Duration,
    /// Concurrency limit, 0 = unlimited.
    conc: u32,
    last_send: Option<Timestamp>,
    /// Nothing may be sent before this (header delays, budgets, delay_scope, plain
    /// steps).
    hold: Timestamp,
    active: u32,
    queued: u32,
    /// Whether `max(last_send + delay, hold)` is exactly when the host may send next
    /// (else it is only a lower bound: a plain backoff step grew the delay).
    exact: bool,
    /// A Crawl-delay was answered `KeptConfig` already (the warning is given once).
    warned: bool,
}

impl Host {
    fn next_send(&self) -> Timestamp {
        let spaced = self.last_send.map_or(Timestamp::ZERO, |l| l + self.delay);
        spaced.max(self.hold)
    }
    fn has_slot(&self) -> bool {
        self.conc == 0 || self.active < self.conc
    }
}

/// A lease out, as the harness saw it handed out.
#[derive(Clone, Debug)]
struct Out {
    id: RequestId,
    request: Request,
    host: String,
}

/// A frontier under test, the model of what it may do, and the bookkeeping of every
/// request accepted, delivered and completed.
struct Harness<F: Scheduling> {
    what: String,
    f: F,
    settings: Settings,
    now: Timestamp,
    step: u64,
    hosts: HashMap<String, Host>,
    queued: u64,
    out: Vec<Out>,
    /// URLs pushed without `dont_filter` and accepted.
    seen: HashSet<String>,
    /// Ids handed back by accepted pushes.
    ids: HashSet<RequestId>,
    /// Accepted pushes per URL (a `dont_filter` push of a URL is one more copy).
    copies: HashMap<String, u32>,
    completed: HashMap<String, u32>,
    delivered: u64,
    /// Pushes answered `Duplicate`.
    duplicates: u64,
    /// Hosts of the leases that ended, in order (for checks that push after them).
    finished_hosts: Vec<String>,
    answers: [u64; 4],
    /// Each host's share of the global cap ([`Maker::cap_groups`]).
    cap_group: CapGroups,
}

impl<F: Scheduling> Harness<F> {
    fn new<M: Maker<F = F>>(
        what: &str,
        maker: &mut M,
        settings: Settings,
        config: FrontierConfig,
    ) -> Self {
        let f = maker.make(settings.clone(), config);
        let cap_group = maker.cap_groups();
        Harness {
            cap_group,
            what: what.to_string(),
            f,
            settings,
            now: START,
            step: 0,
            hosts: HashMap::new(),
            queued: 0,
            out: Vec::new(),
            seen: HashSet::new(),
            ids: HashSet::new(),
            copies: HashMap::new(),
            completed: HashMap::new(),
            delivered: 0,
            duplicates: 0,
            finished_hosts: Vec::new(),
            answers: [0; 4],
        }
    }

    fn at(&self) -> String {
        format!(
            "{} step {} at {:.3} s",
            self.what,
            self.step,
            self.now.as_secs_f64()
        )
    }

    /// The model of `host`, created with its configured delay and concurrency.
    fn host(&mut self, host: &str) -> &mut Host {
        let s = &self.settings;
        self.hosts.entry(host.to_string()).or_insert_with(|| {
            let cfg = s.scopes.get(host);
            Host {
                delay: secs(cfg.and_then(|c| c.delay).unwrap_or(s.download_delay)),
                conc: cfg
                    .and_then(|c| c.concurrency)
                    .unwrap_or(s.concurrent_requests_per_domain),
                last_send: None,
                hold: Timestamp::ZERO,
                active: 0,
                queued: 0,
                exact: true,
                warned: false,
            }
        })
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    fn advance_to(&mut self, t: Timestamp) {
        self.now = self.now.max(t);
    }

    // --- pushes ---------------------------------------------------------------------

    fn push(&mut self, r: Request) -> PushOutcome {
        self.step += 1;
        let got = self.f.push(&r, self.now).unwrap();
        self.pushed(&r, got);
        got
    }

    fn push_all(&mut self, rs: &[Request]) -> Vec<PushOutcome> {
        self.step += 1;
        let got = self.f.push_all(rs, self.now).unwrap();
        assert_eq!(got.len(), rs.len(), "{}: push_all answers", self.at());
        for (r, g) in rs.iter().zip(&got) {
            self.pushed(r, *g);
        }
        got
    }

    fn pushed(&mut self, r: &Request, got: PushOutcome) {
        let url = r.url.to_string();
        let dup = !r.dont_filter && self.seen.contains(&url);
        match got {
            PushOutcome::Queued(id) => {
                assert!(!dup, "{}: a duplicate of {url} was queued", self.at());
                assert!(self.ids.insert(id), "{}: push id {id:?} reused", self.at());
                if !r.dont_filter {
                    self.seen.insert(url.clone());
                }
                *self.copies.entry(url).or_default() += 1;
                self.host(host_of(&r.url)).queued += 1;
                self.queued += 1;
            }
            PushOutcome::Duplicate => {
                assert!(dup, "{}: {url} reported a duplicate, never seen", self.at());
                self.duplicates += 1;
            }
            other => panic!("{}: {url}: {other:?}", self.at()),
        }
    }

    // --- polls ----------------------------------------------------------------------

    /// One poll, checked; the lease it handed out, if any.
    fn poll(&mut self) -> (Option<Out>, Poll) {
        self.step += 1;
        let p = self.f.poll(self.now).unwrap();
        match p {
            Poll::Ready(lease) => {
                let out = self.ready(lease);
                self.check_in_flight();
                (Some(out), Poll::Blocked)
            }
            p => {
                self.waiting(&p);
                (None, p)
            }
        }
    }

    /// A `poll_batch` of up to `max`, checked as that many polls one after the other.
    /// The answer after is `None` when the batch came full (nothing to check).
    fn poll_batch(&mut self, max: usize) -> (Vec<Out>, Option<Poll>) {
        self.step += 1;
        let b = self.f.poll_batch(self.now, max).unwrap();
        assert!(
            b.leases.len() <= max.max(1),
            "{}: {} leases for a batch of {max}",
            self.at(),
            b.leases.len()
        );
        let full = b.leases.len() == max.max(1);
        let mut outs = Vec::new();
        for l in b.leases {
            let lease = l.unwrap_or_else(|e| panic!("{}: a lease in a batch: {e:?}", self.at()));
            outs.push(self.ready(lease));
        }
        if !outs.is_empty() {
            self.check_in_flight();
        }
        if full {
            return (outs, None);
        }
        self.waiting(&b.then);
        (outs, Some(b.then))
    }

    fn check_in_flight(&self) {
        assert_eq!(
            self.f.in_flight(),
            self.out.len(),
            "{}: in_flight after a poll",
            self.at()
        );
    }

    /// A lease handed out at `now`: it must be one the model lets go.
    fn ready(&mut self, lease: Lease) -> Out {
        let at = self.at();
        let now = self.now;
        let url = lease.request.url.to_string();
        let host = host_of(&url).to_string();
        assert!(
            !self.group_full(&host),
            "{at}: {url} sent with {} in flight (in its share of the cap), concurrent_requests {}",
            self.in_group(&host),
            self.settings.concurrent_requests
        );
        assert!(
            !self.out.iter().any(|o| o.id == lease.id()),
            "{at}: lease {:?} handed out twice",
            lease.id()
        );
        let open = self.out.iter().filter(|o| *o.request.url == *url).count() as u32;
        let left = self.copies.get(&url).copied().unwrap_or(0)
            - self.completed.get(&url).copied().unwrap_or(0);
        assert!(
            open < left,
            "{at}: {url} delivered with {open} lease(s) already out and {left} accepted push(es) not completed"
        );
        let Some(h) = self.hosts.get_mut(&host) else {
            panic!("{at}: {url} handed out, nothing was pushed to {host}");
        };
        assert!(
            h.queued > 0,
            "{at}: {url} handed out, nothing queued for {host}"
        );
        assert!(
            h.has_slot(),
            "{at}: {url} sent with {} of {host} in flight, limit {}",
            h.active,
            h.conc
        );
        if let Some(last) = h.last_send {
            assert!(
                now >= last + h.delay,
                "{at}: {url} sent {:.3} s after {host}'s previous send, its delay is {:?}",
                now.saturating_duration_since(last).as_secs_f64(),
                h.delay
            );
        }
        assert!(
            now >= h.hold,
            "{at}: {url} sent {:.3} s before {host}'s hold (backoff, header delay or delay_scope) ends",
            h.hold.saturating_duration_since(now).as_secs_f64()
        );
        h.last_send = Some(now);
        h.active += 1;
        h.queued -= 1;
        self.queued -= 1;
        self.delivered += 1;
        self.answers[0] += 1;
        let out = Out {
            id: lease.id(),
            request: lease.request,
            host,
        };
        self.out.push(out.clone());
        out
    }

    fn group_of(&self, host: &str) -> usize {
        (self.cap_group)(host)
    }

    /// Leases out in `host`'s share of the global cap.
    fn in_group(&self, host: &str) -> usize {
        let g = self.group_of(host);
        self.out
            .iter()
            .filter(|o| self.group_of(&o.host) == g)
            .count()
    }

    /// Whether `host`'s share of the global cap is full.
    fn group_full(&self, host: &str) -> bool {
        self.in_group(host) >= self.settings.concurrent_requests as usize
    }

    /// A poll that handed nothing out: the answer must fit the model.
    fn waiting(&mut self, p: &Poll) {
        let at = self.at();
        // When the model says the first exactly modelled host may send (hosts whose
        // share of the global cap is full cannot).
        let earliest = self
            .hosts
            .iter()
            .filter(|(n, h)| h.queued > 0 && h.has_slot() && h.exact && !self.group_full(n))
            .map(|(_, h)| h.next_send())
            .min();
        let any_free = self
            .hosts
            .iter()
            .any(|(n, h)| h.queued > 0 && h.has_slot() && !self.group_full(n));
        match p {
            Poll::Ready(_) => unreachable!(),
            Poll::NotUntil(t) => {
                self.answers[1] += 1;
                assert!(*t > self.now, "{at}: NotUntil({t:?}) is not in the future");
                assert!(self.queued > 0, "{at}: NotUntil({t:?}) with nothing queued");
                if let Some(e) = earliest {
                    assert!(
                        *t <= e.max(self.now),
                        "{at}: NotUntil({:.3}) but the model lets a request go at {:.3}{}",
                        t.as_secs_f64(),
                        e.as_secs_f64(),
                        self.may_go(e)
                    );
                }
                let pt = self.f.poll_timeout();
                assert!(
                    pt.is_some_and(|pt| pt <= *t),
                    "{at}: poll_timeout {pt:?} after NotUntil({t:?})"
                );
            }
            Poll::Blocked => {
                self.answers[2] += 1;
                assert!(self.queued > 0, "{at}: Blocked with nothing queued");
                assert!(
                    !any_free,
                    "{at}: Blocked, yet a host with requests queued has a free slot{}",
                    self.may_go(earliest.unwrap_or(Timestamp::MAX))
                );
            }
            Poll::Empty => {
                self.answers[3] += 1;
                assert_eq!(self.queued, 0, "{at}: Empty with requests queued");
            }
        }
    }

    /// Which hosts the model lets send at `t` (for messages).
    fn may_go(&self, t: Timestamp) -> String {
        let mut v: Vec<String> = self
            .hosts
            .iter()
            .filter(|(n, h)| {
                h.queued > 0 && h.has_slot() && h.next_send() <= t && !self.group_full(n)
            })
            .map(|(n, h)| format!("{n} {h:?}"))
            .collect();
        v.sort();
        v.truncate(3);
        format!(" (e.g. {})", v.join("; "))
    }

    // --- endings --------------------------------------------------------------------

    fn take(&mut self, id: RequestId) -> Out {
        let i = self
            .out
            .iter()
            .position(|o| o.id == id)
            .unwrap_or_else(|| panic!("{}: lease {id:?} is not out", self.at()));
        self.out.remove(i)
    }

    /// Frees the lease's slot and applies what its outcome does to the host's model.
    fn ended(&mut self, o: &Out, reply: Reply, at: Timestamp) {
        let s = &self.settings;
        let (min_delay, max_delay) = (secs(s.backoff_min_delay), secs(s.backoff_max_delay));
        let trigger = !o.request.dont_track
            && match reply {
                Reply::Ok | Reply::Cancelled => false,
                Reply::Status(c) | Reply::RetryAfter(c, _) | Reply::Spent(c, _) => {
                    s.backoff_http_codes.contains(&c)
                }
                Reply::Error(k) => s.backoff_exceptions.iter().any(|e| e == k),
            };
        let header = match reply {
            Reply::RetryAfter(_, n) | Reply::Spent(_, n) if n > 0 => {
                Some(Duration::from_secs(n.into()))
            }
            _ => None,
        };
        let budget = match reply {
            Reply::Spent(_, n) if n > 0 && !o.request.dont_track => {
                Some(Duration::from_secs(n.into()))
            }
            _ => None,
        };
        let late = at < self.now;
        let h = self.hosts.get_mut(&o.host).unwrap();
        h.active -= 1;
        if trigger {
            match header {
                // A hard minimum; the spacing becomes max(delay, min_delay).
                Some(d) => {
                    h.hold = h.hold.max(at + d.min(max_delay));
                    if h.delay < min_delay {
                        h.exact = false;
                    }
                }
                // A plain step: held at least min_delay, spacing grown (a lower bound).
                None => {
                    h.hold = h.hold.max(at + min_delay);
                    h.exact = false;
                }
            }
            // Counted from a time the frontier may already have passed.
            if late {
                h.exact = false;
            }
        }
        if let Some(b) = budget {
            h.hold = h.hold.max(at + b.min(max_delay));
            if late {
                h.exact = false;
            }
        }
        self.finished_hosts.push(o.host.clone());
    }

    fn complete(&mut self, id: RequestId, reply: Reply) {
        self.complete_at(id, reply, self.now);
    }

    fn complete_at(&mut self, id: RequestId, reply: Reply, at: Timestamp) {
        self.step += 1;
        let o = self.take(id);
        let done = self.f.complete(id, &reply.outcome(), at).unwrap();
        assert!(
            done,
            "{}: completing lease {id:?} ({}) said false",
            self.at(),
            o.request.url
        );
        self.ended(&o, reply, at);
        self.count_completion(&o);
    }

    /// Completes several leases in one `complete_batch`, each at its own time.
    fn complete_batch(&mut self, done: &[(RequestId, Reply, Timestamp)]) {
        self.step += 1;
        let items: Vec<(RequestId, Outcome<'static>, Timestamp)> = done
            .iter()
            .map(|(id, r, t)| (*id, r.outcome(), *t))
            .collect();
        let got = self.f.complete_batch(&items).unwrap();
        assert_eq!(got, vec![true; done.len()], "{}: complete_batch", self.at());
        for (id, r, t) in done {
            let o = self.take(*id);
            self.ended(&o, *r, *t);
            self.count_completion(&o);
        }
    }

    fn count_completion(&mut self, o: &Out) {
        let url = o.request.url.to_string();
        let c = self.completed.entry(url.clone()).or_default();
        *c += 1;
        let c = *c;
        let copies = self.copies.get(&url).copied().unwrap_or(0);
        assert!(
            c <= copies,
            "{}: {url} completed {c} times, accepted {copies} times",
            self.at()
        );
    }

    fn retry(&mut self, id: RequestId, reply: Reply, adjust: i32) {
        self.step += 1;
        let o = self.take(id);
        let done = self
            .f
            .retry(id, &reply.outcome(), adjust, self.now)
            .unwrap();
        assert!(done, "{}: retrying lease {id:?} said false", self.at());
        self.ended(&o, reply, self.now);
        self.host(&o.host).queued += 1;
        self.queued += 1;
    }

    fn hand_back(&mut self, id: RequestId) {
        self.step += 1;
        let o = self.take(id);
        let done = self.f.hand_back(id, self.now).unwrap();
        assert!(done, "{}: handing back lease {id:?} said false", self.at());
        // Its send stays recorded: only the slot is freed.
        let h = self.host(&o.host);
        h.active -= 1;
        h.queued += 1;
        self.queued += 1;
        self.finished_hosts.push(o.host);
    }

    /// Ending a lease a second time does nothing and says so.
    fn end_again(&mut self, id: RequestId, rng: &mut Rng) {
        let ok = Outcome::status(200);
        let again = match rng.below(3) {
            0 => self.f.complete(id, &ok, self.now),
            1 => self.f.retry(id, &ok, 0, self.now),
            _ => self.f.hand_back(id, self.now),
        }
        .unwrap();
        assert!(!again, "{}: lease {id:?} ended twice", self.at());
    }

    fn apply(&mut self, id: RequestId, fate: Fate) {
        match fate {
            Fate::Complete(r) => self.complete(id, r),
            Fate::Retry(r, adj) => self.retry(id, r, adj),
            Fate::HandBack => self.hand_back(id),
        }
    }

    // --- controls -------------------------------------------------------------------

    fn delay_scope(&mut self, host: &str, s: f64) {
        self.step += 1;
        self.f.delay_scope(host, s, self.now).unwrap();
        let now = self.now;
        let min_delay = secs(self.settings.backoff_min_delay);
        let h = self.host(host);
        // Like a header delay, not capped by max_delay.
        h.hold = h.hold.max(now + secs(s));
        if h.delay < min_delay {
            h.exact = false;
        }
    }

    fn crawl_delay(&mut self, host: &str, s: f64) -> CrawlDelayDecision {
        self.step += 1;
        let got = self.f.handle_crawl_delay(host, s, self.now).unwrap();
        let st = &self.settings;
        let capped = s.min(st.throttling_robotstxt_max_delay);
        let cfg = st.scopes.get(host).cloned();
        let obey = st.throttling_robotstxt_obey;
        let at = self.at();
        let h = self.host(host);
        let kept = cfg.as_ref().is_some_and(|c| {
            !c.ignore_robots_txt
                && (c.delay.is_some_and(|d| d < capped)
                    || c.concurrency.is_some_and(|n| n == 0 || n > 1))
        });
        match got {
            _ if !obey || s == 0.0 => {
                assert_eq!(
                    got,
                    CrawlDelayDecision::Ignored,
                    "{at}: Crawl-delay on {host}"
                )
            }
            _ if kept => {
                assert_eq!(
                    got,
                    CrawlDelayDecision::KeptConfig { warned: !h.warned },
                    "{at}: Crawl-delay {s} on {host}, configured more aggressively"
                );
                h.warned = true;
            }
            CrawlDelayDecision::Applied { delay, concurrency } => {
                let want = h.delay.as_secs_f64().max(capped);
                assert_eq!(
                    (delay, concurrency),
                    (want, 1),
                    "{at}: Crawl-delay {s} on {host}"
                );
                h.delay = secs(delay);
                h.conc = concurrency;
            }
            other => panic!("{at}: Crawl-delay {s} on {host}: {other:?}, expected Applied"),
        }
        got
    }

    // --- the end --------------------------------------------------------------------

    /// Nothing is queued or out: the frontier says `Empty` now and later, and every
    /// accepted push was completed exactly once.
    fn finish(&mut self) {
        assert!(self.out.is_empty(), "{}: leases still out", self.at());
        assert_eq!(self.queued, 0, "{}: requests still queued", self.at());
        for later in [0, 1, 3600] {
            self.advance(Duration::from_secs(later));
            let (l, p) = self.poll();
            assert!(
                l.is_none() && p == Poll::Empty,
                "{}: after draining: {l:?} {p:?}",
                self.at()
            );
            assert_eq!(
                self.f.in_flight(),
                0,
                "{}: in_flight after draining",
                self.at()
            );
        }
        for (url, n) in &self.copies {
            let c = self.completed.get(url).copied().unwrap_or(0);
            assert_eq!(
                c, *n,
                "{}: {url} accepted {n} times, completed {c}",
                self.what
            );
        }
    }

    fn summary(&self) -> String {
        format!(
            "{} accepted, {} deliveries, {} polls ready/until/blocked/empty {:?}, {:.0} s of fake time",
            self.copies.values().sum::<u32>(),
            self.delivered,
            self.answers.iter().sum::<u64>(),
            self.answers,
            self.now.saturating_duration_since(START).as_secs_f64()
        )
    }
}

/// A lease waiting for its response.
struct Pending {
    due: Timestamp,
    id: RequestId,
    fate: Fate,
}

/// Drives `h` like a crawler with response latencies: each iteration calls `tick` (pushes,
/// controls; it answers whether more pushes are coming), ends the leases whose responses
/// are due (alone or in a `complete_batch`), polls (one by one or in batches) and gives
/// each lease a latency and a fate with `decide`; when nothing is ready it moves the clock
/// to the next response or the `NotUntil` (sometimes only half way, to look early). Ends
/// drained (see [`Harness::finish`]).
fn drive<F: Scheduling>(
    h: &mut Harness<F>,
    rng: &mut Rng,
    max_iterations: u64,
    mut tick: impl FnMut(&mut Harness<F>, &mut Rng, u64) -> bool,
    mut decide: impl FnMut(&mut Rng, &Out) -> (Duration, Fate),
) {
    let mut pending: Vec<Pending> = Vec::new();
    let mut ended: Vec<RequestId> = Vec::new();
    for i in 0..max_iterations {
        let producing = tick(h, rng, i);
        // Responses due now.
        let (due, rest): (Vec<Pending>, Vec<Pending>) =
            pending.into_iter().partition(|p| p.due <= h.now);
        pending = rest;
        let all_complete = due.iter().all(|p| matches!(p.fate, Fate::Complete(_)));
        if due.len() > 1 && all_complete && rng.chance(40) {
            let now = h.now;
            let items: Vec<(RequestId, Reply, Timestamp)> = due
                .iter()
                .map(|p| match p.fate {
                    // Each at its own time when it is not too far back (a trigger counted
                    // from there makes its host's model a lower bound).
                    Fate::Complete(r) => (p.id, r, if rng.chance(20) { p.due } else { now }),
                    _ => unreachable!(),
                })
                .collect();
            h.complete_batch(&items);
            ended.extend(items.iter().map(|x| x.0));
        } else {
            for p in due {
                h.apply(p.id, p.fate);
                ended.push(p.id);
            }
        }
        if ended.len() > 4 && rng.chance(10) {
            let id = ended[rng.below(ended.len() as u64) as usize];
            h.end_again(id, rng);
        }
        // Everything ready now.
        let (leases, then) = if rng.chance(30) {
            let max = 1 + rng.below(4) as usize;
            h.poll_batch(max)
        } else {
            let (l, p) = h.poll();
            (l.into_iter().collect(), Some(p))
        };
        let got = !leases.is_empty();
        for o in leases {
            let (latency, fate) = decide(rng, &o);
            pending.push(Pending {
                due: h.now + latency,
                id: o.id,
                fate,
            });
        }
        if got || then.is_none() {
            continue;
        }
        let next_due = pending.iter().map(|p| p.due).min();
        let wake = match then {
            Some(Poll::NotUntil(t)) => Some(t),
            _ => None,
        };
        let target = match (next_due, wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match target {
            Some(t) if t > h.now && rng.chance(15) => {
                let half = t.saturating_duration_since(h.now) / 2;
                h.advance(half.max(Duration::from_millis(1)));
            }
            Some(t) => h.advance_to(t),
            None if producing => h.advance(rng.millis(1, 1500)),
            None => {
                assert_eq!(then, Some(Poll::Empty), "{}: stuck", h.at());
                h.finish();
                return;
            }
        }
    }
    panic!(
        "{}: not drained after {max_iterations} iterations ({} queued, {} out)",
        h.at(),
        h.queued,
        h.out.len()
    );
}

// ---------------------------------------------------------------------------------------
// The checks.

/// 1. Every accepted push is delivered until it is completed, exactly once.
fn exactly_once<M: Maker>(what: &str, maker: &mut M) {
    for seed in [1, 2, 12] {
        let mut s = Settings::default().without_jitter();
        s.concurrent_requests = 8;
        s.concurrent_requests_per_domain = 2;
        s.backoff_min_delay = 0.5;
        s.backoff_window = 20.0;
        let s = s.with_scope(host_name(0), ScopeConfig::new().delay(0.5).concurrency(1));
        let mut h = Harness::new(
            &format!("{what}#{seed}"),
            maker,
            s,
            FrontierConfig::default(),
        );
        let mut rng = Rng::new(seed);
        let mut pushes = 0;
        let mut pushed: Vec<String> = Vec::new();
        drive(
            &mut h,
            &mut rng,
            40_000,
            |h, rng, i| {
                if pushes >= 700 {
                    return false;
                }
                if i % 3 == 0 {
                    let n = 1 + rng.below(6) as usize;
                    let mut batch = Vec::new();
                    for _ in 0..n {
                        let url = if !pushed.is_empty() && rng.chance(25) {
                            // The same URL again.
                            pushed[rng.below(pushed.len() as u64) as usize].clone()
                        } else {
                            let host = host_name(rng.below(30) as usize);
                            format!("https://{host}/p/{}", rng.below(40))
                        };
                        let mut r = Request::get(url.as_str()).priority(rng.below(3) as i32 - 1);
                        if rng.chance(12) {
                            r = r.dont_filter();
                        }
                        if rng.chance(5) {
                            r = r.dont_track();
                        }
                        pushed.push(url);
                        batch.push(r);
                    }
                    pushes += n;
                    if rng.chance(50) {
                        h.push_all(&batch);
                    } else {
                        for r in batch {
                            h.push(r);
                        }
                    }
                }
                true
            },
            |rng, _| {
                let fate = match rng.below(100) {
                    0..55 => Fate::Complete(Reply::Ok),
                    55..60 => Fate::Complete(Reply::Status(503)),
                    60..63 => Fate::Complete(Reply::Error("timeout")),
                    63..65 => Fate::Complete(Reply::Error("dns")),
                    65..70 => Fate::Complete(Reply::Cancelled),
                    70..78 => Fate::Retry(Reply::Ok, rng.below(3) as i32 - 1),
                    78..85 => Fate::Retry(Reply::Status(503), -1),
                    _ => Fate::HandBack,
                };
                (rng.millis(0, 2000), fate)
            },
        );
        let accepted: u32 = h.copies.values().sum();
        assert!(
            h.duplicates > 50
                && accepted as usize > h.copies.len()
                && h.delivered > accepted.into(),
            "{what}: the timeline lacks duplicates, dont_filter copies or redeliveries"
        );
        eprintln!("{what}#{seed}: {}", h.summary());
    }
}

/// 2. Per-host delay and concurrency, and the global cap, modelled exactly.
fn spacing_and_concurrency<M: Maker>(what: &str, maker: &mut M) {
    for seed in [3, 4, 13] {
        let mut s = Settings::default().without_jitter();
        s.concurrent_requests = 6;
        s.concurrent_requests_per_domain = 2;
        s.download_delay = 0.5;
        for i in 0..3 {
            s = s.with_scope(host_name(i), ScopeConfig::new().delay(1.5).concurrency(1));
        }
        s = s
            .with_scope(host_name(3), ScopeConfig::new().delay(0.0).concurrency(3))
            .with_scope(host_name(4), ScopeConfig::new().delay(0.0).concurrency(3))
            .with_scope(host_name(5), ScopeConfig::new().delay(0.25).concurrency(0));
        let mut h = Harness::new(
            &format!("{what}#{seed}"),
            maker,
            s,
            FrontierConfig::default(),
        );
        let mut rng = Rng::new(seed);
        let mut n = 0;
        drive(
            &mut h,
            &mut rng,
            40_000,
            |h, rng, i| {
                if i >= 1500 {
                    return false;
                }
                if rng.chance(45) {
                    for _ in 0..1 + rng.below(4) {
                        n += 1;
                        let host = host_name(rng.below(12) as usize);
                        h.push(Request::get(format!("https://{host}/{n}")));
                    }
                }
                if rng.chance(5) {
                    h.advance(rng.millis(1, 700));
                }
                true
            },
            |rng, _| {
                let fate = match rng.below(100) {
                    0..70 => Fate::Complete(Reply::Ok),
                    70..75 => Fate::Complete(Reply::Cancelled),
                    75..85 => Fate::Retry(Reply::Ok, 0),
                    85..88 => Fate::Retry(Reply::Cancelled, 1),
                    _ => Fate::HandBack,
                };
                (rng.millis(0, 800), fate)
            },
        );
        eprintln!("{what}#{seed}: {}", h.summary());
    }
}

/// 3. Header delays and budgets hold a host; plain triggers at least min_delay.
fn backoff_with_headers<M: Maker>(what: &str, maker: &mut M) {
    for seed in [5, 6, 14] {
        let mut s = Settings::default().without_jitter();
        s.concurrent_requests = 8;
        s.concurrent_requests_per_domain = 2;
        s.download_delay = 1.0;
        s.backoff_min_delay = 0.5;
        s.backoff_max_delay = 60.0;
        s.backoff_window = 15.0;
        let s = s
            .with_scope(host_name(0), ScopeConfig::new().delay(2.0).concurrency(1))
            .with_scope(host_name(1), ScopeConfig::new().delay(0.5).concurrency(3));
        let mut h = Harness::new(
            &format!("{what}#{seed}"),
            maker,
            s,
            FrontierConfig::default(),
        );
        let mut rng = Rng::new(seed);
        let mut n = 0;
        drive(
            &mut h,
            &mut rng,
            40_000,
            |h, rng, i| {
                if i >= 1200 {
                    return false;
                }
                if rng.chance(40) {
                    n += 1;
                    let host = host_name(rng.below(20) as usize);
                    h.push(Request::get(format!("https://{host}/{n}")));
                }
                true
            },
            |rng, o| {
                // Plain steps (no usable header delay) only on the last five hosts: the
                // others stay exactly modelled.
                let plain = o.host.as_str() >= host_name(15).as_str();
                let fate = match rng.below(100) {
                    0..50 => Fate::Complete(Reply::Ok),
                    50..65 => Fate::Complete(Reply::RetryAfter(429, 1 + rng.below(40) as u32)),
                    // Capped at backoff_max_delay.
                    65..68 => Fate::Complete(Reply::RetryAfter(503, 1000)),
                    // Not a trigger: ignored.
                    68..73 => Fate::Complete(Reply::RetryAfter(200, 30)),
                    // A spent budget holds the host on any status.
                    73..78 => Fate::Complete(Reply::Spent(200, 1 + rng.below(20) as u32)),
                    78..88 => Fate::Retry(Reply::RetryAfter(429, 1 + rng.below(15) as u32), -1),
                    88..93 if plain => Fate::Complete(Reply::Status(429)),
                    93..96 if plain => Fate::Complete(Reply::Error("timeout")),
                    // A zero Retry-After counts as absent: a plain step.
                    _ if plain => Fate::Complete(Reply::RetryAfter(429, 0)),
                    _ => Fate::Complete(Reply::Ok),
                };
                (rng.millis(50, 2500), fate)
            },
        );
        let exact = h.hosts.values().filter(|x| x.exact).count();
        eprintln!(
            "{what}#{seed}: {}, {exact} of {} hosts exactly modelled to the end",
            h.summary(),
            h.hosts.len()
        );
    }
}

/// 4. Within one host: priority, then ordinary before start, then LIFO (the default)
///    or FIFO; start requests FIFO.
fn priority_and_order<M: Maker>(what: &str, maker: &mut M) {
    for (order, seed) in [(QueueOrder::Lifo, 7), (QueueOrder::Fifo, 8)] {
        let mut s = Settings::default().without_jitter();
        s.concurrent_requests_per_domain = 1;
        let config = FrontierConfig::default().scheduler_order(order);
        let what = format!("{what}/{order:?}");
        let mut f = maker.make(s, config);
        let mut rng = Rng::new(seed);
        let mut now = START;
        // Queued: url -> (priority, start, sequence).
        let mut queued: HashMap<String, (i32, bool, u64)> = HashMap::new();
        let mut seq = 0u64;
        let mut out: Option<(RequestId, String, (i32, bool, u64))> = None;
        let mut delivered = 0;
        let key = |&(p, start, sq): &(i32, bool, u64)| {
            // Larger is better.
            let within = match (start, order) {
                (true, _) | (false, QueueOrder::Fifo) => u64::MAX - sq,
                (false, _) => sq,
            };
            (p, !start, within)
        };
        for step in 0..3000u64 {
            let at = format!("{what} step {step}");
            match rng.below(10) {
                0..4 if seq < 600 => {
                    let n = 1 + rng.below(3);
                    let mut batch = Vec::new();
                    for _ in 0..n {
                        seq += 1;
                        let p = rng.below(4) as i32 - 1;
                        let start = rng.chance(20);
                        let url = format!("https://order.example/{seq}");
                        let mut r = Request::get(url.as_str()).priority(p);
                        if start {
                            r = r.start();
                        }
                        queued.insert(url, (p, start, seq));
                        batch.push(r);
                    }
                    let got = f.push_all(&batch, now).unwrap();
                    assert!(
                        got.iter().all(|g| matches!(g, PushOutcome::Queued(_))),
                        "{at}: {got:?}"
                    );
                }
                _ if out.is_some() => {
                    let (id, url, (p, start, _)) = out.take().unwrap();
                    if rng.chance(25) {
                        // Back under a new sequence number, its priority adjusted (a 500
                        // is no backoff trigger: nothing waits).
                        let adj = rng.below(5) as i32 - 2;
                        assert!(f.retry(id, &Outcome::status(500), adj, now).unwrap());
                        seq += 1;
                        queued.insert(url, (p + adj, start, seq));
                    } else {
                        assert!(f.complete(id, &Outcome::status(200), now).unwrap());
                    }
                }
                _ => match f.poll(now).unwrap() {
                    Poll::Ready(lease) => {
                        let url = lease.request.url.to_string();
                        let best = queued
                            .iter()
                            .max_by_key(|(_, v)| key(v))
                            .map(|(u, v)| (u.clone(), *v))
                            .unwrap_or_else(|| panic!("{at}: {url} handed out, nothing queued"));
                        let Some(got) = queued.remove(&url) else {
                            panic!("{at}: {url} handed out, not queued");
                        };
                        assert_eq!(
                            url, best.0,
                            "{at}: handed out {url} {got:?}, the best queued is {best:?} (priority, start, sequence)"
                        );
                        assert_eq!(lease.request.start, got.1, "{at}: start flag");
                        out = Some((lease.id(), url, got));
                        delivered += 1;
                    }
                    Poll::Empty => assert!(queued.is_empty(), "{at}: Empty with requests queued"),
                    Poll::Blocked => {
                        assert!(out.is_some(), "{at}: Blocked with nothing in flight")
                    }
                    Poll::NotUntil(t) => panic!("{at}: NotUntil({t:?}) with no delay"),
                },
            }
            now += Duration::from_millis(10);
        }
        assert!(
            delivered > 300,
            "{at}: only {delivered} delivered",
            at = what
        );
        eprintln!("{what}: {delivered} deliveries in order, {seq} pushes and retries");
    }
}

/// 5. A small scope limit and a short max_idle over 320 hosts, many backed off.
fn scope_limit_and_eviction<M: Maker>(what: &str, maker: &mut M) {
    let mut s = Settings::default().without_jitter();
    s.throttling_scope_limit = 20;
    s.throttling_scope_max_idle = 2.0;
    s.download_delay = 5.0;
    s.backoff_min_delay = 1.0;
    s.backoff_max_delay = 120.0;
    s.backoff_window = 10.0;
    s.concurrent_requests = 16;
    s.concurrent_requests_per_domain = 1;
    const HOSTS: usize = 320;
    let mut h = Harness::new(what, maker, s, FrontierConfig::default());
    let mut rng = Rng::new(9);
    let mut n = 0usize;
    for chunk in 0..HOSTS / 40 {
        let batch: Vec<Request> = (0..40)
            .map(|i| {
                n += 1;
                Request::get(format!("https://{}/{n}", host_name(chunk * 40 + i)))
            })
            .collect();
        h.push_all(&batch);
    }
    let mut seen_finished = 0;
    drive(
        &mut h,
        &mut rng,
        60_000,
        |h, rng, i| {
            // New pages for hosts that just answered (their state possibly evicted
            // while it still matters), and for others.
            let fresh = h.finished_hosts.len() - seen_finished;
            seen_finished = h.finished_hosts.len();
            for k in 0..fresh {
                if n >= 1300 {
                    break;
                }
                let host = if rng.chance(70) {
                    h.finished_hosts[h.finished_hosts.len() - 1 - k].clone()
                } else {
                    host_name(rng.below(HOSTS as u64) as usize)
                };
                n += 1;
                if rng.chance(60) {
                    h.push(Request::get(format!("https://{host}/{n}")));
                }
            }
            // Idle past max_idle now and then.
            if i % 97 == 0 {
                h.advance(rng.millis(2500, 4000));
            }
            n < 1300 && (h.queued > 0 || !h.out.is_empty())
        },
        |rng, _| {
            let fate = match rng.below(100) {
                0..30 => Fate::Complete(Reply::RetryAfter(429, 5 + rng.below(116) as u32)),
                30..95 => Fate::Complete(Reply::Ok),
                _ => Fate::Retry(Reply::Ok, 0),
            };
            (rng.millis(100, 3000), fate)
        },
    );
    eprintln!("{what}: {}", h.summary());
}

/// 6. delay_scope holds a host until then; Crawl-delay is applied or the
///    configuration kept.
fn delay_scope_and_crawl_delay<M: Maker>(what: &str, maker: &mut M) {
    for seed in [10, 11, 15] {
        let mut s = Settings::default().without_jitter();
        s.concurrent_requests = 8;
        s.concurrent_requests_per_domain = 2;
        s.download_delay = 1.0;
        s.backoff_min_delay = 1.0;
        s.backoff_max_delay = 60.0;
        s.backoff_window = 30.0;
        s.throttling_robotstxt_max_delay = 10.0;
        let s = s.with_scope("cfg.example", ScopeConfig::new().concurrency(4));
        let mut h = Harness::new(
            &format!("{what}#{seed}"),
            maker,
            s,
            FrontierConfig::default(),
        );
        let mut rng = Rng::new(seed);
        let mut n = 0;
        let mut hosts: Vec<String> = (0..8).map(host_name).collect();
        hosts.push("cfg.example".into());
        let mut crawl_delays = 0;
        let (mut applied, mut kept) = (0, 0);
        drive(
            &mut h,
            &mut rng,
            40_000,
            |h, rng, i| {
                if i >= 1200 {
                    return false;
                }
                if rng.chance(40) {
                    n += 1;
                    let host = rng.pick(&hosts);
                    h.push(Request::get(format!("https://{host}/{n}")));
                }
                if rng.chance(3) {
                    // Sometimes a host never seen, that gets its requests later.
                    let host = if rng.chance(20) {
                        let new = format!("new{i}.example");
                        hosts.push(new.clone());
                        new
                    } else {
                        rng.pick(&hosts)
                    };
                    h.delay_scope(&host, rng.pick(&[0.5, 3.0, 12.0, 100.0]));
                }
                if rng.chance(1) && crawl_delays < 12 {
                    crawl_delays += 1;
                    // The configured host at least once, whatever the draws.
                    let host = if crawl_delays == 6 {
                        "cfg.example".to_string()
                    } else {
                        rng.pick(&hosts)
                    };
                    match h.crawl_delay(&host, rng.pick(&[2.0, 4.0, 25.0])) {
                        CrawlDelayDecision::Applied { .. } => applied += 1,
                        _ => kept += 1,
                    }
                }
                true
            },
            |rng, _| {
                let fate = match rng.below(100) {
                    0..88 => Fate::Complete(Reply::Ok),
                    88..94 => Fate::HandBack,
                    _ => Fate::Retry(Reply::Ok, 0),
                };
                (rng.millis(0, 2500), fate)
            },
        );
        assert!(
            applied > 2 && kept > 0,
            "{what}: Crawl-delays {applied} applied, {kept} kept"
        );
        eprintln!(
            "{what}#{seed}: {}, Crawl-delays {applied} applied, {kept} kept",
            h.summary()
        );
    }
}
