//! # polite-store-fs
//!
//! A crash-safe, bounded-memory [`Store`](polite_frontier_core::Store) for the crawl frontier, in
//! a directory: an append-only segmented log with a checksum per record, a compact
//! in-memory index, and compaction that runs inline (no background thread) when garbage
//! outweighs live data.
//!
//! ```
//! use polite_frontier_core::{Frontier, FrontierConfig, Poll, PushOutcome, Request};
//! use polite_store_fs::{FsConfig, FsStore};
//! use polite_throttle_core::{Settings, Timestamp};
//!
//! let dir = tempfile::tempdir()?;
//! let now = Timestamp::ZERO;
//! let settings = Settings::default().without_jitter();
//!
//! let store = FsStore::open(dir.path(), FsConfig::default())?;
//! let mut frontier = Frontier::open(settings.clone(), FrontierConfig::default(), store, now)?;
//! frontier.push(&Request::get("https://example.com/a").callback("parse"), now)?;
//! frontier.push(&Request::get("https://example.com/b").callback("parse"), now)?;
//! let Poll::Ready(lease) = frontier.poll(now)? else { panic!("expected a request") };
//! // The process stops before `lease` is completed (a clean close here; `kill -9` after a
//! // flush gives the same result).
//! drop(frontier.close()?);
//!
//! let store = FsStore::open(dir.path(), FsConfig::default())?;
//! let mut frontier = Frontier::open(settings, FrontierConfig::default(), store, now)?;
//! assert_eq!(frontier.len(), 2, "the unacknowledged lease is queued again");
//! assert_eq!(frontier.stats().redelivered, 1);
//! assert_eq!(
//!     frontier.push(&Request::get("https://example.com/a"), now)?,
//!     PushOutcome::Duplicate,
//!     "the duplicate filter survived"
//! );
//! # let _ = lease;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Design
//!
//! The frontier already keeps, per queued request, its sequence number and a store
//! handle. Here the handle ([`FsHandle`], 8 bytes) is the record's place on disk: a
//! segment number and a byte offset. So the store needs no map from sequence numbers to
//! places, and loading a request is a look into the segment's read-only memory map (or
//! one positional read with [`FsConfig::mmap_reads`] off, or a copy from the write
//! buffer for the newest records). What the store itself keeps in memory is small:
//!
//! - a bitmap of held sequence numbers with a lease bit each, in 64-number chunks kept
//!   only while one of their numbers is held: under a byte per queued request, since the
//!   frontier hands out numbers densely (a scattered straggler costs ~30 bytes);
//! - the scope-group table (group key ↔ small number), one row per group in use;
//! - callback names (a handful);
//! - after compaction moved records, a map from their sequence numbers to their new
//!   places (~17 bytes per moved request; handles into deleted segments are followed
//!   through it, until the request is acknowledged or the store reopened);
//! - a 256 KiB write buffer.
//!
//! Payloads stay on disk. Opening scans the log once and keeps a 32-byte line per held
//! request until [`Store::recover`](polite_frontier_core::Store::recover) has replayed them in
//! sequence order (the frontier rebuilds its own index from them); recovery streams
//! fingerprints and never loads payloads.
//!
//! ### Files
//!
//! | file | what |
//! |---|---|
//! | `LOCK` | an OS file lock (`flock`) held while the store is open; holds the pid |
//! | `seg-0000000001.log`, … | log segments, numbered without gaps; the newest is appended to |
//! | `seen.dat` | fingerprints moved out of compacted segments (append-only) |
//! | `scopes.dat` | throttle scope states, replaced atomically (temp file, fsync, rename, fsync of the directory) |
//! | `hibernated.log` | states of scopes the throttler evicted from memory (append-only, checksummed records; a tombstone when a scope wakes), indexed in memory by a 64-bit name hash (about 20-40 bytes per scope), rewritten when mostly dead; synced with each flush |
//!
//! Every file starts with an 8-byte magic number and a 2-byte format version
//! ([`FORMAT_VERSION`]); a file from a newer version is refused with a clear error.
//! Integers are little-endian; "varint" is LEB128.
//!
//! **Segment header** (32 bytes): magic `PFSEGLOG`, version `u16`, flags `u16` (0),
//! segment number `u32`, base sequence number `u64` (the next unused sequence number when
//! the segment was created: the high-water mark survives when every record is
//! compacted away), reserved `u32`, CRC-32 of the preceding 28 bytes.
//!
//! **Record** (after the header, back to back): CRC-32 `u32` of the length bytes and the
//! body, body length as a varint, body. The body's first byte is the record kind (low 3
//! bits) and flags (high 5 bits, entries only):
//!
//! | kind | body after the kind byte | written by |
//! |---|---|---|
//! | 1 entry | seq; replaced seq (flag `0x80`); group number; priority (zigzag); not-before ns (flag `0x40`); 8-byte fingerprint prefix (flag `0x20`); payload (the rest). Flags `0x08` start request, `0x10` leased when copied | `push`, `requeue` (one record replaces the old request: atomic), compaction |
//! | 2 lease | seq | `lease` |
//! | 3 ack | seq | `ack` |
//! | 4 callback | callback id; name (UTF-8, the rest) | `put_callback`, carried forward by compaction |
//! | 5 group | group number; group key (UTF-8, the rest) | the first request of a scope group, carried forward while used |
//! | 6 fingerprints | 8-byte prefixes | `add_fingerprints` |
//! | 7 unlease | nothing: every lease before it was reported by `recover` and queued again | `recover` |
//!
//! Numbers are varints. A fingerprint is stored as its first 64 bits, which is all the
//! duplicate filters use ([`Fingerprint::prefix64`](polite_frontier_core::Fingerprint::prefix64));
//! `recover` gives the rest back zeroed. An entry carries the fingerprint marked seen with
//! it, so "queued" and "seen" become durable in the same record.
//!
//! **Seen file**: header (magic `PFSSEEN\0`, version, flags, CRC of the first 12 bytes),
//! then blocks of CRC-32 `u32` (of the count and the data), count `u32` (1..=8192),
//! `count` 8-byte prefixes.
//!
//! **Scope-state file**: magic `PFSCOPES`, version, flags, body length `u32`, CRC-32 of the
//! preceding 16 bytes and the body, body: the postcard encoding of
//! `Vec<polite_throttle_core::ScopeSnapshot>`.
//!
//! ### Compaction
//!
//! When the log is more than twice the estimated size of the held requests plus two
//! segments, each new segment triggers the compaction of up to two of the oldest
//! segments, always the oldest first; so does each commit, one segment at a time, when
//! the oldest segment is mostly garbage (per-segment counters of entries and held
//! requests tell), so a crawl that only completes requests still gives space back.
//! Compacting a segment copies its held entries to the
//! end of the log (without their fingerprints, with their current lease bit), carries
//! callback names and still-used group names forward, appends all its fingerprints to
//! `seen.dat`, makes both durable, and only then deletes the segment. Lease, ack and
//! unlease records are dropped: working oldest first, the entry such a record refers to
//! was written before it, so it is in the same segment or already gone. A crash midway
//! leaves duplicates (the newest copy wins on recovery), never a loss. Each step costs
//! one segment read, so the pause is bounded by [`FsConfig::segment_size`]; overall the
//! log stays within about twice the live data, and every byte is copied a bounded number
//! of times. [`FsStore::compact`] compacts everything at once.
//!
//! ### Corruption and torn writes
//!
//! A crash can only leave a torn tail on the newest segment (older ones were fsynced when
//! the log moved past them) or on the seen file. Opening checks every record's CRC. A bad
//! record in the newest segment after which no valid record follows is a torn tail: the
//! file is truncated there with a `tracing` warning. Anything else (a bad record followed
//! by good ones, damage in an older segment or a header, a missing segment, a wrong magic
//! number or version) is an [`FsError`] naming the file and byte offset. Nothing panics.
//!
//! ### Why not a checkpoint plus a log, or SQLite-style pages?
//!
//! A queue's records die young (acknowledged) or live long (low priority), and what a
//! crawl needs is append speed and a bound on space. A log with oldest-first copying
//! gives sequential writes only, one fsync per group commit, and no separate checkpoint
//! to keep consistent with the log: the log *is* the checkpoint. Fingerprints, which are
//! never garbage, leave the log at their first compaction, so they are not copied again
//! and again.
//!
//! ## Durability and locking
//!
//! See [`FsStore`](FsStore#durability) for the policies. The `LOCK` file is locked with
//! `std::fs::File::try_lock`; a second open of the same directory (from another process
//! or this one) fails with [`FsError::Locked`] while the first is open. The OS releases
//! the lock when a process dies, so a store can be reopened right after `kill -9`.
// One audited exception, `map_sealed` (memory-mapping sealed segments).
#![deny(unsafe_code)]

mod config;
mod error;
mod files;
mod format;
mod hibernation;
mod liveset;
mod store;

pub use config::FsConfig;
pub use error::FsError;
pub use format::FORMAT_VERSION;
pub use store::{FsHandle, FsStats, FsStore};

// The README's examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
