//! IPv6 literals, parsed and printed the way Python's `ipaddress` does (RFC 5952).

use super::HEX_LOWER;
use alloc::vec::Vec;

/// Parses like `ipaddress.IPv6Address(s)`: returns the 8 hextets and the
/// scope id (without `%`), or `None` when Python raises.
pub(super) fn parse_ipv6(s: &str) -> Option<([u16; 8], Option<&str>)> {
    if s.contains('/') {
        return None;
    }
    let (addr, scope) = match s.split_once('%') {
        Some((a, scope)) => {
            if scope.is_empty() || scope.contains('%') {
                return None;
            }
            (a, Some(scope))
        }
        None => (s, None),
    };
    if addr.is_empty() {
        return None;
    }
    // Python appends the IPv4 tail as two '%x' hextet strings; `Val` stands for them.
    #[derive(Clone, Copy)]
    enum Part<'a> {
        Str(&'a str),
        Val(u16),
    }
    impl Part<'_> {
        fn is_empty(self) -> bool {
            matches!(self, Part::Str(""))
        }
        fn value(self) -> Option<u16> {
            match self {
                Part::Str(p) => parse_hextet(p),
                Part::Val(v) => Some(v),
            }
        }
    }
    let mut parts: Vec<Part<'_>> = addr.split(':').map(Part::Str).collect();
    if parts.len() < 3 {
        return None;
    }
    if let Some(Part::Str(last)) = parts.last().copied()
        && last.contains('.')
    {
        parts.pop();
        let v4 = parse_ipv4_strict(last)?;
        parts.push(Part::Val((u16::from(v4[0]) << 8) | u16::from(v4[1])));
        parts.push(Part::Val((u16::from(v4[2]) << 8) | u16::from(v4[3])));
    }
    if parts.len() > 9 {
        return None;
    }
    let n = parts.len();
    let mut skip: Option<usize> = None;
    for (i, p) in parts.iter().enumerate().take(n - 1).skip(1) {
        if p.is_empty() {
            if skip.is_some() {
                return None;
            }
            skip = Some(i);
        }
    }
    let (hi, lo, skipped) = if let Some(skip) = skip {
        let mut hi = skip;
        let mut lo = n - skip - 1;
        if parts[0].is_empty() {
            hi -= 1;
            if hi != 0 {
                return None;
            }
        }
        if parts[n - 1].is_empty() {
            lo -= 1;
            if lo != 0 {
                return None;
            }
        }
        let skipped = 8usize.checked_sub(hi + lo)?;
        if skipped < 1 {
            return None;
        }
        (hi, lo, skipped)
    } else {
        if n != 8 || parts[0].is_empty() || parts[n - 1].is_empty() {
            return None;
        }
        (n, 0, 0)
    };
    let mut out = [0u16; 8];
    let mut k = 0;
    for p in &parts[..hi] {
        *out.get_mut(k)? = p.value()?;
        k += 1;
    }
    k += skipped;
    for p in &parts[n - lo..] {
        *out.get_mut(k)? = p.value()?;
        k += 1;
    }
    Some((out, scope))
}

fn fmt_hex16(v: u16, buf: &mut [u8; 4]) -> &str {
    // '%x' formatting: lower-case, no leading zeros.
    let mut n = 0;
    let mut started = false;
    for shift in [12u16, 8, 4, 0] {
        let d = (v >> shift) & 0xf;
        if d != 0 || started || shift == 0 {
            buf[n] = HEX_LOWER[usize::from(d)];
            n += 1;
            started = true;
        }
    }
    core::str::from_utf8(&buf[..n]).unwrap_or("0")
}

fn parse_hextet(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(p, 16).ok()
}

/// `IPv4Address._ip_int_from_string`: 4 decimal octets, no leading zeros.
fn parse_ipv4_strict(s: &str) -> Option<[u8; 4]> {
    if s.is_empty() || s.contains('/') {
        return None;
    }
    let mut out = [0u8; 4];
    let mut count = 0;
    for part in s.split('.') {
        if count == 4 {
            return None;
        }
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if part != "0" && part.starts_with('0') {
            return None;
        }
        let v: u32 = part.bytes().fold(0, |n, b| n * 10 + u32::from(b - b'0'));
        out[count] = u8::try_from(v).ok()?;
        count += 1;
    }
    if count == 4 { Some(out) } else { None }
}

/// `str(IPv6Address)`: RFC 5952 compression as Python implements it.
pub(super) fn write_ipv6(out: &mut Vec<u8>, h: &[u16; 8], scope: Option<&str>) {
    let (mut best_start, mut best_len) = (0usize, 0usize);
    let (mut cur_start, mut cur_len) = (0usize, 0usize);
    for (i, &v) in h.iter().enumerate() {
        if v == 0 {
            if cur_len == 0 {
                cur_start = i;
            }
            cur_len += 1;
            if cur_len > best_len {
                best_len = cur_len;
                best_start = cur_start;
            }
        } else {
            cur_len = 0;
        }
    }
    let mut buf = [0u8; 4];
    if best_len > 1 {
        for (i, &v) in h[..best_start].iter().enumerate() {
            if i > 0 {
                out.push(b':');
            }
            out.extend_from_slice(fmt_hex16(v, &mut buf).as_bytes());
        }
        out.extend_from_slice(b"::");
        for (i, &v) in h[best_start + best_len..].iter().enumerate() {
            if i > 0 {
                out.push(b':');
            }
            out.extend_from_slice(fmt_hex16(v, &mut buf).as_bytes());
        }
    } else {
        for (i, &v) in h.iter().enumerate() {
            if i > 0 {
                out.push(b':');
            }
            out.extend_from_slice(fmt_hex16(v, &mut buf).as_bytes());
        }
    }
    if let Some(scope) = scope {
        out.push(b'%');
        out.extend_from_slice(scope.as_bytes());
    }
}
