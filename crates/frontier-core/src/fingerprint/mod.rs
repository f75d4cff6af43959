//! Scrapy-compatible request fingerprints and URL canonicalization.
//!
//! Reproduces, byte for byte, what Scrapy 2.19 / w3lib 2.5 compute:
//!
//! * [`canonicalize_url`] is `w3lib.url.canonicalize_url(url)` with its default
//!   arguments (`keep_blank_values=True`, `keep_fragments=False`, `&` as the only
//!   query separator).
//! * [`fingerprint`] is `scrapy.utils.request.fingerprint(Request(url,
//!   method=method, body=body))` with its default arguments (no headers,
//!   fragments dropped): the SHA-1 of `json.dumps({"body": body.hex(),
//!   "headers": {}, "method": METHOD, "url": canonical}, sort_keys=True)`.
//!   [`Fingerprinter`] does the same with reused buffers.
//! * [`parse_seen_file`] / [`read_seen_file`] import the `requests.seen` file
//!   that Scrapy's `RFPDupeFilter` writes (one hex fingerprint per line).
//!
//! Rules mirrored from w3lib's source (and checked against it with the
//! generated vectors in `tests/fingerprint_vectors.jsonl`):
//!
//! * Leading/trailing C0 controls and spaces are stripped; every tab, CR and
//!   LF anywhere is removed.
//! * The scheme (`[A-Za-z][A-Za-z0-9+.-]*:`) is lower-cased. For the special
//!   schemes (`http`, `https`, `ftp`, `file`, `ws`, `wss`) a `\` before the
//!   query or fragment counts as `/`.
//! * The host is lower-cased (Unicode lower-casing). A non-ASCII host goes
//!   through IDNA 2003 (Python's `idna` codec: nameprep + punycode, so
//!   `straße` -> `strasse`), emulated on top of the `idna` crate's UTS 46
//!   tables; when IDNA fails the raw lower-cased host is kept. Explicit ports
//!   are kept, *including default ones* (`http://h:80/` stays as is); leading
//!   zeros are dropped; an empty port (`http://h:/`) disappears. IPv6 literals
//!   are validated and printed like Python's `ipaddress` (RFC 5952,
//!   `::ffff:1.2.3.4` -> `::ffff:102:304`). Userinfo is kept, re-encoded.
//! * The path is percent-decoded (except `%25`, `%2F`, `%3B`, `%3F`) and
//!   re-encoded with upper-case hex (`|`, `[`, `]` stay literal); `.` and `..`
//!   segments are resolved (also `%2e`); an empty path becomes `/`. For the
//!   schemes of `urllib.parse.uses_params` a `;params` suffix of the last
//!   segment is split off and kept verbatim (`/a;` loses its empty params).
//! * The query is split on `&` only (a `;` is data: `a=1;b=2` ->
//!   `a=1%3Bb%3D2`), `+` means space, fields without `=` get an empty value
//!   (`a` -> `a=`), empty fields vanish, pairs are sorted byte-wise by (key,
//!   value) and re-encoded like `quote_plus` (only `A-Za-z0-9-._~` stay
//!   literal, space becomes `+`). Percent-encoded non-UTF-8 bytes are kept.
//! * The fragment is dropped.
//! * Relative and scheme-less inputs are canonicalized as w3lib does; only the
//!   inputs that make w3lib raise are errors ([`UrlError`]). [`fingerprint`]
//!   additionally rejects what Scrapy's `Request` rejects (no `://` anywhere in
//!   `safe_url_string(url)` and not `about:`/`data:`), and replays Scrapy's
//!   second canonicalization pass where it matters (a host with trailing
//!   spaces at the very end of the URL, e.g. `http://a :`).
//!
//! Known differences (all in the vector file, marked `known_difference`):
//! w3lib rejects a non-ASCII netloc that contains a literal `\` (possible only
//! with non-special schemes such as `foo://`) when NFKC would change any other
//! character of it; without NFKC tables this port only detects the characters
//! that NFKC turns into delimiters. IDNA corner cases where the UTS 46 tables
//! cannot stand in for Unicode 3.2 nameprep: upper-case letters added after
//! Unicode 14 (Python lower-cases with Unicode 14, Rust with a newer version)
//! and the ligatures U+FDFA/U+FDFB (NFKC spaces inside an RTL label).
//!
//! Everything is `no_std` + `alloc` and never panics.

//!
//! Modules: [`digest`] (the SHA-1 over Scrapy's JSON), [`canonical`] (the URL
//! canonicaliser), [`quote`] (percent-encoding as w3lib does it), [`host`] (host
//! lower-casing and IDNA 2003), [`ipv6`] (Python-style IPv6 printing) and [`seen`]
//! (the `requests.seen` reader).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

mod canonical;
mod digest;
mod host;
mod ipv6;
mod quote;
mod seen;
#[cfg(test)]
#[allow(clippy::print_stdout)] // the vector test prints its pass/skip counts
mod tests;

pub use canonical::canonicalize_url;
pub use digest::{fingerprint, fingerprint_canonical};
pub use seen::{SeenFileError, SeenFileReader, parse_seen_file, read_seen_file};

use canonical::Pair;

/// A 20-byte SHA-1 request fingerprint, as computed by Scrapy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 20]);

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

impl Fingerprint {
    /// Lower-case hex form (40 characters), as stored in Scrapy's `requests.seen`.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(40);
        for &b in &self.0 {
            s.push(char::from(HEX_LOWER[usize::from(b >> 4)]));
            s.push(char::from(HEX_LOWER[usize::from(b & 0x0f)]));
        }
        s
    }

    /// Parses exactly 40 hex digits (either case) into a fingerprint.
    pub fn from_hex(hex: &str) -> Result<Self, FingerprintError> {
        let count = hex.chars().count();
        if count != 40 {
            return Err(FingerprintError::Length { found: count });
        }
        let mut out = [0u8; 20];
        let mut chars = hex.chars().enumerate();
        for byte in &mut out {
            let mut pair = [0u8; 2];
            for nibble in &mut pair {
                // 40 chars were counted above, so the iterator cannot run dry.
                let Some((index, c)) = chars.next() else {
                    return Err(FingerprintError::Length { found: count });
                };
                *nibble = match c.to_digit(16) {
                    Some(d) => d as u8,
                    None => return Err(FingerprintError::InvalidDigit { index, found: c }),
                };
            }
            *byte = (pair[0] << 4) | pair[1];
        }
        Ok(Fingerprint(out))
    }

    /// The first 8 bytes as a big-endian integer (handy as a hash-table key).
    pub fn prefix64(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl core::str::FromStr for Fingerprint {
    type Err = FingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fingerprint::from_hex(s)
    }
}

/// Why a string is not a hex fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FingerprintError {
    /// The string does not have exactly 40 characters.
    Length {
        /// Number of characters found.
        found: usize,
    },
    /// A character is not a hex digit.
    InvalidDigit {
        /// 0-based character index of the offending character.
        index: usize,
        /// The offending character.
        found: char,
    },
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FingerprintError::Length { found } => {
                write!(f, "expected 40 hex digits, found {found} characters")
            }
            FingerprintError::InvalidDigit { index, found } => {
                write!(f, "invalid hex digit {found:?} at position {}", index + 1)
            }
        }
    }
}

impl core::error::Error for FingerprintError {}

/// Why a URL cannot be canonicalized (w3lib raises `ValueError` for these),
/// or, for [`fingerprint`], why Scrapy would refuse to build the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlError {
    /// Unbalanced brackets in the authority, or a bracketed host that is not a
    /// valid IPv6 address / IPvFuture literal (or has a non-ASCII zone id).
    InvalidIpv6,
    /// The port contains something other than ASCII digits.
    InvalidPort,
    /// The port is larger than 65535.
    PortOutOfRange,
    /// The non-ASCII authority contains a character whose NFKC normalization is
    /// a URL delimiter (e.g. a full-width solidus).
    InvalidHost,
    /// Scrapy's `Request` rejects URLs that (after `safe_url_string`) contain no
    /// `://` and are not `about:` or `data:` URLs ("Missing scheme in request url").
    MissingScheme,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlError::InvalidIpv6 => "invalid IPv6 URL",
            UrlError::InvalidPort => "port is not a decimal number",
            UrlError::PortOutOfRange => "port out of range 0-65535",
            UrlError::InvalidHost => "host contains characters that NFKC-normalize to delimiters",
            UrlError::MissingScheme => "missing scheme in request url",
        })
    }
}

impl core::error::Error for UrlError {}

/// Reusable canonicalizer/fingerprinter: keeps its buffers between calls so
/// that steady-state fingerprinting does not allocate.
#[derive(Debug, Default, Clone)]
pub struct Fingerprinter {
    out: String,
    scratch: Vec<u8>,
    pairs: Vec<Pair>,
}
