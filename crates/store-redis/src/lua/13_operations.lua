-- lua/13_operations.lua: the frontier's queue operations: push, too_deep, poll, peek,
-- complete, retry, extend. Mirrors crates/frontier-core/src/frontier.rs.
--
-- push BATCH: the requests of a batch, one after the other, each as PUSHFMT: its group
-- key, its scopes' kinds (per scope a kind digit, or N when configured by name), its
-- fingerprint (see dedup_check), priority, flags (1 start, 2 delayed), delay in
-- nanoseconds (when delayed), depth and body (flags byte and payload).
-- Returns per request: seq (queued) or -1 (duplicate).
local PUSHFMT = '>I4c0Hc0Bc0i4BdI4I4c0'
OPS.push = function(args)
  local blob = args[1] or ''
  -- F: 8 fields per request.
  local F, n, pos, len = {}, 0, 1, #blob
  local fps = {}
  -- The whole batch decoded under one pcall (a damaged one fails as a whole).
  local ok = pcall(function()
    while pos <= len do
      local key, kinds, fp, priority, flags, delay, depth, body, nxt =
        sunpack(PUSHFMT, blob, pos)
      if type(nxt) ~= 'number' then error('short') end
      local o = 8 * n
      F[o + 1], F[o + 2], F[o + 3], F[o + 4] = key, kinds, priority, flags
      F[o + 5], F[o + 6], F[o + 7] = delay, depth, body
      n = n + 1
      fps[n] = fp
      pos = nxt
    end
  end)
  if not ok then fail('CONFIG', 'push: a damaged batch') end
  local dup = dedup_check(fps, n)
  -- The records of the batch's groups and scopes, one HMGET per bucket.
  local names = {}
  for r = 1, n do
    if not dup[r] then
      local key = F[8 * r - 7]
      names[#names + 1] = key
      if string.find(key, '\n', 1, true) or string.find(key, '\t', 1, true) then
        for _, u in ipairs(uses_of(key)) do names[#names + 1] = u[1] end
      end
    end
  end
  prefetch_records(names)
  this_call.qpend, this_call.cpend = {}, {}
  local out = {}
  local filtered = 0
  for r = 1, n do
    if dup[r] then
      filtered = filtered + 1
      out[r] = -1
    else
      local o = 8 * (r - 1)
      local key, flags = F[o + 1], F[o + 4]
      group_for(key, F[o + 2])
      local seq = C.seq
      if seq >= SEQ_SPAN then fail('CONFIG', 'the crawl has used all 2^40 sequence numbers') end
      C.seq = seq + 1
      local nb = nil
      if flags % 4 >= 2 then nb = NOW + F[o + 5] end
      insert(key, seq, F[o + 7], F[o + 3], flags % 2 == 1, nb, NOW)
      C.enqueued = C.enqueued + 1
      local depth = F[o + 6]
      if depth > C.max_depth then C.max_depth = depth end
      out[r] = seq
    end
  end
  lib.pflush_all()
  lib.qflush_all()
  dedup_mark()
  if filtered > 0 then stat('filtered', filtered) end
  flush_all()
  return out
end

OPS.too_deep = function(args)
  stat('depth_ignored', tonumber(args[1]))
  return 1
end

-- poll LEASE_NS REDELIVER_LIMIT MAX: up to MAX leases, as polls one after the other at
-- the same instant would hand them out.
--   {n, (lease id, payload, group key) * n, kind, t, leases out, now, next expiry,
--    next event}
-- kind is why the last poll gave nothing: 'until' (t), 'blocked', 'empty', or 'more'
-- when MAX leases were handed out.
OPS.poll = function(args)
  local lease_ns, limit = tonumber(args[1]), tonumber(args[2])
  local max = tonumber(args[3] or '1') or 1
  -- The earliest expiry, read once: expired leases are looked for when it is due, and
  -- unless some were redelivered it gives the next expiry at the end.
  local lx = call('ZRANGE', KEY_EXPIRIES, '0', '0', 'WITHSCORES')
  local first_exp = -1
  if #lx > 0 then first_exp = tonumber(lx[2]) end
  if first_exp >= 0 and first_exp <= NOW then
    redeliver_expired(NOW, limit)
    first_exp = nil
  end
  evict_idle(clock_clamp(NOW), 2)
  local out = {0}
  local last, last_t = 'more', nil
  local exp = NOW + lease_ns
  -- The expiry and the sequence numbers go to Redis as %d text: the same digits Redis
  -- writes for an integer below 2^53, without its %.17g printf for each number.
  local exps = exp
  if exp > 0 and exp < 9007199254740992 and exp == floor(exp) then
    exps = string.format('%d', exp)
  end
  local lrec, lexp = {}, {}
  local n, nl, sfmt = 0, 0, string.format
  local nout = 1
  while n < max do
    local kind, key, _, counted, priority, _, seq, body = sched_poll(NOW, true, n > 0)
    if kind ~= 'ready' then
      last, last_t = kind, key
      break
    end
    local flags = sbyte(body, 1)
    local k = floor(flags / 4)
    local sseq = sfmt('%d', seq)
    lrec[nl + 1] = sseq
    lrec[nl + 2] = lease_pack(priority, flags % 2 == 1, floor(flags / 2) % 2 == 1, counted, k,
                              exp, key, body)
    lexp[nl + 1] = exps
    lexp[nl + 2] = sseq
    nl = nl + 2
    n = n + 1
    out[nout + 1] = seq + k * SEQ_SPAN
    out[nout + 2] = ssub(body, 2)
    out[nout + 3] = key
    nout = nout + 3
  end
  out[1] = n
  C.dequeued = C.dequeued + n
  C.leased = C.leased + n
  if #lrec > 0 then
    call_many('HSET', KEY_LEASES, lrec, 2000)
    call_many('ZADD', KEY_EXPIRIES, lexp, 2000)
  end
  flush_all()
  out[#out + 1] = last
  out[#out + 1] = num(last_t or -1)
  out[#out + 1] = call('HLEN', KEY_LEASES)
  out[#out + 1] = num(NOW)
  if not first_exp then
    first_exp = next_expiry()
  elseif #lexp > 0 and (first_exp < 0 or exp < first_exp) then
    first_exp = exp
  end
  out[#out + 1] = num(first_exp)
  out[#out + 1] = num(next_event_time())
  return out
end

-- peek: what poll would hand out now, without leasing it: {seq, payload, key} or {}.
OPS.peek = function(args)
  local kind, key = sched_poll(NOW, false)
  local out = {}
  if kind == 'peek' then
    local m = queue_head(group_of(key))
    if not m then fail('CORRUPT', 'group ' .. key .. ' counts requests but has none') end
    local _, _, seq, body = member_parts(m)
    out = {seq, ssub(body, 2), key}
  end
  flush_all()
  return out
end

-- The lease record of lease id ID, if it is still out under that id.
local function lease_of(id)
  local seq, k = lease_parts(id)
  local lease = lease_load(seq)
  if not lease or lease.redeliveries ~= k then return nil end
  return lease, seq
end
local function end_lease(seq)
  call('HDEL', KEY_LEASES, seq)
  call('ZREM', KEY_EXPIRIES, seq)
end

-- complete LEASE KIND A B: outcome kind 's' (status A, header delay ns B or -1),
-- 'e' (error kind A) or 'c' (cancelled). Returns 1, or 0 for an unknown lease.
OPS.complete = function(args)
  local lease, seq = lease_of(args[1])
  if not lease then return 0 end
  end_lease(seq)
  frontier_release(lease, decode_outcome(args[2], args[3], args[4]), NOW)
  C.acked = C.acked + 1
  flush_all()
  return 1
end

-- complete_batch N then N times LEASE KIND A B TIME: what complete does for each lease,
-- each at its own time (a number, or 'server'), with one write-back for the whole batch.
-- Returns the N results (1, or 0 for an unknown lease).
OPS.complete_batch = function(args)
  local n = tonumber(args[1])
  if not n or n < 0 or #args ~= 1 + 5 * n then
    fail('CONFIG', 'complete_batch: expected N then N times LEASE KIND A B TIME')
  end
  local out = {}
  for i = 0, n - 1 do
    local at = 2 + 5 * i
    local lease, seq = lease_of(args[at])
    if lease then
      NOW = read_now(args[at + 4])
      end_lease(seq)
      frontier_release(lease, decode_outcome(args[at + 1], args[at + 2], args[at + 3]), NOW)
      C.acked = C.acked + 1
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  flush_all()
  return out
end

-- retry LEASE KIND A B ADJUST: puts the lease back with its priority adjusted.
OPS.retry = function(args)
  local lease, seq = lease_of(args[1])
  if not lease then return 0 end
  end_lease(seq)
  local key, pk = lease.group_key, group_of(lease.group_key).param_keys
  frontier_release(lease, decode_outcome(args[2], args[3], args[4]), NOW)
  group_for(key, nil, pk)
  local new_seq = C.seq
  C.seq = new_seq + 1
  local priority = math.min(math.max(lease.priority + tonumber(args[5]), I32_MIN), I32_MAX)
  -- A new request: its redelivery count starts again.
  insert(key, new_seq, schar(sbyte(lease.body, 1) % 4) .. ssub(lease.body, 2), priority,
         lease.start, nil, NOW)
  C.retried = C.retried + 1
  C.enqueued = C.enqueued + 1
  flush_all()
  return 1
end

-- hand_back LEASE: a lease never used (its waiter left) goes back in its place in the
-- queue (its sequence number; its redelivery count bumped so the old id is dead), its
-- slots freed as cancelled. The send its poll recorded stays: spacing is never
-- shortened. Neither a retry nor a redelivery in the stats. Returns 1, or 0.
OPS.hand_back = function(args)
  local lease, seq = lease_of(args[1])
  if not lease then return 0 end
  end_lease(seq)
  lib.put_back(lease, seq, NOW)
  flush_all()
  return 1
end

-- extend LEASE LEASE_NS: pushes a lease's expiry to now + LEASE_NS (a heartbeat).
OPS.extend = function(args)
  local lease, seq = lease_of(args[1])
  if not lease then return 0 end
  lease.expiry = NOW + tonumber(args[2])
  call('HSET', KEY_LEASES, seq,
    lease_pack(lease.priority, lease.start, lease.dont_track, lease.counted,
               lease.redeliveries, lease.expiry, lease.group_key, lease.body))
  call('ZADD', KEY_EXPIRIES, lease.expiry, seq)
  return 1
end

