//! The standalone-permit differential: permit timelines (no queue) through
//! `Throttler::try_acquire` / `release` and `RedisFrontier::try_acquire` / `release`.

use super::random::{RANDOM_SCOPES, Rng, random_settings};
use super::*;

/// One input of a standalone-permit timeline (no queue).
#[derive(Clone, Debug)]
enum PStep {
    /// `try_acquire` on these scopes and amounts.
    Acquire(Vec<(&'static str, f64)>),
    /// Releases the `n`-th oldest permit still held (modulo their number).
    Release(usize, Out),
    /// Releases the last permit released again (both sides must refuse it).
    ReleaseAgain,
    Advance(u64),
    /// Jumps to the time of the last `NotUntil` answer.
    Sleep,
}

/// An acquire's answer, as both sides compare it.
fn acquire_text<P>(r: &Result<P, NotReady>) -> String {
    match r {
        Ok(_) => "ok".to_string(),
        Err(NotReady::NotUntil(t)) => format!("until {}", t.as_nanos()),
        Err(NotReady::Blocked) => "blocked".to_string(),
    }
}

/// Runs a permit timeline through polite-throttle-core's `Throttler::try_acquire` /
/// `release` and through `RedisFrontier::try_acquire` / `release`, and panics at the
/// first difference (answers, then every listed scope's state).
fn run_permits(name: &str, settings: Settings, scopes: &[&str], steps: &[PStep]) -> usize {
    let Some(server) = server() else { return 0 };
    let start = Timestamp::from_secs(1000);
    let mut core = Throttler::new(settings.clone(), start).unwrap();
    let config = RedisConfig::default().lease_timeout(std::time::Duration::from_secs(86_400 * 30));
    let mut redis = RedisFrontier::open(&server.url(), &crawl_name(), settings, config).unwrap();
    let mut now = start;
    let mut last_until = None;
    let mut held: Vec<(Permit, RedisPermit)> = Vec::new();
    let mut released = None;
    let mut compared = 0;
    for (i, step) in steps.iter().enumerate() {
        let (a, b) = match step {
            PStep::Acquire(uses) => {
                let uses: Vec<ScopeUse<'_>> = uses
                    .iter()
                    .map(|&(s, amount)| ScopeUse::with_amount(s, amount))
                    .collect();
                let pa = core.try_acquire(&uses, now);
                let pb = redis.try_acquire(&uses, now).unwrap();
                if let Err(NotReady::NotUntil(t)) = pa {
                    last_until = Some(t);
                }
                let answers = (acquire_text(&pa), acquire_text(&pb));
                if let (Ok(x), Ok(y)) = (pa, pb) {
                    held.push((x, y));
                }
                answers
            }
            PStep::Release(n, out) => {
                if held.is_empty() {
                    continue;
                }
                let (x, y) = held.remove(n % held.len());
                released = Some((x, y));
                let o = out.outcome();
                (
                    core.release(x, &o, now).to_string(),
                    redis.release(y, &o, now).unwrap().to_string(),
                )
            }
            PStep::ReleaseAgain => {
                let Some((x, y)) = released else { continue };
                let o = Outcome::status(429);
                (
                    core.release(x, &o, now).to_string(),
                    redis.release(y, &o, now).unwrap().to_string(),
                )
            }
            PStep::Advance(ms) => {
                now += std::time::Duration::from_millis(*ms);
                continue;
            }
            PStep::Sleep => {
                if let Some(t) = last_until.take() {
                    now = now.max(t);
                }
                continue;
            }
        };
        assert_eq!(
            a, b,
            "{name} step {i} ({step:?}) at {now:?}: in-process vs redis"
        );
        compared += 1;
        for s in scopes {
            let ca = core.scopes().find(|(n, _)| n == s).map(|(_, st)| st);
            let cb = redis.scope_stats_raw(s).unwrap();
            match (ca, cb) {
                (None, None) => {}
                (Some(cs), Some(rs)) => assert_eq!(
                    core_stats(&cs),
                    redis_stats(&rs),
                    "{name} step {i} ({step:?}) at {now:?}: scope {s} state differs"
                ),
                (x, y) => panic!(
                    "{name} step {i} ({step:?}): scope {s} exists in-process {}, in redis {}",
                    x.is_some(),
                    y.is_some()
                ),
            }
        }
    }
    assert_eq!(
        redis.info().unwrap().permits,
        held.len() as u64,
        "{name}: permits held"
    );
    compared
}

#[test]
fn standalone_permits_scripted() {
    let mut s = base()
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(2))
        .with_scope(
            "api",
            ScopeConfig::new().quota(5.0).window(10.0).concurrency(0),
        );
    s.backoff_window = 10.0;
    s.concurrent_requests = 3;
    let mut steps = vec![
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Sleep,
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Release(0, Out::RetryAfter(429, 7)),
        PStep::ReleaseAgain,
        PStep::Acquire(vec![("a.com", 1.0)]),
        PStep::Sleep,
        PStep::Acquire(vec![("a.com", 1.0), ("api", 2.0)]),
        PStep::Acquire(vec![("api", 2.0), ("api", 1.0)]),
        PStep::Acquire(vec![("b.com", 1.0)]),
        PStep::Release(0, Out::Spent(200, 4)),
        PStep::Acquire(vec![("api", 1.0)]),
        PStep::Sleep,
        PStep::Acquire(vec![("api", f64::NAN), ("x.org", -1.0)]),
    ];
    for round in 0..15 {
        steps.extend([
            PStep::Release(
                round,
                [Out::Ok, Out::Status(503), Out::Cancelled][round % 3],
            ),
            PStep::Acquire(vec![("a.com", 1.0), ("api", 1.5)]),
            PStep::Advance(700),
            PStep::Acquire(vec![("a.com", 1.0)]),
            PStep::Sleep,
            PStep::Acquire(vec![("api", 1.0)]),
        ]);
    }
    run_permits(
        "permits_scripted",
        s,
        &["a.com", "api", "b.com", "x.org"],
        &steps,
    );
}

fn random_permit_steps(rng: &mut Rng, n: usize) -> Vec<PStep> {
    const SCOPES: [&str; 7] = [
        "a.com",
        "b.com",
        "c.com",
        "d.com",
        "10.0.0.1:8080",
        "localhost:9",
        "api",
    ];
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let step = match rng.below(100) {
            0..=44 => {
                let k = 1 + rng.below(3) as usize;
                let uses = (0..k)
                    .map(|_| {
                        let amount = rng.pick(&[1.0, 1.0, 2.0, 0.5, -1.0, f64::NAN]);
                        (rng.pick(&SCOPES), amount)
                    })
                    .collect();
                PStep::Acquire(uses)
            }
            45..=69 => {
                let out = match rng.below(10) {
                    0 => Out::Status(429),
                    1 => Out::RetryAfter(503, rng.below(20) as u32),
                    2 => Out::Error("timeout"),
                    3 => Out::Status(500),
                    4 => Out::Cancelled,
                    5 => Out::Spent(200, rng.below(10) as u32),
                    _ => Out::Ok,
                };
                PStep::Release(rng.below(8) as usize, out)
            }
            70..=71 => PStep::ReleaseAgain,
            72..=85 => PStep::Advance(rng.below(3000)),
            _ => PStep::Sleep,
        };
        steps.push(step);
    }
    steps
}

#[test]
fn standalone_permits_random() {
    let mut total = 0;
    for seed in 400..=415u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (s, _) = random_settings(&mut rng, seed % 2 == 1);
        let steps = random_permit_steps(&mut rng, 250);
        total += run_permits(&format!("permits seed {seed}"), s, &RANDOM_SCOPES, &steps);
    }
    if server().is_some() {
        assert!(total > 16 * 150, "compared {total} answers");
    }
}
