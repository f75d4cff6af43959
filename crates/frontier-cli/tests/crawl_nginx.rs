//! `frontier crawl` with no settings file against three nginx sites limited to 10
//! requests a second each (`limit_req`, 429 + `Retry-After: 1` beyond it): every page is
//! fetched with a 200 exactly once, 429s stay under 10% of the requests, none is given
//! up, and the WARC file, read back by Python's warcio, holds one 200 response per page
//! with the bytes nginx sent. nginx and warcio: see tests/tools.
//!
//! Each site has 150 pages by default (about 150 s: after the first 429s a host runs at
//! the backoff's 1 s spacing until it recovers); `CRAWL_NGINX_PAGES=300` runs the full
//! size (measured: 900 pages in 308 s, 928 requests, 25 answered 429 = 2.7%).

mod tools;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use sha2::{Digest, Sha256};

const SITES: usize = 3;

fn pages() -> usize {
    std::env::var("CRAWL_NGINX_PAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

fn page(i: usize, pages: usize) -> String {
    let links: Vec<String> = [i + 1, (i * 7 + 3) % pages, (i * 13 + 5) % pages]
        .iter()
        .filter(|k| **k < pages)
        .map(|k| format!("<a href=\"p{k}.html\">page {k}</a>"))
        .collect();
    format!(
        "<!doctype html><html><head><title>page {i}</title></head><body>{}</body></html>\n",
        links.join(" ")
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn three_rate_limited_sites_with_no_settings() {
    #[allow(non_snake_case)]
    let PAGES = pages();
    let roots_dir = tempfile::tempdir().unwrap();
    let mut roots: Vec<PathBuf> = Vec::new();
    let mut digests: HashMap<String, String> = HashMap::new(); // path -> sha256
    for s in 0..SITES {
        let root = roots_dir.path().join(format!("site{s}"));
        std::fs::create_dir_all(&root).unwrap();
        for i in 0..PAGES {
            let body = page(i, PAGES);
            digests.insert(format!("/p{i}.html"), hex(&Sha256::digest(body.as_bytes())));
            std::fs::write(root.join(format!("p{i}.html")), body).unwrap();
        }
        roots.push(root);
    }
    let Some(nginx) = tools::Nginx::start(&roots, 10) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_frontier"))
        .current_dir(work.path())
        .env_remove("FRONTIER_CONFIG")
        .env_remove("FRONTIER_STORE")
        .args(["crawl", "--progress", "quiet", "--name", "nginx"])
        .args(["--warc", "crawl.warc.gz"])
        .args(
            nginx
                .ports
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}/p0.html")),
        )
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every page once, with a 200.
    let lines = std::fs::read_to_string(work.path().join("nginx.pages.jsonl")).unwrap();
    let mut seen: HashMap<String, u32> = HashMap::new();
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["status"], 200, "{l}");
        *seen
            .entry(v["url"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), SITES * PAGES, "pages with a line");
    assert!(seen.values().all(|n| *n == 1), "a page twice");

    // The server's view: 429s under 10% of the requests, no page given up.
    let log = nginx.log();
    let requests = log.len();
    let limited = log.iter().filter(|e| e.2 == 429).count();
    eprintln!(
        "3 x {PAGES} pages in {:.1} s: {requests} requests, {limited} answered 429 ({:.1}%)",
        took.as_secs_f64(),
        100.0 * limited as f64 / requests as f64
    );
    assert!(
        limited * 10 <= requests,
        "{limited} of {requests} requests got 429"
    );

    // The archive, read by warcio: one 200 response per page, the bytes nginx sent.
    let Some(python) = tools::warcio_python() else {
        return;
    };
    let script = r#"
import sys, json, hashlib
from warcio.archiveiterator import ArchiveIterator
out = []
with open(sys.argv[1], 'rb') as f:
    for r in ArchiveIterator(f, check_digests=True):
        if r.rec_type == 'response':
            body = r.content_stream().read()
            out.append([r.rec_headers.get_header('WARC-Target-URI'), r.http_headers.get_statuscode(), hashlib.sha256(body).hexdigest()])
print(json.dumps(out))
"#;
    let read = Command::new(&python)
        .args(["-c", script])
        .arg(work.path().join("crawl.warc.gz"))
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let records: Vec<(String, String, String)> = serde_json::from_slice(&read.stdout).unwrap();
    let ok: Vec<_> = records.iter().filter(|r| r.1 == "200").collect();
    assert_eq!(ok.len(), SITES * PAGES, "one 200 response record per page");
    for (uri, _, sha) in ok {
        let path = &uri[uri.rfind('/').unwrap()..];
        assert_eq!(&digests[path], sha, "{uri}: the archived bytes differ");
    }
}
