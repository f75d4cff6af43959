//! The `frontier` command's library: everything the binary does, callable from tests.
//!
//! - [`crawl`]: a polite, resumable crawler (`frontier crawl`, and `frontier demo`'s
//!   engine);
//! - [`sites`]: the local web of generated sites `frontier demo` crawls;
//! - [`simulate`]: the deterministic simulator and replay engine (docs/behaviour.md section 10);
//! - [`inspect`]: what a stored frontier holds;
//! - [`config`]: settings from TOML and the environment.
#![forbid(unsafe_code)]

pub mod commands;
pub mod config;
pub mod crawl;
pub mod inspect;
pub mod logging;
pub mod progress;
pub mod simulate;
pub mod sites;
pub mod stores;

/// A mistake in how the command was called or configured (exit status 2), as opposed
/// to a failure while it ran (status 1).
#[derive(Debug)]
pub struct UsageError(String);

impl UsageError {
    /// A usage error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        UsageError(message.into())
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The exit status of an error: 2 for usage and configuration errors, 1 otherwise.
pub fn exit_status(error: &anyhow::Error) -> u8 {
    let usage = error
        .chain()
        .any(|e| e.is::<UsageError>() || e.is::<config::ConfigError>());
    if usage { 2 } else { 1 }
}
