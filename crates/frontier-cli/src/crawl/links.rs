//! Links of an HTML page, resolved and filtered.

use scraper::{Html, Selector};
use url::Url;

/// File extensions a crawler of pages skips (a short version of Scrapy's
/// `IGNORED_EXTENSIONS`).
const SKIPPED_EXTENSIONS: &[&str] = &[
    "7z", "avi", "bmp", "css", "csv", "doc", "docx", "exe", "gif", "gz", "ico", "jpeg", "jpg",
    "js", "mov", "mp3", "mp4", "mpeg", "pdf", "png", "ppt", "pptx", "rar", "svg", "tar", "tgz",
    "tif", "tiff", "wav", "webm", "webp", "woff", "woff2", "xls", "xlsx", "zip",
];

/// The absolute `http(s)` URLs of the `<a href>` and `<area href>` links of `html`,
/// resolved against `<base href>` or `page`, without fragments, deduplicated in page
/// order; links to files by a skipped extension are left out.
pub fn extract_links(page: &Url, html: &str) -> Vec<Url> {
    let document = Html::parse_document(html);
    let base_selector = Selector::parse("base[href]").expect("a valid selector");
    let link_selector = Selector::parse("a[href], area[href]").expect("a valid selector");
    let base = document
        .select(&base_selector)
        .next()
        .and_then(|b| b.value().attr("href"))
        .and_then(|href| page.join(href.trim()).ok())
        .unwrap_or_else(|| page.clone());
    let mut seen = std::collections::HashSet::new();
    let mut links = Vec::new();
    for element in document.select(&link_selector) {
        let Some(href) = element.value().attr("href") else {
            continue;
        };
        let Ok(mut url) = base.join(href.trim()) else {
            continue;
        };
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            continue;
        }
        url.set_fragment(None);
        if skipped_extension(&url) {
            continue;
        }
        if seen.insert(url.as_str().to_string()) {
            links.push(url);
        }
    }
    links
}

fn skipped_extension(url: &Url) -> bool {
    let last = url.path().rsplit('/').next().unwrap_or("");
    last.rsplit_once('.')
        .is_some_and(|(_, ext)| SKIPPED_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// Whether `host` is one of `domains` or a subdomain of one (Scrapy's offsite rule).
/// An empty list allows everything.
pub fn allowed_domain(domains: &[String], host: &str) -> bool {
    domains.is_empty()
        || domains.iter().any(|d| {
            host == d
                || host
                    .strip_suffix(d.as_str())
                    .is_some_and(|rest| rest.ends_with('.'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_filters_and_deduplicates() {
        let page = Url::parse("http://a.test/dir/page.html").unwrap();
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
        let links: Vec<String> = extract_links(&page, html)
            .iter()
            .map(|u| u.to_string())
            .collect();
        assert_eq!(
            links,
            [
                "http://a.test/dir/other.html",
                "http://a.test/root",
                "https://b.test/x?q=1",
                "http://a.test/dir/map.html"
            ]
        );
    }

    #[test]
    fn base_href_wins() {
        let page = Url::parse("http://a.test/x/y").unwrap();
        let html = r#"<head><base href="http://c.test/base/"></head><a href="z">z</a>"#;
        assert_eq!(
            extract_links(&page, html)[0].as_str(),
            "http://c.test/base/z"
        );
    }

    #[test]
    fn offsite_rule() {
        let domains = vec!["example.com".to_string()];
        assert!(allowed_domain(&domains, "example.com"));
        assert!(allowed_domain(&domains, "www.example.com"));
        assert!(!allowed_domain(&domains, "badexample.com"));
        assert!(!allowed_domain(&domains, "example.org"));
        assert!(allowed_domain(&[], "anything.test"));
    }
}
