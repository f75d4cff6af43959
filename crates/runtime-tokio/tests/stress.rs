//! 1,000 tasks acquiring and finishing on 100 scopes for a few seconds of real time on a
//! multi-threaded runtime: in flight never exceeds any scope's concurrency, every task
//! keeps making progress, and no permit leaks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use polite_runtime_tokio::{Clock, Throttle};
use polite_throttle_core::{Outcome, ScopeConfig, ScopeUse, Settings};

const TASKS: usize = 1000;
const SCOPES: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tasks_on_a_hundred_scopes() {
    let mut settings = Settings::default().without_jitter();
    settings.concurrent_requests = 64;
    for s in 0..SCOPES {
        // Concurrency 1 to 3, some with a small delay.
        let mut c = ScopeConfig::new().concurrency(1 + (s % 3) as u32);
        if s % 4 == 0 {
            c = c.delay(0.002);
        }
        settings = settings.with_scope(format!("s{s}"), c);
    }
    let limits: Vec<u32> = (0..SCOPES).map(|s| 1 + (s % 3) as u32).collect();
    let throttle = Throttle::new(settings, Clock::wall()).unwrap();
    let in_flight: Arc<Vec<AtomicU32>> = Arc::new((0..SCOPES).map(|_| AtomicU32::new(0)).collect());
    let global = Arc::new(AtomicU32::new(0));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..TASKS).map(|_| AtomicU64::new(0)).collect());
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let (throttle, in_flight, global, done) = (
            throttle.clone(),
            in_flight.clone(),
            global.clone(),
            done.clone(),
        );
        let limits = limits.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                // One or two scopes per request, chosen by the task and its round.
                let a = (task * 7 + n as usize) % SCOPES;
                let b = (task * 13 + n as usize * 3) % SCOPES;
                let names = [format!("s{a}"), format!("s{b}")];
                // One request in eight needs two scopes (a host and an IP, say).
                let uses: Vec<ScopeUse<'_>> = if a == b || !(task + n as usize).is_multiple_of(8) {
                    vec![ScopeUse::new(&names[0])]
                } else {
                    vec![ScopeUse::new(&names[0]), ScopeUse::new(&names[1])]
                };
                let scopes: Vec<usize> = if uses.len() == 1 { vec![a] } else { vec![a, b] };
                let permit = throttle.acquire(&uses).await;
                for &s in &scopes {
                    let now = in_flight[s].fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(
                        now <= limits[s],
                        "scope s{s}: {now} in flight, limit {}",
                        limits[s]
                    );
                }
                let g = global.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(g <= 64, "{g} in flight, global cap 64");
                tokio::time::sleep(Duration::from_micros(200 + (n % 5) * 100)).await;
                global.fetch_sub(1, Ordering::SeqCst);
                for &s in &scopes {
                    in_flight[s].fetch_sub(1, Ordering::SeqCst);
                }
                // Mixed outcomes (500 is not a backoff trigger: a backed-off scope would
                // drain its waiters at one a second and turn this into a timing test).
                let status = if (task + n as usize).is_multiple_of(7) {
                    500
                } else {
                    200
                };
                if n % 11 == 5 {
                    drop(permit); // released untracked
                } else {
                    permit.finish(&Outcome::status(status));
                }
                n += 1;
                done[task].store(n, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.expect("a task panicked");
    }
    let counts: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
    let total: u64 = counts.iter().sum();
    let starved = counts.iter().filter(|&&c| c == 0).count();
    eprintln!(
        "{total} acquisitions by {TASKS} tasks; fewest {} most {}",
        counts.iter().min().unwrap(),
        counts.iter().max().unwrap()
    );
    assert_eq!(starved, 0, "{starved} tasks never got a permit");
    let (in_flight_left, waiting) =
        throttle.with_throttler(|t, _| (t.in_flight(), t.stats().waiting));
    assert_eq!(
        (in_flight_left, waiting),
        (0, 0),
        "no permit or place leaked"
    );
}
