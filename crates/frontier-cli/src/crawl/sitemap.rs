//! Sitemaps (<https://www.sitemaps.org/protocol.html>): the page URLs of a `<urlset>`,
//! the child sitemaps of a `<sitemapindex>`, or the lines of a plain-text sitemap,
//! gzipped or not.
//!
//! # Limits
//!
//! The protocol allows 50,000 URLs and 50 MiB (52,428,800 bytes, uncompressed) per
//! sitemap. A body (or a gzip body's decompressed content) larger than the byte limit is
//! an error, [`SitemapError::TooLarge`], and decompression stops there, so a gzip bomb
//! costs at most that much memory. URLs beyond the URL limit are left out and the result
//! says so ([`Sitemap::truncated`]): the first 50,000 are still worth crawling.
//!
//! XML is read with `quick-xml`, which expands only the five predefined entities and
//! character references: a `<!DOCTYPE>` cannot define entities, so there is no entity
//! expansion attack.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;

use flate2::read::MultiGzDecoder;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;
use quick_xml::reader::Reader;
use url::Url;

/// What a sitemap lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SitemapKind {
    /// Pages: `<urlset><url><loc>`, or a plain-text sitemap.
    Pages,
    /// Other sitemaps: `<sitemapindex><sitemap><loc>`.
    Index,
}

/// A parsed sitemap.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sitemap {
    /// Whether [`urls`](Self::urls) are pages or child sitemaps.
    pub kind: SitemapKind,
    /// The absolute `http(s)` URLs listed, in order, at most [`Limits::max_urls`].
    /// Duplicates are kept (the frontier deduplicates).
    pub urls: Vec<Url>,
    /// Entries skipped because they are not absolute `http(s)` URLs (relative URLs,
    /// other schemes, text that does not parse, an undefined entity).
    pub invalid: usize,
    /// Whether the sitemap listed more than [`Limits::max_urls`] URLs; the rest are not
    /// in [`urls`](Self::urls).
    pub truncated: bool,
}

/// Size limits of one sitemap; [`Limits::default`] is the protocol's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// URLs kept (default 50,000).
    pub max_urls: usize,
    /// Bytes of the uncompressed sitemap (default 50 MiB).
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_urls: 50_000,
            max_bytes: 50 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// Limits of `max_urls` URLs and `max_bytes` bytes.
    pub fn new(max_urls: usize, max_bytes: u64) -> Limits {
        Limits {
            max_urls,
            max_bytes,
        }
    }
}

/// Why a sitemap could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum SitemapError {
    /// The body starts like gzip (`1f 8b`) but does not decompress.
    Gzip(std::io::Error),
    /// The sitemap (uncompressed) is larger than the limit.
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The XML is not well-formed.
    Xml {
        /// Byte offset in the (uncompressed) sitemap.
        position: u64,
        /// What is wrong.
        message: String,
    },
    /// Well-formed XML whose root element is neither `urlset` nor `sitemapindex` (an
    /// HTML error page, a feed).
    NotASitemap {
        /// The root element's name.
        root: String,
    },
}

impl fmt::Display for SitemapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SitemapError::Gzip(e) => write!(f, "sitemap is not valid gzip: {e}"),
            SitemapError::TooLarge { limit } => {
                write!(f, "sitemap is larger than {limit} bytes uncompressed")
            }
            SitemapError::Xml { position, message } => {
                write!(f, "sitemap XML is malformed at byte {position}: {message}")
            }
            SitemapError::NotASitemap { root } => write!(
                f,
                "not a sitemap: the root element is <{root}>, not <urlset> or <sitemapindex>"
            ),
        }
    }
}

impl std::error::Error for SitemapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SitemapError::Gzip(e) => Some(e),
            _ => None,
        }
    }
}

/// Parses a sitemap's `body`, with the protocol's [`Limits`].
///
/// The format is told from the bytes alone, so no URL or Content-Type hint is taken:
/// servers label sitemaps `text/xml`, `application/xml`, `text/plain`,
/// `application/octet-stream`, `application/x-gzip`, ... A body starting with the gzip
/// magic bytes `1f 8b` is decompressed first; a `.gz` sitemap whose body does not start
/// with them was sent with `Content-Encoding: gzip` and already decompressed by the HTTP
/// client, so it is read as is. Then, after an optional byte order mark and whitespace,
/// `<` means XML and anything else a plain-text sitemap, one URL per line (UTF-8; a
/// line that is not an absolute `http(s)` URL is counted in [`Sitemap::invalid`]). An
/// empty body is an empty list of pages.
///
/// URLs are taken as written (entities decoded, surrounding whitespace trimmed); the
/// caller decides which hosts to follow (the protocol's rule that a sitemap lists only
/// URLs under its own location is not applied: robots.txt may point anywhere).
///
/// # Errors
///
/// See [`SitemapError`]; a sitemap cut short by the byte limit is an error, not a
/// partial list.
pub fn parse_sitemap(body: &[u8]) -> Result<Sitemap, SitemapError> {
    parse_sitemap_with(body, Limits::default())
}

/// [`parse_sitemap`] with other [`Limits`].
///
/// # Errors
///
/// See [`SitemapError`].
pub fn parse_sitemap_with(body: &[u8], limits: Limits) -> Result<Sitemap, SitemapError> {
    let content: Cow<'_, [u8]> = if body.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        MultiGzDecoder::new(body)
            .take(limits.max_bytes.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(SitemapError::Gzip)?;
        Cow::Owned(out)
    } else {
        Cow::Borrowed(body)
    };
    if content.len() as u64 > limits.max_bytes {
        return Err(SitemapError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    let content = content.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&content);
    let start = content
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(content.len());
    let mut out = Collector {
        kind: SitemapKind::Pages,
        urls: Vec::new(),
        invalid: 0,
        truncated: false,
        max_urls: limits.max_urls,
    };
    if content.get(start) == Some(&b'<') {
        parse_xml(content, &mut out)?;
    } else {
        for line in content.split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            let line = line.trim();
            if !line.is_empty() && !out.add(line) {
                break;
            }
        }
    }
    Ok(Sitemap {
        kind: out.kind,
        urls: out.urls,
        invalid: out.invalid,
        truncated: out.truncated,
    })
}

/// URLs being gathered.
struct Collector {
    kind: SitemapKind,
    urls: Vec<Url>,
    invalid: usize,
    truncated: bool,
    max_urls: usize,
}

impl Collector {
    /// Adds one entry; false when the URL limit is passed (stop reading).
    fn add(&mut self, loc: &str) -> bool {
        match Url::parse(loc) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
                if self.urls.len() == self.max_urls {
                    self.truncated = true;
                    return false;
                }
                self.urls.push(url);
            }
            _ => self.invalid += 1,
        }
        true
    }
}

/// Where the reader is in the document, by element local names.
fn parse_xml(content: &[u8], out: &mut Collector) -> Result<(), SitemapError> {
    let mut reader = Reader::from_reader(content);
    let mut path: Vec<String> = Vec::new();
    // The text of the `<loc>` being read; `None` when its content is unusable.
    let mut loc: Option<Option<String>> = None;
    let mut root_seen = false;
    loop {
        let event = reader.read_event().map_err(|e| SitemapError::Xml {
            position: reader.error_position(),
            message: e.to_string(),
        })?;
        match event {
            Event::Start(e) if !root_seen => {
                root_seen = true;
                out.kind = root_kind(e.local_name().as_ref())?;
                path.push(e.local_name().as_ref().to_string());
            }
            Event::Empty(e) if !root_seen => {
                // `<urlset/>`: an empty list.
                root_seen = true;
                out.kind = root_kind(e.local_name().as_ref())?;
            }
            Event::Start(e) => {
                path.push(e.local_name().as_ref().to_string());
                if is_loc(&path, out.kind) {
                    loc = Some(Some(String::new()));
                }
            }
            Event::Empty(e) => {
                path.push(e.local_name().as_ref().to_string());
                if is_loc(&path, out.kind) {
                    out.invalid += 1;
                }
                path.pop();
            }
            Event::End(_) => {
                if is_loc(&path, out.kind)
                    && let Some(text) = loc.take()
                {
                    match text {
                        Some(text) if !text.trim().is_empty() => {
                            if !out.add(text.trim()) {
                                return Ok(());
                            }
                        }
                        _ => out.invalid += 1,
                    }
                }
                path.pop();
            }
            Event::Text(t) => {
                if let Some(Some(text)) = &mut loc {
                    text.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some(Some(text)) = &mut loc {
                    text.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                if let Some(slot) = &mut loc {
                    let resolved = match r.resolve_char_ref() {
                        Ok(Some(c)) => Some(c.to_string()),
                        Ok(None) => resolve_predefined_entity(&r).map(str::to_string),
                        Err(_) => None,
                    };
                    match (slot.as_mut(), resolved) {
                        (Some(text), Some(s)) => text.push_str(&s),
                        _ => *slot = None,
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !root_seen {
        return Err(SitemapError::Xml {
            position: reader.buffer_position(),
            message: "no root element".into(),
        });
    }
    if !path.is_empty() {
        return Err(SitemapError::Xml {
            position: reader.buffer_position(),
            message: format!(
                "unexpected end of document inside <{}>",
                path.last().map_or("", String::as_str)
            ),
        });
    }
    Ok(())
}

/// The kind of sitemap whose root element is named `local`.
fn root_kind(local: &str) -> Result<SitemapKind, SitemapError> {
    match local {
        "urlset" => Ok(SitemapKind::Pages),
        "sitemapindex" => Ok(SitemapKind::Index),
        other => Err(SitemapError::NotASitemap {
            root: other.to_string(),
        }),
    }
}

/// Whether `path` is a `<loc>` of an entry: `urlset/url/loc` or
/// `sitemapindex/sitemap/loc` (not, say, `urlset/url/image/loc`).
fn is_loc(path: &[String], kind: SitemapKind) -> bool {
    let entry = match kind {
        SitemapKind::Pages => "url",
        SitemapKind::Index => "sitemap",
    };
    path.len() == 3 && path[1] == entry && path[2] == "loc"
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn strings(map: &Sitemap) -> Vec<&str> {
        map.urls.iter().map(Url::as_str).collect()
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    const URLSET: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- a comment -->
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
  <url>
    <loc>
      https://a.test/page?x=1&amp;y=2
    </loc>
    <lastmod>2026-01-01</lastmod>
    <image:image><image:loc>https://a.test/photo.jpg</image:loc></image:image>
  </url>
  <url><loc><![CDATA[https://a.test/cdata?a=1&b=2]]></loc></url>
  <url><loc>https://a.test/caf&#233;/&#x41;</loc></url>
  <url><loc>/relative</loc></url>
  <url><loc>ftp://a.test/file</loc></url>
  <url><loc>https://a.test/&nbsp;</loc></url>
  <url><loc/></url>
  <url><loc>http://b.test/</loc></url>
</urlset>
"#;

    #[test]
    fn urlset() {
        let map = parse_sitemap(URLSET.as_bytes()).unwrap();
        assert_eq!(map.kind, SitemapKind::Pages);
        assert_eq!(
            strings(&map),
            [
                "https://a.test/page?x=1&y=2",
                "https://a.test/cdata?a=1&b=2",
                "https://a.test/caf%C3%A9/A",
                "http://b.test/",
            ]
        );
        // relative, ftp, an undefined entity, an empty loc
        assert_eq!(map.invalid, 4);
        assert!(!map.truncated);
    }

    #[test]
    fn prefixed_namespace_and_empty_root() {
        let xml = br#"<sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9">
            <sm:url><sm:loc>http://a.test/x</sm:loc></sm:url></sm:urlset>"#;
        let map = parse_sitemap(xml).unwrap();
        assert_eq!(strings(&map), ["http://a.test/x"]);
        let map = parse_sitemap(b"<urlset/>").unwrap();
        assert!(map.urls.is_empty());
    }

    #[test]
    fn sitemap_index() {
        let xml = br#"<?xml version="1.0"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>https://a.test/s1.xml.gz</loc><lastmod>2026-01-01</lastmod></sitemap>
  <sitemap><loc>https://a.test/s2.xml</loc></sitemap>
</sitemapindex>"#;
        let map = parse_sitemap(xml).unwrap();
        assert_eq!(map.kind, SitemapKind::Index);
        assert_eq!(
            strings(&map),
            ["https://a.test/s1.xml.gz", "https://a.test/s2.xml"]
        );
    }

    #[test]
    fn gzipped_and_already_decompressed() {
        let gz = gzip(URLSET.as_bytes());
        let map = parse_sitemap(&gz).unwrap();
        assert_eq!(map.urls.len(), 4);
        // Served with Content-Encoding: gzip and decompressed by the client.
        let map = parse_sitemap(URLSET.as_bytes()).unwrap();
        assert_eq!(map.urls.len(), 4);
        // Gzip magic without a gzip stream behind it.
        let err = parse_sitemap(&[0x1f, 0x8b, 0, 1, 2]).unwrap_err();
        assert!(matches!(err, SitemapError::Gzip(_)), "{err}");
        assert!(err.to_string().contains("not valid gzip"), "{err}");
    }

    #[test]
    fn plain_text() {
        let text =
            "\u{feff}https://a.test/1\r\n\r\n  https://a.test/2  \nnot a url\nhttps://a.test/3";
        let map = parse_sitemap(text.as_bytes()).unwrap();
        assert_eq!(map.kind, SitemapKind::Pages);
        assert_eq!(
            strings(&map),
            ["https://a.test/1", "https://a.test/2", "https://a.test/3"]
        );
        assert_eq!(map.invalid, 1);
        let map = parse_sitemap(b"").unwrap();
        assert!(map.urls.is_empty());
    }

    #[test]
    fn malformed_xml_is_a_clear_error() {
        let err = parse_sitemap(b"<urlset><url><loc>http://a.test/</url></urlset>").unwrap_err();
        let SitemapError::Xml { position, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(*position > 0);
        assert!(
            err.to_string()
                .starts_with("sitemap XML is malformed at byte"),
            "{err}"
        );

        let err = parse_sitemap(b"<urlset><url><loc>http://a.test/</loc>").unwrap_err();
        assert!(matches!(err, SitemapError::Xml { .. }), "{err}");
        assert!(err.to_string().contains("<url>"), "{err}");

        let err = parse_sitemap(b"<!doctype html><html><body>Not found</body></html>").unwrap_err();
        assert!(
            matches!(&err, SitemapError::NotASitemap { root } if root == "html"),
            "{err:?}"
        );
        assert!(err.to_string().contains("<html>"), "{err}");

        let err = parse_sitemap(b"<?xml version=\"1.0\"?>").unwrap_err();
        assert!(matches!(err, SitemapError::Xml { .. }), "{err}");
    }

    #[test]
    fn limits() {
        let map = parse_sitemap_with(URLSET.as_bytes(), Limits::new(2, 1 << 20)).unwrap();
        assert_eq!(map.urls.len(), 2);
        assert!(map.truncated);
        let text = "https://a.test/1\nhttps://a.test/2\nhttps://a.test/3\n";
        let map = parse_sitemap_with(text.as_bytes(), Limits::new(3, 1 << 20)).unwrap();
        assert_eq!(map.urls.len(), 3);
        assert!(!map.truncated, "exactly at the limit");

        let err = parse_sitemap_with(text.as_bytes(), Limits::new(10, 20)).unwrap_err();
        assert!(matches!(err, SitemapError::TooLarge { limit: 20 }), "{err}");
        // A gzip bomb stops at the limit.
        let bomb = gzip(&vec![b' '; 4 << 20]);
        assert!(bomb.len() < 10_000);
        let err = parse_sitemap_with(&bomb, Limits::new(10, 1 << 20)).unwrap_err();
        assert!(matches!(err, SitemapError::TooLarge { .. }), "{err}");
        assert_eq!(Limits::default(), Limits::new(50_000, 52_428_800));
    }

    #[test]
    fn any_prefix_or_corruption_is_an_answer_not_a_panic() {
        let gz = gzip(URLSET.as_bytes());
        for doc in [URLSET.as_bytes(), &gz[..]] {
            for end in 0..doc.len() {
                let _ = parse_sitemap(&doc[..end]);
                let mut bad = doc.to_vec();
                bad[end] ^= 0x80;
                let _ = parse_sitemap(&bad);
            }
        }
        // Invalid UTF-8 inside a <loc>.
        let err = parse_sitemap(b"<urlset><url><loc>http://a.test/\xff</loc></url></urlset>");
        assert!(err.is_err() || err.unwrap().invalid == 1);
    }
}
