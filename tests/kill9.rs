//! Crash safety: a child process pushes, leases, completes and retries at full speed on a
//! persistent store; the parent kills it with SIGKILL at random moments, reopens the
//! store and checks that nothing reported durable was lost, that durably acknowledged
//! requests never come back, that leases still out are delivered again, and that nothing
//! is queued twice.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use polite_frontier_core::{Durability, Frontier, FrontierConfig, Poll, Store};
use polite_throttle_core::Timestamp;
use workspace_tests::{AnyStore, KillStore, open_settings, open_store, request_id};

const ROUNDS: u64 = 50;

/// Every request still in the store (leasing each once; the store is then dropped
/// without completing anything, so the next child gets them back).
fn queued_ids<S: Store>(store: S) -> (Vec<u64>, u64)
where
    S::Error: std::fmt::Display,
{
    // Without the saved throttle states: a host the child backed off must not hide
    // its requests from this inventory.
    let config = FrontierConfig::default().persist_scope_states(false);
    let mut f = Frontier::open(open_settings(), config, store, Timestamp::ZERO)
        .unwrap_or_else(|e| panic!("reopening after a kill failed: {e}"));
    let redelivered = f.stats().redelivered;
    let mut ids = Vec::new();
    loop {
        match f.poll(Timestamp::ZERO) {
            Ok(Poll::Ready(l)) => ids.push(request_id(&l.request.url).expect("test URL")),
            Ok(_) => break,
            Err(e) => panic!("reading the store after a kill failed: {e}"),
        }
    }
    drop(f.abandon());
    (ids, redelivered)
}

fn kill_rounds(kind: KillStore) {
    let dir = tempfile::tempdir().unwrap();
    let mut durable_pushed: Vec<(u64, u64)> = Vec::new();
    let mut acked: HashSet<u64> = HashSet::new();
    let mut completing: HashSet<u64> = HashSet::new();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut redelivered_total = 0;
    let mut lines_total = 0;
    for round in 0..ROUNDS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let first_id = round * 10_000_000;
        let mut child = Command::new(env!("CARGO_BIN_EXE_kill9-child"))
            .args([
                kind.name(),
                dir.path().to_str().unwrap(),
                &first_id.to_string(),
                &round.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the child");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let run_for = Duration::from_millis(20 + rng % 200);
        let started = Instant::now();
        let mut pushed_end = first_id;
        let mut handle = |line: String| {
            lines_total += 1;
            let (tag, n) = line.split_once(' ').expect("child output");
            let n: u64 = n.parse().expect("child output");
            match tag {
                "P" => pushed_end = pushed_end.max(n),
                "A" => {
                    acked.insert(n);
                }
                "C" => {
                    completing.insert(n);
                }
                other => panic!("unexpected child output {other:?}"),
            }
        };
        while started.elapsed() < run_for {
            match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(line) => handle(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        // SIGKILL: no destructor, no flush.
        child.kill().expect("killing the child");
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child must die by the signal");
        // What it printed before dying was durable when printed.
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(50)) {
            handle(line);
        }
        durable_pushed.push((first_id, pushed_end));

        // Reading only (its lease marks are not the point): no fsync per lease.
        let store = open_store(kind, dir.path(), Durability::OnClose).expect("reopening");
        let (ids, redelivered) = match store {
            AnyStore::Sqlite(s) => queued_ids(s),
            AnyStore::Fs(s) => queued_ids(s),
        };
        redelivered_total += redelivered;
        let queued: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(
            queued.len(),
            ids.len(),
            "round {round}: a request is queued twice"
        );
        for &(start, end) in &durable_pushed {
            for id in start..end {
                assert!(
                    queued.contains(&id) || completing.contains(&id),
                    "round {round}: request {id} was pushed durably, never completed, but is lost"
                );
            }
        }
        for id in &acked {
            assert!(
                !queued.contains(id),
                "round {round}: request {id} was acknowledged durably but came back"
            );
        }
    }
    assert!(
        lines_total > ROUNDS,
        "the children made progress before being killed"
    );
    assert!(
        redelivered_total > 0,
        "leases in flight at a kill were delivered again"
    );
    eprintln!(
        "{}: {ROUNDS} kills, {} durable acks, {redelivered_total} leases redelivered",
        kind.name(),
        acked.len()
    );
}

#[test]
fn sqlite_survives_kill_9() {
    kill_rounds(KillStore::Sqlite);
}

#[test]
fn fs_survives_kill_9() {
    kill_rounds(KillStore::Fs);
}
