//! The `requests.seen` reader: Scrapy's `RFPDupeFilter` file, one hex fingerprint a line.

use alloc::vec::Vec;
use core::fmt;

use super::{Fingerprint, FingerprintError};

/// An invalid line in a `requests.seen` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenFileError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with the line.
    pub error: FingerprintError,
}

impl fmt::Display for SeenFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "requests.seen line {}: {}", self.line, self.error)
    }
}

impl core::error::Error for SeenFileError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Streaming reader over the content of a Scrapy `requests.seen` file.
///
/// Yields one fingerprint per non-blank line. Surrounding ASCII whitespace
/// (including a `\r` from CRLF files) is ignored; blank lines are skipped.
/// Created by [`read_seen_file`].
#[derive(Debug, Clone)]
pub struct SeenFileReader<'a> {
    rest: &'a str,
    line: usize,
}

impl Iterator for SeenFileReader<'_> {
    type Item = Result<Fingerprint, SeenFileError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let (line, rest) = match self.rest.find('\n') {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, ""),
            };
            self.rest = rest;
            self.line += 1;
            let trimmed = line.trim_matches(|c: char| c.is_ascii_whitespace());
            if trimmed.is_empty() {
                continue;
            }
            return Some(
                Fingerprint::from_hex(trimmed).map_err(|error| SeenFileError {
                    line: self.line,
                    error,
                }),
            );
        }
        None
    }
}

/// Iterates over the fingerprints in a `requests.seen` file's content without
/// collecting them (see [`SeenFileReader`]).
pub fn read_seen_file(text: &str) -> SeenFileReader<'_> {
    SeenFileReader {
        rest: text,
        line: 0,
    }
}

/// Parses a whole `requests.seen` file's content (one hex fingerprint per line;
/// blank lines and a trailing newline are fine). Stops at the first bad line.
pub fn parse_seen_file(text: &str) -> Result<Vec<Fingerprint>, SeenFileError> {
    read_seen_file(text).collect()
}
