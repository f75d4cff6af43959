//! WARC/1.1 output (`--warc FILE`): what the crawler fetched, as web archives keep it.
//!
//! Each HTTP exchange becomes a `request` record and a `response` record, each naming
//! the other in `WARC-Concurrent-To`; every file starts with a `warcinfo` record that
//! the others name in `WARC-Warcinfo-ID`. Every record is its own gzip member, so the
//! file is a valid `.warc.gz` that readers can seek into record by record.
//!
//! The record format is written here by hand: the one WARC crate on crates.io, `warc`
//! 0.4, compresses a whole file as one gzip stream rather than one member per record,
//! computes no digests, and writes with `write` rather than `write_all` (a short write
//! loses bytes). Compression, digests and record ids come from `flate2`, `sha2` and
//! `uuid`.
//!
//! # Files
//!
//! An existing file is never overwritten or appended to: [`WarcWriter::open`] writes to
//! `PATH` if it does not exist, else to the first free name of the rotation sequence.
//! The sequence inserts `-NNNNN` (five digits, more after 99,999) before the `.warc.gz`,
//! `.warc` or `.gz` suffix of the name, or appends it when the name has none of those:
//! `crawl.warc.gz`, `crawl-00001.warc.gz`, `crawl-00002.warc.gz`, ... With a maximum
//! size, a file that has reached it after an exchange is closed and the next exchange
//! goes to the next free name: a file exceeds the maximum by at most one exchange, and
//! an exchange's two records are never split across files.
//!
//! # Durability
//!
//! Each record is handed to the operating system in one `write_all` as soon as it is
//! built, so a crash of the process loses at most the exchange being written; if a
//! write fails, the file is cut back to its last whole record. Files are synced to disk
//! when rotated and by [`WarcWriter::finish`], not after every record.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use url::{Position, Url};
use uuid::Uuid;

/// One HTTP request and the response it got, as [`WarcWriter::write_exchange`] records
/// them. Build it with [`Exchange::new`], then set the fields that differ from the
/// defaults.
///
/// Headers are `(name, value)` pairs in the order sent or received; [`header_pairs`]
/// makes them from a reqwest header map.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Exchange<'a> {
    /// The requested URL (`WARC-Target-URI`; its path and query form the request line).
    pub url: &'a Url,
    /// The request method; default `GET`.
    pub method: &'a str,
    /// The request's headers as sent. A `Host` header is added to the record when
    /// missing (HTTP/1.1 clients always send one).
    pub request_headers: Vec<(String, Vec<u8>)>,
    /// The protocol of the request and status lines, e.g. `HTTP/1.1` (the default) or
    /// `HTTP/1.0`. Record HTTP/2 exchanges as `HTTP/1.1`: `application/http` is HTTP/1
    /// message syntax, and that is what other crawlers write.
    pub version: &'a str,
    /// The response's status code (100 to 999).
    pub status: u16,
    /// The status line's reason phrase; default the code's standard phrase, or empty.
    pub reason: &'a str,
    /// The response's headers as received.
    ///
    /// A `Transfer-Encoding` header is recorded as `X-Archive-Orig-Transfer-Encoding`
    /// (pywb's convention for a header that no longer describes the stored bytes): the
    /// body given here is after transfer decoding, so readers must not de-chunk it.
    /// Likewise, to keep a compressed body as the server sent it, fetch with the
    /// client's automatic decompression off (reqwest drops `Content-Encoding` when it
    /// decompresses).
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// The response body as received (the WARC payload).
    pub body: &'a [u8],
    /// Whether the body was cut short (a size limit, a timeout): recorded as
    /// `WARC-Truncated: length`.
    pub truncated: bool,
    /// The server's address, when known (`WARC-IP-Address`).
    pub ip: Option<IpAddr>,
    /// When the request was sent (`WARC-Date` of both records).
    pub fetched_at: SystemTime,
}

impl<'a> Exchange<'a> {
    /// A `GET` of `url` over HTTP/1.1 answered with `status` and `body`, no headers,
    /// not truncated, address unknown, fetched now.
    pub fn new(url: &'a Url, status: u16, body: &'a [u8]) -> Exchange<'a> {
        Exchange {
            url,
            method: "GET",
            request_headers: Vec::new(),
            version: "HTTP/1.1",
            status,
            reason: reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or(""),
            response_headers: Vec::new(),
            body,
            truncated: false,
            ip: None,
            fetched_at: SystemTime::now(),
        }
    }
}

/// The headers of `map` as `(name, value)` pairs for an [`Exchange`], in the map's
/// order (values of one name together, in the order received).
pub fn header_pairs(map: &reqwest::header::HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
        .collect()
}

/// A WARC/1.1 file writer, shared by the crawl's workers (see the [module docs](self)
/// for file naming, rotation and durability).
#[derive(Debug)]
pub struct WarcWriter {
    base: PathBuf,
    max_size: Option<u64>,
    software: String,
    state: Mutex<State>,
}

/// The writer's state, behind its lock.
#[derive(Debug)]
struct State {
    /// The file being written.
    file: WarcFile,
    /// Exchanges in it.
    exchanges: u64,
    /// Every file opened so far, in order.
    paths: Vec<PathBuf>,
}

/// One open WARC file.
#[derive(Debug)]
struct WarcFile {
    file: File,
    path: PathBuf,
    /// Its index in the rotation sequence (0: the base path).
    index: u64,
    /// Bytes in it.
    size: u64,
    /// Its `warcinfo` record's id, `<urn:uuid:...>`.
    warcinfo_id: String,
}

impl WarcWriter {
    /// Creates a WARC file at `path` (or the first free name after it: see the [module
    /// docs](self)) and writes its `warcinfo` record, naming `software` (e.g.
    /// `frontier/0.1.0`). With `max_size`, a file that has reached that many bytes is
    /// closed and the next exchange starts a new one.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a `max_size` of 0, a `software` with control characters or a
    /// path without a file name; otherwise the file system's error, naming the path.
    pub fn open(path: &Path, max_size: Option<u64>, software: &str) -> io::Result<WarcWriter> {
        if max_size == Some(0) {
            return Err(invalid("the maximum WARC file size must be more than 0"));
        }
        if software.chars().any(char::is_control) {
            return Err(invalid("the WARC software name has control characters"));
        }
        if path.file_name().is_none() {
            return Err(invalid(format!(
                "{}: not a file name for a WARC file",
                path.display()
            )));
        }
        let first = new_file(path, software, 0)?;
        Ok(WarcWriter {
            base: path.to_path_buf(),
            max_size,
            software: software.to_string(),
            state: Mutex::new(State {
                paths: vec![first.path.clone()],
                file: first,
                exchanges: 0,
            }),
        })
    }

    /// Records one exchange: a `request` record and a `response` record. Callable from
    /// many threads; records are built (digests, compression) outside the lock and
    /// written whole, so exchanges never interleave.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the exchange cannot be written as HTTP/1 message syntax (a
    /// status outside 100..=999, a method that is not a token, a header name that is
    /// not a token, a control character in a header value, the version or the reason);
    /// otherwise the file system's error, naming the path. After an error the file
    /// still ends with a whole record and later exchanges can be written.
    pub fn write_exchange(&self, ex: &Exchange<'_>) -> io::Result<()> {
        let records = Records::new(ex)?;
        let warcinfo_id = self.lock().file.warcinfo_id.clone();
        let mut bytes = records.encode(&warcinfo_id)?;
        let mut state = self.lock();
        if self.max_size.is_some_and(|max| state.file.size >= max) && state.exchanges > 0 {
            state.file.sync()?;
            let next = new_file(&self.base, &self.software, state.file.index + 1)?;
            state.paths.push(next.path.clone());
            state.file = next;
            state.exchanges = 0;
        }
        if state.file.warcinfo_id != warcinfo_id {
            // Another thread rotated while this exchange was being built.
            bytes = records.encode(&state.file.warcinfo_id)?;
        }
        state.file.append(&bytes)?;
        state.exchanges += 1;
        Ok(())
    }

    /// The files written so far, in order (the last is being written).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.lock().paths.clone()
    }

    /// Syncs the file being written to disk and returns every file written, in order.
    ///
    /// # Errors
    ///
    /// The file system's error, naming the path.
    pub fn finish(self) -> io::Result<Vec<PathBuf>> {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        state.file.sync()?;
        Ok(state.paths)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Creates the first free file of `base`'s sequence from `index` on and writes its
/// `warcinfo` record.
fn new_file(base: &Path, software: &str, mut index: u64) -> io::Result<WarcFile> {
    let (file, path) = loop {
        let path = rotated_path(base, index);
        match OpenOptions::new().append(true).create_new(true).open(&path) {
            Ok(file) => break (file, path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => index += 1,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    };
    let warcinfo_id = record_id();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().replace(['\r', '\n'], " "))
        .unwrap_or_default();
    let fields = format!(
        "software: {software}\r\nformat: WARC File Format 1.1\r\nconformsTo: \
         https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n",
    );
    let mut head = RecordHead::new("warcinfo", &warcinfo_id, &warc_date(SystemTime::now()));
    head.field("WARC-Filename", &name);
    head.field("Content-Type", "application/warc-fields");
    head.field("WARC-Block-Digest", &sha256(&[fields.as_bytes()]));
    let bytes = head.gzip(&[fields.as_bytes()])?;
    let mut warc = WarcFile {
        file,
        path,
        index,
        size: 0,
        warcinfo_id,
    };
    warc.append(&bytes)?;
    Ok(warc)
}

impl WarcFile {
    /// Appends whole records; on failure cuts the file back to its last whole record.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Err(e) = self.file.write_all(bytes).and_then(|()| self.file.flush()) {
            let _ = self.file.set_len(self.size);
            return Err(io::Error::new(
                e.kind(),
                format!("{}: {e}", self.path.display()),
            ));
        }
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Syncs it to disk.
    fn sync(&self) -> io::Result<()> {
        self.file
            .sync_all()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))
    }
}

/// The `index`th file of `base`'s rotation sequence (0 is `base` itself).
fn rotated_path(base: &Path, index: u64) -> PathBuf {
    if index == 0 {
        return base.to_path_buf();
    }
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    let split = [".warc.gz", ".warc", ".gz"]
        .iter()
        .find(|suffix| lower.ends_with(*suffix) && lower.len() > suffix.len())
        .map_or(name.len(), |suffix| name.len() - suffix.len());
    let (stem, suffix) = name.split_at(split);
    base.with_file_name(format!("{stem}-{index:05}{suffix}"))
}

/// The two records of one exchange, checked and digested, waiting for their file's
/// `warcinfo` id.
struct Records<'a> {
    ex: &'a Exchange<'a>,
    date: String,
    request_id: String,
    response_id: String,
    request_head: Vec<u8>,
    response_head: Vec<u8>,
    request_digest: String,
    response_digest: String,
    payload_digest: String,
}

impl<'a> Records<'a> {
    fn new(ex: &'a Exchange<'a>) -> io::Result<Records<'a>> {
        if !(100..=999).contains(&ex.status) {
            return Err(invalid(format!(
                "HTTP status {} is not 100..=999",
                ex.status
            )));
        }
        if !is_token(ex.method) {
            return Err(invalid(format!(
                "HTTP method {:?} is not a token",
                ex.method
            )));
        }
        if ex.version.is_empty() || !ex.version.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(format!(
                "HTTP version {:?} is malformed",
                ex.version
            )));
        }
        if ex.reason.chars().any(char::is_control) {
            return Err(invalid(format!(
                "HTTP reason {:?} has control characters",
                ex.reason
            )));
        }
        let mut request_head = Vec::new();
        let target = &ex.url[Position::BeforePath..Position::AfterQuery];
        let target = if target.is_empty() { "/" } else { target };
        write_line(
            &mut request_head,
            &format!("{} {target} {}", ex.method, ex.version),
        );
        if !ex
            .request_headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            let host = &ex.url[Position::BeforeHost..Position::AfterPort];
            write_header(&mut request_head, "Host", host.as_bytes())?;
        }
        for (name, value) in &ex.request_headers {
            write_header(&mut request_head, name, value)?;
        }
        request_head.extend_from_slice(b"\r\n");

        let mut response_head = Vec::new();
        let status_line = format!("{} {} {}", ex.version, ex.status, ex.reason);
        write_line(&mut response_head, status_line.trim_end());
        for (name, value) in &ex.response_headers {
            if name.eq_ignore_ascii_case("transfer-encoding") {
                write_header(&mut response_head, &format!("X-Archive-Orig-{name}"), value)?;
            } else {
                write_header(&mut response_head, name, value)?;
            }
        }
        response_head.extend_from_slice(b"\r\n");

        Ok(Records {
            ex,
            date: warc_date(ex.fetched_at),
            request_id: record_id(),
            response_id: record_id(),
            request_digest: sha256(&[&request_head]),
            response_digest: sha256(&[&response_head, ex.body]),
            payload_digest: sha256(&[ex.body]),
            request_head,
            response_head,
        })
    }

    /// Both records, gzipped, naming `warcinfo_id`.
    fn encode(&self, warcinfo_id: &str) -> io::Result<Vec<u8>> {
        let ex = self.ex;
        let ip = ex.ip.map(|ip| ip.to_string());

        let mut head = RecordHead::new("request", &self.request_id, &self.date);
        head.field("WARC-Target-URI", ex.url.as_str());
        head.field("WARC-Concurrent-To", &self.response_id);
        if let Some(ip) = &ip {
            head.field("WARC-IP-Address", ip);
        }
        head.field("WARC-Warcinfo-ID", warcinfo_id);
        head.field("Content-Type", "application/http; msgtype=request");
        head.field("WARC-Block-Digest", &self.request_digest);
        let mut bytes = head.gzip(&[&self.request_head])?;

        let mut head = RecordHead::new("response", &self.response_id, &self.date);
        head.field("WARC-Target-URI", ex.url.as_str());
        head.field("WARC-Concurrent-To", &self.request_id);
        if let Some(ip) = &ip {
            head.field("WARC-IP-Address", ip);
        }
        head.field("WARC-Warcinfo-ID", warcinfo_id);
        if ex.truncated {
            head.field("WARC-Truncated", "length");
        }
        head.field("Content-Type", "application/http; msgtype=response");
        head.field("WARC-Block-Digest", &self.response_digest);
        head.field("WARC-Payload-Digest", &self.payload_digest);
        bytes.extend(head.gzip(&[&self.response_head, ex.body])?);
        Ok(bytes)
    }
}

/// A record's WARC header, built field by field.
struct RecordHead(String);

impl RecordHead {
    fn new(kind: &str, id: &str, date: &str) -> RecordHead {
        let mut head = RecordHead(String::from("WARC/1.1\r\n"));
        head.field("WARC-Type", kind);
        head.field("WARC-Record-ID", id);
        head.field("WARC-Date", date);
        head
    }

    /// Adds a field; callers pass values without CR or LF.
    fn field(&mut self, name: &str, value: &str) {
        let _ = write!(self.0, "{name}: {value}\r\n");
    }

    /// The whole record (this header, `Content-Length`, the block made of `block`'s
    /// parts, the two CRLFs that end a record) as one gzip member.
    fn gzip(mut self, block: &[&[u8]]) -> io::Result<Vec<u8>> {
        let len: usize = block.iter().map(|part| part.len()).sum();
        self.field("Content-Length", &len.to_string());
        self.0.push_str("\r\n");
        let mut gz = GzEncoder::new(Vec::with_capacity(len / 2 + 512), Compression::default());
        gz.write_all(self.0.as_bytes())?;
        for part in block {
            gz.write_all(part)?;
        }
        gz.write_all(b"\r\n\r\n")?;
        gz.finish()
    }
}

/// A new record id, `<urn:uuid:...>` (random, version 4).
fn record_id() -> String {
    format!("<urn:uuid:{}>", Uuid::new_v4())
}

/// `t` as a WARC-Date: UTC, W3C ISO 8601 to the second, e.g. `2026-11-29T20:53:01Z`.
fn warc_date(t: SystemTime) -> String {
    // `rfc3339` gives `YYYY-MM-DDTHH:MM:SS.mmmZ`; keep whole seconds, which every WARC
    // reader takes (WARC/1.0 allows no fraction).
    let full = super::output::rfc3339(t);
    format!("{}Z", full.get(..19).unwrap_or(&full))
}

/// `sha256:` and the lowercase hex SHA-256 of `parts` joined: the form warcio,
/// Browsertrix and pywb write for SHA-256 (warcio also checks it: it accepts base16
/// and base32 of any hashlib algorithm).
fn sha256(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    let mut out = String::from("sha256:");
    for byte in hasher.finalize().iter() {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Whether `s` is an HTTP token (RFC 9110 section 5.6.2).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn write_line(out: &mut Vec<u8>, line: &str) {
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn write_header(out: &mut Vec<u8>, name: &str, value: &[u8]) -> io::Result<()> {
    if !is_token(name) {
        return Err(invalid(format!("HTTP header name {name:?} is not a token")));
    }
    // Obsolete line folding and bare CR/LF/NUL would end the header early.
    if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(invalid(format!(
            "HTTP header {name} has CR, LF or NUL in its value"
        )));
    }
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::MultiGzDecoder;
    use std::io::Read;

    fn gunzip(path: &Path) -> String {
        let mut text = Vec::new();
        MultiGzDecoder::new(File::open(path).unwrap())
            .read_to_end(&mut text)
            .unwrap();
        String::from_utf8_lossy(&text).into_owned()
    }

    #[test]
    fn rotation_names() {
        let p = |s: &str, i| rotated_path(Path::new(s), i).to_string_lossy().into_owned();
        assert_eq!(p("/x/crawl.warc.gz", 0), "/x/crawl.warc.gz");
        assert_eq!(p("/x/crawl.warc.gz", 1), "/x/crawl-00001.warc.gz");
        assert_eq!(p("/x/crawl.WARC.GZ", 2), "/x/crawl-00002.WARC.GZ");
        assert_eq!(p("crawl.warc", 3), "crawl-00003.warc");
        assert_eq!(p("crawl.gz", 4), "crawl-00004.gz");
        assert_eq!(p("crawl", 123_456), "crawl-123456");
        assert_eq!(p(".warc.gz", 1), ".warc-00001.gz");
    }

    #[test]
    fn records_and_gzip_members() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.warc.gz");
        let writer = WarcWriter::open(&path, None, "frontier/test").unwrap();
        let url = Url::parse("http://a.test:8080/p?q=1").unwrap();
        let mut ex = Exchange::new(&url, 200, b"hello");
        ex.response_headers = vec![
            ("Content-Type".into(), b"text/plain".to_vec()),
            ("Transfer-Encoding".into(), b"chunked".to_vec()),
        ];
        ex.ip = Some("127.0.0.1".parse().unwrap());
        writer.write_exchange(&ex).unwrap();
        assert_eq!(writer.finish().unwrap(), vec![path.clone()]);

        let raw = std::fs::read(&path).unwrap();
        // Three gzip members: warcinfo, request, response.
        let mut members = 0;
        let mut rest = &raw[..];
        while !rest.is_empty() {
            let mut decoder = flate2::bufread::GzDecoder::new(rest);
            io::copy(&mut decoder, &mut io::sink()).unwrap();
            rest = decoder.into_inner();
            members += 1;
        }
        assert_eq!(members, 3);

        let text = gunzip(&path);
        assert!(
            text.starts_with("WARC/1.1\r\nWARC-Type: warcinfo\r\n"),
            "{text}"
        );
        assert!(text.contains("GET /p?q=1 HTTP/1.1\r\nHost: a.test:8080\r\n\r\n"));
        assert!(text.contains("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"));
        assert!(text.contains("X-Archive-Orig-Transfer-Encoding: chunked\r\n\r\nhello\r\n\r\n"));
        assert!(text.contains("WARC-IP-Address: 127.0.0.1\r\n"));
        assert_eq!(text.matches("WARC-Concurrent-To: <urn:uuid:").count(), 2);
        assert_eq!(text.matches("WARC-Warcinfo-ID: <urn:uuid:").count(), 2);
        // sha256("hello")
        assert!(text.contains(
            "WARC-Payload-Digest: \
             sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\r\n"
        ));
    }

    #[test]
    fn never_overwrites_and_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.warc.gz");
        std::fs::write(&path, b"keep").unwrap();
        let writer = WarcWriter::open(&path, Some(1), "t").unwrap();
        let url = Url::parse("http://a.test/").unwrap();
        for _ in 0..3 {
            writer
                .write_exchange(&Exchange::new(&url, 200, b"x"))
                .unwrap();
        }
        let paths = writer.finish().unwrap();
        let names: Vec<_> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["c-00001.warc.gz", "c-00002.warc.gz", "c-00003.warc.gz"]
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
        for p in &paths {
            let text = gunzip(p);
            assert_eq!(text.matches("WARC-Type: warcinfo").count(), 1);
            assert_eq!(text.matches("WARC-Type: response").count(), 1);
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.warc.gz");
        assert!(WarcWriter::open(&path, Some(0), "t").is_err());
        assert!(WarcWriter::open(&path, None, "a\r\nb").is_err());
        let writer = WarcWriter::open(&path, None, "t").unwrap();
        let url = Url::parse("http://a.test/").unwrap();
        let mut ex = Exchange::new(&url, 200, b"");
        ex.response_headers = vec![("X-Bad".into(), b"a\r\nInjected: 1".to_vec())];
        let err = writer.write_exchange(&ex).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("X-Bad"), "{err}");
        let mut ex = Exchange::new(&url, 200, b"");
        ex.request_headers = vec![("Bad Name".into(), b"v".to_vec())];
        assert!(writer.write_exchange(&ex).is_err());
        let mut ex = Exchange::new(&url, 42, b"");
        assert!(writer.write_exchange(&ex).is_err());
        ex.status = 200;
        ex.method = "GE T";
        assert!(writer.write_exchange(&ex).is_err());
        ex.method = "GET";
        ex.reason = "O\nK";
        assert!(writer.write_exchange(&ex).is_err());
        // Nothing half-written: the file holds only its warcinfo record.
        let text = gunzip(&path);
        assert_eq!(text.matches("WARC/1.1\r\n").count(), 1);
        ex.reason = "OK";
        writer.write_exchange(&ex).unwrap();
    }

    #[test]
    fn dates_are_whole_seconds_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(951_782_400_123);
        assert_eq!(warc_date(t), "2000-02-29T00:00:00Z");
    }
}
