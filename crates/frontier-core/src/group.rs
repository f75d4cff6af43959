//! Scope groups: the set of scopes a request needs, as one canonical string.
//!
//! Requests with the same scopes (and the same quota amounts) share a group; the
//! scheduler orders groups, and each group keeps its requests in priority order. The key
//! is what stores persist per request, so it is plain text: scope names sorted and joined
//! by `\n`, each followed by `\t` and its amount when the amount is not 1. A request
//! without explicit scopes has one: its URL's host, lower-cased, with the port when it is
//! not the scheme's default.

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::fmt::Write;

use crate::request::{MAX_SCOPES, Request};

const SCOPE_SEP: char = '\n';
const AMOUNT_SEP: char = '\t';

/// A request the frontier cannot accept, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRequest {
    url: String,
    reason: String,
}

impl InvalidRequest {
    /// Refuses the request for `url` because of `reason` (the URL is kept truncated to
    /// 200 characters).
    pub fn new(url: &str, reason: impl Into<String>) -> Self {
        let mut url: String = url.chars().take(200).collect();
        if url.len() >= 200 {
            url.push('…');
        }
        InvalidRequest {
            url,
            reason: reason.into(),
        }
    }

    /// The request's URL (truncated to 200 characters).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What is wrong with it.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for InvalidRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid request {:?}: {}", self.url, self.reason)
    }
}

impl core::error::Error for InvalidRequest {}

/// Writes the group key of `req` into `out` (cleared first).
pub fn group_key(req: &Request, out: &mut String) -> Result<(), InvalidRequest> {
    group_key_inline(req, out)
}

/// [`group_key`], inlined where it is called: the frontier's push, which spends ~35
/// instructions a request more on a call.
#[inline(always)]
pub(crate) fn group_key_inline(req: &Request, out: &mut String) -> Result<(), InvalidRequest> {
    out.clear();
    match req.scopes.as_deref().filter(|s| !s.is_empty()) {
        None => host_scope_into(&req.url, out),
        Some(scopes) => {
            // Inline: no allocation per push of a request with explicit scopes.
            if scopes.len() > MAX_SCOPES {
                return Err(InvalidRequest::new(
                    &req.url,
                    alloc::format!(
                        "names {} scopes: more than {MAX_SCOPES}, the most a request may have",
                        scopes.len()
                    ),
                ));
            }
            let mut sorted: heapless::Vec<(&str, f64), MAX_SCOPES> = heapless::Vec::new();
            for s in scopes {
                if s.scope.is_empty() || s.scope.contains([SCOPE_SEP, AMOUNT_SEP]) {
                    return Err(InvalidRequest::new(
                        &req.url,
                        alloc::format!(
                            "scope name {:?} is empty or contains a tab or newline",
                            s.scope
                        ),
                    ));
                }
                if !s.amount.is_finite() || s.amount < 0.0 {
                    return Err(InvalidRequest::new(
                        &req.url,
                        alloc::format!(
                            "quota amount {} of scope {:?} must be finite and >= 0",
                            s.amount,
                            s.scope
                        ),
                    ));
                }
                match sorted.iter_mut().find(|(n, _)| *n == &*s.scope) {
                    Some((_, a)) => *a += s.amount,
                    // Cannot overflow: the list was checked against MAX_SCOPES.
                    None => drop(sorted.push((&s.scope, s.amount))),
                }
            }
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            for (i, (name, amount)) in sorted.iter().enumerate() {
                if i > 0 {
                    out.push(SCOPE_SEP);
                }
                out.push_str(name);
                if *amount != 1.0 {
                    out.push(AMOUNT_SEP);
                    let _ = write!(out, "{amount}");
                }
            }
            Ok(())
        }
    }
}

/// Whether `key` is one scope name with no amount (a plain host): what
/// [`parse_group_key`] would give as that one name with amount 1.
pub(crate) fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && !key
            .bytes()
            .any(|b| b == SCOPE_SEP as u8 || b == AMOUNT_SEP as u8)
}

/// The scopes and amounts of a group key, in key order.
pub fn parse_group_key(key: &str) -> Result<Vec<(&str, f64)>, InvalidGroupKey> {
    key.split(SCOPE_SEP)
        .map(|part| match part.split_once(AMOUNT_SEP) {
            None if !part.is_empty() => Ok((part, 1.0)),
            Some((name, amount)) if !name.is_empty() => amount
                .parse::<f64>()
                .ok()
                .filter(|a| a.is_finite() && *a >= 0.0)
                .map(|a| (name, a))
                .ok_or_else(|| InvalidGroupKey(key.to_owned())),
            _ => Err(InvalidGroupKey(key.to_owned())),
        })
        .collect()
}

/// A stored group key that does not parse (a corrupted store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidGroupKey(pub String);

impl fmt::Display for InvalidGroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid scope group key {:?}", self.0)
    }
}

impl core::error::Error for InvalidGroupKey {}

/// The default scope of a URL: its host, lower-cased, with the port unless it is the
/// scheme's default.
///
/// ```
/// use polite_frontier_core::host_scope;
///
/// assert_eq!(host_scope("https://Books.Example.com/a?b").unwrap(), "books.example.com");
/// assert_eq!(host_scope("http://example.com:8080/").unwrap(), "example.com:8080");
/// assert_eq!(host_scope("https://example.com:443/").unwrap(), "example.com");
/// assert_eq!(host_scope("http://[::1]:80/").unwrap(), "[::1]");
/// assert_eq!(host_scope("https://bücher.example/").unwrap(), "xn--bcher-kva.example");
/// assert!(host_scope("/relative/path").is_err());
/// ```
pub fn host_scope(url: &str) -> Result<String, InvalidRequest> {
    let mut out = String::new();
    host_scope_into(url, &mut out)?;
    Ok(out)
}

fn default_port(scheme: &str) -> Option<u16> {
    let s = scheme.as_bytes();
    match s.len() {
        2 if s.eq_ignore_ascii_case(b"ws") => Some(80),
        3 if s.eq_ignore_ascii_case(b"wss") => Some(443),
        3 if s.eq_ignore_ascii_case(b"ftp") => Some(21),
        4 if s.eq_ignore_ascii_case(b"http") => Some(80),
        5 if s.eq_ignore_ascii_case(b"https") => Some(443),
        _ => None,
    }
}

#[inline(always)]
fn host_scope_into(url: &str, out: &mut String) -> Result<(), InvalidRequest> {
    if fast_host(url, out) {
        return Ok(());
    }
    out.clear();
    let parsed = url::Url::parse(url.trim())
        .map_err(|e| InvalidRequest::new(url, alloc::format!("not an absolute URL: {e}")))?;
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| InvalidRequest::new(url, "the URL has no host"))?;
    out.push_str(host);
    out.make_ascii_lowercase();
    if let Some(port) = parsed.port()
        && Some(port) != default_port(parsed.scheme())
    {
        let _ = write!(out, ":{port}");
    }
    Ok(())
}

/// The bytes of a domain label: ASCII letters, digits and '-'.
const LABEL: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'-';
        c += 1;
    }
    t
};

/// The common case without a full parse, in one pass over the bytes:
/// `scheme://host[:port]` followed by the end, '/', '?', '#' or '\\', where the scheme
/// has a default port and the host is a plain ASCII domain (labels of letters, digits
/// and '-', none with "--" in its third and fourth places as punycode's "xn--" has,
/// the last one not starting with a digit, which could make it an IPv4 address; one
/// trailing '.' allowed). Anything else (user info, IP literals, IDNA,
/// percent-escapes, odd schemes) is left to the `url` crate: `false` means "not
/// answered", never "invalid".
fn fast_host(url: &str, out: &mut String) -> bool {
    let b = url.as_bytes();
    let at = |i: usize| b.get(i).copied();
    let Some(colon) = b.iter().take(6).position(|&c| c == b':') else {
        return false;
    };
    if at(colon + 1) != Some(b'/') || at(colon + 2) != Some(b'/') {
        return false;
    }
    let Some(default) = default_port(&url[..colon]) else {
        return false;
    };
    let start = colon + 3;
    let mut i = start;
    let last_label = loop {
        let label = i;
        while i < b.len() && LABEL[usize::from(b[i])] {
            i += 1;
        }
        if i == label {
            return false; // an empty label: no host, a leading '.' or ".."
        }
        if i - label >= 4 && b[label + 2] == b'-' && b[label + 3] == b'-' {
            return false; // "xn--": punycode, which the url crate decodes and checks
        }
        if at(i) != Some(b'.') {
            break label;
        }
        i += 1;
        if !at(i).is_some_and(|c| LABEL[usize::from(c)]) {
            break label; // a trailing '.' ends the host
        }
    };
    if b[last_label].is_ascii_digit() {
        return false;
    }
    let host_end = i;
    let mut port = None;
    if at(i) == Some(b':') {
        i += 1;
        let digits = i;
        let mut n = 0u32;
        while i < b.len() && b[i].is_ascii_digit() && i - digits < 5 {
            n = n * 10 + u32::from(b[i] - b'0');
            i += 1;
        }
        if i > digits {
            match u16::try_from(n) {
                Ok(n) => port = Some(n),
                Err(_) => return false,
            }
        }
    }
    if !matches!(at(i), None | Some(b'/' | b'?' | b'#' | b'\\')) {
        return false; // user info, a sixth port digit, an unusual byte...
    }
    out.clear();
    out.push_str(&url[start..host_end]);
    out.make_ascii_lowercase();
    if let Some(port) = port.filter(|&p| p != default) {
        let _ = write!(out, ":{port}");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Request;
    use proptest::prelude::*;
    use std::{format, string::ToString, vec};

    fn key(req: &Request) -> String {
        let mut s = String::new();
        group_key(req, &mut s).unwrap();
        s
    }

    #[test]
    fn default_group_is_the_host() {
        assert_eq!(
            key(&Request::get("https://WWW.Example.com/x")),
            "www.example.com"
        );
        assert_eq!(key(&Request::get("http://user:pw@a.b.c:81/")), "a.b.c:81");
        assert_eq!(key(&Request::get("http://a.b.c:80/")), "a.b.c");
        assert_eq!(key(&Request::get("http://10.0.0.1:8080/")), "10.0.0.1:8080");
        assert_eq!(
            key(&Request::get("http://localhost:8000/x")),
            "localhost:8000"
        );
        assert!(host_scope("mailto:someone@example.com").is_err());
        assert!(host_scope("https://").is_err());
        assert_eq!(
            host_scope("https:///extra/slashes").unwrap(),
            "extra",
            "WHATWG parsing"
        );
        assert!(host_scope("not a url").is_err());
    }

    #[test]
    fn explicit_scopes_are_sorted_merged_and_carry_amounts() {
        let r = Request::get("https://api.example.com/")
            .scope_amount("cost", 2.5)
            .scope("api.example.com")
            .scope_amount("cost", 0.5);
        let k = key(&r);
        assert_eq!(k, "api.example.com\ncost\t3");
        assert_eq!(
            parse_group_key(&k).unwrap(),
            [("api.example.com", 1.0), ("cost", 3.0)]
        );
        let err = group_key(
            &Request::get("https://a.b/").scope("bad\nname"),
            &mut String::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("scope name"), "{err}");
        assert!(
            group_key(
                &Request::get("https://a.b/").scope_amount("x", f64::NAN),
                &mut String::new()
            )
            .is_err()
        );
        assert!(parse_group_key("a\tnope").is_err());
        assert!(parse_group_key("").is_err());
        assert!(parse_group_key("a\n\nb").is_err());
    }

    /// The host scope as the `url` crate parses it (panics if it rejects the URL).
    fn by_the_url_crate(url: &str) -> String {
        let parsed = url::Url::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let mut slow = parsed.host_str().unwrap().to_ascii_lowercase();
        if let Some(p) = parsed.port() {
            slow.push_str(&format!(":{p}"));
        }
        slow
    }

    #[test]
    fn the_fast_path_answers_common_urls_and_leaves_the_rest() {
        let fast = |url: &str| {
            let mut out = String::new();
            fast_host(url, &mut out).then_some(out)
        };
        for (url, host) in [
            ("https://host7.example3.com/p?q=7", "host7.example3.com"),
            ("HTTP://WWW.Example.COM", "www.example.com"),
            ("http://a-b.c:81/x", "a-b.c:81"),
            ("http://c.d:80?x", "c.d"),
            ("http://c.d:00080\\x", "c.d"),
            ("https://example.com.:443#f", "example.com."),
            ("wss://x.y:", "x.y"),
            ("ftp://x.y:021/", "x.y"),
        ] {
            assert_eq!(fast(url).as_deref(), Some(host), "{url}");
            assert_eq!(by_the_url_crate(url), host, "{url}");
        }
        for url in [
            "http://10.0.0.1/",
            "http://a.1/",
            "http://[::1]/",
            "http://bücher.example/",
            "http://a..b/",
            "http://.a/",
            "http://a.b:65536/",
            "http://a.b:8x/",
            "http:/a.b/",
            "gopher://a.b/",
            " http://a.b/",
            "http://a%41.b/",
            "http:///a.b",
            "http://u:p@a.b/",
            "http://a.b:000080/",
            "http://a.b:99999/",
            "http://a.b..",
            "http://xn--/",
            "http://a.XN--ab/",
        ] {
            assert_eq!(fast(url), None, "{url}");
        }
    }

    proptest! {
        /// A plain key is exactly one whose parse is itself, with amount 1.
        #[test]
        fn plain_keys_are_the_keys_that_parse_to_themselves(k in "[a.\t\n1]{0,6}") {
            let parsed = parse_group_key(&k);
            let itself = matches!(&parsed, Ok(v) if v.len() == 1 && v[0].0 == k && v[0].1 == 1.0);
            prop_assert_eq!(is_plain_key(&k), itself, "{:?} parses to {:?}", k, parsed);
        }
    }

    proptest! {
        /// The fast path agrees with the `url` crate whenever it answers.
        #[test]
        fn fast_path_agrees_with_the_url_crate(
            scheme in prop::sample::select(vec!["http", "https", "HTTP", "ftp", "wss"]),
            user in proptest::option::of("[a-z]{1,5}(:[a-z]{0,5})?"),
            host in "([xX][nN]--)?[a-zA-Z0-9.-]{1,20}",
            port in proptest::option::of("[0-9]{0,6}"),
            tail in prop::sample::select(vec!["", "/", "/a/b?c=d", "?x", "#f", "\\x"]),
        ) {
            let url = format!(
                "{scheme}://{}{host}{}{tail}",
                user.map(|u| format!("{u}@")).unwrap_or_default(),
                port.map(|p| format!(":{p}")).unwrap_or_default()
            );
            let mut fast = String::new();
            if fast_host(&url, &mut fast) {
                prop_assert_eq!(fast, by_the_url_crate(&url), "{}", url);
            }
        }
    }
}
