//! Polling and completing: leases out (one or a batch), peeking, outcomes and retries back.

use std::sync::Arc;

use polite_frontier_core::{DecodeErrorKind, FrontierError, Lease, Poll, Request, RequestId};
use polite_throttle_core::{Outcome, Timestamp};
use redis::Value;

use crate::error::RedisStoreError;

use super::RedisFrontier;
use super::Result;
use super::reply::{as_bytes, as_f64, as_u64, nanos, protocol, store_err};

// Named by the docs.
#[cfg(doc)]
use super::RedisConfig;

impl RedisFrontier {
    fn decode(&mut self, seq: u64, body: &[u8], key: &str) -> Result<Request> {
        for _ in 0..2 {
            match self.codec.decode(body, Some(key)) {
                Ok(r) => return Ok(r),
                Err(e) => {
                    if let DecodeErrorKind::UnknownCallback(id) = e.kind() {
                        let v =
                            self.call("callback_name", false, &[id.to_string().into_bytes()])?;
                        if let Some(name) = as_bytes(&v).and_then(|b| std::str::from_utf8(b).ok()) {
                            let name: Arc<str> = Arc::from(name);
                            if self.codec.callbacks_mut().restore(id, &name).is_ok() {
                                self.callbacks.insert(name, id);
                                continue;
                            }
                        }
                    }
                    return Err(FrontierError::Corrupt {
                        lease: RequestId(seq),
                        source: e,
                    });
                }
            }
        }
        unreachable!("a known callback decodes or fails for another reason")
    }

    /// The next request that may be sent at `now`, leased (for
    /// [`RedisConfig::lease_timeout`]); or until when nothing may go. Expired leases of
    /// other workers are delivered again first.
    ///
    /// A payload that does not decode gives [`FrontierError::Corrupt`]; its lease stays
    /// out: [`complete`](Self::complete) drops it.
    pub fn poll(&mut self, now: Timestamp) -> Result<Poll> {
        let (mut leases, why) = self.poll_inner(now, 1)?;
        match leases.pop() {
            Some(lease) => lease.map(Poll::Ready),
            None => Ok(why),
        }
    }

    /// Up to `max` leases in one round trip: what `max` polls at `now`, one after the
    /// other, would hand out (a worker with many fetch slots). Empty when nothing may go;
    /// then [`poll_timeout`](Self::poll_timeout) says when to look again. A lease whose
    /// payload does not decode comes back as [`FrontierError::Corrupt`] in its place.
    pub fn poll_batch(&mut self, now: Timestamp, max: usize) -> Result<Vec<Result<Lease>>> {
        Ok(self.poll_inner(now, max.max(1))?.0)
    }

    pub(super) fn poll_inner(
        &mut self,
        now: Timestamp,
        max: usize,
    ) -> Result<(Vec<Result<Lease>>, Poll)> {
        let args = vec![
            nanos(self.config.lease_timeout).to_string().into_bytes(),
            self.config.redeliver_batch.to_string().into_bytes(),
            max.to_string().into_bytes(),
        ];
        let v = self.call_at("poll", Some(now), &args)?;
        let Value::Array(items) = v else {
            return Err(protocol("poll", "not an array"));
        };
        let n = items
            .first()
            .and_then(as_u64)
            .ok_or_else(|| protocol("poll", "no count"))? as usize;
        if items.len() != 1 + 3 * n + 6 {
            return Err(protocol("poll", "wrong length"));
        }
        let tail = &items[1 + 3 * n..];
        self.in_flight = as_u64(&tail[2]).ok_or_else(|| protocol("poll", "leases"))? as usize;
        let server_now = as_f64(&tail[3]).ok_or_else(|| protocol("poll", "time"))?;
        let expiry = as_f64(&tail[4]).ok_or_else(|| protocol("poll", "expiry"))?;
        let event = as_f64(&tail[5]).ok_or_else(|| protocol("poll", "event"))?;
        let mut timeout = None::<Timestamp>;
        for t in [expiry, event] {
            if t >= 0.0 {
                let t = self.to_caller(t, server_now, now);
                timeout = Some(timeout.map_or(t, |x| x.min(t)));
            }
        }
        let why = match as_bytes(&tail[0]) {
            Some(b"until") => {
                let t = as_f64(&tail[1]).ok_or_else(|| protocol("poll", "until"))?;
                Poll::NotUntil(self.to_caller(t, server_now, now))
            }
            Some(b"blocked") => Poll::Blocked,
            Some(b"empty") => Poll::Empty,
            Some(b"more") => Poll::Blocked,
            _ => return Err(protocol("poll", "unknown answer")),
        };
        // Work freed by other processes wakes nobody here: look again after `recheck`.
        if n == 0
            && (matches!(why, Poll::Blocked) || (matches!(why, Poll::Empty) && self.in_flight > 0))
        {
            let t = now + self.config.recheck;
            timeout = Some(timeout.map_or(t, |x| x.min(t)));
        }
        self.timeout = timeout;
        let mut leases = Vec::with_capacity(n);
        for chunk in items[1..1 + 3 * n].chunks(3) {
            let seq = as_u64(&chunk[0]).ok_or_else(|| protocol("poll", "seq"))?;
            let body = as_bytes(&chunk[1]).ok_or_else(|| protocol("poll", "body"))?;
            let key = as_bytes(&chunk[2])
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| protocol("poll", "group key"))?;
            let (body, key) = (body.to_vec(), key.to_string());
            leases.push(
                self.decode(seq, &body, &key)
                    .map(|request| Lease::new(RequestId(seq), request)),
            );
        }
        Ok((leases, why))
    }

    /// The request a [`poll`](Self::poll) at `now` would hand out, without leasing it.
    pub fn peek(&mut self, now: Timestamp) -> Result<Option<Request>> {
        let v = self.call_at("peek", Some(now), &[])?;
        let Value::Array(items) = v else {
            return Err(protocol("peek", "not an array"));
        };
        if items.is_empty() {
            return Ok(None);
        }
        let seq = as_u64(&items[0]).ok_or_else(|| protocol("peek", "seq"))?;
        let body = as_bytes(&items[1])
            .ok_or_else(|| protocol("peek", "body"))?
            .to_vec();
        let key = as_bytes(&items[2])
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(|| protocol("peek", "key"))?
            .to_string();
        self.decode(seq, &body, &key).map(Some)
    }

    pub(super) fn outcome_args(outcome: &Outcome<'_>) -> Result<[Vec<u8>; 3]> {
        Ok(match *outcome {
            Outcome::Response {
                status,
                header_delay,
                budget_reset,
                ..
            } => {
                let mut delay = header_delay.map_or("-1".to_string(), |d| nanos(d).to_string());
                if let Some(b) = budget_reset {
                    delay = format!("{delay}/{}", nanos(b));
                }
                [
                    b"s".to_vec(),
                    status.to_string().into_bytes(),
                    delay.into_bytes(),
                ]
            }
            Outcome::Error(kind) => [b"e".to_vec(), kind.as_bytes().to_vec(), Vec::new()],
            Outcome::Cancelled => [b"c".to_vec(), Vec::new(), Vec::new()],
            _ => {
                return Err(store_err(RedisStoreError::Unsupported(
                    "this kind of outcome",
                )));
            }
        })
    }

    /// Acknowledges a lease with how it ended: its scopes' slots are freed for every
    /// worker and the outcome feeds backoff. `false` for a lease that is unknown, already
    /// ended, or expired and delivered again.
    pub fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        let mut args = vec![lease.0.to_string().into_bytes()];
        args.extend(Self::outcome_args(outcome)?);
        let v = self.call_at("complete", Some(now), &args)?;
        let done = as_u64(&v) == Some(1);
        if done {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(done)
    }

    /// [`complete`](Self::complete)s many leases, each at its own time, in one round
    /// trip: one `bool` per lease, in order.
    ///
    /// The script has no batched completion yet, so this pipelines one `complete` call
    /// per lease: it saves the round trips and the client's per-call work, not the
    /// server's per-call overhead. Each completion is atomic on its own; a connection
    /// lost midway leaves a prefix applied (the others come back as expired leases).
    pub fn complete_batch(
        &mut self,
        done: &[(RequestId, Outcome<'_>, Timestamp)],
    ) -> Result<Vec<bool>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        // One script call for the batch: each completion at its own time, one write-back.
        let mut args = Vec::with_capacity(1 + 5 * done.len());
        args.push(done.len().to_string().into_bytes());
        for (lease, outcome, now) in done {
            args.push(lease.0.to_string().into_bytes());
            args.extend(Self::outcome_args(outcome)?);
            args.push(self.time_arg(*now));
        }
        let last = done.last().map_or(Timestamp::ZERO, |(_, _, t)| *t);
        let reply = self.call_at("complete_batch", Some(last), &args)?;
        let Value::Array(replies) = reply else {
            return Err(protocol("complete_batch", "expected an array"));
        };
        if replies.len() != done.len() {
            return Err(protocol("complete_batch", "wrong number of replies"));
        }
        let out: Vec<bool> = replies.iter().map(|v| as_u64(v) == Some(1)).collect();
        let ended = out.iter().filter(|&&d| d).count();
        self.in_flight = self.in_flight.saturating_sub(ended);
        Ok(out)
    }

    /// Hands back a lease that was never used (the task it was taken for went away), in
    /// one script call: its scope slots are freed and its request goes back in its place
    /// in the queue (its sequence number, ahead of what was queued after it). The send
    /// its poll recorded is kept: the scope's next request still waits its delay after
    /// it. Neither a retry nor a redelivery in the crawl's stats; the lease id is dead
    /// afterwards (the request gets a new one when polled again). `false` if the lease
    /// is no longer held.
    pub fn hand_back(&mut self, lease: RequestId, now: Timestamp) -> Result<bool> {
        let v = self.call_at("hand_back", Some(now), &[lease.0.to_string().into_bytes()])?;
        let done = as_u64(&v) == Some(1);
        if done {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(done)
    }

    /// Puts a lease back with its priority adjusted, after its outcome fed backoff.
    pub fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool> {
        let mut args = vec![lease.0.to_string().into_bytes()];
        args.extend(Self::outcome_args(outcome)?);
        args.push(priority_adjust.to_string().into_bytes());
        let v = self.call_at("retry", Some(now), &args)?;
        let done = as_u64(&v) == Some(1);
        if done {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(done)
    }

    /// Keeps a lease from expiring for another [`RedisConfig::lease_timeout`] (for
    /// requests that legitimately take long). `false` if it is no longer held.
    pub fn extend(&mut self, lease: RequestId, now: Timestamp) -> Result<bool> {
        let args = vec![
            lease.0.to_string().into_bytes(),
            nanos(self.config.lease_timeout).to_string().into_bytes(),
        ];
        let v = self.call_at("extend", Some(now), &args)?;
        Ok(as_u64(&v) == Some(1))
    }
}
