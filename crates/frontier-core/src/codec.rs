//! The compact binary form of a request: one format-version byte, then postcard.
//!
//! Callback names are interned: a record carries a small number and the
//! [`CallbackTable`] (persisted by every store next to the records) maps it back to the
//! name. With that, the common case (URL + callback + priority) costs at most the URL's
//! length plus 8 bytes: version, URL length, callback id, priority, depth, flags, and the
//! marker for the rare fields.
//!
//! A request whose scope group is its URL's host does not repeat the host either: stores
//! keep the group key next to each record, so `https://host/rest` is stored as `/rest`
//! with a flag, and decoding takes the group's host back.
//!
//! ```
//! use polite_frontier_core::{Codec, Request};
//!
//! let mut codec = Codec::new();
//! let req = Request::get("https://example.com/a/page").callback("parse_item").priority(3);
//! let mut bytes = Vec::new();
//! let new_callback = codec.encode(&req, None, &mut bytes).unwrap();
//! assert_eq!(new_callback, Some((0, "parse_item")));   // persist this once
//! assert!(bytes.len() <= req.url.len() + 8);
//! assert_eq!(codec.decode(&bytes, None).unwrap(), req);
//! assert!(codec.decode(&bytes[..5], None).is_err());    // never a panic
//!
//! // Stored next to its group key, the host need not be repeated.
//! let mut short = Vec::new();
//! codec.encode(&req, Some("example.com"), &mut short).unwrap();
//! assert_eq!(short.len(), bytes.len() - "https://example.com".len());
//! assert_eq!(codec.decode(&short, Some("example.com")).unwrap(), req);
//! ```

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

use crate::request::{Extras, Method, Request, ScopeAmount};

/// The record format written by this version of the crate.
pub const FORMAT_VERSION: u8 = 1;

const START: u8 = 1;
const DONT_FILTER: u8 = 1 << 1;
const DONT_TRACK: u8 = 1 << 2;
const DONT_THROTTLE: u8 = 1 << 3;
const HTTPS_HOST_ELIDED: u8 = 1 << 4;
const HTTP_HOST_ELIDED: u8 = 1 << 5;
const KNOWN_FLAGS: u8 =
    START | DONT_FILTER | DONT_TRACK | DONT_THROTTLE | HTTPS_HOST_ELIDED | HTTP_HOST_ELIDED;

#[derive(Serialize, Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    url: &'a str,
    callback: Option<u32>,
    priority: i32,
    depth: u32,
    flags: u8,
    /// Boxed (postcard writes a box as its contents): the common record's `Wire` stays
    /// small enough to pass around in registers and a few words.
    #[serde(borrow)]
    rest: Option<Box<Rest<'a>>>,
}

/// Fields that are absent in the common case.
#[derive(Serialize, Deserialize)]
struct Rest<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    scopes: Option<ScopeList<'a>>,
    delay: Option<f64>,
    #[serde(borrow)]
    headers: Vec<(&'a str, &'a [u8])>,
    #[serde(borrow)]
    body: &'a [u8],
    #[serde(borrow)]
    meta: &'a [u8],
}

/// A request's scope list on the wire, a sequence of `(name, amount)`: written straight
/// from the request's own list (no list is built on encode) and read into a `Vec`,
/// whose pointer moves cheaply through deserialisation (an inline `heapless` list of
/// `MAX_SCOPES` entries cost ~290 more instructions per decoded request in callgrind
/// than the allocation it saved).
enum ScopeList<'a> {
    Request(&'a [ScopeAmount]),
    Read(Vec<(&'a str, f64)>),
}

impl Serialize for ScopeList<'_> {
    fn serialize<Z: serde::Serializer>(&self, z: Z) -> Result<Z::Ok, Z::Error> {
        match self {
            ScopeList::Request(list) => z.collect_seq(list.iter().map(|s| (&*s.scope, s.amount))),
            ScopeList::Read(list) => list.serialize(z),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ScopeList<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::deserialize(d).map(ScopeList::Read)
    }
}

/// Callback names by number, shared by every record of one frontier.
#[derive(Clone, Debug, Default)]
pub struct CallbackTable {
    names: Vec<Option<Arc<str>>>,
    ids: HashMap<Arc<str>, u32>,
    /// The number [`intern`](Self::intern) returned last: most requests of a crawl name
    /// the same callback, and comparing it is cheaper than hashing the name.
    last: u32,
}

/// Tables are equal when they number the same names the same way.
impl PartialEq for CallbackTable {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names
    }
}

impl Eq for CallbackTable {}

impl CallbackTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of `name`, assigning the next one if it is new (then `true`).
    pub fn intern(&mut self, name: &str) -> (u32, bool) {
        if self.name(self.last) == Some(name) {
            return (self.last, false);
        }
        if let Some(&id) = self.ids.get(name) {
            self.last = id;
            return (id, false);
        }
        let id = self.names.len() as u32;
        self.last = id;
        let name: Arc<str> = Arc::from(name);
        self.names.push(Some(name.clone()));
        self.ids.insert(name, id);
        (id, true)
    }

    fn shared(&self, id: u32) -> Option<&Arc<str>> {
        self.names.get(id as usize).and_then(|n| n.as_ref())
    }

    /// The name of callback `id`.
    pub fn name(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).and_then(|n| n.as_deref())
    }

    /// Restores a persisted entry. Fails if `id` already names another callback.
    pub fn restore(&mut self, id: u32, name: &str) -> Result<(), DecodeError> {
        let i = id as usize;
        if i >= self.names.len() {
            self.names.resize(i + 1, None);
        }
        match &self.names[i] {
            Some(existing) if **existing != *name => Err(DecodeError::new(
                DecodeErrorKind::Corrupt,
                alloc::format!("callback {id} is both {existing:?} and {name:?}"),
            )),
            Some(_) => Ok(()),
            None => {
                let name: Arc<str> = Arc::from(name);
                self.names[i] = Some(name.clone());
                self.ids.insert(name, id);
                Ok(())
            }
        }
    }

    /// Every entry, by number.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> + '_ {
        self.names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_deref().map(|n| (i as u32, n)))
    }

    /// Number of callbacks known.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no callback is known.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Encodes and decodes requests, interning callback names.
#[derive(Clone, Debug, Default)]
pub struct Codec {
    callbacks: CallbackTable,
}

impl Codec {
    /// A codec with an empty callback table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A codec using a restored callback table.
    pub fn with_callbacks(callbacks: CallbackTable) -> Self {
        Codec { callbacks }
    }

    /// The callback table.
    pub fn callbacks(&self) -> &CallbackTable {
        &self.callbacks
    }

    /// The callback table, for restoring entries.
    pub fn callbacks_mut(&mut self) -> &mut CallbackTable {
        &mut self.callbacks
    }

    /// Appends the encoding of `req` to `out`. If `host` is the request's scope group and
    /// the URL is `http(s)://` + `host` + rest, only the rest is stored (pass the same
    /// `host` to [`decode`](Self::decode)). Returns the callback number and name if this
    /// request introduced a new callback: persist it before the record.
    pub fn encode<'r>(
        &mut self,
        req: &'r Request,
        host: Option<&str>,
        out: &mut Vec<u8>,
    ) -> Result<Option<(u32, &'r str)>, EncodeError> {
        let mut new_callback = None;
        let callback = req.callback.as_deref().map(|name| {
            let (id, new) = self.callbacks.intern(name);
            if new {
                new_callback = Some((id, name));
            }
            id
        });
        let mut flags = 0;
        for (set, bit) in [
            (req.start, START),
            (req.dont_filter, DONT_FILTER),
            (req.dont_track, DONT_TRACK),
            (req.dont_throttle, DONT_THROTTLE),
        ] {
            if set {
                flags |= bit;
            }
        }
        let mut url: &str = &req.url;
        if let Some(host) = host.filter(|h| !h.is_empty()) {
            for (scheme, bit) in [
                ("https://", HTTPS_HOST_ELIDED),
                ("http://", HTTP_HOST_ELIDED),
            ] {
                let rest = url
                    .strip_prefix(scheme)
                    .and_then(|r| r.strip_prefix(host))
                    .filter(|r| r.is_empty() || r.starts_with(['/', '?', '#']));
                if let Some(rest) = rest {
                    url = rest;
                    flags |= bit;
                    break;
                }
            }
        }
        let extras = req.extras.as_deref().filter(|e| !e.is_empty());
        let rest = (req.method != Method::Get
            || req.scopes.is_some()
            || req.delay.is_some()
            || extras.is_some())
        .then(|| {
            Box::new(Rest {
                method: (req.method != Method::Get).then(|| req.method.as_str()),
                scopes: req.scopes.as_deref().map(ScopeList::Request),
                delay: req.delay,
                headers: extras.map_or_else(Vec::new, |e| {
                    e.headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_slice()))
                        .collect()
                }),
                body: extras.map_or(&[], |e| &e.body),
                meta: extras.map_or(&[], |e| &e.meta),
            })
        });
        let wire = Wire {
            url,
            callback,
            priority: req.priority,
            depth: req.depth,
            flags,
            rest,
        };
        out.push(FORMAT_VERSION);
        if wire.rest.is_none() {
            write_common_record(&wire, out);
        } else {
            write_by_postcard(&wire, out)?;
        }
        Ok(new_callback)
    }

    /// Decodes a record; `host` is the group host it was encoded with (if any).
    /// Corrupted or foreign bytes give an error, never a panic.
    pub fn decode(&self, bytes: &[u8], host: Option<&str>) -> Result<Request, DecodeError> {
        let host = host.filter(|h| !h.bytes().any(|b| b == b'\n' || b == b'\t'));
        self.decode_plain_host(bytes, host)
    }

    /// [`decode`](Self::decode) for a caller that knows `host` is one plain host (no
    /// scope-list separators): the frontier, which checked its group key once.
    #[inline]
    pub(crate) fn decode_plain_host(
        &self,
        bytes: &[u8],
        host: Option<&str>,
    ) -> Result<Request, DecodeError> {
        match bytes.split_first() {
            Some((&FORMAT_VERSION, body)) => match common_record(body) {
                Some(wire) => self.request_of(wire, host),
                None => self.decode_rare(body, host),
            },
            _ => Err(version_error(bytes)),
        }
    }

    /// [`decode_plain_host`](Self::decode_plain_host) of a record [`common_record`]
    /// does not read (rare fields, or damage): postcard decides, and reports the error.
    #[inline(never)]
    fn decode_rare(&self, body: &[u8], host: Option<&str>) -> Result<Request, DecodeError> {
        let (wire, tail): (Wire<'_>, &[u8]) = postcard::take_from_bytes(body)
            .map_err(|e| DecodeError::new(DecodeErrorKind::Corrupt, e.to_string()))?;
        if !tail.is_empty() {
            return Err(DecodeError::new(
                DecodeErrorKind::Corrupt,
                alloc::format!("{} unexpected bytes after the record", tail.len()),
            ));
        }
        self.request_of(wire, host)
    }

    /// [`decode_plain_host`](Self::decode_plain_host) through postcard alone (the
    /// reference the hand-written reader of [`common_record`] is checked against).
    #[cfg(test)]
    fn decode_by_postcard(&self, bytes: &[u8], host: Option<&str>) -> Result<Request, DecodeError> {
        match bytes.split_first() {
            Some((&FORMAT_VERSION, body)) => self.decode_rare(body, host),
            _ => Err(version_error(bytes)),
        }
    }

    /// Builds the request a decoded record describes.
    #[inline]
    fn request_of(&self, wire: Wire<'_>, host: Option<&str>) -> Result<Request, DecodeError> {
        if wire.flags & !KNOWN_FLAGS != 0 {
            return Err(unknown_flags(wire.flags));
        }
        let callback = match wire.callback {
            None => None,
            Some(id) => Some(
                self.callbacks
                    .shared(id)
                    .ok_or_else(|| unknown_callback(id))?
                    .clone(),
            ),
        };
        let url: Box<str> = match wire.flags & (HTTPS_HOST_ELIDED | HTTP_HOST_ELIDED) {
            0 => Box::from(wire.url),
            HTTPS_HOST_ELIDED => join_url("https://", host, wire.url)?,
            HTTP_HOST_ELIDED => join_url("http://", host, wire.url)?,
            _ => return Err(no_host()),
        };
        let (method, scopes, delay, extras) = match wire.rest {
            None => (Method::Get, None, None, None),
            Some(rest) => rare_fields(*rest),
        };
        Ok(Request {
            url,
            method,
            callback,
            priority: wire.priority,
            depth: wire.depth,
            start: wire.flags & START != 0,
            dont_filter: wire.flags & DONT_FILTER != 0,
            dont_track: wire.flags & DONT_TRACK != 0,
            dont_throttle: wire.flags & DONT_THROTTLE != 0,
            scopes,
            delay,
            extras,
        })
    }
}

/// A record's URL with its elided scheme and host put back.
#[inline(always)]
fn join_url(scheme: &str, host: Option<&str>, rest: &str) -> Result<Box<str>, DecodeError> {
    let host = host.filter(|h| !h.is_empty()).ok_or_else(no_host)?;
    let mut url = String::with_capacity(scheme.len() + host.len() + rest.len());
    url.push_str(scheme);
    url.push_str(host);
    url.push_str(rest);
    Ok(url.into_boxed_str())
}

/// A request's rare fields: method, explicit scopes, delay, extras.
type RareFields = (
    Method,
    Option<Vec<ScopeAmount>>,
    Option<f64>,
    Option<Box<Extras>>,
);

/// The fields of a record's [`Rest`], as a request holds them.
#[inline(never)]
fn rare_fields(rest: Rest<'_>) -> RareFields {
    let method = rest.method.map_or(Method::Get, Method::from_name);
    let scopes = rest.scopes.map(|s| match s {
        ScopeList::Read(list) => list
            .into_iter()
            .map(|(scope, amount)| ScopeAmount {
                scope: Box::from(scope),
                amount,
            })
            .collect(),
        ScopeList::Request(list) => list.to_vec(),
    });
    let extras = Extras {
        headers: rest
            .headers
            .into_iter()
            .map(|(n, v)| (String::from(n), v.to_vec()))
            .collect(),
        body: rest.body.to_vec(),
        meta: rest.meta.to_vec(),
    };
    let extras = (!extras.is_empty()).then(|| Box::new(extras));
    (method, scopes, rest.delay, extras)
}

#[cold]
fn version_error(bytes: &[u8]) -> DecodeError {
    match bytes.first() {
        None => DecodeError::new(DecodeErrorKind::Corrupt, "empty record".into()),
        Some(&version) => DecodeError::new(
            DecodeErrorKind::UnsupportedVersion(version),
            alloc::format!(
                "record format version {version} (this build reads version {FORMAT_VERSION})"
            ),
        ),
    }
}

#[cold]
fn unknown_flags(flags: u8) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::Corrupt,
        alloc::format!("unknown flag bits {flags:#04x}"),
    )
}

#[cold]
fn unknown_callback(id: u32) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::UnknownCallback(id),
        alloc::format!("callback number {id} is not in the callback table"),
    )
}

#[cold]
fn no_host() -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::Corrupt,
        "the record omits its host but no single-host group was given".into(),
    )
}

/// Reads a record without rare fields (the common case) straight from its bytes, in
/// postcard's layout: URL (length varint + bytes), callback (option tag + varint),
/// priority (zigzag varint), depth (varint), flags (a byte), rare fields (option tag 0).
/// Returns `None` for anything else (rare fields, a varint in a longer form than
/// needed, invalid UTF-8, trailing bytes): postcard then decides, and reports the error.
fn common_record(body: &[u8]) -> Option<Wire<'_>> {
    let mut r = Bytes(body);
    let len = r.varint()? as usize;
    let url = text(r.take(len)?)?;
    let callback = match r.byte()? {
        0 => None,
        1 => Some(r.varint()?),
        _ => return None,
    };
    let zigzag = r.varint()?;
    let priority = ((zigzag >> 1) as i32) ^ -((zigzag & 1) as i32);
    let depth = r.varint()?;
    let flags = r.byte()?;
    if r.byte()? != 0 || !r.0.is_empty() {
        return None;
    }
    Some(Wire {
        url,
        callback,
        priority,
        depth,
        flags,
        rest: None,
    })
}

/// Appends `wire` to `out` as postcard does.
fn write_by_postcard(wire: &Wire<'_>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    postcard::to_extend(wire, core::mem::take(out))
        .map(|v| *out = v)
        .map_err(|e| EncodeError(e.to_string()))
}

/// Appends a record without its optional fields (`rest` is `None`) to `out`: the same
/// bytes as [`write_by_postcard`], written by hand (the writer of what
/// [`common_record`] reads).
fn write_common_record(wire: &Wire<'_>, out: &mut Vec<u8>) {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out.reserve(wire.url.len() + 16);
    varint(out, wire.url.len() as u64);
    out.extend_from_slice(wire.url.as_bytes());
    match wire.callback {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            varint(out, u64::from(id));
        }
    }
    let zigzag = ((wire.priority << 1) ^ (wire.priority >> 31)) as u32;
    varint(out, u64::from(zigzag));
    varint(out, u64::from(wire.depth));
    out.push(wire.flags);
    out.push(0);
}

/// `bytes` as text, if they are valid UTF-8. A URL is nearly always ASCII, which is
/// checked a word at a time; only other text goes through the full UTF-8 check.
fn text(bytes: &[u8]) -> Option<&str> {
    if is_ascii(bytes) {
        #[allow(unsafe_code)]
        // SAFETY: every byte is below 0x80, and a sequence of ASCII bytes is valid UTF-8.
        Some(unsafe { core::str::from_utf8_unchecked(bytes) })
    } else {
        core::str::from_utf8(bytes).ok()
    }
}

/// Whether every byte is below 0x80: the high bits of all eight-byte words OR-ed
/// together, the last word read where it ends (overlapping the one before), so that a
/// URL of any length takes one short loop and no byte-by-byte tail.
#[inline]
fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0x80; 8]));
    match bytes.len() {
        0..8 => bytes.iter().fold(0, |acc, &b| acc | b) < 0x80,
        n => {
            let last = word(&bytes[n - 8..]);
            bytes.chunks_exact(8).fold(last, |acc, w| acc | word(w)) & HIGH == 0
        }
    }
}

/// A cursor over a record's bytes.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    /// A `u32` varint in its shortest form (LEB128, at most five bytes).
    fn varint(&mut self) -> Option<u32> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = self.byte()?;
            if i == 4 && b > 0x0f {
                return None;
            }
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                // A zero last byte after the first means a longer form than needed.
                return (i == 0 || b != 0).then_some(value);
            }
        }
        None
    }
}

/// A request could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeError(String);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot encode request: {}", self.0)
    }
}

impl core::error::Error for EncodeError {}

/// What kind of problem a [`DecodeError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The bytes are not a valid record.
    Corrupt,
    /// Written by a newer (or foreign) format version.
    UnsupportedVersion(u8),
    /// The record names a callback the table does not know.
    UnknownCallback(u32),
}

/// A record could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    detail: String,
}

impl DecodeError {
    fn new(kind: DecodeErrorKind, detail: String) -> Self {
        DecodeError { kind, detail }
    }

    /// What kind of problem it is.
    pub fn kind(&self) -> DecodeErrorKind {
        self.kind
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable request record: {}", self.detail)
    }
}

impl core::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        /// The word-at-a-time check agrees with the standard library's, whatever the
        /// length and wherever a high byte is.
        #[test]
        fn is_ascii_agrees_with_std(
            bytes in proptest::collection::vec(0u8..0x80, 0..100),
            high in proptest::option::of(0usize..100),
        ) {
            let mut bytes = bytes;
            if let Some(at) = high.filter(|&at| at < bytes.len()) {
                bytes[at] |= 0x80;
            }
            proptest::prop_assert_eq!(super::is_ascii(&bytes), bytes.is_ascii());
        }
    }

    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn roundtrip(codec: &mut Codec, req: &Request) -> Vec<u8> {
        let mut out = Vec::new();
        codec.encode(req, None, &mut out).unwrap();
        assert_eq!(&codec.decode(&out, None).unwrap(), req);
        out
    }

    #[test]
    fn common_case_costs_at_most_url_plus_8() {
        let mut codec = Codec::new();
        let url = "https://host1234.example56.com/path/4567890?q=4567890&page=12&sort=asc&x=1";
        for (priority, cb) in [
            (0, "parse"),
            (-5, "parse_item"),
            (63, "a_much_longer_callback"),
        ] {
            let req = Request::get(url).callback(cb).priority(priority).depth(3);
            let bytes = roundtrip(&mut codec, &req);
            assert!(bytes.len() <= url.len() + 8, "{} bytes", bytes.len());
        }
        let bytes = roundtrip(&mut codec, &Request::get(url));
        assert!(bytes.len() <= url.len() + 7);
    }

    /// A record with every rare field, byte for byte: what stores hold must read back
    /// after any change to the codec's types (format version 1).
    #[test]
    fn rare_record_bytes_are_stable() {
        let mut codec = Codec::new();
        let req = Request::new(Method::Post, "https://api.example.com/x?y=1")
            .callback("cb")
            .priority(-3)
            .depth(2)
            .start()
            .scope("api")
            .scope_amount("cost", 2.5)
            .delay(1.5)
            .header("accept", "text/html")
            .body("b=1")
            .meta("m");
        let mut out = Vec::new();
        codec
            .encode(&req, Some("api.example.com"), &mut out)
            .unwrap();
        let hex: String = out.iter().map(|b| alloc::format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "01062f783f793d310100050211010104504f5354010203617069000000000000f03f04636f7374000000000000044001000000000000f83f010661636365707409746578742f68746d6c03623d31016d"
        );
        assert_eq!(codec.decode(&out, Some("api.example.com")).unwrap(), req);
    }

    #[test]
    fn every_field_survives() {
        let mut codec = Codec::new();
        let req = Request::new(Method::Other("PATCH".into()), "https://api.example.com/x")
            .callback("cb")
            .priority(-100_000)
            .depth(70_000)
            .start()
            .dont_filter()
            .dont_track()
            .dont_throttle()
            .scope("api")
            .scope_amount("cost", 2.5)
            .delay(1.25)
            .header("X-Token", b"secret".to_vec())
            .body(b"{\"a\":1}".to_vec())
            .meta(vec![0u8, 255, 7]);
        roundtrip(&mut codec, &req);
        roundtrip(
            &mut codec,
            &Request::new(Method::Post, "https://a.b/").body(b"x".to_vec()),
        );
        roundtrip(&mut codec, &Request::new(Method::Head, "https://a.b/"));
    }

    #[test]
    fn decoding_errors_are_typed() {
        let mut codec = Codec::new();
        let mut bytes = Vec::new();
        codec
            .encode(
                &Request::get("https://a.b/").callback("cb"),
                None,
                &mut bytes,
            )
            .unwrap();
        assert_eq!(
            codec.decode(&[], None).unwrap_err().kind(),
            DecodeErrorKind::Corrupt
        );
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert_eq!(
            codec.decode(&v2, None).unwrap_err().kind(),
            DecodeErrorKind::UnsupportedVersion(2)
        );
        let fresh = Codec::new();
        assert_eq!(
            fresh.decode(&bytes, None).unwrap_err().kind(),
            DecodeErrorKind::UnknownCallback(0)
        );
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(codec.decode(&trailing, None).is_err());
        for cut in 0..bytes.len() {
            assert!(
                codec.decode(&bytes[..cut], None).is_err(),
                "prefix of {cut} bytes"
            );
        }
        let err = codec.decode(&[1, 200], None).unwrap_err().to_string();
        assert!(err.starts_with("undecodable request record"), "{err}");
    }

    #[test]
    fn host_elision() {
        let mut codec = Codec::new();
        for (url, host, elided) in [
            ("https://a.example.com/x?y", "a.example.com", true),
            ("http://a.example.com", "a.example.com", true),
            ("http://a.example.com#f", "a.example.com", true),
            ("https://a.example.com:8080/x", "a.example.com:8080", true),
            ("https://a.example.com.evil/x", "a.example.com", false),
            ("https://A.example.com/x", "a.example.com", false),
            ("ftp://a.example.com/x", "a.example.com", false),
        ] {
            let req = Request::get(url).callback("parse");
            let (mut full, mut short) = (Vec::new(), Vec::new());
            codec.encode(&req, None, &mut full).unwrap();
            codec.encode(&req, Some(host), &mut short).unwrap();
            assert_eq!(short.len() < full.len(), elided, "{url}");
            assert_eq!(codec.decode(&short, Some(host)).unwrap(), req, "{url}");
            if elided {
                assert!(
                    codec.decode(&short, None).is_err(),
                    "{url}: the host is needed"
                );
                assert!(codec.decode(&short, Some("a\nb")).is_err());
            }
        }
    }

    #[test]
    fn the_common_record_takes_the_hand_written_reader() {
        let mut codec = Codec::new();
        for req in [
            Request::get("https://a.example.com/x?y=1")
                .callback("parse")
                .priority(-3),
            Request::get("http://a.example.com/")
                .depth(300)
                .start()
                .dont_filter(),
            Request::get("https://a.example.com/\u{e9}t\u{e9}").priority(i32::MIN),
        ] {
            for host in [None, Some("a.example.com")] {
                let mut bytes = Vec::new();
                codec.encode(&req, host, &mut bytes).unwrap();
                let wire = common_record(&bytes[1..]).expect("read by hand");
                assert_eq!((wire.priority, wire.depth), (req.priority, req.depth));
                assert_eq!(codec.decode(&bytes, host).unwrap(), req);
            }
        }
        // Rare fields go through postcard.
        let mut bytes = Vec::new();
        let post = Request::new(Method::Post, "https://a.b/").body(b"x".to_vec());
        codec.encode(&post, None, &mut bytes).unwrap();
        assert!(common_record(&bytes[1..]).is_none());
        assert_eq!(codec.decode(&bytes, None).unwrap(), post);
    }

    #[test]
    fn callback_table_restore() {
        let mut t = CallbackTable::new();
        t.restore(2, "c").unwrap();
        t.restore(0, "a").unwrap();
        t.restore(0, "a").unwrap();
        assert!(t.restore(0, "b").is_err());
        assert_eq!(t.name(2), Some("c"));
        assert_eq!(t.name(1), None);
        assert_eq!(t.intern("a"), (0, false));
        assert_eq!(t.intern("d"), (3, true));
        assert_eq!(t.iter().collect::<Vec<_>>(), [(0, "a"), (2, "c"), (3, "d")]);
        // The last name interned is remembered; the others are still found.
        for (name, id) in [("d", 3), ("d", 3), ("c", 2), ("a", 0), ("a", 0), ("d", 3)] {
            assert_eq!(t.intern(name), (id, false), "{name}");
        }
        assert_eq!(t.intern("e"), (4, true));
        assert_eq!(t.intern("e"), (4, false));
        let mut u = CallbackTable::new();
        for name in ["a", "b", "c", "d", "e"] {
            u.intern(name);
        }
        t.intern("a");
        assert_ne!(t, u, "a missing name makes another table");
        t.restore(1, "b").unwrap();
        assert_eq!(
            t, u,
            "the same names under the same numbers, whichever came last"
        );
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        (
            "[a-z]{1,8}://[a-z0-9.]{1,20}/[ -~]{0,40}",
            proptest::option::of("[a-z_]{1,12}"),
            any::<i32>(),
            any::<u32>(),
            any::<[bool; 4]>(),
            proptest::option::of(proptest::collection::vec(
                ("[a-z.]{1,10}", -1e6f64..1e6),
                0..3,
            )),
            proptest::option::of(0.0f64..1e5),
            proptest::option::of((
                proptest::collection::vec(
                    (
                        "[A-Za-z-]{1,10}",
                        proptest::collection::vec(any::<u8>(), 0..10),
                    ),
                    0..3,
                ),
                proptest::collection::vec(any::<u8>(), 0..20),
                proptest::collection::vec(any::<u8>(), 0..20),
            )),
            prop_oneof![
                Just(Method::Get),
                Just(Method::Post),
                Just(Method::Head),
                "[A-Z]{1,7}".prop_map(|m| Method::from_name(&m))
            ],
        )
            .prop_map(
                |(url, cb, priority, depth, f, scopes, delay, extras, method)| {
                    let mut r = Request::new(method, url);
                    r.callback = cb.map(|c| Arc::from(c.as_str()));
                    r.priority = priority;
                    r.depth = depth;
                    (r.start, r.dont_filter, r.dont_track, r.dont_throttle) =
                        (f[0], f[1], f[2], f[3]);
                    r.scopes = scopes.map(|v| {
                        v.into_iter()
                            .map(|(s, a)| ScopeAmount {
                                scope: s.into(),
                                amount: a,
                            })
                            .collect()
                    });
                    r.delay = delay;
                    r.extras = extras
                        .map(|(headers, body, meta)| Extras {
                            headers,
                            body,
                            meta,
                        })
                        .filter(|e| !e.is_empty())
                        .map(Box::new);
                    r
                },
            )
    }

    proptest! {
        #[test]
        fn roundtrip_any_request(req in arb_request()) {
            let mut codec = Codec::new();
            let mut out = Vec::new();
            codec.encode(&req, None, &mut out).unwrap();
            prop_assert_eq!(codec.decode(&out, None).unwrap(), req.clone());
            // With the group host elided (when it matches) and given back.
            let host = crate::group::host_scope(&req.url).ok();
            let mut short = Vec::new();
            codec.encode(&req, host.as_deref(), &mut short).unwrap();
            prop_assert!(short.len() <= out.len());
            prop_assert_eq!(codec.decode(&short, host.as_deref()).unwrap(), req);
        }

        /// The hand-written writer of the common record writes what postcard writes.
        #[test]
        fn fast_writer_matches_postcard(
            url in ".{0,300}",
            callback in proptest::option::of(any::<u32>()),
            priority in any::<i32>(),
            depth in any::<u32>(),
            flags in any::<u8>(),
        ) {
            let wire = Wire { url: &url, callback, priority, depth, flags, rest: None };
            let (mut fast, mut reference) = (vec![7], vec![7]);
            write_common_record(&wire, &mut fast);
            write_by_postcard(&wire, &mut reference).unwrap();
            prop_assert_eq!(fast, reference);
        }

        /// The hand-written reader of the common record agrees with postcard on every
        /// input: the same request, or an error of the same kind.
        #[test]
        fn fast_reader_matches_postcard(
            req in arb_request(),
            cut in any::<prop::sample::Index>(),
            flip in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            tail in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            let mut codec = Codec::new();
            codec.callbacks_mut().intern("parse");
            let host = crate::group::host_scope(&req.url).ok();
            let mut bytes = Vec::new();
            codec.encode(&req, host.as_deref(), &mut bytes).unwrap();
            let mut variants = vec![bytes.clone()];
            let mut cut_short = bytes.clone();
            cut_short.truncate(cut.index(bytes.len() + 1));
            variants.push(cut_short);
            if let Some((at, x)) = flip {
                let mut flipped = bytes.clone();
                let i = at.index(flipped.len());
                flipped[i] ^= x;
                variants.push(flipped);
            }
            let mut longer = bytes.clone();
            longer.extend_from_slice(&tail);
            variants.push(longer);
            for v in &variants {
                let fast = codec.decode_plain_host(v, host.as_deref());
                let reference = codec.decode_by_postcard(v, host.as_deref());
                match (&fast, &reference) {
                    (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                    (Err(a), Err(b)) => prop_assert_eq!(a.kind(), b.kind()),
                    _ => prop_assert!(false, "{:?} vs {:?} for {:?}", fast, reference, v),
                }
            }
        }

        #[test]
        fn fast_reader_matches_postcard_on_noise(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut codec = Codec::new();
            codec.callbacks_mut().intern("parse");
            let mut with_version = vec![FORMAT_VERSION];
            with_version.extend_from_slice(&bytes);
            for host in [None, Some("example.com")] {
                let fast = codec.decode_plain_host(&with_version, host);
                let reference = codec.decode_by_postcard(&with_version, host);
                match (&fast, &reference) {
                    (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                    (Err(a), Err(b)) => prop_assert_eq!(a.kind(), b.kind()),
                    _ => prop_assert!(false, "{:?} vs {:?}", fast, reference),
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut codec = Codec::new();
            codec.callbacks_mut().intern("parse");
            let _ = codec.decode(&bytes, None);
            let mut with_version = vec![FORMAT_VERSION];
            with_version.extend_from_slice(&bytes);
            let _ = codec.decode(&with_version, None);
            let _ = codec.decode(&with_version, Some("example.com"));
        }
    }
}
