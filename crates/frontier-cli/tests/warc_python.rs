//! The WARC writer checked by an independent reader: Python's warcio, in its own
//! virtualenv under the target directory (`target/warcio-venv`, made on first use and
//! reused). warcio verifies every record's block and payload digests, rejects a file
//! whose gzip members hold more than one record, and reports what it read; this test
//! compares that with what was written.
//!
//! Without python3, venv or pip (or PyPI), the test prints SKIP and passes, unless `CI`
//! or `REQUIRE_PYTHON` is set, when it fails.

mod tools;
use std::collections::HashMap;
use std::net::IpAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tools::warcio_python;

use polite_frontier_cli::crawl::warc::{Exchange, WarcWriter};
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

/// Reads every file named on the command line with digest checks on and prints one JSON
/// object per record, then one per file with its count of gzip members.
const READER: &str = r#"
import hashlib, json, sys, zlib
from warcio.archiveiterator import ArchiveIterator

for path in sys.argv[1:]:
    with open(path, 'rb') as f:
        for record in ArchiveIterator(f, check_digests=True):
            h = record.rec_headers
            status = None
            if record.http_headers is not None and record.rec_type == 'response':
                status = int(record.http_headers.get_statuscode())
            payload = record.raw_stream.read()
            print(json.dumps({
                'file': path,
                'type': record.rec_type,
                'id': h.get_header('WARC-Record-ID'),
                'uri': h.get_header('WARC-Target-URI'),
                'concurrent_to': h.get_header('WARC-Concurrent-To'),
                'warcinfo_id': h.get_header('WARC-Warcinfo-ID'),
                'truncated': h.get_header('WARC-Truncated'),
                'ip': h.get_header('WARC-IP-Address'),
                'date': h.get_header('WARC-Date'),
                'content_type': h.get_header('Content-Type'),
                'status': status,
                'payload_sha256': hashlib.sha256(payload).hexdigest(),
                'payload_len': len(payload),
                'digest_passed': record.digest_checker.passed,
                'digest_problems': record.digest_checker.problems,
            }))
    data = open(path, 'rb').read()
    members = 0
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        if not d.eof:
            raise SystemExit('%s: a gzip member is cut short' % path)
        data = d.unused_data
        members += 1
    print(json.dumps({'file': path, 'members': members}))
"#;

/// URL, status, body, truncated, server address.
type Case = (&'static str, u16, Vec<u8>, bool, Option<IpAddr>);

#[test]
fn warcio_reads_back_every_record() {
    let Some(python) = warcio_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("crawl.warc.gz");
    // Small enough to rotate every few exchanges.
    let writer = Arc::new(WarcWriter::open(&base, Some(3_000), "frontier-test/0.1").unwrap());

    // What was written: URL -> (payload, truncated, status).
    let mut expected: HashMap<String, (Vec<u8>, bool, u16)> = HashMap::new();

    let html = b"<!doctype html><title>caf\xc3\xa9</title><a href=\"/b\">b</a>\n".to_vec();
    let binary = noise(2_000, 7);
    let truncated_body = noise(500, 11);
    let cases: Vec<Case> = vec![
        (
            "http://a.test/",
            200,
            html,
            false,
            Some("127.0.0.1".parse().unwrap()),
        ),
        ("http://a.test/blob.bin?x=1&y=%20", 200, binary, false, None),
        (
            "http://a.test/empty",
            204,
            Vec::new(),
            false,
            Some("::1".parse().unwrap()),
        ),
        ("https://b.test:8443/cut", 200, truncated_body, true, None),
        (
            "http://a.test/missing",
            404,
            b"not found".to_vec(),
            false,
            None,
        ),
    ];
    for (url, status, body, truncated, ip) in &cases {
        let parsed = Url::parse(url).unwrap();
        let mut ex = Exchange::new(&parsed, *status, body);
        ex.request_headers = vec![
            ("User-Agent".into(), b"frontier-test/0.1".to_vec()),
            ("Accept".into(), b"*/*".to_vec()),
        ];
        ex.response_headers = vec![
            ("Content-Type".into(), b"application/octet-stream".to_vec()),
            (
                "Content-Length".into(),
                (body.len() + if *truncated { 1_000 } else { 0 })
                    .to_string()
                    .into_bytes(),
            ),
        ];
        ex.truncated = *truncated;
        ex.ip = *ip;
        ex.fetched_at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        writer.write_exchange(&ex).unwrap();
        expected.insert(parsed.to_string(), (body.clone(), *truncated, *status));
    }

    // Many threads at once, across rotations.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let writer = Arc::clone(&writer);
            std::thread::spawn(move || {
                let mut written = Vec::new();
                for i in 0..10 {
                    let url = Url::parse(&format!("http://c.test/t{t}/p{i}")).unwrap();
                    let body = noise(100 + 37 * i, (t * 100 + i) as u64 + 1);
                    writer
                        .write_exchange(&Exchange::new(&url, 200, &body))
                        .unwrap();
                    written.push((url.to_string(), (body, false, 200)));
                }
                written
            })
        })
        .collect();
    for thread in threads {
        expected.extend(thread.join().unwrap());
    }

    let writer = Arc::into_inner(writer).unwrap();
    let paths = writer.finish().unwrap();
    assert!(paths.len() >= 3, "rotation made only {paths:?}");
    assert_eq!(paths[0], base);

    // warcio's own checker: digests and structure, exit status 0.
    let warcio_bin = python.with_file_name("warcio");
    let check = Command::new(&warcio_bin)
        .arg("check")
        .arg("-v")
        .args(&paths)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "warcio check failed:\n{report}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(!report.contains("failed"), "{report}");

    let out = Command::new(&python)
        .arg("-c")
        .arg(READER)
        .args(&paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "warcio reader failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();

    let records: Vec<&Value> = lines.iter().filter(|v| v.get("type").is_some()).collect();
    let by_id: HashMap<&str, &Value> = records
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), *r))
        .collect();
    assert_eq!(by_id.len(), records.len(), "record ids are unique");

    // Per file: one gzip member per record, a warcinfo first, every other record naming it.
    for path in &paths {
        let file = path.to_str().unwrap();
        let in_file: Vec<&&Value> = records.iter().filter(|r| r["file"] == file).collect();
        let members = lines
            .iter()
            .find(|v| v["file"] == file && v.get("members").is_some())
            .unwrap()["members"]
            .as_u64()
            .unwrap();
        assert_eq!(members as usize, in_file.len(), "{file}");
        assert_eq!(in_file[0]["type"], "warcinfo", "{file}");
        let warcinfo_id = &in_file[0]["id"];
        for r in &in_file[1..] {
            assert_eq!(&r["warcinfo_id"], warcinfo_id, "{r}");
            assert!(["request", "response"].contains(&r["type"].as_str().unwrap()));
        }
    }

    // Every record's digests checked and passed.
    for r in &records {
        assert_eq!(r["digest_passed"], true, "{r}");
        assert_eq!(r["digest_problems"].as_array().unwrap().len(), 0, "{r}");
    }

    // One request and one response per exchange, linked both ways, the payload the
    // bytes written.
    let responses: Vec<&&Value> = records.iter().filter(|r| r["type"] == "response").collect();
    assert_eq!(responses.len(), expected.len());
    assert_eq!(
        records.iter().filter(|r| r["type"] == "request").count(),
        expected.len()
    );
    for response in responses {
        let uri = response["uri"].as_str().unwrap();
        let (body, truncated, status) = &expected[uri];
        assert_eq!(response["payload_sha256"], hex_sha256(body), "{uri}");
        assert_eq!(response["payload_len"], body.len(), "{uri}");
        assert_eq!(response["status"], *status, "{uri}");
        assert_eq!(
            response["content_type"],
            "application/http; msgtype=response"
        );
        let want_truncated = if *truncated {
            Value::from("length")
        } else {
            Value::Null
        };
        assert_eq!(response["truncated"], want_truncated, "{uri}");
        let request = by_id[response["concurrent_to"].as_str().unwrap()];
        assert_eq!(request["type"], "request");
        assert_eq!(request["uri"], uri);
        assert_eq!(request["concurrent_to"], response["id"]);
        assert_eq!(
            request["file"], response["file"],
            "an exchange is never split"
        );
        assert_eq!(request["date"], response["date"]);
    }
    let first = records
        .iter()
        .find(|r| r["type"] == "response" && r["uri"] == "http://a.test/")
        .unwrap();
    assert_eq!(first["ip"], "127.0.0.1");
    assert_eq!(first["date"], "2026-11-30T00:53:20Z");
    let empty = records
        .iter()
        .find(|r| r["type"] == "response" && r["uri"] == "http://a.test/empty")
        .unwrap();
    assert_eq!(empty["ip"], "::1");
    assert_eq!(empty["payload_len"], 0);
}

/// `n` deterministic bytes of every value (xorshift).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
