//! `frontier simulate SCENARIO`: the real frontier and throttler on a virtual clock
//! (docs/behaviour.md section 10).
//!
//! A scenario replays scripted events or models whole sites, and the command prints, as
//! JSON lines, when each request would be sent, when it would end, and what was dropped,
//! then one summary line. Hours of crawl take seconds of CPU, and the output of a
//! scenario is the same on every run (the jitter generator is seeded by
//! `settings.seed`).
//!
//! ```text
//! frontier simulate examples/429-storm.toml
//! frontier simulate --summary-only --top-scopes 20 examples/broad-crawl.toml
//! ```
//!
//! # Scenario files
//!
//! TOML or JSON: `--format` if given, else the extension (`.toml`, `.json`), else a look
//! at the text (JSON starts with `{`). `-` reads standard input. Top-level keys:
//!
//! - `settings`: exactly the settings of docs/behaviour.md section 2 (`polite_throttle_core::Settings`, with
//!   `scopes`), including the frontier's `depth_priority`, `depth_limit`,
//!   `scheduler_order`, `start_order` and `seed`. Unset keys take docs/behaviour.md defaults
//!   (so jitter is on, seeded with 0, unless `randomize_download_delay = false`);
//!   `--seed N` replaces `seed`.
//! - `simulation` (optional): knobs of the simulator itself:
//!   `epoch` (Unix seconds of virtual time 0, the wall clock for HTTP-date
//!   `Retry-After` values; default 1735689600 = 2025-01-01T00:00:00Z),
//!   `policy` (`"throttling_aware"`, the default, or `"slot_aware"`), and for site models
//!   `retry_times` (2), `retry_http_codes` (Scrapy's `[500, 502, 503, 504, 522, 524, 408,
//!   429]`) and `retry_priority_adjust` (-1).
//! - either `events` (a replay) or `sites` (models), not both.
//!
//! Unknown keys anywhere are errors naming the key and its line; so are negative or
//! non-finite seconds, malformed JSON/TOML, and invalid settings (named by key).
//!
//! ## Replays: `events`
//!
//! Each event has `at` (seconds from 0) and exactly one action:
//!
//! - `push`: `{id, url, method ("GET"), callback, priority (0), depth (0), start (false),
//!   scopes (a list of names, or a map name → quota amount; replaces the host scope),
//!   delay (seconds after the push before it may go), dont_track, dont_filter,
//!   dont_throttle (false), response, children}`. `id` labels the output lines and
//!   defaults to the URL. `depth` is for top-level pushes only (children are one level
//!   deeper than their parent); `depth_priority` and `depth_limit` apply to it.
//!   `response` is `{latency, status, headers}` or `{latency, error}` (an error kind such
//!   as `"timeout"` or `"connection"`); `latency` defaults to 0 and **a push without
//!   `response` is answered 200 with latency 0**. Header values may be text or numbers.
//!   `children` are push objects (without `at`), pushed one level deeper when the
//!   answer arrives, whatever it is (status or error), right after the frontier learned
//!   the outcome.
//! - `delay_scope`: `{scope, seconds}` (docs/behaviour.md 3.7).
//! - `crawl_delay`: `{scope, seconds}`: a robots.txt Crawl-delay (docs/behaviour.md 3.6).
//! - `set_scope`: `{scope, delay, concurrency}` (either or both): live reconfiguration.
//! - `reconcile_quota`: `{scope, consumed}` or `{scope, remaining}` (docs/behaviour.md 3.5).
//!
//! Replays never retry: every answer is scripted.
//!
//! ## Site models: `sites`
//!
//! Each `[[sites]]` entry models one host, or `count` hosts named by replacing `{n}` in
//! `host` with `0..count`:
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `host` | required | host name, as the frontier writes it (lower case, no default port) |
//! | `count` | 1 | number of such hosts |
//! | `pages` | required | pages per host; page 0 (`https://HOST/p/0`) is the start request |
//! | `links_per_page` | 4 | same-host links per page (see below) |
//! | `cross_links` | 0 | links per page to pages of other hosts |
//! | `latency` | 0.1 | seconds, or `[low, high]` drawn uniformly per request |
//! | `rate_limit` | none | `{requests, per (1.0), retry_after, status (429)}` |
//! | `crawl_delay` | none | robots.txt Crawl-delay, reported at time 0 |
//! | `error_rate` | 0 | probability that a request fails with `error` after `timeout` |
//! | `error` | `"timeout"` | the error kind of failures |
//! | `timeout` | 180 | seconds before a failure is reported (Scrapy's download timeout) |
//!
//! Page `p` links to pages `(p × links_per_page + 1 + i) mod pages` of its host, for `i`
//! in `0..links_per_page`: with at least one link per page every page is reachable, each
//! first linked from one parent, and the wrap-around links are duplicates.
//! Cross links go to pages chosen by a fixed hash of (seed, host, page, link).
//!
//! The rate limit is the server's: it accepts at most `requests` requests in any sliding
//! window of `per` seconds (counting the ones it accepted, at their send time) and
//! refuses the others with `status`, with `Retry-After: N` when `retry_after = N`, or with
//! the whole seconds until a request would be accepted when `retry_after = "auto"`, or
//! without the header when `retry_after` is absent.
//!
//! Failed requests are retried like Scrapy's retry middleware: an error of any kind, or
//! a status in `retry_http_codes`, goes back to the frontier (`Frontier::retry`, which
//! feeds backoff and re-queues it with its priority changed by `retry_priority_adjust`)
//! until it has been retried `retry_times` times; then it is given up. Links are pushed
//! only from 2xx responses. Each send, retries included, prints a `send` line and a
//! `done` line labelled with the URL.
//!
//! # Virtual time
//!
//! Time is `Timestamp` nanoseconds from 0; seconds in the file are rounded to the nearest
//! nanosecond. At each instant the simulator:
//!
//! 1. delivers the answers due (by due time, then send order): prints `done`, hands the
//!    outcome to the frontier (`complete`, or `retry` in site models), then pushes the
//!    children or links;
//! 2. applies the input events due, in file order;
//! 3. polls the frontier and sends each request it hands out, one at a time, until it
//!    has nothing ready (it stops at `concurrent_requests` in flight);
//! 4. jumps to the next instant that matters: the next answer, the next event, or the
//!    frontier's next wake-up.
//!
//! An answer with latency 0 is due at the instant it was sent: it is delivered in a new
//! round at the same instant, after the sends of the round that sent it.
//!
//! # Output
//!
//! One JSON object per line, in time order, always with these keys in this order and
//! with `", "` between members and `": "` after keys:
//!
//! ```text
//! {"at": 7.0, "send": "r2"}
//! {"at": 7.1, "done": "r2", "status": 429}
//! {"at": 7.1, "done": "r3", "error": "timeout"}
//! {"at": 0.0, "dropped": "r4", "reason": "duplicate"}
//! {"at": 0.0, "dropped": "r5", "reason": "depth"}
//! ```
//!
//! Times are seconds printed from the integer nanoseconds: the exact decimal value with
//! trailing zeros removed and at least one decimal (`0.0`, `7.1`, `2.000000001`). Labels
//! are JSON strings (escaped as JSON requires; non-ASCII is written as is).
//!
//! The last line is the summary (`--summary-only` prints only it):
//!
//! ```text
//! {"summary": {"finished_at": 9.2, "sent": 3, "responses": {"200": 2, "429": 1},
//!  "errors": {}, "retried": 0, "dropped": {"duplicate": 0, "depth": 0}, "depth_max": 0,
//!  "unsent": 0, "scope_count": 1, "scopes": {"a.example": {"sent": 3,
//!  "responses": {"200": 2, "429": 1}, "errors": {}, "delay": 2.0, "concurrency": 8,
//!  "level": 1}}}}
//! ```
//!
//! (one line in reality). `finished_at` is the time of the last send, answer or drop
//! (the last line before the summary; 0.0 if there is none). `responses` and `errors` count answers by
//! status and by error kind; `retried` counts requests put back for a retry; `dropped`
//! counts pushes dropped by reason; `depth_max` is the deepest request queued. Per scope
//! (its explicit scopes, else its host; sorted by name): the same counts, and its
//! `delay` (current spacing, in seconds), `concurrency` (0 = unlimited) and backoff
//! `level` as of `finished_at`, with lazy recovery applied (a scope whose state the
//! throttler evicted after `throttling_scope_max_idle`, which never happens while it
//! backs off, shows its configured or live values). `--top-scopes N` keeps the `N`
//! scopes that sent the most, ties by name (`scope_count` still counts all). `unsent`
//! counts requests still queued at the end; it is 0 unless the frontier got stuck.
//!
//! Exit status: 0 after a complete run, 1 if requests were left unsent, 2 for a bad
//! scenario (reported on stderr before anything is printed, when it can be known before
//! the run) or a failure during the run.
mod engine;
mod output;
mod replay;
mod scenario;
mod sites;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

pub use scenario::{Format, Scenario};

use engine::{RunEnd, Sim};
use output::Output;
use replay::Replay;
use scenario::Body;
use sites::Sites;

/// Arguments of `frontier simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The scenario file (TOML or JSON; `-` reads standard input).
    pub scenario: PathBuf,
    /// Print only the final summary line.
    #[arg(long)]
    pub summary_only: bool,
    /// List only the N scopes that sent the most in the summary.
    #[arg(long, value_name = "N")]
    pub top_scopes: Option<usize>,
    /// Override `settings.seed` (jitter and site-model randomness).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The scenario's format, when neither its extension nor its text tells.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
}

/// Options of a simulation run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimulateOptions {
    /// Print only the summary line.
    pub summary_only: bool,
    /// Keep only this many scopes (those that sent the most) in the summary.
    pub top_scopes: Option<usize>,
}

/// How a simulation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimulationReport {
    /// Requests still queued when nothing more could happen (0 unless the frontier got
    /// stuck).
    pub unsent: usize,
}

/// Runs `scenario`, writing its JSON lines to `out`.
pub fn simulate(
    scenario: &Scenario,
    options: &SimulateOptions,
    out: &mut dyn Write,
) -> anyhow::Result<SimulationReport> {
    let config = scenario
        .frontier
        .clone()
        .policy(scenario.simulation.policy.policy());
    let output = Output::new(out, !options.summary_only);
    let mut sim = Sim::new(scenario.settings.clone(), config, output)?;
    let end: RunEnd = match &scenario.body {
        Body::Replay(events) => {
            let mut world = Replay::new(events, scenario.simulation.epoch);
            sim.run(&mut world)?
        }
        Body::Sites { models, hosts } => {
            let mut world = Sites::new(models, hosts, &scenario.simulation, scenario.settings.seed);
            sim.run(&mut world)?
        }
    };
    sim.finish(end, options.top_scopes)?;
    Ok(SimulationReport { unsent: end.unsent })
}

/// Runs `frontier simulate`.
pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let mut scenario = Scenario::load(&args.scenario, args.format)?;
    if let Some(seed) = args.seed {
        scenario.set_seed(seed);
    }
    let options = SimulateOptions {
        summary_only: args.summary_only,
        top_scopes: args.top_scopes,
    };
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match simulate(&scenario, &options, &mut lock) {
        Ok(report) if report.unsent > 0 => {
            eprintln!(
                "frontier: {} request(s) were never sent: the frontier stopped handing them out",
                report.unsent
            );
            Ok(ExitCode::from(1))
        }
        Ok(_) => Ok(ExitCode::SUCCESS),
        // `frontier simulate big.toml | head` is not an error.
        Err(e) if is_broken_pipe(&e) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
