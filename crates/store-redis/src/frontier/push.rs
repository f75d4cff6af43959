//! Pushing: requests encoded with group keys and callbacks, dedup shape, pipelined batches.

use std::sync::Arc;

use polite_frontier_core::{
    FrontierError, PushOutcome, Request, RequestId, group_key, parse_group_key,
};
use polite_throttle_core::Timestamp;
use polite_throttle_core::hooks::secs_to_duration;
use redis::Value;

use crate::error::RedisStoreError;
use crate::params::kind_digit;

use super::RedisFrontier;
use super::Result;
use super::reply::{as_u64, nanos, protocol, store_err};
use super::server_code::ServerCode;

// Named by the docs.
#[cfg(doc)]
use super::RedisConfig;

impl RedisFrontier {
    /// The crawl-wide number of a callback name (asking the server the first time).
    fn callback_id(&mut self, name: &Arc<str>) -> Result<()> {
        if self.callbacks.contains_key(name) {
            return Ok(());
        }
        let v = self.call("callback", false, &[name.as_bytes().to_vec()])?;
        let id = as_u64(&v)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| protocol("callback", "no number"))?;
        self.codec.callbacks_mut().restore(id, name).map_err(|e| {
            store_err(RedisStoreError::Corrupt {
                detail: e.to_string(),
            })
        })?;
        self.callbacks.insert(name.clone(), id);
        Ok(())
    }

    /// Encodes one request for the `push` operation at the end of `batch` (the script's
    /// `PUSHFMT`: group key, the scopes' kinds, fingerprint, priority, flags, delay,
    /// depth, body); `false` if it is not pushed (too deep).
    fn encode_push(&mut self, request: &Request, batch: &mut Vec<u8>) -> Result<bool> {
        if self.config.frontier.depth_limit > 0 && request.depth > self.config.frontier.depth_limit
        {
            return Ok(false);
        }
        let delay_ns = match request.delay {
            None => None,
            Some(d) if d.is_finite() && d >= 0.0 => Some(nanos(secs_to_duration(d))),
            Some(d) => {
                return Err(FrontierError::InvalidRequest(invalid(
                    request,
                    format!("delay must be a finite number of seconds >= 0, got {d}"),
                )));
            }
        };
        let mut key = std::mem::take(&mut self.key);
        if request.dont_throttle {
            key.clear();
        } else if let Err(e) = group_key(request, &mut key) {
            self.key = key;
            return Err(FrontierError::InvalidRequest(e));
        }
        let out = self.encode_with_key(request, &key, delay_ns, batch);
        self.key = key;
        out.map(|()| true)
    }

    fn encode_with_key(
        &mut self,
        request: &Request,
        key: &str,
        delay_ns: Option<u64>,
        batch: &mut Vec<u8>,
    ) -> Result<()> {
        let kinds: String = if key.is_empty() {
            String::new()
        } else {
            parse_group_key(key)
                .map_err(FrontierError::CorruptGroup)?
                .iter()
                .map(|(n, _)| {
                    if self.settings.scopes.contains_key(*n) {
                        'N'
                    } else {
                        kind_digit(n)
                    }
                })
                .collect()
        };
        // A pushed fingerprint carries one 5-byte bit position per hash.
        let mut fp = [0u8; 1 + 5 * polite_frontier_core::BloomFilter::MAX_HASHES as usize];
        let fp_len = if request.dont_filter || self.dedup == Dedup::Off {
            0
        } else {
            let f = self
                .fingerprinter
                .fingerprint(request.method.as_str(), &request.url, request.body_bytes())
                .map_err(|e| FrontierError::InvalidRequest(invalid(request, e.to_string())))?;
            match self.dedup {
                Dedup::Bloom { bits, hashes } => {
                    // 'B', then the bit positions, 5 bytes each.
                    fp[0] = b'B';
                    let mut at = 1;
                    for pos in bloom_positions(f.prefix64(), bits, hashes) {
                        fp[at..at + 5].copy_from_slice(&pos.to_be_bytes()[3..]);
                        at += 5;
                    }
                    at
                }
                _ => {
                    fp[..8].copy_from_slice(&f.prefix64().to_be_bytes());
                    8
                }
            }
        };
        if let Some(cb) = &request.callback {
            let cb = cb.clone();
            self.callback_id(&cb)?;
        }
        let priority = request.priority.saturating_sub(
            (request.depth as i32).saturating_mul(self.config.frontier.depth_priority),
        );
        let explicit = request.scopes.as_ref().is_some_and(|s| !s.is_empty());
        let host = (!explicit && !request.dont_throttle).then_some(key);
        let mut flags = 0u8;
        if request.start {
            flags |= 1;
        }
        if request.dont_track {
            flags |= 2;
        }
        self.payload.clear();
        let fresh = self
            .codec
            .encode(request, host, &mut self.payload)
            .map_err(FrontierError::Encode)?;
        debug_assert!(
            fresh.is_none(),
            "callbacks are interned with the server first"
        );
        let too_long = |what: &str| {
            FrontierError::InvalidRequest(invalid(request, format!("{what} is too long")))
        };
        let key_len = u32::try_from(key.len()).map_err(|_| too_long("the group key"))?;
        let kinds_len = u16::try_from(kinds.len()).map_err(|_| too_long("the list of scopes"))?;
        let body_len =
            u32::try_from(1 + self.payload.len()).map_err(|_| too_long("the request"))?;
        batch.extend_from_slice(&key_len.to_be_bytes());
        batch.extend_from_slice(key.as_bytes());
        batch.extend_from_slice(&kinds_len.to_be_bytes());
        batch.extend_from_slice(kinds.as_bytes());
        batch.push(fp_len as u8);
        batch.extend_from_slice(&fp[..fp_len]);
        batch.extend_from_slice(&priority.to_be_bytes());
        batch.push(u8::from(request.start) | if delay_ns.is_some() { 2 } else { 0 });
        // The script's times are doubles: the same rounding as its `tonumber` of the
        // decimal nanoseconds.
        batch.extend_from_slice(&(delay_ns.unwrap_or(0) as f64).to_be_bytes());
        batch.extend_from_slice(&request.depth.to_be_bytes());
        batch.extend_from_slice(&body_len.to_be_bytes());
        batch.push(flags);
        batch.extend_from_slice(&self.payload);
        Ok(())
    }

    /// Queues a request unless it is a duplicate (checked and marked in the same atomic
    /// step) or deeper than `depth_limit`.
    pub fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome> {
        Ok(self.push_all(std::slice::from_ref(request), now)?.remove(0))
    }

    /// Queues many requests: batches of [`RedisConfig::push_batch`] per script call, the
    /// calls pipelined in one round trip. Each request is atomic on its own (a
    /// connection lost midway leaves a prefix of the batch queued; pushing it again is
    /// safe, the duplicate filter drops what made it).
    pub fn push_all(&mut self, requests: &[Request], now: Timestamp) -> Result<Vec<PushOutcome>> {
        let refs: Vec<&Request> = requests.iter().collect();
        self.push_each(&refs, now)
    }

    /// [`push_all`](Self::push_all) over borrowed requests (a sharded crawl's share of a
    /// batch, without copies).
    pub(super) fn push_each(
        &mut self,
        requests: &[&Request],
        now: Timestamp,
    ) -> Result<Vec<PushOutcome>> {
        let mut outcomes = vec![PushOutcome::TooDeep; requests.len()];
        // Per script call: the requests' indexes and their packed arguments.
        let mut batches: Vec<(Vec<usize>, Vec<u8>)> = Vec::new();
        let per = self.config.push_batch.max(1);
        let mut too_deep = 0u64;
        for (i, r) in requests.iter().enumerate() {
            if batches.last().is_none_or(|b| b.0.len() >= per) {
                batches.push((Vec::new(), Vec::new()));
            }
            let b = batches.last_mut().expect("just pushed");
            if self.encode_push(r, &mut b.1)? {
                b.0.push(i);
            } else {
                too_deep += 1;
            }
        }
        batches.retain(|b| !b.0.is_empty());
        if too_deep > 0 {
            self.call("too_deep", true, &[too_deep.to_string().into_bytes()])?;
        }
        if batches.is_empty() {
            return Ok(outcomes);
        }
        let replies = self.pipelined_push(&batches, now)?;
        for (n, ((idx, _), reply)) in batches.iter().zip(replies).enumerate() {
            let what = |detail: &str| {
                protocol(
                    "push",
                    format!(
                        "reply {} of {} in the pipeline: {detail}",
                        n + 1,
                        batches.len()
                    ),
                )
            };
            let Value::Array(items) = reply else {
                return Err(what("not an array"));
            };
            if items.len() != idx.len() {
                return Err(what("wrong number of results"));
            }
            for (&i, item) in idx.iter().zip(items) {
                outcomes[i] = match item {
                    Value::Int(-1) => PushOutcome::Duplicate,
                    other => PushOutcome::Queued(RequestId(
                        as_u64(&other).ok_or_else(|| what("bad sequence number"))?,
                    )),
                };
            }
        }
        Ok(outcomes)
    }

    fn pipelined_push(
        &mut self,
        batches: &[(Vec<usize>, Vec<u8>)],
        now: Timestamp,
    ) -> Result<Vec<Value>> {
        let time = self.time_arg(now);
        let mut pipe = redis::pipe();
        for (_, blob) in batches {
            pipe.add_command(self.code.command_with(&self.prefix, "push", &time, blob));
        }
        let code = self.code.clone();
        let conn = self.conn()?;
        if !conn.supports_pipelining() {
            // A cluster connection: one call after the other (same slot, same node).
            let mut out = Vec::with_capacity(batches.len());
            for (_, blob) in batches {
                out.push(self.call_at_with("push", Some(now), blob)?);
            }
            return Ok(out);
        }
        let mut result = pipe.query::<Vec<Value>>(conn);
        if let Err(e) = &result
            && ServerCode::is_missing(e)
        {
            // Nothing ran: every command of the pipeline failed the same way.
            result = code
                .load(conn)
                .and_then(|()| pipe.query::<Vec<Value>>(conn));
        }
        result.map_err(|e| {
            let e = RedisStoreError::from_pipeline("push", batches.len(), e);
            if e.is_connection_error() {
                self.conn = None;
            }
            store_err(e)
        })
    }
}

/// The crawl's duplicate filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dedup {
    Off,
    /// Binary 64-bit fingerprints in a set.
    Exact,
    /// A Bloom filter of `bits` bits with `hashes` hash functions, in Redis strings of
    /// 2^30 bits each, set atomically by the script.
    Bloom {
        bits: u64,
        hashes: u32,
    },
}

impl Dedup {
    pub(super) fn describe(self) -> String {
        match self {
            Dedup::Off => "off".into(),
            Dedup::Exact => "exact".into(),
            Dedup::Bloom { bits, hashes } => format!("bloom:{bits}:{hashes}"),
        }
    }
}

/// The size and number of hashes of polite-frontier-core's Bloom filter for `capacity` URLs at
/// false-positive rate `p` (its own sizing, so both filters match bit for bit).
pub(super) fn bloom_shape(capacity: u64, p: f64) -> Result<Dedup> {
    let (bits, hashes) =
        polite_frontier_core::BloomFilter::shape(capacity, p).map_err(FrontierError::DupeFilter)?;
    Ok(Dedup::Bloom { bits, hashes })
}

/// The bit positions of a fingerprint (enhanced double hashing from its first 64 bits,
/// as polite-frontier-core's `BloomFilter`).
fn bloom_positions(h: u64, m: u64, k: u32) -> impl Iterator<Item = u64> {
    let mut h1 = h;
    let mut h2 = {
        let mut z = h1 ^ 0x9E37_79B9_7F4A_7C15;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) | 1
    };
    (0..u64::from(k)).map(move |i| {
        let pos = ((u128::from(h1) * u128::from(m)) >> 64) as u64;
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(i);
        pos
    })
}

pub(super) fn invalid(request: &Request, reason: String) -> polite_frontier_core::InvalidRequest {
    polite_frontier_core::InvalidRequest::new(&request.url, reason)
}
