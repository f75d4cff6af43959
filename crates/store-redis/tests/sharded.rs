//! A crawl split over partitions on independent servers: routing by scope, lease ids
//! that carry their partition, fair polling, aggregated counters, pinned shared scopes,
//! and a partition count that cannot change silently. (The Redis Cluster side is in
//! `cluster.rs`.)

use std::collections::{BTreeMap, HashSet};

use polite_frontier_core::{FrontierError, Poll, PushOutcome, Request};
use polite_store_redis::testing::RedisServer;
use polite_store_redis::{
    Placement, RedisConfig, RedisFrontier, RedisStoreError, ShardConfig, ShardedRedisFrontier,
};
use polite_throttle_core::{Outcome, ScopeConfig, Settings, Timestamp};

fn t(ms: u64) -> Timestamp {
    Timestamp::from_nanos(ms * 1_000_000)
}

fn two_servers(name: &str) -> Option<(RedisServer, RedisServer, Placement)> {
    let a = RedisServer::start_or_skip(name)?;
    let b = RedisServer::start_or_skip(name)?;
    let placement = Placement::Servers(vec![a.url(), b.url()]);
    Some((a, b, placement))
}

fn settings() -> Settings {
    let mut s = Settings::default().without_jitter();
    s.download_delay = 1.0;
    s
}

fn fcalls(server: &RedisServer) -> u64 {
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_fcall:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// 40 hosts over 3 partitions on 2 servers: every request is delivered once, each
/// host's requests are spaced by its delay, every partition holds some hosts, and the
/// counters add up.
#[test]
fn sharded_crawl_delivers_everything_once_with_spacing() {
    let Some((_a, _b, placement)) = two_servers("sharded_crawl") else {
        return;
    };
    let mut f = ShardedRedisFrontier::open(
        &placement,
        "sh1",
        ShardConfig::new(3),
        settings(),
        RedisConfig::default(),
    )
    .unwrap();
    let mut requests = Vec::new();
    for h in 0..40 {
        for p in 0..5 {
            requests.push(Request::get(format!("https://h{h}.test/{p}")));
        }
    }
    let outcomes = f.push_all(&requests, t(0)).unwrap();
    assert!(outcomes.iter().all(|o| matches!(o, PushOutcome::Queued(_))));
    assert_eq!(
        f.push(&Request::get("https://h3.test/1"), t(0)).unwrap(),
        PushOutcome::Duplicate
    );
    let per_part = f.partition_info().unwrap();
    assert_eq!(per_part.len(), 3);
    for (k, i) in per_part.iter().enumerate() {
        assert!(i.queued > 0, "partition {k} holds no request");
    }
    assert_eq!(f.info().unwrap().queued, 200);

    let mut seen = HashSet::new();
    let mut last: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut now = t(0);
    loop {
        let batch = f.poll_batch(now, 16).unwrap();
        if batch.is_empty() {
            match polite_frontier_core::Scheduling::poll(&mut f, now).unwrap() {
                Poll::Empty => break,
                Poll::NotUntil(u) => {
                    now = u;
                    continue;
                }
                Poll::Ready(l) => {
                    f.complete(l.id(), &Outcome::status(200), now).unwrap();
                    let host = l.request.url.split('/').nth(2).unwrap().to_string();
                    assert!(seen.insert(l.request.url.to_string()));
                    last.insert(host, now);
                    continue;
                }
                Poll::Blocked => panic!("nothing is in flight"),
            }
        }
        for l in batch {
            let l = l.unwrap();
            let host = l.request.url.split('/').nth(2).unwrap().to_string();
            if let Some(prev) = last.get(&host) {
                assert!(
                    now.saturating_duration_since(*prev) >= std::time::Duration::from_secs(1),
                    "{host} sent twice within its delay"
                );
            }
            last.insert(host, now);
            assert!(
                seen.insert(l.request.url.to_string()),
                "{} twice",
                l.request.url
            );
            assert!(f.complete(l.id(), &Outcome::status(200), now).unwrap());
        }
    }
    assert_eq!(seen.len(), 200);
    let info = f.info().unwrap();
    assert_eq!((info.queued, info.leased), (0, 0));
    assert_eq!(info.stats.acked, 200);
    assert_eq!(info.stats.filtered, 1);
    assert!(f.destroy().unwrap() > 0);
}

/// The partition count is part of the crawl: another count, or opening a sharded crawl
/// unsharded (or the other way round), is a clear error.
#[test]
fn sharded_partition_count_cannot_change() {
    let Some((a, _b, placement)) = two_servers("sharded_count") else {
        return;
    };
    let open = |n: u16, name: &str| {
        ShardedRedisFrontier::open(
            &placement,
            name,
            ShardConfig::new(n),
            settings(),
            RedisConfig::default(),
        )
    };
    let f = open(3, "sh2").unwrap();
    drop(f);
    for n in [2, 4] {
        let e = open(n, "sh2").unwrap_err();
        let FrontierError::Store(RedisStoreError::Partitions { detail, .. }) = &e else {
            panic!("{e}")
        };
        assert!(detail.contains("3 partitions"), "{detail}");
    }
    let e = RedisFrontier::open(&a.url(), "sh2", settings(), RedisConfig::default()).unwrap_err();
    assert!(
        matches!(e, FrontierError::Store(RedisStoreError::Partitions { .. })),
        "{e}"
    );
    drop(RedisFrontier::open(&a.url(), "plain", settings(), RedisConfig::default()).unwrap());
    let e = open(2, "plain").unwrap_err();
    assert!(e.to_string().contains("not sharded"), "{e}");
    let e = ShardedRedisFrontier::open(
        &placement,
        "sh3",
        ShardConfig::new(2).pin("q", 2),
        settings(),
        RedisConfig::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("pinned to partition 2"), "{e}");
}

/// A scope shared by hosts of different partitions is refused at push; pinned, with
/// the hosts that share it, it lives in one partition and its quota holds crawl-wide.
#[test]
fn sharded_shared_scope_refused_unless_pinned() {
    let Some((_a, _b, placement)) = two_servers("sharded_shared") else {
        return;
    };
    let shard = ShardConfig::new(4);
    // Two hosts in different partitions.
    let hosts: Vec<String> = (0..50).map(|i| format!("h{i}.test")).collect();
    let x = &hosts[0];
    let y = hosts
        .iter()
        .find(|h| shard.partition_of(h) != shard.partition_of(x))
        .unwrap();
    let quota = Settings::default()
        .without_jitter()
        .with_scope("api", ScopeConfig::new().quota(3.0).window(60.0));
    let mut f = ShardedRedisFrontier::open(
        &placement,
        "sh4",
        shard.clone(),
        quota.clone(),
        RedisConfig::default(),
    )
    .unwrap();
    let r = |h: &str, i: u32| {
        Request::get(format!("https://{h}/{i}"))
            .scope(h.to_string())
            .scope("api")
    };
    let e = f.push_all(&[r(x, 0), r(y, 0)], t(0)).unwrap_err();
    let FrontierError::InvalidRequest(e) = e else {
        panic!("{e}")
    };
    assert!(e.reason().contains("different partitions"), "{e}");
    assert!(e.reason().contains("ShardConfig::pin"), "{e}");

    let pinned = shard.pin("api", 1).pin(x.clone(), 1).pin(y.clone(), 1);
    let mut f =
        ShardedRedisFrontier::open(&placement, "sh5", pinned, quota, RedisConfig::default())
            .unwrap();
    for i in 0..3 {
        f.push(&r(x, i), t(0)).unwrap();
        f.push(&r(y, i), t(0)).unwrap();
    }
    let mut sent = 0;
    while let Poll::Ready(l) = f.poll(t(0)).unwrap() {
        f.complete(l.id(), &Outcome::status(200), t(0)).unwrap();
        sent += 1;
    }
    assert_eq!(sent, 3, "the shared quota of 3 holds across both hosts");
    assert_eq!(f.partition_info().unwrap()[1].queued, 3);
}

/// Polls go round the partitions: with work everywhere, single polls take from each in
/// turn; a partition that said "not before t" is not asked again before t.
#[test]
fn sharded_polls_are_fair_and_quiet_partitions_cost_nothing() {
    let Some((a, b, placement)) = two_servers("sharded_fair") else {
        return;
    };
    let shard = ShardConfig::new(2);
    let mut f = ShardedRedisFrontier::open(
        &placement,
        "sh6",
        shard.clone(),
        Settings::default().without_jitter(),
        RedisConfig::default(),
    )
    .unwrap();
    // 30 hosts' requests, with no delay: any partition may always send.
    for h in 0..30 {
        for p in 0..4 {
            f.push(&Request::get(format!("https://f{h}.test/{p}")), t(0))
                .unwrap();
        }
    }
    let mut from = [0u32; 2];
    let mut order = Vec::new();
    for _ in 0..40 {
        let Poll::Ready(l) = f.poll(t(0)).unwrap() else {
            panic!()
        };
        let host = l.request.url.split('/').nth(2).unwrap();
        let k = shard.partition_of(host) as usize;
        from[k] += 1;
        order.push(k);
        f.complete(l.id(), &Outcome::status(200), t(0)).unwrap();
    }
    assert_eq!(from, [20, 20], "{order:?}");

    // Partition 0 (server a) backs off for 60 s; partition 1 has work: polls during the
    // minute ask partition 1 only.
    let mut g = ShardedRedisFrontier::open(
        &placement,
        "sh7",
        shard.clone(),
        {
            let mut s = Settings::default().without_jitter();
            s.download_delay = 60.0;
            s.concurrent_requests = 100;
            s
        },
        RedisConfig::default().recheck(std::time::Duration::from_secs(600)),
    )
    .unwrap();
    let hosts: Vec<String> = (0..40).map(|i| format!("q{i}.test")).collect();
    let h0 = hosts.iter().find(|h| shard.partition_of(h) == 0).unwrap();
    g.push(&Request::get(format!("https://{h0}/1")), t(0))
        .unwrap();
    g.push(&Request::get(format!("https://{h0}/2")), t(0))
        .unwrap();
    let mut ones = hosts.iter().filter(|h| shard.partition_of(h) == 1);
    for h in ones.by_ref().take(20) {
        g.push(&Request::get(format!("https://{h}/1")), t(0))
            .unwrap();
    }
    // Take partition 0's first request: it now waits 60 s.
    let mut leased = 0;
    while leased < 21 {
        let Poll::Ready(l) = g.poll(t(0)).unwrap() else {
            panic!()
        };
        leased += 1;
        // Keep the leases: completing would wake the partition.
        std::mem::forget(l);
    }
    let (before_a, before_b) = (fcalls(&a), fcalls(&b));
    for i in 1..=10 {
        let p = g.poll(t(i)).unwrap();
        assert!(
            matches!(p, Poll::NotUntil(_) | Poll::Blocked),
            "only partition 0's second request is left: {p:?}"
        );
    }
    assert_eq!(fcalls(&a) - before_a, 0, "partition 0 asked while quiet");
    assert!(fcalls(&b) - before_b <= 10);
}

/// A standalone permit goes to its scope's partition and shares its budget with the
/// crawl's leases there; scopes of two partitions are refused.
#[test]
fn sharded_permits_share_the_partition_budget() {
    let Some((_a, _b, placement)) = two_servers("sharded_permits") else {
        return;
    };
    let shard = ShardConfig::new(3);
    let mut f = ShardedRedisFrontier::open(
        &placement,
        "sh8",
        shard.clone(),
        settings(),
        RedisConfig::default(),
    )
    .unwrap();
    let hosts: Vec<String> = (0..30).map(|i| format!("p{i}.test")).collect();
    let x = &hosts[0];
    let y = hosts
        .iter()
        .find(|h| shard.partition_of(h) != shard.partition_of(x))
        .unwrap();
    use polite_throttle_core::ScopeUse;
    let permit = f.try_acquire(&[ScopeUse::new(x)], t(0)).unwrap().unwrap();
    f.push(&Request::get(format!("https://{x}/1")), t(0))
        .unwrap();
    // The permit's send holds the host's next request for its delay (1 s).
    assert_eq!(f.poll(t(10)).unwrap(), Poll::NotUntil(t(1000)));
    assert!(f.release(permit, &Outcome::status(200), t(20)).unwrap());
    assert!(matches!(f.poll(t(1000)).unwrap(), Poll::Ready(_)));
    let e = f
        .try_acquire(&[ScopeUse::new(x), ScopeUse::new(y)], t(0))
        .unwrap_err();
    assert!(e.to_string().contains("different partitions"), "{e}");
}
