//! Percent-encoding as w3lib does it: character classes, `quote`, `quote_plus`, `unquote`.

use super::HEX_UPPER;
use alloc::vec::Vec;

/// `_USERINFO_SAFEST_CHARS`: unreserved + sub-delims minus `;=`.
pub(super) const USERINFO: u8 = 1;
/// `_PATH_SAFEST_CHARS`: unreserved + reserved + `%`, minus `#[]|`.
pub(super) const PATH_SAFEST: u8 = 2;
/// `_PATH_SAFE_CHARS`: unreserved + reserved + `|%`, minus `#`.
pub(super) const PATH_SAFE: u8 = 4;
/// RFC 3986 unreserved (what `quote_plus` with `safe=b""` keeps).
const UNRESERVED: u8 = 8;
/// `urllib.parse.scheme_chars`: ASCII letters, digits and `+-.`.
pub(super) const SCHEME: u8 = 16;

pub(super) const fn mark(mut t: [u8; 256], chars: &[u8], bit: u8) -> [u8; 256] {
    let mut i = 0;
    while i < chars.len() {
        t[chars[i] as usize] |= bit;
        i += 1;
    }
    t
}

const UNRESERVED_CHARS: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";

pub(super) const CLASS: [u8; 256] = {
    let all = USERINFO | PATH_SAFEST | PATH_SAFE | UNRESERVED;
    let t = mark([0u8; 256], UNRESERVED_CHARS, all);
    let t = mark(t, b"!$&'()*+,", USERINFO | PATH_SAFEST | PATH_SAFE);
    let t = mark(t, b";=:/?@%", PATH_SAFEST | PATH_SAFE);
    let t = mark(t, b"[]|", PATH_SAFE);
    let t = mark(t, b"+-.", SCHEME);
    mark(t, UNRESERVED_CHARS.split_at(62).0, SCHEME)
};

#[inline]
fn is_safe(b: u8, class: u8) -> bool {
    CLASS[usize::from(b)] & class != 0
}

#[inline]
fn push_escape(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&[
        b'%',
        HEX_UPPER[usize::from(b >> 4)],
        HEX_UPPER[usize::from(b & 0x0f)],
    ]);
}

/// `_quote`: copies runs of safe bytes as slices, escapes the rest.
pub(super) fn quote_into(out: &mut Vec<u8>, bytes: &[u8], class: u8) {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !is_safe(b, class) {
            out.extend_from_slice(&bytes[start..i]);
            push_escape(out, b);
            start = i + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

/// `_quote(..., quote_plus=True)` with no extra safe characters.
pub(super) fn quote_plus_into(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !is_safe(b, UNRESERVED) {
            out.extend_from_slice(&bytes[start..i]);
            if b == b' ' {
                out.push(b'+');
            } else {
                push_escape(out, b);
            }
            start = i + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

#[inline]
fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `_unquote` / `_unquote_plus`: decode `%HH` (and `+` when `plus`), append to `out`.
pub(super) fn unquote_into(out: &mut Vec<u8>, data: &[u8], plus: bool) {
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        if b == b'%'
            && i + 2 < data.len()
            && let (Some(hi), Some(lo)) = (hex_val(data[i + 1]), hex_val(data[i + 2]))
        {
            out.push((hi << 4) | lo);
            i += 3;
            continue;
        }
        out.push(if plus && b == b'+' { b' ' } else { b });
        i += 1;
    }
}
