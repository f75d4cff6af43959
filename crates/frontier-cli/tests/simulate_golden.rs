//! Golden tests of `frontier simulate`: every scenario in the repository's `examples/`
//! prints exactly its checked-in `examples/NAME.expected.jsonl`, byte for byte, and two
//! runs print the same bytes.
//!
//! After an intended change of behaviour, regenerate the expected files with
//!
//! ```text
//! UPDATE_GOLDEN=1 cargo test -p polite-frontier-cli --test simulate_golden
//! ```
//!
//! and review the diff like code.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Each example and the extra arguments its golden run uses. The million-request crawl
/// keeps only its summary (with the 20 busiest scopes) so the expected file stays small.
const GOLDEN: &[(&str, &[&str])] = &[
    ("429-storm.toml", &[]),
    ("quota-api.toml", &[]),
    ("breadth-first.json", &[]),
    ("news-sites.toml", &[]),
    (
        "broad-crawl.toml",
        &["--summary-only", "--top-scopes", "20"],
    ),
    ("rampup-wakeup.toml", &[]),
];

/// Checked-in expected files must stay small.
const MAX_GOLDEN_BYTES: usize = 200 * 1024;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn run(example: &str, args: &[&str]) -> Vec<u8> {
    let path = examples_dir().join(example);
    let out = Command::new(env!("CARGO_BIN_EXE_frontier"))
        .arg("simulate")
        .args(args)
        .arg(&path)
        .output()
        .expect("run the frontier binary");
    assert!(
        out.status.success(),
        "frontier simulate {} failed ({}): {}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "unexpected stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn expected_path(example: &str) -> PathBuf {
    let stem = example.rsplit_once('.').map_or(example, |(s, _)| s);
    examples_dir().join(format!("{stem}.expected.jsonl"))
}

/// Runs an example twice at once (the machine has two cores), checks both runs agree,
/// and compares with (or, with UPDATE_GOLDEN=1, rewrites) the expected file.
fn check(example: &str, args: &[&str]) {
    let (first, second) = std::thread::scope(|s| {
        let a = s.spawn(|| run(example, args));
        let b = s.spawn(|| run(example, args));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        first == second,
        "{example}: two runs printed different output"
    );
    let path = expected_path(example);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, &first).unwrap();
        eprintln!("updated {}", path.display());
    }
    let expected = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (create it with UPDATE_GOLDEN=1 cargo test -p polite-frontier-cli --test simulate_golden)",
            path.display()
        )
    });
    assert!(
        expected.len() <= MAX_GOLDEN_BYTES,
        "{} is too big",
        path.display()
    );
    if first != expected {
        let got = String::from_utf8_lossy(&first);
        let want = String::from_utf8_lossy(&expected);
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "{example}: output differs from {} at line {}:\n  got:  {}\n  want: {}\n\
             (after an intended change: UPDATE_GOLDEN=1 cargo test -p polite-frontier-cli --test simulate_golden)",
            path.display(),
            line + 1,
            got.lines().nth(line).unwrap_or("<end of output>"),
            want.lines().nth(line).unwrap_or("<end of file>"),
        );
    }
}

#[test]
fn storm_replay_matches_its_golden() {
    check(GOLDEN[0].0, GOLDEN[0].1);
}

#[test]
fn quota_replay_matches_its_golden() {
    check(GOLDEN[1].0, GOLDEN[1].1);
}

#[test]
fn json_breadth_first_replay_matches_its_golden() {
    check(GOLDEN[2].0, GOLDEN[2].1);
}

#[test]
fn site_models_match_their_golden() {
    check(GOLDEN[3].0, GOLDEN[3].1);
}

#[test]
fn million_request_crawl_summary_matches_its_golden() {
    check(GOLDEN[4].0, GOLDEN[4].1);
    // The golden run printed the summary only; the summary must describe a whole crawl
    // of the million pages over ten thousand hosts.
    let text = std::fs::read_to_string(expected_path(GOLDEN[4].0)).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let s = &v["summary"];
    assert_eq!(s["scope_count"], 10_000);
    assert_eq!(s["unsent"], 0);
    assert!(s["responses"]["200"].as_u64().unwrap() >= 990_000, "{s}");
    assert!(s["sent"].as_u64().unwrap() >= 1_000_000, "{s}");
    assert!(
        s["finished_at"].as_f64().unwrap() > 3600.0,
        "hours of crawl: {s}"
    );
    assert_eq!(s["scopes"].as_object().unwrap().len(), 20);
}

#[test]
fn rampup_wakeup_replay_matches_its_golden() {
    check(GOLDEN[5].0, GOLDEN[5].1);
    // The waiting pages go at the ends of the rampup windows, not when page-1 answers.
    let text = std::fs::read_to_string(expected_path(GOLDEN[5].0)).unwrap();
    for line in [
        r#"{"at": 10.0, "send": "page-2"}"#,
        r#"{"at": 20.0, "send": "page-3"}"#,
        r#"{"at": 100.0, "send": "page-4"}"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}");
    }
}

#[test]
fn every_example_has_a_golden_run() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml") || n.ends_with(".json"))
        .collect();
    found.sort();
    let mut listed: Vec<String> = GOLDEN.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "add new examples to GOLDEN");
}

#[test]
fn every_output_line_is_json_in_time_order() {
    for (example, args) in GOLDEN.iter().filter(|(_, args)| args.is_empty()) {
        let text = String::from_utf8(run(example, args)).unwrap();
        let mut last = 0.0;
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines[..lines.len() - 1] {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let at = v["at"].as_f64().unwrap();
            assert!(at >= last, "{example}: time goes back at {line}");
            last = at;
        }
        let summary: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
        assert_eq!(
            summary["summary"]["finished_at"].as_f64().unwrap(),
            last,
            "{example}"
        );
    }
}
