-- lua/15_permits.lua: standalone permits (processes without a queue), and the test
-- hooks; closes the `do` block 11_leases.lua opens. Mirrors
-- crates/throttle-core/src/throttler/permits.rs.
--
-- Permits taken by processes without a queue (Throttler::try_acquire / release on the
-- crawl's scope states). Records in "pm": id -> msgpack {s = the scope names (merged, in
-- the order the permit holds them), k = their kind digits} (short keys kept: stored);
-- expiry in "lx" beside the leases, as the member "p" .. id, so expired permits are found
-- where expired leases are. Ids come from the stat "permits" (issued). The helpers live
-- in `lib` (the main chunk is at Lua's 200 locals).

-- A scope a permit used: a scheduler scope's parked groups look again (a slot or the
-- send time may have changed), or, used by no group, its state waits in "ti" for idle
-- eviction, with its parameter key where eviction finds it.
function lib.pm_touch(name, kind, now, wake)
  local r = record(name)
  if r and r.s then
    if wake then rearm(name, now) end
  else
    local st = find_scope(name)
    if st then
      call('ZADD', KEY_IDLE, st.last_used, name)
      reg(name, kind)
    end
  end
end

-- Ends permit `id` with `outcome` (frees its slots, feeds backoff): false if unknown.
function lib.pm_end(id, outcome, now)
  local KPM = PREFIX .. 'pm'
  local raw = call('HGET', KPM, id)
  call('ZREM', KEY_EXPIRIES, 'p' .. id)
  if not raw then return false end
  call('HDEL', KPM, id)
  local ok, r = pcall(cmsgpack.unpack, raw)
  if not ok or type(r) ~= 'table' or type(r.s) ~= 'table' or type(r.k) ~= 'table' then
    fail('CORRUPT', KPM .. '[' .. id .. ']: bad permit record')
  end
  for i, name in ipairs(r.s) do params_of(name, r.k[i]) end
  release({scopes = r.s, counted = true}, outcome, now)
  for i, name in ipairs(r.s) do lib.pm_touch(name, r.k[i], now, true) end
  return true
end

-- Expired leases and permits, when the earliest expiry is due (at most LIMIT).
function lib.pm_expire(limit)
  local lx = call('ZRANGE', KEY_EXPIRIES, '0', '0', 'WITHSCORES')
  if #lx > 0 and tonumber(lx[2]) <= NOW then redeliver_expired(NOW, limit) end
end

-- permit_acquire LEASE_NS LIMIT (NAME KIND AMOUNT)... : takes a slot on every scope at
-- once, as Throttler::try_acquire: {'ok', id, now}, {'until', t, now} or
-- {'blocked', 0, now}.
OPS.permit_acquire = function(args)
  lib.pm_expire(tonumber(args[2]))
  evict_idle(clock_clamp(NOW), 2)
  local uses, kinds = {}, {}
  for i = 3, #args - 2, 3 do
    local name, kind = args[i], args[i + 1]
    local a = tonumber(args[i + 2])
    if not a then fail('CONFIG', 'bad amount ' .. tostring(args[i + 2])) end
    params_of(name, kind)
    uses[#uses + 1] = {name, a}
    if not kinds[name] then kinds[name] = kind end
  end
  local ok, why = try_acquire(uses, false, NOW)
  -- The scopes once each, in the order the permit holds them (as resolve_all merges).
  local names = {}
  for _, u in ipairs(uses) do
    if kinds[u[1]] then
      names[#names + 1] = u[1]
      kinds[#names] = kinds[u[1]]
      kinds[u[1]] = false
    end
  end
  local out
  if ok then
    local id = call('HINCRBY', KEY_STATS, 'permits', 1)
    local k = {}
    for i = 1, #names do k[i] = kinds[i] end
    call('HSET', PREFIX .. 'pm', id, cmsgpack.pack({s = names, k = k}))
    call('ZADD', KEY_EXPIRIES, NOW + tonumber(args[1]), 'p' .. id)
    out = {'ok', id, num(NOW)}
  elseif why == 'blocked' then
    out = {'blocked', 0, num(NOW)}
  else
    out = {'until', num(why), num(NOW)}
  end
  for i, name in ipairs(names) do lib.pm_touch(name, kinds[i], NOW, false) end
  flush_all()
  return out
end

-- permit_release ID KIND A B LIMIT: ends a standalone permit with its outcome (as
-- complete). 1, or 0 for a permit unknown, already released, or expired (past its
-- expiry it is freed as cancelled here, if nothing did it yet).
OPS.permit_release = function(args)
  local id = args[1]
  lib.pm_expire(tonumber(args[5]))
  local x = call('ZSCORE', KEY_EXPIRIES, 'p' .. id)
  local done = 0
  if x and tonumber(x) <= NOW then
    if lib.pm_end(id, {cancelled = true}, NOW) then stat('permits_expired', 1) end
  elseif lib.pm_end(id, decode_outcome(args[2], args[3], args[4]), NOW) then
    stat('permits_released', 1)
    done = 1
  end
  flush_all()
  return done
end

-- Test hooks: the exact conversions the port relies on.
OPS.debug_ns = function(args) return fmt(secs_to_ns(tonumber(args[1]))) end
OPS.debug_rng = function(args)
  load_counters()
  C.rng_hi, C.rng_lo = tonumber(args[1]), tonumber(args[2])
  local out = {}
  for i = 1, tonumber(args[3]) do out[i] = fmt(rng_next_f64()) end
  return out
end
end

