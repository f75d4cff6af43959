//! The JSON lines the simulator prints, written by hand so that key order, spacing and
//! number formatting are fixed (see the module documentation of [`super`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use polite_throttle_core::Timestamp;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Appends `t` as seconds: the exact decimal value of its integer nanoseconds, with
/// trailing zeros removed but at least one fractional digit (`0.0`, `7.1`, `2.000000001`).
pub(crate) fn push_secs(buf: &mut String, t: Timestamp) {
    push_nanos(buf, t.as_nanos());
}

/// [`push_secs`] for a span of nanoseconds.
pub(crate) fn push_nanos(buf: &mut String, nanos: u64) {
    let whole = nanos / NANOS_PER_SEC;
    let frac = nanos % NANOS_PER_SEC;
    let _ = write!(buf, "{whole}.");
    if frac == 0 {
        buf.push('0');
        return;
    }
    let start = buf.len();
    let _ = write!(buf, "{frac:09}");
    // frac > 0, so at least one digit stays.
    let kept = buf[start..].trim_end_matches('0').len();
    buf.truncate(start + kept);
}

/// Appends a JSON string literal (quotes included).
pub(crate) fn push_str_lit(buf: &mut String, s: &str) {
    buf.push('"');
    for c in s.chars() {
        match c {
            '"' => buf.push_str("\\\""),
            '\\' => buf.push_str("\\\\"),
            '\n' => buf.push_str("\\n"),
            '\r' => buf.push_str("\\r"),
            '\t' => buf.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(buf, "\\u{:04x}", c as u32);
            }
            c => buf.push(c),
        }
    }
    buf.push('"');
}

/// Appends a finite `f64` in Rust's shortest round-trip form (`2.0`, `0.5`, `1e-7`);
/// `null` for a non-finite value (never produced by validated settings).
pub(crate) fn push_f64(buf: &mut String, v: f64) {
    if v.is_finite() {
        let _ = write!(buf, "{v:?}");
    } else {
        buf.push_str("null");
    }
}

/// Why a pushed request was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The duplicate filter had seen it.
    Duplicate,
    /// Deeper than `depth_limit`.
    Depth,
}

impl DropReason {
    fn as_str(self) -> &'static str {
        match self {
            DropReason::Duplicate => "duplicate",
            DropReason::Depth => "depth",
        }
    }
}

/// How a request ended, as printed in its `done` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A response with this status.
    Status(u16),
    /// No response: an error of this kind (`timeout`, `connection`, ...).
    Error(Box<str>),
}

/// The line writer: event lines (unless summary-only) and the final summary.
pub(crate) struct Output<'w> {
    w: io::BufWriter<&'w mut dyn Write>,
    lines: bool,
    buf: String,
}

impl<'w> Output<'w> {
    /// Writes to `w`; event lines only when `lines` is set.
    pub(crate) fn new(w: &'w mut dyn Write, lines: bool) -> Self {
        Output {
            w: io::BufWriter::with_capacity(1 << 16, w),
            lines,
            buf: String::with_capacity(256),
        }
    }

    fn start(&mut self, at: Timestamp) {
        self.buf.clear();
        self.buf.push_str("{\"at\": ");
        push_secs(&mut self.buf, at);
    }

    fn finish(&mut self) -> io::Result<()> {
        self.buf.push_str("}\n");
        self.w.write_all(self.buf.as_bytes())
    }

    /// `{"at": T, "send": ID}`
    pub(crate) fn send(&mut self, at: Timestamp, id: &str) -> io::Result<()> {
        if !self.lines {
            return Ok(());
        }
        self.start(at);
        self.buf.push_str(", \"send\": ");
        push_str_lit(&mut self.buf, id);
        self.finish()
    }

    /// `{"at": T, "done": ID, "status": S}` or `{"at": T, "done": ID, "error": KIND}`
    pub(crate) fn done(&mut self, at: Timestamp, id: &str, answer: &Answer) -> io::Result<()> {
        if !self.lines {
            return Ok(());
        }
        self.start(at);
        self.buf.push_str(", \"done\": ");
        push_str_lit(&mut self.buf, id);
        match answer {
            Answer::Status(s) => {
                let _ = write!(self.buf, ", \"status\": {s}");
            }
            Answer::Error(kind) => {
                self.buf.push_str(", \"error\": ");
                push_str_lit(&mut self.buf, kind);
            }
        }
        self.finish()
    }

    /// `{"at": T, "dropped": ID, "reason": "duplicate" | "depth"}`
    pub(crate) fn dropped(
        &mut self,
        at: Timestamp,
        id: &str,
        reason: DropReason,
    ) -> io::Result<()> {
        if !self.lines {
            return Ok(());
        }
        self.start(at);
        self.buf.push_str(", \"dropped\": ");
        push_str_lit(&mut self.buf, id);
        self.buf.push_str(", \"reason\": ");
        push_str_lit(&mut self.buf, reason.as_str());
        self.finish()
    }

    /// Writes one finished line (the summary) and flushes.
    pub(crate) fn summary(&mut self, line: &str) -> io::Result<()> {
        self.w.write_all(line.as_bytes())?;
        self.w.write_all(b"\n")?;
        self.w.flush()
    }
}

/// Builds one JSON object with `", "` between members and `": "` after keys.
pub(crate) struct ObjectWriter<'b> {
    buf: &'b mut String,
    first: bool,
}

impl<'b> ObjectWriter<'b> {
    /// Opens an object at the end of `buf`.
    pub(crate) fn open(buf: &'b mut String) -> Self {
        buf.push('{');
        ObjectWriter { buf, first: true }
    }

    /// Starts a member and returns the buffer to append its value to.
    pub(crate) fn key(&mut self, key: &str) -> &mut String {
        if !self.first {
            self.buf.push_str(", ");
        }
        self.first = false;
        push_str_lit(self.buf, key);
        self.buf.push_str(": ");
        self.buf
    }

    /// A member with an unsigned integer value.
    pub(crate) fn uint(&mut self, key: &str, v: u64) {
        let _ = write!(self.key(key), "{v}");
    }

    /// A member with a float value.
    pub(crate) fn float(&mut self, key: &str, v: f64) {
        push_f64(self.key(key), v);
    }

    /// A member holding a time in seconds.
    pub(crate) fn time(&mut self, key: &str, t: Timestamp) {
        push_secs(self.key(key), t);
    }

    /// A member holding an object of counters.
    pub(crate) fn counts<K: std::fmt::Display>(&mut self, key: &str, counts: &BTreeMap<K, u64>) {
        let buf = self.key(key);
        let mut inner = ObjectWriter::open(buf);
        for (k, v) in counts {
            inner.uint(&k.to_string(), *v);
        }
        inner.close();
    }

    /// Closes the object.
    pub(crate) fn close(self) {
        self.buf.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(nanos: u64) -> String {
        let mut s = String::new();
        push_nanos(&mut s, nanos);
        s
    }

    #[test]
    fn times_print_as_exact_short_decimals() {
        assert_eq!(secs(0), "0.0");
        assert_eq!(secs(7_000_000_000), "7.0");
        assert_eq!(secs(7_100_000_000), "7.1");
        assert_eq!(secs(2_000_000_001), "2.000000001");
        assert_eq!(secs(120_000), "0.00012");
        assert_eq!(secs(3_600_250_000_000), "3600.25");
        // Seconds parsed from text land on the nanosecond the text names.
        let t = Timestamp::from_secs_f64(7.1);
        let mut s = String::new();
        push_secs(&mut s, t);
        assert_eq!(s, "7.1");
    }

    #[test]
    fn lines_have_fixed_shape() {
        let mut sink = Vec::new();
        {
            let mut out = Output::new(&mut sink, true);
            let t = Timestamp::from_millis(7100);
            out.send(Timestamp::from_secs(7), "r2").unwrap();
            out.done(t, "r2", &Answer::Status(429)).unwrap();
            out.done(t, "r\"3", &Answer::Error("timeout".into()))
                .unwrap();
            out.dropped(Timestamp::ZERO, "r4", DropReason::Duplicate)
                .unwrap();
            out.summary("{}").unwrap();
        }
        assert_eq!(
            String::from_utf8(sink).unwrap(),
            "{\"at\": 7.0, \"send\": \"r2\"}\n\
             {\"at\": 7.1, \"done\": \"r2\", \"status\": 429}\n\
             {\"at\": 7.1, \"done\": \"r\\\"3\", \"error\": \"timeout\"}\n\
             {\"at\": 0.0, \"dropped\": \"r4\", \"reason\": \"duplicate\"}\n\
             {}\n"
        );
    }

    #[test]
    fn summary_only_skips_event_lines() {
        let mut sink = Vec::new();
        {
            let mut out = Output::new(&mut sink, false);
            out.send(Timestamp::ZERO, "r1").unwrap();
            out.summary("{\"summary\": {}}").unwrap();
        }
        assert_eq!(sink, b"{\"summary\": {}}\n");
    }

    #[test]
    fn objects_use_the_documented_spacing() {
        let mut s = String::new();
        let mut o = ObjectWriter::open(&mut s);
        o.uint("sent", 3);
        o.float("delay", 2.0);
        o.counts("responses", &BTreeMap::from([(200u16, 2u64), (429, 1)]));
        o.close();
        assert_eq!(
            s,
            "{\"sent\": 3, \"delay\": 2.0, \"responses\": {\"200\": 2, \"429\": 1}}"
        );
    }
}
