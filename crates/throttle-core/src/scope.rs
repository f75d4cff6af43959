//! One scope's throttling state: delay and jitter, concurrency, backoff and recovery,
//! rampup, quotas and hard delays.
//!
//! The throttler calls [`ScopeState::advance`] with `now` before any decision or record,
//! which applies the lazy updates due at or before it (recovery steps, rampup windows,
//! quota windows); the other methods assume it was called. So the state is a pure
//! function of the calls made and the times they were made at.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::time::Duration;

use crate::config::{BackoffTarget, Jitter, Rampup, ScopeConfig, Settings};
use crate::rng::JitterRng;
use crate::time::{Timestamp, secs_to_duration};

/// Rampup snaps the delay to its floor once it gets closer than this (seconds), so that a
/// floor of 0 is reached in a bounded number of halvings and concurrency can start rising.
const RAMPUP_SNAP: f64 = 0.001;

/// Backoff levels beyond this are clamped (a restored snapshot cannot make recovery
/// loop for ages; at the default window it is a week of recovery).
pub(crate) const MAX_LEVEL: u16 = 10_000;

/// What kind of thing a scope name denotes; decides its default concurrency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// An IP literal (v4 or v6, with or without a port): `concurrent_requests_per_ip`.
    Ip,
    /// A name with at least one dot: `concurrent_requests_per_domain`.
    Domain,
    /// Anything else (`localhost`, `api`, `cost`): `throttling_scope_concurrency`.
    Other,
}

impl ScopeKind {
    /// Classifies a scope name.
    ///
    /// ```
    /// use polite_throttle_core::hooks::ScopeKind;
    ///
    /// assert_eq!(ScopeKind::of("10.0.0.1:8080"), ScopeKind::Ip);
    /// assert_eq!(ScopeKind::of("[::1]:443"), ScopeKind::Ip);
    /// assert_eq!(ScopeKind::of("books.toscrape.com"), ScopeKind::Domain);
    /// assert_eq!(ScopeKind::of("localhost:8000"), ScopeKind::Other);
    /// assert_eq!(ScopeKind::of("cost"), ScopeKind::Other);
    /// ```
    pub fn of(name: &str) -> ScopeKind {
        if is_ip_literal(name) {
            ScopeKind::Ip
        } else if name.bytes().any(|b| b == b'.') {
            ScopeKind::Domain
        } else {
            ScopeKind::Other
        }
    }
}

fn is_ip_literal(name: &str) -> bool {
    if let Some(rest) = name.strip_prefix('[') {
        let Some((inner, tail)) = rest.split_once(']') else {
            return false;
        };
        return inner.parse::<Ipv6Addr>().is_ok() && (tail.is_empty() || is_port(tail));
    }
    // Every scope a new host brings is classified once, so the common case (a host
    // name) is ruled out by its characters before any address parser runs: an address
    // without brackets has only hex digits, dots and colons. A host name fails at its
    // first letter past `f`, usually the first.
    if !name
        .bytes()
        .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b':')
    {
        return false;
    }
    if name.parse::<Ipv6Addr>().is_ok() || name.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    match name.rsplit_once(':') {
        Some((host, port)) => host.parse::<Ipv4Addr>().is_ok() && port_digits(port),
        None => false,
    }
}

/// `:` followed by a port number.
fn is_port(tail: &str) -> bool {
    tail.strip_prefix(':').is_some_and(port_digits)
}

fn port_digits(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// Backoff parameters of one scope, with the global settings filled in.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BackoffParams {
    codes: [u64; 10],
    exceptions: Box<[Box<str>]>,
    /// Delay multiplier per backoff level.
    pub factor: f64,
    /// The delay of the first backoff level, in seconds.
    pub min_delay: f64,
    /// The highest backoff delay, in seconds.
    pub max_delay: f64,
    /// Jitter applied to backoff delays.
    pub jitter: Jitter,
}

impl BackoffParams {
    /// The HTTP statuses that trigger a backoff step, in increasing order.
    pub fn http_codes(&self) -> impl Iterator<Item = u16> + '_ {
        (0u16..640).filter(|&c| self.triggers_on_status(c))
    }

    /// The error kinds that trigger a backoff step.
    pub fn exceptions(&self) -> &[Box<str>] {
        &self.exceptions
    }

    pub(crate) fn triggers_on_status(&self, status: u16) -> bool {
        let s = usize::from(status);
        s < 640 && self.codes[s / 64] & (1 << (s % 64)) != 0
    }

    pub(crate) fn triggers_on_error(&self, kind: &str) -> bool {
        self.exceptions.iter().any(|e| **e == *kind)
    }
}

/// Rampup parameters of one scope, with the defaults filled in.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RampupParams {
    /// Backoff triggers per window that hold the rate ([lo, hi]).
    pub target: BackoffTarget,
    /// Delay multiplier when the rate goes up.
    pub delay_factor: f64,
    /// The lowest delay rampup goes down to, in seconds.
    pub min_delay: f64,
    /// Whether an overshoot undoes the last step.
    pub step_back: bool,
}

/// A scope's configuration resolved against the global settings: what a fresh state of
/// that scope starts from. The throttler resolves its scopes this way; code that runs
/// the same rules elsewhere (polite-store-redis's server-side script) reads them from here.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ScopeParams {
    /// The starting concurrency limit (0 = unlimited).
    pub concurrency: u32,
    /// The concurrency configured for this scope, if any.
    pub explicit_concurrency: Option<u32>,
    /// The delay configured for this scope, if any.
    pub explicit_delay: Option<f64>,
    /// The lowest concurrency backoff and rampup go down to.
    pub min_concurrency: u32,
    /// The highest concurrency rampup goes up to.
    pub max_concurrency: u32,
    /// The base delay between sends, in seconds.
    pub delay: f64,
    /// Jitter applied to the delay.
    pub jitter: Jitter,
    /// The quota per window, if any.
    pub quota: Option<f64>,
    /// The quota window.
    pub quota_window: Duration,
    /// The window of backoff recovery and rampup.
    pub backoff_window: Duration,
    /// Rampup, if enabled.
    pub rampup: Option<RampupParams>,
    /// Backoff.
    pub backoff: BackoffParams,
    /// Whether robots.txt Crawl-delay is ignored for this scope.
    pub ignore_robots_txt: bool,
}

impl ScopeParams {
    /// Resolves `config` (possibly empty) for a scope of `kind`.
    pub fn resolve(settings: &Settings, kind: ScopeKind, config: &ScopeConfig) -> Self {
        let kind_default = match kind {
            ScopeKind::Ip if settings.concurrent_requests_per_ip > 0 => {
                settings.concurrent_requests_per_ip
            }
            ScopeKind::Ip | ScopeKind::Domain => settings.concurrent_requests_per_domain,
            ScopeKind::Other => settings.throttling_scope_concurrency,
        };
        let min_concurrency = config.min_concurrency.unwrap_or(1);
        let backoff_window = secs_to_duration(settings.backoff_window);
        let rampup = match &config.rampup {
            // A zero-length window turns rampup off (Scrapy's meaning): the scope runs as
            // one configured without it.
            Rampup::Off => None,
            Rampup::On(_) if backoff_window.is_zero() => None,
            Rampup::On(r) => Some(RampupParams {
                target: r.backoff_target.unwrap_or(settings.rampup_backoff_target),
                delay_factor: r.delay_factor.unwrap_or(0.5),
                min_delay: r.min_delay.unwrap_or(0.0),
                step_back: r.step_back.unwrap_or(false),
            }),
        };
        let concurrency = match (config.concurrency, rampup.is_some()) {
            (Some(c), _) => c,
            (None, true) => min_concurrency,
            (None, false) if kind_default == 0 => 0,
            (None, false) => kind_default.max(min_concurrency),
        };
        let b = config.backoff.clone().unwrap_or_default();
        let mut codes = [0u64; 10];
        for &c in b
            .http_codes
            .as_ref()
            .unwrap_or(&settings.backoff_http_codes)
        {
            let c = usize::from(c);
            if c < 640 {
                codes[c / 64] |= 1 << (c % 64);
            }
        }
        let exceptions: Vec<Box<str>> = b
            .exceptions
            .as_ref()
            .unwrap_or(&settings.backoff_exceptions)
            .iter()
            .map(|e| Box::from(e.as_str()))
            .collect();
        ScopeParams {
            concurrency,
            explicit_concurrency: config.concurrency,
            explicit_delay: config.delay,
            min_concurrency,
            max_concurrency: config
                .max_concurrency
                .unwrap_or(settings.concurrent_requests),
            delay: config.delay.unwrap_or(settings.download_delay),
            jitter: config.jitter.unwrap_or(settings.randomize_download_delay),
            quota: config.quota,
            quota_window: secs_to_duration(config.window.unwrap_or(settings.throttling_window)),
            backoff_window,
            rampup,
            backoff: BackoffParams {
                codes,
                exceptions: exceptions.into_boxed_slice(),
                factor: b.delay_factor.unwrap_or(settings.backoff_delay_factor),
                min_delay: b.min_delay.unwrap_or(settings.backoff_min_delay),
                max_delay: b.max_delay.unwrap_or(settings.backoff_max_delay),
                jitter: b.jitter.unwrap_or(settings.backoff_jitter),
            },
            ignore_robots_txt: config.ignore_robots_txt,
        }
    }
}

/// Whether one scope lets a request through right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    /// A delay, hard backoff or quota window holds it until then, or the scope is full
    /// and its next rampup boundary may raise its concurrency then.
    NotUntil(Timestamp),
    /// All concurrency slots are taken.
    Full,
}

/// The mutable state of one scope.
///
/// Laid out for the scheduler's hot path (`repr(C)` keeps the order, the alignment puts
/// a state at the start of a cache line): an admission and a completion of a scope
/// without backoff, rampup, quota or waiters touch only its first cache line, so at
/// thousands of scopes a poll loads (and prefetches, see
/// [`Throttler::prefetch_hint`](crate::Throttler::prefetch_hint)) one line of it, not
/// the four it spans. Three things make the counters fit that line: the completions are
/// not counted in it but derived (see [`done`](Self::done)), the last send time has no
/// `Option` tag (see [`last_sent`](Self::last_sent)), and the backoff level, capped at
/// [`MAX_LEVEL`], takes 16 bits.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct ScopeState {
    // First line: the gates and the counters every send and completion updates.
    pub(crate) next_allowed: Timestamp,
    pub(crate) hard_until: Timestamp,
    pub(crate) delay: f64,
    pub(crate) last_used: Timestamp,
    pub(crate) sent: u64,
    /// The last send, [`NEVER`] before the first (read it through
    /// [`last_sent`](Self::last_sent)).
    last_sent_at: Timestamp,
    pub(crate) params: u32,
    pub(crate) concurrency: u32,
    pub(crate) active: u32,
    /// At most [`MAX_LEVEL`].
    pub(crate) level: u16,
    /// `false` for a vacant slot (an evicted state whose slot awaits reuse).
    pub(crate) live: bool,
    // The rest: waiters, backoff recovery, rampup and quota windows, eviction.
    /// What makes [`done`](Self::done) out of `sent` and `active` (wrapping arithmetic).
    done_offset: u64,
    pub(crate) waiters: VecDeque<u64>,
    pub(crate) window_triggers: u32,
    pub(crate) base_delay: f64,
    /// Start of the current recovery countdown (last trigger or last recovery step).
    pub(crate) backoff_anchor: Timestamp,
    /// Start of the current rampup window (rampup scopes, after the first send).
    pub(crate) ramp_start: Option<Timestamp>,
    /// Start of the current quota window (quota scopes, after the first send).
    pub(crate) quota_start: Option<Timestamp>,
    pub(crate) consumed: f64,
    /// A robots.txt Crawl-delay in force: rampup never goes below it, nor above one
    /// request at a time.
    pub(crate) robots_floor: Option<f64>,
    pub(crate) triggers: u64,
    pub(crate) name: Box<str>,
}

/// The bytes of a [`ScopeState`] that an admission and a completion without backoff,
/// rampup, quota or waiters touch (its first cache line).
pub(crate) const HOT_BYTES: usize = 64;

/// [`ScopeState::last_sent`]'s "no send yet" inside the state: a send at the very last
/// representable instant (584 years after the epoch) reads as none.
const NEVER: Timestamp = Timestamp::MAX;

impl ScopeState {
    pub(crate) fn new(name: &str, params_index: u32, p: &ScopeParams, now: Timestamp) -> Self {
        Self::blank(name, params_index, p.delay, p.concurrency, now)
    }

    fn blank(name: &str, params: u32, delay: f64, concurrency: u32, now: Timestamp) -> Self {
        ScopeState {
            live: true,
            name: Box::from(name),
            params,
            base_delay: delay,
            delay,
            concurrency,
            active: 0,
            level: 0,
            next_allowed: Timestamp::ZERO,
            hard_until: Timestamp::ZERO,
            last_sent_at: NEVER,
            backoff_anchor: now,
            ramp_start: None,
            window_triggers: 0,
            quota_start: None,
            consumed: 0.0,
            robots_floor: None,
            sent: 0,
            done_offset: 0,
            triggers: 0,
            last_used: now,
            waiters: VecDeque::new(),
        }
    }

    /// A placeholder for a slot whose state was evicted (allocates nothing).
    pub(crate) fn vacant() -> Self {
        let mut s = ScopeState::blank("", 0, 0.0, 0, Timestamp::ZERO);
        s.live = false;
        s
    }

    /// Applies every lazy update due at or before `now`, in time order (a recovery step
    /// before a rampup boundary at the same instant).
    #[inline]
    pub(crate) fn advance(&mut self, p: &ScopeParams, now: Timestamp) {
        // The usual case: nothing lazy pending (no backoff level, no rampup window, no
        // quota window running).
        // (The parameters first: a scope without rampup or quota never reads the
        // state's window starts, which lie outside its hot lines.)
        if self.level == 0
            && (p.rampup.is_none() || self.ramp_start.is_none())
            && (p.quota.is_none() || self.quota_start.is_none())
        {
            return;
        }
        self.advance_windows(p, now);
    }

    fn advance_windows(&mut self, p: &ScopeParams, now: Timestamp) {
        if let (Some(start), Some(_)) = (self.quota_start, p.quota) {
            if p.quota_window.is_zero() {
                // A zero-length quota window elapses at once: the count starts afresh at
                // every request (Scrapy's meaning).
                self.consumed = 0.0;
            } else if let Some(elapsed) = now.checked_duration_since(start) {
                let windows = div_duration(elapsed, p.quota_window);
                if windows > 0 {
                    self.quota_start = Some(start + mul_duration(p.quota_window, windows));
                    self.consumed = 0.0;
                }
            }
        }
        let window = p.backoff_window;
        if window.is_zero() {
            // Each zero-length window elapses at once: every recovery step is due now
            // (and rampup is off, see `ScopeParams::resolve`).
            if self.level > 0 {
                self.level = 0;
                self.delay = self.base_delay;
                event!(debug, scope = %self.name, level = 0, delay = self.delay, "backoff recovery step");
            }
            return;
        }
        loop {
            let recovery_at = (self.level > 0).then(|| self.backoff_anchor + window);
            let ramp_at = match (p.rampup, self.ramp_start) {
                (Some(_), Some(start)) => Some(start + window),
                _ => None,
            };
            let recover = match (recovery_at, ramp_at) {
                (Some(r), Some(w)) if r <= now && r <= w => true,
                (Some(r), None) if r <= now => true,
                (_, Some(w)) if w <= now => false,
                _ => break,
            };
            if recover {
                self.recovery_step(p);
            } else {
                let Some(r) = p.rampup else { break };
                self.rampup_boundary(p, &r);
                // Nothing left to gain: skip the remaining quiet windows in one jump.
                if self.level == 0
                    && self.window_triggers == 0
                    && self.ramp_saturated(p, &r)
                    && let Some(start) = self.ramp_start
                {
                    let skip = div_duration(now.saturating_duration_since(start), window);
                    self.ramp_start = Some(start + mul_duration(window, skip));
                }
            }
        }
    }

    fn recovery_step(&mut self, p: &ScopeParams) {
        self.level -= 1;
        self.backoff_anchor += p.backoff_window;
        if self.level == 0 {
            self.delay = self.base_delay;
        } else {
            self.delay = (self.delay / p.backoff.factor)
                .max(self.base_delay)
                .max(p.backoff.min_delay);
        }
        event!(debug, scope = %self.name, level = self.level, delay = self.delay, "backoff recovery step");
    }

    fn rampup_boundary(&mut self, p: &ScopeParams, r: &RampupParams) {
        let triggers = core::mem::take(&mut self.window_triggers);
        if let Some(start) = self.ramp_start {
            self.ramp_start = Some(start + p.backoff_window);
        }
        // lo..=hi triggers hold the rate; more than hi was handled by backoff.
        if triggers >= r.target.low || self.level > 0 {
            return;
        }
        let floor = r.min_delay.max(self.robots_floor.unwrap_or(0.0));
        if self.delay > floor {
            let mut next = (self.delay * r.delay_factor).max(floor);
            if next - floor < RAMPUP_SNAP {
                next = floor;
            }
            self.delay = next;
            self.base_delay = next;
            event!(debug, scope = %self.name, delay = next, "rampup: delay lowered");
        } else if self.robots_floor.is_none()
            && self.concurrency != 0
            && self.concurrency < p.max_concurrency
        {
            self.concurrency += 1;
            event!(debug, scope = %self.name, concurrency = self.concurrency, "rampup: concurrency raised");
        }
    }

    /// The first trigger beyond the target in a window: rampup went a step too far, so
    /// that step is undone (the last concurrency raise, or else the last delay cut), never
    /// past the scope's starting concurrency or delay. Without it a rampup that overshot
    /// the server's limit would stay there, backing off and recovering to the same too-fast
    /// base for ever.
    fn rampup_step_back(&mut self, p: &ScopeParams, r: &RampupParams) {
        let floor = r.min_delay.max(self.robots_floor.unwrap_or(0.0));
        if self.base_delay <= floor && self.concurrency > p.concurrency && p.concurrency != 0 {
            self.concurrency -= 1;
            event!(debug, scope = %self.name, concurrency = self.concurrency, "rampup: stepped back (concurrency)");
        } else if self.base_delay < p.delay.max(floor) {
            let back = if self.base_delay > 0.0 {
                self.base_delay / r.delay_factor
            } else {
                floor
            };
            self.base_delay = back.min(p.delay.max(floor));
            self.delay = self.delay.max(self.base_delay);
            event!(debug, scope = %self.name, delay = self.base_delay, "rampup: stepped back (delay)");
        }
    }

    fn ramp_saturated(&self, p: &ScopeParams, r: &RampupParams) -> bool {
        let floor = r.min_delay.max(self.robots_floor.unwrap_or(0.0));
        self.delay <= floor
            && (self.robots_floor.is_some()
                || self.concurrency == 0
                || self.concurrency >= p.max_concurrency)
    }

    /// Whether a request consuming `amount` of this scope may go at `now`.
    #[inline]
    pub(crate) fn gate(&self, p: &ScopeParams, amount: f64, now: Timestamp) -> Gate {
        let mut until = self.hard_until.max(self.next_allowed);
        if let Some(q) = p.quota
            && let Some(start) = self.quota_start
            && self.consumed > 0.0
            && self.consumed + amount > q
        {
            until = until.max(start + p.quota_window);
        }
        // A full scope needs a completion, unless rampup may raise its concurrency at its
        // next window boundary: then it may go at that boundary (if nothing else holds it
        // longer). Reported before the delays either way.
        if self.concurrency != 0 && self.active >= self.concurrency {
            match self.slot_may_free_at(p) {
                Some(t) if t > now => Gate::NotUntil(t.max(until)),
                _ => Gate::Full,
            }
        } else if until > now {
            Gate::NotUntil(until)
        } else {
            Gate::Open
        }
    }

    /// The next lazy update that may free a slot of this scope without a completion: the
    /// next rampup boundary, while rampup may still raise its concurrency. (At that
    /// boundary the scope may only lower its delay, or hold because of triggers or a
    /// backoff level: the wake-up is then early, and names the boundary after it.)
    /// Backoff recovery and quota resets never change concurrency.
    #[inline(never)]
    pub(crate) fn slot_may_free_at(&self, p: &ScopeParams) -> Option<Timestamp> {
        let (Some(_), Some(start)) = (p.rampup, self.ramp_start) else {
            return None;
        };
        let can_rise = self.robots_floor.is_none()
            && self.concurrency != 0
            && self.concurrency < p.max_concurrency;
        (can_rise && !p.backoff_window.is_zero()).then(|| start + p.backoff_window)
    }

    /// The spacing to keep after a send at the current delay.
    fn spacing(&self, p: &ScopeParams, rng: &mut JitterRng) -> f64 {
        if self.level > 0 {
            p.backoff
                .jitter
                .apply(self.delay, rng)
                .max(p.backoff.min_delay)
        } else {
            p.jitter.apply(self.delay, rng)
        }
    }

    #[inline]
    pub(crate) fn record_send(
        &mut self,
        p: &ScopeParams,
        amount: f64,
        now: Timestamp,
        rng: &mut JitterRng,
    ) {
        self.active += 1;
        self.sent += 1;
        self.last_sent_at = now;
        let spacing = self.spacing(p, rng);
        self.next_allowed = self.next_allowed.max(now + secs_to_duration(spacing));
        if p.rampup.is_some() && self.ramp_start.is_none() {
            self.ramp_start = Some(now);
        }
        if p.quota.is_some() {
            if self.quota_start.is_none() {
                self.quota_start = Some(now);
            }
            self.consumed += amount;
        }
    }

    #[inline]
    pub(crate) fn record_done(&mut self) {
        if self.active > 0 {
            // `done()` (sent - active - offset) goes up by one with no write of its own.
            self.active -= 1;
        } else {
            self.done_offset = self.done_offset.wrapping_sub(1);
        }
    }

    /// Completions counted, kept as `sent - active - done_offset` so that a completion
    /// writes only `active`, in the state's first cache line. The offset moves on a
    /// restore (the snapshot's count, whatever is in flight now) and on a completion
    /// with nothing in flight.
    pub(crate) fn done(&self) -> u64 {
        self.sent
            .wrapping_sub(u64::from(self.active))
            .wrapping_sub(self.done_offset)
    }

    /// The last send, if any.
    pub(crate) fn last_sent(&self) -> Option<Timestamp> {
        (self.last_sent_at != NEVER).then_some(self.last_sent_at)
    }

    /// A backoff trigger at `now`, with the capped header delay if the response had one.
    ///
    /// On a rampup scope the first `high` triggers of a window only count toward the
    /// target (the rate holds; a header delay is still honoured as a hard minimum); more
    /// than `high` is ordinary backoff.
    #[inline(never)]
    pub(crate) fn trigger(
        &mut self,
        p: &ScopeParams,
        header: Option<Duration>,
        now: Timestamp,
        rng: &mut JitterRng,
    ) {
        self.triggers += 1;
        self.window_triggers = self.window_triggers.saturating_add(1);
        let b = &p.backoff;
        let header = header.map(|h| h.min(secs_to_duration(b.max_delay)));
        if let Some(h) = header {
            self.hard_until = self.hard_until.max(now + h);
        }
        if let Some(r) = p.rampup
            && self.window_triggers <= r.target.high
        {
            event!(debug, scope = %self.name, window_triggers = self.window_triggers, "rampup: trigger within target, rate held");
            return;
        }
        if let Some(r) = p.rampup
            && r.step_back
            && self.window_triggers == r.target.high.saturating_add(1)
        {
            self.rampup_step_back(p, &r);
        }
        self.level = self.level.saturating_add(1).min(MAX_LEVEL);
        self.backoff_anchor = now;
        match header {
            Some(_wait) => {
                self.delay = self.delay.max(b.min_delay);
                event!(debug, scope = %self.name, level = self.level, wait = _wait.as_secs_f64(), "backoff: header delay honoured");
            }
            None => {
                let stepped = if self.delay == 0.0 {
                    b.min_delay
                } else {
                    (self.delay * b.factor).clamp(b.min_delay, b.max_delay)
                };
                self.delay = self.delay.max(stepped);
                // Jitter only lengthens this wait: never earlier than now + delay.
                let wait = b.jitter.apply(self.delay, rng).max(self.delay);
                self.next_allowed = self.next_allowed.max(now + secs_to_duration(wait));
                event!(debug, scope = %self.name, level = self.level, delay = self.delay, "backoff step");
            }
        }
    }

    /// A response announced its budget spent: nothing is sent before the reset (capped
    /// at `backoff_max_delay`), with no backoff step, since nothing failed.
    pub(crate) fn hold(&mut self, p: &ScopeParams, reset: Duration, now: Timestamp) {
        let reset = reset.min(secs_to_duration(p.backoff.max_delay));
        self.hard_until = self.hard_until.max(now + reset);
        event!(debug, scope = %self.name, wait = reset.as_secs_f64(), "budget spent: held until its reset");
    }

    /// `delay_scope`: a hard delay of `wait`, not capped, counted as a trigger.
    pub(crate) fn hard_delay(&mut self, p: &ScopeParams, wait: Duration, now: Timestamp) {
        self.level = self.level.saturating_add(1).min(MAX_LEVEL);
        self.triggers += 1;
        self.window_triggers = self.window_triggers.saturating_add(1);
        self.backoff_anchor = now;
        self.hard_until = self.hard_until.max(now + wait);
        self.delay = self.delay.max(p.backoff.min_delay);
        event!(debug, scope = %self.name, level = self.level, wait = wait.as_secs_f64(), "scope delayed on request");
    }

    /// Changes the base delay at run time; the next send is re-spaced from the last one.
    /// While backing off, nothing gets earlier: the backoff delay and its wait stand.
    pub(crate) fn set_base_delay(&mut self, secs: f64) {
        self.base_delay = secs;
        if self.level == 0 {
            self.delay = secs;
            if let Some(last) = self.last_sent() {
                // Unjittered: the closest the new delay allows.
                self.next_allowed = last + secs_to_duration(self.delay);
            }
        } else {
            self.delay = self.delay.max(secs);
            if let Some(last) = self.last_sent() {
                self.next_allowed = self.next_allowed.max(last + secs_to_duration(self.delay));
            }
        }
    }

    /// Raises the base delay to at least `secs` (Crawl-delay): never lowers anything.
    pub(crate) fn raise_base_delay(&mut self, secs: f64) {
        if secs > self.base_delay {
            self.base_delay = secs;
        }
        self.delay = self.delay.max(self.base_delay);
        if let Some(last) = self.last_sent() {
            self.next_allowed = self.next_allowed.max(last + secs_to_duration(self.delay));
        }
    }

    /// A scope may be forgotten only when nothing about it matters for the future.
    pub(crate) fn evictable(&self, now: Timestamp) -> bool {
        self.active == 0
            && self.level == 0
            && self.next_allowed <= now
            && self.hard_until <= now
            && self.waiters.is_empty()
            && self.consumed == 0.0
    }

    pub(crate) fn stats(&self) -> ScopeStats {
        ScopeStats {
            sent: self.sent,
            done: self.done(),
            triggers: self.triggers,
            active: self.active,
            base_delay: self.base_delay,
            delay: self.delay,
            concurrency: self.concurrency,
            level: u32::from(self.level),
            next_allowed: self.next_allowed,
            hard_until: self.hard_until,
            consumed: self.consumed,
            waiting: self.waiters.len(),
        }
    }

    pub(crate) fn snapshot(&self) -> ScopeSnapshot {
        ScopeSnapshot {
            scope: String::from(&*self.name),
            base_delay: self.base_delay,
            delay: self.delay,
            concurrency: self.concurrency,
            level: u32::from(self.level),
            next_allowed: self.next_allowed,
            hard_until: self.hard_until,
            last_sent: self.last_sent(),
            backoff_anchor: self.backoff_anchor,
            ramp_start: self.ramp_start,
            window_triggers: self.window_triggers,
            quota_start: self.quota_start,
            consumed: self.consumed,
            sent: self.sent,
            done: self.done(),
            triggers: self.triggers,
            set_delay: None,
            set_concurrency: None,
            robots_delay: self.robots_floor,
            robots_warned: false,
        }
    }

    /// Takes over what a snapshot learned. In-flight counts are not restored: whatever
    /// was in flight when the snapshot was taken is either done or will be redelivered.
    pub(crate) fn restore(&mut self, s: &ScopeSnapshot) {
        let finite = |v: f64| v.is_finite() && v >= 0.0;
        if finite(s.base_delay) {
            self.base_delay = s.base_delay;
        }
        if finite(s.delay) {
            self.delay = s.delay.max(self.base_delay);
        }
        self.concurrency = s.concurrency;
        self.level = u16::try_from(s.level).map_or(MAX_LEVEL, |l| l.min(MAX_LEVEL));
        if self.level == 0 {
            self.delay = self.base_delay;
        }
        self.next_allowed = s.next_allowed;
        self.hard_until = s.hard_until;
        self.last_sent_at = s.last_sent.unwrap_or(NEVER);
        self.backoff_anchor = s.backoff_anchor;
        self.ramp_start = s.ramp_start;
        self.window_triggers = s.window_triggers;
        self.quota_start = s.quota_start;
        self.consumed = if finite(s.consumed) { s.consumed } else { 0.0 };
        self.sent = s.sent;
        // `done()` reads the snapshot's count with whatever is in flight now.
        self.done_offset = s
            .sent
            .wrapping_sub(u64::from(self.active))
            .wrapping_sub(s.done);
        self.triggers = s.triggers;
        self.robots_floor = s.robots_delay.filter(|d| d.is_finite() && *d >= 0.0);
    }
}

/// Counters and current values of one scope, readable at any time.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ScopeStats {
    /// Requests sent.
    pub sent: u64,
    /// Requests completed.
    pub done: u64,
    /// Backoff triggers (including `delay_scope` calls).
    pub triggers: u64,
    /// Requests in flight now.
    pub active: u32,
    /// The base delay in seconds (configured, live-set, Crawl-delay or rampup).
    pub base_delay: f64,
    /// The current spacing delay in seconds (base delay, or higher while backing off).
    pub delay: f64,
    /// The current concurrency limit (0 = unlimited).
    pub concurrency: u32,
    /// The backoff level (0 = not backing off).
    pub level: u32,
    /// Earliest next send allowed by the spacing delay.
    pub next_allowed: Timestamp,
    /// Earliest next send allowed by a header delay or `delay_scope`.
    pub hard_until: Timestamp,
    /// Quota consumed in the current window.
    pub consumed: f64,
    /// Waiters queued on this scope.
    pub waiting: usize,
}

/// Everything a scope has learned, in a form a store can keep (hibernation, resume).
///
/// Plain data: stores may build one field by field ([`ScopeSnapshot::new`] gives the
/// state of a scope that never sent anything).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ScopeSnapshot {
    /// The scope's name.
    pub scope: String,
    /// Base delay in seconds.
    pub base_delay: f64,
    /// Current delay in seconds.
    pub delay: f64,
    /// Current concurrency limit (0 = unlimited).
    pub concurrency: u32,
    /// Backoff level.
    pub level: u32,
    /// Earliest next send allowed by spacing.
    pub next_allowed: Timestamp,
    /// Earliest next send allowed by a hard delay.
    pub hard_until: Timestamp,
    /// Time of the last send.
    pub last_sent: Option<Timestamp>,
    /// Start of the current recovery countdown.
    pub backoff_anchor: Timestamp,
    /// Start of the current rampup window.
    pub ramp_start: Option<Timestamp>,
    /// Triggers seen in the current rampup window.
    pub window_triggers: u32,
    /// Start of the current quota window.
    pub quota_start: Option<Timestamp>,
    /// Quota consumed in the current window.
    pub consumed: f64,
    /// Requests sent.
    pub sent: u64,
    /// Requests completed.
    pub done: u64,
    /// Backoff triggers.
    pub triggers: u64,
    /// Base delay set at run time or by a Crawl-delay, if any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub set_delay: Option<f64>,
    /// Concurrency set at run time or by a Crawl-delay, if any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub set_concurrency: Option<u32>,
    /// The robots.txt Crawl-delay in force (a floor for rampup), if any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub robots_delay: Option<f64>,
    /// Whether the Crawl-delay conflict warning was already given.
    #[cfg_attr(feature = "serde", serde(default))]
    pub robots_warned: bool,
}

impl ScopeSnapshot {
    /// The snapshot of a scope that has not sent anything yet.
    pub fn new(scope: impl Into<String>) -> Self {
        ScopeSnapshot {
            scope: scope.into(),
            base_delay: 0.0,
            delay: 0.0,
            concurrency: 0,
            level: 0,
            next_allowed: Timestamp::ZERO,
            hard_until: Timestamp::ZERO,
            last_sent: None,
            backoff_anchor: Timestamp::ZERO,
            ramp_start: None,
            window_triggers: 0,
            quota_start: None,
            consumed: 0.0,
            sent: 0,
            done: 0,
            triggers: 0,
            set_delay: None,
            set_concurrency: None,
            robots_delay: None,
            robots_warned: false,
        }
    }
}

/// How many whole `window`s fit in `elapsed` (0 for an empty window).
pub(crate) fn div_duration(elapsed: Duration, window: Duration) -> u64 {
    let w = window.as_nanos();
    if w == 0 {
        return 0;
    }
    u64::try_from(elapsed.as_nanos() / w).unwrap_or(u64::MAX)
}

/// `window × n`, saturating.
pub(crate) fn mul_duration(window: Duration, n: u64) -> Duration {
    let nanos = window.as_nanos().saturating_mul(u128::from(n));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an admission and a completion without backoff, rampup, quota or waiters
    /// touch lies in the first [`HOT_BYTES`], the only part of a state the scheduler
    /// prefetches.
    #[test]
    fn the_hot_fields_share_one_cache_line() {
        use core::mem::{align_of, offset_of, size_of_val};
        assert_eq!(align_of::<ScopeState>(), 64);
        let s = ScopeState::blank("example.com", 0, 0.0, 1, Timestamp::ZERO);
        // Each field's last byte: its offset plus its size.
        macro_rules! ends {
            ($($field:ident),*) => {
                [$((stringify!($field), offset_of!(ScopeState, $field) + size_of_val(&s.$field))),*]
            };
        }
        for (field, last_byte) in ends!(
            next_allowed,
            hard_until,
            delay,
            last_used,
            sent,
            last_sent_at,
            params,
            concurrency,
            active,
            level,
            live
        ) {
            assert!(last_byte <= HOT_BYTES, "{field} ends at byte {last_byte}");
        }
    }

    /// The counters a state keeps in its first cache line (completions derived, the last
    /// send without an `Option` tag) read like plain ones: random sends, completions
    /// (some with nothing in flight) and restores against a model that counts each.
    #[test]
    fn derived_counters_match_plain_ones() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};

        #[derive(Clone, Debug)]
        enum Op {
            Send(u64),
            Done,
            Restore {
                sent: u64,
                done: u64,
                last_sent: Option<u64>,
            },
        }
        let op = prop_oneof![
            (0..u64::MAX / 2).prop_map(Op::Send),
            Just(Op::Done),
            Just(Op::Done),
            (
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(any::<u64>())
            )
                .prop_map(|(sent, done, last_sent)| Op::Restore {
                    sent,
                    done,
                    last_sent
                }),
        ];
        let p = ScopeParams::resolve(
            &Settings::default(),
            ScopeKind::Domain,
            &ScopeConfig::default(),
        );
        let mut runner = TestRunner::new(Config::with_cases(300));
        runner
            .run(&proptest::collection::vec(op, 0..60), |ops| {
                let mut s = ScopeState::new("example.com", 0, &p, Timestamp::ZERO);
                let mut rng = JitterRng::new(1);
                // The model: sent, done, active, last send.
                let (mut sent, mut done, mut active) = (0u64, 0u64, 0u32);
                let mut last: Option<Timestamp> = None;
                for op in ops {
                    match op {
                        Op::Send(t) => {
                            let t = Timestamp::from_nanos(t);
                            s.record_send(&p, 1.0, t, &mut rng);
                            (sent, active, last) = (sent + 1, active + 1, Some(t));
                        }
                        Op::Done => {
                            s.record_done();
                            active = active.saturating_sub(1);
                            done += 1;
                        }
                        Op::Restore {
                            sent: rs,
                            done: rd,
                            last_sent,
                        } => {
                            let mut snap = s.snapshot();
                            (snap.sent, snap.done) = (rs, rd);
                            snap.last_sent = last_sent.map(Timestamp::from_nanos);
                            s.restore(&snap);
                            (sent, done, last) = (rs, rd, snap.last_sent);
                        }
                    }
                    let st = s.stats();
                    prop_assert_eq!((st.sent, st.done, st.active), (sent, done, active));
                    prop_assert_eq!(s.snapshot().last_sent, last);
                }
                Ok(())
            })
            .unwrap();
    }

    /// The classification before its characters were checked first: every name is
    /// tried as an address.
    fn ip_literal_by_parsing(name: &str) -> bool {
        if let Some(rest) = name.strip_prefix('[') {
            let Some((inner, tail)) = rest.split_once(']') else {
                return false;
            };
            return inner.parse::<Ipv6Addr>().is_ok() && (tail.is_empty() || is_port(tail));
        }
        if name.parse::<Ipv6Addr>().is_ok() || name.parse::<Ipv4Addr>().is_ok() {
            return true;
        }
        match name.rsplit_once(':') {
            Some((host, port)) => host.parse::<Ipv4Addr>().is_ok() && port_digits(port),
            None => false,
        }
    }

    proptest::proptest! {
        /// The character checks never change a name's kind: names drawn from the
        /// characters of addresses (so that many are addresses, or nearly), and any
        /// names at all.
        #[test]
        fn ip_literals_match_parsing(
            near in "[0-9a-fA-F:.\\[\\]%x]{0,45}",
            any in "\\PC{0,30}",
            v4 in proptest::prelude::any::<[u8; 4]>(),
            v6 in proptest::prelude::any::<[u16; 8]>(),
            port in proptest::prelude::any::<u16>(),
            edit in "[0-9a-f:.\\]]{0,2}",
            at in 0usize..40,
        ) {
            // Real addresses, with and without a port or brackets, then with a
            // character or two put somewhere into them.
            let v4 = Ipv4Addr::from(v4);
            let v6 = Ipv6Addr::from(v6);
            let mut names = alloc::vec![
                alloc::format!("{v4}"),
                alloc::format!("{v4}:{port}"),
                alloc::format!("{v6}"),
                alloc::format!("[{v6}]"),
                alloc::format!("[{v6}]:{port}"),
                alloc::format!("{v6}:{port}"),
                alloc::format!("{}", v4.to_ipv6_mapped()),
                alloc::format!("[{}]:{port}", v4.to_ipv6_mapped()),
            ];
            for i in 0..names.len() {
                let mut edited = names[i].clone();
                let at = at.min(edited.len());
                edited.insert_str(at, &edit);
                names.push(edited);
            }
            names.push(near);
            names.push(any);
            for name in &names {
                let name = name.as_str();
                proptest::prop_assert_eq!(is_ip_literal(name), ip_literal_by_parsing(name), "{:?}", name);
            }
        }
    }

    #[test]
    fn scope_kinds() {
        for ip in [
            "1.2.3.4",
            "1.2.3.4:80",
            "::1",
            "[::1]",
            "[2001:db8::1]:8443",
            "fe80::1",
            "::ffff:10.0.0.1",
            "[::ffff:10.0.0.1]:8080",
            "FE80::ABCD",
        ] {
            assert_eq!(ScopeKind::of(ip), ScopeKind::Ip, "{ip}");
        }
        for d in ["example.com", "books.toscrape.com:8080", "a.b", "1.2.3.4:x"] {
            assert_eq!(ScopeKind::of(d), ScopeKind::Domain, "{d}");
        }
        for o in [
            "localhost",
            "api",
            "cost",
            "localhost:8080",
            "[::1",
            "",
            "cafe",
            "fe80:",
            "1:2",
            "1234:80:",
        ] {
            assert_eq!(ScopeKind::of(o), ScopeKind::Other, "{o}");
        }
        // Not a valid IPv4 (octet too large), but has dots: a domain.
        assert_eq!(ScopeKind::of("1.2.3.400"), ScopeKind::Domain);
    }

    #[test]
    fn default_concurrency_by_kind() {
        let mut s = Settings::default();
        let c = |s: &Settings, name: &str| {
            ScopeParams::resolve(s, ScopeKind::of(name), &ScopeConfig::default()).concurrency
        };
        assert_eq!(c(&s, "example.com"), 8);
        assert_eq!(c(&s, "10.0.0.1"), 8, "per-ip 0 falls back to per-domain");
        assert_eq!(c(&s, "api"), 1);
        s.concurrent_requests_per_ip = 3;
        assert_eq!(c(&s, "10.0.0.1"), 3);
        let explicit =
            ScopeParams::resolve(&s, ScopeKind::Other, &ScopeConfig::new().concurrency(0));
        assert_eq!(explicit.concurrency, 0, "explicit wins; 0 = unlimited");
        let ramp = ScopeParams::resolve(
            &s,
            ScopeKind::Domain,
            &ScopeConfig::new()
                .min_concurrency(2)
                .rampup(Default::default()),
        );
        assert_eq!(ramp.concurrency, 2, "rampup starts at min_concurrency");
        assert_eq!(ramp.max_concurrency, 16);
    }

    #[test]
    fn backoff_code_set() {
        let p = ScopeParams::resolve(
            &Settings::default(),
            ScopeKind::Domain,
            &ScopeConfig::default(),
        );
        assert!(p.backoff.triggers_on_status(429));
        assert!(p.backoff.triggers_on_status(524));
        assert!(!p.backoff.triggers_on_status(500));
        assert!(!p.backoff.triggers_on_status(200));
        assert!(!p.backoff.triggers_on_status(u16::MAX));
        assert!(p.backoff.triggers_on_error("timeout"));
        assert!(!p.backoff.triggers_on_error("dns"));
    }

    #[test]
    fn duration_helpers() {
        assert_eq!(
            div_duration(Duration::from_secs(125), Duration::from_secs(60)),
            2
        );
        assert_eq!(div_duration(Duration::from_secs(5), Duration::ZERO), 0);
        assert_eq!(
            mul_duration(Duration::from_secs(60), 3),
            Duration::from_secs(180)
        );
        assert_eq!(
            mul_duration(Duration::MAX, u64::MAX),
            Duration::from_nanos(u64::MAX)
        );
    }
}
