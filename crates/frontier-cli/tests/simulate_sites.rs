//! Site models through `frontier simulate`: link structure, server-side rate limits
//! with and without Retry-After, retries, Crawl-delay, errors, seeds, and the output
//! flags. Times are derived by hand in the comments (jitter off unless stated).

use std::io::Write;
use std::process::{Command, Stdio};

mod common;
use common::{simulate_lines, summary};

fn run(text: &str, args: &[&str]) -> Vec<String> {
    simulate_lines("sites.toml", text, args)
}

const NO_JITTER: &str = "randomize_download_delay = false\nbackoff_jitter = 0\n";

#[test]
fn every_page_is_crawled_once_through_the_link_tree() {
    // 7 pages, 2 links each: page p links to (2p+1) mod 7 and (2p+2) mod 7. One at a time,
    // 1 s each, depth-first (LIFO): 0 → {1, 2}; 2 → {5, 6}; 6 → {6, 0} both seen; 5 →
    // {4, 5}: 4 new at depth 3; 4 → {2, 3}: 3 new at depth 4; 3 → {0, 1} seen; 1 → {3, 4}
    // seen. So 7 sends at 0..6, done at 7; 6 links queued, the other 8 are duplicates;
    // the deepest request is page 3 at depth 4.
    let out = run(
        &format!(
            "[settings]\n{NO_JITTER}scopes.\"s.example\" = {{ concurrency = 1 }}\n\
             [[sites]]\nhost = \"s.example\"\npages = 7\nlinks_per_page = 2\nlatency = 1\n"
        ),
        &[],
    );
    let s = summary(&out);
    assert_eq!(s["sent"], 7);
    assert_eq!(s["responses"]["200"], 7);
    assert_eq!(s["dropped"]["duplicate"], 8);
    assert_eq!(s["depth_max"], 4);
    assert_eq!(s["finished_at"], 7.0);
    assert_eq!(out[0], r#"{"at": 0.0, "send": "https://s.example/p/0"}"#);
    let mut pages: Vec<String> = out
        .iter()
        .filter_map(|l| {
            l.strip_prefix("{\"at\": ")
                .and_then(|l| l.split_once(", \"send\": "))
        })
        .map(|(_, url)| url.trim_end_matches('}').to_owned())
        .collect();
    pages.sort();
    pages.dedup();
    assert_eq!(pages.len(), 7);
}

#[test]
fn server_rate_limit_with_retry_after_and_retries() {
    // One host (one request at a time), 3 pages, 2 links per page, 0.1 s latency. The
    // server accepts 1 request per 10 s (sliding, counting accepted requests) and refuses
    // others with 429 + Retry-After = the whole seconds until it would accept ("auto").
    // 0     p/0 sent, accepted (at 0).          0.1  200; links p/1, p/2 pushed.
    // 0.1   p/2 sent (LIFO): 0 + 10 > 0.1, refused, Retry-After ceil(9.9) = 10.
    // 0.2   429: the host waits until 10.2 (level 1, spacing max(0, 1) = 1); p/2 retried
    //       with priority -1 (retry 1 of 2).
    // 10.2  p/1 (priority 0 beats the retry's -1): 0 + 10 <= 10.2, accepted. 10.3 200;
    //       its links (p/0, p/1) are duplicates.
    // 11.2  p/2 (spacing 1 after 10.2): refused (10.2 + 10 > 11.2), Retry-After ceil(9) = 9.
    // 11.3  429: wait until 20.3; retry 2 of 2.
    // 20.3  p/2: 10.2 + 10 <= 20.3, accepted. 20.4 200; its links are duplicates.
    let out = run(
        &format!(
            "[settings]\n{NO_JITTER}scopes.\"s.example\" = {{ concurrency = 1 }}\n\
             [[sites]]\nhost = \"s.example\"\npages = 3\nlinks_per_page = 2\nlatency = 0.1\n\
             rate_limit = {{ requests = 1, per = 10, retry_after = \"auto\" }}\n"
        ),
        &[],
    );
    let p = |n: u32| format!("https://s.example/p/{n}");
    let expected = [
        format!(r#"{{"at": 0.0, "send": "{}"}}"#, p(0)),
        format!(r#"{{"at": 0.1, "done": "{}", "status": 200}}"#, p(0)),
        format!(r#"{{"at": 0.1, "send": "{}"}}"#, p(2)),
        format!(r#"{{"at": 0.2, "done": "{}", "status": 429}}"#, p(2)),
        format!(r#"{{"at": 10.2, "send": "{}"}}"#, p(1)),
        format!(r#"{{"at": 10.3, "done": "{}", "status": 200}}"#, p(1)),
        format!(
            r#"{{"at": 10.3, "dropped": "{}", "reason": "duplicate"}}"#,
            p(0)
        ),
        format!(
            r#"{{"at": 10.3, "dropped": "{}", "reason": "duplicate"}}"#,
            p(1)
        ),
        format!(r#"{{"at": 11.2, "send": "{}"}}"#, p(2)),
        format!(r#"{{"at": 11.3, "done": "{}", "status": 429}}"#, p(2)),
        format!(r#"{{"at": 20.3, "send": "{}"}}"#, p(2)),
        format!(r#"{{"at": 20.4, "done": "{}", "status": 200}}"#, p(2)),
        format!(
            r#"{{"at": 20.4, "dropped": "{}", "reason": "duplicate"}}"#,
            p(2)
        ),
        format!(
            r#"{{"at": 20.4, "dropped": "{}", "reason": "duplicate"}}"#,
            p(0)
        ),
    ];
    assert_eq!(&out[..out.len() - 1], &expected[..], "{out:#?}");
    let s = summary(&out);
    assert_eq!(s["retried"], 2);
    assert_eq!(s["responses"]["429"], 2);
    assert_eq!(s["scopes"]["s.example"]["level"], 2);
}

#[test]
fn plain_429s_back_off_and_give_up_without_retries() {
    // As above without Retry-After and with retry_times = 0.
    // 0.1 p/2 refused → 0.2 429: delay 0 → 1, next send ≥ 1.2; given up.
    // 1.2 p/1 refused (0 + 10 > 1.2) → 1.3 429: level 2, delay 2; given up.
    let out = run(
        &format!(
            "[settings]\n{NO_JITTER}scopes.\"s.example\" = {{ concurrency = 1 }}\n\
             [simulation]\nretry_times = 0\n\
             [[sites]]\nhost = \"s.example\"\npages = 3\nlinks_per_page = 2\nlatency = 0.1\n\
             rate_limit = {{ requests = 1, per = 10 }}\n"
        ),
        &[],
    );
    let sends: Vec<&String> = out.iter().filter(|l| l.contains("\"send\"")).collect();
    assert_eq!(
        sends,
        [
            r#"{"at": 0.0, "send": "https://s.example/p/0"}"#,
            r#"{"at": 0.1, "send": "https://s.example/p/2"}"#,
            r#"{"at": 1.2, "send": "https://s.example/p/1"}"#,
        ]
    );
    let s = summary(&out);
    assert_eq!(
        (s["retried"].as_u64(), s["responses"]["429"].as_u64()),
        (Some(0), Some(2))
    );
    let scope = &s["scopes"]["s.example"];
    assert_eq!(
        (scope["delay"].as_f64(), scope["level"].as_u64()),
        (Some(2.0), Some(2))
    );
}

#[test]
fn failures_are_retried_twice_then_given_up() {
    // Every request times out after 5 s. Timeouts are backoff triggers:
    // 0 send, 5 timeout (level 1, delay 1 → next 6), retry 1;
    // 6 send, 11 timeout (level 2, delay 2 → next 13), retry 2;
    // 13 send, 18 timeout: given up, no links. Scrapy's retry_times is 2.
    let out = run(
        &format!(
            "[settings]\n{NO_JITTER}\
             [[sites]]\nhost = \"s.example\"\npages = 3\nerror_rate = 1.0\ntimeout = 5\n"
        ),
        &[],
    );
    let u = "https://s.example/p/0";
    let expected = [
        format!(r#"{{"at": 0.0, "send": "{u}"}}"#),
        format!(r#"{{"at": 5.0, "done": "{u}", "error": "timeout"}}"#),
        format!(r#"{{"at": 6.0, "send": "{u}"}}"#),
        format!(r#"{{"at": 11.0, "done": "{u}", "error": "timeout"}}"#),
        format!(r#"{{"at": 13.0, "send": "{u}"}}"#),
        format!(r#"{{"at": 18.0, "done": "{u}", "error": "timeout"}}"#),
    ];
    assert_eq!(&out[..out.len() - 1], &expected[..]);
    let s = summary(&out);
    assert_eq!(s["errors"]["timeout"], 3);
    assert_eq!(s["retried"], 2);
    assert_eq!(s["finished_at"], 18.0);
}

#[test]
fn robots_crawl_delay_spaces_a_site() {
    // Crawl-delay 2 (reported at 0, before the first request): delay 2, concurrency 1.
    // 3 pages, 0.5 s each: 0, 2, 4.
    let out = run(
        &format!(
            "[settings]\n{NO_JITTER}\
             [[sites]]\nhost = \"s.example\"\npages = 3\nlinks_per_page = 2\nlatency = 0.5\ncrawl_delay = 2\n"
        ),
        &[],
    );
    let times: Vec<&str> = out
        .iter()
        .filter(|l| l.contains("\"send\""))
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(times, [r#"{"at": 0.0"#, r#"{"at": 2.0"#, r#"{"at": 4.0"#]);
    let scope = &summary(&out)["scopes"]["s.example"];
    assert_eq!(
        (scope["delay"].as_f64(), scope["concurrency"].as_u64()),
        (Some(2.0), Some(1))
    );
}

#[test]
fn hosts_expand_and_cross_links_reach_other_hosts() {
    // a0..a2.example have no same-host links, only 2 cross links per page; b.example has
    // neither. Start pages are page 0 of each host; every other send comes from a cross
    // link. The hash is fixed, so two runs agree.
    let text = "[settings]\nrandomize_download_delay = false\n\
                [[sites]]\nhost = \"a{n}.example\"\ncount = 3\npages = 50\nlinks_per_page = 0\ncross_links = 2\n\
                [[sites]]\nhost = \"b.example\"\npages = 50\nlinks_per_page = 0\n";
    let out = run(text, &[]);
    assert_eq!(out, run(text, &[]));
    let s = summary(&out);
    assert_eq!(s["scope_count"], 4);
    for host in ["a0.example", "a1.example", "a2.example", "b.example"] {
        assert!(
            s["scopes"][host]["sent"].as_u64().unwrap() >= 1,
            "{host}: {s}"
        );
    }
    // More than the 4 start pages were crawled, all through cross links.
    assert!(s["sent"].as_u64().unwrap() > 4, "{s}");
    // b.example links nowhere: its pages beyond 0 came from the a hosts.
    assert!(
        s["scopes"]["b.example"]["sent"].as_u64().unwrap() > 1,
        "{s}"
    );
}

#[test]
fn the_seed_decides_every_random_draw() {
    // Jitter on and latencies drawn from a range: the same seed prints the same bytes,
    // another seed other times.
    let text = |seed: u64| {
        format!(
            "[settings]\ndownload_delay = 0.5\nseed = {seed}\n\
             [[sites]]\nhost = \"s{{n}}.example\"\ncount = 3\npages = 30\nlatency = [0.05, 0.5]\nerror_rate = 0.1\ntimeout = 3\n"
        )
    };
    let a = run(&text(5), &[]);
    assert_eq!(a, run(&text(5), &[]));
    let b = run(&text(6), &[]);
    assert_ne!(a, b);
    // --seed overrides the file's seed.
    assert_eq!(run(&text(6), &["--seed", "5"]), a);
}

#[test]
fn summary_only_and_top_scopes() {
    let text = "[settings]\nrandomize_download_delay = false\n\
                [[sites]]\nhost = \"big.example\"\npages = 20\n\
                [[sites]]\nhost = \"mid.example\"\npages = 10\n\
                [[sites]]\nhost = \"small.example\"\npages = 2\n";
    let full = run(text, &[]);
    let only = run(text, &["--summary-only"]);
    assert_eq!(only.len(), 1);
    assert_eq!(only[0], *full.last().unwrap());
    let top = run(text, &["--summary-only", "--top-scopes", "2"]);
    let s = summary(&top);
    assert_eq!(s["scope_count"], 3);
    let names: Vec<&String> = s["scopes"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["big.example", "mid.example"]);
    assert_eq!(s["scopes"]["big.example"]["sent"], 20);
}

#[test]
fn a_scenario_can_come_from_standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_frontier"))
        .args(["simulate", "--summary-only", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"sites\": [{\"host\": \"a.example\", \"pages\": 4, \"latency\": 1}]}")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["sent"], 4);
}
