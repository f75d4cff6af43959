//! Replays: scripted pushes with scripted answers, and scope events.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::anyhow;
use polite_frontier_core::Lease;
use polite_throttle_core::Timestamp;
use polite_throttle_core::headers::header_delay;

use super::engine::{Dispatch, Fate, Sim, World};
use super::output::Answer;
use super::scenario::{Action, Event, Push};

/// The world of a replay: the events of the file, and the answers they script.
pub(crate) struct Replay<'s> {
    events: &'s [Event],
    next: usize,
    /// Queued pushes by lease id, until they are sent.
    queued: HashMap<u64, &'s Push>,
    /// Unix time of virtual time 0, in nanoseconds (the wall clock for HTTP-dates).
    epoch: Timestamp,
}

impl<'s> Replay<'s> {
    /// A replay of `events` (sorted by time, then file order).
    pub(crate) fn new(events: &'s [Event], epoch_secs: u64) -> Self {
        Replay {
            events,
            next: 0,
            queued: HashMap::new(),
            epoch: Timestamp::from_secs(epoch_secs),
        }
    }

    /// Pushes `push`; `depth` is set for children (a top-level push keeps its own).
    fn push(
        &mut self,
        sim: &mut Sim<'_>,
        push: &'s Push,
        depth: Option<u32>,
        now: Timestamp,
    ) -> anyhow::Result<()> {
        let mut request = push.request.clone();
        if let Some(depth) = depth {
            request.depth = depth;
        }
        if let Some(id) = sim.push(&request, &push.id, now)? {
            self.queued.insert(id.0, push);
        }
        Ok(())
    }
}

impl<'s> World for Replay<'s> {
    type Tag = &'s Push;

    fn next_input(&self) -> Option<Timestamp> {
        self.events.get(self.next).map(|e| e.at)
    }

    fn apply_inputs(&mut self, sim: &mut Sim<'_>, now: Timestamp) -> anyhow::Result<()> {
        while let Some(event) = self.events.get(self.next).filter(|e| e.at <= now) {
            self.next += 1;
            let at = |e: &dyn std::fmt::Display| anyhow!("events[{}]: {e}", event.index);
            match &event.action {
                Action::Push(push) => self.push(sim, push, None, now)?,
                Action::DelayScope { scope, seconds } => sim
                    .frontier()
                    .delay_scope(scope, *seconds, now)
                    .map_err(|e| at(&e))?,
                Action::CrawlDelay { scope, seconds } => {
                    sim.frontier()
                        .handle_crawl_delay(scope, *seconds, now)
                        .map_err(|e| at(&e))?;
                }
                Action::SetScope {
                    scope,
                    delay,
                    concurrency,
                } => {
                    if let Some(d) = delay {
                        sim.frontier()
                            .set_scope_delay(scope, *d, now)
                            .map_err(|e| at(&e))?;
                    }
                    if let Some(c) = concurrency {
                        sim.frontier()
                            .set_scope_concurrency(scope, *c, now)
                            .map_err(|e| at(&e))?;
                    }
                }
                Action::Reconcile { scope, how } => sim
                    .frontier()
                    .reconcile_quota(scope, *how, now)
                    .map_err(|e| at(&e))?,
            }
        }
        Ok(())
    }

    fn send(&mut self, lease: Lease, now: Timestamp) -> anyhow::Result<Dispatch<&'s Push>> {
        let push = self.queued.remove(&lease.id().0).ok_or_else(|| {
            anyhow!(
                "internal error: the frontier handed out {} which was never pushed",
                lease.request.url
            )
        })?;
        let due = now + Duration::from_nanos(push.latency);
        let wall = self.epoch + Duration::from_nanos(due.as_nanos());
        let header_delay = match push.answer {
            Answer::Status(_) if !push.headers.is_empty() => header_delay(
                push.headers
                    .iter()
                    .map(|(n, v)| (n.as_bytes(), v.as_bytes())),
                Some(wall),
            ),
            _ => None,
        };
        Ok(Dispatch {
            label: push.id.clone(),
            latency: push.latency,
            answer: push.answer.clone(),
            header_delay,
            tag: push,
        })
    }

    fn fate(&mut self, _push: &&'s Push, _answer: &Answer) -> Fate {
        // A replay scripts every answer; retrying would need an answer nobody wrote.
        Fate::Complete
    }

    fn arrived(
        &mut self,
        sim: &mut Sim<'_>,
        push: &'s Push,
        depth: u32,
        _answer: &Answer,
        _fate: Fate,
        now: Timestamp,
    ) -> anyhow::Result<()> {
        for child in &push.children {
            self.push(sim, child, Some(depth.saturating_add(1)), now)?;
        }
        Ok(())
    }
}
