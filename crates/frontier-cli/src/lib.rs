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
pub mod progress;
pub mod simulate;
pub mod sites;
pub mod stores;
