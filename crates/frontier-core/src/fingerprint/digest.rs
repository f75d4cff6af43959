//! The fingerprint: SHA-1 over Scrapy's `json.dumps` of body, method and canonical URL.

use alloc::borrow::Cow;

use sha1::{Digest, Sha1};

use super::HEX_LOWER;
use super::{Fingerprint, Fingerprinter, UrlError};
// Named by the docs.
#[cfg(doc)]
use super::canonicalize_url;

/// Scrapy's default request fingerprint of `Request(url, method=method, body=body)`.
///
/// The method is upper-cased like Scrapy does. Fails with the same conditions
/// as [`canonicalize_url`], plus [`UrlError::MissingScheme`] where Scrapy's
/// `Request` constructor refuses the URL.
pub fn fingerprint(method: &str, url: &str, body: &[u8]) -> Result<Fingerprint, UrlError> {
    Fingerprinter::new().fingerprint(method, url, body)
}

/// The hashing step alone: SHA-1 of Scrapy's JSON document for a URL used as
/// it is (already canonical, or what Scrapy hashes for requests with
/// `meta["verbatim_url"]`). The method is upper-cased like Scrapy does.
pub fn fingerprint_canonical(method: &str, canonical_url: &str, body: &[u8]) -> Fingerprint {
    let method: Cow<'_, str> = if method
        .bytes()
        .any(|b| b.is_ascii_lowercase() || !b.is_ascii())
    {
        Cow::Owned(method.to_uppercase())
    } else {
        Cow::Borrowed(method)
    };
    // json.dumps(..., sort_keys=True) with the default separators.
    const HEAD: &[u8] = b"{\"body\": \"\", \"headers\": {}, \"method\": \"";
    const MID: &[u8] = b"\", \"url\": \"";
    const TAIL: &[u8] = b"\"}";
    let (m, u) = (method.as_bytes(), canonical_url.as_bytes());
    let mut doc = [0u8; 192];
    if body.is_empty()
        && HEAD.len() + m.len() + MID.len() + u.len() + TAIL.len() <= doc.len()
        && json_plain(m)
        && json_plain(u)
    {
        // Common case: the whole document fits a stack buffer, one SHA-1 call.
        let mut n = 0;
        for part in [HEAD, m, MID, u, TAIL] {
            doc[n..n + part.len()].copy_from_slice(part);
            n += part.len();
        }
        return Fingerprint(Sha1::digest(&doc[..n]).into());
    }
    let mut sink = HashSink {
        hasher: Sha1::new(),
        buf: [0; 256],
        len: 0,
    };
    sink.write(b"{\"body\": \"");
    let mut hex = [0u8; 128];
    for chunk in body.chunks(64) {
        for (pair, &b) in hex.chunks_exact_mut(2).zip(chunk) {
            pair[0] = HEX_LOWER[usize::from(b >> 4)];
            pair[1] = HEX_LOWER[usize::from(b & 0x0f)];
        }
        sink.write(&hex[..2 * chunk.len()]);
    }
    sink.write(b"\", \"headers\": {}, \"method\": \"");
    json_escape_into(&mut sink, &method);
    sink.write(b"\", \"url\": \"");
    json_escape_into(&mut sink, canonical_url);
    sink.write(b"\"}");
    sink.finish()
}

/// No byte of `s` needs a JSON escape: Python escapes `"`, `\` and everything
/// outside `' '..='~'` (so also DEL) when `ensure_ascii=True`.
fn json_plain(s: &[u8]) -> bool {
    // Branch-free per chunk so that it vectorizes.
    s.chunks(16).all(|c| {
        c.iter().fold(true, |ok, &b| {
            ok & (0x20..=0x7e).contains(&b) & (b != b'"') & (b != b'\\')
        })
    })
}

/// Buffers small writes so that SHA-1 is fed whole blocks.
struct HashSink {
    hasher: Sha1,
    pub(super) buf: [u8; 256],
    pub(super) len: usize,
}

impl HashSink {
    #[inline]
    pub(super) fn write(&mut self, data: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.len..self.len + data.len()) {
            dst.copy_from_slice(data);
            self.len += data.len();
            return;
        }
        self.flush();
        if data.len() >= self.buf.len() {
            self.hasher.update(data);
        } else {
            self.buf[..data.len()].copy_from_slice(data);
            self.len = data.len();
        }
    }

    fn flush(&mut self) {
        self.hasher.update(&self.buf[..self.len]);
        self.len = 0;
    }

    fn finish(mut self) -> Fingerprint {
        self.flush();
        Fingerprint(self.hasher.finalize().into())
    }
}

impl Fingerprinter {
    /// A fingerprinter with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Like [`canonicalize_url`], borrowing the result from the internal buffer.
    pub fn canonicalize(&mut self, url: &str) -> Result<&str, UrlError> {
        self.canonicalize_impl(url)?;
        Ok(&self.out)
    }

    /// Like [`fingerprint`], reusing the internal buffers.
    pub fn fingerprint(
        &mut self,
        method: &str,
        url: &str,
        body: &[u8],
    ) -> Result<Fingerprint, UrlError> {
        let outcome = self.canonicalize_impl(url)?;
        if !outcome.accepted {
            return Err(UrlError::MissingScheme);
        }
        if outcome.second_pass_fails {
            return Err(UrlError::InvalidIpv6);
        }
        if outcome.host_ends_url_with_space {
            // Scrapy canonicalizes `safe_url_string(url)`, which here ends with
            // the host, so its trailing spaces/C0 controls are stripped by the
            // second pass: `http://a :` -> `http://a ` -> `http://a/`.
            let mut safe = core::mem::take(&mut self.out);
            safe.pop(); // the "/" that stands for the empty path
            let trimmed_len = safe.trim_end_matches(|c: char| c <= '\u{20}').len();
            safe.truncate(trimmed_len);
            self.canonicalize_impl(&safe)?;
        }
        Ok(fingerprint_canonical(method, &self.out, body))
    }
}

/// Python's `json.dumps` string body with `ensure_ascii=True`.
fn json_escape_into(sink: &mut HashSink, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\' {
            i += 1;
            continue;
        }
        sink.write(&bytes[start..i]);
        let c = s
            .get(i..)
            .and_then(|t| t.chars().next())
            .unwrap_or('\u{FFFD}');
        i += c.len_utf8();
        start = i;
        match c {
            '"' => sink.write(b"\\\""),
            '\\' => sink.write(b"\\\\"),
            '\n' => sink.write(b"\\n"),
            '\r' => sink.write(b"\\r"),
            '\t' => sink.write(b"\\t"),
            '\u{8}' => sink.write(b"\\b"),
            '\u{c}' => sink.write(b"\\f"),
            _ => {
                let mut units = [0u16; 2];
                for &u in c.encode_utf16(&mut units).iter() {
                    sink.write(&[
                        b'\\',
                        b'u',
                        HEX_LOWER[usize::from(u >> 12)],
                        HEX_LOWER[usize::from((u >> 8) & 0xf)],
                        HEX_LOWER[usize::from((u >> 4) & 0xf)],
                        HEX_LOWER[usize::from(u & 0xf)],
                    ]);
                }
            }
        }
    }
    sink.write(&bytes[start..]);
}
