//! The virtual-time loop shared by replays and site models.
//!
//! At each instant: deliver the answers due (by due time, then send order), apply the
//! inputs due (file order), then poll the frontier and send while it hands out requests
//! (it refuses once `concurrent_requests` are in flight); then jump to the next instant
//! that matters: the next answer, the next input, or the frontier's own wake-up.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use anyhow::{Context, anyhow};
use polite_frontier_core::{
    Frontier, FrontierConfig, Lease, Poll, PushOutcome, Request, RequestId, VolatileStore,
    group_key, parse_group_key,
};
use polite_throttle_core::{Outcome, Settings, Throttler, Timestamp};

use super::output::{Answer, DropReason, ObjectWriter, Output};

/// What a world decides when a request is sent.
pub(crate) struct Dispatch<T> {
    /// The label of its output lines.
    pub(crate) label: Box<str>,
    /// Nanoseconds until its answer arrives.
    pub(crate) latency: u64,
    /// How it ends.
    pub(crate) answer: Answer,
    /// The wait asked for by rate-limit headers (honoured only on backoff triggers).
    pub(crate) header_delay: Option<Duration>,
    /// The world's own data, handed back on arrival.
    pub(crate) tag: T,
}

/// What becomes of a request whose answer arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Acknowledge it.
    Complete,
    /// Put it back in the queue with its priority changed by this much.
    Retry(i32),
}

/// The outside world of a simulation: inputs, servers and the links in their pages.
pub(crate) trait World {
    /// Per-request data kept while it is in flight.
    type Tag;
    /// The instant of the next input not yet applied.
    fn next_input(&self) -> Option<Timestamp>;
    /// Applies every input due at or before `now`.
    fn apply_inputs(&mut self, sim: &mut Sim<'_>, now: Timestamp) -> anyhow::Result<()>;
    /// A request is being sent at `now`: how and when does it end?
    fn send(&mut self, lease: Lease, now: Timestamp) -> anyhow::Result<Dispatch<Self::Tag>>;
    /// Its answer arrived: acknowledge it or retry it?
    fn fate(&mut self, tag: &Self::Tag, answer: &Answer) -> Fate;
    /// After the frontier learned the outcome: push what the answer links to.
    fn arrived(
        &mut self,
        sim: &mut Sim<'_>,
        tag: Self::Tag,
        depth: u32,
        answer: &Answer,
        fate: Fate,
        now: Timestamp,
    ) -> anyhow::Result<()>;
}

struct Flight<T> {
    lease: RequestId,
    label: Box<str>,
    group: u32,
    depth: u32,
    answer: Answer,
    header_delay: Option<Duration>,
    tag: T,
}

/// Counters of one scope.
#[derive(Debug, Default)]
struct ScopeTally {
    sent: u64,
    responses: BTreeMap<u16, u64>,
    errors: BTreeMap<Box<str>, u64>,
}

/// Counters of the whole run.
#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    responses: BTreeMap<u16, u64>,
    errors: BTreeMap<Box<str>, u64>,
    retried: u64,
    duplicate: u64,
    depth: u64,
    scope_names: Vec<Box<str>>,
    scopes: Vec<ScopeTally>,
    scope_index: HashMap<Box<str>, u32>,
    /// Scope sets (by frontier group key) and the scopes in them.
    groups: Vec<Box<[u32]>>,
    group_index: HashMap<Box<str>, u32>,
}

impl Tally {
    fn scope(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.scope_index.get(name) {
            return i;
        }
        let i = self.scopes.len() as u32;
        self.scope_names.push(name.into());
        self.scopes.push(ScopeTally::default());
        self.scope_index.insert(name.into(), i);
        i
    }

    /// The scope set of `request` (its explicit scopes, else its host), for counting.
    fn group(&mut self, request: &Request, key: &mut String) -> anyhow::Result<u32> {
        group_key(request, key).map_err(|e| anyhow!("{e}"))?;
        if let Some(&g) = self.group_index.get(key.as_str()) {
            return Ok(g);
        }
        let names: Vec<String> = parse_group_key(key)
            .map_err(|e| anyhow!("{e}"))?
            .into_iter()
            .map(|(name, _)| name.to_owned())
            .collect();
        let scopes: Box<[u32]> = names.iter().map(|n| self.scope(n)).collect();
        let g = self.groups.len() as u32;
        self.groups.push(scopes);
        self.group_index.insert(key.as_str().into(), g);
        Ok(g)
    }

    fn count_send(&mut self, group: u32) {
        self.sent += 1;
        for &s in self.groups[group as usize].iter() {
            self.scopes[s as usize].sent += 1;
        }
    }

    fn count_answer(&mut self, group: u32, answer: &Answer) {
        match answer {
            Answer::Status(status) => {
                *self.responses.entry(*status).or_default() += 1;
                for &s in self.groups[group as usize].iter() {
                    *self.scopes[s as usize]
                        .responses
                        .entry(*status)
                        .or_default() += 1;
                }
            }
            Answer::Error(kind) => {
                bump(&mut self.errors, kind);
                for &s in self.groups[group as usize].iter() {
                    bump(&mut self.scopes[s as usize].errors, kind);
                }
            }
        }
    }
}

fn bump(map: &mut BTreeMap<Box<str>, u64>, key: &str) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.into(), 1);
        }
    }
}

/// The frontier, the output and the counters: what worlds act on.
pub(crate) struct Sim<'w> {
    frontier: Frontier<VolatileStore>,
    out: Output<'w>,
    tally: Tally,
    key: String,
    /// The instant of the last line printed (the crawl's finishing time).
    last_activity: Timestamp,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunEnd {
    /// Requests still queued when nothing more could happen (0 unless something is stuck).
    pub(crate) unsent: usize,
}

impl<'w> Sim<'w> {
    /// A simulation starting at virtual time 0.
    pub(crate) fn new(
        settings: Settings,
        config: FrontierConfig,
        out: Output<'w>,
    ) -> anyhow::Result<Self> {
        let frontier = Frontier::open(settings, config, VolatileStore::new(), Timestamp::ZERO)
            .map_err(|e| anyhow!("{e}"))?;
        Ok(Sim {
            frontier,
            out,
            tally: Tally::default(),
            key: String::new(),
            last_activity: Timestamp::ZERO,
        })
    }

    /// The frontier (for scope events).
    pub(crate) fn frontier(&mut self) -> &mut Frontier<VolatileStore> {
        &mut self.frontier
    }

    /// Pushes a request labelled `label`; prints and counts it if it is dropped.
    /// Returns its lease id when it was queued.
    pub(crate) fn push(
        &mut self,
        request: &Request,
        label: &str,
        now: Timestamp,
    ) -> anyhow::Result<Option<RequestId>> {
        let outcome = self
            .frontier
            .push(request, now)
            .map_err(|e| anyhow!("pushing {label}: {e}"))?;
        let reason = match outcome {
            PushOutcome::Queued(id) => return Ok(Some(id)),
            PushOutcome::Duplicate => {
                self.tally.duplicate += 1;
                DropReason::Duplicate
            }
            PushOutcome::TooDeep => {
                self.tally.depth += 1;
                DropReason::Depth
            }
            other => return Err(anyhow!("pushing {label}: unexpected outcome {other:?}")),
        };
        self.out.dropped(now, label, reason)?;
        self.last_activity = now;
        Ok(None)
    }

    /// Runs `world` to the end.
    pub(crate) fn run<W: World>(&mut self, world: &mut W) -> anyhow::Result<RunEnd> {
        let mut flights: BinaryHeap<Reverse<(Timestamp, u64, u32)>> = BinaryHeap::new();
        let mut slots: Vec<Option<Flight<W::Tag>>> = Vec::new();
        let mut free: Vec<u32> = Vec::new();
        let mut sends: u64 = 0;
        let mut now = Timestamp::ZERO;
        loop {
            // Whether a line was printed or an input applied at this instant.
            let mut progressed = false;
            // 1. Answers due, by due time then send order.
            while let Some(&Reverse((due, _, slot))) = flights.peek() {
                if due > now {
                    break;
                }
                flights.pop();
                let flight = slots[slot as usize].take().expect("a flight in the air");
                free.push(slot);
                self.deliver(world, flight, now)?;
                self.last_activity = now;
                progressed = true;
            }
            // 2. Inputs due, in file order.
            if world.next_input().is_some_and(|t| t <= now) {
                world.apply_inputs(self, now)?;
                progressed = true;
            }
            // 3. Send while the frontier hands requests out.
            let wait = loop {
                let poll = self.frontier.poll(now).map_err(|e| anyhow!("{e}"))?;
                let Poll::Ready(lease) = poll else {
                    break poll;
                };
                progressed = true;
                self.last_activity = now;
                let group = self.tally.group(&lease.request, &mut self.key)?;
                let depth = lease.request.depth;
                let id = lease.id();
                let d = world.send(lease, now)?;
                self.out.send(now, &d.label)?;
                self.tally.count_send(group);
                let flight = Flight {
                    lease: id,
                    label: d.label,
                    group,
                    depth,
                    answer: d.answer,
                    header_delay: d.header_delay,
                    tag: d.tag,
                };
                let slot = match free.pop() {
                    Some(s) => {
                        slots[s as usize] = Some(flight);
                        s
                    }
                    None => {
                        slots.push(Some(flight));
                        (slots.len() - 1) as u32
                    }
                };
                let due = now + Duration::from_nanos(d.latency);
                flights.push(Reverse((due, sends, slot)));
                sends += 1;
            };
            // 4. The next instant that matters.
            let mut next: Option<Timestamp> = None;
            let mut consider = |t: Option<Timestamp>| {
                if let Some(t) = t {
                    next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
                }
            };
            consider(flights.peek().map(|Reverse((t, _, _))| *t));
            consider(world.next_input());
            match wait {
                Poll::NotUntil(t) => consider(Some(t)),
                Poll::Blocked => consider(self.frontier.poll_timeout()),
                _ => {}
            }
            let Some(next) = next else { break };
            if next <= now && !progressed {
                // Only answers with zero latency bring the loop back to the same instant,
                // and they always make progress. Anything else would spin forever.
                return Err(anyhow!(
                    "internal error: the simulation stopped advancing at {now} \
                     (frontier wake-up {:?})",
                    self.frontier.poll_timeout()
                ));
            }
            now = next.max(now);
        }
        Ok(RunEnd {
            unsent: self.frontier.len(),
        })
    }

    fn deliver<W: World>(
        &mut self,
        world: &mut W,
        flight: Flight<W::Tag>,
        now: Timestamp,
    ) -> anyhow::Result<()> {
        self.out.done(now, &flight.label, &flight.answer)?;
        self.tally.count_answer(flight.group, &flight.answer);
        let outcome = match &flight.answer {
            Answer::Status(status) => Outcome::parsed(*status, flight.header_delay, None),
            Answer::Error(kind) => Outcome::Error(kind),
        };
        let fate = world.fate(&flight.tag, &flight.answer);
        let known = match fate {
            Fate::Complete => self.frontier.complete(flight.lease, &outcome, now),
            Fate::Retry(adjust) => {
                self.tally.retried += 1;
                self.frontier.retry(flight.lease, &outcome, adjust, now)
            }
        }
        .map_err(|e| anyhow!("{e}"))?;
        if !known {
            return Err(anyhow!(
                "internal error: the frontier did not know the lease of {}",
                flight.label
            ));
        }
        world.arrived(self, flight.tag, flight.depth, &flight.answer, fate, now)
    }

    /// Writes the summary line (at most `top_scopes` scopes, those that sent the most).
    pub(crate) fn finish(&mut self, end: RunEnd, top_scopes: Option<usize>) -> anyhow::Result<()> {
        let at = self.last_activity;
        let line = self.summary(at, end, top_scopes)?;
        self.out.summary(&line)?;
        Ok(())
    }

    fn summary(
        &self,
        at: Timestamp,
        end: RunEnd,
        top_scopes: Option<usize>,
    ) -> anyhow::Result<String> {
        let t = &self.tally;
        let stats = self.frontier.stats();
        // The per-scope values as of the finishing time: lazy recovery, rampup and quota
        // windows brought up to date on a scratch throttler, so the real one is untouched.
        let throttler = self.frontier.throttler();
        let mut scratch_settings = throttler.settings().clone();
        scratch_settings.throttling_scope_limit = 0;
        scratch_settings.throttling_scope_max_idle = 0.0;
        let mut scratch =
            Throttler::new(scratch_settings, at).context("summary: rebuilding scope states")?;

        let mut order: Vec<u32> = (0..t.scopes.len() as u32).collect();
        order.sort_by(|&a, &b| t.scope_names[a as usize].cmp(&t.scope_names[b as usize]));
        if let Some(limit) = top_scopes {
            let mut ranked = order.clone();
            ranked.sort_by(|&a, &b| {
                t.scopes[b as usize]
                    .sent
                    .cmp(&t.scopes[a as usize].sent)
                    .then_with(|| t.scope_names[a as usize].cmp(&t.scope_names[b as usize]))
            });
            ranked.truncate(limit);
            let keep: std::collections::HashSet<u32> = ranked.into_iter().collect();
            order.retain(|s| keep.contains(s));
        }

        let mut line = String::with_capacity(256 + order.len() * 160);
        line.push_str("{\"summary\": ");
        let mut o = ObjectWriter::open(&mut line);
        o.time("finished_at", at);
        o.uint("sent", t.sent);
        o.counts("responses", &t.responses);
        o.counts("errors", &t.errors);
        o.uint("retried", t.retried);
        {
            let mut d = ObjectWriter::open(o.key("dropped"));
            d.uint("duplicate", t.duplicate);
            d.uint("depth", t.depth);
            d.close();
        }
        o.uint("depth_max", u64::from(stats.depth_max));
        o.uint("unsent", end.unsent as u64);
        o.uint("scope_count", t.scopes.len() as u64);
        {
            let mut scopes = ObjectWriter::open(o.key("scopes"));
            for &i in &order {
                let name = &*t.scope_names[i as usize];
                let st = &t.scopes[i as usize];
                let (delay, concurrency, level) = match throttler.snapshot(name) {
                    Some(snap) => {
                        scratch.restore(&snap, at);
                        match scratch.scope_stats(name, at) {
                            Some(s) => (s.delay, s.concurrency, s.level),
                            None => (snap.delay, snap.concurrency, snap.level),
                        }
                    }
                    None => {
                        // Evicted (idle, not backing off): its configured or live values.
                        let s = throttler.scope_settings(name);
                        (s.delay, s.concurrency, 0)
                    }
                };
                let mut s = ObjectWriter::open(scopes.key(name));
                s.uint("sent", st.sent);
                s.counts("responses", &st.responses);
                s.counts("errors", &st.errors);
                s.float("delay", delay);
                s.uint("concurrency", u64::from(concurrency));
                s.uint("level", u64::from(level));
                s.close();
            }
            scopes.close();
        }
        o.close();
        line.push('}');
        Ok(line)
    }
}
