//! Frontier counters, named as Scrapy names them.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Counters of a frontier since it was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrontierStats {
    /// The store's kind (`volatile`, `reference`, `fs`, `sqlite`, ...), used in per-store
    /// names.
    pub store: &'static str,
    /// `scheduler/enqueued`: requests queued (pushes and retries).
    pub enqueued: u64,
    /// `scheduler/dequeued`: requests handed out by `poll`.
    pub dequeued: u64,
    /// `dupefilter/filtered`: duplicates dropped.
    pub filtered: u64,
    /// `depth/request_ignored_count`: requests dropped by `depth_limit`.
    pub depth_ignored: u64,
    /// `request_depth_max`: the deepest request pushed.
    pub depth_max: u32,
    /// `scheduler/leased`: leases handed out.
    pub leased: u64,
    /// `scheduler/acked`: leases completed.
    pub acked: u64,
    /// `scheduler/retried`: leases put back by `retry`.
    pub retried: u64,
    /// `scheduler/redelivered`: unacknowledged leases queued again on open.
    pub redelivered: u64,
}

impl FrontierStats {
    pub(crate) fn new(store: &'static str) -> Self {
        FrontierStats {
            store,
            ..Default::default()
        }
    }

    /// Every counter under its Scrapy-style name.
    ///
    /// ```
    /// use polite_frontier_core::{Frontier, Request};
    /// use polite_throttle_core::{Settings, Timestamp};
    ///
    /// let mut f = Frontier::in_memory(Settings::default(), Timestamp::ZERO).unwrap();
    /// f.push(&Request::get("https://example.com/"), Timestamp::ZERO).unwrap();
    /// f.push(&Request::get("https://example.com/"), Timestamp::ZERO).unwrap();
    /// let stats = f.stats().named();
    /// assert!(stats.contains(&("scheduler/enqueued".to_string(), 1)));
    /// assert!(stats.contains(&("scheduler/enqueued/volatile".to_string(), 1)));
    /// assert!(stats.contains(&("dupefilter/filtered".to_string(), 1)));
    /// ```
    pub fn named(&self) -> Vec<(String, u64)> {
        let s = self.store;
        [
            ("scheduler/enqueued".into(), self.enqueued),
            (format!("scheduler/enqueued/{s}"), self.enqueued),
            ("scheduler/dequeued".into(), self.dequeued),
            (format!("scheduler/dequeued/{s}"), self.dequeued),
            ("dupefilter/filtered".into(), self.filtered),
            ("depth/request_ignored_count".into(), self.depth_ignored),
            ("request_depth_max".into(), u64::from(self.depth_max)),
            ("scheduler/leased".into(), self.leased),
            ("scheduler/acked".into(), self.acked),
            ("scheduler/retried".into(), self.retried),
            ("scheduler/redelivered".into(), self.redelivered),
        ]
        .into()
    }
}
