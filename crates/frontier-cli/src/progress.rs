//! Live progress per scope and the end-of-crawl summary table.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::crawl::{CrawlSummary, ScopeRow, StopReason};

/// How progress is shown while crawling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// Bars on a terminal, periodic lines otherwise.
    #[default]
    Auto,
    /// One bar per scope (stderr).
    Bars,
    /// A status line every few seconds (stderr).
    Lines,
    /// Nothing until the summary.
    Quiet,
}

/// The live display.
pub struct Progress {
    mode: ProgressMode,
    started: Instant,
    resumed_with: u64,
    bars: Option<Bars>,
    last_line: Mutex<Instant>,
}

struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    scopes: Mutex<HashMap<String, ProgressBar>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .expect("a valid progress template")
        .progress_chars("=> ")
}

impl Progress {
    /// Starts showing progress.
    pub fn start(mode: ProgressMode, resumed_with: u64) -> Progress {
        let mode = match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => ProgressMode::Bars,
            ProgressMode::Auto => ProgressMode::Lines,
            other => other,
        };
        let bars = (mode == ProgressMode::Bars).then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8));
            let total = multi.add(ProgressBar::new(0));
            total.set_style(style(
                "{prefix:>22.bold} [{bar:32.green}] {pos:>6}/{len:<6} {elapsed_precise} {msg}",
            ));
            total.set_prefix("all scopes");
            Bars {
                multi,
                total,
                scopes: Mutex::new(HashMap::new()),
            }
        });
        if resumed_with > 0 && mode != ProgressMode::Quiet {
            eprintln!("resuming: {resumed_with} requests were left in the store");
        }
        Progress {
            mode,
            started: Instant::now(),
            resumed_with,
            bars,
            last_line: Mutex::new(Instant::now()),
        }
    }

    /// How often to call [`update`](Self::update).
    pub fn interval(&self) -> Duration {
        match self.mode {
            ProgressMode::Bars => Duration::from_millis(200),
            _ => Duration::from_secs(1),
        }
    }

    /// Shows the current state.
    pub fn update(&self, rows: &[ScopeRow], pages: u64) {
        match self.mode {
            ProgressMode::Bars => self.update_bars(rows),
            ProgressMode::Lines => {
                let mut last = self.last_line.lock().unwrap_or_else(|p| p.into_inner());
                if last.elapsed() >= Duration::from_secs(5) {
                    *last = Instant::now();
                    let queued: u64 = rows.iter().map(|r| r.stats.queued).sum();
                    let limited: u64 = rows.iter().map(|r| r.stats.rate_limited).sum();
                    let backing_off = rows.iter().filter(|r| r.level > 0).count();
                    eprintln!(
                        "[{:>6.1}s] {pages} pages, {queued} queued in this run, {} scopes, {backing_off} backing off, {limited} x 429",
                        self.started.elapsed().as_secs_f64(),
                        rows.len()
                    );
                }
            }
            _ => {}
        }
    }

    fn update_bars(&self, rows: &[ScopeRow]) {
        let Some(bars) = &self.bars else { return };
        let mut scopes = bars.scopes.lock().unwrap_or_else(|p| p.into_inner());
        let (mut done, mut len) = (0, 0);
        for row in rows {
            let bar = scopes.entry(row.scope.clone()).or_insert_with(|| {
                let bar = bars.multi.add(ProgressBar::new(0));
                bar.set_style(style(
                    "{prefix:>22} [{bar:32.cyan}] {pos:>6}/{len:<6} {msg}",
                ));
                bar.set_prefix(truncate(&row.scope, 22));
                bar
            });
            let total = row.stats.queued.max(row.stats.pages + row.stats.disallowed);
            bar.set_length(total);
            bar.set_position(row.stats.pages + row.stats.disallowed);
            bar.set_message(scope_message(row));
            done += row.stats.pages + row.stats.disallowed;
            len += total;
        }
        bars.total.set_length(len);
        bars.total.set_position(done);
    }

    /// Clears the live display.
    pub fn finish(&self, rows: &[ScopeRow]) {
        if let Some(bars) = &self.bars {
            self.update_bars(rows);
            bars.total.finish();
            for bar in bars
                .scopes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
            {
                bar.finish();
            }
        }
        let _ = self.resumed_with;
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    }
}

fn concurrency(n: u32) -> String {
    if n == 0 { "∞".into() } else { n.to_string() }
}

fn scope_message(row: &ScopeRow) -> String {
    let mut msg = format!(
        "delay {:.3}s  conc {}/{}  backoff {}",
        row.delay,
        row.active,
        concurrency(row.concurrency),
        row.level
    );
    if row.stats.rate_limited > 0 {
        msg.push_str(&format!("  429s {}", row.stats.rate_limited));
    }
    if row.stats.retries > 0 {
        msg.push_str(&format!("  retries {}", row.stats.retries));
    }
    if row.stats.disallowed > 0 {
        msg.push_str(&format!("  robots-blocked {}", row.stats.disallowed));
    }
    msg
}

/// Writes the end-of-crawl table.
pub fn write_summary(
    out: &mut impl Write,
    summary: &CrawlSummary,
    store: &str,
) -> std::io::Result<()> {
    writeln!(
        out,
        "\n{:<24} {:>6} {:>5} {:>5} {:>6} {:>5} {:>5} {:>7} {:>9} {:>5} {:>5} {:>9}",
        "scope",
        "pages",
        "ok",
        "redir",
        "failed",
        "429s",
        "retry",
        "robots",
        "delay",
        "conc",
        "level",
        "KiB"
    )?;
    let mut total = crate::crawl::HostStats::default();
    for row in &summary.scopes {
        let s = &row.stats;
        writeln!(
            out,
            "{:<24} {:>6} {:>5} {:>5} {:>6} {:>5} {:>5} {:>7} {:>8.3}s {:>5} {:>5} {:>9.1}",
            truncate(&row.scope, 24),
            s.pages,
            s.ok,
            s.redirects,
            s.failed,
            s.rate_limited,
            s.retries,
            s.disallowed,
            row.delay,
            concurrency(row.concurrency),
            row.level,
            s.bytes as f64 / 1024.0
        )?;
        total.pages += s.pages;
        total.ok += s.ok;
        total.redirects += s.redirects;
        total.failed += s.failed;
        total.rate_limited += s.rate_limited;
        total.retries += s.retries;
        total.disallowed += s.disallowed;
        total.throttled += s.throttled;
        total.skipped += s.skipped;
        total.bytes += s.bytes;
    }
    writeln!(
        out,
        "{:<24} {:>6} {:>5} {:>5} {:>6} {:>5} {:>5} {:>7} {:>9} {:>5} {:>5} {:>9.1}",
        "total",
        total.pages,
        total.ok,
        total.redirects,
        total.failed,
        total.rate_limited,
        total.retries,
        total.disallowed,
        "",
        "",
        "",
        total.bytes as f64 / 1024.0
    )?;
    let rate = summary.pages as f64 / summary.elapsed.max(1e-9);
    writeln!(
        out,
        "\n{} pages in {:.1}s ({rate:.1} pages/s){}",
        summary.pages,
        summary.elapsed,
        if summary.resumed_with > 0 {
            format!(", resumed with {} requests queued", summary.resumed_with)
        } else {
            String::new()
        }
    )?;
    if summary.corrupt > 0 {
        writeln!(
            out,
            "{} undecodable stored requests were dropped (see above)",
            summary.corrupt
        )?;
    }
    if summary.failed > 0 {
        writeln!(
            out,
            "{} pages failed (no 2xx or 3xx answer after their retries; their lines carry the error)",
            summary.failed
        )?;
    }
    if total.throttled > 0 {
        writeln!(
            out,
            "{} requests were requeued after a throttling answer (429, 503 + Retry-After), without spending retries",
            total.throttled
        )?;
    }
    if total.skipped > 0 {
        writeln!(
            out,
            "{} stored requests were skipped: outside the allowed domains or patterns of this run",
            total.skipped
        )?;
    }
    match summary.stop {
        StopReason::Finished => writeln!(out, "finished: nothing left to crawl in {store}"),
        StopReason::MaxPages => writeln!(
            out,
            "stopped at --max-pages: {} requests left in {store}; run again to continue",
            summary.left
        ),
        StopReason::Interrupted => writeln!(
            out,
            "interrupted: {} requests left in {store}; run the same command again to resume",
            summary.left
        ),
    }
}
