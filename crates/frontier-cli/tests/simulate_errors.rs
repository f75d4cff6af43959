//! Bad scenarios: `frontier simulate` says what is wrong (the key, and the line where the
//! parser knows it), exits with a failure status, prints nothing on stdout, and never
//! panics.

use std::process::Command;

mod common;
use common::simulate_file;

/// Runs a scenario that must be rejected before anything is printed; returns stderr.
#[track_caller]
fn rejected(name: &str, text: &str) -> String {
    let out = simulate_file(name, text, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "printed before failing: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.starts_with("frontier: "), "{stderr}");
    assert!(stderr.contains(name), "the file is named: {stderr}");
    stderr
}

#[track_caller]
fn assert_mentions(stderr: &str, parts: &[&str]) {
    for part in parts {
        assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
    }
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    let e = rejected(
        "s.toml",
        "[settings]\ndownload_delay = 1\nconcurent_requests = 4\n\n[[events]]\nat = 0\n",
    );
    assert_mentions(&e, &["unknown field `concurent_requests`", "line 3"]);

    let e = rejected(
        "s.toml",
        "[settings]\n[settings.scopes.\"a.example\"]\ndelai = 2\n[[events]]\nat = 0\n",
    );
    assert_mentions(&e, &["unknown field `delai`", "line 3"]);

    let e = rejected(
        "s.json",
        "{\"events\": [\n  {\"at\": 0, \"push\": {\"url\": \"https://a.example/\",\n    \"responce\": {}}}\n]}",
    );
    assert_mentions(&e, &["unknown field `responce`", "line 3"]);

    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "response": {"status": 200, "latancy": 1}}}]}"#,
    );
    assert_mentions(&e, &["unknown field `latancy`"]);

    let e = rejected("s.toml", "[settings]\n[[event]]\nat = 0\n");
    assert_mentions(&e, &["unknown field `event`", "line 2"]);

    let e = rejected(
        "s.toml",
        "[[sites]]\nhost = \"a.example\"\npages = 3\nlink_per_page = 2\n",
    );
    assert_mentions(&e, &["unknown field `link_per_page`", "line 4"]);
}

#[test]
fn negative_and_invalid_values_are_named() {
    // A setting: validated by polite-throttle-core, named by key.
    let e = rejected(
        "s.toml",
        "[settings]\ndownload_delay = -1\n[[events]]\nat = 0\n",
    );
    assert_mentions(&e, &["download_delay", "-1"]);
    let e = rejected(
        "s.json",
        r#"{"settings": {"scopes": {"x.com": {"backoff": {"delay_factor": 0.5}}}}, "events": []}"#,
    );
    assert_mentions(&e, &["scopes.\"x.com\".backoff.delay_factor"]);
    // Seconds in events: checked while parsing, with the line.
    let e = rejected(
        "s.toml",
        "[[events]]\nat = 0\npush = { url = \"https://a.example/\", delay = -5 }\n",
    );
    assert_mentions(&e, &["-5", "seconds", "line 3"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": -1, "delay_scope": {"scope": "a", "seconds": 1}}]}"#,
    );
    assert_mentions(&e, &["-1", "seconds"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 1e300, "delay_scope": {"scope": "a", "seconds": 1}}]}"#,
    );
    assert_mentions(&e, &["seconds"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": "soon", "delay_scope": {"scope": "a", "seconds": 1}}]}"#,
    );
    assert_mentions(&e, &["soon"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "response": {"latency": -0.1}}}]}"#,
    );
    assert_mentions(&e, &["-0.1"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "scopes": {"cost": -2}}}]}"#,
    );
    assert_mentions(&e, &["-2", "quota amount"]);
    // Checked after parsing: named by their path in the file.
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "response": {"status": 700}}}]}"#,
    );
    assert_mentions(&e, &["events[0].push.response.status", "700"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "children": [{"url": "not a url"}]}}]}"#,
    );
    assert_mentions(&e, &["events[0].push.children[0]", "not a url"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "response": {"status": 200, "error": "timeout"}}}]}"#,
    );
    assert_mentions(&e, &["events[0].push.response", "not both"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/", "children": [{"url": "https://a.example/c", "depth": 4}]}}]}"#,
    );
    assert_mentions(&e, &["events[0].push.children[0].depth"]);
    let e = rejected("s.toml", "[[sites]]\nhost = \"a.example\"\npages = 0\n");
    assert_mentions(&e, &["sites[0].pages"]);
    let e = rejected(
        "s.toml",
        "[[sites]]\nhost = \"a.example\"\npages = 5\nerror_rate = 1.5\n",
    );
    assert_mentions(&e, &["sites[0].error_rate", "1.5"]);
    let e = rejected(
        "s.toml",
        "[[sites]]\nhost = \"s.example\"\ncount = 3\npages = 5\n",
    );
    assert_mentions(&e, &["sites[0].host", "{n}"]);
}

#[test]
fn malformed_files_are_reported_with_their_position() {
    let e = rejected("s.json", "{\"events\": [\n  {\"at\": 0,,}\n]}");
    assert_mentions(&e, &["line 2"]);
    let e = rejected("s.json", "{\"events\": [");
    assert_mentions(&e, &["EOF", "line 1"]);
    let e = rejected("s.toml", "[settings\ndownload_delay = 1\n");
    assert_mentions(&e, &["line 1"]);
    let e = rejected(
        "s.toml",
        "[[events]]\nat = 0\npush = { url = \"https://a.example/\"\n",
    );
    assert_mentions(&e, &["line 3"]);
    // Wrong type, and the format guessed from the text when the extension says nothing.
    let e = rejected("scenario.txt", "{\"events\": {\"at\": 0}}");
    assert_mentions(&e, &["invalid type", "sequence"]);
    let e = rejected("s.toml", "");
    assert_mentions(&e, &["neither `events`", "`sites`"]);
}

#[test]
fn scenarios_that_do_two_things_are_rejected() {
    let e = rejected("s.json", r#"{"events": [], "sites": []}"#);
    assert_mentions(&e, &["not both"]);
    let e = rejected("s.json", r#"{"events": [{"at": 0}]}"#);
    assert_mentions(&e, &["events[0]", "needs one of"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "push": {"url": "https://a.example/"}, "crawl_delay": {"scope": "a.example", "seconds": 1}}]}"#,
    );
    assert_mentions(&e, &["events[0]", "push and crawl_delay"]);
    let e = rejected(
        "s.json",
        r#"{"events": [{"at": 0, "set_scope": {"scope": "a.example"}}]}"#,
    );
    assert_mentions(&e, &["events[0].set_scope"]);
}

#[test]
fn a_missing_file_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_frontier"))
        .args(["simulate", "/nonexistent/scenario.toml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("/nonexistent/scenario.toml"), "{stderr}");
}

#[test]
fn a_runtime_refusal_stops_with_the_event_named() {
    // min_concurrency 2 is known only to the throttler: set_scope to 1 is refused when the
    // event is applied. The lines before it are printed, then the error.
    let out = simulate_file(
        "s.toml",
        "[settings]\nscopes.\"a.example\" = { min_concurrency = 2 }\n\
         [[events]]\nat = 0\npush = { id = \"r1\", url = \"https://a.example/\" }\n\
         [[events]]\nat = 5\nset_scope = { scope = \"a.example\", concurrency = 1 }\n",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("events[1]") && stderr.contains("min_concurrency"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("{\"at\": 0.0, \"send\": \"r1\"}"));
}
