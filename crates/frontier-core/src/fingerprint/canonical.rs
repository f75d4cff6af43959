//! The w3lib-compatible URL canonicaliser: scheme, netloc, port, path and query rules.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use super::host::write_host;
use super::ipv6::parse_ipv6;
use super::quote::{
    CLASS, PATH_SAFE, PATH_SAFEST, SCHEME, USERINFO, quote_into, quote_plus_into, unquote_into,
};
use super::{Fingerprinter, UrlError};

/// `w3lib.url.canonicalize_url(url)` with default arguments.
///
/// Relative and scheme-less inputs are canonicalized the way w3lib does it
/// (e.g. `"/a?b=1"` stays `"/a?b=1"`); only inputs that make w3lib raise are
/// rejected.
pub fn canonicalize_url(url: &str) -> Result<String, UrlError> {
    let mut c = Fingerprinter::new();
    c.canonicalize_impl(url)?;
    Ok(c.out)
}

/// w3lib `_SPECIAL_SCHEMES` (URL living standard special schemes).
const SPECIAL: u8 = 1;
/// `urllib.parse.uses_netloc` (Python 3.11).
const USES_NETLOC: u8 = 2;
/// `urllib.parse.uses_params` (Python 3.11).
const USES_PARAMS: u8 = 4;

/// Membership of a scheme in w3lib's and urllib's scheme lists.
fn scheme_flags(scheme: &str) -> u8 {
    let mut buf = [0u8; 12];
    let Some(dst) = buf.get_mut(..scheme.len()) else {
        return 0;
    };
    dst.copy_from_slice(scheme.as_bytes());
    dst.make_ascii_lowercase();
    match &*dst {
        b"" => USES_PARAMS,
        b"http" | b"https" | b"ftp" => SPECIAL | USES_NETLOC | USES_PARAMS,
        b"file" | b"ws" | b"wss" => SPECIAL | USES_NETLOC,
        b"imap" | b"mms" | b"prospero" | b"rtsp" | b"rtsps" | b"rtspu" | b"sftp" | b"shttp" => {
            USES_NETLOC | USES_PARAMS
        }
        b"gopher" | b"nntp" | b"telnet" | b"wais" | b"snews" | b"rsync" | b"svn" | b"svn+ssh"
        | b"nfs" | b"git" | b"git+ssh" => USES_NETLOC,
        b"hdl" | b"sip" | b"sips" | b"tel" => USES_PARAMS,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------
// Canonicalization
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
    /// In `scratch` (decoded) rather than in the query string itself.
    pub(super) decoded: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Pair {
    key: Span,
    value: Span,
}

fn span_bytes<'a>(span: Span, query: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
    let src = if span.decoded { scratch } else { query };
    src.get(span.start..span.end).unwrap_or(&[])
}

/// `_strip` + the tab/newline removal of `_urlsplit`.
fn strip_url(url: &str) -> Cow<'_, str> {
    // Branch-free per chunk so that the common (clean) case vectorizes.
    let clean = url
        .as_bytes()
        .chunks(16)
        .all(|c| c.iter().fold(true, |ok, &b| ok & (b > 0x20)));
    if clean {
        return Cow::Borrowed(url);
    }
    let t = url.trim_matches(|c: char| c <= '\u{20}');
    if t.bytes().any(|b| matches!(b, b'\t' | b'\n' | b'\r')) {
        Cow::Owned(
            t.chars()
                .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
                .collect(),
        )
    } else {
        Cow::Borrowed(t)
    }
}

/// `_SCHEME_RE`: `^([a-zA-Z][a-zA-Z0-9+.-]*):`
fn split_scheme(s: &str) -> (&str, &str) {
    let b = s.as_bytes();
    if b.first().is_some_and(|c| c.is_ascii_alphabetic()) {
        for (i, &c) in b.iter().enumerate().skip(1) {
            if c == b':' {
                return (&s[..i], &s[i + 1..]);
            }
            if CLASS[usize::from(c)] & SCHEME == 0 {
                break;
            }
        }
    }
    ("", s)
}

#[inline]
fn rfind_byte(s: &[u8], c: u8) -> Option<usize> {
    s.iter().rposition(|&b| b == c)
}

/// A plain loop: cheaper than `memchr` (what `contains` uses) for the short
/// strings found in URLs.
#[inline]
#[allow(clippy::manual_contains)]
pub(super) fn has_byte(s: &[u8], c: u8) -> bool {
    s.iter().any(|&b| b == c)
}

#[inline]
fn starts_with_2(s: &[u8], a: u8, b: u8) -> bool {
    matches!(s, [x, y, ..] if *x == a && *y == b)
}

/// `"/." in path` (w3lib's quick test before resolving dot segments).
#[inline]
fn has_dot_segment(s: &[u8]) -> bool {
    s.windows(2).any(|w| w[0] == b'/' && w[1] == b'.')
}

fn find_from(s: &str, from: usize, c: u8) -> Option<usize> {
    s.as_bytes()
        .get(from..)?
        .iter()
        .position(|&b| b == c)
        .map(|p| p + from)
}

/// Result of one canonicalization pass (the URL itself is in `out`).
pub(super) struct Outcome {
    /// Scrapy's `Request` accepts the URL (`://` in it, or `about:`/`data:`).
    pub(super) accepted: bool,
    /// `safe_url_string(url)` ends with a host that ends with a space or C0
    /// control, which Scrapy's second canonicalization pass strips.
    pub(super) host_ends_url_with_space: bool,
    /// A bracketed IPvFuture host without `:` loses its brackets in
    /// `safe_url_string(url)`; if it contains a `[`, Scrapy's second pass
    /// then fails ("Invalid IPv6 URL").
    pub(super) second_pass_fails: bool,
}

/// First positions (from `from`) of `/ ? # [ ]`, found in one pass.
struct Delims {
    slash: Option<usize>,
    question: Option<usize>,
    pub(super) hash: Option<usize>,
    open: Option<usize>,
    close: Option<usize>,
}

const DELIM_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'/' as usize] = 1;
    t[b'?' as usize] = 2;
    t[b'#' as usize] = 3;
    t[b'[' as usize] = 4;
    t[b']' as usize] = 5;
    t
};

fn scan_delims(s: &str, from: usize) -> Delims {
    let mut pos = [usize::MAX; 6];
    let bytes = s.as_bytes().get(from..).unwrap_or(&[]);
    for (i, &b) in bytes.iter().enumerate() {
        let class = usize::from(DELIM_CLASS[usize::from(b)]);
        if class != 0 && pos[class] == usize::MAX {
            pos[class] = i;
        }
    }
    let at = |k: usize| (pos[k] != usize::MAX).then(|| from + pos[k]);
    Delims {
        slash: at(1),
        question: at(2),
        hash: at(3),
        open: at(4),
        close: at(5),
    }
}

impl Fingerprinter {
    /// Canonicalizes `url` into `self.out`. Reports what Scrapy-specific
    /// checks [`fingerprint`] needs (see [`Outcome`]).
    pub(super) fn canonicalize_impl(&mut self, url: &str) -> Result<Outcome, UrlError> {
        self.out.clear();
        let cleaned = strip_url(url);
        let (scheme, rest) = split_scheme(&cleaned);
        let flags = scheme_flags(scheme);
        let special = flags & SPECIAL != 0;

        // "\" acts like "/" in the authority and path of special-scheme URLs.
        let rest: Cow<'_, str> = if special && has_byte(rest.as_bytes(), b'\\') {
            let cut = rest.find(['?', '#']).unwrap_or(rest.len());
            let mut s = rest[..cut].replace('\\', "/");
            s.push_str(&rest[cut..]);
            Cow::Owned(s)
        } else {
            Cow::Borrowed(rest)
        };
        let rest: &str = &rest;

        // --- _urlsplit ------------------------------------------------------
        let has_authority = starts_with_2(rest.as_bytes(), b'/', b'/');
        let scan = if has_authority { 2 } else { 0 };
        let d = scan_delims(rest, scan);
        let mut question = d.question;
        let mut hash = d.hash;
        let (netloc, mut path, bracketed) = if has_authority {
            let mut delim = rest.len();
            for p in [d.slash, question, hash].into_iter().flatten() {
                delim = delim.min(p);
            }
            let open = d.open.filter(|&p| p < delim);
            let close = d.close.filter(|&p| p < delim);
            if open.is_some() != close.is_some() {
                return Err(UrlError::InvalidIpv6);
            }
            let netloc = &rest[2..delim];
            if open.is_some() {
                check_bracketed_netloc(netloc)?;
            }
            question = question.map(|q| q - delim);
            hash = hash.map(|h| h - delim);
            (netloc, &rest[delim..], open.is_some())
        } else {
            ("", rest, false)
        };
        check_netloc_nfkc(netloc)?;

        let mut fragment = "";
        if let Some(h) = hash {
            fragment = &path[h + 1..];
            path = &path[..h];
        }
        let mut query = "";
        if let Some(q) = question
            && q < path.len()
        {
            query = &path[q + 1..];
            path = &path[..q];
        }

        let (userinfo, hostinfo) = match rfind_byte(netloc.as_bytes(), b'@') {
            Some(i) => (Some(&netloc[..i]), &netloc[i + 1..]),
            None => (None, netloc),
        };
        let (hostname, port) = if bracketed {
            let inner = hostinfo.split_once('[').map_or("", |(_, r)| r);
            let (h, after) = inner.split_once(']').unwrap_or((inner, ""));
            (h, after.split_once(':').map_or("", |(_, p)| p))
        } else {
            hostinfo.split_once(':').unwrap_or((hostinfo, ""))
        };
        let port = if port.is_empty() {
            None
        } else {
            Some(parse_port(port)?)
        };

        // --- Scrapy's "Missing scheme" check on safe_url_string(url) ----------
        let netloc_nonempty = userinfo.is_some() || !hostname.is_empty() || port.is_some();
        let safe_path_slash = path.is_empty() || path.as_bytes()[0] == b'/';
        let authority_marker = netloc_nonempty
            || starts_with_2(path.as_bytes(), b'/', b'/')
            || (flags & USES_NETLOC != 0 && safe_path_slash);
        let accepted = (!scheme.is_empty() && authority_marker)
            || path.contains("://")
            || query.contains("://")
            || fragment.contains("://")
            || scheme.eq_ignore_ascii_case("about")
            || scheme.eq_ignore_ascii_case("data");

        // --- output: scheme ---------------------------------------------------
        // Written as bytes (all ASCII except a raw non-ASCII host, which is
        // copied from a str), turned back into the String at the end.
        let mut out_buf = core::mem::take(&mut self.out).into_bytes();
        out_buf.clear();
        out_buf.reserve(url.len() + 16);
        let out = &mut out_buf;
        out.extend(scheme.bytes().map(|c| c.to_ascii_lowercase()));
        if !scheme.is_empty() {
            out.push(b':');
        }
        let authority_pos = out.len();

        // --- netloc -----------------------------------------------------------
        let mut host_ends_url_with_space = false;
        if netloc_nonempty {
            out.extend_from_slice(b"//");
            if let Some(userinfo) = userinfo {
                let (user, password) = match userinfo.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (userinfo, None),
                };
                self.scratch.clear();
                unquote_into(&mut self.scratch, user.as_bytes(), false);
                quote_into(out, &self.scratch, USERINFO);
                if let Some(password) = password {
                    out.push(b':');
                    self.scratch.clear();
                    unquote_into(&mut self.scratch, password.as_bytes(), false);
                    quote_into(out, &self.scratch, USERINFO);
                }
                out.push(b'@');
            }
            write_host(out, hostname)?;
            host_ends_url_with_space = port.is_none()
                && path.is_empty()
                && query.is_empty()
                && fragment.is_empty()
                && out.last().is_some_and(|&b| b <= 0x20);
            if let Some(port) = port {
                push_u32(out, port);
            }
        }

        // --- path ;params -------------------------------------------------------
        let (path, params) = if flags & USES_PARAMS != 0 {
            let last_slash = rfind_byte(path.as_bytes(), b'/').map_or(0, |i| i + 1);
            match find_from(path, last_slash, b';') {
                Some(i) => (&path[..i], &path[i + 1..]),
                None => (path, ""),
            }
        } else {
            (path, "")
        };
        let path_pos = out.len();
        if path.is_empty() {
            out.push(b'/');
        } else if !has_byte(path.as_bytes(), b'%') {
            // unquote(quote(p, PATH_SAFEST)) == p when p has no '%'.
            quote_into(out, path.as_bytes(), PATH_SAFE);
        } else {
            canonical_percent_path(out, &mut self.scratch, path);
        }
        if out.get(path_pos) == Some(&b'/') && has_dot_segment(&out[path_pos..]) {
            let resolved = remove_dot_segments(&out[path_pos..]);
            out.truncate(path_pos);
            out.extend_from_slice(&resolved);
        }
        if !netloc_nonempty
            && (starts_with_2(&out[path_pos..], b'/', b'/')
                || (!scheme.is_empty()
                    && flags & USES_NETLOC != 0
                    && out.get(path_pos) == Some(&b'/')))
        {
            out.splice(authority_pos..authority_pos, *b"//");
        }
        if !params.is_empty() {
            out.push(b';');
            quote_into(out, params.as_bytes(), PATH_SAFEST);
        }

        // --- query ------------------------------------------------------------
        if !query.is_empty() {
            let qb = query.as_bytes();
            let scratch = &mut self.scratch;
            let pairs = &mut self.pairs;
            scratch.clear();
            pairs.clear();
            for field_span in split_spans(qb, b'&') {
                let (fs, fe) = field_span;
                if fs == fe {
                    continue;
                }
                let field = &qb[fs..fe];
                let (ks, ke, vs, ve) = match field.iter().position(|&b| b == b'=') {
                    Some(eq) => (fs, fs + eq, fs + eq + 1, fe),
                    None => (fs, fe, fe, fe),
                };
                let key = decode_span(scratch, qb, ks, ke);
                let value = decode_span(scratch, qb, vs, ve);
                pairs.push(Pair { key, value });
            }
            if pairs.len() > 1 {
                let scratch: &[u8] = scratch;
                pairs.sort_unstable_by(|a, b| {
                    span_bytes(a.key, qb, scratch)
                        .cmp(span_bytes(b.key, qb, scratch))
                        .then_with(|| {
                            span_bytes(a.value, qb, scratch).cmp(span_bytes(b.value, qb, scratch))
                        })
                });
            }
            for (i, pair) in pairs.iter().enumerate() {
                out.push(if i == 0 { b'?' } else { b'&' });
                quote_plus_into(out, span_bytes(pair.key, qb, scratch));
                out.push(b'=');
                quote_plus_into(out, span_bytes(pair.value, qb, scratch));
            }
        }
        // Everything written is ASCII or copied from a str, so this is valid
        // UTF-8; the lossy branch only keeps the function panic-free.
        self.out = String::from_utf8(out_buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Ok(Outcome {
            accepted,
            host_ends_url_with_space,
            second_pass_fails: bracketed
                && !has_byte(hostname.as_bytes(), b':')
                && has_byte(hostname.as_bytes(), b'['),
        })
    }
}

/// Spans of `data` separated by `sep` (like `bytes.split`).
fn split_spans(data: &[u8], sep: u8) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    let mut done = false;
    core::iter::from_fn(move || {
        if done {
            return None;
        }
        match data
            .get(start..)
            .and_then(|d| d.iter().position(|&b| b == sep))
        {
            Some(p) => {
                let span = (start, start + p);
                start += p + 1;
                Some(span)
            }
            None => {
                done = true;
                Some((start, data.len()))
            }
        }
    })
}

/// `_unquote_plus` of `query[start..end]`, into `scratch` only when needed.
fn decode_span(scratch: &mut Vec<u8>, query: &[u8], start: usize, end: usize) -> Span {
    let raw = &query[start..end];
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        return Span {
            start,
            end,
            decoded: false,
        };
    }
    let s = scratch.len();
    unquote_into(scratch, raw, true);
    Span {
        start: s,
        end: scratch.len(),
        decoded: true,
    }
}

/// Path with `%`: `_quote(_unquotepath(_quote(path, PATH_SAFEST)), PATH_SAFE)`.
fn canonical_percent_path(out: &mut Vec<u8>, scratch: &mut Vec<u8>, path: &str) {
    let mut quoted = Vec::with_capacity(path.len() + 8);
    quote_into(&mut quoted, path.as_bytes(), PATH_SAFEST);
    // ASCII only after quoting.
    let mut s = String::from_utf8(quoted).unwrap_or_default();
    // _unquotepath keeps %25, %2F, %3B and %3F encoded (sequential str.replace).
    for (from, to) in [
        ("%25", "%2525"),
        ("%2f", "%252F"),
        ("%2F", "%252F"),
        ("%3b", "%253B"),
        ("%3B", "%253B"),
        ("%3f", "%253F"),
        ("%3F", "%253F"),
    ] {
        if s.contains(from) {
            s = s.replace(from, to);
        }
    }
    scratch.clear();
    unquote_into(scratch, s.as_bytes(), false);
    quote_into(out, scratch, PATH_SAFE);
}

/// `_remove_dot_segments` (RFC 3986 5.2.4 as written in w3lib) for a path
/// starting with `/`.
fn remove_dot_segments(path: &[u8]) -> Vec<u8> {
    let segments: Vec<&[u8]> = path.get(1..).unwrap_or(&[]).split(|&b| b == b'/').collect();
    let mut output: Vec<&[u8]> = Vec::with_capacity(segments.len());
    let Some((&last, init)) = segments.split_last() else {
        return path.to_vec();
    };
    for &seg in init {
        if seg == b".." {
            output.pop();
        } else if seg != b"." {
            output.push(seg);
        }
    }
    match last {
        b".." => {
            output.pop();
            output.push(b"");
        }
        b"." => output.push(b""),
        other => output.push(other),
    }
    let mut s = Vec::with_capacity(path.len());
    s.push(b'/');
    for (i, seg) in output.iter().enumerate() {
        if i > 0 {
            s.push(b'/');
        }
        s.extend_from_slice(seg);
    }
    s
}

fn push_u32(out: &mut Vec<u8>, mut n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push(b':');
    out.extend_from_slice(&buf[i..]);
}

/// `_SplitResult.__post_init__` port validation: ASCII digits, `int()`, 0..=65535.
fn parse_port(port: &str) -> Result<u32, UrlError> {
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UrlError::InvalidPort);
    }
    // Python's int() refuses strings of more than 4300 digits.
    if port.len() > 4300 {
        return Err(UrlError::InvalidPort);
    }
    let digits = port.trim_start_matches('0');
    if digits.len() > 5 {
        return Err(UrlError::PortOutOfRange);
    }
    let n = digits
        .bytes()
        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    if n > 65535 {
        return Err(UrlError::PortOutOfRange);
    }
    Ok(n)
}

/// `_check_bracketed_netloc`.
fn check_bracketed_netloc(netloc: &str) -> Result<(), UrlError> {
    let hostinfo = netloc.rsplit_once('@').map_or(netloc, |(_, h)| h);
    let hostname = match hostinfo.split_once('[') {
        Some((before, bracketed)) => {
            if !before.is_empty() {
                return Err(UrlError::InvalidIpv6);
            }
            let (hostname, port) = bracketed.split_once(']').unwrap_or((bracketed, ""));
            if !port.is_empty() && !port.starts_with(':') {
                return Err(UrlError::InvalidIpv6);
            }
            hostname
        }
        None => hostinfo.split_once(':').map_or(hostinfo, |(h, _)| h),
    };
    // _check_bracketed_host
    if hostname.starts_with(['v', 'V']) {
        // _IPV_FUTURE_RE = r"\Av[a-fA-F0-9]+\..+\Z"
        let ok = hostname.strip_prefix('v').is_some_and(|r| {
            let hex_len = r.bytes().take_while(u8::is_ascii_hexdigit).count();
            hex_len > 0
                && r[hex_len..]
                    .strip_prefix('.')
                    .is_some_and(|tail| !tail.is_empty() && !tail.contains('\n'))
        });
        return if ok {
            Ok(())
        } else {
            Err(UrlError::InvalidIpv6)
        };
    }
    match parse_ipv6(hostname) {
        Some(_) => Ok(()),
        None => Err(UrlError::InvalidIpv6),
    }
}

/// `_checknetloc`: w3lib rejects a non-ASCII netloc whose NFKC form contains a
/// delimiter (`/?#@:\`) that was not there before. These are the characters
/// whose NFKC decomposition contains one (computed with Python 3.11 / Unicode 14).
fn check_netloc_nfkc(netloc: &str) -> Result<(), UrlError> {
    const NFKC_DELIMS: &[char] = &[
        '\u{2047}', '\u{2048}', '\u{2049}', '\u{2100}', '\u{2101}', '\u{2105}', '\u{2106}',
        '\u{2A74}', '\u{FE13}', '\u{FE16}', '\u{FE55}', '\u{FE56}', '\u{FE5F}', '\u{FE68}',
        '\u{FE6B}', '\u{FF03}', '\u{FF0F}', '\u{FF1A}', '\u{FF1F}', '\u{FF20}', '\u{FF3C}',
    ];
    if netloc.is_ascii() || !netloc.contains(NFKC_DELIMS) {
        Ok(())
    } else {
        Err(UrlError::InvalidHost)
    }
}
