//! Unit tests of docs/behaviour.md sections 2 and 3 on a fake clock, by topic; shared helpers.

// Many tests take permits only to keep requests in flight.
#![allow(unused_must_use, clippy::field_reassign_with_default)]

use super::*;
use crate::config::{BackoffConfig, BackoffTarget, Jitter, Rampup, RampupConfig};
use crate::outcome::Outcome;
use crate::scope::{ScopeSnapshot, ScopeStats};
use crate::time::secs_to_duration;
use std::{boxed::Box, format, string::String, vec, vec::Vec};

mod admission;
mod backoff;
mod controls;
mod eviction;
mod header_delays;
mod lazy_updates;
mod observability;
mod quotas;
mod rampup;
mod regressions;
mod send_spacing;
mod waiters;

fn at(secs: f64) -> Timestamp {
    Timestamp::from_secs_f64(secs)
}

fn new(settings: Settings) -> Throttler {
    Throttler::new(settings.without_jitter(), Timestamp::ZERO).unwrap()
}

fn acquire(t: &mut Throttler, scope: &str, now: f64) -> Result<Permit, NotReady> {
    t.try_acquire(&[ScopeUse::new(scope)], at(now))
}

#[track_caller]
fn admit(t: &mut Throttler, scope: &str, now: f64) -> Permit {
    match acquire(t, scope, now) {
        Ok(p) => p,
        Err(e) => panic!("{scope} not admitted at {now}: {e:?}"),
    }
}

#[track_caller]
fn finish(t: &mut Throttler, p: Permit, status: u16, now: f64) {
    assert!(t.release(p, &Outcome::status(status), at(now)));
}

fn stats(t: &mut Throttler, scope: &str, now: f64) -> ScopeStats {
    t.scope_stats(scope, at(now))
        .expect("scope state in memory")
}

fn not_until(secs: f64) -> Result<Permit, NotReady> {
    Err(NotReady::NotUntil(at(secs)))
}

fn rampup_settings() -> Settings {
    Settings::default().with_scope(
        "api",
        ScopeConfig::new()
            .delay(1.0)
            .max_concurrency(3)
            .rampup(RampupConfig::default().delay_factor(0.5).min_delay(0.25)),
    )
}

fn quota_settings() -> Settings {
    Settings::default().with_scope(
        "cost",
        ScopeConfig::new().concurrency(0).quota(10.0).window(60.0),
    )
}

fn spend(t: &mut Throttler, amount: f64, now: f64) -> Result<Permit, NotReady> {
    t.try_acquire(&[ScopeUse::with_amount("cost", amount)], at(now))
}

fn waiter(t: &mut Throttler, scopes: &[&str], now: f64) -> Ticket {
    let uses: Vec<ScopeUse<'_>> = scopes.iter().map(|s| ScopeUse::new(s)).collect();
    match t.try_acquire_or_enqueue(&uses, RequestFlags::default(), at(now)) {
        Ok(_) => panic!("expected to wait"),
        Err((ticket, _)) => ticket,
    }
}

fn wakeups(t: &mut Throttler) -> Vec<Ticket> {
    core::iter::from_fn(|| t.poll_wakeup()).collect()
}

fn touch(t: &mut Throttler, scope: &str, now: f64) {
    let p = admit(t, scope, now);
    finish(t, p, 200, now);
}
