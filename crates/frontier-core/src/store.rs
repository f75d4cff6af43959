//! Where queued requests live: the synchronous [`Store`] trait and two in-memory stores.
//!
//! The frontier keeps the scheduling index in memory (per queued request: its sequence
//! number and a store [`Handle`](Store::Handle)) and hands the store everything that must
//! outlive the process: the encoded request, the fields needed to rebuild the index
//! ([`EntryMeta`]), the fingerprint marked seen in the same step, callback names, lease
//! marks, acknowledgements and, optionally, throttle scope states.
//!
//! On (re)opening, [`Store::recover`] replays all of it into a [`RecoveryVisitor`]:
//! entries still in the store are queued again (leased ones are redelivered), which is
//! what makes delivery at-least-once.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use polite_throttle_core::{ScopeHibernation, ScopeSnapshot, Timestamp};

use crate::fingerprint::Fingerprint;
use crate::spill::{Cell, Spill};

/// When a persistent store makes its changes durable (survive `kill -9` and power loss).
///
/// Exhaustive on purpose: every store implements each mode, so a new mode is a breaking
/// change for store implementations anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Every operation is durable when it returns (an fsync or commit per operation).
    EveryOp,
    /// Group commit: durable after `max_ops` operations or `max_delay`, whichever comes
    /// first, and on [`Store::flush`]. Operations in between may be lost by a crash;
    /// at-least-once delivery still holds for what was durable. Lease marks go with the
    /// next commit and never start one: a poll writes its mark after the request's send
    /// was allowed, and an fsync there would send it later than its scope recorded.
    /// Losing a mark loses no request (it is delivered again), only a redelivery count.
    Batched {
        /// Operations per commit.
        max_ops: u32,
        /// Longest time an operation waits to become durable.
        max_delay: core::time::Duration,
    },
    /// Only [`Store::flush`] (and a clean close) makes anything durable.
    OnClose,
}

impl Default for Durability {
    /// Group commit every 1,000 operations or 100 ms.
    fn default() -> Self {
        Durability::Batched {
            max_ops: 1000,
            max_delay: core::time::Duration::from_millis(100),
        }
    }
}

/// What the frontier needs to know about a queued request to schedule it, without
/// reading its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryMeta<'a> {
    /// The scope group (canonical scope set with amounts).
    pub group: &'a str,
    /// Effective priority (after `depth_priority`).
    pub priority: i32,
    /// Ordered as a start request.
    pub start: bool,
    /// Not before this instant (a per-request delay, already converted once).
    pub not_before: Option<Timestamp>,
}

/// Receives what a store holds when it is (re)opened.
pub trait RecoveryVisitor<H> {
    /// A callback name used by records.
    fn callback(&mut self, id: u32, name: &str);
    /// A fingerprint marked seen. Duplicate filters use only its first 64 bits
    /// ([`Fingerprint::prefix64`]): a store may persist just those and give the rest back
    /// zeroed.
    fn fingerprint(&mut self, fingerprint: &Fingerprint);
    /// A request still in the store; `leased` if it was handed out and never
    /// acknowledged. Stores yield entries in increasing `seq` order.
    fn entry(&mut self, seq: u64, meta: EntryMeta<'_>, handle: H, leased: bool);
    /// A saved throttle scope state.
    fn scope_state(&mut self, snapshot: ScopeSnapshot);
    /// Sequence numbers below this were used before (the store's high-water mark).
    fn next_seq(&mut self, next: u64);
}

/// Durable (or not) storage of a frontier's requests.
///
/// Calls are synchronous; async runtimes run them off the executor. Every method that
/// changes state is durable according to the store's own durability policy;
/// [`flush`](Store::flush) makes everything durable now.
pub trait Store {
    /// What the frontier keeps in memory per queued request to find it again (a file
    /// offset, nothing at all, or the payload itself for a store that persists nothing).
    type Handle;
    /// The store's error (naming the file and offset, the table, ...).
    type Error: core::error::Error + 'static;

    /// Whether calls may block on I/O. Async runtimes run blocking stores off the
    /// executor and call the others inline. Persistent stores keep the default.
    const BLOCKING: bool = true;

    /// A short name for stats (`volatile`, `reference`, `fs`, `sqlite`, ...).
    fn kind(&self) -> &'static str;

    /// Where the frontier's throttler puts the states of scopes it evicts, kept with
    /// the store so that memory stays bounded over millions of hosts and no backoff is
    /// forgotten (see [`ScopeHibernation`]). Called once, before
    /// [`recover`](Self::recover). With `resume` false, states kept by an earlier run
    /// are discarded. Default: `None` (evicted states that still matter stay in memory).
    fn hibernation(
        &mut self,
        resume: bool,
    ) -> Result<Option<Box<dyn ScopeHibernation + Send>>, Self::Error> {
        let _ = resume;
        Ok(None)
    }

    /// Replays everything the store holds. Called once, when a frontier opens the store.
    fn recover(
        &mut self,
        visitor: &mut dyn RecoveryVisitor<Self::Handle>,
    ) -> Result<(), Self::Error>;

    /// Persists a callback name before the first record that uses it.
    fn put_callback(&mut self, id: u32, name: &str) -> Result<(), Self::Error>;

    /// Adds a queued request and, in the same step, marks its fingerprint seen.
    fn push(
        &mut self,
        seq: u64,
        meta: &EntryMeta<'_>,
        payload: &[u8],
        fingerprint: Option<&Fingerprint>,
    ) -> Result<Self::Handle, Self::Error>;

    /// The payload of a queued or leased request: read into `buf` (and returned from
    /// it), or borrowed from where the store keeps it.
    fn load<'a>(
        &'a mut self,
        seq: u64,
        handle: &'a Self::Handle,
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], Self::Error>;

    // A cache hint between frontier-core and this workspace's stores, not part of the
    // store contract: hidden from the docs, and it may change or go without notice.
    // Stores outside this workspace should leave the defaults.
    #[doc(hidden)]
    /// Whether [`prefetch`](Self::prefetch) does anything: the frontier only looks up
    /// the next request's handle for a store that wants it (the lookup itself reads
    /// memory). Default: no.
    const PREFETCH: bool = false;

    // The cache hint (see `PREFETCH`): not part of the store contract.
    #[doc(hidden)]
    /// A hint that request `seq` is likely the next one [`load`](Self::load)ed: a store
    /// that keeps payloads in memory can start bringing it into the CPU cache. The
    /// frontier calls it one poll ahead when [`PREFETCH`](Self::PREFETCH) is set.
    /// Default: nothing.
    fn prefetch(&self, seq: u64, handle: &Self::Handle) {
        let _ = (seq, handle);
    }

    // The cache hint (see `PREFETCH`): not part of the store contract.
    #[doc(hidden)]
    /// Whether [`prefetch`](Self::prefetch) would do anything now, asked before the
    /// frontier looks the next request up (a store that sometimes has nothing to fetch
    /// spares it the lookup). Default: [`PREFETCH`](Self::PREFETCH).
    fn wants_prefetch(&self) -> bool {
        Self::PREFETCH
    }

    /// Marks a request as handed out.
    fn lease(&mut self, seq: u64, handle: &Self::Handle) -> Result<(), Self::Error>;

    /// Removes an acknowledged request.
    fn ack(&mut self, seq: u64, handle: Self::Handle) -> Result<(), Self::Error>;

    /// Puts a leased request back in the queue as `new_seq` with new metadata (a retry).
    fn requeue(
        &mut self,
        seq: u64,
        handle: Self::Handle,
        new_seq: u64,
        meta: &EntryMeta<'_>,
    ) -> Result<Self::Handle, Self::Error>;

    /// Marks fingerprints seen without queueing anything (importing `requests.seen`).
    fn add_fingerprints(&mut self, fingerprints: &[Fingerprint]) -> Result<(), Self::Error>;

    /// Replaces the saved throttle scope states.
    fn save_scope_states(&mut self, states: &[ScopeSnapshot]) -> Result<(), Self::Error>;

    /// Makes everything done so far durable.
    fn flush(&mut self) -> Result<(), Self::Error>;
}

/// Errors of the in-memory stores ([`VolatileStore`] and [`ReferenceStore`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryStoreError {
    /// No queued or leased request has this sequence number.
    UnknownSeq(u64),
    /// A request with this sequence number is already stored.
    DuplicateSeq(u64),
}

impl fmt::Display for MemoryStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryStoreError::UnknownSeq(s) => write!(f, "in-memory store: no request #{s}"),
            MemoryStoreError::DuplicateSeq(s) => {
                write!(f, "in-memory store: request #{s} already stored")
            }
        }
    }
}

impl core::error::Error for MemoryStoreError {}

/// A store that persists nothing: payloads live in the frontier's index and are gone
/// with it. The leanest choice for a crawl that does not need to resume.
///
/// A payload of up to [`INLINE_PAYLOAD`] bytes sits in its queue slot; a longer one in a
/// cell of the store's own (see [`Payload`]).
///
/// ```
/// use polite_frontier_core::{Frontier, FrontierConfig, Poll, Request, VolatileStore};
/// use polite_throttle_core::{Settings, Timestamp};
///
/// let now = Timestamp::ZERO;
/// let mut frontier =
///     Frontier::open(Settings::default(), FrontierConfig::default(), VolatileStore::new(), now)?;
/// let long = format!("https://example.com/{}", "a".repeat(200));
/// frontier.push(&Request::get(long.as_str()), now)?;
/// let Poll::Ready(lease) = frontier.poll(now)? else { unreachable!() };
/// assert_eq!(&*lease.request.url, long);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct VolatileStore {
    spill: Spill,
}

impl VolatileStore {
    /// An empty store.
    pub fn new() -> Self {
        VolatileStore::default()
    }

    /// The bytes a handle of this store holds (`None` for a handle from another store).
    #[inline]
    fn bytes<'a>(&'a self, handle: &'a Payload) -> Option<&'a [u8]> {
        match &handle.0 {
            PayloadRepr::Inline { len, bytes } => Some(&bytes[..usize::from(*len)]),
            PayloadRepr::Spilled(cell) => self.spill.get(cell),
            PayloadRepr::Heap(b) => Some(b),
        }
    }

    /// Lets go of a handle's bytes.
    #[inline]
    fn release(&mut self, handle: Payload) {
        if let PayloadRepr::Spilled(cell) = handle.0 {
            self.spill.free(cell);
        }
    }
}

impl fmt::Debug for VolatileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VolatileStore")
            .field("spilled_payloads", &self.spill.live())
            .field("spill_bytes", &self.spill.chunk_bytes())
            .finish()
    }
}

/// How many payload bytes a [`Payload`] holds without a heap allocation: a queued
/// request of [`VolatileStore`] then costs one 64-byte slot in its group's queue.
pub const INLINE_PAYLOAD: usize = 54;

/// A request's encoded bytes as [`VolatileStore`] keeps them (its handle): inline up to
/// [`INLINE_PAYLOAD`] bytes (the common case: a URL of about 80 characters with its host
/// left out), beyond that in a cell of the store's (up to 1 KiB; cells of a few sizes,
/// reused as soon as freed), and boxed on their own beyond that. Inline payloads cost no
/// allocation when pushed or acknowledged, and sit in the same cache line as the queue
/// slot pointing at them. Only the store that made a payload can read it.
pub struct Payload(PayloadRepr);

enum PayloadRepr {
    Inline {
        len: u8,
        bytes: [u8; INLINE_PAYLOAD],
    },
    Spilled(Cell),
    Heap(Box<[u8]>),
}

impl Payload {
    /// The number of bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            PayloadRepr::Inline { len, .. } => usize::from(*len),
            PayloadRepr::Spilled(cell) => cell.len(),
            PayloadRepr::Heap(b) => b.len(),
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes sit in the handle itself (at most [`INLINE_PAYLOAD`]).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, PayloadRepr::Inline { .. })
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match self.0 {
            PayloadRepr::Inline { .. } => "inline",
            PayloadRepr::Spilled(_) => "spilled",
            PayloadRepr::Heap(_) => "heap",
        };
        f.debug_struct("Payload")
            .field("len", &self.len())
            .field("place", &place)
            .finish()
    }
}

impl Store for VolatileStore {
    type Handle = Payload;
    type Error = MemoryStoreError;
    const BLOCKING: bool = false;
    const PREFETCH: bool = true;

    /// Only while spilled payloads are queued: an inline one sits in its queue slot,
    /// which the scheduler prefetches itself (and one over 1 KiB is rare enough to skip
    /// the lookup for).
    #[inline]
    fn wants_prefetch(&self) -> bool {
        self.spill.live() > 0
    }

    #[inline]
    fn prefetch(&self, _: u64, handle: &Payload) {
        if !handle.is_inline() {
            for line in self.bytes(handle).unwrap_or(&[]).iter().step_by(64).take(4) {
                polite_throttle_core::hooks::prefetch(line);
            }
        }
    }

    fn kind(&self) -> &'static str {
        "volatile"
    }
    /// Nothing to replay; a frontier opened on a store another frontier used drops that
    /// one's payloads (its handles went with it).
    fn recover(&mut self, _: &mut dyn RecoveryVisitor<Payload>) -> Result<(), MemoryStoreError> {
        self.spill.clear();
        Ok(())
    }
    fn put_callback(&mut self, _: u32, _: &str) -> Result<(), MemoryStoreError> {
        Ok(())
    }
    fn push(
        &mut self,
        _: u64,
        _: &EntryMeta<'_>,
        payload: &[u8],
        _: Option<&Fingerprint>,
    ) -> Result<Payload, MemoryStoreError> {
        if payload.len() <= INLINE_PAYLOAD {
            let mut bytes = [0; INLINE_PAYLOAD];
            bytes[..payload.len()].copy_from_slice(payload);
            return Ok(Payload(PayloadRepr::Inline {
                len: payload.len() as u8,
                bytes,
            }));
        }
        Ok(Payload(match self.spill.put(payload) {
            Some(cell) => PayloadRepr::Spilled(cell),
            None => PayloadRepr::Heap(Box::from(payload)),
        }))
    }
    #[inline]
    fn load<'a>(
        &'a mut self,
        seq: u64,
        handle: &'a Payload,
        _: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], MemoryStoreError> {
        self.bytes(handle).ok_or(MemoryStoreError::UnknownSeq(seq))
    }
    fn lease(&mut self, _: u64, _: &Payload) -> Result<(), MemoryStoreError> {
        Ok(())
    }
    #[inline]
    fn ack(&mut self, _: u64, handle: Payload) -> Result<(), MemoryStoreError> {
        self.release(handle);
        Ok(())
    }
    fn requeue(
        &mut self,
        _: u64,
        handle: Payload,
        _: u64,
        _: &EntryMeta<'_>,
    ) -> Result<Payload, MemoryStoreError> {
        Ok(handle)
    }
    fn add_fingerprints(&mut self, _: &[Fingerprint]) -> Result<(), MemoryStoreError> {
        Ok(())
    }
    fn save_scope_states(&mut self, _: &[ScopeSnapshot]) -> Result<(), MemoryStoreError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), MemoryStoreError> {
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct MemoryEntry {
    group: Box<str>,
    priority: i32,
    start: bool,
    not_before: Option<Timestamp>,
    leased: bool,
    payload: Box<[u8]>,
}

/// The reference store: keeps everything in memory and replays it when a frontier is
/// reopened on it (see [`Frontier::close`](crate::Frontier::close)). Every
/// operation is immediately "durable". Used by the conformance suite as the model the
/// persistent stores must match.
#[derive(Clone, Debug, Default)]
pub struct ReferenceStore {
    entries: BTreeMap<u64, MemoryEntry>,
    callbacks: BTreeMap<u32, Box<str>>,
    fingerprints: Vec<Fingerprint>,
    scope_states: Vec<ScopeSnapshot>,
    next_seq: u64,
}

impl ReferenceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queued and leased requests held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no request is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Fingerprints marked seen.
    pub fn seen(&self) -> usize {
        self.fingerprints.len()
    }

    /// Replaces the payload of a stored request (tests use it to simulate corruption).
    #[cfg(feature = "testing")]
    pub fn overwrite_payload(&mut self, seq: u64, payload: &[u8]) -> Result<(), MemoryStoreError> {
        let e = self
            .entries
            .get_mut(&seq)
            .ok_or(MemoryStoreError::UnknownSeq(seq))?;
        e.payload = Box::from(payload);
        Ok(())
    }

    fn entry(&mut self, seq: u64) -> Result<&mut MemoryEntry, MemoryStoreError> {
        self.entries
            .get_mut(&seq)
            .ok_or(MemoryStoreError::UnknownSeq(seq))
    }
}

impl Store for ReferenceStore {
    type Handle = ();
    type Error = MemoryStoreError;
    const BLOCKING: bool = false;

    fn kind(&self) -> &'static str {
        "reference"
    }

    fn recover(&mut self, v: &mut dyn RecoveryVisitor<()>) -> Result<(), MemoryStoreError> {
        for (id, name) in &self.callbacks {
            v.callback(*id, name);
        }
        for fp in &self.fingerprints {
            v.fingerprint(fp);
        }
        for s in &self.scope_states {
            v.scope_state(s.clone());
        }
        for (&seq, e) in &mut self.entries {
            let meta = EntryMeta {
                group: &e.group,
                priority: e.priority,
                start: e.start,
                not_before: e.not_before,
            };
            v.entry(seq, meta, (), e.leased);
            e.leased = false;
        }
        v.next_seq(self.next_seq);
        Ok(())
    }

    fn put_callback(&mut self, id: u32, name: &str) -> Result<(), MemoryStoreError> {
        self.callbacks.insert(id, Box::from(name));
        Ok(())
    }

    fn push(
        &mut self,
        seq: u64,
        meta: &EntryMeta<'_>,
        payload: &[u8],
        fingerprint: Option<&Fingerprint>,
    ) -> Result<(), MemoryStoreError> {
        if self.entries.contains_key(&seq) {
            return Err(MemoryStoreError::DuplicateSeq(seq));
        }
        self.entries.insert(
            seq,
            MemoryEntry {
                group: Box::from(meta.group),
                priority: meta.priority,
                start: meta.start,
                not_before: meta.not_before,
                leased: false,
                payload: Box::from(payload),
            },
        );
        if let Some(fp) = fingerprint {
            self.fingerprints.push(*fp);
        }
        self.next_seq = self.next_seq.max(seq + 1);
        Ok(())
    }

    fn load<'a>(
        &'a mut self,
        seq: u64,
        _: &'a (),
        _: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], MemoryStoreError> {
        Ok(&self.entry(seq)?.payload)
    }

    fn lease(&mut self, seq: u64, _: &()) -> Result<(), MemoryStoreError> {
        self.entry(seq)?.leased = true;
        Ok(())
    }

    fn ack(&mut self, seq: u64, _: ()) -> Result<(), MemoryStoreError> {
        self.entries
            .remove(&seq)
            .map(|_| ())
            .ok_or(MemoryStoreError::UnknownSeq(seq))
    }

    fn requeue(
        &mut self,
        seq: u64,
        _: (),
        new_seq: u64,
        meta: &EntryMeta<'_>,
    ) -> Result<(), MemoryStoreError> {
        if seq != new_seq && self.entries.contains_key(&new_seq) {
            return Err(MemoryStoreError::DuplicateSeq(new_seq));
        }
        let mut e = self
            .entries
            .remove(&seq)
            .ok_or(MemoryStoreError::UnknownSeq(seq))?;
        e.group = Box::from(meta.group);
        e.priority = meta.priority;
        e.start = meta.start;
        e.not_before = meta.not_before;
        e.leased = false;
        self.entries.insert(new_seq, e);
        self.next_seq = self.next_seq.max(new_seq + 1);
        Ok(())
    }

    fn add_fingerprints(&mut self, fingerprints: &[Fingerprint]) -> Result<(), MemoryStoreError> {
        self.fingerprints.extend_from_slice(fingerprints);
        Ok(())
    }

    fn save_scope_states(&mut self, states: &[ScopeSnapshot]) -> Result<(), MemoryStoreError> {
        self.scope_states = states.to_vec();
        Ok(())
    }

    fn flush(&mut self) -> Result<(), MemoryStoreError> {
        Ok(())
    }
}
