//! The `frontier` binary: `demo` completes, an interrupted demo resumes instead of
//! starting over (Ctrl-C and `kill -9`), and `inspect` reports the store's real counts.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use polite_frontier_cli::sites::demo_sites;
use serde_json::Value;

const PAGES: u32 = 500;

fn frontier() -> Command {
    Command::new(env!("CARGO_BIN_EXE_frontier"))
}

fn demo(path: &Path, store: &str) -> Command {
    let mut cmd = frontier();
    cmd.args([
        "demo",
        "--pages",
        &PAGES.to_string(),
        "--store",
        store,
        "--progress",
        "quiet",
        "--json",
    ])
    .arg("--path")
    .arg(path)
    .env_remove("FRONTIER_CONFIG");
    cmd
}

fn out_of(path: &Path) -> PathBuf {
    path.with_extension("jsonl")
}

fn lines(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Waits until the demo wrote at least `n` lines, then returns.
fn wait_for_lines(child: &mut Child, out: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines(out).len() < n {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the demo ended before {n} pages"
        );
        assert!(Instant::now() < deadline, "the demo is too slow");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn summary(output: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "summary is not JSON ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn inspect(path: &Path) -> Value {
    let output = frontier()
        .arg("inspect")
        .arg(path)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every generated page: `http://host/page/n`.
fn every_page() -> HashSet<String> {
    demo_sites(PAGES)
        .iter()
        .flat_map(|s| (0..s.pages).map(move |n| format!("http://{}/page/{n}", s.host)))
        .collect()
}

/// 200s per URL over all runs' lines.
fn ok_counts(lines: &[Value]) -> HashMap<String, u32> {
    let mut ok = HashMap::new();
    for line in lines {
        if line["status"] == 200 {
            *ok.entry(line["url"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    ok
}

fn assert_covers_every_page(ok: &HashMap<String, u32>) {
    let missing: Vec<_> = every_page()
        .into_iter()
        .filter(|u| !ok.contains_key(u))
        .collect();
    assert!(
        missing.is_empty(),
        "{} pages never fetched, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

#[test]
fn demo_interrupted_resumes_and_inspect_reports_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.sqlite");
    let out = out_of(&path);

    // First run: Ctrl-C after some pages.
    let mut child = demo(&path, "sqlite")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_lines(&mut child, &out, 150);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let first = child.wait_with_output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = summary(&first);
    assert_eq!(first["stop"], "interrupted");
    let left = first["left"].as_u64().unwrap();
    assert!(left > 0, "the interrupted crawl left requests: {first}");

    // inspect: the real counts, checked against an independent read of the store.
    let report = inspect(&path);
    assert_eq!(report["kind"], "sqlite");
    assert_eq!(report["requests"].as_u64().unwrap(), left);
    assert_eq!(
        report["leased"], 0,
        "a clean stop acknowledges or puts back every lease"
    );
    let by_scope: u64 = report["by_scope"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(by_scope, left, "every demo request has exactly one scope");
    let by_priority: u64 = report["by_priority"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(by_priority, left);
    {
        let store = polite_store_sqlite::SqliteStore::open(
            &path,
            polite_store_sqlite::SqliteOptions::default(),
        )
        .unwrap();
        let frontier = polite_frontier_core::Frontier::open(
            polite_throttle_core::Settings::default(),
            polite_frontier_core::FrontierConfig::default(),
            store,
            polite_throttle_core::Timestamp::ZERO,
        )
        .unwrap();
        assert_eq!(frontier.len() as u64, left);
        assert_eq!(
            report["seen"].as_u64().unwrap(),
            frontier.dupefilter().len() as u64
        );
        let states = report["scope_states"].as_array().unwrap();
        assert!(
            states
                .iter()
                .any(|s| s["scope"] == "news.test" && s["robots_delay"] == 0.1),
            "{states:?}"
        );
    }
    let before = lines(&out);
    let seen = report["seen"].as_u64().unwrap();
    let urls: HashSet<&str> = before.iter().map(|l| l["url"].as_str().unwrap()).collect();
    assert!(
        seen >= urls.len() as u64,
        "{seen} fingerprints for {} finished URLs",
        urls.len()
    );

    // Second run: resumes (does not start over) and finishes.
    let second = demo(&path, "sqlite").output().unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let second = summary(&second);
    assert_eq!(second["stop"], "finished");
    assert_eq!(second["resumed_with"].as_u64().unwrap(), left);
    let all = lines(&out);
    assert!(all.len() > before.len());
    let ok = ok_counts(&all);
    assert_covers_every_page(&ok);
    // A clean stop finishes what is in flight: nothing is fetched twice.
    let twice: Vec<_> = ok.iter().filter(|&(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "fetched twice after a clean stop: {twice:?}"
    );

    // A third run has nothing to do.
    let third = demo(&path, "sqlite").output().unwrap();
    assert!(third.status.success());
    assert_eq!(summary(&third)["pages"], 0);
    assert_eq!(inspect(&path)["requests"], 0);
}

#[test]
fn demo_killed_with_sigkill_loses_nothing() {
    for store in ["fs", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("demo.{store}"));
        let out = out_of(&path);
        let mut child = demo(&path, store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_lines(&mut child, &out, 200);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let before = lines(&out);

        let rerun = demo(&path, store).output().unwrap();
        assert!(
            rerun.status.success(),
            "{store}: {}",
            String::from_utf8_lossy(&rerun.stderr)
        );
        let rerun = summary(&rerun);
        assert_eq!(rerun["stop"], "finished", "{store}");
        assert!(
            rerun["resumed_with"].as_u64().unwrap() > 0,
            "{store}: resumed, not restarted"
        );

        let all = lines(&out);
        let ok = ok_counts(&all);
        assert_covers_every_page(&ok);
        // Only what was in flight at the kill may be fetched again: at most
        // `concurrent_requests` (16) pages.
        let twice = ok.values().filter(|&&n| n > 1).count();
        assert!(twice <= 16, "{store}: {twice} pages fetched twice");
        assert!(
            ok.values().all(|&n| n <= 2),
            "{store}: a page fetched three times"
        );
        eprintln!(
            "{store}: {} lines before the kill, {} after; {twice} pages fetched twice",
            before.len(),
            all.len()
        );
    }
}
