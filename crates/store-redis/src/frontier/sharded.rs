//! One crawl over N partitions: [`ShardedRedisFrontier`], [`Placement`] and
//! [`ShardConfig`].

use std::collections::BTreeMap;

use polite_frontier_core::{
    FrontierError, InvalidRequest, Lease, Poll, PushOutcome, Request, RequestId, group_key,
};
use polite_throttle_core::{
    CrawlDelayDecision, NotReady, Outcome, QuotaReconcile, ScopeUse, Settings, Timestamp,
};

use crate::error::RedisStoreError;

use super::reply::store_err;
use super::{Backend, RedisConfig, RedisFrontier, RedisInfo, RedisPermit, RedisScopeStats, Result};

/// A partition's number is kept in the top 16 bits of the lease ids it hands out (a
/// partition's own ids stay below 2^46: a 40-bit sequence number and a 6-bit
/// redelivery count).
const PART_SHIFT: u32 = 48;
const INNER: u64 = (1 << PART_SHIFT) - 1;
/// The fewest leases a batched poll asks one partition for (when it wants that many).
const MIN_SHARE: usize = 8;

/// Where the partitions of a sharded crawl live.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// Independent servers (`redis://...` or `rediss://...` URLs): partition `k` lives
    /// on server `k % servers.len()`. The list and its order are part of the crawl:
    /// every worker must pass the same one.
    Servers(Vec<String>),
    /// A Redis Cluster, reached through any of these nodes (`redis://host:port`):
    /// partition `k` lives wherever the cluster puts the hash slot of `{crawl:k}`, and
    /// calls follow the cluster's `MOVED` and `ASK` redirections when slots move.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    Cluster(Vec<String>),
}

/// How a crawl is split into partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardConfig {
    /// How many partitions (1 to 65,535). Fixed when the crawl is created: opening it
    /// with another count is [`RedisStoreError::Partitions`].
    pub partitions: u16,
    /// Scopes that live in a chosen partition instead of the one their name hashes to.
    pub pins: BTreeMap<String, u16>,
}

impl ShardConfig {
    /// `partitions` partitions, no pinned scope.
    pub fn new(partitions: u16) -> Self {
        ShardConfig {
            partitions,
            pins: BTreeMap::new(),
        }
    }

    /// Keeps `scope` (its queue, its politeness state) in `partition`: for a scope that
    /// requests of several hosts share (a global quota, an API key's budget). Pin the
    /// hosts that share it to the same partition too: a request whose scopes live in
    /// different partitions is refused at push. Every worker must pin the same scopes.
    #[must_use]
    pub fn pin(mut self, scope: impl Into<String>, partition: u16) -> Self {
        self.pins.insert(scope.into(), partition);
        self
    }

    /// The partition a scope lives in: its pin, else the stable hash of its name.
    pub fn partition_of(&self, scope: &str) -> u16 {
        match self.pins.get(scope) {
            Some(&k) => k,
            None => (name_hash(scope) % u64::from(self.partitions.max(1))) as u16,
        }
    }
}

/// 64-bit FNV-1a of a scope name. Hand-written on purpose: which partition a host lives
/// in is stored data, so this function may never change (a crate's hasher could).
fn name_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One crawl frontier split over N partitions, each a [`RedisFrontier`] under its own
/// hash tag (`{crawl:k}:*`) on a server of a list or on any node of a Redis Cluster: for
/// crawls that outgrow one Redis server.
///
/// A request goes to the partition of its scopes (for a plain request, its host's), so
/// each host's queue, duplicate-filter entries and politeness state live in exactly one
/// partition and every rule stays exact. A request whose scopes live in different
/// partitions is an [`InvalidRequest`](FrontierError::InvalidRequest) unless they are
/// pinned together ([`ShardConfig::pin`]). The global `concurrent_requests` cap is
/// enforced by each partition on its own (the crawl as a whole may have `partitions`
/// times as many in flight); so is the duplicate filter (a URL pushed once plain and once
/// with explicit scopes of another partition is two requests).
///
/// Polls go round the partitions, starting one further each time, so none starves; a
/// batch is shared out over them (at least 8 leases asked of each, so that a batch over
/// many partitions costs a few calls, not one per lease); a partition that answered that nothing may go before `t` (or that it is empty) is not
/// asked again before `t` or [`RedisConfig::recheck`], unless this handle pushed to it or
/// freed one of its slots. Lease ids carry their partition, so any handle on the crawl
/// can complete them. [`info`](Self::info) sums the partitions' counters.
///
/// ```no_run
/// use polite_frontier_core::{Poll, Request};
/// use polite_store_redis::{Placement, RedisConfig, ShardConfig, ShardedRedisFrontier};
/// use polite_throttle_core::{Outcome, Settings, Timestamp};
///
/// let servers = Placement::Servers(vec![
///     "redis://10.0.0.1/".into(),
///     "redis://10.0.0.2/".into(),
/// ]);
/// let mut frontier = ShardedRedisFrontier::open(
///     &servers,
///     "news",
///     ShardConfig::new(8),
///     Settings::default(),
///     RedisConfig::default(),
/// )?;
/// let now = Timestamp::ZERO;
/// frontier.push(&Request::get("https://example.com/"), now)?;
/// if let Poll::Ready(lease) = frontier.poll(now)? {
///     frontier.complete(lease.id(), &Outcome::status(200), now)?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ShardedRedisFrontier {
    parts: Vec<RedisFrontier>,
    shard: ShardConfig,
    crawl: String,
    /// Where the next poll starts.
    next: usize,
    /// Each partition's last answer holds until then (it is skipped before).
    quiet_until: Vec<Timestamp>,
    /// Each partition's last answer after its last lease (`NotUntil`, `Blocked` or
    /// `Empty`); `None` when its last call filled the share asked (it may have more).
    quiet: Vec<Option<Poll>>,
    timeout: Option<Timestamp>,
    key: String,
}

impl std::fmt::Debug for ShardedRedisFrontier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedRedisFrontier")
            .field("crawl", &self.crawl)
            .field("partitions", &self.parts.len())
            .finish_non_exhaustive()
    }
}

fn invalid(detail: String) -> FrontierError<RedisStoreError> {
    store_err(RedisStoreError::Invalid { detail })
}

impl ShardedRedisFrontier {
    /// Opens (creating on first use) the crawl `crawl` over `shard.partitions`
    /// partitions placed by `placement`. Every worker must pass the same placement,
    /// shard configuration and settings; a crawl created with another partition count,
    /// or not sharded, is [`RedisStoreError::Partitions`].
    pub fn open(
        placement: &Placement,
        crawl: &str,
        shard: ShardConfig,
        settings: Settings,
        config: RedisConfig,
    ) -> Result<Self> {
        let n = shard.partitions;
        if n == 0 {
            return Err(invalid(
                "a sharded crawl needs at least one partition".into(),
            ));
        }
        if let Some((scope, k)) = shard.pins.iter().find(|(_, k)| **k >= n) {
            return Err(invalid(format!(
                "scope {scope:?} is pinned to partition {k}, but there are {n} (0 to {})",
                n - 1
            )));
        }
        let backends: Vec<Backend> = match placement {
            Placement::Servers(urls) => {
                if urls.is_empty() {
                    return Err(invalid(
                        "Placement::Servers needs at least one server".into(),
                    ));
                }
                let clients = urls
                    .iter()
                    .map(|u| {
                        redis::Client::open(u.as_str())
                            .map(Backend::Single)
                            .map_err(|e| store_err(RedisStoreError::from_redis("open", e)))
                    })
                    .collect::<Result<Vec<_>>>()?;
                (0..n as usize)
                    .map(|k| clients[k % clients.len()].clone())
                    .collect()
            }
            #[cfg(feature = "cluster")]
            Placement::Cluster(nodes) => {
                let client = redis::cluster::ClusterClient::new(nodes.clone())
                    .map_err(|e| store_err(RedisStoreError::from_redis("open", e)))?;
                vec![Backend::Cluster(client); n as usize]
            }
        };
        let mut parts = Vec::with_capacity(n as usize);
        for (k, backend) in backends.into_iter().enumerate() {
            parts.push(RedisFrontier::open_on(
                backend,
                crawl,
                Some((k as u16, n)),
                settings.clone(),
                config.clone(),
            )?);
        }
        if parts[0].exists(&format!("{{{crawl}}}:cfg"))? {
            return Err(store_err(RedisStoreError::Partitions {
                crawl: crawl.to_string(),
                detail: format!("it is not sharded, opened with {n} partitions"),
            }));
        }
        for p in &mut parts {
            p.init()?;
        }
        Ok(ShardedRedisFrontier {
            quiet_until: vec![Timestamp::ZERO; parts.len()],
            quiet: vec![None; parts.len()],
            parts,
            shard,
            crawl: crawl.to_string(),
            next: 0,
            timeout: None,
            key: String::new(),
        })
    }

    /// The crawl's name; partition `k`'s keys are `{name:k}:*`.
    pub fn crawl(&self) -> &str {
        &self.crawl
    }

    /// How many partitions.
    pub fn partitions(&self) -> u16 {
        self.parts.len() as u16
    }

    /// The partition `request` belongs to, or why it may not be pushed.
    pub fn partition_of(&mut self, request: &Request) -> std::result::Result<u16, InvalidRequest> {
        let mut key = std::mem::take(&mut self.key);
        let r = self.partition_with(request, &mut key);
        self.key = key;
        r
    }

    fn partition_with(
        &self,
        request: &Request,
        key: &mut String,
    ) -> std::result::Result<u16, InvalidRequest> {
        // Checked as the frontier checks it, before any partition is written to.
        group_key(request, key)?;
        let home = match request.scopes.as_deref().filter(|s| !s.is_empty()) {
            Some(scopes) => self.common_partition(scopes.iter().map(|s| &*s.scope)),
            // No explicit scope: the key is its host.
            None => self.common_partition([key.as_str()]),
        };
        home.map_err(|e| InvalidRequest::new(&request.url, format!("its scopes {e}")))
    }

    /// The partition every one of `names` lives in (0 for none), or the first two that
    /// differ, described.
    fn common_partition<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> std::result::Result<u16, String> {
        let mut home: Option<(&str, u16)> = None;
        for name in names {
            let k = self.shard.partition_of(name);
            match home {
                None => home = Some((name, k)),
                Some((first, at)) if at != k => {
                    return Err(format!(
                        "{first:?} (partition {at}) and {name:?} (partition {k}) live in \
                         different partitions; pin them to one with ShardConfig::pin"
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(home.map_or(0, |(_, k)| k))
    }

    fn route(&self, lease: RequestId) -> Option<(usize, RequestId)> {
        let k = (lease.0 >> PART_SHIFT) as usize;
        (k < self.parts.len()).then_some((k, RequestId(lease.0 & INNER)))
    }

    fn tag(k: usize, id: RequestId) -> RequestId {
        RequestId(id.0 | ((k as u64) << PART_SHIFT))
    }

    /// Partition `k` may have work for this handle now (it pushed there, or freed a
    /// slot there).
    fn wake(&mut self, k: usize) {
        self.quiet_until[k] = Timestamp::ZERO;
    }

    /// Queues a request in its partition.
    pub fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome> {
        Ok(self.push_all(std::slice::from_ref(request), now)?.remove(0))
    }

    /// Queues many requests: one pipelined batch per partition they go to.
    pub fn push_all(&mut self, requests: &[Request], now: Timestamp) -> Result<Vec<PushOutcome>> {
        let mut by_part: Vec<Vec<usize>> = vec![Vec::new(); self.parts.len()];
        let mut key = std::mem::take(&mut self.key);
        for (i, r) in requests.iter().enumerate() {
            match self.partition_with(r, &mut key) {
                Ok(k) => by_part[k as usize].push(i),
                Err(e) => {
                    self.key = key;
                    return Err(FrontierError::InvalidRequest(e));
                }
            }
        }
        self.key = key;
        let mut out = vec![PushOutcome::TooDeep; requests.len()];
        for (k, idx) in by_part.into_iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let batch: Vec<&Request> = idx.iter().map(|&i| &requests[i]).collect();
            let got = self.parts[k].push_each(&batch, now)?;
            for (i, o) in idx.into_iter().zip(got) {
                out[i] = match o {
                    PushOutcome::Queued(id) => PushOutcome::Queued(Self::tag(k, id)),
                    other => other,
                };
            }
            self.wake(k);
        }
        Ok(out)
    }

    /// The next request that may be sent at `now`, from the partitions in turn; or
    /// until when nothing may go.
    pub fn poll(&mut self, now: Timestamp) -> Result<Poll> {
        let batch = self.poll_inner(now, 1)?;
        match batch.0.into_iter().next() {
            Some(lease) => lease.map(Poll::Ready),
            None => Ok(batch.1),
        }
    }

    /// Up to `max` leases, shared out over the partitions in turn (each asked for its
    /// share in one script call, then those with more for the rest).
    pub fn poll_batch(&mut self, now: Timestamp, max: usize) -> Result<Vec<Result<Lease>>> {
        Ok(self.poll_inner(now, max.max(1))?.0)
    }

    pub(super) fn poll_inner(
        &mut self,
        now: Timestamp,
        max: usize,
    ) -> Result<(Vec<Result<Lease>>, Poll)> {
        let n = self.parts.len();
        let start = self.next;
        self.next = (self.next + 1) % n;
        let mut leases: Vec<Result<Lease>> = Vec::new();
        let mut full: Vec<usize> = Vec::new();
        let mut skipped: Vec<usize> = Vec::new();
        let mut asked = 0;
        for i in 0..n {
            let k = (start + i) % n;
            if leases.len() >= max {
                break;
            }
            if self.quiet_until[k] > now {
                skipped.push(k);
                continue;
            }
            // An even share of what is left, but at least MIN_SHARE: with many
            // partitions a batch goes to a few of them (the rotation spreads the calls),
            // not one lease per call to each.
            let left = n - i;
            let want = max - leases.len();
            let share = want.div_ceil(left).max(MIN_SHARE).min(want);
            asked += 1;
            let got = self.ask(k, now, share, &mut leases)?;
            if got == share {
                full.push(k);
            }
        }
        // The rest of the batch from the partitions that had more.
        for k in full {
            if leases.len() >= max {
                break;
            }
            let share = max - leases.len();
            self.ask(k, now, share, &mut leases)?;
        }
        // Nothing anywhere: partitions skipped on an old answer are asked before this
        // handle says the crawl is empty.
        if leases.is_empty() && asked < n && self.quiet.iter().all(|q| *q == Some(Poll::Empty)) {
            for k in skipped {
                self.ask(k, now, max, &mut leases)?;
                if !leases.is_empty() {
                    break;
                }
            }
        }
        // Fewer than `max`: every partition has answered after its last lease (this call,
        // or an answer that still holds), and the crawl's answer combines theirs.
        let mut why = Poll::Empty;
        let mut timeout: Option<Timestamp> = None;
        for k in 0..n {
            let t = match &self.quiet[k] {
                Some(Poll::NotUntil(t)) => {
                    why = match why {
                        Poll::NotUntil(u) => Poll::NotUntil(u.min(*t)),
                        _ => Poll::NotUntil(*t),
                    };
                    Some(*t)
                }
                Some(Poll::Blocked) | None => {
                    if why == Poll::Empty {
                        why = Poll::Blocked;
                    }
                    None
                }
                _ => None,
            };
            for t in [t, self.parts[k].poll_timeout()].into_iter().flatten() {
                timeout = Some(timeout.map_or(t, |x| x.min(t)));
            }
        }
        if leases.len() >= max {
            why = Poll::Blocked;
        }
        self.timeout = timeout;
        Ok((leases, why))
    }

    /// Asks partition `k` for up to `max` leases, appended to `leases`; returns how many
    /// it gave and records its answer.
    fn ask(
        &mut self,
        k: usize,
        now: Timestamp,
        max: usize,
        leases: &mut Vec<Result<Lease>>,
    ) -> Result<usize> {
        let (got, why) = self.parts[k].poll_inner(now, max)?;
        let n = got.len();
        for l in got {
            leases.push(match l {
                Ok(lease) => {
                    let id = Self::tag(k, lease.id());
                    Ok(Lease::new(id, lease.request))
                }
                Err(FrontierError::Corrupt { lease, source }) => Err(FrontierError::Corrupt {
                    lease: Self::tag(k, lease),
                    source,
                }),
                Err(e) => Err(e),
            });
        }
        let recheck = now + self.parts[k].config.recheck;
        if n >= max {
            // It may have more: asked again next time.
            self.quiet_until[k] = Timestamp::ZERO;
            self.quiet[k] = None;
        } else {
            // What it said after its last lease holds until then, unless this handle
            // changes something there first (`wake`).
            self.quiet_until[k] = match why {
                Poll::NotUntil(t) => t.min(recheck),
                _ => self.parts[k].poll_timeout().unwrap_or(recheck).min(recheck),
            };
            self.quiet[k] = Some(why);
        }
        Ok(n)
    }

    /// Acknowledges a lease (see [`RedisFrontier::complete`]).
    pub fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        let Some((k, id)) = self.route(lease) else {
            return Ok(false);
        };
        self.wake(k);
        self.parts[k].complete(id, outcome, now)
    }

    /// Acknowledges many leases: one script call per partition they belong to.
    pub fn complete_batch(
        &mut self,
        done: &[(RequestId, Outcome<'_>, Timestamp)],
    ) -> Result<Vec<bool>> {
        let mut out = vec![false; done.len()];
        // Per partition: the positions in `done`, and the completions with inner ids.
        type Part<'a> = (Vec<usize>, Vec<(RequestId, Outcome<'a>, Timestamp)>);
        let mut by_part: BTreeMap<usize, Part<'_>> = BTreeMap::new();
        for (i, (lease, outcome, now)) in done.iter().enumerate() {
            if let Some((k, id)) = self.route(*lease) {
                let e = by_part.entry(k).or_default();
                e.0.push(i);
                e.1.push((id, *outcome, *now));
            }
        }
        for (k, (idx, items)) in by_part {
            self.wake(k);
            for (i, ok) in idx.into_iter().zip(self.parts[k].complete_batch(&items)?) {
                out[i] = ok;
            }
        }
        Ok(out)
    }

    /// Puts a lease back with its priority adjusted (see [`RedisFrontier::retry`]).
    pub fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool> {
        let Some((k, id)) = self.route(lease) else {
            return Ok(false);
        };
        self.wake(k);
        self.parts[k].retry(id, outcome, priority_adjust, now)
    }

    /// Hands back an unused lease (see [`RedisFrontier::hand_back`]).
    pub fn hand_back(&mut self, lease: RequestId, now: Timestamp) -> Result<bool> {
        let Some((k, id)) = self.route(lease) else {
            return Ok(false);
        };
        self.wake(k);
        self.parts[k].hand_back(id, now)
    }

    /// Keeps a lease from expiring (see [`RedisFrontier::extend`]).
    pub fn extend(&mut self, lease: RequestId, now: Timestamp) -> Result<bool> {
        let Some((k, id)) = self.route(lease) else {
            return Ok(false);
        };
        self.parts[k].extend(id, now)
    }

    fn home(&self, scope: &str) -> usize {
        self.shard.partition_of(scope) as usize
    }

    /// Holds `scope` for `secs` seconds, in its partition.
    pub fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<()> {
        let k = self.home(scope);
        self.parts[k].delay_scope(scope, secs, now)
    }

    /// Applies a robots.txt Crawl-delay to `scope`, in its partition.
    pub fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision> {
        let k = self.home(scope);
        self.parts[k].handle_crawl_delay(scope, secs, now)
    }

    /// Reconciles `scope`'s quota with the server's count, in its partition.
    pub fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<()> {
        let k = self.home(scope);
        self.parts[k].reconcile_quota(scope, how, now)
    }

    /// A standalone permit on `scopes` (see [`RedisFrontier::try_acquire`]), from the
    /// partition they live in; scopes of different partitions are
    /// [`RedisStoreError::Invalid`] (pin them together).
    pub fn try_acquire(
        &mut self,
        scopes: &[ScopeUse<'_>],
        now: Timestamp,
    ) -> Result<std::result::Result<RedisPermit, NotReady>> {
        let k = self
            .common_partition(scopes.iter().map(|u| u.scope))
            .map_err(|e| invalid(format!("a permit on scopes {e}")))? as usize;
        Ok(self.parts[k]
            .try_acquire(scopes, now)?
            .map(|p| RedisPermit(p.0 | ((k as u64) << PART_SHIFT))))
    }

    /// Hands a standalone permit back with its outcome (see [`RedisFrontier::release`]).
    pub fn release(
        &mut self,
        permit: RedisPermit,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        let k = (permit.0 >> PART_SHIFT) as usize;
        if k >= self.parts.len() {
            return Ok(false);
        }
        self.wake(k);
        self.parts[k].release(RedisPermit(permit.0 & INNER), outcome, now)
    }

    /// A scope's state as of the last operation on it, from its partition (see
    /// [`RedisFrontier::scope_stats_raw`]).
    pub fn scope_stats_raw(&mut self, scope: &str) -> Result<Option<RedisScopeStats>> {
        let k = self.home(scope);
        self.parts[k].scope_stats_raw(scope)
    }

    /// A scope's throttling state, from its partition.
    pub fn scope_stats(&mut self, scope: &str, now: Timestamp) -> Result<Option<RedisScopeStats>> {
        let k = self.home(scope);
        self.parts[k].scope_stats(scope, now)
    }

    /// Counters of the whole crawl: every partition's, summed (`depth_max` is the
    /// largest).
    pub fn info(&mut self) -> Result<RedisInfo> {
        let mut all = RedisInfo::default();
        all.stats.store = "redis";
        for p in &mut self.parts {
            let i = p.info()?;
            all.queued += i.queued;
            all.delayed += i.delayed;
            all.leased += i.leased;
            all.in_flight += i.in_flight;
            all.groups += i.groups;
            all.permits += i.permits;
            let (a, s) = (&mut all.stats, &i.stats);
            a.enqueued += s.enqueued;
            a.dequeued += s.dequeued;
            a.filtered += s.filtered;
            a.depth_ignored += s.depth_ignored;
            a.depth_max = a.depth_max.max(s.depth_max);
            a.leased += s.leased;
            a.acked += s.acked;
            a.retried += s.retried;
            a.redelivered += s.redelivered;
        }
        Ok(all)
    }

    /// Each partition's counters, in partition order.
    pub fn partition_info(&mut self) -> Result<Vec<RedisInfo>> {
        self.parts.iter_mut().map(RedisFrontier::info).collect()
    }

    /// Leases out in the whole crawl, by every worker, as of the last calls.
    pub fn in_flight(&self) -> usize {
        self.parts.iter().map(RedisFrontier::in_flight).sum()
    }

    /// When to poll again at the latest (the earliest of the partitions').
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timeout
    }

    /// Deletes every key of every partition; returns how many.
    pub fn destroy(mut self) -> Result<u64> {
        let mut n = 0;
        for p in &mut self.parts {
            n += p.destroy_keys()?;
        }
        Ok(n)
    }
}
