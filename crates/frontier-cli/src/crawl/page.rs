//! An HTML page as the crawler reads it: its text in the right character encoding, its
//! links, and what it (or its response headers) says about following and indexing it.
//!
//! - [`sniff_encoding`] / [`decode_html`]: the encoding from a byte order mark, the
//!   `Content-Type` header's `charset`, a `<meta>` in the first 1024 bytes, else UTF-8
//!   (invalid bytes replaced), decoded with `encoding_rs`.
//! - [`extract`]: `<a href>` and `<area href>` links resolved against `<base href>` or the
//!   page the way browsers do, with `rel="nofollow"`, `<meta name="robots">` and
//!   `X-Robots-Tag` honoured. It supersedes `links::extract_links`.
//!
//! # Non-ASCII links
//!
//! Links are resolved with the `url` crate as browsers resolve them (WHATWG URL): the
//! path (and host, by IDNA) of a link such as `/café` is percent-encoded as UTF-8,
//! `/caf%C3%A9`, whatever the page's encoding; the query is percent-encoded in the page's
//! encoding (`?q=café` in a windows-1252 page is `?q=caf%E9`, in a UTF-8 page
//! `?q=caf%C3%A9`), characters that encoding cannot represent as `&#NNNN;` first. So a
//! page must be decoded with its real encoding ([`decode_html`]) and [`extract`] given
//! that encoding: decoded as UTF-8, a Latin-1 `é` becomes U+FFFD and the link
//! `/caf%EF%BF%BD`.

use std::borrow::Cow;
use std::collections::HashSet;

use encoding_rs::{Encoding, UTF_8, UTF_16BE, UTF_16LE, WINDOWS_1252, X_USER_DEFINED};
use scraper::{Html, Selector};
use url::Url;

/// How many bytes of a page are searched for a `<meta>` charset (the HTML standard's
/// prescan stops there too).
const META_PRESCAN: usize = 1024;

/// File extensions a crawler of pages skips (a short version of Scrapy's
/// `IGNORED_EXTENSIONS`; the same list as `links.rs`).
const SKIPPED_EXTENSIONS: &[&str] = &[
    "7z", "avi", "bmp", "css", "csv", "doc", "docx", "exe", "gif", "gz", "ico", "jpeg", "jpg",
    "js", "mov", "mp3", "mp4", "mpeg", "pdf", "png", "ppt", "pptx", "rar", "svg", "tar", "tgz",
    "tif", "tiff", "wav", "webm", "webp", "woff", "woff2", "xls", "xlsx", "zip",
];

/// Robots directives with a value after a colon (`max-snippet: 20`), which are not a user
/// agent prefix in `X-Robots-Tag`.
const VALUED_DIRECTIVES: &[&str] = &[
    "max-snippet",
    "max-image-preview",
    "max-video-preview",
    "unavailable_after",
];

/// The character encoding of an HTML page, by the HTML standard's order: a byte order
/// mark (UTF-8, UTF-16LE, UTF-16BE), then the `charset` parameter of `content_type`,
/// then a `<meta charset>` or `<meta http-equiv="Content-Type" content="...;
/// charset=...">` in the first 1024 bytes, else UTF-8. Labels are the WHATWG Encoding
/// Standard's (`latin1` and `iso-8859-1` are windows-1252, `shift_jis` is Shift_JIS,
/// ...); an unknown label is skipped.
///
/// The byte order mark comes first, before the header, because that is what browsers do
/// and what `encoding_rs` decoding does in any case: a BOM is unambiguous, a header is
/// often a server default.
pub fn sniff_encoding(body: &[u8], content_type: Option<&str>) -> &'static Encoding {
    if let Some((encoding, _)) = Encoding::for_bom(body) {
        return encoding;
    }
    if let Some(encoding) = content_type.and_then(charset_param) {
        return encoding;
    }
    prescan(&body[..body.len().min(META_PRESCAN)]).unwrap_or(UTF_8)
}

/// `body` as text in its encoding ([`sniff_encoding`]), the byte order mark removed,
/// malformed sequences replaced by U+FFFD.
pub fn decode_html(body: &[u8], content_type: Option<&str>) -> String {
    let (text, _, _) = sniff_encoding(body, content_type).decode(body);
    text.into_owned()
}

/// A page's links and robots directives, from [`extract`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageLinks {
    /// The links to follow: absolute `http(s)` URLs of `<a href>` and `<area href>`
    /// without `rel="nofollow"`, fragments removed, in page order, each once; links to
    /// files of a skipped extension (images, archives, ...) are left out. Filled even
    /// when [`nofollow`](Self::nofollow) is set: dropping them then is the caller's
    /// choice (a crawl told to ignore robots directives keeps them).
    pub links: Vec<Url>,
    /// Links that appear only with `rel="nofollow"` (same form as `links`), for a crawl
    /// that ignores robots directives.
    pub rel_nofollow: Vec<Url>,
    /// The page's links should not be followed: `nofollow` or `none` in a
    /// `<meta name="robots">` (or a meta named after the user agent) or in an
    /// `X-Robots-Tag` that applies to the user agent.
    pub nofollow: bool,
    /// The page should not be indexed: `noindex` or `none`, from the same places.
    pub noindex: bool,
}

/// The links of the HTML page `html` fetched from `page` and its robots directives
/// (see [`PageLinks`]).
///
/// - Links are resolved against the first `<base href>` (itself resolved against
///   `page`) or `page`, with `encoding` (the page's, from [`sniff_encoding`]; `UTF_8`
///   when unknown) for their query strings, as browsers do (see the [module
///   docs](self)).
/// - `rel` is a set of space-separated tokens: `rel="ugc nofollow"` is nofollow.
/// - `x_robots_tag` are the response's `X-Robots-Tag` header values. A value may name a
///   user agent, `otherbot: noindex, nofollow`: its directives up to the next agent name
///   then apply only to that agent. `user_agent` is our product token (`frontier`), or
///   a whole User-Agent string whose first token is used (`frontier/0.1 (+https://...)`),
///   compared without regard to case; it also selects `<meta name="frontier">`.
///
/// For a response that is not HTML, pass `""` as `html` to read only the headers.
pub fn extract(
    page: &Url,
    html: &str,
    encoding: &'static Encoding,
    x_robots_tag: &[&str],
    user_agent: &str,
) -> PageLinks {
    let agent = agent_token(user_agent);
    let mut directives = Directives::default();
    for value in x_robots_tag {
        directives.x_robots_tag(value, agent);
    }

    let document = Html::parse_document(html);
    let meta = Selector::parse("meta[name][content]").expect("a valid selector");
    for element in document.select(&meta) {
        let name = element.value().attr("name").unwrap_or("").trim();
        if name.eq_ignore_ascii_case("robots")
            || (!agent.is_empty() && name.eq_ignore_ascii_case(agent))
        {
            let content = element.value().attr("content").unwrap_or("");
            for token in content.split(|c: char| c == ',' || c.is_ascii_whitespace()) {
                directives.apply(token);
            }
        }
    }

    let encode: &dyn Fn(&str) -> Cow<'_, [u8]> = &|s| encoding.encode(s).0;
    let join = |base: &Url, href: &str| {
        let options = Url::options().base_url(Some(base));
        let options = if encoding == UTF_8 {
            options
        } else {
            options.encoding_override(Some(encode))
        };
        options.parse(href.trim()).ok()
    };
    let base_selector = Selector::parse("base[href]").expect("a valid selector");
    let base = document
        .select(&base_selector)
        .next()
        .and_then(|b| b.value().attr("href"))
        .and_then(|href| join(page, href))
        .unwrap_or_else(|| page.clone());

    let link_selector = Selector::parse("a[href], area[href]").expect("a valid selector");
    let mut found: Vec<(Url, bool)> = Vec::new();
    for element in document.select(&link_selector) {
        let Some(mut url) = element.value().attr("href").and_then(|h| join(&base, h)) else {
            continue;
        };
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            continue;
        }
        url.set_fragment(None);
        if skipped_extension(&url) {
            continue;
        }
        let nofollow = element.value().attr("rel").is_some_and(|rel| {
            rel.split_ascii_whitespace()
                .any(|token| token.eq_ignore_ascii_case("nofollow"))
        });
        found.push((url, nofollow));
    }

    let followed: HashSet<&str> = found
        .iter()
        .filter(|(_, nofollow)| !nofollow)
        .map(|(url, _)| url.as_str())
        .collect();
    let mut seen = HashSet::new();
    let mut links = Vec::new();
    let mut rel_nofollow = Vec::new();
    for (url, nofollow) in &found {
        if *nofollow && followed.contains(url.as_str()) {
            // Also linked without nofollow: listed there, where that link is.
            continue;
        }
        if seen.insert(url.as_str()) {
            if *nofollow {
                rel_nofollow.push(url.clone());
            } else {
                links.push(url.clone());
            }
        }
    }
    PageLinks {
        links,
        rel_nofollow,
        nofollow: directives.nofollow,
        noindex: directives.noindex,
    }
}

/// `nofollow` / `noindex` as gathered.
#[derive(Default)]
struct Directives {
    nofollow: bool,
    noindex: bool,
}

impl Directives {
    /// Applies one directive token (others, like `noarchive`, are ignored).
    fn apply(&mut self, token: &str) {
        let token = token.trim();
        if token.eq_ignore_ascii_case("nofollow") {
            self.nofollow = true;
        } else if token.eq_ignore_ascii_case("noindex") {
            self.noindex = true;
        } else if token.eq_ignore_ascii_case("none") {
            self.nofollow = true;
            self.noindex = true;
        }
    }

    /// Applies the directives of one `X-Robots-Tag` value that concern `agent`.
    fn x_robots_tag(&mut self, value: &str, agent: &str) {
        // Directives before any agent name apply to every agent.
        let mut ours = true;
        for part in value.split(',') {
            let part = part.trim();
            let directive = match part.split_once(':') {
                Some((head, rest)) => {
                    let head = head.trim();
                    if VALUED_DIRECTIVES
                        .iter()
                        .any(|d| head.eq_ignore_ascii_case(d))
                    {
                        continue;
                    }
                    if !is_product_token(head) {
                        // Not an agent name: say, part of a date after `unavailable_after`.
                        continue;
                    }
                    ours = head.eq_ignore_ascii_case(agent);
                    rest
                }
                None => part,
            };
            if ours {
                self.apply(directive);
            }
        }
    }
}

/// The first token of a User-Agent string: `frontier` of `frontier/0.1 (+https://x)`.
fn agent_token(user_agent: &str) -> &str {
    let user_agent = user_agent.trim();
    user_agent
        .split(['/', ' '])
        .next()
        .filter(|t| !t.is_empty())
        .unwrap_or(user_agent)
}

/// Whether `s` can be a user agent's product token (letters, digits, `-`, `_`).
fn is_product_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn skipped_extension(url: &Url) -> bool {
    let last = url.path().rsplit('/').next().unwrap_or("");
    last.rsplit_once('.')
        .is_some_and(|(_, ext)| SKIPPED_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// The encoding named by the `charset` parameter of a `Content-Type` value.
fn charset_param(content_type: &str) -> Option<&'static Encoding> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        Encoding::for_label(value.as_bytes())
    })
}

/// The HTML standard's "prescan a byte stream to determine its encoding" over `bytes`
/// (the page's first 1024): the first `<meta>` that declares a known charset, outside
/// comments and other tags' attribute values.
fn prescan(bytes: &[u8]) -> Option<&'static Encoding> {
    let mut p = 0;
    while p < bytes.len() {
        let rest = &bytes[p..];
        if rest.starts_with(b"<!--") {
            // `<!-->` is a whole comment: search from the second dash.
            p += 2 + find(&rest[2..], b"-->")? + 3;
        } else if starts_with_ignore_case(rest, b"<meta")
            && rest
                .get(5)
                .is_some_and(|&b| b.is_ascii_whitespace() || b == b'/')
        {
            p += 5;
            if let Some(encoding) = meta_charset(bytes, &mut p) {
                return Some(encoding);
            }
        } else if rest.len() > 1
            && (rest[1].is_ascii_alphabetic()
                || (rest[1] == b'/' && rest.get(2).is_some_and(u8::is_ascii_alphabetic)))
            && rest[0] == b'<'
        {
            // Another tag: skip its name and attributes (a `<meta` in an attribute
            // value is not a meta).
            p += rest
                .iter()
                .position(|&b| b.is_ascii_whitespace() || b == b'>')
                .unwrap_or(rest.len());
            while attribute(bytes, &mut p).is_some() {}
            if p >= bytes.len() {
                // The tag runs past the prescanned bytes: the standard gives up.
                return None;
            }
        } else if rest.starts_with(b"<!") || rest.starts_with(b"</") || rest.starts_with(b"<?") {
            p += find(rest, b">")? + 1;
        } else {
            p += 1;
        }
    }
    None
}

/// The charset a `<meta>` declares, its attributes read from `p` on.
fn meta_charset(bytes: &[u8], p: &mut usize) -> Option<&'static Encoding> {
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut got_pragma = false;
    let mut need_pragma: Option<bool> = None;
    let mut charset: Option<&'static Encoding> = None;
    while let Some((name, value)) = attribute(bytes, p) {
        if seen.contains(&name) {
            continue;
        }
        match &name[..] {
            b"http-equiv" => got_pragma |= value.eq_ignore_ascii_case(b"content-type"),
            b"content" if charset.is_none() => {
                if let Some(encoding) = charset_in_content(&value) {
                    charset = Some(encoding);
                    need_pragma = Some(true);
                }
            }
            b"charset" => {
                charset = Encoding::for_label(&value);
                need_pragma = Some(false);
            }
            _ => {}
        }
        seen.push(name);
    }
    if need_pragma? && !got_pragma {
        return None;
    }
    let encoding = charset?;
    Some(if encoding == UTF_16BE || encoding == UTF_16LE {
        UTF_8
    } else if encoding == X_USER_DEFINED {
        WINDOWS_1252
    } else {
        encoding
    })
}

/// The HTML standard's "extract a character encoding from a meta element" on a
/// `content` attribute's value.
fn charset_in_content(content: &[u8]) -> Option<&'static Encoding> {
    let mut p = 0;
    loop {
        p += find_ignore_case(&content[p..], b"charset")? + 7;
        while content.get(p).is_some_and(u8::is_ascii_whitespace) {
            p += 1;
        }
        if content.get(p) != Some(&b'=') {
            continue;
        }
        p += 1;
        while content.get(p).is_some_and(u8::is_ascii_whitespace) {
            p += 1;
        }
        let rest = &content[p..];
        return match rest.first() {
            Some(&quote @ (b'"' | b'\'')) => {
                let end = rest[1..].iter().position(|&b| b == quote)?;
                Encoding::for_label(&rest[1..1 + end])
            }
            Some(_) => {
                let end = rest
                    .iter()
                    .position(|&b| b.is_ascii_whitespace() || b == b';')
                    .unwrap_or(rest.len());
                Encoding::for_label(&rest[..end])
            }
            None => None,
        };
    }
}

/// The HTML standard's "get an attribute" from `p` on: the next attribute's lowercased
/// name and value, or `None` at the tag's end (or the prescanned bytes' end).
fn attribute(bytes: &[u8], p: &mut usize) -> Option<(Vec<u8>, Vec<u8>)> {
    let at = |i: usize| bytes.get(i).copied();
    while at(*p).is_some_and(|b| b.is_ascii_whitespace() || b == b'/') {
        *p += 1;
    }
    if at(*p)? == b'>' {
        *p += 1;
        return None;
    }
    let mut name = Vec::new();
    loop {
        match at(*p)? {
            b'=' if !name.is_empty() => {
                *p += 1;
                break;
            }
            b if b.is_ascii_whitespace() => {
                while at(*p).is_some_and(|b| b.is_ascii_whitespace()) {
                    *p += 1;
                }
                if at(*p)? != b'=' {
                    return Some((name, Vec::new()));
                }
                *p += 1;
                break;
            }
            b'/' | b'>' => return Some((name, Vec::new())),
            b => {
                name.push(b.to_ascii_lowercase());
                *p += 1;
            }
        }
    }
    while at(*p).is_some_and(|b| b.is_ascii_whitespace()) {
        *p += 1;
    }
    let mut value = Vec::new();
    match at(*p)? {
        quote @ (b'"' | b'\'') => {
            *p += 1;
            loop {
                let b = at(*p)?;
                *p += 1;
                if b == quote {
                    return Some((name, value));
                }
                value.push(b.to_ascii_lowercase());
            }
        }
        b'>' => Some((name, value)),
        _ => {
            while let Some(b) = at(*p) {
                if b.is_ascii_whitespace() || b == b'>' {
                    break;
                }
                value.push(b.to_ascii_lowercase());
                *p += 1;
            }
            at(*p)?;
            Some((name, value))
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn find_ignore_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

fn starts_with_ignore_case(haystack: &[u8], prefix: &[u8]) -> bool {
    haystack
        .get(..prefix.len())
        .is_some_and(|h| h.eq_ignore_ascii_case(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use encoding_rs::{EUC_JP, SHIFT_JIS};

    fn strings(urls: &[Url]) -> Vec<&str> {
        urls.iter().map(Url::as_str).collect()
    }

    fn links(page: &str, html: &str) -> PageLinks {
        extract(&Url::parse(page).unwrap(), html, UTF_8, &[], "frontier/0.1")
    }

    #[test]
    fn latin1_page_links_resolve_as_browsers_do() {
        let body = b"<html><body><a href=\"/caf\xe9?q=caf\xe9#top\">caf\xe9</a></body></html>";
        let ct = Some("text/html; charset=ISO-8859-1");
        let encoding = sniff_encoding(body, ct);
        assert_eq!(encoding, WINDOWS_1252);
        let html = decode_html(body, ct);
        assert!(html.contains("café</a>"));
        let page = Url::parse("http://a.test/dir/").unwrap();
        let found = extract(&page, &html, encoding, &[], "frontier");
        // Path: UTF-8 percent-encoded; query: in the page's encoding, as browsers send it.
        assert_eq!(strings(&found.links), ["http://a.test/caf%C3%A9?q=caf%E9"]);

        // Decoded as UTF-8 instead (the old behaviour), the link breaks.
        let lossy = decode_html(body, None);
        let found = extract(&page, &lossy, UTF_8, &[], "frontier");
        assert_eq!(
            strings(&found.links),
            ["http://a.test/caf%EF%BF%BD?q=caf%EF%BF%BD"]
        );
    }

    #[test]
    fn shift_jis_meta_charset() {
        let (nihon, _, _) = SHIFT_JIS.encode("日本");
        let (title, _, _) = SHIFT_JIS.encode("日本語のページ");
        for meta in [
            &b"<meta charset=\"Shift_JIS\">"[..],
            b"<META HTTP-EQUIV='Content-Type' CONTENT='text/html; charset=shift_jis'>",
            b"<meta content=\"text/html;charset=sjis\" http-equiv=content-type />",
        ] {
            let mut body = b"<!doctype html><html><head>".to_vec();
            body.extend_from_slice(meta);
            body.extend_from_slice(b"<title>");
            body.extend_from_slice(&title);
            body.extend_from_slice(b"</title></head><body><a href=\"/");
            body.extend_from_slice(&nihon);
            body.extend_from_slice(b"?q=");
            body.extend_from_slice(&nihon);
            body.extend_from_slice(b"\">x</a></body></html>");

            let encoding = sniff_encoding(&body, Some("text/html"));
            assert_eq!(encoding, SHIFT_JIS, "{}", String::from_utf8_lossy(meta));
            let html = decode_html(&body, Some("text/html"));
            assert!(html.contains("<title>日本語のページ</title>"));
            let page = Url::parse("http://jp.test/").unwrap();
            let found = extract(&page, &html, encoding, &[], "frontier");
            // 本 is 96 7B in Shift_JIS, and 7B (`{`) is not in the query's
            // percent-encode set: browsers send it as is.
            assert_eq!(
                strings(&found.links),
                ["http://jp.test/%E6%97%A5%E6%9C%AC?q=%93%FA%96{"]
            );
        }
    }

    #[test]
    fn encoding_precedence_and_prescan_rules() {
        let meta = b"<meta charset=euc-jp><p>x";
        assert_eq!(sniff_encoding(meta, None), EUC_JP);
        // The header wins over the meta; an unknown header label falls through to it.
        assert_eq!(
            sniff_encoding(meta, Some("text/html;charset=\"UTF-8\"")),
            UTF_8
        );
        assert_eq!(
            sniff_encoding(meta, Some("text/html; charset=bogus")),
            EUC_JP
        );
        // A BOM wins over both.
        let mut bom = b"\xef\xbb\xbf".to_vec();
        bom.extend_from_slice(meta);
        assert_eq!(
            sniff_encoding(&bom, Some("text/html; charset=latin1")),
            UTF_8
        );
        assert_eq!(decode_html(&bom, None), "<meta charset=euc-jp><p>x");
        let utf16 = b"\xff\xfeh\0i\0";
        assert_eq!(decode_html(utf16, Some("text/html; charset=utf-8")), "hi");
        // Not in comments, not in another tag's attribute, not after 1024 bytes.
        assert_eq!(
            sniff_encoding(b"<!-- <meta charset=euc-jp> -->", None),
            UTF_8
        );
        assert_eq!(
            sniff_encoding(b"<div title=\"<meta charset=euc-jp>\">", None),
            UTF_8
        );
        let mut late = vec![b' '; 1024];
        late.extend_from_slice(meta);
        assert_eq!(sniff_encoding(&late, None), UTF_8);
        // http-equiv content needs the pragma; UTF-16 in a meta means UTF-8.
        assert_eq!(
            sniff_encoding(b"<meta content=\"text/html; charset=euc-jp\">", None),
            UTF_8
        );
        assert_eq!(sniff_encoding(b"<meta charset=utf-16le>", None), UTF_8);
        assert_eq!(
            sniff_encoding(b"<meta charset=x-user-defined>", None),
            WINDOWS_1252
        );
        // Cut-off and malformed input: no panic, UTF-8.
        for bad in [
            &b"<meta charset="[..],
            b"<meta charset='euc-jp",
            b"<meta",
            b"<!--",
            b"<a href=\"x",
            b"<div title=\"<meta charset=euc-jp>",
            b"<meta http-equiv=content-type content=\"charset",
            b"<meta http-equiv=content-type content=\"charset=\"",
            b"",
        ] {
            assert_eq!(sniff_encoding(bad, None), UTF_8, "{bad:?}");
        }
        assert_eq!(decode_html(b"ok \xff", None), "ok \u{fffd}");
    }

    #[test]
    fn resolves_filters_and_deduplicates_like_extract_links() {
        let html = r##"<html><body>
            <a href="other.html#top">1</a>
            <a href="/root">2</a>
            <a href="other.html">dup</a>
            <a href="mailto:x@y.z">mail</a>
            <a href="javascript:void(0)">js</a>
            <a href="https://b.test/x?q=1">3</a>
            <a href="/img/photo.JPG">img</a>
            <area href="map.html">
            <a>no href</a>
        </body></html>"##;
        let found = links("http://a.test/dir/page.html", html);
        assert_eq!(
            strings(&found.links),
            [
                "http://a.test/dir/other.html",
                "http://a.test/root",
                "https://b.test/x?q=1",
                "http://a.test/dir/map.html"
            ]
        );
        assert!(!found.nofollow && !found.noindex);
    }

    #[test]
    fn base_href() {
        let html = r#"<head><base href="http://c.test/base/"></head><a href="z">z</a>"#;
        let found = links("http://a.test/x/y", html);
        assert_eq!(strings(&found.links), ["http://c.test/base/z"]);
        let html = r#"<head><base href="/sub/"><base href="/ignored/"></head><a href="z">z</a>"#;
        let found = links("http://a.test/x/y", html);
        assert_eq!(strings(&found.links), ["http://a.test/sub/z"]);
    }

    #[test]
    fn nofollow_forms() {
        let html = r#"
            <a href="/plain">1</a>
            <a href="/nf" rel="nofollow">2</a>
            <a href="/ugc" rel="ugc  NOFOLLOW noopener">3</a>
            <area href="/area" rel=nofollow>
            <a href="/both" rel="nofollow">4</a>
            <a href="/both">5</a>
            <a href="/sponsored" rel="sponsored">6</a>
            <a href="/nofollowish" rel="nofollowish">7</a>"#;
        let found = links("http://a.test/", html);
        assert_eq!(
            strings(&found.links),
            [
                "http://a.test/plain",
                "http://a.test/both",
                "http://a.test/sponsored",
                "http://a.test/nofollowish"
            ]
        );
        assert_eq!(
            strings(&found.rel_nofollow),
            [
                "http://a.test/nf",
                "http://a.test/ugc",
                "http://a.test/area"
            ]
        );
        assert!(!found.nofollow);

        let meta = |m: &str| {
            links(
                "http://a.test/",
                &format!("<head>{m}</head><a href=/x>x</a>"),
            )
        };
        let f = meta(r#"<meta name="robots" content="noindex">"#);
        assert!(f.noindex && !f.nofollow);
        assert_eq!(f.links.len(), 1, "links are kept; the caller decides");
        let f = meta(r#"<meta name="ROBOTS" content="NOFOLLOW, noarchive">"#);
        assert!(f.nofollow && !f.noindex);
        let f = meta(r#"<meta name="robots" content="none">"#);
        assert!(f.nofollow && f.noindex);
        let f = meta(r#"<meta name="robots" content="noindex nofollow">"#);
        assert!(f.nofollow && f.noindex);
        let f = meta(r#"<meta name="Frontier" content="nofollow">"#);
        assert!(f.nofollow);
        let f = meta(r#"<meta name="otherbot" content="nofollow,noindex">"#);
        assert!(!f.nofollow && !f.noindex);
        let f = extract(
            &Url::parse("http://a.test/").unwrap(),
            r#"<meta name="" content="nofollow">"#,
            UTF_8,
            &[],
            "",
        );
        assert!(!f.nofollow);
        let f = meta(r#"<meta name="robots" content="all">"#);
        assert!(!f.nofollow && !f.noindex);
    }

    #[test]
    fn x_robots_tag_forms() {
        let page = Url::parse("http://a.test/").unwrap();
        let tags = |values: &[&str]| {
            let f = extract(&page, "", UTF_8, values, "frontier/0.1 (+https://x.test)");
            (f.nofollow, f.noindex)
        };
        assert_eq!(tags(&[]), (false, false));
        assert_eq!(tags(&["noindex"]), (false, true));
        assert_eq!(tags(&["nofollow, noarchive"]), (true, false));
        assert_eq!(tags(&["NONE"]), (true, true));
        assert_eq!(tags(&["noindex", "nofollow"]), (true, true));
        assert_eq!(tags(&["otherbot: nofollow"]), (false, false));
        assert_eq!(tags(&["otherbot: noindex, nofollow"]), (false, false));
        assert_eq!(tags(&["otherbot: noindex", "nofollow"]), (true, false));
        assert_eq!(tags(&["FRONTIER: noindex"]), (false, true));
        assert_eq!(tags(&["nofollow, otherbot: noindex"]), (true, false));
        assert_eq!(tags(&["otherbot: none, frontier: nofollow"]), (true, false));
        assert_eq!(
            tags(&["unavailable_after: 25 Jun 2010 15:00:00 PST, noindex"]),
            (false, true)
        );
        assert_eq!(tags(&["max-snippet: 20, nofollow"]), (true, false));
        assert_eq!(tags(&["all", ": nofollow", ",,"]), (false, false));
    }

    #[test]
    fn any_prefix_or_corruption_is_an_answer_not_a_panic() {
        let doc: &[u8] = b"<!doctype html><!-- c --><html><head><meta http-equiv=\"Content-Type\" \
            content='text/html; charset=\"euc-jp\"'><base href=\"/b/\"><meta name=robots \
            content=nofollow></head><body><a href=\"x?q=\xa4\xa2\" rel=nofollow>a</a></body>";
        let page = Url::parse("http://a.test/").unwrap();
        assert_eq!(sniff_encoding(doc, None), EUC_JP);
        for end in 0..doc.len() {
            for bytes in [doc[..end].to_vec(), {
                let mut bad = doc.to_vec();
                bad[end] ^= 0x80;
                bad
            }] {
                let encoding = sniff_encoding(&bytes, None);
                let html = decode_html(&bytes, Some("text/html; charset"));
                let _ = extract(&page, &html, encoding, &["a:", ":", ""], "");
            }
        }
    }
}
