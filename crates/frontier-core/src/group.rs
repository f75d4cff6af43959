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

use crate::request::Request;

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
    out.clear();
    match req.scopes.as_deref().filter(|s| !s.is_empty()) {
        None => host_scope_into(&req.url, out),
        Some(scopes) => {
            let mut sorted: Vec<(&str, f64)> = Vec::with_capacity(scopes.len());
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
                    None => sorted.push((&s.scope, s.amount)),
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
/// use frontier_core::host_scope;
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
    if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("ws") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("wss") {
        Some(443)
    } else if scheme.eq_ignore_ascii_case("ftp") {
        Some(21)
    } else {
        None
    }
}

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

/// The common case without a full parse: `scheme://[userinfo@]host[:port]` with a plain
/// ASCII domain. Anything unusual (IP literals, IDNA, percent-escapes, odd schemes) is
/// left to the `url` crate.
fn fast_host(url: &str, out: &mut String) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    if default_port(scheme).is_none() {
        return false;
    }
    let end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (host_port, None),
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.';
    if host.is_empty() || !host.bytes().all(plain) || host.starts_with('.') {
        return false;
    }
    // A last label starting with a digit may be an IPv4 address in disguise.
    let last = host.trim_end_matches('.').rsplit('.').next().unwrap_or("");
    if last.is_empty() || last.as_bytes()[0].is_ascii_digit() || host.contains("..") {
        return false;
    }
    let port = match port {
        None | Some("") => None,
        Some(p) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            match p.parse::<u32>() {
                Ok(n) if n <= 65535 => Some(n as u16),
                _ => return false,
            }
        }
        Some(_) => return false,
    };
    out.clear();
    out.push_str(host);
    out.make_ascii_lowercase();
    if let Some(port) = port.filter(|&p| Some(p) != default_port(scheme)) {
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

    proptest! {
        /// The fast path agrees with the `url` crate whenever it answers.
        #[test]
        fn fast_path_agrees_with_the_url_crate(
            scheme in prop::sample::select(vec!["http", "https", "HTTP", "ftp", "wss"]),
            user in proptest::option::of("[a-z]{1,5}(:[a-z]{0,5})?"),
            host in "[a-zA-Z0-9.-]{1,20}",
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
                let mut slow = String::new();
                let parsed = url::Url::parse(&url);
                prop_assert!(parsed.is_ok(), "fast path accepted {} but url rejects it", url);
                let parsed = parsed.unwrap();
                slow.push_str(&parsed.host_str().unwrap().to_ascii_lowercase());
                if let Some(p) = parsed.port() {
                    slow.push_str(&format!(":{p}"));
                }
                prop_assert_eq!(fast, slow, "{}", url);
            }
        }
    }
}
