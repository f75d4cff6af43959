//! The `--out` file: one JSON line per finished URL, appended.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// One finished URL.
#[derive(Debug, Serialize)]
pub struct PageLine<'a> {
    /// The URL.
    pub url: &'a str,
    /// The page whose link (or redirect) queued it; `null` for seeds and sitemap pages.
    pub referer: Option<&'a str>,
    /// Where the answer leads: the URL itself, or a redirect's target (each hop is a
    /// request of its own, with its own line); `null` when there was no answer.
    pub final_url: Option<&'a str>,
    /// Milliseconds from sending the request to the body's end.
    pub elapsed_ms: Option<f64>,
    /// SHA-256 of the body received (hex), as kept (see `truncated`).
    pub sha256: Option<&'a str>,
    /// The body was cut at `crawl.download_maxsize`.
    pub truncated: bool,
    /// The final status (`null` when no response: an error, or robots.txt disallowed it).
    pub status: Option<u16>,
    /// Link depth from the seeds.
    pub depth: u32,
    /// When it finished, RFC 3339 UTC.
    pub fetched_at: String,
    /// Body bytes received.
    pub bytes: u64,
    /// The `Content-Type` answered.
    pub content_type: Option<&'a str>,
    /// Why there is no status, or why the status is final.
    pub error: Option<&'a str>,
    /// Retries it took.
    pub retries: u32,
    /// A redirect's target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<&'a str>,
}

/// The output file, shared by the workers: each line goes to the OS in one write.
pub struct OutFile {
    path: PathBuf,
    file: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for OutFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutFile").field("path", &self.path).finish()
    }
}

impl OutFile {
    /// Opens `path` for appending (created if missing); `-` is standard output. A last
    /// line cut short by a crash is ended first, so every later line parses.
    pub fn open(path: &Path) -> std::io::Result<OutFile> {
        if path.as_os_str() == "-" {
            return Ok(OutFile {
                path: path.to_path_buf(),
                file: Mutex::new(Box::new(std::io::stdout())),
            });
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::End(-1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(OutFile {
            path: path.to_path_buf(),
            file: Mutex::new(Box::new(file)),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line.
    pub fn write(&self, line: &PageLine<'_>) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&bytes)?;
        file.flush()
    }
}

/// `t` as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T20:53:01.123Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_123); // leap day 2000
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        assert_eq!(rfc3339(t), "2026-11-30T00:53:20.000Z");
    }

    #[test]
    fn a_torn_last_line_is_ended_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{\"url\":\"a\"}\n{\"url\":\"b").unwrap();
        let out = OutFile::open(&path).unwrap();
        out.write(&PageLine {
            url: "c",
            referer: None,
            final_url: Some("c"),
            elapsed_ms: Some(1.0),
            sha256: None,
            truncated: false,
            status: Some(200),
            depth: 1,
            fetched_at: "x".into(),
            bytes: 3,
            content_type: None,
            error: None,
            retries: 0,
            location: None,
        })
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(serde_json::from_str::<serde_json::Value>(lines[2]).is_ok());
    }
}
