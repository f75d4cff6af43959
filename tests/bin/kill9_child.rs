//! The child of the kill -9 tests: opens a frontier on a store and pushes, polls,
//! completes, retries and flushes at full speed, printing what is durable after each
//! flush, until it is killed.
//!
//!     kill9-child STORE PATH FIRST_ID SEED
//!
//! Output lines:
//! - `C id`: request `id` is about to be completed (written before the store is asked);
//! - `P n`: every request with an id below `n` (from FIRST_ID) has been pushed durably;
//! - `A id`: request `id` was acknowledged durably.
//!
//! `P` and `A` lines are written after the flush that made them durable.
#![allow(clippy::print_stdout)]

use std::io::Write;

use polite_frontier_core::{Durability, Frontier, FrontierConfig, Poll, Request, Store};
use polite_throttle_core::{Outcome, Timestamp};
use workspace_tests::{KillStore, open_settings, open_store, request_url};

/// Tells the parent a request is about to be completed (it may vanish from the store
/// from now on), before asking the store.
fn announce(id: Option<u64>) -> std::io::Result<()> {
    if let Some(id) = id {
        let mut out = std::io::stdout().lock();
        writeln!(out, "C {id}")?;
        out.flush()?;
    }
    Ok(())
}

fn run<S: Store>(store: S, first_id: u64, seed: u64) -> Result<(), Box<dyn std::error::Error>>
where
    S::Error: 'static,
{
    let mut frontier = Frontier::open(
        open_settings(),
        FrontierConfig::default(),
        store,
        Timestamp::ZERO,
    )
    .map_err(|e| e.to_string())?;
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut id = first_id;
    let mut acked = Vec::new();
    let mut held = Vec::new();
    let out = std::io::stdout();
    loop {
        for _ in 0..1 + next() % 12 {
            let req = Request::get(request_url(id))
                .callback("parse")
                .priority((next() % 5) as i32);
            frontier
                .push(&req, Timestamp::ZERO)
                .map_err(|e| e.to_string())?;
            id += 1;
        }
        for _ in 0..next() % 40 {
            match frontier.poll(Timestamp::ZERO).map_err(|e| e.to_string())? {
                Poll::Ready(lease) => match next() % 10 {
                    0 => held.push(lease),
                    1 => {
                        frontier
                            .retry(lease.id(), &Outcome::Cancelled, 0, Timestamp::ZERO)
                            .map_err(|e| e.to_string())?;
                    }
                    _ => {
                        let done = workspace_tests::request_id(&lease.request.url);
                        announce(done)?;
                        frontier
                            .complete(lease.id(), &Outcome::status(200), Timestamp::ZERO)
                            .map_err(|e| e.to_string())?;
                        acked.extend(done);
                    }
                },
                _ => break,
            }
        }
        // Some held leases finish later; the rest are in flight when the kill comes.
        if held.len() > 20 {
            let lease = held.remove(0);
            let done = workspace_tests::request_id(&lease.request.url);
            announce(done)?;
            frontier
                .complete(lease.id(), &Outcome::status(200), Timestamp::ZERO)
                .map_err(|e| e.to_string())?;
            acked.extend(done);
        }
        frontier.checkpoint().map_err(|e| e.to_string())?;
        let mut out = out.lock();
        writeln!(out, "P {id}")?;
        for a in acked.drain(..) {
            writeln!(out, "A {a}")?;
        }
        out.flush()?;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        return Err("usage: kill9-child STORE PATH FIRST_ID SEED".into());
    }
    let kind: KillStore = args[1].parse()?;
    let first_id: u64 = args[3].parse()?;
    let seed: u64 = args[4].parse()?;
    let durability = match seed % 3 {
        0 => Durability::EveryOp,
        1 => Durability::Batched {
            max_ops: 50,
            max_delay: std::time::Duration::from_millis(2),
        },
        _ => Durability::OnClose,
    };
    match open_store(kind, std::path::Path::new(&args[2]), durability)? {
        workspace_tests::AnyStore::Sqlite(s) => run(s, first_id, seed),
        workspace_tests::AnyStore::Fs(s) => run(s, first_id, seed),
    }
}
