//! Live progress per scope and the end-of-crawl summary table.

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
    /// One bar per shown scope (the busiest [`MAX_BARS`]), reused as the ranking changes.
    slots: Mutex<Vec<ProgressBar>>,
    /// The scopes beyond those, summed (added once there are any).
    others: Mutex<Option<ProgressBar>>,
}

/// Scopes shown with a bar of their own; a broad crawl's other scopes share one line.
pub const MAX_BARS: usize = 8;
/// Scopes listed in the summary table; the rest are summed on one line.
pub const MAX_SUMMARY_ROWS: usize = 30;

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
                slots: Mutex::new(Vec::new()),
                others: Mutex::new(None),
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
        let (mut done, mut len) = (0, 0);
        for row in rows {
            let (d, l) = counts(row);
            done += d;
            len += l;
        }
        bars.total.set_length(len);
        bars.total.set_position(done);
        let (shown, rest) = busiest(rows, MAX_BARS);
        let mut slots = bars.slots.lock().unwrap_or_else(|p| p.into_inner());
        for (i, row) in shown.iter().enumerate() {
            if slots.len() <= i {
                // After the total and the slots before it (the "others" line stays last).
                let bar = bars.multi.insert(1 + i, ProgressBar::new(0));
                bar.set_style(style(
                    "{prefix:>22} [{bar:32.cyan}] {pos:>6}/{len:<6} {msg}",
                ));
                slots.push(bar);
            }
            let bar = &slots[i];
            let (d, l) = counts(row);
            bar.set_prefix(truncate(&row.scope, 22));
            bar.set_length(l);
            bar.set_position(d);
            bar.set_message(scope_message(row));
        }
        if !rest.is_empty() {
            let mut others = bars.others.lock().unwrap_or_else(|p| p.into_inner());
            let others = others.get_or_insert_with(|| {
                let bar = bars.multi.add(ProgressBar::new(0));
                bar.set_style(style(
                    "{prefix:>22} [{bar:32.blue}] {pos:>6}/{len:<6} {msg}",
                ));
                bar
            });
            let (mut d, mut l, mut limited, mut active) = (0, 0, 0, 0);
            for row in &rest {
                let (rd, rl) = counts(row);
                d += rd;
                l += rl;
                limited += row.stats.rate_limited;
                active += row.active;
            }
            others.set_prefix(format!("{} others", rest.len()));
            others.set_length(l);
            others.set_position(d);
            others.set_message(format!("in flight {active}  429s {limited}"));
        }
    }

    /// Clears the live display.
    pub fn finish(&self, rows: &[ScopeRow]) {
        if let Some(bars) = &self.bars {
            self.update_bars(rows);
            bars.total.finish();
            for bar in bars.slots.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                bar.finish();
            }
            if let Some(others) = &*bars.others.lock().unwrap_or_else(|p| p.into_inner()) {
                others.finish();
            }
        }
        let _ = self.resumed_with;
    }
}

/// The `n` busiest scopes (most requests outstanding, then most in flight, then most
/// fetched) and the rest.
pub fn busiest(rows: &[ScopeRow], n: usize) -> (Vec<&ScopeRow>, Vec<&ScopeRow>) {
    let mut order: Vec<&ScopeRow> = rows.iter().collect();
    order.sort_by(|a, b| {
        let key = |r: &ScopeRow| {
            let (d, l) = counts(r);
            (l - d, r.active, r.stats.fetches)
        };
        key(b).cmp(&key(a)).then_with(|| a.scope.cmp(&b.scope))
    });
    let rest = order.split_off(order.len().min(n));
    (order, rest)
}

/// A scope's (finished, known) request counts for its bar.
fn counts(row: &ScopeRow) -> (u64, u64) {
    let done = row.stats.pages + row.stats.disallowed + row.stats.skipped;
    (done, row.stats.queued.max(done))
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
    let mut shown: Vec<&ScopeRow> = summary.scopes.iter().collect();
    if shown.len() > MAX_SUMMARY_ROWS {
        // A broad crawl: the scopes with the most pages, then one line for the rest.
        shown.sort_by(|a, b| {
            b.stats
                .pages
                .cmp(&a.stats.pages)
                .then(a.scope.cmp(&b.scope))
        });
    }
    for (i, row) in shown.iter().enumerate() {
        let s = &row.stats;
        if i == MAX_SUMMARY_ROWS {
            let rest = &shown[i..];
            writeln!(
                out,
                "{:<24} {:>6} {:>5} {:>5} {:>6} {:>5} {:>5} {:>7}",
                format!("({} more scopes)", rest.len()),
                rest.iter().map(|r| r.stats.pages).sum::<u64>(),
                rest.iter().map(|r| r.stats.ok).sum::<u64>(),
                rest.iter().map(|r| r.stats.redirects).sum::<u64>(),
                rest.iter().map(|r| r.stats.failed).sum::<u64>(),
                rest.iter().map(|r| r.stats.rate_limited).sum::<u64>(),
                rest.iter().map(|r| r.stats.retries).sum::<u64>(),
                rest.iter().map(|r| r.stats.disallowed).sum::<u64>(),
            )?;
        }
        if i >= MAX_SUMMARY_ROWS {
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
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crawl::HostStats;

    fn row(scope: &str, queued: u64, pages: u64) -> ScopeRow {
        ScopeRow {
            scope: scope.into(),
            stats: HostStats {
                queued,
                pages,
                ok: pages,
                ..HostStats::default()
            },
            ..ScopeRow::default()
        }
    }

    #[test]
    fn a_broad_crawl_shows_its_busiest_scopes_and_sums_the_rest() {
        let rows: Vec<ScopeRow> = (0..40)
            .map(|i| row(&format!("h{i:02}.test"), 100, i))
            .collect();
        let (shown, rest) = busiest(&rows, MAX_BARS);
        assert_eq!(shown.len(), MAX_BARS);
        assert_eq!(rest.len(), 32);
        // Most outstanding first: h00 has 100 left, h39 61.
        assert_eq!(shown[0].scope, "h00.test");
        assert_eq!(shown[7].scope, "h07.test");

        let summary = CrawlSummary {
            stop: StopReason::Finished,
            resumed_with: 0,
            left: 0,
            pages: rows.iter().map(|r| r.stats.pages).sum(),
            failed: 0,
            elapsed: 1.0,
            scopes: rows,
            corrupt: 0,
        };
        let mut out = Vec::new();
        write_summary(&mut out, &summary, "s").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("(10 more scopes)"), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.contains(".test")).count(),
            MAX_SUMMARY_ROWS
        );
        // The total still counts every scope.
        let total = text.lines().find(|l| l.starts_with("total")).unwrap();
        assert!(total.contains(&summary.pages.to_string()), "{total}");
    }
}
