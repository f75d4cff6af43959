//! Running `frontier simulate` on a scenario written to a temporary file: shared by the
//! simulate tests (each uses part of it).
#![allow(dead_code)]

use std::process::{Command, Output};

/// Writes `text` to a temporary file called `name` and runs `frontier simulate ARGS FILE`.
pub(crate) fn simulate_file(name: &str, text: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_frontier"))
        .arg("simulate")
        .args(args)
        .arg(&path)
        .output()
        .unwrap()
}

/// [`simulate_file`] that must succeed: its stdout lines.
#[track_caller]
pub(crate) fn simulate_lines(name: &str, text: &str, args: &[&str]) -> Vec<String> {
    let out = simulate_file(name, text, args);
    assert!(
        out.status.success(),
        "simulate failed ({}): {}\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The `"summary"` object of the last line.
pub(crate) fn summary(lines: &[String]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    v["summary"].clone()
}
