//! Rate-limit headers: how long a server asked us to wait.
//!
//! Understood headers (names are case-insensitive):
//!
//! | header | value |
//! |---|---|
//! | `Retry-After` | whole seconds (ASCII digits) or an HTTP-date in any of its three forms |
//! | `RateLimit-Reset` | seconds, possibly fractional |
//! | `RateLimit` | the IETF draft's field: `limit=100, remaining=0, reset=30` (also `;t=30`) |
//! | `X-RateLimit-Reset` | seconds when small, a Unix time when above 10⁹ |
//!
//! When several are present the largest wait wins. A value that is zero, negative,
//! non-finite, unparsable or a date in the past counts as absent, so the completion falls
//! back to a plain exponential backoff step.
//!
//! HTTP-dates and Unix times need the current wall-clock time; pass it as a
//! [`Timestamp`] counted from the Unix epoch. Without it those forms are ignored.
//!
//! [`Outcome::response`](crate::Outcome::response) runs these parsers itself; call them
//! directly to read the figures (or to build an [`Outcome::parsed`](crate::Outcome::parsed)
//! from headers parsed elsewhere).
//!
//! ```
//! use core::time::Duration;
//! use polite_throttle_core::{Timestamp, headers::header_delay};
//!
//! let wall = Timestamp::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
//! let headers = [
//!     ("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT"), // 30 s from now
//!     ("RateLimit", "limit=10, remaining=0, reset=12"),
//! ];
//! assert_eq!(header_delay(headers, Some(wall)), Some(Duration::from_secs(30)));
//! assert_eq!(header_delay([("Retry-After", "-3")], None), None);
//! ```

use core::time::Duration;

use crate::time::Timestamp;

/// Unix times above this (about 2001-09-09) in `X-RateLimit-Reset` are absolute.
const EPOCH_THRESHOLD: f64 = 1e9;

/// The largest wait requested by the rate-limit headers in `headers`, if any.
///
/// `headers` yields `(name, value)` pairs of anything byte-like (`&str`, `&[u8]`,
/// `http::HeaderName`/`HeaderValue`, ...). `wall_clock` is the current time counted from
/// the Unix epoch, needed for HTTP-dates and absolute reset times.
pub fn header_delay<I, N, V>(headers: I, wall_clock: Option<Timestamp>) -> Option<Duration>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    scan(headers, wall_clock).0
}

/// How long until a budget the headers announce as spent is renewed: the reset of a
/// `RateLimit` field whose `remaining` (or `r`) is 0, or `RateLimit-Reset` /
/// `X-RateLimit-Reset` beside a `RateLimit-Remaining` / `X-RateLimit-Remaining` of 0.
/// `None` when no header says the budget is spent (or gives no reset).
///
/// A response that says so is not a failure (it may be a 200), but the next request
/// would earn a 429: the throttler holds its scopes until the reset.
///
/// ```
/// use core::time::Duration;
/// use polite_throttle_core::headers::budget_reset;
///
/// let spent = [("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "2")];
/// assert_eq!(budget_reset(spent, None), Some(Duration::from_secs(2)));
/// let left = [("RateLimit", "limit=10, remaining=3, reset=2")];
/// assert_eq!(budget_reset(left, None), None);
/// assert_eq!(budget_reset([("RateLimit", "\"default\";r=0;t=5")], None), Some(Duration::from_secs(5)));
/// ```
pub fn budget_reset<I, N, V>(headers: I, wall_clock: Option<Timestamp>) -> Option<Duration>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    scan(headers, wall_clock).1
}

/// One pass over the headers: the largest requested wait, and the reset of a spent
/// budget.
pub(crate) fn scan<I, N, V>(
    headers: I,
    wall_clock: Option<Timestamp>,
) -> (Option<Duration>, Option<Duration>)
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut best: Option<f64> = None;
    // Resets and "remaining is zero" of the split header families.
    let (mut ietf_reset, mut ietf_spent) = (None, false);
    let (mut x_reset, mut x_spent) = (None, false);
    let mut field_spent: Option<f64> = None;
    for (name, value) in headers {
        let name = name.as_ref();
        let value = value.as_ref();
        let secs = if name.eq_ignore_ascii_case(b"retry-after") {
            retry_after_secs(value, wall_clock)
        } else if name.eq_ignore_ascii_case(b"ratelimit-reset") {
            ietf_reset = decimal_seconds(value);
            ietf_reset
        } else if name.eq_ignore_ascii_case(b"ratelimit") {
            let (reset, spent) = ratelimit_field(value);
            if let Some(s) = spent {
                field_spent = Some(field_spent.map_or(s, |b: f64| b.max(s)));
            }
            reset
        } else if name.eq_ignore_ascii_case(b"x-ratelimit-reset") {
            x_reset = x_ratelimit_reset_secs(value, wall_clock);
            x_reset
        } else {
            if name.eq_ignore_ascii_case(b"ratelimit-remaining") {
                ietf_spent = is_zero(value);
            } else if name.eq_ignore_ascii_case(b"x-ratelimit-remaining") {
                x_spent = is_zero(value);
            }
            None
        };
        if let Some(s) = secs.filter(|s| s.is_finite() && *s > 0.0) {
            best = Some(best.map_or(s, |b: f64| b.max(s)));
        }
    }
    let spent = [
        field_spent,
        ietf_reset.filter(|_| ietf_spent),
        x_reset.filter(|_| x_spent),
    ]
    .into_iter()
    .flatten()
    .filter(|s| s.is_finite() && *s > 0.0)
    .fold(None, |b: Option<f64>, s| Some(b.map_or(s, |b| b.max(s))));
    (
        best.map(crate::time::secs_to_duration),
        spent.map(crate::time::secs_to_duration),
    )
}

/// `0` (or `0.0`): a remaining budget of nothing.
fn is_zero(value: &[u8]) -> bool {
    decimal_seconds(value) == Some(0.0)
}

/// Parses one `Retry-After` value: delay-seconds or an HTTP-date.
pub fn parse_retry_after(value: &[u8], wall_clock: Option<Timestamp>) -> Option<Duration> {
    positive(retry_after_secs(value, wall_clock))
}

/// Parses one `RateLimit-Reset` value (delta seconds, possibly fractional).
pub fn parse_ratelimit_reset(value: &[u8]) -> Option<Duration> {
    positive(decimal_seconds(value))
}

/// Parses the IETF draft's combined `RateLimit` field and returns its reset delay.
pub fn parse_ratelimit(value: &[u8]) -> Option<Duration> {
    positive(ratelimit_field_secs(value))
}

/// Parses one `X-RateLimit-Reset` value: delta seconds, or a Unix time above 10⁹.
pub fn parse_x_ratelimit_reset(value: &[u8], wall_clock: Option<Timestamp>) -> Option<Duration> {
    positive(x_ratelimit_reset_secs(value, wall_clock))
}

fn positive(secs: Option<f64>) -> Option<Duration> {
    secs.filter(|s| s.is_finite() && *s > 0.0)
        .map(crate::time::secs_to_duration)
}

fn retry_after_secs(value: &[u8], wall_clock: Option<Timestamp>) -> Option<f64> {
    let v = value.trim_ascii();
    if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
        return Some(digits_value(v));
    }
    let date = parse_http_date(v)?;
    Some(secs_until(date as f64, wall_clock?))
}

/// Seconds from `wall` to the Unix time `unix_secs`. The wall clock's whole seconds and
/// its fraction are subtracted separately: as one `f64`, a Unix time of today has only
/// about 0.2 µs of resolution, which would end a wait slightly before the instant the
/// server named.
fn secs_until(unix_secs: f64, wall: Timestamp) -> f64 {
    let nanos = wall.as_nanos();
    let whole = (nanos / 1_000_000_000) as f64;
    let frac = (nanos % 1_000_000_000) as f64 / 1e9;
    (unix_secs - whole) - frac
}

fn x_ratelimit_reset_secs(value: &[u8], wall_clock: Option<Timestamp>) -> Option<f64> {
    let v = decimal_seconds(value)?;
    if v > EPOCH_THRESHOLD {
        Some(secs_until(v, wall_clock?))
    } else {
        Some(v)
    }
}

/// The value of a run of ASCII digits (saturating to a huge float on overflow).
fn digits_value(digits: &[u8]) -> f64 {
    digits
        .iter()
        .fold(0.0, |acc, d| acc * 10.0 + f64::from(d - b'0'))
}

/// `digits [ "." digits ]` and nothing else (no sign, exponent, `inf` or `nan`).
fn decimal_seconds(value: &[u8]) -> Option<f64> {
    let v = value.trim_ascii();
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], Some(&v[dot + 1..])),
        None => (v, None),
    };
    if int.is_empty() || !int.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut secs = digits_value(int);
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut scale = 0.1;
        for d in frac {
            secs += f64::from(d - b'0') * scale;
            scale /= 10.0;
        }
    }
    Some(secs)
}

/// The reset delay in a `RateLimit` field: the largest `reset=` member or `t=` parameter.
fn ratelimit_field_secs(value: &[u8]) -> Option<f64> {
    ratelimit_field(value).0
}

/// A `RateLimit` field's largest reset, and the largest reset of a policy whose
/// remaining budget is 0. Both drafts are read: `limit=10, remaining=0, reset=30` (one
/// policy per field) and `"name";r=0;t=30` (one policy per member).
fn ratelimit_field(value: &[u8]) -> (Option<f64>, Option<f64>) {
    let max = |b: Option<f64>, s: f64| Some(b.map_or(s, |b: f64| b.max(s)));
    let (mut best, mut spent) = (None, None);
    // The older draft spreads one policy over the members.
    let (mut old_reset, mut old_spent) = (None, false);
    for member in split_outside_quotes(value, b',') {
        let (mut reset, mut zero) = (None, false);
        for (i, part) in split_outside_quotes(member, b';').enumerate() {
            let Some(eq) = part.iter().position(|&b| b == b'=') else {
                continue;
            };
            let key = part[..eq].trim_ascii();
            let v = &part[eq + 1..];
            if i == 0 && key.eq_ignore_ascii_case(b"reset") {
                old_reset = decimal_seconds(v).or(old_reset);
                if let Some(s) = decimal_seconds(v) {
                    best = max(best, s);
                }
            } else if i == 0 && key.eq_ignore_ascii_case(b"remaining") {
                old_spent |= is_zero(v);
            } else if i > 0 && key.eq_ignore_ascii_case(b"t") {
                reset = decimal_seconds(v);
                if let Some(s) = reset {
                    best = max(best, s);
                }
            } else if i > 0 && key.eq_ignore_ascii_case(b"r") {
                zero = is_zero(v);
            }
        }
        if zero && let Some(s) = reset {
            spent = max(spent, s);
        }
    }
    if old_spent && let Some(s) = old_reset {
        spent = max(spent, s);
    }
    (best, spent)
}

/// Splits on `sep`, ignoring separators inside double-quoted strings.
fn split_outside_quotes(value: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(value);
    core::iter::from_fn(move || {
        let v = rest?;
        let mut quoted = false;
        let mut escaped = false;
        for (i, &b) in v.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if b == sep && !quoted {
                rest = Some(&v[i + 1..]);
                return Some(&v[..i]);
            }
        }
        rest = None;
        Some(v)
    })
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const SHORT_DAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const LONG_DAYS: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];

/// Parses an HTTP-date in any of the three forms of RFC 9110 and returns Unix seconds:
///
/// - IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`
/// - obsolete RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit years below 70 are 20xx)
/// - obsolete asctime: `Sun Nov  6 08:49:37 1994`
///
/// ```
/// use polite_throttle_core::headers::parse_http_date;
///
/// assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
/// assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
/// assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777));
/// assert_eq!(parse_http_date(b"yesterday"), None);
/// ```
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    let comma = v.iter().position(|&b| b == b',');
    match comma {
        Some(3) => imf_fixdate(v),
        Some(_) => rfc850(v),
        None => asctime(v),
    }
}

struct DateParts {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl DateParts {
    fn to_unix(&self) -> Option<u64> {
        if !(1..=12).contains(&self.month)
            || self.day == 0
            || self.day > days_in_month(self.year, self.month)
            || self.hour > 23
            || self.minute > 59
            || self.second > 60
            || self.year < 1970
        {
            return None;
        }
        let days = days_from_civil(self.year, self.month, self.day);
        Some(
            days * 86_400
                + u64::from(self.hour) * 3600
                + u64::from(self.minute) * 60
                + u64::from(self.second),
        )
    }
}

fn is_leap(y: u32) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian, year ≥ 1970).
fn days_from_civil(y: u32, m: u32, d: u32) -> u64 {
    let y = if m <= 2 { y - 1 } else { y } as u64;
    let era = y / 400;
    let yoe = y - era * 400;
    let m = u64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + u64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn number(bytes: &[u8]) -> Option<u32> {
    if bytes.is_empty() || bytes.len() > 4 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits_value(bytes) as u32)
}

fn month(bytes: &[u8]) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| m.as_slice() == bytes)
        .map(|i| i as u32 + 1)
}

/// `HH:MM:SS`
fn clock(bytes: &[u8]) -> Option<(u32, u32, u32)> {
    if bytes.len() != 8 || bytes[2] != b':' || bytes[5] != b':' {
        return None;
    }
    Some((
        number(&bytes[0..2])?,
        number(&bytes[3..5])?,
        number(&bytes[6..8])?,
    ))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn imf_fixdate(v: &[u8]) -> Option<u64> {
    if v.len() != 29 || !SHORT_DAYS.contains(&&v[0..3]) || &v[3..5] != b", " {
        return None;
    }
    if v[7] != b' ' || v[11] != b' ' || v[16] != b' ' || &v[25..] != b" GMT" {
        return None;
    }
    let (hour, minute, second) = clock(&v[17..25])?;
    DateParts {
        day: number(&v[5..7])?,
        month: month(&v[8..11])?,
        year: number(&v[12..16])?,
        hour,
        minute,
        second,
    }
    .to_unix()
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`
fn rfc850(v: &[u8]) -> Option<u64> {
    let comma = v.iter().position(|&b| b == b',')?;
    if !LONG_DAYS.contains(&&v[..comma]) {
        return None;
    }
    let rest = &v[comma + 1..];
    // " 06-Nov-94 08:49:37 GMT"
    if rest.len() != 23 || rest[0] != b' ' || rest[3] != b'-' || rest[7] != b'-' {
        return None;
    }
    if rest[10] != b' ' || &rest[19..] != b" GMT" {
        return None;
    }
    let yy = number(&rest[8..10])?;
    let (hour, minute, second) = clock(&rest[11..19])?;
    DateParts {
        day: number(&rest[1..3])?,
        month: month(&rest[4..7])?,
        year: if yy < 70 { 2000 + yy } else { 1900 + yy },
        hour,
        minute,
        second,
    }
    .to_unix()
}

/// `Sun Nov  6 08:49:37 1994`
fn asctime(v: &[u8]) -> Option<u64> {
    if v.len() != 24 || !SHORT_DAYS.contains(&&v[0..3]) || v[3] != b' ' || v[7] != b' ' {
        return None;
    }
    if v[10] != b' ' || v[19] != b' ' {
        return None;
    }
    let day_field = &v[8..10];
    let day = if day_field[0] == b' ' {
        number(&day_field[1..])?
    } else {
        number(day_field)?
    };
    let (hour, minute, second) = clock(&v[11..19])?;
    DateParts {
        day,
        month: month(&v[4..7])?,
        year: number(&v[20..24])?,
        hour,
        minute,
        second,
    }
    .to_unix()
}

#[cfg(test)]
mod tests {
    #[test]
    fn budget_reset_needs_a_zero_remaining_and_a_reset_of_the_same_family() {
        let b = |h: &[(&str, &str)]| budget_reset(h.iter().copied(), None).map(|d| d.as_secs_f64());
        assert_eq!(
            b(&[("RateLimit", "limit=10, remaining=0, reset=3")]),
            Some(3.0)
        );
        assert_eq!(b(&[("RateLimit", "limit=10, remaining=2, reset=3")]), None);
        assert_eq!(
            b(&[("RateLimit", "\"a\";r=5;t=9, \"b\";r=0;t=4")]),
            Some(4.0)
        );
        assert_eq!(
            b(&[("RateLimit-Remaining", "0"), ("RateLimit-Reset", "1.5")]),
            Some(1.5)
        );
        assert_eq!(
            b(&[("ratelimit-reset", "1.5"), ("RATELIMIT-REMAINING", "0")]),
            Some(1.5)
        );
        assert_eq!(
            b(&[("X-RateLimit-Remaining", "0"), ("RateLimit-Reset", "7")]),
            None
        );
        assert_eq!(b(&[("X-RateLimit-Remaining", "0")]), None, "no reset");
        assert_eq!(
            b(&[("X-RateLimit-Remaining", "00"), ("X-RateLimit-Reset", "2")]),
            Some(2.0)
        );
        assert_eq!(
            b(&[("X-RateLimit-Remaining", "-0"), ("X-RateLimit-Reset", "2")]),
            None
        );
        assert_eq!(
            b(&[("Retry-After", "5")]),
            None,
            "Retry-After is not a budget"
        );
        let wall = Timestamp::from_secs(1_735_689_600);
        let abs = [
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1735689610"),
        ];
        assert_eq!(budget_reset(abs, Some(wall)), Some(Duration::from_secs(10)));
        // header_delay is unchanged by the budget scan.
        assert_eq!(
            header_delay([("RateLimit", "limit=10, remaining=2, reset=3")], None),
            Some(Duration::from_secs(3))
        );
    }

    use super::*;
    use proptest::prelude::*;
    use std::time::{SystemTime, UNIX_EPOCH};
    use std::{format, vec::Vec};

    const WALL: Timestamp = Timestamp::from_secs(784_111_777); // 1994-11-06 08:49:37

    fn secs(v: &str) -> Option<f64> {
        header_delay([("Retry-After", v)], Some(WALL)).map(|d| d.as_secs_f64())
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(secs("7"), Some(7.0));
        assert_eq!(secs(" 120 "), Some(120.0));
        assert_eq!(secs("0"), None);
        assert_eq!(secs("-3"), None);
        assert_eq!(secs("1.5"), None, "delay-seconds are whole numbers");
        assert_eq!(secs("+5"), None);
        assert_eq!(secs(""), None);
        assert_eq!(secs("soon"), None);
        // Absurdly large values parse (the throttler caps them at max_delay).
        assert!(secs("99999999999999999999999").unwrap() > 1e18);
    }

    #[test]
    fn retry_after_dates_in_all_three_forms() {
        assert_eq!(secs("Sun, 06 Nov 1994 08:50:07 GMT"), Some(30.0));
        assert_eq!(secs("Sunday, 06-Nov-94 08:50:07 GMT"), Some(30.0));
        assert_eq!(secs("Sun Nov  6 08:50:07 1994"), Some(30.0));
        // In the past or now: absent.
        assert_eq!(secs("Sun, 06 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(secs("Sat, 05 Nov 1994 08:49:37 GMT"), None);
        // No wall clock: dates cannot be converted.
        assert_eq!(
            header_delay([("Retry-After", "Sun, 06 Nov 1994 08:50:07 GMT")], None),
            None
        );
    }

    #[test]
    fn absolute_times_keep_the_wall_clock_fraction_exact() {
        // 2025-01-01 00:00:38.4 UTC: as one f64 this Unix time is off by ~0.1 µs, which
        // used to end the wait 95 ns before 00:01:30.
        let wall = Some(Timestamp::from_nanos(1_735_689_638_400_000_000));
        let wait = Duration::from_millis(51_600);
        assert_eq!(
            header_delay([("Retry-After", "Wed, 01 Jan 2025 00:01:30 GMT")], wall),
            Some(wait)
        );
        assert_eq!(
            header_delay([("X-RateLimit-Reset", "1735689690")], wall),
            Some(wait)
        );
        assert_eq!(
            header_delay([("X-RateLimit-Reset", "1735689690.25")], wall),
            Some(Duration::from_millis(51_850))
        );
    }

    #[test]
    fn malformed_dates_are_rejected() {
        for bad in [
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nox 1994 08:49:37 GMT",
            "Sun,  6 Nov 1994 08:49:37 GMT",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
            "Someday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Sun, 06 Nov 1969 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT trailing",
        ] {
            assert_eq!(parse_http_date(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(
            parse_http_date(b"Thu, 29 Feb 2024 00:00:00 GMT"),
            Some(1_709_164_800)
        );
        assert_eq!(
            parse_http_date(b"Thursday, 01-Jan-70 00:00:00 GMT"),
            Some(0)
        );
        assert_eq!(
            parse_http_date(b"Monday, 01-Jan-35 00:00:00 GMT"),
            Some(2_051_222_400)
        );
    }

    #[test]
    fn ratelimit_reset_and_field() {
        let d =
            |name: &str, v: &str| header_delay([(name, v)], Some(WALL)).map(|d| d.as_secs_f64());
        assert_eq!(d("RateLimit-Reset", "2.5"), Some(2.5));
        assert_eq!(d("ratelimit-reset", "30"), Some(30.0));
        assert_eq!(d("RateLimit-Reset", "-3"), None);
        assert_eq!(d("RateLimit-Reset", "inf"), None);
        assert_eq!(d("RateLimit-Reset", "NaN"), None);
        assert_eq!(d("RateLimit-Reset", "1e3"), None);
        assert_eq!(d("RateLimit-Reset", "0"), None);
        assert_eq!(d("RateLimit-Reset", "3."), None);
        assert_eq!(
            d("RateLimit", "limit=100, remaining=0, reset=30"),
            Some(30.0)
        );
        assert_eq!(d("RATELIMIT", "reset=4.5,limit=1"), Some(4.5));
        assert_eq!(d("RateLimit", r#""default";r=0;t=12"#), Some(12.0));
        assert_eq!(d("RateLimit", r#""a,b";t=3, "c";t=9"#), Some(9.0));
        assert_eq!(d("RateLimit", "limit=100, remaining=0"), None);
        assert_eq!(d("RateLimit", "reset=-1"), None);
    }

    #[test]
    fn x_ratelimit_reset_delta_or_epoch() {
        let d =
            |v: &str, wall| header_delay([("X-RateLimit-Reset", v)], wall).map(|d| d.as_secs_f64());
        let wall = Some(Timestamp::from_secs(1_800_000_000));
        assert_eq!(d("20", None), Some(20.0));
        assert_eq!(
            d("999999999", None),
            Some(999_999_999.0),
            "at the threshold: a delta"
        );
        assert_eq!(d("1800000060", wall), Some(60.0));
        assert_eq!(d("1800000060", None), None, "absolute without a wall clock");
        assert_eq!(d("1799999990", wall), None, "absolute in the past");
    }

    #[test]
    fn largest_of_several_wins() {
        let headers = [
            ("Retry-After", "5"),
            ("RateLimit-Reset", "12.5"),
            ("X-RateLimit-Reset", "3"),
            ("Content-Type", "text/html"),
            ("Retry-After", "garbage"),
        ];
        assert_eq!(
            header_delay(headers, None),
            Some(Duration::from_millis(12_500))
        );
        let bytes: [(&[u8], &[u8]); 1] = [(b"retry-after", b"9")];
        assert_eq!(header_delay(bytes, None), Some(Duration::from_secs(9)));
    }

    #[test]
    fn individual_parsers() {
        assert_eq!(parse_retry_after(b"3", None), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_ratelimit_reset(b"0.25"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(parse_ratelimit(b"reset=2"), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_x_ratelimit_reset(b"2", None),
            Some(Duration::from_secs(2))
        );
    }

    proptest! {
        /// Every date httpdate formats (in each of the three forms) parses back to the
        /// same second.
        #[test]
        fn agrees_with_httpdate(secs in 0u64..253_402_300_799) {
            let t = UNIX_EPOCH + std::time::Duration::from_secs(secs);
            let imf = httpdate::fmt_http_date(t);
            prop_assert_eq!(parse_http_date(imf.as_bytes()), Some(secs));
            // Build the two obsolete forms from the same parts.
            let parts: Vec<&str> = imf.split(' ').collect();
            let (day, mon, year, clock) = (parts[1], parts[2], parts[3], parts[4]);
            let y: u32 = year.parse().unwrap();
            let wd = &parts[0][..3];
            let long = LONG_DAYS.iter().find(|l| l.starts_with(wd.as_bytes())).unwrap();
            let long = std::str::from_utf8(long).unwrap();
            if (1970..2070).contains(&y) {
                let rfc850 = format!("{long}, {day}-{mon}-{:02} {clock} GMT", y % 100);
                prop_assert_eq!(parse_http_date(rfc850.as_bytes()), Some(secs));
            }
            let asc = format!("{wd} {mon} {:>2} {clock} {year}", day.trim_start_matches('0'));
            prop_assert_eq!(parse_http_date(asc.as_bytes()), Some(secs));
            // And what we accept, httpdate accepts too.
            prop_assert_eq!(
                httpdate::parse_http_date(&imf).ok().map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs()),
                Some(secs)
            );
        }

        /// Arbitrary bytes never panic and never yield a non-positive delay.
        #[test]
        fn arbitrary_values_are_safe(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
            let wall = Some(Timestamp::from_secs(now));
            for name in ["Retry-After", "RateLimit-Reset", "RateLimit", "X-RateLimit-Reset"] {
                if let Some(d) = header_delay([(name.as_bytes(), bytes.as_slice())], wall) {
                    prop_assert!(d > Duration::ZERO);
                }
            }
            let _ = parse_http_date(&bytes);
        }
    }
}
